# SPDX-License-Identifier: MIT
"""One configuration of the AIR design: its validation, derived sizes, memory budgets and CLI options.

The builder (matmul_int4_packed.py), the host program and the Makefile all describe a run with the same
ten numbers; this module owns what they mean and which combinations are legal, so every entry point
rejects a bad one with the same message.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from dataclasses import dataclass

from ..kernel import record
from ..errors import ConfigError
from ..formats.quant import check_dims, check_group_size

from ..errors import REPO

EMULATOR_DIR = os.path.join(REPO, "emulator")
HERD_COLS, HERD_ROWS = 8, 4  # NPU2 compute array: 8 columns x 4 rows of compute tiles
MEMTILE_BYTES = 512 * 1024
MEMTILES = 8
# What mlir-air's hardware-tested GEMMs run (their NPU2 lit tests; docs/design.md#provenance), which this
# design does not go beyond:
# * the memtile BD chain of one A read stream: one BD per K-chunk of an L2 refill, twice that when the L2
#   block is ping-ponged; bf16_x_bfp16's llama_qproj lit runs 16 (tile_k_l2 / tile_k_l1 = 2048 / 128);
MAX_A_CHAIN = 16
# * the launch grid: 8 launch iterations along M (bf16_in_bf16_out's high_precision_drain lit, [8, 4]),
#   64 along N (bf16's llama_8x4_gate_up lit, [1, 64]), 64 in all.
MAX_LAUNCH_M, MAX_LAUNCH_N, MAX_LAUNCHES = 8, 64, 64
# * runtime_loop_tiling_sizes: [2, 2], except [1, 1] on a herd of fewer than 8 cores with more than one
#   launch iteration (matrix_multiplication/bfp16/run.py: there [2, 2] writes only the first launch
#   iteration's output).
SMALL_HERD_CORES = 8
# * [1, 1] tiles the launch loops by one and unrolls every launch iteration into its own shim tasks
#   (AIRDependencyScheduleOpt.cpp at e972f29, ~7504); unrolled launch iterations on NPU2 were reported
#   fine at 2, silently wrong at 4-5 and hanging at 6-8 (Xilinx/mlir-air PR #1639), and no NPU2 lit test
#   runs bfp16/run.py's [1, 1] branch: a small herd takes at most 2 launch iterations.
MAX_UNROLLED_LAUNCHES = 2


class RefillLoops:
    """The two loops aircc ping-pongs in both designs (needs k, tile_k_l1, tile_k_l2): the segment's K
    loop over L2 refills and the compute herd's chunk loop over each refill."""

    @property
    def k_refills(self) -> int:
        """Trips of the segment's K loop: L2 refills of A and W."""
        return self.k // self.tile_k_l2

    @property
    def chunks_per_l2(self) -> int:
        """Trips of the compute herd's chunk loop: kernel calls per L2 refill."""
        return self.tile_k_l2 // self.tile_k_l1

    def check_even_trips(self) -> None:
        """aircc unrolls a ping-ponged loop by 2; an odd trip count leaves a one-trip epilogue outside
        the ping-pong ring, which corrupts data on NPU2 (docs/emulator.md#odd-trip-counts). One chunk per
        refill with several refills is refused too (below)."""
        for what, trips in (
            ("tile_k_l2 / tile_k_l1", self.chunks_per_l2),
            ("K / tile_k_l2", self.k_refills),
        ):
            if trips > 1 and trips % 2:
                raise ConfigError(
                    f"{what} = {trips}: aircc ping-pongs that loop and an odd trip count leaves a "
                    "one-trip epilogue outside the ping-pong ring (docs/emulator.md#odd-trip-counts); "
                    "use an even count"
                )
        # Seen compiling the decode GEMV at K 2048, tile_k_l1 = tile_k_l2 = 256 with aircc e972f29: the
        # herd's one-trip chunk loop is not folded away but ends up as a loop of K / tile_k_l2 trips in the
        # herd, and air-label-scf-for-to-ping-pong doubles the A chunk and the record there, which the
        # design did not count (aiecc: "allocated buffers exceeded available memory").
        if self.chunks_per_l2 == 1 and self.k_refills > 1:
            raise ConfigError(
                f"tile_k_l2 = tile_k_l1 = {self.tile_k_l1} with K = {self.k}: aircc turns the K refills into "
                "a loop around the PE's one chunk and ping-pongs its L1 buffers there "
                "(docs/emulator.md#one-chunk-per-refill); use tile_k_l2 = 2 * tile_k_l1 or more"
            )


