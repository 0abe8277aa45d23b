// SPDX-License-Identifier: MIT
//===- eltwise_bf16.cc - the decoder layer's element-wise entries (AIE2P) -===//
//
// The work between the GEMVs of a decoder layer's o_proj + FFN module
// (o_gemv_ffn_int4.py), one launch each, as mlir-air's o_ffn_multi builder
// runs it between its GEMMs. Built by kernels/Makefile ENTRIES=eltwise.
//
//   eltwise_add_bf16(a, b, out, n)     out = a + b                 (residual)
//   rms_norm_bf16(x, w, out, n)        out = (x * r) * w,
//                                      r = 1 / sqrt(sum(x^2) / n + 1e-5)
//   silu_mul_bf16(gate, up, out, n)    out = silu(gate) * up        (SwiGLU)
//   rope_bf16(x, table, out, n, d)     half-split rotary embedding of n / d
//                                      heads of d (Hugging Face's Llama):
//                                      out[i] = x[i] c[i] - x[i+h] s[i],
//                                      out[i+h] = x[i] s[i] + x[i+h] c[i],
//                                      h = d / 2, table = [c_0..c_{h-1},
//                                      s_0..s_{h-1}] (one position's, bf16)
//
// n is a multiple of 16 (rope: of d, d / 2 of 16); every buffer is bf16 in L1.
// Each step rounds to bf16, half to even (set at entry: the core resets to
// floor), in this order:
//   add:      a + b (f32) -> bf16
//   rms_norm: sum of squares in f32, lane i holding elements i, i + 16, ...,
//             then the 16 lanes summed; r (f32) held as bf16 hi + lo (hi =
//             bf16(r), lo = bf16(r - hi): 16 bits of r); x * r = x * hi +
//             x * lo in f32 (exact products, one f32 addition) -> bf16, one
//             rounding to bf16 where bf16(r) then x * bf16(r) rounded twice
//             (amd/IRON PR #139: that drifts with depth in decode); then
//             * w -> bf16 (Hugging Face's LlamaRMSNorm: the normalised value
//             in the input's type, then the weight)
//   silu_mul: sigmoid(g) = (1 + tanh(g / 2)) / 2 with tanh to bf16 and the sum
//             to bf16 (the halving is exact), g * sigmoid -> bf16, * up -> bf16
//   rope:     each output one f32 multiply-add of two exact products -> bf16
// int4awq/kernel/eltwise_model.py holds the same steps in numpy.
//===----------------------------------------------------------------------===//

#include <aie_api/aie.hpp>
#include <stdint.h>

namespace {

constexpr unsigned V = 16;           // bf16 lanes per vector: one 256-bit load
constexpr float RMS_EPSILON = 1e-5f; // Llama-3.2-1B's rms_norm_eps

inline aie::vector<bfloat16, V> rounded(const aie::accum<accfloat, V> &acc) {
  return acc.template to_vector<bfloat16>();
}

} // namespace

extern "C" {

void eltwise_add_bf16(const bfloat16 *__restrict a,
                      const bfloat16 *__restrict b, bfloat16 *__restrict out,
                      int32_t n) {
  ::aie::set_rounding(aie::rounding_mode::conv_even);
  // live: 3 vec, 0 acc
  for (int32_t i = 0; i < n; i += V)
    aie::store_v(out + i,
                 aie::add(aie::load_v<V>(a + i), aie::load_v<V>(b + i)));
}

void rms_norm_bf16(const bfloat16 *__restrict x, const bfloat16 *__restrict w,
                   bfloat16 *__restrict out, int32_t n) {
  ::aie::set_rounding(aie::rounding_mode::conv_even);
  aie::accum<accfloat, V> squares = aie::zeros<accfloat, V>();
  // live: 1 vec, 1 acc
  for (int32_t i = 0; i < n; i += V) {
    const aie::vector<bfloat16, V> v = aie::load_v<V>(x + i);
    squares = aie::mac(squares, v, v); // bf16 x bf16 is exact in f32
  }
  const float sum = aie::reduce_add(squares.template to_vector<float>());
  const float r = aie::invsqrt(sum / float(n) + RMS_EPSILON);
  // r split as the GEMM's fold splits G: hi = bf16(r), lo = bf16(r - hi)
  const aie::accum<accfloat, V> r_acc(aie::broadcast<float, V>(r));
  const aie::vector<bfloat16, V> r_hi = rounded(r_acc);
  const aie::vector<bfloat16, V> r_lo = rounded(aie::sub(r_acc, r_hi));
  // live: 4 vec, 1 acc
  for (int32_t i = 0; i < n; i += V) {
    const aie::vector<bfloat16, V> xv = aie::load_v<V>(x + i);
    const aie::vector<bfloat16, V> normed =
        rounded(aie::mac(aie::mul(xv, r_hi), xv, r_lo));
    aie::store_v(out + i, rounded(aie::mul(normed, aie::load_v<V>(w + i))));
  }
}

void silu_mul_bf16(const bfloat16 *__restrict gate,
                   const bfloat16 *__restrict up, bfloat16 *__restrict out,
                   int32_t n) {
  ::aie::set_rounding(aie::rounding_mode::conv_even);
  const aie::vector<bfloat16, V> half = aie::broadcast<bfloat16, V>(0.5f);
  const aie::vector<bfloat16, V> one = aie::broadcast<bfloat16, V>(1.0f);
  // live: 5 vec, 1 acc
  for (int32_t i = 0; i < n; i += V) {
    const aie::vector<bfloat16, V> g = aie::load_v<V>(gate + i);
    const aie::vector<bfloat16, V> t =
        aie::tanh<bfloat16>(aie::mul(g, half).template to_vector<float>());
    const aie::vector<bfloat16, V> sigmoid =
        rounded(aie::mul(aie::add(one, t), half));
    const aie::vector<bfloat16, V> silu = rounded(aie::mul(g, sigmoid));
    aie::store_v(out + i, rounded(aie::mul(silu, aie::load_v<V>(up + i))));
  }
}

void rope_bf16(const bfloat16 *__restrict x, const bfloat16 *__restrict table,
               bfloat16 *__restrict out, int32_t n, int32_t d) {
  ::aie::set_rounding(aie::rounding_mode::conv_even);
  const int32_t h = d / 2;
  // live: 6 vec, 1 acc
  for (int32_t head = 0; head < n; head += d)
    // live: 6 vec, 1 acc
    for (int32_t i = 0; i < h; i += V) {
      const aie::vector<bfloat16, V> x1 = aie::load_v<V>(x + head + i);
      const aie::vector<bfloat16, V> x2 = aie::load_v<V>(x + head + h + i);
      const aie::vector<bfloat16, V> c = aie::load_v<V>(table + i);
      const aie::vector<bfloat16, V> s = aie::load_v<V>(table + h + i);
      aie::store_v(out + head + i, rounded(aie::msc(aie::mul(x1, c), x2, s)));
      aie::store_v(out + head + h + i,
                   rounded(aie::mac(aie::mul(x1, s), x2, c)));
    }
}

} // extern "C"
