// SPDX-License-Identifier: MIT
// Host (x86-64) aie_api: aie::mmul and the bfp16 block conversion.
//
// Operand orders (aie_api): A is M x K row-major, B is K x N row-major, C is M
// x N row-major.
//
// bf16 x bf16 on AIE2P, as aie_api implements it:
//   * shapes 4x8x4, 8x8x4, 8x1x8 always, and 4x8x8, 8x8x8 without
//     AIE_API_EMULATE_BFLOAT16_MMUL_WITH_BFP16: element-wise bf16 MACs into
//     accfloat, k = 0..K-1 in order; each product is exact in f32 and each step
//     rounds the f32 sum to nearest even.
//   * 4x8x8 and 8x8x8 with AIE_API_EMULATE_BFLOAT16_MMUL_WITH_BFP16: both
//   operands are converted to
//     bfp16ebs8 (blocks of 8 along K: rows of A, columns of B) and multiplied
//     with the native 8x8x8 block instruction. The host models the conversion
//     as calibrated against NPU2 hardware
//     (docs/hardware.md#how-conversion-to-bfp16-rounds):
//         e = floor(log2(max |x|)) over the block (f32 subnormal inputs count
//         as 0), m = round(x / 2^(e - 6)) saturated to [-128, 127], value = m *
//         2^(e - 6),
//     where round follows the core's rounding mode (aie::set_rounding; reset
//     value floor), like every accumulator conversion: conv_even rounds half to
//     even, floor rounds toward -inf (see to_bfp16_block for the NPU2
//     measurements behind this); and the block instruction as: for each output,
//     the 8-term dot product of the mantissas is exact (an integer below 2^17),
//     it is scaled by 2^(eA + eB - 12) (exact), and added to the f32
//     accumulator with one round-to-nearest-even addition per mac.
//     NaN / Inf operands are not modelled.
#pragma once

#include "host_ops.hpp"

namespace aie {

namespace host {

inline float pow2f(int e) {
  if (e >= -126 && e <= 127)
    return bits_f32(uint32_t(e + 127) << 23);
  return float(std::ldexp(1.0, e));
}

// q rounded to an integer under `mode` (the rule the accumulator conversions
// apply to the dropped bits).
inline double round_to_int(double q, rnd mode) {
  const double f = std::floor(q), frac = q - f;
  if (frac == 0.0)
    return q;
  switch (mode) {
  case rnd::floor:
    return f;
  case rnd::ceil:
    return f + 1;
  case rnd::symmetric_floor:
    return q < 0 ? f + 1 : f; // toward zero
  case rnd::symmetric_ceil:
    return q < 0 ? f : f + 1; // away from zero
  default:
    break;
  }
  if (frac != 0.5)
    return frac < 0.5 ? f : f + 1;
  switch (mode) { // ties
  case rnd::positive_inf:
    return f + 1;
  case rnd::negative_inf:
    return f;
  case rnd::symmetric_inf:
    return q < 0 ? f : f + 1;
  case rnd::symmetric_zero:
    return q < 0 ? f + 1 : f;
  case rnd::conv_odd:
    return std::fmod(f, 2.0) != 0.0 ? f : f + 1;
  default:
    return std::fmod(f, 2.0) == 0.0 ? f : f + 1; // conv_even
  }
}

// One bfp16ebs8 block: 8 values at x[0], x[stride], ... -> 8 mantissas and the
// power of two of one mantissa step (e - 6). A block of zeros (or subnormals)
// gets mantissas 0 and step exponent 0. The mantissas are rounded under `mode`
// (callers pass the core's rounding mode). Evidence that the hardware
// conversion follows aie::set_rounding (derived from published NPU2
// measurements, each reproduced by this model to two or three digits):
//   * with conv_even set, mlir-air's bf16_in_fp32_out GEMM (bfp16-emulated
//   mmul) measures a mean relative
//     L1 of 9.3e-3 (round to nearest: 9.25e-3; floor would give 1.47e-2);
//   * mlir-aie's mm_bfp.cc, which never sets a mode and re-converts C to
//   bfp16ebs8 after every K chunk
//     of 64, measures 2.1e-2 / 6.9e-2 / 2.7e-1 at K = 64 / 512 / 2048 with
//     randn / sqrt(K) inputs (Xilinx/mlir-air
//     programming_examples/matrix_multiplication/bfp16/run.py); floor (the
//     reset mode) gives 2.11e-2 / 6.94e-2 / 2.71e-1, round to nearest 1.89e-2
//     / 2.17e-2 / 3.0e-2;
//   * mlir-air's bf16_in_fp32_out mm_aie2p.cc sets conv_even, its comment says,
//   because the emulated mmul
//     otherwise rounds with floor and biases the result low.
// The other modes apply their rule by analogy (not measured).
inline void to_bfp16_block(const float *x, unsigned stride, int8_t *m,
                           int *step_exp, rnd mode) {
  uint32_t maxmag = 0;
  for (unsigned i = 0; i < 8; ++i) {
    uint32_t u = f32_bits(x[i * stride]) & 0x7fffffffu;
    if (u > maxmag)
      maxmag = u;
  }
  const uint32_t ebits = maxmag >> 23;
  if (ebits == 0) { // zero or subnormal block
    for (unsigned i = 0; i < 8; ++i)
      m[i] = 0;
    *step_exp = 0;
    return;
  }
  const int e = int(ebits) - 127;
  const double inv =
      std::ldexp(1.0, 6 - e); // exact in double for every f32 exponent
  for (unsigned i = 0; i < 8; ++i) {
    float v = x[i * stride];
    if ((f32_bits(v) & 0x7f800000u) == 0)
      v = 0.0f; // subnormal -> 0
    double q = round_to_int(double(v) * inv, mode);
    if (q > 127.0)
      q = 127.0;
    if (q < -128.0)
      q = -128.0;
    m[i] = int8_t(q);
  }
  *step_exp = e - 6;
}

// The native 8x8x8 block instruction (A rows and B columns as bfp16ebs8 blocks
// along K): for each output, the 8-term mantissa dot product is exact (|d| <=
// 2^17), it is scaled by the two blocks' steps 2^(sa[i] + sb[j]) and added to
// the f32 accumulator with one round-to-nearest-even addition. Shared by the
// bfp16-emulated bf16 mmul, the block-type mmul (detail/host_block.hpp) and the
// mac_8x8_8x8T intrinsics (detail/host_intrinsics.hpp). `negate` subtracts the
// product instead (exact: c - p and c + (-p) round alike).
template <unsigned M, unsigned N>
inline void bfp16_block_mac(float *c, const int8_t (&ma)[M][8],
                            const int (&sa)[M], const int8_t (&mb)[N][8],
                            const int (&sb)[N], bool negate = false) {
  for (unsigned i = 0; i < M; ++i)
    for (unsigned j = 0; j < N; ++j) {
      int d = 0;
      for (unsigned k = 0; k < 8; ++k)
        d += int(ma[i][k]) * int(mb[j][k]);
      c[i * N + j] += float(negate ? -d : d) * pow2f(sa[i] + sb[j]);
    }
}

#ifdef AIE_API_EMULATE_BFLOAT16_MMUL_WITH_BFP16
inline constexpr bool kBf16MmulViaBfp16 = true;
#else
inline constexpr bool kBf16MmulViaBfp16 = false;
#endif

template <unsigned M, unsigned K, unsigned N>
inline constexpr bool bf16_shape_on_aie2p =
    (M == 4 && K == 8 && N == 4) || (M == 8 && K == 8 && N == 4) ||
    (M == 4 && K == 8 && N == 8) || (M == 8 && K == 8 && N == 8) ||
    (M == 8 && K == 1 && N == 8);

// The accumulator state of an aie::mmul, shared by the bf16 mmul below and the
// block mmul (detail/host_block.hpp): C as size_C accfloat lanes, and whether
// it still counts as zero.
template <unsigned SizeC>
struct mmul_acc {
  using accum_type = accum<accfloat, SizeC>;

