# SPDX-License-Identifier: MIT
"""A traffic and roofline model of NPU2 GEMM time, calibrated against mlir-air's measurements.

time = max(DDR bytes / DDR_BYTES_PER_S, 2*M*N*K / compute rate, refill pipeline) + FIXED_S

The refill pipeline (refill_pipeline_s) is what the compiled schedule adds to the roofline: per launch
iteration the first L2 fill and the last compute overlap nothing, and a single refill (tile_k_l2 = K) is
not double-buffered at all, so its fill and its compute follow one another.

The compute rate of the int4 GEMM comes from the kernel cost model (int4awq/design/kernel_cost.py, which builds on
this module: the dependency runs one way).

Every constant is here with its source. The figures it produces are MODELLED, never measured.
"""

from __future__ import annotations

from dataclasses import dataclass

# Effective DDR bandwidth seen by large GEMMs on NPU2 and the fixed per-call overhead: fitted (RMS error
# 4.2 %) to mlir-air's ten measurements of its dense bf16-in/f32-out GEMM, herd 8x4
# (programming_examples/matrix_multiplication/bf16_in_fp32_out/README.md, kernel_registry GEMM notes),
# tabled in docs/performance.md#calibration-against-measured-dense-gemms.
DDR_BYTES_PER_S = 42.5e9
FIXED_S = 0.08e-3
# AIE-ML v2's DMA channels and stream switch move 64 bits a cycle (AM027: "the DMA MM2S and S2MM channels
# that are 64-bit wide"; the simulator's STREAM_BYTES_PER_CYCLE): one shim channel carries at most this, so
# a fill carried by few channels is capped by its busiest channel, not by DDR.
STREAM_BYTES_PER_CYCLE = 8
# Compute ceiling of that dense kernel (aie::mmul<8,8,8> bf16 through bfp16 emulation): same source.
DENSE_BF16_FLOPS = 10e12


@dataclass(frozen=True)
class Estimate:
    ddr_bytes: int
    flops: int
    seconds: float
    bound: str  # "DDR", "compute" or "refill" (the compiled schedule's refill pipeline)

    @property
    def tops(self) -> float:
        return self.flops / self.seconds / 1e12


def estimate(
    ddr_bytes: int,
    m: int,
    k: int,
    n: int,
    flops_ceiling: float,
    pipeline_s: float = 0.0,
) -> Estimate:
    """The roofline, and, when given, the compiled schedule's refill pipeline (refill_pipeline_s) as a
    third floor: the largest of the three plus FIXED_S."""
    flops = 2 * m * k * n
    t_ddr, t_compute = ddr_bytes / DDR_BYTES_PER_S, flops / flops_ceiling
    floors = {"DDR": t_ddr, "compute": t_compute, "refill": pipeline_s}
    bound = max(floors, key=floors.get)  # ties: DDR, then compute (dict order)
    return Estimate(ddr_bytes, flops, floors[bound] + FIXED_S, bound)


def refill_pipeline_s(
    iterations: int, refills: int, fill_s: float, compute_s: float
) -> float:
    """The refill pipeline of the compiled GEMM: `iterations` launch iterations run one after another on
    the segment, each `refills` L2 refills of fill_s (DDR into L2) and compute_s (the busiest PE's calls
    on it). aircc ping-pongs the L2 buffers of a refill loop of two or more trips, so refill i + 1 fills
    while refill i computes; the first fill and the last compute of each iteration overlap nothing, and a
    single refill (tile_k_l2 = K) has one buffer: its fill, then its compute (traced in
    docs/performance.md#as-compiled)."""
    return iterations * (fill_s + (refills - 1) * max(fill_s, compute_s) + compute_s)


def dense_gemm_ddr_bytes(
    m: int,
    k: int,
    n: int,
    tile_m: int,
    tile_n: int,
    herd_m: int = 8,
    herd_n: int = 4,
    in_bytes: int = 2,
    out_bytes: int = 4,
) -> int:
    """mlir-air's dense GEMM: each L2 block of A is read once per launch column, each of B once per row."""
    cols = -(-n // (tile_n * herd_n))
    rows = -(-m // (tile_m * herd_m))
    return m * k * in_bytes * cols + k * n * in_bytes * rows + m * n * out_bytes
