#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Every Llama-3.2-1B projection in the default-configuration table: measured on NPU2, modelled elsewhere.

After the prefill rows, the decode rows: every projection at M = 1 on the GEMV design (matvec_int4_packed.py,
docs/decode.md) with its DDR and compute times, effective GB/s, and one token's 7 projections x 16 layers
next to published decode figures.

On a machine with an NPU2 (and the toolchain) each row is compiled (`make compile`), run --warmup times,
then timed over --iters runs, and checked. Without one, the table holds the traffic and roofline model's
figures and says so; --emulate also runs every row on the emulator and checks it (correlation column,
about 4 minutes here). Either way the table is also written as CSV (--csv) and drawn as a roofline plot
beside it (same name, .png; needs matplotlib).
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from int4awq.design import compiler  # noqa: E402
from int4awq.design.kernel_cost import CLOCK_HZ, calibration  # noqa: E402
from int4awq.design.llama import (  # noqa: E402
    FUSED,
    FUSED_DISPATCHES,
    LAYERS,
    VOCAB,
    shape_of,
)
from int4awq.errors import (
    ConfigError,
    command_exit,
    missing_module_line,
)  # noqa: E402  (standard library only)

try:
    import numpy as np

    from int4awq.run.npu import npu2_present, numerics_line
    from int4awq.formats.quant import random_activations
    from int4awq.design import model
    from int4awq.design.design import HERD_COLS, HERD_ROWS
    from int4awq.formats.weights_file import random_format_weights
    from int4awq.design.sweep import (
        LLAMA_PROJECTIONS,
        TABLE_FORMATS,
        default_config,
        grid_note,
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
    "bound",  # new columns go last: readers that index the CSV by position keep working
    "sim_us",
)

# The printed tables: (heading, row key, format spec). Text is left-aligned and numbers right-aligned under
# their headings, so each column reads straight down; the source (last) is not padded.
_LEAD = (
    ("projection", "projection", "<12"),
    # format: as wide as the longest record format, int4_min_bf16 and int8_min_bf16
    ("format", "format", "<13"),
    ("M", "m", ">5"),
    ("K", "k", ">5"),
    ("N", "n", ">5"),
)
_TRAFFIC = (
    ("config", "config", "<24"),
    ("DDR MB", "ddr_mb", ">8.2f"),
    ("time us", "us", ">9.1f"),
)
PREFILL_TABLE = _LEAD + _TRAFFIC + (("TOPS", "tops", ">6.3f"), ("bound", "bound", "<7"))
DECODE_TABLE = (
    _LEAD
    + _TRAFFIC
    + (
        ("GB/s", "gbps", ">5.1f"),
        ("DDR us", "ddr_us", ">7.1f"),
        ("compute us", "compute_us", ">10.1f"),
        ("bound", "bound", "<7"),
    )
)
_CORRELATION = (("correlation", "correlation", "<11"),)
_SOURCE = (("source", "source", ""),)

# The roofline's compute roof: every PE issuing one bfp16ebs8 8x8x8 mmul (512 MACs) per cycle, the peak the
# kernel's mmul can reach (docs/hardware.md#matrix-multiply-shapes); the kernel cost model's rates sit below it.
MACS_PER_CYCLE = 512

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
    (
        "mlir-air fused_decode, 16 layers and LM head in one dispatch, dual-MM2S weight feed, Strix "
        "(its README, measured)",
        52.3,
    ),
)


def checked_run(cfg, m, k, n, run):
    """Seeded operands for one row, run(padded A, packed W) -> C, checked against the reference."""
    from int4awq.kernel.record import padded_operands
    from int4awq.run.reference import check, reference_gemm

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
    """(mean us, correlation) of one decode configuration on the NPU: the host program compiles it
    (--design gemv --compile-only, building its kernel object), then its NPU path runs it.
    """
    cmd = [
        sys.executable,
        os.path.join(REPO, "host", "run.py"),
        "--design",
        "gemv",
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
        "--compile-only",
    ]
    if subprocess.run(cmd, cwd=REPO).returncode:
        raise ConfigError(f"`{' '.join(cmd[1:])}` failed (its output is above)")
    return timed_npu_run(cfg, m, k, n, iters, warmup)