  float c_[SizeC];
  bool zero_; // a default-constructed mmul counts as zero for its first mul/mac
  [[no_unique_address]] ::host::profile::live_acc<32 * SizeC> live_;

  mmul_acc() : zero_(true) { std::memset(c_, kPoisonByte, sizeof(c_)); }
  mmul_acc(const accum_type &acc) : zero_(false) {
    std::memcpy(c_, acc.d_, sizeof(c_));
  }
  template <typename T>
  mmul_acc(const vector<T, SizeC> &v, int shift = 0)
      : mmul_acc(accum_type(v, shift)) {}

  // Like the hardware, reading a default-constructed mmul before any mul/mac
  // returns garbage (NaN here).
  accum_type to_accum() const {
    accum_type a(::host::profile::view); // the mmul's own register
    std::memcpy(a.d_, c_, sizeof(c_));
    return a;
  }
  operator accum_type() const { return to_accum(); }

protected:
  void assign(const accum_type &acc) {
    std::memcpy(c_, acc.d_, sizeof(c_));
    zero_ = false;
  }
  // Start of every mac: an accumulator that counts as zero
  // (default-constructed, or after mul) is cleared to 0 first.
  void start_mac() {
    if (zero_)
      for (unsigned i = 0; i < SizeC; ++i)
        c_[i] = 0.0f;
    zero_ = false;
  }
};

template <typename TA, typename TB, typename Tag>
inline constexpr bool is_bf16_mmul =
    std::is_same_v<TA, bfloat16> && std::is_same_v<TB, bfloat16> &&
    (std::is_same_v<Tag, accauto> || std::is_same_v<Tag, accfloat>);

} // namespace host

template <unsigned M, unsigned K, unsigned N, typename TypeA,
          typename TypeB = TypeA, typename AccumTag = accauto>
struct mmul : host::mmul_acc<M * N> {
  static_assert(!(std::is_same_v<TypeA, float> || std::is_same_v<TypeB, float>),
                "aie::mmul: there is no f32 mmul on AIE2P");
  // (TypeB = bfp16ebs8 is the block-type specialisation in
  // detail/host_block.hpp.)
  static_assert(!std::is_same_v<TypeA, bfp16ebs8>,
                "aie::mmul: a bfp16ebs8 A needs a bfp16ebs8 B on AIE2P (there "
                "is no bfp16ebs8 x bf16 mmul)");
  static_assert(
      !(std::is_same_v<TypeA, bfp16ebs16> || std::is_same_v<TypeB, bfp16ebs16>),
      "aie::mmul: AIE2P has no bfp16ebs16 mmul (aie_api implements no shape "
      "for it); use bfp16ebs8");
  static_assert(std::is_same_v<TypeA, bfloat16> ==
                    std::is_same_v<TypeB, bfloat16>,
                "aie::mmul: AIE2P has no mixed bf16 x integer mmul");
  static_assert(!std::is_same_v<TypeA, bfloat16> ||
                    (std::is_same_v<AccumTag, accauto> ||
                     std::is_same_v<AccumTag, accfloat>),
                "aie::mmul: bf16 x bf16 accumulates into accfloat (use accauto "
                "or accfloat)");
  static_assert(!std::is_same_v<TypeA, bfloat16> ||
                    host::bf16_shape_on_aie2p<M, K, N>,
                "aie::mmul: this bf16 x bf16 shape does not exist on AIE2P "
                "(shapes: 4x8x4, 8x8x4, 4x8x8, 8x8x8, 8x1x8)");
  static_assert(host::is_bf16_mmul<TypeA, TypeB, AccumTag>,
                "aie::mmul: the host aie_api models bf16 x bf16 mmul only "
                "(integer mmul not modelled)");

