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
//   attention (the token's q against its own key and value, which come in
//             q's buffer, then the cache's first n = ctx[0] positions, chunk
//             by chunk; cache rows past n are neither used nor written), an
//             online softmax (one pass, as flash attention's), every step of
//             it on vectors (AIE2P has no scalar floating point: AM027):
//             scores: s = q . k in f32 (exact products, summed in 16 lanes
//             i, i + 16, .. then the lanes in halves); c = log2(e) / sqrt(d)
//             as bf16 hi + lo, so 2^((s - m) c) is the softmax's e^((s - m)
//             / sqrt(d)) (mlir-air's flash attention folds log2(e) into its
//             scale likewise); (s - m) c = the six products of (s - m)'s three
//             bf16 parts and c's two, summed in f32; p = 2^that (exp2, to
//             bf16). State per query head: m, the largest score so far as
//             bf16 (fused_decode's attn_qk keeps it so), l as 16 f32 lanes
//             (lane j the sum of the p of lanes j), o (f32), all from the own
//             position (m = bf16(s), l's lane 0 = p, o = p v). Per chunk: m'
//             = the largest of m and the chunk's bf16(s) (its invalid lanes
//             the lowest bf16); if m' != m, a = 2^((m - m') c) and l, o times
//             a (their three bf16 parts each times a: exact products, summed
//             in f32); then l += p lane by lane, o += p v position by position
//             (f32); out: l's lanes summed in halves, r = 1 / l as bf16 hi +
//             lo (rms_norm's split), o * r = the six products of o's parts
//             and r's, summed in f32 -> bf16
// int4awq/kernel/eltwise_model.py holds the same steps in numpy.
//===----------------------------------------------------------------------===//

#include <aie_api/aie.hpp>
#include <bit>
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

// The same rotation under a second name: a module whose two RoPE launches
// give a PE rows of two lengths declares the entry once for each.
void rope2_bf16(const bfloat16 *__restrict x, const bfloat16 *__restrict table,
                bfloat16 *__restrict out, int32_t n, int32_t d) {
  rope_bf16(x, table, out, n, d);
}

// ---------------------------------------------------------------- attention
// One PE: g query heads of d sharing one key/value head, the cache's first
// ctx[0] positions, in chunks of t positions: a chunk is t key rows then t
// value rows (2t x d, row-major), the cache laid out so (one DMA a chunk).
// L1 holds one chunk's scores and probabilities (g x t, head-major) and the
// state o: g x d sums, then g x V lanes of l (f32; vector-aligned), then g
// maxima m (bf16 values).

// the lowest finite bf16: a score lane past the valid positions
constexpr float LOWEST = -0x1.FEp127f;

static inline int32_t valid_in_chunk(const int32_t *ctx, int32_t chunk,
                                     int32_t t) {
  const int32_t left = ctx[0] - chunk * t;
  return left < 0 ? 0 : (left < t ? left : t);
}

// head_dim at most MAX_D: a query head's vectors stay in registers across the
// chunk's keys (o_gemv_ffn_int4.attention_problem refuses more)
constexpr int32_t MAX_D = 128;
// the output's vectors accumulated together a position (one broadcast of p)
constexpr int32_t O_GROUP = 4;

// A query head's vectors, loaded once a head.
struct Query {
  aie::vector<bfloat16, V> v[MAX_D / V];
};
static inline Query load_query(const bfloat16 *__restrict q, int32_t d) {
  Query r;
  // live: 8 vec, 0 acc
  for (int32_t i = 0; i < d / V; ++i)
    r.v[i] = aie::load_v<V>(q + i * V);
  return r;
}

// One query head's score against one key: q . k (scaled later, with log2 e).
static inline float attn_score(const Query &q, const bfloat16 *__restrict k,
                               int32_t d) {
  aie::accum<accfloat, V> acc = aie::zeros<accfloat, V>();
  // live: 9 vec, 1 acc
  for (int32_t i = 0; i < d / V; ++i)
    acc = aie::mac(acc, q.v[i], aie::load_v<V>(k + i * V));
  return aie::reduce_add(acc.template to_vector<float>());
}

// V f32 values as three bf16 parts, largest first: their sum is the value
// (each part the rounding of what the ones before leave).
struct Parts {
  aie::vector<bfloat16, V> p[3];
};
static inline Parts split3(aie::accum<accfloat, V> rest) {
  Parts r;
  // live: 4 vec, 1 acc
  for (int k = 0; k < 3; ++k) {
    r.p[k] = rounded(rest);
    rest = aie::sub(rest, r.p[k]);
  }
  return r;
}

