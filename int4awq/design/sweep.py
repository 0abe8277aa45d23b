# SPDX-License-Identifier: MIT
"""Legal configurations of the design for a GEMM shape, ranked by the NPU2 model; the default-config table.

    python -m int4awq.design.sweep --m 2048 --k 2048 --n 2048        the ten best configurations, modelled
                                                              (only those the resource model accepts)
    python -m int4awq.design.sweep --write-table                     regenerate configs.json (Llama-3.2-1B shapes)
    python -m int4awq.design.sweep --write-table --as-compiled       the same, the model's 3 best per AWQ shape
                                                              at M <= 512 re-ranked as compiled (aircc + aiecc)

A configuration pads M and N up to whole herd blocks (the host pads A and W with zeros and drops the
extra rows and columns of C), so every shape has legal configurations; the padding costs modelled time.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import sys
from dataclasses import dataclass

from tqdm import tqdm

from .design import (
    HERD_COLS,
    HERD_ROWS,
    MAX_LAUNCH_M,
    MAX_LAUNCH_N,
    MAX_LAUNCHES,
    TILE_OPTIONS,
    DesignConfig,
)
from ..errors import ConfigError
from .llama import FUSED, PROJECTIONS, shape_of
from .kernel_cost import (
    CLOCK_HZ,
    calibration,
    int4_kernel_flops,
    kernel_cycles,
    known,
)
from .model import (
    DDR_BYTES_PER_S,
    STREAM_BYTES_PER_CYCLE,
    Estimate,
    estimate,
    refill_pipeline_s,
)
from ..kernel.record import FORMAT_GS, leaves_default_spare
from ..kernel.record import GEMM_K_CHUNKS as K_CHUNKS
from ..kernel.record import GEMM_TILES as TILES
from ..formats.quant import check_dims, check_group_size

TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs.json")

# Llama-3.2-1B projections (K = in_features, N = out_features) and the prefill lengths of the table.
LLAMA_PROJECTIONS = PROJECTIONS  # int4awq/design/llama.py
TABLE_M = (32, 128, 512, 2048)


@dataclass(frozen=True)
class Ranked:
    cfg: DesignConfig
    est: Estimate


def modelled(
    cfg: DesignConfig, m: int, n: int, estimate_kernel: bool = False
) -> Estimate:
    """Modelled NPU2 time of cfg; TOPS counted on the useful m x n, not on the padding. estimate_kernel: a
    kernel call not yet profiled is estimated from the nearest profiled one (for ranking only). The
    compiled schedule's refill pipeline (refill_pipeline) is a floor beside DDR and compute; where it
    decides, the bound is named by what its refills wait on: "compute" when a refill's calls take longer
    than its fill (the calls plus the fills nothing overlaps), else "refill".
    """
    ceiling = _ceiling(cfg, estimate_kernel)
    pipe = refill_pipeline(cfg, ceiling)
    padded = estimate(cfg.ddr_bytes(), cfg.m, cfg.k, cfg.n, ceiling, pipe.seconds)
    bound = padded.bound
    if bound == "refill" and pipe.compute_s >= pipe.fill_s:
        bound = "compute"
    return Estimate(padded.ddr_bytes, 2 * m * cfg.k * n, padded.seconds, bound)


def _ceiling(cfg: DesignConfig, estimate_kernel: bool = False) -> float:
    return int4_kernel_flops(
        cfg.tile_m,
        cfg.tile_n,
        cfg.tile_k_l1,
        cfg.gs,
        cfg.herd_m * cfg.herd_n,
        cfg.format,
        estimate_kernel,
        k=cfg.k,
    )


@dataclass(frozen=True)
class Pipeline:
    """The compiled schedule's refill pipeline of a configuration (model.refill_pipeline_s), MODELLED:
    iterations, the launch iterations (M blocks x N blocks) one after another on the segment; refills, the
    L2 refills of one (K / tile_k_l2); fill_s, one refill from DDR into L2 (at DDR_BYTES_PER_S, or its
    busiest shim channel's STREAM_BYTES_PER_CYCLE); compute_s, one refill's calls on a PE (each at least
    its operands' L1 feed); seconds, the pipeline's whole time."""

    iterations: int
    refills: int
    fill_s: float
    compute_s: float
    seconds: float


def refill_pipeline(cfg: DesignConfig, ceiling: float | None = None) -> Pipeline:
    """What the compiled schedule charges beyond the roofline (model.refill_pipeline_s). A refill brings
    herd_m pieces of A (tile_m x tile_k_l2 bf16, one shim channel each) and herd_n runs of weight
    records (tile_k_l2 / tile_k_l1 records, one shim channel each): it takes its bytes at DDR_BYTES_PER_S,
    or its busiest channel's bytes at STREAM_BYTES_PER_CYCLE, whichever is longer. A kernel call takes its
    cycles, or the time its record or A chunk takes to stream into L1, whichever is longer (the two are
    ping-ponged under the call). ceiling: the compute rate modelled() uses (int4_kernel_flops with k).
    """
    if ceiling is None:
        ceiling = _ceiling(cfg)
    pes = cfg.herd_m * cfg.herd_n
    call_cycles = pes * 2 * cfg.tile_m * cfg.tile_n * cfg.tile_k_l1 * CLOCK_HZ / ceiling
    feed_cycles = (
        max(cfg.record_bytes, cfg.tile_m * cfg.tile_k_l1 * 2) / STREAM_BYTES_PER_CYCLE
    )
    chunks = cfg.tile_k_l2 // cfg.tile_k_l1
    a_channel = cfg.tile_m * cfg.tile_k_l2 * 2
    w_channel = chunks * cfg.record_bytes
    fill_s = max(
        (cfg.herd_m * a_channel + cfg.herd_n * w_channel) / DDR_BYTES_PER_S,
        max(a_channel, w_channel) / STREAM_BYTES_PER_CYCLE / CLOCK_HZ,
    )
    compute_s = chunks * max(call_cycles, feed_cycles) / CLOCK_HZ
    iterations = (cfg.m // (cfg.tile_m * cfg.herd_m)) * (
        cfg.n // (cfg.tile_n * cfg.herd_n)
    )
    refills = cfg.k // cfg.tile_k_l2
    return Pipeline(
        iterations,
        refills,
        fill_s,
        compute_s,
        refill_pipeline_s(iterations, refills, fill_s, compute_s),
    )


# The defaults keep to the launch grids mlir-air's NPU2 lit tests run and check (8 along M:
# bf16_in_bf16_out's high_precision_drain lit, [8, 4]; 64 along N and in all: bf16's llama_8x4_gate_up
# lit, [1, 64]). Where no configuration of a shape fits them (the fused gate_up at M = 2048 takes at least
# [4, 32]), the sweep goes on to the grids llama32_1b_int4's prefill calls the GEMM with (GemmConfig's
# limits: compiled by its run_npu2_compile.lit and timed on NPU2 in its README, their output checked by no
# lit test), and grid_note says so wherever the configuration shows. Otherwise those grids are admitted
# when asked for, never chosen: the model ranks their smaller tiles slower anyway (more DDR traffic).
LIT_GRID = (8, 64, 64)
CONSUMER_GRID = (MAX_LAUNCH_M, MAX_LAUNCH_N, MAX_LAUNCHES)


def within(grid: tuple[int, int], limits: tuple[int, int, int]) -> bool:
    lm, ln = grid
    return lm <= limits[0] and ln <= limits[1] and lm * ln <= limits[2]


def grid_note(cfg: DesignConfig) -> str:
    """'' for a launch grid an NPU2 lit test runs and checks, else what vouches for it."""
    if within(cfg.launch_grid, LIT_GRID):
        return ""
    lm, ln = cfg.launch_grid
    return f"launch grid [{lm}, {ln}]: llama32_1b_int4 prefill's, not lit-tested"


def legal_configs(m: int, k: int, n: int, gs: int, fmt: str = "awq", grid=LIT_GRID):
    """Every configuration the design, the kernel and the memory budgets accept for this shape, within
    the launch grid limits `grid` (along M, along N, in all)."""
    check_dims(M=m, K=k, N=n)
    check_group_size(k, gs)
    for tm, tn, tk1, hm, hn in itertools.product(
        TILES, TILES, K_CHUNKS, range(1, HERD_COLS + 1), range(1, HERD_ROWS + 1)
    ):
        if k % tk1 or (tk1 % gs and gs % tk1):
            continue
        for tk2 in sorted({k} | {tk1 << j for j in range(8) if k % (tk1 << j) == 0}):
            try:
                cfg = DesignConfig.padded(
                    m,
                    k,
                    n,
                    gs,
                    tile_m=tm,
                    tile_n=tn,
                    tile_k_l1=tk1,
                    tile_k_l2=tk2,
                    herd_m=hm,
                    herd_n=hn,
                    format=fmt,
                )
            except ConfigError:
                continue
            if within(cfg.launch_grid, grid):
                yield cfg


# Configurations whose kernel call is profiled before the ranking is trusted: the leaders by the estimate.
PROFILE_LEADERS = 3


def _profiled(r: Ranked) -> bool:
    c = r.cfg
    return known(c.tile_m, c.tile_n, c.tile_k_l1, c.gs, None, c.format)


def ranked(m: int, k: int, n: int, gs: int, fmt: str = "awq") -> list[Ranked]:
    """Legal configurations, fastest modelled first (ties: less DDR traffic, then larger tiles).

    Kernel calls the committed profiles lack (a group size or format the table does not cover) are first
    estimated from the nearest profiled call; only the leaders are profiled (about a second each, with a
    progress bar), and the ranking is redone until its PROFILE_LEADERS leaders rest on profiles. Rows further
    down may keep an estimate (_profiled says which)."""

    def rank(rows):
        rows.sort(
            key=lambda r: (
                r.est.seconds,
                r.est.ddr_bytes,
                -r.cfg.tile_m * r.cfg.tile_n,
                -r.cfg.tile_k_l2,
            )
        )
        return rows

    def sweep(grid):
        return rank(
            [
                Ranked(cfg, modelled(cfg, m, n, estimate_kernel=True))
                for cfg in legal_configs(m, k, n, gs, fmt, grid)
            ]
        )

    out = sweep(LIT_GRID) or sweep(CONSUMER_GRID)
    while todo := [r for r in out[:PROFILE_LEADERS] if not _profiled(r)]:
        calls = {
            (r.cfg.tile_m, r.cfg.tile_n, r.cfg.tile_k_l1, r.cfg.gs, r.cfg.format)
            for r in todo
        }
        for tm, tn, tk, g, f in tqdm(
            sorted(calls), desc="profiling kernel calls", unit="call", file=sys.stderr
        ):
            kernel_cycles(tm, tn, tk, g, f)
        out = rank(
            [Ranked(r.cfg, modelled(r.cfg, m, n, estimate_kernel=True)) for r in out]
        )
    if not out:
        rows = MAX_LAUNCH_M * HERD_COLS * max(TILES)
        why = (
            f": at most {MAX_LAUNCH_M} launch iterations along M (what mlir-air's llama32_1b_int4 "
            f"prefill runs; docs/design.md#the-limits-of-what-upstream-runs) of at most {HERD_COLS} x "
            f"{max(TILES)} rows take M <= {rows}; run the rows in blocks"
            if m > rows
            else ""
        )
        raise ConfigError(
            f"no legal {fmt} configuration for M={m} K={k} N={n} GS={gs}{why}"
        )
    return out


def accepted(
    m: int, k: int, n: int, gs: int, top: int = 1, fmt: str = "awq"
) -> list[Ranked]:
    """The `top` fastest modelled configurations that the emulator's resource model also accepts
    (DMA channels, BD chains, locks, memtile placement: air.emu.resources) and that leave
    record.DEFAULT_L1_SPARE bytes of L1 free, fastest first.
    """
    out = []
    for r in ranked(m, k, n, gs, fmt):
        used = sum(size for _, size in r.cfg.l1_budget())
        if not leaves_default_spare(used) or r.cfg.resource_problem() is not None:
            continue
        out.append(r)
        if len(out) == top:
            break
    if not out:
        raise ConfigError(
            f"no {fmt} configuration for M={m} K={k} N={n} GS={gs} passes the NPU2 resource model"
        )
    return out


def load_table() -> list[dict]:
    with open(TABLE) as f:
        return json.load(f)["configs"]


def default_config(
    m: int, k: int, n: int, gs: int, fmt: str = "awq"
) -> tuple[DesignConfig, str]:
    """The configuration to use when the user gives no tiles: the table's entry, else the model's best."""
    for row in load_table():
        if (row["m"], row["k"], row["n"], row["gs"], row.get("format", "awq")) == (
            m,
            k,
            n,
            gs,
            fmt,
        ):
            if row.get("none"):
                raise ConfigError(row["none"])
            tiles = {key: row[key] for key in TILE_OPTIONS}
            return DesignConfig.padded(m, k, n, gs, **tiles, format=fmt), "configs.json"
    return (
        accepted(m, k, n, gs, fmt=fmt)[0].cfg,
        "best modelled legal configuration",
    )


# The table's rows per shape: each record format at its usual group size.
TABLE_FORMATS = tuple(FORMAT_GS.items())
# Its shapes: the seven projections, and q, k and v, and gate and up, fused along N (int4awq.formats.fuse)
TABLE_SHAPES = {**LLAMA_PROJECTIONS, **{name: shape_of(name) for name in FUSED}}


# `--write-table --as-compiled`: the model's few best configurations per AWQ shape at M <= AS_COMPILED_MAX_M
# are compiled by aircc + aiecc and timed by the simulator of the compiled design (host/bench.py
# simulated_us, MODELLED); the fastest of them goes into the table. Larger M stays the model's choice.
AS_COMPILED_MAX_M = 512
AS_COMPILED_CANDIDATES = 3


def table_row(
    m: int,
    name: str,
    k: int,
    n: int,
    fmt: str,
    gs: int,
    timer=None,
    top: int = AS_COMPILED_CANDIDATES,
) -> dict:
    """One row of the default table: the model's best accepted configuration, or, with a timer (cfg -> us
    as compiled) for an AWQ shape at M <= AS_COMPILED_MAX_M, the fastest as compiled of the model's `top`
    best (a candidate the compiler or the simulator refuses is passed over; none timed: the model's best).
    """
    row = {"projection": name, "format": fmt, "m": m, "k": k, "n": n, "gs": gs}
    try:
        rows = accepted(m, k, n, gs, top=top if timer else 1, fmt=fmt)
    except (
        ConfigError
    ) as e:  # recorded: the refusal is the table's answer for the shape
        return dict(row, none=str(e))
    best, timed = rows[0], None
    if timer is not None and fmt == "awq" and m <= AS_COMPILED_MAX_M:
        times = []
        for r in rows:
            try:
                times.append((timer(r.cfg), r))
            except Exception as e:  # the compiler's refusal, a hang: not a candidate
                print(f"{r.cfg.name}: not timed ({e})", file=sys.stderr)
        if times:
            # ties: the model's order
            us, best = min(times, key=lambda t: (round(t[0], 1), rows.index(t[1])))
            timed = (us, len(times))
    row.update({key: getattr(best.cfg, key) for key in TILE_OPTIONS})
    row.update(
        modelled_us=round(best.est.seconds * 1e6, 1),
        modelled_tops=round(best.est.tops, 3),
        ddr_mb=round(best.est.ddr_bytes / 1e6, 2),
    )
    if timed is not None:
        row.update(as_compiled_us=round(timed[0], 1), as_compiled_of=timed[1])
    return row


def write_table(path: str = TABLE, timer=None) -> None:
    """Regenerate the default table. timer (cfg -> us as compiled, MODELLED): re-rank the model's
    AS_COMPILED_CANDIDATES best per AWQ shape at M <= AS_COMPILED_MAX_M by it (table_row).
    """
    rows = [
        table_row(m, name, k, n, fmt, gs, timer)
        for m, (name, (k, n)), (fmt, gs) in itertools.product(
            TABLE_M, TABLE_SHAPES.items(), TABLE_FORMATS
        )
    ]
    note = (
        "default configurations per shape; generated by `python -m int4awq.design.sweep "
        "--write-table`; figures are MODELLED (int4awq/design/model.py), not measured"
    )
    if timer is not None:
        note += (
            f"; with --as-compiled: AWQ rows at M <= {AS_COMPILED_MAX_M} are the fastest of the model's "
            f"{AS_COMPILED_CANDIDATES} best as compiled (as_compiled_us: the simulator of the compiled "
            f"design's timed mode, MODELLED; as_compiled_of: how many candidates were timed)"
        )
    with open(path, "w") as f:
        json.dump({"note": note, "configs": rows}, f, indent=1)
        f.write("\n")


def simulated_timer():
    """cfg -> us as compiled (host/bench.py simulated_us: aircc + aiecc, then the simulator of the
    compiled design, MODELLED), or ConfigError naming why the compiler cannot run here.
    """
    from . import compiler
    from ..errors import REPO

    missing = compiler.tools_missing()
    if missing is not None:
        raise ConfigError(
            f"--as-compiled needs aircc + aiecc ({missing}); the committed table stands"
        )
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    from host.bench import simulated_us  # the host's runner: the top of the stack

    return simulated_us


def config_from_args(
    args: argparse.Namespace, m: int, k: int, n: int, gs: int
) -> tuple[DesignConfig, str]:
    """(configuration, where it came from). M and N are padded up to whole herd blocks.

    With no tile option given, the shape's entry in the default table (or the model's best legal
    configuration) is used; tile options given override it one by one.
    """
    check_dims(M=m, K=k, N=n)
    given = {
        opt: getattr(args, opt)
        for opt in TILE_OPTIONS
        if getattr(args, opt, None) is not None
    }
    stack = getattr(args, "stack_size", None)
    fmt = getattr(args, "format", "awq")
    nps = getattr(args, "n_per_segment", None)
    if nps is not None:  # the resident A is opt-in: no table entry carries it
        cfg, source = config_from_args(
            argparse.Namespace(**{**vars(args), "n_per_segment": None}), m, k, n, gs
        )
        return dataclasses.replace(cfg, n_per_segment=nps), source
    if all(opt in given for opt in TILE_OPTIONS):
        tiles, source = given, "command line"
    else:
        base, source = default_config(m, k, n, gs, fmt)
        tiles = {opt: given.get(opt, getattr(base, opt)) for opt in TILE_OPTIONS}
        if given:
            source = f"command line over {source}"
    cfg = DesignConfig.padded(m, k, n, gs, **tiles, stack_size=stack, format=fmt)
    note = grid_note(cfg)
    return cfg, f"{source}; {note}" if note else source


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--m", type=int)
    p.add_argument("--k", type=int)
    p.add_argument("--n", type=int)
    p.add_argument("--gs", type=int, default=128)
    p.add_argument("--top", type=int, default=10)
    p.add_argument("--write-table", action="store_true")
    p.add_argument(
        "--as-compiled",
        action="store_true",
        help=f"with --write-table: re-rank the model's {AS_COMPILED_CANDIDATES} best per AWQ shape at M <= "
        f"{AS_COMPILED_MAX_M} by the simulator of the compiled design (needs aircc + aiecc)",
    )
    args = p.parse_args(argv)
    try:
        if args.as_compiled and not args.write_table:
            raise ConfigError("--as-compiled goes with --write-table")
        if args.write_table:
            write_table(timer=simulated_timer() if args.as_compiled else None)
            print(f"wrote {TABLE}")
            return 0
        if None in (args.m, args.k, args.n):
            raise ConfigError("give --m --k --n (or --write-table)")
        rows = accepted(args.m, args.k, args.n, args.gs, args.top)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(
        f"the {len(rows)} fastest configurations for M={args.m} K={args.k} N={args.n} GS={args.gs} that pass "
        f"the NPU2 resource model; MODELLED NPU2 figures (int4awq/design/model.py)"
    )
    print(calibration().summary())
    print(
        f"{'tile_m':>6} {'tile_n':>6} {'tk_l1':>5} {'tk_l2':>5} {'herd':>5} {'DDR MB':>8} {'us':>9} "
        f"{'TOPS':>6} bound"
    )
    for r in rows[: args.top]:
        c = r.cfg
        print(
            f"{c.tile_m:>6} {c.tile_n:>6} {c.tile_k_l1:>5} {c.tile_k_l2:>5} {c.herd_m}x{c.herd_n:<3} "
            f"{r.est.ddr_bytes / 1e6:>8.2f} {r.est.seconds * 1e6:>9.1f} {r.est.tops:>6.3f} {r.est.bound}"
            + ("" if _profiled(r) else " (kernel estimated from a nearby profile)")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
