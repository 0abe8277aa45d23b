#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Host program: make or load int4-AWQ weights, pack them, run the GEMM on NPU2 or the emulator, check.

    host/run.py --m 512 --k 1024 --n 256                     random weights, default configuration
    host/run.py --weights CKPT --layer model.layers.0.self_attn.q_proj --m 128
    host/run.py --weights CKPT --list-layers

Exit codes: 0 pass, 1 numerical failure (the failing figures are printed), 2 bad input, configuration
or environment (one line saying what and how to fix it), 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import tempfile
import textwrap
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from int4awq.errors import (  # noqa: E402  (standard library only)
    ConfigError,
    RunFailure,
    command_exit,
    emulator_failure,
    missing_module_line,
)

try:
    import numpy as np
    from ml_dtypes import bfloat16

    from int4awq.kernel import record
    from int4awq.design import compiler, gemv
    from int4awq.design.design import (
        DesignConfig,
        add_design_arguments,
        build_host_kernel,
        default_gs,
    )
    from int4awq.formats.weights_file import random_format_weights
    from int4awq.design.sweep import config_from_args
    from int4awq.design.gemv import GEMV_AUTO_MAX_M, GemvConfig
    from int4awq.kernel.kernel_model import GEMV_MAX_M
    from int4awq.formats.quant import AwqWeights, dequantize, random_activations
    from int4awq.run.reference import (
        BF16_MAX,
        check,
        check_accumulator_range,
        check_activations,
        explain_failure,
        reference_gemm,
    )
except ModuleNotFoundError as _missing:
    print(missing_module_line(_missing), file=sys.stderr)
    sys.exit(2)
except KeyboardInterrupt:
    sys.exit(130)

EMULATOR_DIR = os.path.join(REPO, "emulator")
KERNEL_BUILD = os.path.join(REPO, "kernels", "build")
REPORT_WIDTH = 100  # every line --report prints fits in this many columns
HEARTBEAT_SECONDS = (
    30.0  # off a terminal, a line this often while the emulator runs (CI logs)
)
SAVED = ("a.npy", "c.npy", "w_dequant.npy")


class _Parser(argparse.ArgumentParser):
    """Usage mistakes are bad input like any other: one line, exit 2 (main prints it)."""

    def error(self, message):
        raise ConfigError(f"{message} (see --help)")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(description=__doc__.splitlines()[0])
    add_design_arguments(p, shape_required=False)
    p.add_argument(
        "--design",
        choices=("auto", "gemm", "gemv"),
        default="auto",
        help=f"gemv: the decode design (matvec_int4_packed.py, M <= {GEMV_MAX_M}, all 32 PEs); gemm: "
        f"matmul_int4_packed.py; auto (default): gemv for M <= {GEMV_AUTO_MAX_M} unless a GEMM-only "
        "option is given",
    )
    p.add_argument(
        "--backend",
        choices=("auto", "npu", "emu", "sim"),
        default="auto",
        help="npu: NPU2 through XRT (needs `make compile`'s air.xclbin); emu: the CPU emulator; sim: the "
        "simulator of the design aircc + aiecc compile (needs the compiler); auto (default): npu when "
        "an NPU2, pyxrt and the xclbin are all present, else emu",
    )
    p.add_argument(
        "--trace",
        metavar="FILE.json",
        help="with --backend sim: write the simulated timeline (MODELLED) as a Chrome / Perfetto trace",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="random weights are seeded with SEED, random activations with SEED + 1 (default 0); with "
        "--backend sim, also the schedules: seeds SEED, SEED + 1, ... (see --schedules)",
    )
    p.add_argument(
        "--schedules",
        type=int,
        metavar="N",
        help=f"with --backend sim: simulate under N seeded schedules (the order of the agents ready at "
        f"one time and the pieces each transfer moves in, drawn from seeds SEED .. SEED + N - 1) and "
        f"require the same C from each (default {SIM_SCHEDULES})",
    )
    p.add_argument(
        "--dispatches",
        type=int,
        metavar="N",
        help=f"with --backend sim: run the instruction stream N times on the same array (the cores go on "
        f"in their loops; locks, buffers and BD registers carry over; the host buffers written again "
        f"before each) and check each dispatch's C (default {SIM_DISPATCHES})",
    )
    p.add_argument(
        "--exact",
        action="store_true",
        help="exact-mode operands: the only error left is C's bf16 rounding, checked tightly",
    )
    p.add_argument(
        "--weights",
        "--awq",
        dest="awq",
        metavar="PATH",
        help="a weights file: an int4 checkpoint (AutoAWQ, GPTQ, compressed-tensors pack-quantized), an "
        "MXFP4 checkpoint (compressed-tensors mxfp4-pack-quantized, gpt-oss) or a .gguf file (its MXFP4 "
        "and Q4_0 tensors); the file decides the format, except that --format awq_f16 keeps an int4 "
        "checkpoint's fp16 scales exactly (a --format the file cannot give is refused)",
    )
    p.add_argument(
        "--layer",
        help="with --weights: the linear layer to run; lm_head: the model's LM head, however the file holds "
        "it (GGUF output.weight or the tied token_embd.weight; a checkpoint's lm_head or tied embed_tokens)",
    )
    p.add_argument(
        "--expert",
        type=int,
        metavar="E",
        help="with a gpt-oss expert tensor as --layer: the expert whose projection to run",
    )
    p.add_argument(
        "--list-layers",
        action="store_true",
        help="with --weights: a table of its layers (type, K and N, whether each runs or why not) and "
        "exit",
    )
    p.add_argument(
        "--decoder-layer",
        type=int,
        metavar="L",
        help="with --weights: run all seven projections of decoder layer L, a line each",
    )
    p.add_argument(
        "--fused",
        action="store_true",
        help="with --decoder-layer: q, k and v as one GEMV (or GEMM) and gate and up as one, fused along N "
        "at load time (parts of different types, as a Q4_K_M file's Q6_K attn_v, run apart); each "
        "projection checked against its own reference",
    )
    p.add_argument(
        "--layer-module",
        action="store_true",
        help="with --decoder-layer: the layer's attention-free part at decode as one module of seven "
        "launches (o_gemv_ffn_int4.py: o_proj, residual, RMSNorm, gate and up fused, SwiGLU, down, residual), "
        "the attention from the host's reference at position 0, checked against a float reference of the layer",
    )
    p.add_argument(
        "--next-qkv",
        action="store_true",
        help="with --layer-module: the module also computes the next layer's attention RMSNorm and its q, k, "
        "v GEMVs (fused where the file's types allow), and rotates q and k (RoPE, the file's parameters), so "
        "a token needs one dispatch a layer plus one",
    )
    p.add_argument(
        "--head",
        action="store_true",
        help="with --layer-module: the module ends with the model's final RMSNorm and its LM head (the last "
        "layer's dispatch gives the logits; the head as --layer lm_head reads it)",
    )
    p.add_argument(
        "--head-format",
        choices=["awq"],
        default=None,
        help="with --layer lm_head: a float LM head quantised at load to AWQ int4 g128 (the rounding is "
        "reported); default: the head in the file's own format, a float one refused",
    )
    p.add_argument(
        "--position",
        type=int,
        default=None,
        metavar="P",
        help="with --next-qkv: the token's position, whose rotation RoPE applies (default 0: none)",
    )
    p.add_argument(
        "--activations",
        metavar="A.npy",
        help="A [M, K] instead of random activations (.npy: bfloat16, float16, float32 or float64)",
    )
    p.add_argument(
        "--save",
        metavar="DIR",
        help="write a.npy [M, K], c.npy [M, N] (bf16 values as float32) and w_dequant.npy [K, N] float32",
    )
    p.add_argument(
        "--no-compile",
        action="store_true",
        help="emulate without compiling the design with aircc + aiecc first (by default a run compiles "
        "it where the compiler is installed, and stops with the compiler's first error)",
    )
    p.add_argument(
        "--report",
        action="store_true",
        help="after the result: memory budgets, traffic counters and the modelled NPU2 time",
    )
    p.add_argument(
        "--iters",
        type=int,
        default=10,
        help="timed NPU iterations, after --warmup (default 10; the emulator runs once)",
    )
    p.add_argument(
        "--warmup",
        type=int,
        default=3,
        help="untimed NPU iterations before the timed ones (default 3; the emulator runs once)",
    )
    p.add_argument(
        "--build-dir",
        help="where `make compile` put air.xclbin (default build/npu/<config>)",
    )
    p.add_argument(
        "-p",
        "--print-module-only",
        action="store_true",
        help="print the AIR module of the run's configuration and stop (make print)",
    )
    p.add_argument(
        "--print-resources",
        action="store_true",
        help="print the DMA channels, BDs, locks and memtile space the configuration needs on NPU2 "
        "(the emulator's model of aircc's lowering) and stop; exit 2 if over a limit",
    )
    p.add_argument(
        "--compile-only",
        action="store_true",
        help="compile the configuration with aircc for npu2 into --build-dir and stop (make compile)",
    )
    p.set_defaults(format=None)  # None: not given (the file decides; see parse_args)
    return p