// acc + x * s for a bf16 s: x's parts each times s (exact), summed in f32.
static inline aie::accum<accfloat, V>
mac_parts(aie::accum<accfloat, V> acc, const Parts &x,
          const aie::vector<bfloat16, V> &s) {
  // live: 5 vec, 1 acc
  for (int k = 0; k < 3; ++k)
    acc = aie::mac(acc, x.p[k], s);
  return acc;
}

// x * b for an f32 vector x (in memory) and a bf16 b, to f32.
static inline aie::vector<float, V> times(const float *x,
                                          const aie::vector<bfloat16, V> &b) {
  return mac_parts(aie::zeros<accfloat, V>(),
                   split3(aie::accum<accfloat, V>(aie::load_v<V>(x))), b)
      .template to_vector<float>();
}

// log2(e) / sqrt(d) as bf16 hi + lo
struct Scale {
  aie::vector<bfloat16, V> hi, lo;
};
static inline Scale log2e_scale(int32_t d) {
  const aie::accum<accfloat, V> c(
      aie::broadcast<float, V>(aie::invsqrt(float(d)) * 1.4426950408889634f));
  Scale r;
  r.hi = rounded(c);
  r.lo = rounded(aie::sub(c, r.hi));
  return r;
}

// 2^(x c) to bf16, x = (s - m) f32: x's parts times c's hi, then its lo.
static inline aie::vector<bfloat16, V>
exp2_scaled(const aie::accum<accfloat, V> &x, const Scale &c) {
  const Parts parts = split3(x);
  return aie::exp2<bfloat16>(
      mac_parts(mac_parts(aie::zeros<accfloat, V>(), parts, c.hi), parts, c.lo)
          .template to_vector<float>());
}

static inline bfloat16 to_bf16(float x) {
  return rounded(aie::accum<accfloat, V>(aie::broadcast<float, V>(x)))[0];
}

// The q buffer of a PE: its g x d query values, the token's own key and value
// (d each: the cache does not hold them yet), then ctx (16 int32: ctx[0] = n,
// the cache rows to attend to), so that one DMA brings them all.
static inline const int32_t *attn_ctx(const bfloat16 *q, int32_t g, int32_t d) {
  return reinterpret_cast<const int32_t *>(q + g * d + 2 * d);
}

// Before the first step: the state from the token's own position: m =
// bf16(its score), p = 2^((s - m) c) in l's lane 0, o = p v. It takes the
// scores and the probabilities too, so that the launch touches its buffers
// outside its loop of steps (the compiler keeps them at herd scope and
// double-buffers the rows).
void attn_init_bf16(const bfloat16 *__restrict q, float *__restrict scores,
                    bfloat16 *__restrict probs, float *__restrict o, int32_t g,
                    int32_t d, int32_t c) {
  (void)scores, (void)probs, (void)c;
  ::aie::set_rounding(aie::rounding_mode::conv_even);
  const Scale cs = log2e_scale(d);
  const bfloat16 *k = q + g * d, *v = q + g * d + d;
  float *l = o + g * d, *m = o + g * d + g * V;
  // live: 5 vec, 1 acc
  for (int32_t h = 0; h < g; ++h) {
    const float s = attn_score(load_query(q + h * d, d), k, d);
    const bfloat16 mb = to_bf16(s);
    const bfloat16 p = exp2_scaled(
        aie::sub(aie::accum<accfloat, V>(aie::broadcast<float, V>(s)),
                 aie::broadcast<bfloat16, V>(mb)),
        cs)[0];
    m[h] = float(mb);
    aie::store_v(l + h * V, aie::zeros<float, V>());
    l[h * V] = float(p);
    // live: 2 vec, 1 acc
    for (int32_t i = 0; i < d; i += V)
      aie::store_v(o + h * d + i, aie::mul(aie::broadcast<bfloat16, V>(p),
                                           aie::load_v<V>(v + i))
                                      .template to_vector<float>());
  }
}

