// SPDX-License-Identifier: MIT
//===- mv_int4_bf16.cc - int4 weight GEMV entries for AIE2P (aie_api) -----===//
//
// The decode GEMV's entries (gemv_int4_zero, gemv_int4_accumulate,
// gemv_int4_drain) over int4_kernel.h: the GEMM's record and dequantisation.
// Built per record tile by kernels/Makefile ENTRIES=gemv.
//
//===----------------------------------------------------------------------===//

#define INT4_DENSE_CODES 1 // the GEMV reads dense codes (int4_kernel.h DENSE)
#include "int4_kernel.h"

//===----------------------------------------------------------------------===//
// GEMV entries: the packed record with dense codes, m = 1 .. GEMV_MAX_M rows
// of A (decode, and small-M prefill).
//
//   gemv_int4_zero(acc, m)                                 acc = 0
//   gemv_int4_accumulate(w_record, a_rows, acc, w_scratch, m)
//                                        acc += a_rows x dequant(w_record)
//   gemv_int4_drain(acc, c_out, m)       c_out = bf16(acc), m rows, RNE
//
// m is a run-time argument, so one object serves every row count. The record
// has the GEMM's sections (DIM_N x DIM_K_CHUNK, group DIM_GS), its 4-bit codes
// dense where DENSE holds (int4_kernel.h), else the GEMM's record byte for
// byte.
//
//   a_rows     m x DIM_K_CHUNK bf16, row-major (row r at r * DIM_K_CHUNK): the
//              rows as they are in DDR
//   acc        bands * 8 * DIM_N f32, bands = ceil(m / 8), blocked like the
//              GEMM's accumulator: block (b, nb) at (b * DIM_N/8 + nb) * 64,
//              row-major inside; rows m .. 8 * bands - 1 stay 0
//   c_out      m x DIM_N bf16, row-major
//   w_scratch  record.w_scratch_bytes(DIM_N, DIM_K_CHUNK, DIM_GS, format)
//              bytes, the GEMM's scratch
//
// A call dequantises the record once into the GEMM's W pair lines (dequantize:
// dense codes converted per block vector, or the GEMM's own dequantisation;
// byte codes: none), then per band of up to 8 rows
// converts those rows to one bfp16 A line (rows m .. 8 * bands - 1 read as 0)
// and sweeps the column pairs: two independent 8x8x8 bfp16 mmul accumulators
// fed by two block streams (the band's A line, the pair's interleaved W line),
// three pops and two macs per step, the folds in the same loop body. Roundings
// are the GEMM's, in the GEMM's order, row by row: rows of A are converted to
// bfp16 in blocks of 8 along K (so a row's values do not depend on the other
// rows), one f32 RNE addition per 8-deep block into the span's G, then the
// GEMM's fold (per scale part c += hi * s_i, c += lo * s_i; with a min term the
// same of the band's row sums R and m). So for one K sweep (zero, accumulate
// per chunk, drain) a row of C is bit-identical to the same row of the GEMM.
//===----------------------------------------------------------------------===//

