#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Every Llama-3.2-1B projection in the default-configuration table: measured on NPU2, modelled elsewhere.

After the prefill rows, the decode rows: every projection at M = 1 on the GEMV design (matvec_int4_packed.py,
docs/decode.md) with its DDR and compute times, effective GB/s, and one token's 7 projections x 16 layers
next to published decode figures.

On a machine with an NPU2 (and the toolchain) each row is compiled (`make compile`), run --warmup times,
then timed over --iters runs, and checked. Without one, the table holds the traffic and roofline model's
figures and says so; --emulate also runs every row on the emulator and checks it (correlation column,
about 4 minutes here). Either way the table is also written as CSV (--csv).
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from int4awq.kernel_cost import calibration  # noqa: E402
from int4awq.llama import LAYERS  # noqa: E402
from int4awq.errors import (
    ConfigError,
    missing_module_line,
)  # noqa: E402  (standard library only)

try:
    import numpy as np

    from int4awq.npu import npu2_present, numerics_line
    from int4awq.quant import random_activations
    from int4awq import model
    from int4awq.weights_file import random_format_weights
    from int4awq.sweep import (
        LLAMA_PROJECTIONS,
        TABLE_FORMATS,
        default_config,
        load_table,
        modelled,
    )
except ModuleNotFoundError as _missing:
    print(missing_module_line(_missing), file=sys.stderr)
    sys.exit(2)
except KeyboardInterrupt:
    sys.exit(130)

COLUMNS = (
    "projection",
    "format",
    "m",
    "k",
    "n",
    "config",
    "ddr_mb",
    "us",
    "modelled_us",
    "tops",
    "correlation",
    "source",
    "ddr_us",
    "compute_us",
    "gbps",
)
# Published decode rates of Llama-3.2-1B on NPUs, whole model (attention, LM head and all), for comparison:
PUBLISHED_DECODE = (
    (
        "FastFlowLM, 1k context, Krackan (ROCm/FastFlowLM docs/benchmarks/llama3_results.md; not re-checked)",
        64.5,
    ),
    (
        "mlir-air llms/llama32_1b_int4, int4 NPU decode ~56 ms/token (its Makefile)",
        17.8,
    ),
)


def checked_run(cfg, m, k, n, run):
    """Seeded operands for one row, run(padded A, packed W) -> C, checked against the reference."""
    from int4awq.record import padded_operands
    from int4awq.reference import check, reference_gemm

    w = random_format_weights(cfg.format, k, n, cfg.gs, seed=0)
    a = random_activations(m, k, seed=1)
    c = run(*padded_operands(cfg, a, w))
    return check(c[:m, :n], reference_gemm(a, w)[0])


def timed_npu_run(cfg, m, k, n, iters, warmup):
    """(mean us, correlation) of a compiled configuration: the host program's NPU path runs and checks it."""
    from host.run import run_npu

    times = []

    def on_npu(a, w_packed):
        c, t = run_npu(
            cfg,
            a,
            w_packed,
            os.path.join(REPO, "build", "npu", cfg.name),
            iters,
            warmup,
        )
        times.extend(t)
        return c

    res = checked_run(cfg, m, k, n, on_npu)
    return float(np.mean(times)), res.correlation


def measured_source(us: float, modelled_s: float) -> str:
    """A measured row's source: the measurement, with the model's figure and its error beside it."""
    model_us = modelled_s * 1e6
    return f"measured; modelled {model_us:.1f} us, model error {model_us / us - 1:+.0%}"


def measure(cfg, m, k, n, iters, warmup):
    """(mean us, correlation) of one configuration on the NPU."""
    cmd = [
        "make",
        "-s",
        "-C",
        REPO,
        "compile",
        f"FORMAT={cfg.format}",
        f"M={cfg.m}",
        f"K={cfg.k}",
        f"N={cfg.n}",
        f"GS={cfg.gs}",
        f"TILE_M={cfg.tile_m}",
        f"TILE_N={cfg.tile_n}",
        f"TILE_K_L1={cfg.tile_k_l1}",
        f"TILE_K_L2={cfg.tile_k_l2}",
        f"HERD_M={cfg.herd_m}",
        f"HERD_N={cfg.herd_n}",
    ]
    if subprocess.run(cmd).returncode:
        raise ConfigError(f"`{' '.join(cmd[3:])}` failed (its output is above)")
    return timed_npu_run(cfg, m, k, n, iters, warmup)