def parse_args(argv):
    args = build_parser().parse_args(argv)
    # format_given: --format as given (None: the file decides); format: the record format to use
    args.format_given, args.format = args.format, args.format or "awq"
    return args


# ------------------------------------------------------------------------------------------ option checks
def check_options(args) -> None:
    """Every rule between options, before anything is loaded or run."""
    if args.iters < 1 or args.warmup < 0:
        raise ConfigError(
            f"--iters {args.iters} / --warmup {args.warmup}: need iters >= 1, warmup >= 0"
        )
    if args.seed < 0:
        raise ConfigError(f"--seed {args.seed}: must be a non-negative integer")
    if args.schedules is not None and (args.backend != "sim" or args.schedules < 1):
        raise ConfigError(
            f"--schedules {args.schedules}: a number of seeded schedules (>= 1) for --backend sim"
        )
    if args.dispatches is not None and (args.backend != "sim" or args.dispatches < 1):
        raise ConfigError(
            f"--dispatches {args.dispatches}: a number of dispatches (>= 1) for --backend sim"
        )
    if args.trace is not None and args.backend != "sim":
        raise ConfigError(
            "--trace writes the simulator's timeline: give it with --backend sim"
        )
    if args.backend == "sim" and args.no_compile:
        raise ConfigError(
            "--backend sim runs the design the compiler writes: it cannot take --no-compile"
        )
    if args.awq == "":
        raise ConfigError(
            "--weights: the path is empty (give a checkpoint directory, a .safetensors file or a .gguf "
            "file)"
        )
    if (args.list_layers or args.decoder_layer is not None) and args.awq is None:
        raise ConfigError("--list-layers and --decoder-layer need --weights PATH")
    if args.expert is not None and (args.awq is None or args.layer is None):
        raise ConfigError(
            "--expert needs --weights PATH --layer NAME (a gpt-oss expert tensor)"
        )
    if args.format == "mxfp4":
        if args.gs not in (None, 32):
            raise ConfigError(
                f"--format mxfp4: its scales cover 32 values along K, not --gs {args.gs}"
            )
    if args.list_layers:
        given = [
            opt
            for opt, on in (
                ("--layer", args.layer is not None),
                ("--decoder-layer", args.decoder_layer is not None),
                (f"--format {args.format_given}", args.format_given is not None),
            )
            if on
        ]
        if given:
            raise ConfigError(
                f"--list-layers lists the layers and exits; it cannot be combined with {given[0]}"
            )
    if args.fused and args.decoder_layer is None:
        raise ConfigError(
            "--fused fuses a decoder layer's projections: it needs --weights PATH --decoder-layer L"
        )
    if args.layer_module and args.decoder_layer is None:
        raise ConfigError(
            "--layer-module runs a decoder layer's o_proj and FFN: it needs --weights PATH --decoder-layer L"
        )
    if args.next_qkv and not args.layer_module:
        raise ConfigError(
            "--next-qkv extends the decoder layer module: it needs --decoder-layer L --layer-module"
        )
    if args.head_format is not None and args.layer != "lm_head" and not args.head:
        raise ConfigError(
            "--head-format quantises the LM head: it needs --weights PATH --layer lm_head, or --head"
        )
    if args.head and (not args.layer_module or args.next_qkv):
        raise ConfigError(
            "--head ends the last layer's module with the LM head: it needs --layer-module, without --next-qkv"
        )
    if args.position is not None and (not args.next_qkv or args.position < 0):
        raise ConfigError(
            f"--position {args.position}: a non-negative position, with --next-qkv (the q and k it rotates)"
        )
    if args.layer_module and (args.fused or args.m not in (None, 1)):
        what = "--fused" if args.fused else f"--m {args.m}"
        raise ConfigError(
            f"--layer-module runs one token (M = 1) with gate and up fused; it cannot be combined with {what}"
        )
    if args.decoder_layer is not None:
        if args.decoder_layer < 0:
            raise ConfigError(
                f"--decoder-layer {args.decoder_layer}: must be a non-negative layer index"
            )
        clash = [
            opt
            for opt, on in (
                ("--layer", args.layer is not None),
                ("--activations", args.activations is not None),
                ("--exact", args.exact),
                ("--save", args.save is not None),
                ("--report", args.report),
                ("--k", args.k is not None),
                ("--n", args.n is not None),
                ("--gs", args.gs is not None),
            )
            if on
        ]
        if clash:
            raise ConfigError(
                f"--decoder-layer runs each projection with its own K, N and GS and random A, a line"
                f" each; it cannot be combined with {clash[0]}"
            )
    if args.save is not None:
        prepare_save(args.save)


