# SPDX-License-Identifier: MIT
"""A traffic and roofline model of NPU2 GEMM time, calibrated against mlir-air's measurements.

time = max(DDR bytes / DDR_BYTES_PER_S, 2*M*N*K / compute ceiling) + FIXED_S

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

# Compute ceiling of a GEMM whose kernel runs the native bfp16ebs8 x bfp16ebs8 8x8x8 mmul (512 MAC per
# instruction, no operand conversion in the hot loop): IRON's asymmetric-tile-buffering bfp16 x bfp16 GEMM
# measured 31.3 TFLOPS on NPU2 (Xilinx/mlir-aie programming_examples/ml/block_datatypes/
# gemm_asymmetric_tile_buffering/README.md; docs/hardware.md#measured-throughput-anchors). A measured whole-design figure,
# so a lower bound of that kernel's own rate.
NATIVE_BFP16_FLOPS = 31.3e12

# Our kernel's ceiling, estimated from its inner loop (kernels/mv_int4_bf16.cc) relative to that native
# bfp16 kernel, whose hot loop is the same one: block-stream pops and bfp16ebs8 x bfp16ebs8 macs on a 2x2
# block of accumulators. Per call the kernel issues
#   mmul steps      (tm/8) * (tn/8) * (tk/8)   four pops and four macs per 2x2 step (pops co-issue)
#   dequantisation  (tn/8) * (tk/8) blocks of 64 codes: half a 64-byte load, unpack and zero subtraction,
#                   to_float, 8x8 transpose, accfloat, conversion to bfp16ebs8, push
#   A conversion    (tm/8) * (tk/8) blocks, once per call: load, accfloat, conversion to bfp16ebs8, push
#   stream set-up   (tm/16) * (tn/16) times four block streams
#   scale folds     (tm/8) * (tn/8) * folds-per-call blocks: accum out, bf16 hi, residual, bf16 lo,
#                   load c, two MACs, store
#   call overhead   CALL_OVERHEAD_OPS: entry, set_rounding, loop set-up and drain of the pipelined loops
# Counting each of those vector operations as one mmul step (a conservative assumption: they may
# co-issue on the VLIW core), the kernel runs at mmul / (mmul + extra) of the native rate. ESTIMATED from an
# instruction count, NOT measured: replace with NPU2 measurements when they exist.
DEQUANT_OPS_PER_BLOCK = 7
A_CONVERT_OPS_PER_BLOCK = 4
STREAM_SETUP_OPS = 4
FOLD_OPS_PER_BLOCK = 8
CALL_OVERHEAD_OPS = 64


def kernel_efficiency(tile_m: int, tile_n: int, tile_k: int, gs: int) -> float:
    """Share of the kernel's issue slots that are mmul steps (1.0 = the native bfp16 kernel)."""
    mmul = (tile_m // 8) * (tile_n // 8) * (tile_k // 8)
    dequant = (tile_n // 8) * (tile_k // 8) * DEQUANT_OPS_PER_BLOCK
    a_convert = (tile_m // 8) * (tile_k // 8) * A_CONVERT_OPS_PER_BLOCK
    streams = (tile_m // 16) * (tile_n // 16) * STREAM_SETUP_OPS
    folds_per_call = max(tile_k // gs, 1)
    fold = (tile_m // 8) * (tile_n // 8) * folds_per_call * FOLD_OPS_PER_BLOCK
    return mmul / (mmul + dequant + a_convert + streams + fold + CALL_OVERHEAD_OPS)


def int4_kernel_flops(
    tile_m: int, tile_n: int, tile_k: int, gs: int, pes: int = 32
) -> float:
    """Modelled compute ceiling of the int4 design on `pes` of the 32 compute tiles."""
    return NATIVE_BFP16_FLOPS * kernel_efficiency(tile_m, tile_n, tile_k, gs) * pes / 32


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