// One chunk of the cache (step): its valid positions' scores, the state
// rescaled when they raise the maximum, then their probabilities and values.
void attn_step_bf16(const bfloat16 *__restrict q,
                    const bfloat16 *__restrict rows, float *__restrict scores,
                    bfloat16 *__restrict probs, float *__restrict o,
                    int32_t step, int32_t g, int32_t d, int32_t t, int32_t c) {
  (void)c;
  ::aie::set_rounding(aie::rounding_mode::conv_even);
  const int32_t n = valid_in_chunk(attn_ctx(q, g, d), step, t);
  if (n == 0)
    return;
  const Scale cs = log2e_scale(d);
  const aie::vector<bfloat16, V> ones = aie::broadcast<bfloat16, V>(1.0f);
  const bfloat16 *k = rows, *v = rows + t * d;
  float *l = o + g * d, *m = o + g * d + g * V;
  // live: 6 vec, 1 acc
  for (int32_t h = 0; h < g; ++h) {
    float *s = scores + h * t;
    bfloat16 *p = probs + h * t;
    float *oh = o + h * d, *lh = l + h * V;
    const Query qh = load_query(q + h * d, d);
    // live: 9 vec, 1 acc
    for (int32_t pos = 0; pos < n; ++pos)
      s[pos] = attn_score(qh, k + pos * d, d);
    // live: 0 vec, 0 acc (scalar)
    for (int32_t pos = n; pos < t; ++pos)
      s[pos] = LOWEST;
    const bfloat16 old = to_bf16(m[h]);
    aie::vector<bfloat16, V> mv = aie::broadcast<bfloat16, V>(old);
    // live: 2 vec, 1 acc
    for (int32_t i = 0; i < t; i += V)
      mv =
          aie::max(mv, rounded(aie::accum<accfloat, V>(aie::load_v<V>(s + i))));
    const bfloat16 top = aie::reduce_max(mv);
    const aie::vector<bfloat16, V> topv = aie::broadcast<bfloat16, V>(top);
    if (std::bit_cast<uint16_t>(top) != std::bit_cast<uint16_t>(old)) {
      const aie::vector<bfloat16, V> a =
          aie::broadcast<bfloat16, V>(exp2_scaled(
              aie::sub(aie::accum<accfloat, V>(aie::broadcast<float, V>(m[h])),
                       topv),
              cs)[0]);
      aie::store_v(lh, times(lh, a));
      // live: 5 vec, 1 acc
      for (int32_t i = 0; i < d; i += V)
        aie::store_v(oh + i, times(oh + i, a));
      m[h] = float(top);
    }
    aie::accum<accfloat, V> lacc(aie::load_v<V>(lh));
    // live: 5 vec, 1 acc
    for (int32_t i = 0; i < t; i += V) {
      const aie::vector<bfloat16, V> pv = exp2_scaled(
          aie::sub(aie::accum<accfloat, V>(aie::load_v<V>(s + i)), topv), cs);
      aie::store_v(p + i, pv);
      lacc = aie::mac(lacc, pv, ones);
    }
    aie::store_v(lh, lacc.template to_vector<float>());
    // O_GROUP of o's vectors at a time, each position's p broadcast once for
    // them (each lane still adds the positions in order)
    // live: 2 vec, 4 acc
    for (int32_t i0 = 0; i0 < d; i0 += O_GROUP * V) {
      aie::accum<accfloat, V> acc[O_GROUP];
      const int32_t w = d - i0 < O_GROUP * V ? (d - i0) / V : O_GROUP;
      // live: 1 vec, 4 acc
      for (int32_t j = 0; j < w; ++j)
        acc[j] = aie::accum<accfloat, V>(aie::load_v<V>(oh + i0 + j * V));
      // live: 2 vec, 4 acc
      for (int32_t pos = 0; pos < n; ++pos) {
        const aie::vector<bfloat16, V> pb = aie::broadcast<bfloat16, V>(p[pos]);
        // live: 2 vec, 4 acc
        for (int32_t j = 0; j < w; ++j)
          acc[j] =
              aie::mac(acc[j], pb, aie::load_v<V>(v + pos * d + i0 + j * V));
      }
      // live: 1 vec, 4 acc
      for (int32_t j = 0; j < w; ++j)
        aie::store_v(oh + i0 + j * V, acc[j].template to_vector<float>());
    }
  }
}

// After the last step: out = o / l, l its lanes summed in halves, r = 1 / l
// held as bf16 hi + lo.
void attn_out_bf16(const float *__restrict o, bfloat16 *__restrict out,
                   int32_t g, int32_t d) {
  ::aie::set_rounding(aie::rounding_mode::conv_even);
  const float *l = o + g * d;
  // live: 5 vec, 1 acc
  for (int32_t h = 0; h < g; ++h) {
    const float sum = aie::reduce_add(aie::load_v<V>(l + h * V));
    const aie::accum<accfloat, V> r_acc(aie::broadcast<float, V>(1.0f / sum));
    const aie::vector<bfloat16, V> r_hi = rounded(r_acc);
    const aie::vector<bfloat16, V> r_lo = rounded(aie::sub(r_acc, r_hi));
    // live: 5 vec, 1 acc
    for (int32_t i = 0; i < d; i += V) {
      const Parts parts =
          split3(aie::accum<accfloat, V>(aie::load_v<V>(o + h * d + i)));
      aie::accum<accfloat, V> acc =
          mac_parts(aie::zeros<accfloat, V>(), parts, r_hi);
      aie::store_v(out + h * d + i, rounded(mac_parts(acc, parts, r_lo)));
    }
  }
}

} // extern "C"
