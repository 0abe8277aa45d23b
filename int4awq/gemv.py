# SPDX-License-Identifier: MIT
"""The decode design (matvec_int4_packed.py): one configuration, its rules, budgets, traffic and model.

C[M, N] = A[M, K] x dequant(W)[K, N] for M = 1 .. 32 rows on all 32 compute tiles, reading the same packed
records as the GEMM (int4awq.record, byte for byte). The array is cut into chains of `k_split` PEs along
the compute rows of a column:

    PE (x, y): column x, row y; chain c = y // k_split, position q = y % k_split
    N group g = x * (4 // k_split) + c      (32 // k_split groups of tiles_per_group N tiles each)
    K part  q: the K-chunks kc with kc % k_split == q  (interleaved; int4awq.kernel_model.k_part_chunks)

Each PE accumulates its K part of its group's N tiles; the chain adds the parts (PE q receives the
running sum of 0 .. q-1 from the PE above and passes on its own added), and the last PE of a chain
drains to bf16 and writes its columns of C to DDR. k_split is 2 or 4, never 1: the reason is in
`check_k_split` (32 separate outputs do not fit NPU2's stream channels).

Everything the builder, the host program and the bench need to know about a configuration is here, so
they reject a bad one with the same one-line message.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import sys
from dataclasses import dataclass

from . import design, model, record
from .errors import ConfigError
from .kernel_model import GEMV_MAX_M, gemv_acc_elems
from .quant import check_dims, check_group_size

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMULATOR_DIR = os.path.join(REPO, "emulator")
COLUMNS, ROWS = (
    8,
    4,
)  # the NPU2 compute array: the decode design always uses all 32 tiles
PES = COLUMNS * ROWS
K_SPLITS = (2, 4)
GEMV_AUTO_MAX_M = 8  # host/run.py picks this design by itself for M <= 8 (decode)
L1_BYTES = record.L1_BYTES
MEMTILE_BYTES = 512 * 1024

# What a configuration search tries (default_config): record tiles and K-chunks the kernel supports.
TILE_NS = (16, 32, 48, 64, 80, 96, 128)
TILE_KS = (32, 64, 128, 256, 512)


def check_k_split(k_split: int) -> None:
    if k_split not in K_SPLITS:
        raise ConfigError(
            f"k_split = {k_split}: must be 2 or 4. With 1, each of the 32 PEs would write its own C stream: NPU2 "
            "has 16 shim S2MM channels, and the memtiles' 48 S2MM are taken by the weight fills and outputs "
            "(docs/decode.md#why-k-is-always-split)"
        )


OBJECT_TILE_MS = (64, 48, 32, 16)


def object_tile_m(tile_n: int, tile_k: int, gs: int) -> int:
    """The GEMM tile_m of the kernel object a decode run links when none is given: the largest of
    OBJECT_TILE_MS with which the GEMM accepts this record tile (its tile rules and L1 budget). The record
    is the GEMM's, so a record tile no GEMM configuration can use is refused here too.
    """
    problem = None
    for tm in OBJECT_TILE_MS:
        try:
            record.check_kernel_tiles(tm, tile_n, tile_k, gs)
            return tm
        except ConfigError as e:
            problem = e  # the last, the smallest tile_m: the most lenient
    raise ConfigError(
        f"record tile {tile_n} x {tile_k} (gs {gs}): no GEMM tile_m in {list(OBJECT_TILE_MS)} "
        f"accepts it, so no object serves both designs ({problem})"
    )


@dataclass(frozen=True)
class GemvConfig(record.KernelSizes):
    m: int
    k: int
    n: int
    gs: int
    tile_n: int  # the record's N tile (the GEMM's tile_n)
    tile_k_l1: int  # the record's K-chunk (the GEMM's tile_k_l1)
    k_split: int = 2
    tile_m: int | None = (
        None  # the GEMM tile of the shared kernel object; None: object_tile_m()
    )
    stack_size: int | None = None

    def __post_init__(self):
        check_dims(
            M=self.m, K=self.k, N=self.n, tile_n=self.tile_n, tile_k_l1=self.tile_k_l1
        )
        check_group_size(self.k, self.gs)
        if self.m > GEMV_MAX_M:
            raise ConfigError(
                f"M = {self.m}: the GEMV takes 1 to {GEMV_MAX_M} rows (more rows: the GEMM)"
            )
        check_k_split(self.k_split)
        if self.tile_m is None:
            object.__setattr__(
                self, "tile_m", object_tile_m(self.tile_n, self.tile_k_l1, self.gs)
            )
        else:  # the object's GEMM entries must build and run at this tile too
            record.check_kernel_tiles(self.tile_m, self.tile_n, self.tile_k_l1, self.gs)
        record.check_stack_size(self.stack_size)
        step_n = self.groups * self.tile_n
        if self.n % step_n:
            raise ConfigError(
                f"N = {self.n} is not a multiple of {step_n} (tile_n * {self.groups} N groups): "
                "the design tiles it exactly"
            )
        step_k = self.tile_k_l1 * self.k_split
        if self.k % step_k:
            raise ConfigError(
                f"K = {self.k} is not a multiple of {step_k} (tile_k_l1 * k_split): every K part "
                "must hold the same number of K-chunks"
            )
        worst = max(
            (self.l1_budget(q) for q in range(self.k_split)), key=lambda b: b["total"]
        )
        if worst["total"] > L1_BYTES:
            parts = ", ".join(f"{k} {v}" for k, v in worst.items() if k != "total")
            raise ConfigError(
                f"the decode PE needs {worst['total']} bytes of L1 ({parts}), more than the "
                f"{L1_BYTES} a PE has: use a smaller tile_k_l1 or tile_n, k_split 2 (more N groups), or fewer rows"
            )
        if self.l2_stage_bytes() * 2 > MEMTILE_BYTES:
            raise ConfigError(
                f"a column's weight staging needs 2 x {self.l2_stage_bytes()} bytes of L2, more than "
                f"a memtile's {MEMTILE_BYTES}: use a smaller tile_n"
            )

    @classmethod
    def padded(cls, m: int, k: int, n: int, gs: int, **tiles) -> "GemvConfig":
        """N rounded up to whole N groups (the host pads W with zero columns and drops them from C)."""
        check_dims(N=n)
        k_split = tiles.get("k_split", 2)
        check_k_split(k_split)
        check_dims(tile_n=tiles["tile_n"])
        step = (PES // k_split) * tiles["tile_n"]
        return cls(m, k, -(-n // step) * step, gs, **tiles)

    # Derived sizes ---------------------------------------------------------------------------------
    @property
    def chains_per_column(self) -> int:
        return ROWS // self.k_split

    @property
    def groups(self) -> int:
        return PES // self.k_split

    @property
    def n_tiles(self) -> int:
        return self.n // self.tile_n

    @property
    def tiles_per_group(self) -> int:
        return self.n_tiles // self.groups

    @property
    def k_chunks(self) -> int:
        return self.k // self.tile_k_l1

    @property
    def steps(self) -> int:
        """K steps per PE: each brings k_split consecutive K-chunks of A and one record per N tile."""
        return self.k_chunks // self.k_split

    @property
    def acc_elems(self) -> int:
        return gemv_acc_elems(self.m, self.tile_n)

    @property
    def pes(self) -> int:
        return PES

    @property
    def name(self) -> str:
        return (
            f"gemv_m{self.m}_k{self.k}_n{self.n}_gs{self.gs}_t{self.tile_n}x{self.tile_k_l1}"
            f"_ks{self.k_split}_o{self.tile_m}"
        )

    def summary(self) -> str:
        return (
            f"GEMV M={self.m} K={self.k} N={self.n} GS={self.gs} tile_n={self.tile_n} "
            f"tile_k_l1={self.tile_k_l1} k_split={self.k_split}"
        )

    # Budgets and traffic ---------------------------------------------------------------------------
    def l1_budget(self, q: int = 0) -> dict[str, int]:
        """L1 bytes of the PE at chain position q, as the builder allocates them and aircc ping-pongs them
        (the innermost loop of more than one trip whose buffers are all first written by a DMA: the tile
        loop's record when a PE has several N tiles, else the step loop's record and A; after the K steps
        the partial sums in, except on the last PE, where the drain writes C's tile first).
        """
        tile_loop = self.tiles_per_group > 1
        pp_step = 2 if self.steps > 1 and not tile_loop else 1
        pp_record = 2 if tile_loop else pp_step
        first, last = q == 0, q == self.k_split - 1
        a_row = 2 * self.m * self.tile_k_l1
        b = {
            "record": pp_record * self.record_bytes,
            "a_own": pp_step * a_row,
            "a_rest": 0 if last else pp_step * (self.k_split - 1 - q) * a_row,
            "acc": self.tiles_per_group * 4 * self.acc_elems,
            "partial_in": (
                0
                if first
                else (2 if tile_loop and not last else 1) * 4 * self.acc_elems
            ),
            "c_out": 2 * self.m * self.tile_n if last else 0,
            "w_scratch": record.w_scratch_bytes(self.tile_n, self.tile_k_l1),
            "stack": self.stack_bytes,
        }
        b["total"] = sum(b.values())
        return b

    def l2_stage_bytes(self) -> int:
        """One column's weight staging for one step: its chains' records, one per N tile and K part."""
        return (
            self.chains_per_column
            * self.tiles_per_group
            * self.k_split
            * self.record_bytes
        )

    def ddr_bytes(self) -> int:
        """DDR traffic: every record once, A once per column (its own shim stream), C once."""
        w = self.n_tiles * self.k_chunks * self.record_bytes
        return w + COLUMNS * self.m * self.k * 2 + self.m * self.n * 2

    def budget_report(self) -> str:
        lines = []
        for q in range(self.k_split):
            b = self.l1_budget(q)
            lines.append(
                f"L1 per PE, chain position {q}: {b['total']} / {L1_BYTES} bytes"
            )
            lines += [
                f"  {name:<22}{size:>8}"
                for name, size in b.items()
                if name != "total" and size
            ]
        lines.append(
            f"L2 per column: 2 x {self.l2_stage_bytes()} bytes of weight staging (ping-pong)"
        )
        return "\n".join(lines)

    # The resource model ----------------------------------------------------------------------------
    def resources(self):
        """The emulator's NPU2 resource model of this configuration (no kernel loaded)."""
        return design.static_program(self, "matvec_int4_packed").resources

    def resource_problem(self) -> str | None:
        return design.resource_problem(self)


# ------------------------------------------------------------------------------------------ the model
@dataclass(frozen=True)
class GemvEstimate:
    ddr_bytes: int
    flops: int
    ddr_s: float  # DDR bytes / 42.5 GB/s
    compute_s: (
        float  # the busiest PE's kernel operations at the native bfp16 issue rate
    )
    seconds: float  # max(ddr_s, compute_s) + the fixed per-launch cost
    bound: str

    @property
    def tops(self) -> float:
        return self.flops / self.seconds / 1e12

    @property
    def gbps(self) -> float:
        """Effective DDR bandwidth: the bytes moved over the whole modelled time (fixed cost included)."""
        return self.ddr_bytes / self.seconds / 1e9


def tile_end_cycles(cfg: GemvConfig) -> float:
    """Per N tile outside the K loop: zero, the chain's add and the drain, counted as vector work outside
    pipelined loops at the cost model's OUTSIDE rate (per 16 floats: a store; two loads, an add and a
    store; per 8x8 block: a load, a conversion and a store per row). Estimated, not profiled.
    """
    from .kernel_cost import TERMS, calibration

    vec = cfg.acc_elems // 16
    blocks = cfg.acc_elems // 64
    ops = vec + 4 * vec + blocks * (2 + min(cfg.m, 8))
    return ops * calibration().constants[TERMS.index("OUTSIDE")]


def modelled(
    cfg: GemvConfig, m: int | None = None, n: int | None = None
) -> GemvEstimate:
    """The calibrated model (model.py: DDR bytes / 42.5 GB/s against compute, plus the fixed cost), with
    the busiest PE's cycles as the compute side: its gemv_int4_accumulate calls at the kernel cost model's
    cycles per call (int4awq/kernel_cost.py) and its tile ends. FLOPs on the real m x n when given.
    """
    from .kernel_cost import CLOCK_HZ, gemv_cycles

    m = cfg.m if m is None else m
    n = cfg.n if n is None else n
    per_call = gemv_cycles(cfg.tile_m, cfg.tile_n, cfg.tile_k_l1, cfg.gs, cfg.m)
    per_pe = cfg.steps * cfg.tiles_per_group * per_call
    per_pe += cfg.tiles_per_group * tile_end_cycles(cfg)
    compute_s = per_pe / CLOCK_HZ
    ddr = cfg.ddr_bytes()
    ddr_s = ddr / model.DDR_BYTES_PER_S
    return GemvEstimate(
        ddr,
        2 * m * cfg.k * n,
        ddr_s,
        compute_s,
        max(ddr_s, compute_s) + model.FIXED_S,
        "DDR" if ddr_s >= compute_s else "compute",
    )


# ------------------------------------------------------------------------------------------ choosing
def legal_configs(m: int, k: int, n: int, gs: int, problems: list | None = None):
    """Every configuration of the search space the rules accept; `problems` collects why the others fail."""
    check_dims(M=m, K=k, N=n)
    check_group_size(k, gs)
    if m > GEMV_MAX_M:
        raise ConfigError(
            f"M = {m}: the GEMV takes 1 to {GEMV_MAX_M} rows (more rows: the GEMM)"
        )
    for tn, tk, ks in itertools.product(TILE_NS, TILE_KS, K_SPLITS):
        if (tk % gs and gs % tk) or k % (tk * ks):
            continue
        try:
            yield GemvConfig.padded(m, k, n, gs, tile_n=tn, tile_k_l1=tk, k_split=ks)
        except ConfigError as e:
            if problems is not None:
                problems.append(f"{tn}x{tk} k_split {ks}: {e}")


def _emulator_in_process() -> bool:
    air = sys.modules.get("air")
    return air is None or getattr(air, "EMULATED", False)


@functools.lru_cache(maxsize=64)
def default_config(m: int, k: int, n: int, gs: int) -> GemvConfig:
    """The fastest modelled configuration the resource model accepts (ties: less DDR traffic, fewer kernel
    calls, then larger tiles). With mlir-air's own `air` imported (an NPU compile), the resource model
    runs in a child process on the emulator's package."""
    if not _emulator_in_process():
        return _default_in_child(m, k, n, gs)
    problems = []
    ranked = sorted(
        legal_configs(m, k, n, gs, problems),
        key=lambda c: (
            round(modelled(c, m, n).seconds, 9),
            c.ddr_bytes(),
            c.steps * c.tiles_per_group,
            -c.tile_n * c.tile_k_l1,
            c.k_split,
        ),
    )
    for cfg in ranked:
        if cfg.resource_problem() is None:
            return cfg
    if not ranked:
        raise ConfigError(
            f"no decode configuration for M={m} K={k} N={n} GS={gs} fits"
            + (f" (e.g. {problems[0]})" if problems else "")
        )
    raise ConfigError(
        f"no decode configuration for M={m} K={k} N={n} GS={gs} passes the NPU2 resource model "
        f"(the fastest: {ranked[0].resource_problem()})"
    )


def _default_in_child(m: int, k: int, n: int, gs: int) -> GemvConfig:
    import json
    import subprocess

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([EMULATOR_DIR, REPO]))
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "int4awq.gemv",
            "--m",
            str(m),
            "--k",
            str(k),
            "--n",
            str(n),
            "--gs",
            str(gs),
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    if res.returncode:
        raise ConfigError(
            (res.stderr.strip().splitlines() or ["the configuration search failed"])[
                -1
            ].removeprefix("error: ")
        )
    return GemvConfig(**json.loads(res.stdout))