def prepare_save(path: str) -> None:
    """Make the --save directory and prove it writable now, not after the run."""
    if not path:
        raise ConfigError("--save: the path is empty")
    try:
        os.makedirs(path, exist_ok=True)
    except FileExistsError:
        raise ConfigError(f"--save {path}: exists and is not a directory") from None
    except NotADirectoryError:
        raise ConfigError(
            f"--save {path}: a parent of it is a file, not a directory"
        ) from None
    except OSError as e:
        raise ConfigError(
            f"--save {path}: cannot create the directory ({e.strerror})"
        ) from None
    for name in SAVED:
        if os.path.isdir(os.path.join(path, name)):
            raise ConfigError(
                f"--save {path}: {name} there is a directory; it would be overwritten by a file"
            )
    try:
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-test-"):
            pass
    except OSError as e:
        raise ConfigError(f"--save {path}: cannot write there ({e.strerror})") from None


def save_outputs(path: str, a: np.ndarray, c: np.ndarray, w: AwqWeights) -> None:
    # bf16 values widened to float32 (exact), so plain numpy loads them without ml_dtypes.
    try:
        for name, arr in zip(
            SAVED, (a.astype(np.float32), c.astype(np.float32), dequantize(w))
        ):
            np.save(os.path.join(path, name), arr)
    except OSError as e:
        raise ConfigError(f"--save {path}: writing failed ({e.strerror})") from None


