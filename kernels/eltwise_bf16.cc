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
//   copy_bf16(x, out, n)               out = x (the token's value into the
//                                      attention launch's q buffer)
//   attn_init_bf16 / attn_step_bf16 / attn_out_bf16:
//                                      decode attention of one key/value head
//                                      and its g query heads over a cache
//                                      of c positions, in chunks of t (below)
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
//   attention (the token's q against the first n positions of the cache,
//             n = ctx[0], and then its own key and value, position n, which
//             come in q's buffer; cache rows past n are neither read nor
//             written):
//             scores: s = (q . k) in f32 (exact products, summed in 16 lanes
//             i, i + 16, .. then the lanes in halves), times 1 / sqrt(d) in
//             f32; softmax: m = the largest s, p = exp2((s - m) * log2(e))
//             (each step f32, exp2 to bf16), l = the sum of p in f32 in
//             position order, r = 1 / l, p' = p * r_hi + p * r_lo -> bf16
//             (r's hi / lo split as rms_norm's); values: o += p' v in f32,
//             position by position; out: o -> bf16
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

void copy_bf16(const bfloat16 *__restrict x, bfloat16 *__restrict out,
               int32_t n) {
  // live: 1 vec, 0 acc
  for (int32_t i = 0; i < n; i += V)
    aie::store_v(out + i, aie::load_v<V>(x + i));
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

// ---------------------------------------------------------------- attention
// One PE: g query heads of d sharing one key/value head, the cache's first
// ctx[0] positions, in chunks of t positions (k, v: t x d, row-major), scores
// and probabilities for all c positions (g x c, head-major) in L1.

static inline int32_t valid_in_chunk(const int32_t *ctx, int32_t chunk,
                                     int32_t t) {
  const int32_t left = ctx[0] - chunk * t;
  return left < 0 ? 0 : (left < t ? left : t);
}

// One query head's score against one key: (q . k) / sqrt(d).
static inline float attn_score(const bfloat16 *__restrict q,
                               const bfloat16 *__restrict k, int32_t d,
                               float scale) {
  aie::accum<accfloat, V> acc = aie::zeros<accfloat, V>();
  // live: 2 vec, 1 acc
  for (int32_t i = 0; i < d; i += V)
    acc = aie::mac(acc, aie::load_v<V>(q + i), aie::load_v<V>(k + i));
  return aie::reduce_add(acc.template to_vector<float>()) * scale;
}

static void attn_scores(const bfloat16 *__restrict q,
                        const bfloat16 *__restrict k, float *__restrict scores,
                        const int32_t *__restrict ctx, int32_t chunk, int32_t g,
                        int32_t d, int32_t t, int32_t c) {
  ::aie::set_rounding(aie::rounding_mode::conv_even);
  const float scale = aie::invsqrt(float(d));
  const int32_t n = valid_in_chunk(ctx, chunk, t);
  // live: 3 vec, 1 acc
  for (int32_t pos = 0; pos < n; ++pos)
    // live: 3 vec, 1 acc
    for (int32_t h = 0; h < g; ++h)
      scores[h * c + chunk * t + pos] =
          attn_score(q + h * d, k + pos * d, d, scale);
}

static void attn_softmax(float *__restrict scores, bfloat16 *__restrict probs,
                         const int32_t *__restrict ctx, int32_t g, int32_t c) {
  ::aie::set_rounding(aie::rounding_mode::conv_even);
  const int32_t n = ctx[0] + 1; // the cache's positions and the token's own
  const float log2e = 1.4426950408889634f;
  // live: 4 vec, 1 acc
  for (int32_t h = 0; h < g; ++h) {
    float *s = scores + h * c;
    bfloat16 *p = probs + h * c;
    float m = s[0];
    // live: 0 vec, 0 acc (scalar)
    for (int32_t i = 1; i < n; ++i)
      m = s[i] > m ? s[i] : m;
    // live: 0 vec, 0 acc (scalar)
    for (int32_t i = 0; i < n; ++i)
      s[i] = (s[i] - m) * log2e;
    float l = 0.0f;
    // live: 2 vec, 0 acc
    for (int32_t i = 0; i < n; i += V) {
      aie::store_v(p + i, aie::exp2<bfloat16>(aie::load_v<V>(s + i)));
      // live: 0 vec, 0 acc (scalar)
      for (int32_t j = i; j < i + V && j < n; ++j)
        l += float(p[j]);
    }
    // r = 1 / l held as bf16 hi + lo (rms_norm's split): p' = p r in one
    // rounding
    const aie::accum<accfloat, V> r_acc(aie::broadcast<float, V>(1.0f / l));
    const aie::vector<bfloat16, V> r_hi = rounded(r_acc);
    const aie::vector<bfloat16, V> r_lo = rounded(aie::sub(r_acc, r_hi));
    // live: 4 vec, 1 acc
    for (int32_t i = 0; i < n; i += V) {
      const aie::vector<bfloat16, V> pv = aie::load_v<V>(p + i);
      aie::store_v(p + i, rounded(aie::mac(aie::mul(pv, r_hi), pv, r_lo)));
    }
  }
}

static void attn_values(const bfloat16 *__restrict probs,
                        const bfloat16 *__restrict v, float *__restrict o,
                        const int32_t *__restrict ctx, int32_t chunk, int32_t g,
                        int32_t d, int32_t t, int32_t c) {
  ::aie::set_rounding(aie::rounding_mode::conv_even);
  const int32_t n = valid_in_chunk(ctx, chunk, t);
  // live: 3 vec, 1 acc
  for (int32_t h = 0; h < g; ++h)
    // live: 3 vec, 1 acc
    for (int32_t i = 0; i < d; i += V) {
      aie::accum<accfloat, V> acc =
          chunk == 0 ? aie::zeros<accfloat, V>()
                     : aie::accum<accfloat, V>(aie::load_v<V>(o + h * d + i));
      // live: 3 vec, 1 acc
      for (int32_t pos = 0; pos < n; ++pos)
        acc = aie::mac(
            acc, aie::broadcast<bfloat16, V>(probs[h * c + chunk * t + pos]),
            aie::load_v<V>(v + pos * d + i));
      aie::store_v(o + h * d + i, acc.template to_vector<float>());
    }
}

// The q buffer of a PE: its g x d query values, the token's own key and value
// (d each: position n, which the cache does not hold yet), then ctx (16 int32:
// ctx[0] = n, the cache rows to attend to before it), so that one DMA brings
// them all.
static inline const int32_t *attn_ctx(const bfloat16 *q, int32_t g, int32_t d) {
  return reinterpret_cast<const int32_t *>(q + g * d + 2 * d);
}

// Before the first step: o = 0, and the scores of the token's own key
// (position n). It takes the probabilities too, so that the launch touches
// its buffers outside its loop of steps (the compiler keeps them at herd scope
// and double-buffers the rows).
void attn_init_bf16(const bfloat16 *__restrict q, float *__restrict scores,
                    bfloat16 *__restrict probs, float *__restrict o, int32_t g,
                    int32_t d, int32_t c) {
  (void)probs;
  ::aie::set_rounding(aie::rounding_mode::conv_even);
  const float scale = aie::invsqrt(float(d));
  const int32_t n = attn_ctx(q, g, d)[0];
  // live: 1 vec, 0 acc
  for (int32_t i = 0; i < g * d; i += V)
    aie::store_v(o + i, aie::zeros<float, V>());
  // live: 3 vec, 1 acc
  for (int32_t h = 0; h < g; ++h)
    scores[h * c + n] = attn_score(q + h * d, q + g * d, d, scale);
}

// One step of the attention launch's single stream of cache rows: steps 0 ..
// c / t - 1 take the key rows of chunk `step` (scores), the next c / t the
// value rows (values), the softmax running before the first of those.
void attn_step_bf16(const bfloat16 *__restrict q,
                    const bfloat16 *__restrict rows, float *__restrict scores,
                    bfloat16 *__restrict probs, float *__restrict o,
                    int32_t step, int32_t g, int32_t d, int32_t t, int32_t c) {
  const int32_t *ctx = attn_ctx(q, g, d);
  const int32_t chunks = c / t;
  if (step < chunks) {
    attn_scores(q, rows, scores, ctx, step, g, d, t, c);
    return;
  }
  if (step == chunks)
    attn_softmax(scores, probs, ctx, g, c);
  attn_values(probs, rows, o, ctx, step - chunks, g, d, t, c);
}

// After the last step: the token's own value (position n, the last in
// position order) added to o, then o -> bf16.
void attn_out_bf16(const bfloat16 *__restrict q,
                   const bfloat16 *__restrict probs, const float *__restrict o,
                   bfloat16 *__restrict out, int32_t g, int32_t d, int32_t c) {
  ::aie::set_rounding(aie::rounding_mode::conv_even);
  const int32_t n = attn_ctx(q, g, d)[0];
  const bfloat16 *v = q + g * d + d;
  // live: 3 vec, 1 acc
  for (int32_t h = 0; h < g; ++h)
    // live: 3 vec, 1 acc
    for (int32_t i = 0; i < d; i += V) {
      aie::accum<accfloat, V> acc(aie::load_v<V>(o + h * d + i));
      acc = aie::mac(acc, aie::broadcast<bfloat16, V>(probs[h * c + n]),
                     aie::load_v<V>(v + i));
      aie::store_v(out + h * d + i, rounded(acc));
    }
}

} // extern "C"
