"""A traffic and roofline model of NPU2 GEMM time, calibrated against mlir-air's measurements.

time = max(DDR bytes / DDR_BYTES_PER_S, 2*M*N*K / compute ceiling) + FIXED_S

Every constant is here with its source. The figures it produces are MODELLED, never measured.
"""

from __future__ import annotations

from dataclasses import dataclass

# Effective DDR bandwidth seen by large GEMMs on NPU2 and the fixed per-call overhead: fitted (RMS error
# 4.2 %) to mlir-air's ten measurements of its dense bf16-in/f32-out GEMM, herd 8x4
# (programming_examples/matrix_multiplication/bf16_in_fp32_out/README.md, kernel_registry GEMM notes),
# as collected in NPU2_FACTS.md "a traffic model calibrated against hardware".
DDR_BYTES_PER_S = 42.5e9
FIXED_S = 0.08e-3
# Compute ceiling of that dense kernel (aie::mmul<8,8,8> bf16 through bfp16 emulation): same source.
DENSE_BF16_FLOPS = 10e12

# Our kernel's ceiling, estimated from its inner loop (kernels/mv_int4_bf16.cc) relative to the dense
# kernel above, which runs the same bfp16-emulated aie::mmul<8, 8, 8> step. Per call the kernel issues
#   mmul steps      (tm/8) * (tn/8) * (tk/8)
#   dequantisation  (tn/8) * (tk/8) blocks of 64 codes: load, unpack, subtract zeros, convert, store
#   scale folds     (tm/8) * (tn/8) * folds-per-call blocks: accum out, bf16 hi, residual, bf16 lo,
#                   load c, two MACs, store
#   call overhead   CALL_OVERHEAD_OPS: entry, set_rounding, loop set-up and drain of the pipelined loops
# Counting each of those vector operations as one mmul step (a conservative assumption: they may
# co-issue on the VLIW core), the kernel runs at mmul / (mmul + extra) of the dense rate. ESTIMATED from an
# instruction count, NOT measured: replace with NPU2 measurements when they exist.
DEQUANT_OPS_PER_BLOCK = 5
FOLD_OPS_PER_BLOCK = 8
CALL_OVERHEAD_OPS = 64


def kernel_efficiency(tile_m: int, tile_n: int, tile_k: int, gs: int) -> float:
    """Share of the kernel's issue slots that are mmul steps (1.0 = the dense bf16 kernel)."""
    mmul = (tile_m // 8) * (tile_n // 8) * (tile_k // 8)
    dequant = (tile_n // 8) * (tile_k // 8) * DEQUANT_OPS_PER_BLOCK
    folds_per_call = max(tile_k // gs, 1)
    fold = (tile_m // 8) * (tile_n // 8) * folds_per_call * FOLD_OPS_PER_BLOCK
    return mmul / (mmul + dequant + fold + CALL_OVERHEAD_OPS)


def int4_kernel_flops(tile_m: int, tile_n: int, tile_k: int, gs: int, pes: int = 32) -> float:
    """Modelled compute ceiling of the int4 design on `pes` of the 32 compute tiles."""
    return DENSE_BF16_FLOPS * kernel_efficiency(tile_m, tile_n, tile_k, gs) * pes / 32


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
    return Estimate(ddr_bytes, flops, max(t_ddr, t_compute) + FIXED_S, "DDR" if t_ddr >= t_compute else "compute")


def dense_gemm_ddr_bytes(m: int, k: int, n: int, tile_m: int, tile_n: int, herd_m: int = 8, herd_n: int = 4,
                         in_bytes: int = 2, out_bytes: int = 4) -> int:
    """mlir-air's dense GEMM: each L2 block of A is read once per launch column, each of B once per row."""
    cols = -(-n // (tile_n * herd_n))
    rows = -(-m // (tile_m * herd_m))
    return m * k * in_bytes * cols + k * n * in_bytes * rows + m * n * out_bytes