def available_memory() -> int | None:
    """Bytes of memory the host can still give (MemAvailable), or None when unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def host_bytes(m: int, k: int, n: int) -> int:
    """About the peak host memory of one run: A (f32, bf16, padded, f64 for the reference), W while it is
    made (f32 intermediates, codes) and dequantised (f32, f64), and C (f64, f32, bf16, the device's).
    """
    return 16 * m * k + 24 * k * n + 20 * m * n


def check_host_memory(m: int, k: int, n: int) -> None:
    if min(m, k, n) <= 0:
        return  # the shape checks name the bad dimension
    need, have = host_bytes(m, k, n), available_memory()
    if have is not None and need > have:
        raise ConfigError(
            f"M={m} K={k} N={n} needs about {need / 2**30:.3g} GiB of host memory for the operands, "
            f"the reference and C; {have / 2**30:.3g} GiB is available: use smaller sizes"
        )


# ------------------------------------------------------------------------------------------ inputs
ACCEPTED_DTYPES = (
    "bfloat16 (ml_dtypes, stored by np.save as |V2), float16, float32 or float64"
)


def load_activations(path: str) -> np.ndarray:
    """A from a .npy file as bf16, or ConfigError saying what the file is and what is accepted."""
    what = f"--activations {path}"
    try:
        with open(path, "rb") as f:
            head = f.read(6)
    except OSError as e:
        raise ConfigError(f"{what}: cannot read ({e.strerror})") from None
    if head.startswith(b"PK\x03\x04"):
        raise ConfigError(
            f"{what}: an .npz archive; give one array A [M, K] saved with np.save (.npy)"
        )
    if head != b"\x93NUMPY":
        raise ConfigError(
            f"{what}: not a .npy file (np.save's format); give A [M, K] saved with np.save"
        )
    try:
        a = np.load(path, allow_pickle=False)
    except ValueError as e:
        if "pickle" in str(e):
            raise ConfigError(
                f"{what}: holds Python objects (an object array); give a numeric array, "
                f"{ACCEPTED_DTYPES}"
            ) from None
        raise ConfigError(f"{what}: cannot read ({str(e).splitlines()[0]})") from None
    except (OSError, EOFError) as e:
        raise ConfigError(f"{what}: cannot read ({e})") from None
    if (
        a.dtype.kind == "V"
        and a.dtype.itemsize == 2
        and a.dtype.names is None
        and a.dtype.subdtype is None
    ):
        a = a.view(bfloat16)  # np.save stores ml_dtypes' bfloat16 as a 2-byte void
    elif a.dtype == bfloat16:
        pass
    elif a.dtype.kind == "f" and a.dtype.itemsize in (2, 4, 8):
        a = a.astype(a.dtype.newbyteorder("="))  # any byte order
        a64 = a.astype(np.float64)
        bad = np.argwhere(~np.isfinite(a64))
        if bad.size:
            raise ConfigError(
                f"{what}: A{bad[0].tolist()} = {a64[tuple(bad[0])]}: contains NaN or Inf"
            )
        big = float(np.max(np.abs(a64), initial=0.0))
        with np.errstate(over="ignore"):
            a = a.astype(bfloat16)
        if big > BF16_MAX or not np.isfinite(a.astype(np.float32)).all():
            raise ConfigError(
                f"{what}: values up to {big:.4g} exceed bfloat16's range (max {BF16_MAX:.4g})"
            )
    else:
        raise ConfigError(f"{what}: dtype {a.dtype}, expected {ACCEPTED_DTYPES}")
    if a.ndim != 2:
        raise ConfigError(f"{what}: shape {a.shape}, expected 2 dimensions [M, K]")
    return a


def load_inputs(args) -> tuple[np.ndarray, AwqWeights]:
    """(A [M, K] bf16, weights) from the options: a checkpoint layer or seeded random weights."""
    if args.awq is not None:
        from int4awq.formats.weights_file import HEAD, load, load_head

        if not args.layer:
            raise ConfigError("--weights needs --layer NAME (see --list-layers)")
        if args.exact:
            raise ConfigError(
                "--exact makes its own weights; it cannot be combined with --weights"
            )
        if (
            args.layer == HEAD and args.expert is None
        ):  # the LM head, as the file holds it
            w, summary, args.float_head = load_head(
                args.awq, args.head_format, args.format_given
            )
        else:
            w, summary = load(
                args.awq, args.layer, fmt=args.format_given, expert=args.expert
            )
        args.format = w.format  # the file's format decides
        print(summary)
        if args.gs not in (None, w.gs):
            raise ConfigError(
                f"--gs {args.gs} differs from the checkpoint's group size {w.gs}"
            )
        for name, given, real in (("--k", args.k, w.k), ("--n", args.n, w.n)):
            if given is not None and given != real:
                raise ConfigError(
                    f"{name} {given} differs from layer {args.layer}'s {real}"
                )
    else:
        if args.layer is not None:
            raise ConfigError("--layer needs --weights PATH")
        if args.k is None or args.n is None:
            raise ConfigError("give --k and --n (or --weights PATH --layer NAME)")
        check_host_memory(args.m or 1, args.k, args.n)
        w = random_format_weights(
            args.format, args.k, args.n, default_gs(args), args.seed, args.exact
        )
    if args.activations is not None:
        if args.exact:
            raise ConfigError(
                "--exact makes its own activations; it cannot be combined with --activations"
            )
        a = load_activations(args.activations)
        if args.m is not None and a.shape[0] != args.m:
            raise ConfigError(
                f"--m {args.m} differs from the {a.shape[0]} rows of {args.activations}"
            )
    else:
        if args.m is None:
            raise ConfigError("give --m (rows of A) or --activations A.npy")
        check_host_memory(args.m, w.k, w.n)
        a = random_activations(args.m, w.k, args.seed + 1, exact=args.exact)
    check_activations(a, w.k)
    check_host_memory(a.shape[0], w.k, w.n)
    return a, w


# ------------------------------------------------------------------------------------------ backends
def choose_backend(requested: str, build_dir: str, quiet: bool = False) -> str:
    if requested != "auto":
        return requested
    from int4awq.run.npu import npu2_present

    found, why = npu2_present()
    if found:
        try:
            import pyxrt  # noqa: F401
        except ImportError:
            found, why = (
                False,
                "an NPU2 is present but pyxrt is not importable (source XRT's setup.sh)",
            )
    if (
        found
        and build_dir
        and not os.path.isfile(os.path.join(build_dir, "air.xclbin"))
    ):
        found, why = (
            False,
            f"an NPU2 is present but {build_dir}/air.xclbin is missing (run `make compile`)",
        )
    if not quiet:
        print(f"backend: {'npu' if found else 'emu'} ({why})")
    return "npu" if found else "emu"


class _Heartbeat:
    """Off a terminal (CI logs), a line on stderr every HEARTBEAT_SECONDS while a long step runs; on a
    terminal the emulator's own progress line does this."""

    def __init__(self, what: str):
        self.what, self.stop = what, threading.Event()
        self.thread = None

    def __enter__(self):
        if not sys.stderr.isatty():
            self.t0 = time.monotonic()
            self.thread = threading.Thread(target=self._run, daemon=True)
            self.thread.start()
        return self

    def _run(self):
        while not self.stop.wait(HEARTBEAT_SECONDS):
            print(
                f"[host/run.py] still {self.what}: {time.monotonic() - self.t0:.0f} s",
                file=sys.stderr,
                flush=True,
            )

    def __exit__(self, *exc):
        self.stop.set()
        if self.thread is not None:
            self.thread.join()


def builder_of(cfg):
    """The builder module of a configuration: matvec_int4_packed (GEMV) or matmul_int4_packed (GEMM)."""
    if isinstance(cfg, GemvConfig):
        import matvec_int4_packed as builder
    else:
        import matmul_int4_packed as builder
    return builder


def emulator_backend(cfg):
    """An XRTBackend of the emulator for cfg's design, its kernel built for the host and findable."""
    sys.path.insert(0, EMULATOR_DIR)  # `import air` now resolves to the emulator
    from air.backend.xrt import XRTBackend

    os.environ["AIR_EMU_LIB_PATH"] = build_host_kernel(cfg)  # int4awq.design.design
    return XRTBackend(**builder_of(cfg).backend_options(cfg))


def compile_design(cfg, module, quiet: bool) -> str | None:
    """aircc + aiecc on the design's module, where they are installed (compiler.compile_before_run)."""
    return compiler.compile_before_run(
        cfg.name, str(module), builder_of(cfg).backend_options(cfg), quiet
    )


# seeded schedules a --backend sim run simulates by default (issue 51: at least 3)
SIM_SCHEDULES = 3
# dispatches of the instruction stream a --backend sim run simulates on one array by default (issue 51)
SIM_DISPATCHES = 2


def run_sim(
    cfg,
    a: np.ndarray,
    w_packed: np.ndarray,
    quiet: bool,
    trace: str | None = None,
    seeds=(0,),
    dispatches: int = SIM_DISPATCHES,
):
    """C from the simulator of the compiled design (emulator/aiesim): the design aircc + aiecc place and
    route, with the kernel built on the host on its cores, in the deterministic order (timed: its time and
    trace are reported) and under each seeded schedule of `seeds`, each running the instruction stream
    `dispatches` times on one array. trace: write the timeline there (Chrome / Perfetto JSON). A hang, a
    race, words left behind, or a C that differs between schedules or between dispatches is a failed run
    (exit 1) with the simulator's report; the C returned (the first dispatch's in the deterministic order,
    which every other equals bit for bit) is then checked against the reference by the caller.
    """
    emulator_backend(cfg)  # the emulator's air package and the host kernel library
    module = builder_of(cfg).build_module(**cfg.builder_args())
    outdir = compile_design(cfg, module, quiet)
    import aiesim

    from int4awq.run import sim_costs

    t0 = time.perf_counter()
    with _Heartbeat("simulating"):
        # the timed run keeps the one deterministic order (whole transfers): the time bench reports
        runs = [
            sim_costs.simulate_compiled(
                outdir,
                cfg.call_buffers(a, w_packed),
                sim_costs.costs(cfg) if seed is None else None,
                trace=trace is not None and seed is None,
                seed=seed,
                dispatches=dispatches,
            )
            for seed in [None, *seeds]
        ]
    _, sim = runs[0]
    c = np.asarray(sim.dispatch_outputs[0][2])
    first = c.view(np.uint8).reshape(-1)
    hazards = []
    for seed, (_, other_sim) in zip([None, *seeds], runs):
        for k, other in enumerate(other_sim.dispatch_outputs, 1):
            got = np.asarray(other[2]).view(np.uint8).reshape(-1)
            if not np.array_equal(first, got):
                schedule = "the deterministic order" if seed is None else f"seed {seed}"
                raise RunFailure(
                    f"the compiled design's C differs: dispatch {k} of {dispatches} under {schedule} "
                    f"gives {int((first != got).sum())} of {first.size} bytes other than the first "
                    f"dispatch in the deterministic order"
                )
        hazards += [h for h in aiesim.hazards(other_sim) if h not in hazards]
    if trace is not None:
        sim_costs.write_trace(sim, trace)
    if not quiet:
        stream = sim.stream_file or "the dialect-level runtime sequence"
        print(
            f"simulated: {os.path.relpath(stream, REPO) if os.path.isabs(stream) else stream}, "
            f"{dispatches} dispatch{'es' if dispatches > 1 else ''}, seeds "
            f"{', '.join(map(str, seeds))} and the deterministic order (timed)"
        )
        print(
            f"simulated the compiled design in {time.perf_counter() - t0:.1f} s (CPU): "
            f"{sim_costs.timed_line(cfg, sim)}"
        )
        print(
            f"schedules: the deterministic order (timed) and {len(seeds)} seeded (seeds {seeds[0]}.."
            f"{seeds[-1]}), the same C from each"
            f"{f', on each of {dispatches} dispatches' if dispatches > 1 else ''}; no race, nothing "
            f"left behind"
        )
    for note in hazards:
        print(f"HAZARD (a latent race, not a failure in this run): {note}")
    return c.reshape(cfg.m, cfg.n)


def run_emulator(
    cfg: DesignConfig,
    a: np.ndarray,
    w_packed: np.ndarray,
    report,
    quiet: bool,
    compile_first: bool = True,
) -> np.ndarray:
    """C from the emulator. report: a dict to receive the emulator's "budget", "resources" and "stats"
    (or falsy). compile_first: aircc + aiecc compile the design first, where they are installed, and
    what they refuse is refused (ConfigError, exit 2) before anything is emulated."""
    backend = emulator_backend(cfg)
    from air.emu import EmulatorError

    module = builder_of(cfg).build_module(**cfg.builder_args())
    if compile_first:
        compile_design(cfg, module, quiet)
    try:
        invoke = backend.compile_and_load(module)
        if isinstance(report, dict):
            report["budget"] = backend.emu_budget
            report["resources"] = backend.emu_resources
        t0 = time.perf_counter()
        with _Heartbeat("emulating"):
            c = invoke(*cfg.call_buffers(a, w_packed))[2]
    except EmulatorError as e:
        raise emulator_failure(e) from None
    if not quiet:
        print(f"emulated in {time.perf_counter() - t0:.1f} s (CPU; not an NPU timing)")
    if isinstance(report, dict):
        report["stats"] = backend.emu_stats
    return np.asarray(c).reshape(cfg.m, cfg.n)


def run_npu(
    cfg: DesignConfig,
    a: np.ndarray,
    w_packed: np.ndarray,
    build_dir: str,
    iters: int,
    warmup: int,
):
    """(C, [mean us]) on the NPU, through mlir-air's XRTBackend (int4awq.run.npu.run_compiled)."""
    from int4awq.run.npu import run_compiled

    try:
        res = run_compiled(
            build_dir,
            cfg.call_buffers(a, w_packed),
            output=2,
            iters=iters,
            warmup=warmup,
        )
    except RuntimeError as e:
        raise RunFailure(str(e)) from None
    t = res.mean_us
    print(
        f"NPU time: {t:.1f} us mean over {iters} iterations after {warmup} warm-up (mlir-air XRTBackend); "
        f"{2 * cfg.m * cfg.k * cfg.n / t / 1e6:.3f} TOPS (padded shape)"
    )
    return np.asarray(res.output).reshape(cfg.m, cfg.n), [t]


# ------------------------------------------------------------------------------------------ report
def _fit(line: str, width: int = REPORT_WIDTH, indent: str = "    ") -> list[str]:
    """A line as it fits in `width` columns: wrapped at spaces, continuation lines indented."""
    if len(line) <= width:
        return [line]
    lead = line[: len(line) - len(line.lstrip())]
    return textwrap.wrap(
        line,
        width,
        initial_indent="",
        subsequent_indent=lead + indent,
        break_long_words=True,
        break_on_hyphens=False,
    ) or [line[:width]]


def _joined(head: str, tail: str, width: int = REPORT_WIDTH) -> str:
    """head and tail on one line when they fit in width, else tail indented on the next line."""
    return (
        f"{head}  {tail}"
        if len(head) + 2 + len(tail) <= width
        else f"{head}\n    {tail}"
    )


def _table(
    headers: tuple, rows: list[tuple], width: int, indent: str = "  "
) -> list[str]:
    """Left-aligned text, right-aligned numbers; the last column wraps to keep every line in width."""
    widths = [
        max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers) - 1)
    ]
    fixed = len(indent) + sum(w + 2 for w in widths)
    last = max(width - fixed, 16)

    def cells(r):
        return "  ".join(
            str(c).rjust(w) if isinstance(c, int) else str(c).ljust(w)
            for c, w in zip(r, widths)
        )

    out = []
    for i, r in enumerate([headers, *rows]):
        parts = textwrap.wrap(str(r[-1]), last) or [""]
        out.append((indent + cells(r) + "  " + parts[0]).rstrip())
        out += [(" " * fixed + p).rstrip() for p in parts[1:]]
        if i == 0:
            out.append(
                indent
                + "  ".join("-" * w for w in widths)
                + "  "
                + "-" * min(last, max(len(str(r[-1])), 4))
            )
    return out