def simulated_us(cfg) -> float:
    """The design's time as compiled (MODELLED): aircc + aiecc compile it, the simulator of the compiled
    design runs it on zeros with the kernel calls charged by the kernel cost model, not computed
    (emulator/aiesim, int4awq/run/sim_costs.py); plus the per-dispatch fixed cost."""
    from host.run import builder_of, compile_design, emulator_backend
    from int4awq.run import sim_costs

    emulator_backend(cfg)  # the emulator's packages (air, aiesim) first on the path
    import aiesim

    outdir = compile_design(
        cfg, builder_of(cfg).build_module(**cfg.builder_args()), quiet=True
    )
    text = compiler.generic_form(os.path.join(outdir, "input_physical.mlir"))
    _, sim = aiesim.simulate(
        text, None, costs=sim_costs.costs(cfg), run_kernels=False, insts=outdir
    )
    return (sim_costs.seconds(sim) + model.FIXED_S) * 1e6


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


def _cell(heading: str, spec: str) -> str:
    """A heading aligned and padded as its column's values are."""
    align, width = spec[:1], "".join(c for c in spec.split(".")[0] if c.isdigit())
    return f"{heading:{align}{width}}"


def table_header(columns) -> str:
    return " ".join(_cell(heading, spec) for heading, _, spec in columns).rstrip()


def table_line(columns, row: dict) -> str:
    """A row under the columns' headings; an empty cell (a figure the row has not) as blanks."""
    return " ".join(
        f"{row[key]:{spec if row[key] != '' else spec.split('.')[0]}}"
        for _, key, spec in columns
    ).rstrip()


_SIMULATED = (("sim us", "sim_us", ">8.1f"), ("sim/model", "sim_ratio", ">9.2f"))


def table_columns(table, with_correlation: bool, with_sim: bool = False):
    """A table's columns: the correlation only when rows have one (NPU2 or --emulate), the simulated
    time as compiled with --sim, the source last."""
    return (
        table
        + (_CORRELATION if with_correlation else ())
        + (_SIMULATED if with_sim else ())
        + _SOURCE
    )


# Issue 52: every record format's default at 2048^3 (q_proj, M = 2048) within 1.3x AWQ's time as compiled
FORMATS_ROW, FORMATS_TARGET = ("q_proj", 2048), 1.3
FORMAT_TABLE = (
    ("format", "format", "<13"),
    ("config", "config", "<24"),
    ("GS", "gs", ">3"),
    ("model us", "modelled_us", ">8.1f"),
    ("sim us", "sim_us", ">8.1f"),
    ("sim/AWQ", "awq_ratio", ">7.2f"),
    (f"within {FORMATS_TARGET}x", "verdict", ""),
)


def add_simulated(row: dict, cfg, fmt: str, args) -> None:
    """With --sim, the row's time as compiled and its ratio to the analytic model (MODELLED both): the AWQ
    rows, and every format's at FORMATS_ROW (format_lines)."""
    if not args.sim or (fmt != "awq" and (row["projection"], row["m"]) != FORMATS_ROW):
        row.update(sim_us="", sim_ratio="")
        return
    us = simulated_us(cfg)
    row.update(sim_us=round(us, 1), sim_ratio=round(us / row["modelled_us"], 2))


def format_lines(rows: list) -> list[str]:
    """With --sim, issue 52's check: each format's prefill row at FORMATS_ROW, its analytic and as-compiled
    times and the latter's ratio to AWQ's against FORMATS_TARGET (MODELLED all); a format the shape
    refuses, its reason."""
    name, m = FORMATS_ROW
    mine = [r for r in rows if (r["projection"], r["m"]) == FORMATS_ROW]
    awq = next((r["sim_us"] for r in mine if r["format"] == "awq" and "config" in r), 0)
    lines = [
        f"every format at {name}, M = {m} (K x N = {' x '.join(map(str, shape_of(name)))}) as compiled "
        f"against AWQ (issue 52: within {FORMATS_TARGET}x); MODELLED: the analytic model and the simulator "
        "of the compiled design, neither measured",
        table_header(FORMAT_TABLE),
    ]
    for r in mine:
        if "config" not in r:  # no legal configuration: its reason
            lines.append(f"{_cell(r['format'], FORMAT_TABLE[0][2])} {r['source']}")
            continue
        ratio = r["sim_us"] / awq if awq else ""
        verdict = ("yes" if ratio <= FORMATS_TARGET else "no") if awq else "no AWQ time"
        lines.append(
            table_line(
                FORMAT_TABLE, dict(r, awq_ratio=ratio, verdict=f"{verdict}, MODELLED")
            )
        )
    return lines


