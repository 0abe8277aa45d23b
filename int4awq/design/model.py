# SPDX-License-Identifier: MIT
"""A traffic and roofline model of NPU2 GEMM time, calibrated against mlir-air's measurements.

time = max(DDR bytes / DDR_BYTES_PER_S, 2*M*N*K / compute rate) + FIXED_S

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
# Compute ceiling of that dense kernel (aie::mmul<8,8,8> bf16 through bfp16 emulation): same source.
DENSE_BF16_FLOPS = 10e12


@dataclass(frozen=True)
class Estimate:
    ddr_bytes: int
    flops: int
    seconds: float
    bound: str  # "DDR" or "compute"

    @property
    def tops(self) -> float:
        return self.flops / self.seconds / 1e12


def estimate(ddr_bytes: int, m: int, k: int, n: int, flops_ceiling: float) -> Estimate:
    flops = 2 * m * k * n
    t_ddr, t_compute = ddr_bytes / DDR_BYTES_PER_S, flops / flops_ceiling
    return Estimate(
        ddr_bytes,
        flops,
        max(t_ddr, t_compute) + FIXED_S,
        "DDR" if t_ddr >= t_compute else "compute",
    )


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