def measure_gemv(cfg, m, k, n, iters, warmup):
    """(mean us, correlation) of one decode configuration on the NPU: matvec_int4_packed.py compiles it
    (and builds its kernel object), then the host program's NPU path runs it."""
    cmd = [
        sys.executable,
        os.path.join(REPO, "matvec_int4_packed.py"),
        "--m",
        str(cfg.m),
        "--k",
        str(cfg.k),
        "--n",
        str(cfg.n),
        "--gs",
        str(cfg.gs),
        "--format",
        cfg.format,
        "--tile-n",
        str(cfg.tile_n),
        "--tile-k-l1",
        str(cfg.tile_k_l1),
        "--tile-k-l2",
        str(cfg.tile_k_l2),
        "--compile-mode",
        "compile-only",
    ]
    if subprocess.run(cmd, cwd=REPO).returncode:
        raise ConfigError(f"`{' '.join(cmd[1:])}` failed (its output is above)")
    return timed_npu_run(cfg, m, k, n, iters, warmup)


def emulate(cfg, m, k, n):
    """(correlation, passed) of one configuration on the emulator."""
    from host.run import run_emulator

    res = checked_run(
        cfg,
        m,
        k,
        n,
        lambda a, w_packed: run_emulator(cfg, a, w_packed, report=False, quiet=True),
    )
    return res.correlation, res.passed


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise ConfigError(f"{message} (see --help)")


def check_csv(path: str) -> None:
    """The CSV's directory exists (or is made) and takes a file: checked before the runs, not after."""
    if not path:
        raise ConfigError("--csv: the path is empty")
    if os.path.isdir(path):
        raise ConfigError(f"--csv {path}: is a directory")
    d = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(d, exist_ok=True)
        with open(path, "a"):
            pass
    except OSError as e:
        raise ConfigError(f"--csv {path}: cannot write ({e.strerror})") from None


def main(argv=None) -> int:
    try:
        return _main(argv)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except SystemExit as e:  # --help
        return e.code if isinstance(e.code, int) else 0


def _main(argv) -> int:
    p = _Parser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--csv", default=os.path.join(REPO, "build", "bench.csv"))
    p.add_argument(
        "--modelled",
        action="store_true",
        help="print the model's table even with an NPU2 present",
    )
    p.add_argument(
        "--emulate",
        action="store_true",
        help="without an NPU2: also run and check every row on the emulator",
    )
    args = p.parse_args(argv)
    if args.iters < 1 or args.warmup < 0:
        raise ConfigError(
            f"--iters {args.iters} / --warmup {args.warmup}: need iters >= 1, warmup >= 0"
        )
    check_csv(args.csv)

    on_npu, why = (False, "--modelled") if args.modelled else npu2_present()
    print(
        f"{'MEASURED on NPU2' if on_npu else 'MODELLED (no NPU2: ' + why + ')'}; "
        f"model: int4awq/model.py (DDR 42.5 GB/s effective) and int4awq/kernel_cost.py"
    )
    print(calibration().summary())
    print(numerics_line())
    rows, failures = [], 0
    for entry in load_table():  # a row per (shape, format): MXFP4 beside AWQ
        m, k, n, fmt = entry["m"], entry["k"], entry["n"], entry.get("format", "awq")
        try:
            cfg, _ = default_config(m, k, n, entry["gs"], fmt)
        except (
            ConfigError
        ) as e:  # e.g. no MXFP4 record fits the shape's launch and L1 limits
            rows.append(
                dict(
                    projection=entry["projection"],
                    format=fmt,
                    m=m,
                    k=k,
                    n=n,
                    source=str(e),
                )
            )
            print(
                f"{entry['projection']:<10} {fmt:<7} M={m:<5} K={k:<5} N={n:<5} {e}",
                flush=True,
            )
            continue
        est = modelled(cfg, m, n)
        row = dict(
            projection=entry["projection"],
            format=fmt,
            m=m,
            k=k,
            n=n,
            config=f"{cfg.tile_m}x{cfg.tile_n}x{cfg.tile_k_l1}/{cfg.tile_k_l2} h{cfg.herd_m}x{cfg.herd_n}",
            ddr_mb=round(cfg.ddr_bytes() / 1e6, 2),
            us=round(est.seconds * 1e6, 1),
            modelled_us=round(est.seconds * 1e6, 1),
            tops=round(est.tops, 3),
            correlation="",
            source="modelled",
        )
        if on_npu:
            us, corr = measure(cfg, m, k, n, args.iters, args.warmup)
            row.update(
                us=round(us, 1),
                tops=round(2 * m * k * n / us / 1e6, 3),
                correlation=f"{corr:.6f}",
                source=measured_source(us, est.seconds),
            )
        elif args.emulate:
            corr, passed = emulate(cfg, m, k, n)
            failures += not passed
            row.update(
                correlation=f"{corr:.6f}",
                source="modelled; emulator " + ("PASS" if passed else "FAIL"),
            )
        rows.append(row)
        print(
            f"{row['projection']:<10} {fmt:<7} M={m:<5} K={k:<5} N={n:<5} {row['config']:<24} DDR {row['ddr_mb']:>7.2f} MB "
            f"{row['us']:>9.1f} us {row['tops']:>6.3f} TOPS {row['correlation']:<9} {row['source']}",
            flush=True,
        )
    failures += decode_rows(rows, on_npu, args)
    try:
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
    except OSError as e:
        raise ConfigError(f"--csv {args.csv}: writing failed ({e.strerror})") from None
    print(f"wrote {args.csv}")
    return 1 if failures else 0