def resident_lines(rows: list) -> list[str]:
    """With --sim, q_proj at M = 2048 in its proven configuration and with A resident across
    RESIDENT_NPS N blocks (n_per_segment, novel: docs/design.md#a-resident-across-n-blocks-n_per_segment):
    each one's DDR traffic and time as compiled (MODELLED); the resident one is the only row simulated
    here."""
    import dataclasses

    from host.aircc_check import RESIDENT_NPS

    name, m = FORMATS_ROW
    proven = next(
        (
            r
            for r in rows
            if (r["projection"], r["m"]) == FORMATS_ROW
            and r["format"] == "awq"
            and "config" in r
        ),
        None,
    )
    if proven is None:
        return []
    cfg = dataclasses.replace(
        default_config(m, proven["k"], proven["n"], proven["gs"])[0],
        n_per_segment=RESIDENT_NPS,
    )
    us = simulated_us(cfg)
    tops = 2 * m * proven["k"] * proven["n"] / us / 1e6
    return [
        f"{name}, M = {m}, with A resident across N blocks (MODELLED: the simulator of the compiled "
        "design; not run on NPU2)",
        f"  proven  {proven['config']}: {proven['ddr_mb']:.2f} MB DDR, {proven['sim_us']:.1f} us as "
        f"compiled",
        f"  novel   {config_text(cfg)} n_per_segment {RESIDENT_NPS}: {cfg.ddr_bytes() / 1e6:.2f} MB DDR, "
        f"{us:.1f} us as compiled, {tops:.2f} TOPS",
    ]


def config_text(cfg) -> str:
    """A configuration as the tables print it: tiles M x N x K in L1 / K in L2, then the herd."""
    return f"{cfg.tile_m}x{cfg.tile_n}x{cfg.tile_k_l1}/{cfg.tile_k_l2} h{cfg.herd_m}x{cfg.herd_n}"


def roofline_point(row: dict, ddr_bytes: int, modelled_s: float, measured_s=None):
    """The plot's figures of a row, exact (the row's own are rounded for print); not written to the CSV."""
    row["_plot"] = (
        2 * row["m"] * row["k"] * row["n"],
        ddr_bytes,
        modelled_s,
        measured_s,
    )


