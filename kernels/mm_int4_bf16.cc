// SPDX-License-Identifier: MIT
//===- mm_int4_bf16.cc - int4 weight GEMM entries for AIE2P (aie_api) -----===//
//
// The GEMM's entries (zero_vectorized_f32_mn, matmul_int4_bf16_packed_f32,
// f32_to_bf16_mn) over int4_kernel.h, which says what they compute and how.
// Built per tile by kernels/Makefile ENTRIES=gemm (-DDIM_M, -DDIM_N,
// -DDIM_K_CHUNK, -DDIM_GS and the format's macros).
//
//===----------------------------------------------------------------------===//

#include "int4_kernel.h"

#if !defined(DIM_M)
#error "define the tile's rows: -DDIM_M=<tile_m>"
#endif

namespace {
constexpr unsigned TM = DIM_M; // rows of A and C per PE
static_assert(TM > 0 && TM % 16 == 0,
              "DIM_M (tile_m) must be a positive multiple of 16: the kernel "
              "works on 2x2 blocks of 8x8 mmul tiles");
static_assert(TM * TK * 2 <= 65536 && TM * TN * 4 <= 65536,
              "tile larger than a PE's 64 KiB data memory");
constexpr unsigned MB = TM / 8; // 8-row blocks of A / C
// The accumulator's block (mb, nb) of C: column-block outer, as mlir-air's
// bf16_x_bfp16 lays its C, so that the drain DMA's read (rows of a column
// block, then column blocks) folds into the compute tile's 3 BD dimensions.
constexpr unsigned C_COL = MB * BLK; // floats from block (mb, nb) to (mb, nb+1)
constexpr unsigned C_ROW = BLK;      // floats from block (mb, nb) to (mb+1, nb)
} // namespace