def _decode_format(fmt: str, gs: int, rows: list, on_npu: bool, args) -> int:
    """decode_rows for one weight format: a row per projection and the token line."""
    from int4awq import gemv

    failures, token_s, token_ddr, token_fixed = 0, 0.0, 0, 0.0
    for name, (k, n) in LLAMA_PROJECTIONS.items():
        cfg = gemv.default_config(1, k, n, gs, fmt)
        est = gemv.modelled(cfg, 1, n)
        row = dict(
            projection=name,
            format=fmt,
            m=1,
            k=k,
            n=n,
            config=f"GEMV {cfg.tile_n}x{cfg.tile_k_l1}/{cfg.tile_k_l2} pes{cfg.pes}",
            ddr_mb=round(est.ddr_bytes / 1e6, 2),
            us=round(est.seconds * 1e6, 1),
            modelled_us=round(est.seconds * 1e6, 1),
            tops=round(est.tops, 3),
            correlation="",
            source=f"modelled, {est.bound}-bound",
            ddr_us=round(est.ddr_s * 1e6, 1),
            compute_us=round(est.compute_s * 1e6, 1),
            gbps=round(est.gbps, 1),
        )
        seconds = est.seconds
        if on_npu:
            us, corr = measure_gemv(cfg, 1, k, n, args.iters, args.warmup)
            seconds = us * 1e-6
            row.update(
                us=round(us, 1),
                tops=round(2 * k * n / us / 1e6, 3),
                correlation=f"{corr:.6f}",
                source=measured_source(us, est.seconds),
                gbps=round(est.ddr_bytes / us / 1e3, 1),
            )
        elif args.emulate:
            corr, passed = emulate(cfg, 1, k, n)
            failures += not passed
            row.update(
                correlation=f"{corr:.6f}",
                source=row["source"] + "; emulator " + ("PASS" if passed else "FAIL"),
            )
        token_s += seconds
        token_ddr += est.ddr_bytes
        token_fixed += model.FIXED_S
        rows.append(row)
        print(
            f"{name:<10} {fmt:<7} M=1     K={k:<5} N={n:<5} {row['config']:<24} DDR {row['ddr_mb']:>7.2f} MB "
            f"{row['us']:>9.1f} us {row['gbps']:>5.1f} GB/s  (DDR {row['ddr_us']:>6.1f} us, compute "
            f"{row['compute_us']:>6.1f} us) {row['source']}",
            flush=True,
        )
    what = "MEASURED" if on_npu else "MODELLED"
    per_token = LAYERS * token_s
    print(
        f"{fmt}: one token, 7 projections x {LAYERS} layers ({what}, projections only: no attention, norms, LM head): "
        f"{per_token * 1e3:.2f} ms = {1 / per_token:.1f} tok/s; DDR {LAYERS * token_ddr / 1e6:.0f} MB = "
        f"{LAYERS * token_ddr / model.DDR_BYTES_PER_S * 1e3:.2f} ms at 42.5 GB/s; the fixed cost of "
        f"{7 * LAYERS} launches is {LAYERS * token_fixed * 1e3:.2f} ms of it ({100 * token_fixed / token_s:.0f} %)"
    )
    if not on_npu:
        print(
            f"  without the per-launch fixed cost (one launch per token, as a fused decode would be): "
            f"{(per_token - LAYERS * token_fixed) * 1e3:.2f} ms = {1 / (per_token - LAYERS * token_fixed):.1f} tok/s "
            "(MODELLED)"
        )
    return failures


def decode_rows(rows: list, on_npu: bool, args) -> int:
    """The M = 1 rows (one per Llama-3.2-1B projection, the GEMV design) and one token's projections
    over 16 layers; returns the number of emulator failures."""
    from int4awq import gemv

    print()
    print(
        f"decode, M = 1: the GEMV design on all 32 PEs (matvec_int4_packed.py); "
        f"{'MEASURED on NPU2' if on_npu else 'MODELLED'}: time = max(DDR / 42.5 GB/s, compute) + "
        f"{model.FIXED_S * 1e6:.0f} us per launch"
    )
    failures = 0
    for fmt, gs in TABLE_FORMATS:
        failures += _decode_format(fmt, gs, rows, on_npu, args)
    for who, tok_s in PUBLISHED_DECODE:
        print(
            f"  published, whole model: {who}: {tok_s} tok/s = {1e3 / tok_s:.1f} ms/token"
        )
    return failures


if __name__ == "__main__":
    sys.exit(main())