def main(argv=None) -> int:
    """python -m int4awq.gemv --m 1 --k 2048 --n 2048: the default decode configuration and its model."""
    import json

    p = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    for dim in ("m", "k", "n"):
        p.add_argument(f"--{dim}", type=int, required=True)
    p.add_argument("--gs", type=int, default=128)
    p.add_argument(
        "--json",
        action="store_true",
        help="the configuration as JSON (GemvConfig fields)",
    )
    args = p.parse_args(argv)
    from int4awq import (
        gemv,
    )  # run as __main__: use the package's module, the one the builder imports

    try:
        cfg = gemv.default_config(args.m, args.k, args.n, args.gs)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({f: getattr(cfg, f) for f in cfg.__dataclass_fields__}))
        return 0
    est = gemv.modelled(cfg, args.m, args.n)
    print(cfg.summary())
    print(
        f"MODELLED: DDR {est.ddr_bytes / 1e6:.2f} MB in {est.ddr_s * 1e6:.1f} us, compute {est.compute_s * 1e6:.1f} us, "
        f"{est.seconds * 1e6:.1f} us with the fixed cost, {est.gbps:.1f} GB/s, {est.bound}-bound"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())


def config_from_args(
    args: argparse.Namespace, m: int, k: int, n: int, gs: int
) -> tuple[GemvConfig, str]:
    """(configuration, where it came from): the options given (--tile-n, --tile-k-l1, --k-split, --tile-m,
    --stack-size) over the default for the shape."""
    check_dims(M=m, K=k, N=n)
    given = {
        key: getattr(args, key, None)
        for key in ("tile_n", "tile_k_l1", "k_split", "tile_m", "stack_size")
    }
    given = {key: v for key, v in given.items() if v is not None}
    if m > GEMV_MAX_M:
        raise ConfigError(
            f"M = {m}: the GEMV takes 1 to {GEMV_MAX_M} rows (more rows: the GEMM)"
        )
    base = default_config(m, k, n, gs)
    if not given:
        return base, "best modelled decode configuration"
    tiles = dict(
        tile_n=base.tile_n, tile_k_l1=base.tile_k_l1, k_split=base.k_split
    )  # tile_m: the record's own
    tiles.update(given)
    source = (
        "command line"
        if {"tile_n", "tile_k_l1", "k_split"} <= set(given)
        else "command line over the best modelled decode configuration"
    )
    return GemvConfig.padded(m, k, n, gs, **tiles), source