def write_roofline(rows: list, path: str, on_npu: bool) -> str:
    """Draw every row as a point, ops/s against ops per DDR byte, under the DDR and MAC roofs; returns the
    line to print (where it went, or why there is no plot: matplotlib is optional)."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display needed: make bench runs headless
        import matplotlib.pyplot as plt
    except ImportError as e:
        return f"roofline plot skipped: matplotlib is not importable ({e}); `make deps` installs it"

    pts = [r for r in rows if "_plot" in r]
    ddr_roof = model.DDR_BYTES_PER_S
    pes = HERD_COLS * HERD_ROWS
    mac_roof = pes * MACS_PER_CYCLE * 2 * CLOCK_HZ
    fig, ax = plt.subplots(figsize=(9, 6), dpi=110)
    styles = dict(
        zip(("awq", "awq_f16", "mxfp4"), (("o", "C0"), ("s", "C1"), ("^", "C2")))
    )
    for i, fmt in enumerate(dict.fromkeys(r["format"] for r in pts)):
        marker, colour = styles.get(fmt, ("D", f"C{3 + i}"))
        mine = [r["_plot"] for r in pts if r["format"] == fmt]
        x = [ops / ddr for ops, ddr, _, _ in mine]
        ax.scatter(
            x,
            [ops / s / 1e12 for ops, _, s, _ in mine],
            marker=marker,
            color=colour,
            alpha=0.75,
            label=f"{fmt}, MODELLED",
        )
        measured = [(xi, p) for xi, p in zip(x, mine) if p[3] is not None]
        if measured:
            ax.scatter(
                [xi for xi, _ in measured],
                [p[0] / p[3] / 1e12 for _, p in measured],
                marker=marker,
                facecolors="none",  # hollow: told apart from the modelled points
                edgecolors=colour,
                linewidths=1.5,
                s=70,
                label=f"{fmt}, MEASURED on NPU2",
            )
    xs = [r["_plot"][0] / r["_plot"][1] for r in pts] or [1.0]
    lo, hi = min(xs) / 2, max(xs) * 2
    ridge = mac_roof / ddr_roof
    ax.plot(
        [lo, min(hi, ridge)],
        [lo * ddr_roof / 1e12, min(hi, ridge) * ddr_roof / 1e12],
        "k--",
        label=f"DDR roof: {ddr_roof / 1e9:.1f} GB/s effective (int4awq/design/model.py)",
    )
    ax.axhline(
        mac_roof / 1e12,
        color="k",
        linestyle=":",
        label=f"MAC roof: {pes} PEs x {MACS_PER_CYCLE} bfp16 MACs x 2 ops x {CLOCK_HZ / 1e9:.1f} GHz "
        f"= {mac_roof / 1e12:.1f} TOPS",
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity: 2*M*N*K / DDR bytes (ops per byte)")
    ax.set_ylabel("TOPS (1e12 ops/s)")
    what = "MEASURED on NPU2 and MODELLED" if on_npu else "MODELLED"
    ax.set_title(
        f"int4 GEMM / GEMV, Llama-3.2-1B projections: {what}\n"
        f"model: int4awq/design/model.py + int4awq/design/kernel_cost.py (times include {model.FIXED_S * 1e6:.0f} us per launch)",
        fontsize=10,
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    try:
        fig.savefig(path)
    except OSError as e:
        return f"roofline plot skipped: cannot write {path} ({e.strerror})"
    finally:
        plt.close(fig)
    return f"wrote {path} (roofline, {what})"


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
    return command_exit(_main, argv)


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
    p.add_argument(
        "--sim",
        action="store_true",
        help="also time the AWQ rows, and every format's at q_proj, M = 2048, as compiled: the simulator of "
        "the design aircc + aiecc write (MODELLED; needs the compiler; seconds to a minute a row)",
    )
    args = p.parse_args(argv)
    if args.sim and compiler.tools_missing():
        raise ConfigError(
            f"--sim simulates the compiled design: {compiler.tools_missing()}"
        )
    if args.iters < 1 or args.warmup < 0:
        raise ConfigError(
            f"--iters {args.iters} / --warmup {args.warmup}: need iters >= 1, warmup >= 0"
        )
    check_csv(args.csv)

    on_npu, why = (False, "--modelled") if args.modelled else npu2_present()
    print(
        f"{'MEASURED on NPU2' if on_npu else 'MODELLED (no NPU2: ' + why + ')'}; "
        f"model: int4awq/design/model.py (DDR {model.DDR_BYTES_PER_S / 1e9:.1f} GB/s effective) and int4awq/design/kernel_cost.py"
    )
    print(calibration().summary())
    print(numerics_line())
    print(
        f"bound: the larger of the model's two times, DDR (bytes / {model.DDR_BYTES_PER_S / 1e9:.1f} GB/s) "
        "or compute (the kernel model)"
    )
    if args.emulate and not on_npu:
        missing = compiler.tools_missing()
        print(
            f"--emulate: not compiled with aircc + aiecc ({missing}): the emulator's own model decides"
            if missing
            else "--emulate: each row compiles with aircc + aiecc first (build/aircc-runs/); a row the "
            "compiler refuses stops the bench with its error"
        )
    columns = table_columns(PREFILL_TABLE, on_npu or args.emulate, args.sim)
    print(table_header(columns))
    rows, failures = [], 0
    entries, say = load_table(), print
    # seconds to a minute a row on NPU2 or the emulator: a bar with the count and time left, and each
    # row's line written above it
    if on_npu or args.emulate:
        from tqdm import tqdm

        entries = tqdm(entries, desc="bench rows", unit="row", file=sys.stderr)
        say = tqdm.write
    for entry in entries:  # a row per (shape, format): MXFP4 beside AWQ
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
            say(f"{table_line(_LEAD, rows[-1])} {e}")
            continue
        est = modelled(cfg, m, n)
        row = dict(
            projection=entry["projection"],
            format=fmt,
            m=m,
            k=k,
            n=n,
            config=config_text(cfg),
            gs=cfg.gs,
            ddr_mb=round(cfg.ddr_bytes() / 1e6, 2),
            us=round(est.seconds * 1e6, 1),
            modelled_us=round(est.seconds * 1e6, 1),
            tops=round(est.tops, 3),
            correlation="",
            source="; ".join(filter(None, ("modelled", grid_note(cfg)))),
            bound=est.bound,
        )
        roofline_point(row, est.ddr_bytes, est.seconds)
        if on_npu:
            us, corr = measure(cfg, m, k, n, args.iters, args.warmup)
            row.update(
                us=round(us, 1),
                tops=round(2 * m * k * n / us / 1e6, 3),
                correlation=f"{corr:.6f}",
                source=measured_source(us, est.seconds),
            )
            roofline_point(row, est.ddr_bytes, est.seconds, us * 1e-6)
        elif args.emulate:
            corr, passed = emulate(cfg, m, k, n)
            failures += not passed
            row.update(
                correlation=f"{corr:.6f}",
                source="modelled; emulator " + ("PASS" if passed else "FAIL"),
            )
        add_simulated(row, cfg, fmt, args)
        rows.append(row)
        say(table_line(columns, row))
    if args.sim:
        print()
        print("\n".join(format_lines(rows)))
        print()
        print("\n".join(resident_lines(rows)))  # empty without q_proj's row
    failures += decode_rows(rows, on_npu, args)
    print()
    print("\n".join(record_lines()))
    try:
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows({k: r.get(k, "") for k in COLUMNS} for r in rows)
    except OSError as e:
        raise ConfigError(f"--csv {args.csv}: writing failed ({e.strerror})") from None
    print(f"wrote {args.csv}")
    print(write_roofline(rows, os.path.splitext(args.csv)[0] + ".png", on_npu))
    return 1 if failures else 0


def _decode_row(
    name, k, n, fmt, gs, columns, rows, on_npu, args
) -> tuple[float, int, bool]:
    """One M = 1 row (the GEMV design's default configuration for K x N), printed and added to rows:
    (seconds, DDR bytes, passed)."""
    from int4awq.design import gemv

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
        source="modelled",
        ddr_us=round(est.ddr_s * 1e6, 1),
        compute_us=round(est.compute_s * 1e6, 1),
        gbps=round(est.gbps, 1),
        bound=est.bound,
    )
    roofline_point(row, est.ddr_bytes, est.seconds)
    seconds, passed = est.seconds, True
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
        roofline_point(row, est.ddr_bytes, est.seconds, seconds)
    elif args.emulate:
        corr, passed = emulate(cfg, 1, k, n)
        row.update(
            correlation=f"{corr:.6f}",
            source=row["source"] + "; emulator " + ("PASS" if passed else "FAIL"),
        )
    add_simulated(row, cfg, fmt, args)
    rows.append(row)
    print(table_line(columns, row), flush=True)
    return seconds, est.ddr_bytes, passed


def _token_line(fmt, what, dispatches, token_s, token_ddr, how) -> str:
    """One token's projections over the 16 layers: dispatches per layer, each with the fixed cost."""
    per_token = LAYERS * token_s
    fixed = LAYERS * dispatches * model.FIXED_S
    return (
        f"{fmt}: one token, {how} x {LAYERS} layers ({what}, projections only: no attention, norms, LM head): "
        f"{per_token * 1e3:.2f} ms = {1 / per_token:.1f} tok/s; DDR {LAYERS * token_ddr / 1e6:.0f} MB = "
        f"{LAYERS * token_ddr / model.DDR_BYTES_PER_S * 1e3:.2f} ms at {model.DDR_BYTES_PER_S / 1e9:.1f} GB/s; the fixed cost of "
        f"{dispatches * LAYERS} launches is {fixed * 1e3:.2f} ms of it ({100 * fixed / per_token:.0f} %)"
    )


def _decode_format(fmt: str, gs: int, rows: list, on_npu: bool, args) -> int:
    """decode_rows for one weight format: a row per projection and the token line, then the fused
    projections (q, k and v as one GEMV, gate and up as one: int4awq.design.llama.FUSED) and their token
    line, four dispatches a layer."""
    columns = table_columns(DECODE_TABLE, on_npu or args.emulate, args.sim)
    failures, seconds, ddr = 0, {}, {}
    for name in list(LLAMA_PROJECTIONS) + list(FUSED):
        k, n = shape_of(name)
        seconds[name], ddr[name], passed = _decode_row(
            name, k, n, fmt, gs, columns, rows, on_npu, args
        )
        failures += not passed
    what = "MEASURED" if on_npu else "MODELLED"
    token_s = sum(seconds[p] for p in LLAMA_PROJECTIONS)
    token_ddr = sum(ddr[p] for p in LLAMA_PROJECTIONS)
    print(_token_line(fmt, what, 7, token_s, token_ddr, "7 projections"))
    if not on_npu:
        fixed = LAYERS * 7 * model.FIXED_S
        print(
            f"  without the per-launch fixed cost (one launch per token, as a fused decode would be): "
            f"{(LAYERS * token_s - fixed) * 1e3:.2f} ms = {1 / (LAYERS * token_s - fixed):.1f} tok/s "
            "(MODELLED)"
        )
    fused_s = sum(seconds[p] for p in FUSED_DISPATCHES)
    fused_ddr = sum(ddr[p] for p in FUSED_DISPATCHES)
    print(
        _token_line(
            fmt,
            what,
            len(FUSED_DISPATCHES),
            fused_s,
            fused_ddr,
            f"{len(FUSED_DISPATCHES)} dispatches ({', '.join(FUSED_DISPATCHES)})",
        )
    )
    print(_layer_module_line(fmt, gs, seconds["qkv_proj"]))
    print(_head_line(fmt, gs))
    print(_whole_token_line(fmt, _mix(fmt, gs)))
    return failures


def _layer_module_line(fmt: str, gs: int, qkv_s: float) -> str:
    """One token with each layer in two dispatches (the fused q, k, v GEMV and the o_proj + FFN module of
    seven launches, o_gemv_ffn_int4.py), and in one a layer plus one (the module ending with the next layer's
    attention norm and q, k, v GEMV: the host's attention sits between them and the next o_proj); always
    MODELLED (the bench does not run the module)."""
    from int4awq.design import layer

    own = layer.modelled(layer.llama_layer((fmt,) * 3, (gs,) * 3))
    chained = layer.modelled(
        layer.llama_layer((fmt,) * 3, (gs,) * 3, next_qkv_format=fmt)
    )
    two = LAYERS * (qkv_s + own.seconds)
    one = qkv_s + (LAYERS - 1) * chained.seconds + own.seconds
    return (
        f"{fmt}: one token, MODELLED (projections, residuals, the FFN's RMSNorm and SwiGLU; no attention, LM "
        f"head), o_proj + FFN as one module of 7 launches (o_gemv_ffn_int4.py, {own.seconds * 1e6:.1f} us, "
        f"{own.ddr_bytes / 1e6:.2f} MB): with qkv_proj apart, {2 * LAYERS} dispatches, {two * 1e3:.2f} ms = "
        f"{1 / two:.1f} tok/s; ending with the next layer's norm, q, k, v and RoPE ({len(chained.launches)} launches, "
        f"{chained.seconds * 1e6:.1f} us), {LAYERS + 1} dispatches, {one * 1e3:.2f} ms = {1 / one:.1f} tok/s; "
        f"{model.FIXED_S * 1e6:.0f} us a dispatch, launch boundaries inside one "
        f"{layer.LAUNCH_BOUNDARY_S * 1e6:.0f} us (mlir-air #1653)"
    )


# The contexts of the whole-token lines (issue 53: 1k and 4k)
TOKEN_CONTEXTS = (1024, 4096)


# Llama-3.2-1B in Q4_K_M as llama.cpp's quantiser writes it (its attn_v and ffn_down in Q6_K here in every
# layer, as tests/layer_files.py writes them; llama.cpp alternates some layers in Q4_K), the tied head in Q6_K:
# the record formats each type runs as (gguf_quants: Q4_K fast mode int4_min_bf16 g32, Q6_K int8_triple g16)
Q4_K_M_MIX = dict(
    formats=("int4_min_bf16", "int4_min_bf16", "int8_triple"),
    gss=(32, 32, 16),
    qkv=((2560, "int4_min_bf16", 32), (512, "int8_triple", 16)),
    head=("int8_triple", 16),
)


def _mix(fmt: str, gs: int) -> dict:
    """One format for every weight of the token (make bench's rows)."""
    return dict(
        formats=(fmt,) * 3,
        gss=(gs,) * 3,
        qkv=((shape_of("qkv_proj")[1], fmt, gs),),
        head=(fmt, gs),
    )


def _whole_token_line(label: str, mix: dict) -> str:
    """A whole token as the NPU path builds it (MODELLED): dispatches of LAYERS_PER_DISPATCH layers
    (TokenConfig.split: the first module's launches, layer 0's norm, q, k, v, RoPE and attention, with the
    first layers' modules', each ending with the next layer's q, k, v, RoPE and attention, the last layer's
    with the final norm and the LM head: o_gemv_ffn_int4.build_token_module), and beside it one dispatch a
    module and all in one (which aircc could not compile here); the attention the longer of its DDR time
    and its compute (the kernel cost model's cycles of its calls, every position valid); mix: each weight's
    record format and group (_mix, Q4_K_M_MIX). A context the attention cannot take says so.
    """
    from int4_packed_record import attention_ddr_bytes
    from int4awq.design import layer
    from int4awq.errors import ConfigError
    from int4awq.run.generate import LAYERS_PER_DISPATCH as PER
    from int4awq.run.generate import host_transfers

    hidden, inter = shape_of("o_proj")[0], shape_of("down_proj")[0]
    parts = []
    for context in TOKEN_CONTEXTS:
        try:
            whole = layer.default_token(
                hidden,
                inter,
                LAYERS,
                mix["formats"],
                mix["gss"],
                mix["qkv"],
                layer.LLAMA_ROPE,
                context,
                (VOCAB, *mix["head"]),
            )
            # the builder refuses what the attention launch cannot hold (its L1)
            _builder_module(whole.layers[0])
        except ConfigError as e:
            parts.append(f"context {context}: not built ({e})")
            continue
        groups, modules = (
            layer.token_dispatches(whole.first, whole.layers, per) for per in (PER, 0)
        )
        token = sum(layer.modelled(g).seconds for g in groups)
        one = layer.modelled(whole).seconds
        apart = sum(layer.modelled(m).seconds for m in modules)
        ddr = attention_ddr_bytes(*layer.LLAMA_ROPE[1:], layer.LLAMA_ROPE[0], context)
        compute = layer.attention_compute_s(layer.LLAMA_ROPE, context)
        d, _, kv = layer.LLAMA_ROPE
        once, written, read = host_transfers(groups, LAYERS, kv * d)
        parts.append(
            f"context {context}: {len(groups)} dispatches of {PER} layers, {token * 1e3:.2f} ms = "
            f"{1 / token:.1f} tok/s (one a module, {len(modules)}: {apart * 1e3:.2f} ms; 1 dispatch, "
            f"not compiled here: {one * 1e3:.2f} ms; attention a layer: DDR "
            f"{ddr / model.DDR_BYTES_PER_S * 1e6:.1f} us, compute {compute * 1e6:.1f} us; host <-> NPU "
            f"a token, its buffers kept on the device: {written / 1e3:.0f} KB written, {read / 1e3:.0f} "
            f"KB read; every buffer written once first, {once / 1e6:.0f} MB)"
        )
    return (
        f"{label}: whole token, MODELLED (layer 0's norm, q, k, v, RoPE and attention, then per layer its "
        f"o_proj and FFN ending with the next layer's q, k, v, RoPE and attention, the last with the final "
        f"norm and the LM head in {mix['head'][0]}): " + "; ".join(parts)
    )


def _builder_module(cfg):
    """o_gemv_ffn_int4.build_module(cfg) (the emulator's air package where mlir-air is absent)."""
    import importlib.util

    if importlib.util.find_spec("air") is None:
        sys.path.insert(0, os.path.join(REPO, "emulator"))
    import o_gemv_ffn_int4 as builder

    return builder.build_module(cfg)


def _head_line(fmt: str, gs: int) -> str:
    """The LM head (host/run.py --layer lm_head) at Llama-3.2-1B's shape on the GEMV, one dispatch: K = the
    hidden size, N = the vocabulary, padded to whole launch iterations (MODELLED)."""
    from int4awq.design import gemv

    k, vocab = shape_of("o_proj")[0], VOCAB
    cfg = gemv.default_config(1, k, vocab, gs, fmt)
    est = gemv.modelled(cfg, 1, vocab)
    return (
        f"{fmt}: LM head, MODELLED (K {k}, vocabulary {vocab} padded to {cfg.n}; tile_n {cfg.tile_n}, "
        f"tile_k_l1 {cfg.tile_k_l1}): one dispatch, {est.seconds * 1e6:.1f} us, {est.ddr_bytes / 1e6:.1f} MB "
        f"of DDR, {est.bound}-bound"
    )


def _file_types(fmt: str) -> list[str]:
    """The GGUF block types a record format carries (gguf_quants.TYPES, the fast mode's, Q4_0, MXFP4)."""
    from int4awq.formats.gguf_quants import FAST_FORMATS, TYPES

    exact = {fast: base for base, fast in FAST_FORMATS.items()}.get(fmt, fmt)
    extra = {"awq_f16": ["Q4_0"], "mxfp4": ["MXFP4"]}.get(fmt, [])
    return extra + [t for t, spec in TYPES.items() if spec.format == exact]


def record_lines(shape: tuple[int, int] = (2048, 2048)) -> list[str]:
    """Bits per weight of the two records at q_proj's shape (the GEMM's default at M = 2048, the GEMV's at
    M = 1) beside what the weights carry: AWQ's codes, bf16 scale and 4-bit zero point per group (4 + 20 /
    GS bits; mlir-air's int4 record stores the zero point in a byte, 4 + 24 / GS), a GGUF type's own bits
    per weight (gguf's block sizes)."""
    from int4awq.design import gemv
    from int4awq.formats.gguf_quants import quant_sizes

    k, n = shape
    lines = [
        f"records at K = {k}, N = {n}, bits per weight (a record's bytes x 8 / its tile_n x tile_k_l1 "
        "weights), against what the weights carry:"
    ]
    for fmt, gs in TABLE_FORMATS:
        parts = []
        for what, make in (
            ("GEMM (M 2048)", lambda: default_config(2048, k, n, gs, fmt)[0]),
            ("GEMV (M 1)", lambda: gemv.default_config(1, k, n, gs, fmt)),
        ):
            try:
                cfg = make()
            except ConfigError as e:
                parts.append(f"{what} none ({e})")
                continue
            bpw = 8 * cfg.record_bytes / (cfg.tile_n * cfg.tile_k_l1)
            parts.append(f"{what} {bpw:.3f}")
        if fmt == "awq":
            carried = (
                f"AWQ g{gs} {4 + 20 / gs:.3f} (mlir-air's record {4 + 24 / gs:.3f})"
            )
        else:
            carried = ", ".join(
                f"{t} {8 * quant_sizes(t)[1] / quant_sizes(t)[0]:.3f}"
                for t in _file_types(fmt)
            )
        lines.append(
            f"  {fmt:<13} GS {gs:<3}: {'; '.join(parts)}; the weights: {carried}"
        )
    return lines


def decode_rows(rows: list, on_npu: bool, args) -> int:
    """The M = 1 rows (one per Llama-3.2-1B projection, the GEMV design) and one token's projections
    over 16 layers; returns the number of emulator failures."""
    from int4awq.design import gemv

    print()
    print(
        f"decode, M = 1: the GEMV design on all 32 PEs (matvec_int4_packed.py); "
        f"{'MEASURED on NPU2' if on_npu else 'MODELLED'}: time = max(DDR / {model.DDR_BYTES_PER_S / 1e9:.1f} GB/s, compute) + "
        f"{model.FIXED_S * 1e6:.0f} us per launch"
    )
    print(table_header(table_columns(DECODE_TABLE, on_npu or args.emulate, args.sim)))
    failures = 0
    for fmt, gs in TABLE_FORMATS:
        failures += _decode_format(fmt, gs, rows, on_npu, args)
    print(_whole_token_line("Q4_K_M", Q4_K_M_MIX))
    for who, tok_s in PUBLISHED_DECODE:
        print(
            f"  published, whole model: {who}: {tok_s} tok/s = {1e3 / tok_s:.1f} ms/token"
        )
    return failures


if __name__ == "__main__":
    sys.exit(main())