def _short_type(t: str) -> str:
    """memref<1x4x512xf32, 2 : i32> -> 1x4x512xf32 (the table says which memory it is)."""
    m = re.match(r"memref<([^,>]*)", t)
    return m.group(1) if m else t


def budget_lines(budget, width: int = REPORT_WIDTH) -> list[str]:
    """The emulator's static budget (per-PE L1 of every herd, L2 of every segment) in `width` columns."""
    lines = [
        f"Memory budget (emulator, static): L1 per PE {budget.l1_limit} B incl. stack_size "
        f"{budget.stack_size}; L2 per segment {budget.memtiles} memtiles = {budget.l2_limit} B"
    ]
    for b in budget.herds + budget.segments:
        shape = f" [{b.shape[0]} x {b.shape[1]}]" if b.shape else ""
        where = "L1 per PE of herd" if b.kind == "herd" else "L2 of segment"
        lines.append("")
        lines.append(
            f"{where} @{b.name}{shape} at {b.loc}: {b.used} / {b.limit} B "
            f"({100.0 * b.used / b.limit:.1f}%) {'OK' if b.ok else 'OVER'}"
        )
        rows = [
            (e.loc, _short_type(e.type), e.bytes, f"x{e.factor}", e.total, e.note)
            for e in b.entries
        ]
        if b.extra_name:
            rows.append((b.extra_name, "", b.extra, "x1", b.extra, ""))
        lines += _table(("alloc", "type", "bytes", "", "total", "note"), rows, width)
    lines += [f"note: {n}" for n in budget.notes]
    return [part for line in lines for part in _fit(line, width)]