  static constexpr unsigned size_A = M * K;
  static constexpr unsigned size_B = K * N;
  static constexpr unsigned size_C = M * N;
  static constexpr unsigned size() { return size_C; }
  using accum_type = accum<accfloat, size_C>;

  // bfp16 emulation applies to the 4x8x8 and 8x8x8 shapes only (aie_api's
  // mmul_bf16_bf16).
  static constexpr bool via_bfp16 =
      host::kBf16MmulViaBfp16 && K == 8 && N == 8 && (M == 4 || M == 8);

  using host::mmul_acc<size_C>::mmul_acc;
  mmul &operator=(const accum_type &acc) {
    this->assign(acc);
    return *this;
  }
  template <typename T>
  vector<T, size_C> to_vector(int shift = 0) const {
    return this->to_accum().template to_vector<T>(shift);
  }

  void mul(const vector<TypeA, size_A> &a, const vector<TypeB, size_B> &b) {
    this->zero_ = true;
    mac(a, b);
  }

  void mac(const vector<TypeA, size_A> &a, const vector<TypeB, size_B> &b) {
    this->start_mac();
    if constexpr (via_bfp16) {
      // A and B to accfloat and to bfp16 blocks, B transposed first, then one
      // block matmul
      ::host::profile::count(::host::profile::CONVERT, 4);
      ::host::profile::count(::host::profile::SHUFFLE, 1);
      ::host::profile::count(::host::profile::MAC, 1);
      mac_bfp16(a, b);
    } else {
      // 4x8x8 is one native bf16 matmul; other shapes go through 32-lane
      // element-wise MACs
      ::host::profile::count(::host::profile::MAC,
                             M * N * K == 256 ? 1 : M * N * K / 32);
      mac_elementwise(a, b);
    }
  }

private:
  void mac_elementwise(const vector<TypeA, size_A> &a,
                       const vector<TypeB, size_B> &b) {
    float af[size_A], bf[size_B];
    for (unsigned i = 0; i < size_A; ++i)
      af[i] = float(a.d_[i]);
    for (unsigned i = 0; i < size_B; ++i)
      bf[i] = float(b.d_[i]);
    for (unsigned i = 0; i < M; ++i)
      for (unsigned j = 0; j < N; ++j) {
        float acc = this->c_[i * N + j];
        for (unsigned k = 0; k < K; ++k)
          acc += af[i * K + k] * bf[k * N + j];
        this->c_[i * N + j] = acc;
      }
  }

  void mac_bfp16(const vector<TypeA, size_A> &a,
                 const vector<TypeB, size_B> &b) {
    float af[size_A], bf[size_B];
    for (unsigned i = 0; i < size_A; ++i)
      af[i] = float(a.d_[i]);
    for (unsigned i = 0; i < size_B; ++i)
      bf[i] = float(b.d_[i]);
    int8_t ma[M][8], mb[N][8];
    int ea[M], eb[N];
    const host::rnd mode = host::current_rnd();
    for (unsigned i = 0; i < M; ++i)
      host::to_bfp16_block(af + i * 8, 1, ma[i], &ea[i], mode); // row i of A
    for (unsigned j = 0; j < N; ++j)
      host::to_bfp16_block(bf + j, N, mb[j], &eb[j], mode); // column j of B
    host::bfp16_block_mac<M, N>(this->c_, ma, ea, mb, eb);
  }
};

} // namespace aie
