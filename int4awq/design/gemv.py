# SPDX-License-Identifier: MIT
"""The decode design (matvec_int4_packed.py): one configuration, its rules, budgets, traffic and model.

C[M, N] = A[M, K] x dequant(W)[K, N] for M = 1 .. 32 rows on all 32 compute tiles, reading the same packed
records as the GEMM (int4awq.kernel.record, byte for byte). It is the GEMM's structure (mlir-air's bf16 x bfp16
GEMM: plain L2 fills, a segment-wide accumulator in three same-named herds, a drain through L2) with the
herd laid over N only: every PE takes all M rows and its own N tile, all of K.

    launch iteration bn: N tiles bn*32 .. bn*32 + 31;  PE (x, y): N tile bn*32 + x*4 + y

Everything the builder, the host program and the bench need to know about a configuration is here, so
they reject a bad one with the same one-line message.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import os
import sys
from dataclasses import dataclass

from . import design
from . import model
from ..kernel import record
from .kernel_cost import CLOCK_HZ, TERMS, calibration, gemv_cycles
from ..errors import ConfigError, REPO
from ..formats.quant import check_dims, check_group_size

from int4_packed_record import (  # the decode design's rules, beside its builder
    COLUMNS,
    GEMV_MAX_M,
    L1_BYTES,
    MEMTILE_BYTES,
    PES,
    ROWS,
    gemv_acc_elems,
)
from int4_packed_record import GemvConfig as GemvConfigCore

EMULATOR_DIR = os.path.join(REPO, "emulator")
# host/run.py picks this design by itself for M <= 8 (decode). Not 32: as compiled (issue 52), the GEMM at
# 256 of K per refill is within 3 % for gate / up and faster for q, k, v, o and down at M = 32 once the simulator
# dates a lock acquire by its tokens (docs/performance.md#small-m-the-refill-pipeline).
GEMV_AUTO_MAX_M = 8


@dataclass(frozen=True)
class GemvConfig(GemvConfigCore):
    """A decode configuration (the example's GemvConfig: fields, rules, budgets) with what the tools add:
    the padded shape, DDR traffic, names, the emulator's resource model."""

    @classmethod
    def padded(cls, m: int, k: int, n: int, gs: int, **tiles) -> "GemvConfig":
        """N rounded up to whole launch iterations of 32 N tiles (the host pads W with zero columns and
        drops them from C)."""
        check_dims(N=n, tile_n=tiles["tile_n"])
        step = PES * tiles["tile_n"]
        return cls(m, k, -(-n // step) * step, gs, **tiles)

    @property
    def name(self) -> str:
        return design.format_prefix(self.format) + (
            f"gemv_m{self.m}_k{self.k}_n{self.n}_gs{self.gs}_t{self.tile_n}x{self.tile_k_l1}"
            f"x{self.tile_k_l2}"
        )

    def summary(self) -> str:
        return design.format_label(self.format) + (
            f"GEMV M={self.m} K={self.k} N={self.n} GS={self.gs} tile_n={self.tile_n} "
            f"tile_k_l1={self.tile_k_l1} tile_k_l2={self.tile_k_l2}"
        )

    def ddr_bytes(self) -> int:
        """DDR traffic: every record once, A once per column and launch iteration (each column's memtile
        holds its own copy), C once."""
        w = self.n_tiles * self.k_chunks * self.record_bytes
        return w + COLUMNS * self.launch_n * self.m * self.k * 2 + self.m * self.n * 2

    def budget_report(self) -> str:
        b = self.l1_budget()
        lines = [f"L1 per PE: {b['total']} / {L1_BYTES} bytes"]
        lines += [
            f"  {name:<22}{size:>8}"
            for name, size in b.items()
            if name != "total" and size
        ]
        lines.append(
            f"L2 per column: {self.l2_column_bytes()} / {MEMTILE_BYTES} bytes (A, records, C)"
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
    """Per N tile outside the K loop: zero and drain, counted as vector work outside pipelined loops at
    the cost model's OUTSIDE rate (per 16 floats: a store; per 8x8 block: a load, a conversion and a
    store per row). Estimated, not profiled.
    """
    vec = cfg.acc_elems // 16
    blocks = cfg.acc_elems // 64
    ops = vec + blocks * (2 + min(cfg.m, 8))
    return ops * calibration().constants[TERMS.index("OUTSIDE")]


def modelled(
    cfg: GemvConfig, m: int | None = None, n: int | None = None
) -> GemvEstimate:
    """The calibrated model (model.py: DDR bytes / 42.5 GB/s against compute, plus the fixed cost), with
    the busiest PE's cycles as the compute side: its gemv_int4_accumulate calls at the kernel cost model's
    cycles per call (int4awq/design/kernel_cost.py) and its tile ends. FLOPs on the real m x n when given.
    """
    m = cfg.m if m is None else m
    n = cfg.n if n is None else n
    per_call = gemv_cycles(cfg.tile_n, cfg.tile_k_l1, cfg.gs, cfg.m, cfg.format)
    per_pe = cfg.launch_n * (cfg.k_chunks * per_call + tile_end_cycles(cfg))
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
def legal_configs(
    m: int, k: int, n: int, gs: int, problems: list | None = None, fmt: str = "awq"
):
    """Every configuration of the search space the rules accept; `problems` collects why the others fail."""
    check_dims(M=m, K=k, N=n)
    check_group_size(k, gs)
    if m > GEMV_MAX_M:
        raise ConfigError(
            f"M = {m}: the GEMV takes 1 to {GEMV_MAX_M} rows (more rows: the GEMM)"
        )
    for tn, tk in itertools.product(record.GEMV_TILE_NS, record.GEMV_TILE_KS):
        if (tk % gs and gs % tk) or k % tk:
            continue
        for tk2 in sorted({k} | {tk << j for j in range(8) if k % (tk << j) == 0}):
            try:
                yield GemvConfig.padded(
                    m, k, n, gs, tile_n=tn, tile_k_l1=tk, tile_k_l2=tk2, format=fmt
                )
            except ConfigError as e:
                if problems is not None:
                    problems.append(f"{tn}x{tk}/{tk2}: {e}")


def _emulator_in_process() -> bool:
    air = sys.modules.get("air")
    return air is None or getattr(air, "EMULATED", False)


@functools.lru_cache(maxsize=64)
def default_config(m: int, k: int, n: int, gs: int, fmt: str = "awq") -> GemvConfig:
    """The fastest modelled configuration the resource model accepts and that leaves
    record.DEFAULT_L1_SPARE bytes of L1 free (ties: less DDR traffic, fewer kernel calls, then larger
    tiles). With mlir-air's own `air` imported (an NPU compile), the resource model
    runs in a child process on the emulator's package."""
    if not _emulator_in_process():
        return _default_in_child(m, k, n, gs, fmt)
    problems = []
    ranked = sorted(
        legal_configs(m, k, n, gs, problems, fmt),
        key=lambda c: (
            round(modelled(c, m, n).seconds, 9),
            c.ddr_bytes(),
            c.launch_n * c.k_chunks,
            -c.tile_n * c.tile_k_l1,
            -c.tile_k_l2,
        ),
    )
    if not ranked:
        raise ConfigError(
            f"no {fmt} decode configuration for M={m} K={k} N={n} GS={gs} fits"
            + (f" (e.g. {problems[0]})" if problems else "")
        )
    roomy = [c for c in ranked if record.leaves_default_spare(c.l1_budget()["total"])]
    if not roomy:
        raise ConfigError(
            f"no {fmt} decode configuration for M={m} K={k} N={n} GS={gs} leaves "
            f"{record.DEFAULT_L1_SPARE} bytes of L1 free (the fastest takes "
            f"{ranked[0].l1_budget()['total']}); give the tiles to use one that fits without the spare"
        )
    ranked = roomy
    for cfg in ranked:
        if cfg.resource_problem() is None:
            return cfg
    raise ConfigError(
        f"no {fmt} decode configuration for M={m} K={k} N={n} GS={gs} passes the NPU2 resource model "
        f"(the fastest: {ranked[0].resource_problem()})"
    )


def _default_in_child(m: int, k: int, n: int, gs: int, fmt: str) -> GemvConfig:
    import json
    import subprocess

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([EMULATOR_DIR, REPO]))
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "int4awq.design.gemv",
            "--m",
            str(m),
            "--k",
            str(k),
            "--n",
            str(n),
            "--gs",
            str(gs),
            "--format",
            fmt,
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
    """python -m int4awq.design.gemv --m 1 --k 2048 --n 2048: the default decode configuration and its model."""
    import json

    p = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    for dim in ("m", "k", "n"):
        p.add_argument(f"--{dim}", type=int, required=True)
    p.add_argument("--gs", type=int, default=128)
    p.add_argument("--format", choices=record.FORMATS, default="awq")
    p.add_argument(
        "--json",
        action="store_true",
        help="the configuration as JSON (GemvConfig fields)",
    )
    args = p.parse_args(argv)
    # run as __main__: use the package's module, the one the builder imports
    from int4awq.design import gemv

    try:
        cfg = gemv.default_config(args.m, args.k, args.n, args.gs, args.format)
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
    """(configuration, where it came from): the options given (--tile-n, --tile-k-l1, --tile-k-l2,
    --stack-size) over the default for the shape."""
    check_dims(M=m, K=k, N=n)
    given = {
        key: getattr(args, key, None)
        for key in ("tile_n", "tile_k_l1", "tile_k_l2", "stack_size")
    }
    given = {key: v for key, v in given.items() if v is not None}
    if m > GEMV_MAX_M:
        raise ConfigError(
            f"M = {m}: the GEMV takes 1 to {GEMV_MAX_M} rows (more rows: the GEMM)"
        )
    fmt = getattr(args, "format", "awq")
    label = "best modelled decode configuration"
    if {"tile_n", "tile_k_l1", "tile_k_l2"} <= set(given):  # no search needed
        return GemvConfig.padded(m, k, n, gs, **given, format=fmt), "command line"
    base = default_config(m, k, n, gs, fmt)
    if not given:
        return base, label
    tiles = dict(tile_n=base.tile_n, tile_k_l1=base.tile_k_l1)
    if "tile_k_l1" not in given:  # a new K-chunk takes K per refill with it
        tiles["tile_k_l2"] = base.tile_k_l2
    tiles.update(given)
    return (
        GemvConfig.padded(m, k, n, gs, **tiles, format=fmt),
        f"command line over the {label}",
    )