def print_report(cfg: DesignConfig, backend: str, emu: dict, file=None) -> None:
    """--report, printed after the result: one titled section after another, every line within
    REPORT_WIDTH columns. To add a table, append a (title, lines) section below."""
    sections = []
    if emu.get("budget") is not None:
        sections.append(("", budget_lines(emu["budget"])))
    elif backend == "npu":
        sections.append(("Memory budget (design):", cfg.budget_report().splitlines()))
    resources = emu.get("resources")
    if resources is None:
        try:
            resources = cfg.resources()
        except (
            ConfigError
        ) as e:  # mlir-air's own air package is loaded: the model needs the emulator's
            sections.append(("", [f"resources: not modelled in this process ({e})"]))
    if resources is not None:
        sections.append(("", resources.table().splitlines()))
    if emu.get("stats") is not None:
        sections.append(("", emu["stats"].table().splitlines()))
    if backend == "npu":
        from int4awq.run.npu import numerics_line

        sections.append(("", [numerics_line()]))
    if isinstance(cfg, DesignConfig):
        from int4awq.design.kernel_cost import kernel_line

        tiles = (cfg.tile_m, cfg.tile_n, cfg.tile_k_l1, cfg.gs)
        sections.append(("", [kernel_line(*tiles, cfg.format)]))
    out = []
    for title, lines in sections:
        out.append("")
        if title:
            out.append(title)
        for line in lines:
            out += _fit(line)
    print("\n".join(out), file=file or sys.stdout)


# ------------------------------------------------------------------------------------------ runs
GEMM_ONLY_OPTIONS = ("tile_m", "herd_m", "herd_n", "n_per_segment")