def default_gs(args) -> int:
    """--gs, else the format's usual group (record.FORMAT_GS)."""
    if args.gs is not None:
        return args.gs
    return record.FORMAT_GS[getattr(args, "format", "awq")]


def format_prefix(fmt: str) -> str:
    """The build-directory name prefix of a format ("" for AWQ, whose names predate the others)."""
    return "" if fmt == "awq" else f"{fmt}_"


def format_label(fmt: str) -> str:
    return "" if fmt == "awq" else f"{fmt.upper()} "


@dataclass(frozen=True)
class DesignConfig(record.KernelSizes, RefillLoops):
    m: int
    k: int
    n: int
    gs: int
    tile_m: int
    tile_n: int
    tile_k_l1: int
    tile_k_l2: int
    herd_m: int
    herd_n: int
    # The core's stack in L1 (XRTBackend stack_size); None: record.kernel_stack_bytes(), derived.
    stack_size: int | None = None
    format: str = "awq"  # the weights' record format (record.FORMATS)

    def __post_init__(self):
        check_dims(
            M=self.m,
            K=self.k,
            N=self.n,
            tile_m=self.tile_m,
            tile_n=self.tile_n,
            tile_k_l1=self.tile_k_l1,
            tile_k_l2=self.tile_k_l2,
            herd_m=self.herd_m,
            herd_n=self.herd_n,
        )
        check_group_size(self.k, self.gs)
        self.kernel  # the weight format's rules on the tile (record.KernelObject)
        if self.herd_m > HERD_COLS or self.herd_n > HERD_ROWS:
            raise ConfigError(
                f"herd {self.herd_m}x{self.herd_n} does not fit the NPU2 array: "
                f"herd_m <= {HERD_COLS} (columns), herd_n <= {HERD_ROWS} (compute rows)"
            )
        record.check_stack_size(self.stack_size)
        record.check_kernel_tiles(
            self.tile_m,
            self.tile_n,
            self.tile_k_l1,
            self.gs,
            self.stack_size,
            self.format,
        )  # incl. L1
        for what, size, step in (
            ("M", self.m, self.tile_m * self.herd_m),
            ("N", self.n, self.tile_n * self.herd_n),
            ("K", self.k, self.tile_k_l2),
            ("tile_k_l2", self.tile_k_l2, self.tile_k_l1),
        ):
            if size % step:
                raise ConfigError(
                    f"{what} = {size} is not a multiple of {step} ({self._step_name(what)}): the design "
                    "tiles it exactly"
                )
        self._check_proven_limits()
        l2 = self.l2_total()
        if l2 > MEMTILES * MEMTILE_BYTES:
            raise ConfigError(
                f"segment L2 needs {l2} bytes > {MEMTILES} memtiles x {MEMTILE_BYTES} "
                f"({', '.join(f'{name} {size}' for name, size in self.l2_budget())}): "
                "use a smaller tile_k_l2"
            )

    def _check_proven_limits(self):
        """Refuse what mlir-air's hardware-tested GEMMs do not run (docs/design.md#provenance)."""
        lm, ln = self.launch_grid
        if lm > MAX_LAUNCH_M or ln > MAX_LAUNCH_N or lm * ln > MAX_LAUNCHES:
            raise ConfigError(
                f"launch grid [{lm}, {ln}] (M / (tile_m * herd_m), N / (tile_n * herd_n)): mlir-air's "
                f"hardware-tested GEMMs run at most {MAX_LAUNCH_M} launch iterations along M, "
                f"{MAX_LAUNCH_N} along N and {MAX_LAUNCHES} in all; use larger tiles or herd"
            )
        if self.runtime_loop_tiling == (1, 1) and lm * ln > MAX_UNROLLED_LAUNCHES:
            raise ConfigError(
                f"a herd of {self.herd_m * self.herd_n} cores with {lm * ln} launch iterations: under "
                f"[2, 2] runtime loop tiling NPU2 writes only the first launch iteration's output on "
                f"herds under {SMALL_HERD_CORES} cores (mlir-air bfp16/run.py), and [1, 1] unrolls "
                f"every launch iteration into shim tasks, reported wrong beyond "
                f"{MAX_UNROLLED_LAUNCHES} (mlir-air PR #1639); use a herd of {SMALL_HERD_CORES} or "
                f"more cores, or larger tiles"
            )
        if self.a_chain_bds > MAX_A_CHAIN:
            raise ConfigError(
                f"tile_k_l2 / tile_k_l1 = {self.chunks_per_l2}"
                + (" (x2: the L2 block is ping-ponged)" if self.k_refills > 1 else "")
                + f" = {self.a_chain_bds} memtile BDs on each A read stream: mlir-air's hardware-tested "
                f"GEMMs chain at most {MAX_A_CHAIN}; use a smaller tile_k_l2 or a larger tile_k_l1"
            )
        self.check_even_trips()

    @staticmethod
    def _step_name(what):
        return {
            "M": "tile_m * herd_m",
            "N": "tile_n * herd_n",
            "K": "tile_k_l2",
            "tile_k_l2": "tile_k_l1",
        }[what]

    @classmethod
    def padded(
        cls,
        m: int,
        k: int,
        n: int,
        gs: int,
        stack_size: int | None = None,
        format: str = "awq",
        **tiles: int,
    ) -> "DesignConfig":
        """The configuration for an m x k x n GEMM with M and N rounded up to whole herd blocks (the host
        pads A with zero rows and W with zero columns, and drops them from C)."""
        check_dims(M=m, N=n, **tiles)
        n_step = tiles["tile_n"] * tiles["herd_n"]
        return cls(
            _round_up(m, tiles["tile_m"] * tiles["herd_m"]),
            k,
            _round_up(n, n_step),
            gs,
            **tiles,
            stack_size=stack_size,
            format=format,
        )

    # Derived sizes (record, scratch, stack and kernel object: record.KernelSizes) -------------------------
    @functools.cached_property
    def kernel(self) -> record.KernelObject:
        """The GEMM's kernel object at this tile."""
        return record.KernelObject(
            "gemm",
            self.tile_n,
            self.tile_k_l1,
            self.gs,
            self.tile_m,
            format=self.format,
        )

    @property
    def launch_grid(self) -> tuple[int, int]:
        """Launch iterations along M and N: one (M block, N block) each."""
        return (
            self.m // (self.tile_m * self.herd_m),
            self.n // (self.tile_n * self.herd_n),
        )

    @property
    def a_chain_bds(self) -> int:
        """Memtile BDs of one A read stream: a 6-D read per chunk does not fold into the 4-D BD, so one
        BD per chunk, and each of them twice when the L2 block is ping-ponged (more than one refill).
        """
        return self.chunks_per_l2 * (2 if self.k_refills > 1 else 1)

    @property
    def runtime_loop_tiling(self) -> tuple[int, int]:
        """runtime_loop_tiling_sizes as mlir-air's bfp16 GEMM chooses them (module comment above)."""
        lm, ln = self.launch_grid
        small = self.herd_m * self.herd_n < SMALL_HERD_CORES and lm * ln > 1
        return (1, 1) if small else (2, 2)

    def ddr_bytes(self) -> int:
        """Bytes the design moves between DDR and the memtiles (the emulator's counters must agree):
        A once per N block, the weights once per M block, C once.
        """
        a = self.m * self.k * 2 * (self.n // (self.tile_n * self.herd_n))
        w = (
            (self.n // self.tile_n)
            * (self.k // self.tile_k_l1)
            * self.record_bytes
            * (self.m // (self.tile_m * self.herd_m))
        )
        return a + w + self.m * self.n * 2

    @property
    def name(self) -> str:
        return format_prefix(self.format) + (
            f"m{self.m}_k{self.k}_n{self.n}_gs{self.gs}_t{self.tile_m}x{self.tile_n}"
            f"_k{self.tile_k_l1}x{self.tile_k_l2}_h{self.herd_m}x{self.herd_n}"
        )

    def summary(self) -> str:
        return format_label(self.format) + (
            f"M={self.m} K={self.k} N={self.n} GS={self.gs} tile_m={self.tile_m} tile_n={self.tile_n} "
            f"tile_k_l1={self.tile_k_l1} tile_k_l2={self.tile_k_l2} herd={self.herd_m}x{self.herd_n}"
        )

    # Budgets -----------------------------------------------------------------------------------------
    def l1_budget(self) -> list[tuple[str, int]]:
        """Per-PE L1 bytes (the kernel's rule, record.l1_budget): ping-ponged buffers count twice."""
        budget = record.l1_budget(
            self.tile_m,
            self.tile_n,
            self.tile_k_l1,
            self.gs,
            check=False,
            stack=self.stack_bytes,
            fmt=self.format,
        )
        return [(name, size) for name, size in budget.items() if name != "total"]

    def l2_budget(self) -> list[tuple[str, int]]:
        """Per-segment L2 bytes; the A and W blocks are ping-ponged when there is more than one refill
        (aircc folds a one-trip loop away, and with it the ping-pong)."""
        a = 2 * self.herd_m * self.tile_m * self.tile_k_l2
        pp = 2 if self.k_refills > 1 else 1
        return [
            (f"A block bf16 x{pp}", pp * a),
            (
                f"W records x{pp}",
                pp
                * self.herd_n
                * (self.tile_k_l2 // self.tile_k_l1)
                * self.record_bytes,
            ),
            ("C block bf16", 2 * self.herd_m * self.herd_n * self.tile_m * self.tile_n),
        ]

    def l1_total(self) -> int:
        return sum(size for _, size in self.l1_budget())

    def l2_total(self) -> int:
        return sum(size for _, size in self.l2_budget())

    def resources(self):
        """The emulator's NPU2 resource model of this configuration (an air.emu ResourceReport: DMA
        channels, BD chains, locks and memtile placement, the rules aircc must satisfy). Static: it
        traces the builder with the emulated air API and loads no kernel. Raises ConfigError when
        the resource model is not available (mlir-air's own `air` package already imported).
        """
        return static_program(self, "matmul_int4_packed").resources

    def resource_problem(self) -> str | None:
        """None when the emulator accepts this configuration statically (resource model, DMA limits,
        budgets), else its first reason, one line."""
        return resource_problem(self)

    def budget_report(self) -> str:
        lines = [f"L1 per PE: {self.l1_total()} / {record.L1_BYTES} bytes"]
        lines += [f"  {name:<22}{size:>8}" for name, size in self.l1_budget()]
        lines.append(
            f"L2 per segment: {self.l2_total()} / {MEMTILES * MEMTILE_BYTES} bytes"
        )
        lines += [f"  {name:<22}{size:>8}" for name, size in self.l2_budget()]
        return "\n".join(lines)


@functools.lru_cache(maxsize=256)
def static_program(cfg, builder: str):
    """A configuration's design (built by the builder module `builder`, at the repository root), compiled
    by the emulator for static checks only: no kernel libraries loaded."""
    air = sys.modules.get("air")
    if air is None:
        sys.path.insert(0, EMULATOR_DIR)
        import air
    if not getattr(air, "EMULATED", False):
        raise ConfigError(
            "the resource model needs the emulator's air package (emulator/), but mlir-air's "
            "own `air` is imported: run the check in a separate process"
        )
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    from importlib import import_module

    from air.emu.engine import Options, Program

    module = import_module(builder).build_module(cfg)
    return Program(module, Options(stack_size=cfg.stack_bytes, link=False), check=False)


def resource_problem(cfg) -> str | None:
    """None when the emulator accepts cfg statically (cfg.resources(): resource model, DMA limits,
    budgets), else its first reason, one line."""
    try:
        report = cfg.resources()
    except ConfigError:
        raise
    except (
        Exception
    ) as e:  # the emulator's DesignError: a static rule (DMA limits, budgets)
        if not getattr(e, "static", False):
            raise
        return str(e).splitlines()[0]
    return None if report.summary() == "resources: within limits" else report.summary()


def build_host_kernel(cfg) -> str:
    """The kernel object of a configuration (DesignConfig or GemvConfig) built for x86-64 for the emulator
    (kernel_model.build_host_kernel: kernels/Makefile host, the same -D macros as for Peano); returns the
    directory holding the library."""
    from ..kernel.kernel_model import build_host_kernel as build

    try:
        return str(build(cfg.kernel).parent)
    except RuntimeError as e:
        raise ConfigError(str(e)) from None


def _round_up(x: int, step: int) -> int:
    return -(-x // step) * step


TILE_OPTIONS = ("tile_m", "tile_n", "tile_k_l1", "tile_k_l2", "herd_m", "herd_n")


def add_design_arguments(
    parser: argparse.ArgumentParser, shape_required: bool = True
) -> None:
    parser.add_argument(
        "--m", type=int, required=shape_required, help="rows of A and C"
    )
    parser.add_argument(
        "--k", type=int, required=shape_required, help="reduction dimension"
    )
    parser.add_argument("--n", type=int, required=shape_required, help="columns of C")
    parser.add_argument(
        "--gs",
        type=int,
        default=None,
        help="group size along K (default: awq 128, int8_triple 16, the other formats 32, or the weights file's)",
    )
    parser.add_argument(
        "--format",
        choices=record.FORMATS,
        default="awq",
        help="the weights' record format: awq (q, z, bf16 s per group; also GPTQ and compressed-tensors int4), "
        "awq_f16 (the same with each scale an exact bf16 pair: fp16 scales kept exactly, GGUF Q4_0), "
        "int4_min (4-bit codes, scale and min term as exact bf16 pairs: GGUF Q4_1, Q4_K), int8 (8-bit codes, "
        "scales as exact bf16 pairs: GGUF Q5_0, Q8_0, IQ4_NL, IQ4_XS), int8_triple (the same, scales as exact "
        "triples: GGUF Q6_K), int8_min (8-bit codes with a "
        "min term, pairs: GGUF Q5_1, Q5_K), int4_min_bf16 / int8_min_bf16 (the K-quants' fast mode, a GGUF "
        "file's default for those types: one bf16 per scale and per min term, rounded) or mxfp4 (OCP MX: E2M1 "
        "codes, an E8M0 scale per 32 along K); all but awq and awq_f16 have "
        "kernel entries unproven on NPU2",
    )
    for opt in TILE_OPTIONS:
        parser.add_argument(
            f"--{opt.replace('_', '-')}",
            dest=opt,
            type=int,
            default=None,
            help="default: from int4awq/design/configs.json or the model's best for the shape",
        )
    parser.add_argument(
        "--stack-size",
        dest="stack_size",
        type=int,
        default=None,
        help=f"the core's stack in L1, bytes (default {record.kernel_stack_bytes()}, derived "
        "from what the kernel keeps live: docs/kernel.md)",
    )
