// SPDX-License-Identifier: MIT
// Small extern "C" wrappers around single host aie_api operations, for
// tests/test_aie_api.py (ctypes). Built twice by tests/aie_api/Makefile: with
// and without AIE_API_EMULATE_BFLOAT16_MMUL_WITH_BFP16.
#include <aie_api/aie.hpp>

// mmul: c (M*N floats, row-major) += a (M*K) x b (K*N), `steps` times with
// successive a/b operands.
template <unsigned M, unsigned K, unsigned N>
static void mmul_run(const bfloat16 *a, const bfloat16 *b, float *c, int steps,
                     int from_zero) {
  aie::set_rounding(
      aie::rounding_mode::conv_even); // as kernels do: the bfp16 emulation
                                      // follows the mode
  using MM = aie::mmul<M, K, N, bfloat16, bfloat16, accauto>;
  MM mm;
  if (!from_zero)
    mm = MM(aie::load_v<MM::size_C>(c));
  for (int s = 0; s < steps; ++s)
    mm.mac(aie::load_v<MM::size_A>(a + s * MM::size_A),
           aie::load_v<MM::size_B>(b + s * MM::size_B));
  aie::store_v(c, mm.template to_vector<float>());
}

extern "C" {

// 64 bytes -> 128 x uint4 -> int8, zero-extended (uint4) or sign-extended
// (int4).
void op_unpack_uint4(const uint8_t *in, int8_t *out) {
  aie::store_v(out,
               aie::load_v<64>(in).cast_to<uint4>().unpack_sign<int8>(false));
}
void op_unpack_int4(const uint8_t *in, int8_t *out) {
  aie::store_v(out, aie::load_v<64>(in).cast_to<int4>().unpack());
}

// 32 x int8 -> bf16 / float, scaled by 2^-shift.
void op_to_float_bf16(const int8_t *in, int shift, bfloat16 *out) {
  aie::set_rounding(aie::rounding_mode::conv_even);
  aie::store_v(out, aie::to_float<bfloat16>(aie::load_v<32>(in), shift));
}

// 64 x int4 (32 bytes, low nibble first) -> float: aie_api accepts 4-bit
// sources (Peano folds them to zero on hardware; the kernel never does this).
void op_to_float_int4(const uint8_t *in, float *out) {
  aie::store_v(out, aie::to_float<float>(aie::load_v<32>(in).cast_to<int4>()));
}

// 64 bytes of v followed by the first n of fill, shifted down by n.
void op_shuffle_down_fill(const uint8_t *v, const uint8_t *fill, int n,
                          uint8_t *out) {
  aie::store_v(out, aie::shuffle_down_fill(aie::load_v<64>(v),
                                           aie::load_v<64>(fill), unsigned(n)));
}

// 64 floats -> accfloat -> bf16 under rounding mode `mode`
// (aie::rounding_mode's order: floor, ceil, positive_inf, negative_inf,
// symmetric_inf, symmetric_zero, conv_even, conv_odd, symmetric_floor,
// symmetric_ceil).
void op_to_vector_bf16(const float *in, int mode, bfloat16 *out) {
  aie::set_rounding(aie::rounding_mode(mode));
  aie::accum<accfloat, 64> acc(aie::load_v<64>(in));
  aie::store_v(out, acc.to_vector<bfloat16>());
}

void op_transpose_bf16(const bfloat16 *in, int rows, int cols, bfloat16 *out) {
  aie::store_v(out, aie::transpose(aie::load_v<64>(in), rows, cols));
}

void op_zip_int8(const int8_t *v, const int8_t *w, int chunk,
                 int8_t *out /* 2 x 64 */) {
  auto [lo, hi] =
      aie::interleave_zip(aie::load_v<64>(v), aie::load_v<64>(w), chunk);
  aie::store_v(out, lo);
  aie::store_v(out + 64, hi);
}
void op_unzip_int8(const int8_t *v, const int8_t *w, int chunk,
                   int8_t *out /* 2 x 64 */) {
  auto [lo, hi] =
      aie::interleave_unzip(aie::load_v<64>(v), aie::load_v<64>(w), chunk);
  aie::store_v(out, lo);
  aie::store_v(out + 64, hi);
}

float op_reduce_add_f32(const float *in) {
  return aie::reduce_add(aie::load_v<32>(in));
}

// c (32 floats) += a * b element-wise, bf16 x bf16 -> accfloat.
void op_mac_bf16(float *c, const bfloat16 *a, const bfloat16 *b) {
  aie::accum<accfloat, 32> acc(aie::load_v<32>(c));
  acc = aie::mac(acc, aie::load_v<32>(a), aie::load_v<32>(b));
  aie::store_v(c, acc.to_vector<float>());
}

void op_mmul_8x8x8(const bfloat16 *a, const bfloat16 *b, float *c, int steps,
                   int z) {
  mmul_run<8, 8, 8>(a, b, c, steps, z);
}
void op_mmul_4x8x8(const bfloat16 *a, const bfloat16 *b, float *c, int steps,
                   int z) {
  mmul_run<4, 8, 8>(a, b, c, steps, z);
}
void op_mmul_8x8x4(const bfloat16 *a, const bfloat16 *b, float *c, int steps,
                   int z) {
  mmul_run<8, 8, 4>(a, b, c, steps, z);
}
void op_mmul_4x8x4(const bfloat16 *a, const bfloat16 *b, float *c, int steps,
                   int z) {
  mmul_run<4, 8, 4>(a, b, c, steps, z);
}

// Misaligned load: returns the first element actually read (the hardware reads
// the aligned vector below).
int op_misaligned_load(const int8_t *base, int offset) {
  return aie::load_v<64>(base + offset)[0];
}

// Rows 0 .. n_rows - 1 of an 8x8 bf16 block to out (8 apart), as the GEMV's
// drain stored them before round 5: a loop over a run-time row count, so
// every extract's index is a run-time value (counted by
// aie_host_runtime_extracts).
void op_rows_runtime_index(const bfloat16 *in, unsigned n_rows, bfloat16 *out) {
  const aie::vector<bfloat16, 64> v = aie::load_v<64>(in);
  for (unsigned r = 0; r < n_rows; ++r)
    aie::store_v(out + 8 * r, v.extract<8>(r));
}

} // extern "C"