def choose_design(args, m: int) -> tuple[str, str]:
    """("gemm" | "gemv", why): --design, else the decode design for M <= GEMV_AUTO_MAX_M unless an option
    only the GEMM has was given."""
    gemm_only = [
        f"--{opt.replace('_', '-')}"
        for opt in GEMM_ONLY_OPTIONS
        if getattr(args, opt, None) is not None
    ]
    if args.design == "gemv":
        if gemm_only:
            raise ConfigError(
                f"--design gemv: {gemm_only[0]} is a GEMM option; the decode design takes --tile-n, "
                "--tile-k-l1, --tile-k-l2 and --stack-size"
            )
        return "gemv", "--design gemv"
    if args.design == "gemm":
        return "gemm", "--design gemm"
    if m <= GEMV_AUTO_MAX_M and not gemm_only:
        return "gemv", f"M = {m} <= {GEMV_AUTO_MAX_M}: decode"
    return "gemm", (
        f"{gemm_only[0]} given"
        if m <= GEMV_AUTO_MAX_M
        else f"M = {m} > {GEMV_AUTO_MAX_M}"
    )


def configure(args, m: int, k: int, n: int, gs: int):
    """(configuration, where it came from, design and why) for the run."""
    design, why = choose_design(args, m)
    if design == "gemv":
        cfg, source = gemv.config_from_args(args, m, k, n, gs)
    else:
        cfg, source = config_from_args(args, m, k, n, gs)
    return cfg, source, f"{design}: {why}"


def pes_of(cfg) -> int:
    """The compute tiles the configuration uses."""
    return cfg.pes if isinstance(cfg, GemvConfig) else cfg.herd_m * cfg.herd_n


_SHOWN = {"calibration": False}  # what main() prints once per run


def modelled_line(cfg, m: int, n: int) -> str:
    if isinstance(cfg, GemvConfig):
        est = gemv.modelled(cfg, m, n)
        head = (
            f"modelled NPU2: DDR {est.ddr_bytes / 1e6:.2f} MB, {est.seconds * 1e6:.1f} us (DDR "
            f"{est.ddr_s * 1e6:.1f} us, compute {est.compute_s * 1e6:.1f} us), {est.gbps:.1f} GB/s, "
            f"{est.bound}-bound"
        )
    else:
        from int4awq.design.sweep import modelled

        est = modelled(cfg, m, n)
        head = (
            f"modelled NPU2: DDR {est.ddr_bytes / 1e6:.2f} MB, {est.seconds * 1e6:.1f} us, "
            f"{est.tops:.3f} TOPS, {est.bound}-bound"
        )
    line = _joined(head, "(MODELLED, int4awq/design/model.py; not measured)")
    if not _SHOWN[
        "calibration"
    ]:  # once per run, not once per projection of a decoder layer
        from int4awq.design.kernel_cost import calibration

        _SHOWN["calibration"] = True
        line += "\n" + calibration().summary()
    return line


def run_gemm(
    args, a: np.ndarray, w: AwqWeights, quiet: bool = False, emu: dict | None = None
):
    """Configure, pack, run, check one GEMM (or, for few rows, the decode GEMV): (configuration,
    CheckResult, C [M, N]). emu, when given, receives the emulator's budget and counters for the report
    (and "backend")."""
    m = a.shape[0]
    cfg, source, design = configure(args, m, w.k, w.n, w.gs)
    if isinstance(cfg, GemvConfig) or m <= GEMV_AUTO_MAX_M or args.design != "auto":
        source = f"{source}; {design}"  # a GEMM line says why only when the choice is not the usual one
    padding = [
        f"{name} padded from {real}"
        for name, real, big in (("M", m, cfg.m), ("N", w.n, cfg.n))
        if big != real
    ]
    if not quiet:
        print(
            _joined(
                cfg.summary(),
                f"[{source}{'; ' + ', '.join(padding) if padding else ''}]",
            )
        )
    check_host_memory(cfg.m, cfg.k, cfg.n)
    ref = reference_gemm(a, w)[
        0
    ]  # before the run: an overflowing product is bad input, found at once
    if (
        cfg.format != "mxfp4"
    ):  # MXFP4 has no group sum: f32 over all of K, bounded by the check above
        check_accumulator_range(a, w, min(cfg.gs, cfg.tile_k_l1))
    build_dir = args.build_dir or os.path.join(REPO, "build", "npu", cfg.name)
    backend = choose_backend(args.backend, build_dir, quiet)
    if emu is not None:
        emu["backend"] = backend
    a_padded, w_packed = record.padded_operands(cfg, a, w)
    if backend == "sim":
        n = SIM_SCHEDULES if args.schedules is None else args.schedules
        seeds = [args.seed + i for i in range(n)]
        d = SIM_DISPATCHES if args.dispatches is None else args.dispatches
        c = run_sim(cfg, a_padded, w_packed, quiet, args.trace, seeds, d)
    elif backend == "emu":
        c = run_emulator(
            cfg,
            a_padded,
            w_packed,
            emu if emu is not None else False,
            quiet,
            compile_first=not args.no_compile,
        )
    else:
        c, _ = run_npu(cfg, a_padded, w_packed, build_dir, args.iters, args.warmup)
    if args.report:
        print(modelled_line(cfg, m, w.n))
    c = c[:m, : w.n]
    res = explain_failure(check(c, ref, exact=args.exact), c, a, w, exact=args.exact)
    return cfg, res, c


def _dispatches(weights: list, fused: bool) -> list[list[int]]:
    """The runs of a decoder layer's seven projections (q, k, v, o, gate, up, down), by index: one each, or
    with fused, q, k and v as one run and gate and up as one, where their formats allow
    (int4awq.formats.fuse.fusable_runs)."""
    if not fused:
        return [[i] for i in range(len(weights))]
    from int4awq.formats.fuse import fusable_runs

    out = []
    for group in ([0, 1, 2], [3], [4, 5], [6]):
        out += [
            [group[j] for j in run] for run in fusable_runs([weights[i] for i in group])
        ]
    return out