extern "C" {

// c_mem: the accumulator, DIM_M * DIM_N floats, blocked: block (mb, nb) of C
// at (nb * DIM_M/8 + mb) * 64, row-major inside.
void zero_vectorized_f32_mn(bfloat16 *__restrict c_mem) {
  KERNEL_ALIGNED(c_mem);
  float *__restrict c_acc = reinterpret_cast<float *>(c_mem);
  const aie::vector<float, 16> z = aie::zeros<float, 16>();
  // live: 1 vec, 0 acc
  AIE_LOOP_MIN_ITERATION_COUNT(16)
  for (unsigned i = 0; i < TM * TN; i += 16) {
    KERNEL_ITERATION;
    aie::store_v(c_acc + i, z);
  }
}

// w_record: one packed record (RECORD_BYTES); a_tile: DIM_M x DIM_K_CHUNK bf16
// in 8x8 blocks, block (mb, kb) at (mb * DIM_K_CHUNK/8 + kb) * 64, row-major
// inside; c_mem: the accumulator (as zero_vectorized_f32_mn); w_scratch:
// SCRATCH_BYTES bytes (kernel-private; holds bfp16 block lines, see above).
void matmul_int4_bf16_packed_f32(uint8_t *__restrict w_record,
                                 bfloat16 *__restrict a_tile,
                                 bfloat16 *__restrict c_mem,
                                 uint8_t *__restrict w_scratch) {
  KERNEL_ALIGNED(w_record);
  KERNEL_ALIGNED(a_tile);
  KERNEL_ALIGNED(c_mem);
  KERNEL_ALIGNED(w_scratch);
  ::aie::set_rounding(aie::rounding_mode::INT4_A_ROUNDING);
  float *__restrict c_acc = reinterpret_cast<float *>(c_mem);
  uint8_t *__restrict scratch = w_scratch;
  if constexpr (!CODES8)
    dequantize(w_record, scratch);

  const bfloat16 *__restrict scales =
      reinterpret_cast<const bfloat16 *>(w_record + S_OFFSET);
  const aie::vector<bfloat16, 64> ones = aie::broadcast<bfloat16, 64>(1.0f);
  // live: 9 vec, 5 acc
  for (unsigned mb = 0; mb < MB; mb += 2) {
    // A rows 8mb .. 8mb+15 -> the A pair line, in a loop of their own: two
    // conversions live, one output stream (with MIN_TERM also the two blocks'
    // row sums: two more mmul accumulators). A is read by index (no pointer
    // walk: mlir-air's mm_bf16_x_bfp16.cc does the same to avoid a Peano
    // post-increment bug).
    {
      const bfloat16 *__restrict pa0 = a_tile + mb * KB * BLK;
      const bfloat16 *__restrict pa1 = pa0 + KB * BLK;
      // live: 8 vec, 3 acc
      AIE_LOOP_MIN_ITERATION_COUNT(1)
      for (unsigned f = 0; f < NF; ++f) {
        KERNEL_ITERATION;
        // Streams per span: pushes counted from here (static fills); the
        // span's 2 * SB pushes padded to whole words (A_SPAN_STRIDE).
        BlockOut ao(blocks_at(scratch, A_LINE_OFFSET + f * A_SPAN_STRIDE));
        RowSums<MIN_TERM> r0, r1;
        BLOCKS last;
        const auto step = [&](unsigned kb) {
          const unsigned at = (f * SB + kb) * BLK;
          // With a min term the row sums' mmuls hold the MAC slot, so the
          // second block takes the plain conversion too.
          const BLOCKS a0 = to_blocks(pa0 + at);
          const BLOCKS a1 =
              MIN_TERM ? to_blocks(pa1 + at) : to_blocks_on_mac(pa1 + at, ones);
          ao << a0 << a1;
          r0.add(a0);
          r1.add(a1);
          last = a1;
        };
        if constexpr (KB_UNROLLED) {
          // live: 8 vec, 3 acc
          AIE_LOOP_UNROLL_FULL
          for (unsigned kb = 0; kb < SB; ++kb)
            step(kb);
        } else {
          // live: 8 vec, 3 acc
          AIE_LOOP_MIN_ITERATION_COUNT(2)
          for (unsigned kb = 0; kb < SB; ++kb) {
            KERNEL_ITERATION;
            step(kb);
          }
        }
        pad_to_words<2 * SB>(ao, last);
        r0.store(row_sums_at(scratch, f, 0));
        r1.store(row_sums_at(scratch, f, 1));
      }
    }
    // Every column pair reads the A pair line: two input streams, pops and
    // macs only.
    // live: 9 vec, 5 acc
    AIE_PREPARE_FOR_POSTPIPELINING
    AIE_LOOP_MIN_ITERATION_COUNT(1)
    for (unsigned p = 0; p < NP; ++p) {
      KERNEL_ITERATION;
      float *__restrict c00 = c_acc + 2 * p * C_COL + mb * C_ROW;
      // live: 9 vec, 5 acc
      for (unsigned f = 0; f < NF; ++f) {
        // Two streams per span, each walking its interleaved line in K order.
        BlockIn sa(blocks_at(scratch, A_LINE_OFFSET + f * A_SPAN_STRIDE));
        BlockIn sb(w_line(w_record, scratch, p, f));
        MMUL g00 = span_start(c00), g01 = span_start(c00 + C_COL),
             g10 = span_start(c00 + C_ROW),
             g11 = span_start(c00 + C_COL + C_ROW);
        const auto step = [&](unsigned) {
          const BLOCKS a0 = sa.pop();
          const BLOCKS a1 = sa.pop();
          const BLOCKS b0 = sb.pop();
          const BLOCKS b1 = sb.pop();
          g00.mac(a0, aie::op_transpose(b0));
          g01.mac(a0, aie::op_transpose(b1));
          g10.mac(a1, aie::op_transpose(b0));
          g11.mac(a1, aie::op_transpose(b1));
        };
        if constexpr (KB_UNROLLED) {
          // live: 6 vec, 4 acc
          AIE_LOOP_UNROLL_FULL
          for (unsigned kb = 0; kb < SB; ++kb)
            step(kb);
        } else {
          // live: 6 vec, 4 acc
          AIE_LOOP_MIN_ITERATION_COUNT(2)
          for (unsigned kb = 0; kb < SB; ++kb) {
            KERNEL_ITERATION;
            step(kb);
          }
        }
        span_end_2x2(g00, g01, g10, g11, scales + f * TN + p * 16,
                     row_sums_at(scratch, f, 0), row_sums_at(scratch, f, 1),
                     c00, C_COL, C_ROW);
      }
    }
  }
}

// c_mem: the accumulator (as zero_vectorized_f32_mn) -> its first DIM_M * DIM_N
// * 2 bytes: the same 8x8 blocks of C in bf16, in the same order, round to
// nearest even; the drain DMA un-blocks them. Novel: no upstream kernel drains
// in place (docs/design.md#provenance). One 64-lane load, conversion and store
// per block, in place: bf16 block j (bytes 128 j .. 128 j + 127) lands inside
// f32 block j / 2 <= j, already read, and below every block still to be read.
// What keeps each store after the load it overwrites is program order on one
// base pointer: the loads and stores all derive from c_mem, and clang gives
// every vector-typed access the omnipotent char TBAA tag, so type-based alias
// analysis separates none of them.
void f32_to_bf16_mn(bfloat16 *__restrict c_mem) {
  KERNEL_ALIGNED(c_mem);
  ::aie::set_rounding(aie::rounding_mode::conv_even);
  const float *c_acc = reinterpret_cast<const float *>(c_mem);
  // live: 2 vec, 1 acc
  AIE_LOOP_MIN_ITERATION_COUNT(2)
  for (unsigned j = 0; j < MB * NB; ++j) {
    KERNEL_ITERATION;
    const aie::accum<accfloat, 64> acc(aie::load_v<64>(c_acc + j * BLK));
    aie::store_v(c_mem + j * BLK, acc.to_vector<bfloat16>());
  }
}

} // extern "C"