template <unsigned R>
static void row_if(bfloat16 *out, const aie::vector<bfloat16, 64> &v,
                   unsigned n_rows) {
  if (R < n_rows)
    aie::store_v(out + 8 * R, v.extract<8>(R));
}

extern "C" {

// The same rows, each extracted at a constant index under its own guard (the
// drain's form since round 5): nothing counted.
void op_rows_constant_index(const bfloat16 *in, unsigned n_rows,
                            bfloat16 *out) {
  const aie::vector<bfloat16, 64> v = aie::load_v<64>(in);
  row_if<0>(out, v, n_rows);
  row_if<1>(out, v, n_rows);
  row_if<2>(out, v, n_rows);
  row_if<3>(out, v, n_rows);
  row_if<4>(out, v, n_rows);
  row_if<5>(out, v, n_rows);
  row_if<6>(out, v, n_rows);
  row_if<7>(out, v, n_rows);
}

} // extern "C"

// ---- bfp16ebs8 block vectors (72 bytes each: per block of 8, exponent byte
// then 8 mantissas).
using Blocks = aie::block_vector<bfp16ebs8, 64>;
static bfp16ebs8 *as_blocks(uint8_t *p) {
  return reinterpret_cast<bfp16ebs8 *>(p);
}
static const bfp16ebs8 *as_blocks(const uint8_t *p) {
  return reinterpret_cast<const bfp16ebs8 *>(p);
}

template <typename MM, typename LoadA>
static void block_mmul_run(LoadA load_a, const uint8_t *b, float *c, int steps,
                           int from_zero) {
  MM mm;
  if (!from_zero)
    mm = MM(aie::load_v<64>(c));
  aie::block_vector_input_buffer_stream<bfp16ebs8, 64> sb(as_blocks(b));
  for (int s = 0; s < steps; ++s) {
    const Blocks bv = sb.pop();
    mm.mac(load_a(s), aie::op_transpose(bv));
  }
  aie::store_v(c, mm.template to_vector<float>());
}

// After `pushed` block vectors, pushes copies of `v` until the stream ends on
// a 512-bit word: the host's output stream, as the core's store FIFO, writes
// whole words only, and stops on a stream that ends inside one.
template <typename V, typename OS>
static void pad_to_words(OS &os, const V &v, int pushed) {
  for (int n = pushed; n * V::bytes() % 64 != 0; ++n)
    os << v;
}

