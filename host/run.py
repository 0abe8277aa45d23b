#!/usr/bin/env python3
"""Host program: make or load int4-AWQ weights, pack them, run the GEMM on NPU2 or the emulator, check.

    host/run.py --m 512 --k 1024 --n 256                     random weights, default configuration
    host/run.py --awq CKPT --layer model.layers.0.self_attn.q_proj --m 128
    host/run.py --awq CKPT --list-layers

Exit codes: 0 pass, 1 numerical failure (the failing figures are printed), 2 bad input, configuration
or environment (one line saying what and how to fix it).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

import numpy as np
from ml_dtypes import bfloat16

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from int4awq import record  # noqa: E402
from int4awq.design import DesignConfig, add_design_arguments, config_from_args  # noqa: E402
from int4awq.errors import ConfigError  # noqa: E402
from int4awq.quant import AwqWeights, dequantize, random_activations, random_weights  # noqa: E402
from int4awq.reference import check, check_activations, reference_gemm  # noqa: E402

EMULATOR_DIR = os.path.join(REPO, "emulator")
KERNEL_BUILD = os.path.join(REPO, "kernels", "build")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_design_arguments(p, shape_required=False)
    p.add_argument("--backend", choices=("auto", "npu", "emu"), default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--exact", action="store_true",
                   help="exact-mode operands: the only error left is C's bf16 rounding, checked tightly")
    p.add_argument("--awq", metavar="PATH", help="int4 checkpoint (AutoAWQ, GPTQ, compressed-tensors)")
    p.add_argument("--layer", help="with --awq: the linear layer to run")
    p.add_argument("--list-layers", action="store_true", help="with --awq: list its int4 layers and exit")
    p.add_argument("--decoder-layer", type=int, metavar="L",
                   help="with --awq: run all seven projections of decoder layer L, a line each")
    p.add_argument("--activations", metavar="A.npy", help="A [M, K] instead of random activations")
    p.add_argument("--save", metavar="DIR",
                   help="write a.npy [M, K], c.npy [M, N] (bf16 values as float32) and w_dequant.npy [K, N] float32")
    p.add_argument("--report", action="store_true", help="print traffic counters and the modelled NPU2 time")
    p.add_argument("--iters", type=int, default=10, help="timed NPU iterations (after --warmup)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--build-dir", help="where `make compile` put air.xclbin (default build/npu/<config>)")
    return p.parse_args(argv)


def load_inputs(args) -> tuple[np.ndarray, AwqWeights]:
    """(A [M, K] bf16, weights) from the options: a checkpoint layer or seeded random weights."""
    if args.awq:
        from int4awq.checkpoints import load_layer

        if not args.layer:
            raise ConfigError("--awq needs --layer NAME (see --list-layers)")
        if args.exact:
            raise ConfigError("--exact makes its own weights; it cannot be combined with --awq")
        w, report = load_layer(args.awq, args.layer)
        print(report.summary())
        if args.gs not in (None, w.gs):
            raise ConfigError(f"--gs {args.gs} differs from the checkpoint's group size {w.gs}")
        for name, given, real in (("--k", args.k, w.k), ("--n", args.n, w.n)):
            if given is not None and given != real:
                raise ConfigError(f"{name} {given} differs from layer {args.layer}'s {real}")
    else:
        if args.layer:
            raise ConfigError("--layer needs --awq PATH")
        if args.k is None or args.n is None:
            raise ConfigError("give --k and --n (or --awq PATH --layer NAME)")
        w = random_weights(args.k, args.n, 128 if args.gs is None else args.gs, args.seed, exact=args.exact)
    if args.activations:
        if args.exact:
            raise ConfigError("--exact makes its own activations; it cannot be combined with --activations")
        try:
            a = np.load(args.activations, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise ConfigError(f"--activations {args.activations}: cannot read ({e})") from None
        if a.dtype in (np.float32, np.float16, np.float64):
            a = a.astype(bfloat16)
        if args.m is not None and a.ndim == 2 and a.shape[0] != args.m:
            raise ConfigError(f"--m {args.m} differs from the {a.shape[0]} rows of {args.activations}")
    else:
        if args.m is None:
            raise ConfigError("give --m (rows of A) or --activations A.npy")
        a = random_activations(args.m, w.k, args.seed + 1, exact=args.exact)
    check_activations(a, w.k)
    return a, w


def pad_weights(w: AwqWeights, n: int) -> AwqWeights:
    """Zero columns up to n (q = z = 0, s = 1): they dequantise to 0 and their C columns are dropped."""
    extra = n - w.n
    if not extra:
        return w
    return AwqWeights(np.pad(w.q, ((0, 0), (0, extra))), np.pad(w.z, ((0, 0), (0, extra))),
                      np.pad(w.s, ((0, 0), (0, extra)), constant_values=bfloat16(1)), w.gs)


def padded_operands(cfg: DesignConfig, a: np.ndarray, w: AwqWeights) -> tuple[np.ndarray, np.ndarray]:
    """(A with zero rows up to cfg.m, W padded to cfg.n and packed into the kernel's records)."""
    a_padded = np.zeros((cfg.m, cfg.k), bfloat16)
    a_padded[: a.shape[0]] = a
    return a_padded, record.pack_weights(pad_weights(w, cfg.n), cfg.tile_n, cfg.tile_k_l1)


def choose_backend(requested: str, build_dir: str, quiet: bool = False) -> str:
    if requested != "auto":
        return requested
    from int4awq.npu import npu2_present

    found, why = npu2_present()
    if found:
        try:
            import pyxrt  # noqa: F401
        except ImportError:
            found, why = False, "an NPU2 is present but pyxrt is not importable (source XRT's setup.sh)"
    if found and not os.path.isfile(os.path.join(build_dir, "air.xclbin")):
        found, why = False, f"an NPU2 is present but {build_dir}/air.xclbin is missing (run `make compile`)"
    if not quiet:
        print(f"backend: {'npu' if found else 'emu'} ({why})")
    return "npu" if found else "emu"


def build_host_kernel(cfg: DesignConfig) -> None:
    """The emulator calls the kernel source built for x86-64 (same -D tile macros as for Peano)."""
    cmd = ["make", "-s", "-C", os.path.join(REPO, "kernels"), "host", f"DIM_M={cfg.tile_m}",
           f"DIM_N={cfg.tile_n}", f"DIM_K_CHUNK={cfg.tile_k_l1}", f"DIM_GS={cfg.gs}"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode:
        raise ConfigError(f"building the host kernel failed ({' '.join(cmd)}):\n{res.stdout}{res.stderr}")


def run_emulator(cfg: DesignConfig, a: np.ndarray, w_packed: np.ndarray, report: bool, quiet: bool) -> np.ndarray:
    sys.path.insert(0, EMULATOR_DIR)  # `import air` now resolves to the emulator
    from air.backend.xrt import XRTBackend
    from air.emu import EmulatorError

    from matmul_int4_packed import backend_options, build_module

    build_host_kernel(cfg)
    os.environ["AIR_EMU_LIB_PATH"] = KERNEL_BUILD
    backend = XRTBackend(**backend_options(cfg))
    try:
        invoke = backend.compile_and_load(build_module(cfg))
        if not quiet:
            print(backend.emu_budget.table())
        t0 = time.perf_counter()
        _, _, c = invoke(a, w_packed, np.zeros((cfg.m, cfg.n), bfloat16))
    except EmulatorError as e:
        first = str(e).splitlines()[0]
        if e.static:  # the design cannot be built for NPU2 as configured
            raise ConfigError(f"emulator: {first}") from None
        raise RunFailure(f"emulator: {first}") from None
    if not quiet:
        print(f"emulated in {time.perf_counter() - t0:.1f} s (CPU; not an NPU timing)")
    if report:
        print(backend.emu_stats.table())
    return np.asarray(c).reshape(cfg.m, cfg.n)


def run_npu(cfg: DesignConfig, a: np.ndarray, w_packed: np.ndarray, build_dir: str, iters: int, warmup: int):
    """(C, the timed iterations in us) on the NPU."""
    from int4awq.npu import run_xclbin

    c = np.zeros((cfg.m, cfg.n), bfloat16)
    try:
        res = run_xclbin(os.path.join(build_dir, "air.xclbin"), os.path.join(build_dir, "air.insts.bin"),
                         [a, w_packed, c], outputs=[2], iters=iters, warmup=warmup)
    except RuntimeError as e:
        raise RunFailure(str(e)) from None
    t = float(np.mean(res.times_us))
    print(f"NPU time: {t:.1f} us mean over {iters} iterations after {warmup} warm-up "
          f"(min {min(res.times_us):.1f}); {2 * cfg.m * cfg.k * cfg.n / t / 1e6:.3f} TOPS (padded shape)")
    return res.outputs[0], res.times_us


class RunFailure(Exception):
    """The run itself failed (device error, emulator run-time check): exit 1."""


def run_gemm(args, a: np.ndarray, w: AwqWeights, quiet: bool = False):
    """Configure, pack, run, check one GEMM: (configuration, CheckResult)."""
    m = a.shape[0]
    cfg, source = config_from_args(args, m, w.k, w.n, w.gs)
    padding = [f"{name} padded from {real}" for name, real, big in (("M", m, cfg.m), ("N", w.n, cfg.n)) if big != real]
    if not quiet:
        print(f"{cfg.summary()}  [{source}{'; ' + ', '.join(padding) if padding else ''}]")
    build_dir = args.build_dir or os.path.join(REPO, "build", "npu", cfg.name)
    backend = choose_backend(args.backend, build_dir, quiet)
    a_padded, w_packed = padded_operands(cfg, a, w)
    if backend == "emu":
        c = run_emulator(cfg, a_padded, w_packed, args.report, quiet)
    else:
        if not quiet:
            print(cfg.budget_report())
        c, _ = run_npu(cfg, a_padded, w_packed, build_dir, args.iters, args.warmup)
    if args.report:
        from int4awq.sweep import modelled

        est = modelled(cfg, m, w.n)
        print(f"modelled NPU2: DDR {est.ddr_bytes / 1e6:.2f} MB, {est.seconds * 1e6:.1f} us, "
              f"{est.tops:.3f} TOPS, {est.bound}-bound (MODELLED, int4awq/model.py; not measured)")
    c = c[:m, : w.n]
    if args.save:
        os.makedirs(args.save, exist_ok=True)
        # bf16 values widened to float32 (exact), so plain numpy loads them without ml_dtypes.
        np.save(os.path.join(args.save, "a.npy"), a.astype(np.float32))
        np.save(os.path.join(args.save, "c.npy"), c.astype(np.float32))
        np.save(os.path.join(args.save, "w_dequant.npy"), dequantize(w))
    return cfg, check(c, reference_gemm(a, w)[0], exact=args.exact)


DECODER_PROJECTIONS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                       "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def run_decoder_layer(args) -> bool:
    """All seven projections of one decoder layer of a checkpoint, a line each; True if all pass."""
    from int4awq.checkpoints import load_layer

    if args.m is None:
        raise ConfigError("--decoder-layer needs --m (rows of A)")
    ok = True
    for proj in DECODER_PROJECTIONS:
        name = f"model.layers.{args.decoder_layer}.{proj}"
        w, _ = load_layer(args.awq, name)
        a = random_activations(args.m, w.k, args.seed + 1)
        t0 = time.perf_counter()
        cfg, res = run_gemm(args, a, w, quiet=True)
        ok &= res.passed
        print(f"{name:<34} K={w.k:<5} N={w.n:<5} tiles {cfg.tile_m}x{cfg.tile_n}x{cfg.tile_k_l1} herd "
              f"{cfg.herd_m}x{cfg.herd_n}  {time.perf_counter() - t0:6.1f} s  corr {res.correlation:.6f}  "
              f"mean rel L1 {res.mean_rel_l1:.2e}  {'PASS' if res.passed else 'FAIL'}")
    print("PASS!" if ok else "FAIL!")
    return ok


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        if args.iters < 1 or args.warmup < 0:
            raise ConfigError(f"--iters {args.iters} / --warmup {args.warmup}: need iters >= 1, warmup >= 0")
        if (args.list_layers or args.decoder_layer is not None) and not args.awq:
            raise ConfigError("--list-layers and --decoder-layer need --awq PATH")
        if args.list_layers:
            from int4awq.checkpoints import list_layers

            for info in list_layers(args.awq):
                print(f"{info.name}  {info.format}  K={info.in_features} N={info.out_features} GS={info.group_size}")
            return 0
        if args.decoder_layer is not None:
            return 0 if run_decoder_layer(args) else 1
        a, w = load_inputs(args)
        _, result = run_gemm(args, a, w)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except RunFailure as e:
        print(f"run failed: {e}\nFAIL!")
        return 1
    print(result.report())
    return 0 if result.passed else 1


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the output quietly
    sys.exit(main())
