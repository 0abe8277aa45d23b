# SPDX-License-Identifier: MIT
"""One configuration of the AIR design as the tools see it, and its CLI options.

The builder (matmul_int4_packed.py), the host program and the Makefile all describe a run with the same
ten numbers. What they mean and which combinations are legal is the example's (int4_packed_record.py,
GemmConfig), so every entry point rejects a bad one with the same message; DesignConfig adds what the tools
need beside it (padding, DDR traffic, names, the emulator's resource model).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from dataclasses import dataclass

from ..kernel import record
from ..errors import ConfigError
from ..formats.quant import check_dims
from ..errors import REPO

from int4_packed_record import (  # the GEMM's rules, beside its builder
    HERD_COLS,
    HERD_ROWS,
    MAX_A_CHAIN,
    MAX_LAUNCH_M,
    MAX_LAUNCH_N,
    MAX_LAUNCHES,
    MAX_UNROLLED_LAUNCHES,
    MEMTILE_BYTES,
    MEMTILES,
    SMALL_HERD_CORES,
    GemmConfig,
    RefillLoops,
)

EMULATOR_DIR = os.path.join(REPO, "emulator")


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
class DesignConfig(GemmConfig):
    """A GEMM configuration (the example's GemmConfig: fields, rules, budgets) with what the tools add: the
    padded shape of a weight, the DDR traffic, names, the emulator's resource model."""

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

    def ddr_bytes(self) -> int:
        """Bytes the design moves between DDR and the memtiles (the emulator's counters must agree):
        A once per launch iteration along N (each N block, or each n_per_segment N blocks with A
        resident), the weights once per M block, C once.
        """
        a = self.m * self.k * 2 * self.launch_grid[1]
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
            + (f"_nps{self.n_per_segment}" if self.n_per_segment > 1 else "")
        )

    def summary(self) -> str:
        return format_label(self.format) + (
            f"M={self.m} K={self.k} N={self.n} GS={self.gs} tile_m={self.tile_m} tile_n={self.tile_n} "
            f"tile_k_l1={self.tile_k_l1} tile_k_l2={self.tile_k_l2} herd={self.herd_m}x{self.herd_n}"
            + (f" n_per_segment={self.n_per_segment}" if self.n_per_segment > 1 else "")
        )

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

    module = import_module(builder).build_module(**cfg.builder_args())
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
        "--n-per-segment",
        dest="n_per_segment",
        type=int,
        default=None,
        help="N blocks a segment walks with its rows of A resident in L2, re-sent by mlir-air's refeed "
        "primitive (default 1; novel, unproven on NPU2: docs/design.md#a-resident-across-n-blocks-n_per_segment)",
    )
    parser.add_argument(
        "--stack-size",
        dest="stack_size",
        type=int,
        default=None,
        help=f"the core's stack in L1, bytes (default {record.kernel_stack_bytes()}, derived "
        "from what the kernel keeps live: docs/kernel.md)",
    )