def run_decoder_layer(args) -> bool:
    """All seven projections of one decoder layer of a checkpoint, a line each; True if all pass. With
    --fused, the fused runs' outputs are cut back into each projection's columns, each checked against its
    own reference."""
    from int4awq.formats.fuse import fuse_columns, offsets
    from int4awq.formats.weights_file import decoder_layer_names, load

    if args.m is None:
        raise ConfigError("--decoder-layer needs --m (rows of A)")
    names = decoder_layer_names(args.awq, args.decoder_layer)
    weights = [load(args.awq, name, fmt=args.format_given)[0] for name in names]
    ok = True
    for run in _dispatches(weights, args.fused):
        parts = [weights[i] for i in run]
        w = fuse_columns(parts)
        args.format = w.format  # the file's format decides
        check_host_memory(args.m, w.k, w.n)
        a = random_activations(args.m, w.k, args.seed + 1)
        t0 = time.perf_counter()
        cfg, res, c = run_gemm(args, a, w, quiet=True)
        took = time.perf_counter() - t0
        shape = (
            f"GEMV {cfg.tile_n}x{cfg.tile_k_l1}/{cfg.tile_k_l2}"
            if isinstance(cfg, GemvConfig)
            else f"tiles {cfg.tile_m}x{cfg.tile_n}x{cfg.tile_k_l1} herd {cfg.herd_m}x{cfg.herd_n}"
        )
        fused = f" [one run of N={w.n}]" if len(run) > 1 else ""
        for i, part, off in zip(run, parts, offsets(parts)):
            if len(run) > 1:  # the part's own columns against the part's own reference
                res = explain_failure(
                    check(
                        c[:, off : off + part.n],
                        reference_gemm(a, part)[0],
                        exact=args.exact,
                    ),
                    c[:, off : off + part.n],
                    a,
                    part,
                    exact=args.exact,
                )
            ok &= res.passed
            print(
                f"{names[i]:<34} K={part.k:<5} N={part.n:<5} {shape} pes={pes_of(cfg)}{fused}  {took:6.1f} s  "
                f"corr {res.correlation:.6f}  mean rel L1 {res.mean_rel_l1:.2e}  {'PASS' if res.passed else 'FAIL'}",
                flush=True,
            )
    print("PASS!" if ok else "FAIL!")
    return ok


def _main(argv) -> int:
    _SHOWN["calibration"] = False
    args = parse_args(argv)
    check_options(args)
    if args.list_layers:
        from int4awq.formats.weights_file import list_layers

        print("\n".join(list_layers(args.awq)))
        return 0
    if args.layer_module:
        from int4awq.run.decode_layer import run_decode_layer

        backend = choose_backend(
            args.backend, None
        )  # the module compiles where it runs
        return 0 if run_decode_layer(args, backend) else 1
    if args.decoder_layer is not None:
        return 0 if run_decoder_layer(args) else 1
    a, w = load_inputs(args)
    if args.print_module_only or args.print_resources or args.compile_only:
        return build_only(args, a.shape[0], w)
    emu = {}
    cfg, result, c = run_gemm(args, a, w, emu=emu)
    print(f"pes={pes_of(cfg)}   (compute tiles used, of 32)")
    if args.layer == "lm_head":  # the token each row picks, greedy
        print(
            head_lines(
                a,
                w,
                np.asarray(c, np.float32)[:, : w.n],
                getattr(args, "float_head", None),
            )
        )
    print(result.report(), flush=True)
    if args.save is not None:
        save_outputs(args.save, a, c, w)
    if args.report:
        print_report(cfg, emu.get("backend", ""), emu)
    return 0 if result.passed else 1


def head_lines(a, w, logits, float_head) -> str:
    """The LM head's verdict on the token: the top-1 of each row against the float64 reference of the same
    weights, and, for a head quantised at load, the float64 logits of the float head against those of the
    quantised one (what the rounding costs)."""
    want = reference_gemm(a, w)[0]
    same = int((logits.argmax(axis=1) == want.argmax(axis=1)).sum())
    lines = [f"top-1 token      {same} of {len(want)} rows as the float64 reference's"]
    if float_head is not None:
        exact = a.astype(np.float64) @ float_head.astype(np.float64)
        corr = float(np.corrcoef(exact.ravel(), want.ravel())[0, 1])
        agree = int((exact.argmax(axis=1) == want.argmax(axis=1)).sum())
        lines.append(
            f"head rounding    the float head's logits against the quantised head's: correlation "
            f"{corr:.6f}, top-1 equal in {agree} of {len(want)} rows (float64 both)"
        )
    return "\n".join(lines)


def build_only(args, m: int, w) -> int:
    """-p, --print-resources, --compile-only: the run's configuration (as a run would choose it) built,
    then printed, its resources tabled, or compiled (int4awq.run.air_run.act)."""
    import importlib.util

    from int4awq.run.air_run import act

    if (
        importlib.util.find_spec("air") is None
    ):  # mlir-air not installed: the emulator's air package
        sys.path.insert(0, EMULATOR_DIR)
    cfg, _, _ = configure(args, m, w.k, w.n, w.gs)
    builder = builder_of(cfg)
    return act(
        args,
        cfg,
        builder.build_module(**cfg.builder_args()),
        builder.backend_options(cfg),
    )


def main(argv=None) -> int:
    try:
        return command_exit(_main, argv)
    except MemoryError:
        print(
            "error: out of host memory for these sizes: use smaller --m / --k / --n",
            file=sys.stderr,
        )
        return 2


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the output quietly
    sys.exit(main())