namespace {

constexpr unsigned GEMV_MAX_M = 32; // rows per call: four 8-row bands
inline unsigned gemv_bands(int32_t m) {
  const unsigned u =
      m < 1 ? 1u : (m > int32_t(GEMV_MAX_M) ? GEMV_MAX_M : unsigned(m));
  return (u + 7u) / 8u;
}
inline unsigned gemv_rows(int32_t m) {
  return m < 1 ? 1u : (m > int32_t(GEMV_MAX_M) ? GEMV_MAX_M : unsigned(m));
}

// The GEMV's A line: fold span f's SB block vectors at f * A_SPAN_BYTES, each
// span's pushes padded to whole words (a multiple of 8 block vectors: the
// output stream ends on a word), so that a stream can also open there.
constexpr unsigned A_SPAN_BYTES = whole_words(SB) * BLOCKS::bytes();
static_assert(NF * A_SPAN_BYTES <= A_LINE_BYTES);

// Rows r0 .. r0 + rows - 1 of a_rows (row-major, DIM_K_CHUNK long) -> the A
// line of w_scratch, one block vector per 8-deep K block; the rows past `rows`
// of the 8-row block are 0.
//
// Always eight row loads at fixed lanes, concatenated: no insert at a run-time
// lane and no loop whose trip count is the row count, so the K-block loop keeps
// one body. A row past `rows` loads row 0 (inside the m-row buffer) and is
// replaced by zeros. Padding the L1 buffer to 8 zeroed rows instead would cost
// 7 x tile_k_l1 x 2 bytes per A buffer at m = 1, more than decode has free.
inline aie::vector<bfloat16, 8> gemv_row_block(const bfloat16 *__restrict pa,
                                               unsigned i, unsigned rows,
                                               unsigned kb) {
  const aie::vector<bfloat16, 8> v =
      aie::load_v<8>(pa + (i < rows ? i : 0u) * TK + kb * 8);
  return i < rows ? v : aie::zeros<bfloat16, 8>();
}

void gemv_convert_a(const bfloat16 *__restrict a_rows, unsigned r0,
                    unsigned rows, uint8_t *__restrict scratch) {
  const bfloat16 *__restrict pa = a_rows + r0 * TK;
  // live: 6 vec, 2 acc
  for (unsigned f = 0; f < NF; ++f) {
    BlockOut out(blocks_at(scratch, A_LINE_OFFSET + f * A_SPAN_BYTES));
    RowSums<MIN_TERM> r;
    BLOCKS last;
    // live: 6 vec, 2 acc
    AIE_LOOP_MIN_ITERATION_COUNT(2)
    for (unsigned kb = f * SB; kb < (f + 1) * SB; ++kb) {
      KERNEL_ITERATION;
      const aie::vector<bfloat16, 64> blk = aie::concat(
          gemv_row_block(pa, 0, rows, kb), gemv_row_block(pa, 1, rows, kb),
          gemv_row_block(pa, 2, rows, kb), gemv_row_block(pa, 3, rows, kb),
          gemv_row_block(pa, 4, rows, kb), gemv_row_block(pa, 5, rows, kb),
          gemv_row_block(pa, 6, rows, kb), gemv_row_block(pa, 7, rows, kb));
      const BLOCKS a = aie::accum<accfloat, 64>(blk).to_vector<bfp16ebs8>();
      out << a;
      r.add(a);
      last = a;
    }
    pad_to_words<SB>(out, last);
    r.store(row_sums_at(scratch, f, 0));
  }
}

// Row R (0 .. 7) of a drained 8x8 block v to dst + R * TN, if the band holds
// it: the row's sub-vector index is a compile-time constant, so no run-time
// sub-vector extract is emitted; each row is stored under its own guard.
template <unsigned R>
inline void store_row(bfloat16 *__restrict dst,
                      const aie::vector<bfloat16, 64> &v, unsigned n_rows) {
  if (R < n_rows)
    aie::store_v(dst + R * TN, v.extract<8>(R));
}

} // namespace