extern "C" {

// `count` x 64 floats -> accfloat -> bfp16ebs8 (conv_even), pushed through an
// output stream (72 bytes each), then padded to whole words (out holds
// `count` rounded up to a multiple of 8 block vectors).
void op_to_bfp16(const float *in, int count, uint8_t *out) {
  aie::set_rounding(aie::rounding_mode::conv_even);
  aie::block_vector_output_buffer_stream<bfp16ebs8, 64> os(as_blocks(out));
  Blocks last;
  for (int i = 0; i < count; ++i) {
    last = aie::to_vector<bfp16ebs8>(
        aie::accum<accfloat, 64>(aie::load_v<64>(in + 64 * i)));
    os << last;
  }
  pad_to_words(os, last, count);
}

// Block vector number `index` of a buffer (input stream + seek) -> accfloat
// (times 2^shift) -> 64 floats.
void op_from_bfp16(const uint8_t *in, int index, int shift, float *out) {
  aie::block_vector_input_buffer_stream<bfp16ebs8, 64> is(as_blocks(in));
  is.seek(index);
  Blocks v;
  is >> v;
  aie::accum<accfloat, 64> acc(v, shift);
  aie::store_v(out, acc.to_vector<float>());
}

// Pops `count` block vectors starting at byte `offset` and pushes them to out
// (stream copy), unpadded: `count` must make whole words (a multiple of 8), or
// the output stream stops the process.
void op_stream_copy(const uint8_t *in, int offset, int count, uint8_t *out) {
  aie::block_vector_input_buffer_stream<bfp16ebs8, 64> is(
      as_blocks(in + offset));
  aie::block_vector_output_buffer_stream<bfp16ebs8, 64> os(as_blocks(out));
  for (int i = 0; i < count; ++i)
    os << is.pop();
}

// The same copy through restrict streams with bank hints, as mlir-aie's
// mm_bfp_mixed.cc declares them (aie_dm_resource template argument,
// __aie_dm_resource_* pointer qualifiers).
void op_stream_copy_banked(const uint8_t *in, int count, uint8_t *out) {
  const bfp16ebs8 __aie_dm_resource_a *src =
      (const bfp16ebs8 __aie_dm_resource_a *)as_blocks(in);
  bfp16ebs8 __aie_dm_resource_c *dst =
      (bfp16ebs8 __aie_dm_resource_c *)as_blocks(out);
  aie::block_vector_restrict_input_buffer_stream<bfp16ebs8, 64,
                                                 aie_dm_resource::a>
      is(src);
  aie::block_vector_output_buffer_stream<bfp16ebs8, 64, aie_dm_resource::c> os(
      dst);
  Blocks last;
  for (int i = 0; i < count; ++i) {
    last = is.pop();
    os.push(last);
  }
  pad_to_words(os, last, count);
}

// `count` x 128 floats -> accfloat -> 128-element bfp16ebs8 block vectors
// (144 bytes each) through an output stream, then read back through an input
// stream into accfloat and out as floats (out_f); the pushes padded to whole
// words (out holds `count` rounded up to a multiple of 4).
void op_bfp16_128_round_trip(const float *in, int count, uint8_t *out,
                             float *out_f) {
  aie::set_rounding(aie::rounding_mode::conv_even);
  {
    aie::block_vector_output_buffer_stream<bfp16ebs8, 128> os(as_blocks(out));
    aie::block_vector<bfp16ebs8, 128> last;
    for (int i = 0; i < count; ++i) {
      last = aie::accum<accfloat, 128>(aie::load_v<128>(in + 128 * i))
                 .to_vector<bfp16ebs8>();
      os << last;
    }
    pad_to_words(os, last, count);
  }
  aie::block_vector_input_buffer_stream<bfp16ebs8, 128> is(as_blocks(out));
  for (int i = 0; i < count; ++i)
    aie::store_v(out_f + 128 * i,
                 aie::accum<accfloat, 128>(is.pop()).to_vector<float>());
}

// Block mmul: c (8x8 f32) += sum over steps of A_s x B_s, B_s given transposed
// (N x K block vector).
void op_mmul_bfp16_bfp16(const uint8_t *a, const uint8_t *b, float *c,
                         int steps, int from_zero) {
  aie::block_vector_input_buffer_stream<bfp16ebs8, 64> sa(as_blocks(a));
  block_mmul_run<aie::mmul<8, 8, 8, bfp16ebs8, bfp16ebs8, accauto>>(
      [&](int) { return sa.pop(); }, b, c, steps, from_zero);
}
void op_mmul_bf16_bfp16(const bfloat16 *a, const uint8_t *b, float *c,
                        int steps, int from_zero) {
  aie::set_rounding(aie::rounding_mode::conv_even); // A is converted to
                                                    // bfp16ebs8 under the mode
  block_mmul_run<aie::mmul<8, 8, 8, bfloat16, bfp16ebs8, accfloat>>(
      [&](int s) { return aie::load_v<64>(a + 64 * s); }, b, c, steps,
      from_zero);
}

} // extern "C"