extern "C" {

void gemv_int4_zero(float *__restrict acc, int32_t m) {
  KERNEL_ALIGNED(acc);
  const aie::vector<float, 16> z = aie::zeros<float, 16>();
  const unsigned n = gemv_bands(m) * 8 * TN;
  // live: 1 vec, 0 acc
  AIE_LOOP_MIN_ITERATION_COUNT(4)
  for (unsigned i = 0; i < n; i += 16) {
    KERNEL_ITERATION;
    aie::store_v(acc + i, z);
  }
}

void gemv_int4_accumulate(uint8_t *__restrict w_record,
                          bfloat16 *__restrict a_rows, float *__restrict acc,
                          uint8_t *__restrict w_scratch, int32_t m) {
  KERNEL_ALIGNED(w_record);
  KERNEL_ALIGNED(a_rows);
  KERNEL_ALIGNED(acc);
  KERNEL_ALIGNED(w_scratch);
  ::aie::set_rounding(aie::rounding_mode::INT4_A_ROUNDING);
  uint8_t *__restrict scratch = w_scratch;
  if constexpr (!CODES8)
    dequantize(w_record, scratch);

  const bfloat16 *__restrict scales =
      reinterpret_cast<const bfloat16 *>(w_record + S_OFFSET);
  const unsigned rows = gemv_rows(m);
  // live: 7 vec, 3 acc
  for (unsigned b = 0; b < gemv_bands(m); ++b) {
    const unsigned r0 = b * 8;
    gemv_convert_a(a_rows, r0, rows - r0 < 8 ? rows - r0 : 8, scratch);
    // live: 7 vec, 3 acc
    AIE_PREPARE_FOR_POSTPIPELINING
    AIE_LOOP_MIN_ITERATION_COUNT(1)
    for (unsigned p = 0; p < NP; ++p) {
      KERNEL_ITERATION;
      float *__restrict c0 = acc + (b * NB + 2 * p) * BLK;
      float *__restrict c1 = c0 + BLK;
      // live: 7 vec, 3 acc
      for (unsigned f = 0; f < NF; ++f) {
        BlockIn sa(blocks_at(scratch, A_LINE_OFFSET + f * A_SPAN_BYTES));
        BlockIn sb(w_line(w_record, scratch, p, f));
        MMUL g0 = span_start(c0), g1 = span_start(c1);
        const auto step = [&](unsigned) {
          const BLOCKS a = sa.pop();
          const BLOCKS b0 = sb.pop();
          const BLOCKS b1 = sb.pop();
          g0.mac(a, aie::op_transpose(b0));
          g1.mac(a, aie::op_transpose(b1));
        };
        if constexpr (KB_UNROLLED) {
          // live: 3 vec, 2 acc
          AIE_LOOP_UNROLL_FULL
          for (unsigned kb = 0; kb < SB; ++kb)
            step(kb);
        } else {
          // live: 3 vec, 2 acc
          AIE_LOOP_MIN_ITERATION_COUNT(2)
          for (unsigned kb = 0; kb < SB; ++kb) {
            KERNEL_ITERATION;
            step(kb);
          }
        }
        const bfloat16 *sp = scales + f * TN + p * 16;
        const bfloat16 *r = row_sums_at(scratch, f, 0);
        span_end(g0, sp, r, c0);
        span_end(g1, sp + 8, r, c1);
      }
    }
  }
}

void gemv_int4_drain(float *__restrict acc, bfloat16 *__restrict c_out,
                     int32_t m) {
  KERNEL_ALIGNED(acc);
  KERNEL_ALIGNED(c_out);
  ::aie::set_rounding(aie::rounding_mode::conv_even);
  const unsigned rows = gemv_rows(m);
  // live: 3 vec, 1 acc
  for (unsigned b = 0; b < gemv_bands(m); ++b) {
    const unsigned n_rows = rows - b * 8 < 8 ? rows - b * 8 : 8;
    // live: 3 vec, 1 acc
    for (unsigned nb = 0; nb < NB; ++nb) {
      const aie::accum<accfloat, 64> blk(
          aie::load_v<64>(acc + (b * NB + nb) * BLK));
      const aie::vector<bfloat16, 64> v = blk.to_vector<bfloat16>();
      bfloat16 *__restrict dst = c_out + b * 8 * TN + nb * 8;
      store_row<0>(dst, v, n_rows);
      store_row<1>(dst, v, n_rows);
      store_row<2>(dst, v, n_rows);
      store_row<3>(dst, v, n_rows);
      store_row<4>(dst, v, n_rows);
      store_row<5>(dst, v, n_rows);
      store_row<6>(dst, v, n_rows);
      store_row<7>(dst, v, n_rows);
    }
  }
}

} // extern "C"
