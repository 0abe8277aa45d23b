// SPDX-License-Identifier: MIT
// Host (x86-64) aie_api: the bfp16ebs8 block type on AIE2P.
//
//   aie::block_vector<bfp16ebs8, 64>           8 blocks of 8 values; each block
//   one 8-bit exponent E and 8
//                                              two's-complement 8-bit mantissas
//                                              m; value = m * 2^(E - 133)
//   accum<accfloat, 64>::to_vector<bfp16ebs8>() accfloat -> blocks of 8
//   consecutive lanes (the calibrated
//                                              bfp16 rule of
//                                              detail/host_mmul.hpp,
//                                              to_bfp16_block, under the
//                                              current rounding mode)
//   accum<accfloat, 64>(block_vector, shift)   exact: value * 2^shift
//   block_vector_(restrict_)input_buffer_stream / output_buffer_stream   pop /
//   push / seek aie::op_transpose(block_vector)            the B operand of a
//   block mmul aie::mmul<8, 8, 8, bfp16ebs8, bfp16ebs8>   native block mmul,
//   mul/mac(a, op_transpose(b)) aie::mmul<8, 8, 8, bfloat16, bfp16ebs8>    A
//   (bf16, M x K row-major) converted to blocks first
//
// Memory image (what the streams read and write, and d_ below): 9 bytes per
// block, the exponent byte at the lowest address, then m0..m7; 64 values = 72
// bytes, blocks packed back to back. The bias 133 = 127 + 6: aie_api builds its
// block -> accum identity with exponent bytes 127 and diagonal mantissas 0x40
// (= 64, i.e. 1.0), and mlir-air's bf16_x_bfp16 host packer (tested on NPU2)
// writes E = the block maximum's biased f32 exponent and decodes m * 2^(E -
// 127) / 64. A block of zeros (and of f32 subnormals) gets E = 0 here (the
// packer's choice; the exponent the hardware conversion writes for it is not
// documented -- its value is 0 either way). Block vectors have 64 or 128
// elements, as in aie_api on AIE2P (block_vector_storage: v64bfp16ebs8 and
// v128bfp16ebs8); the mmul takes 64-element operands (the 8x8x16 shape with its
// 128-element B is not modelled). bfp16ebs16 block vectors exist on AIE2P but
// are not modelled, and there is no bfp16ebs16 mmul (aie_api declares
// mmul<..., bfp16ebs16, bfp16ebs16> but implements no shape for it): both fail
// at compile time, like everything AIE2P lacks.
#pragma once

#include "host_mmul.hpp"

#include <algorithm>
#include <source_location>

namespace aie {

template <typename T, unsigned N>
class block_vector {
  static_assert(std::is_same_v<T, bfp16ebs8>,
                "aie::block_vector: the host aie_api models bfp16ebs8 only "
                "(bfp16ebs16 is not modelled)");
  static_assert(N == 64 || N == 128,
                "aie::block_vector: AIE2P's block vectors have 64 or 128 "
                "elements (aie_api block_vector_storage)");

public:
  using value_type = T;
  static constexpr unsigned size() { return N; }
  static constexpr unsigned block_size() { return 8; }
  static constexpr unsigned blocks() { return N / 8; }
  static constexpr unsigned mantissa_bits() { return 8; }
  static constexpr unsigned exponent_bits() { return 8; }
  static constexpr unsigned bits() {
    return N * mantissa_bits() + blocks() * exponent_bits();
  }
  static constexpr unsigned bytes() { return bits() / 8; }
  static constexpr unsigned memory_bits() { return bits(); }
  static constexpr unsigned memory_bytes() { return bytes(); }

  uint8_t d_[bytes()]; // the memory image: per block, exponent byte then 8
                       // mantissas

  block_vector() { std::memset(d_, host::kPoisonByte, sizeof(d_)); }
  block_vector(const block_vector &) = default;
  block_vector &operator=(const block_vector &) = default;
};

namespace host {

inline constexpr int kBfp16Bias = 133; // value = m * 2^(E - 133)

template <typename X>
struct is_block_vector : std::false_type {};
template <typename T, unsigned N>
struct is_block_vector<block_vector<T, N>> : std::true_type {};
template <typename X>
inline constexpr bool is_block_vector_v =
    is_block_vector<std::remove_cvref_t<X>>::value;

// Host-side views of one block vector (not aie_api functions; for tests and the
// model).
template <unsigned N>
inline int block_exponent(const block_vector<bfp16ebs8, N> &v, unsigned b) {
  return v.d_[9 * b];
}
template <unsigned N>
inline int block_mantissa(const block_vector<bfp16ebs8, N> &v, unsigned i) {
  return int8_t(v.d_[9 * (i / 8) + 1 + i % 8]);
}

// 8 blocks of 8 -> mantissas and step exponents (E - 133), as the block
// instruction reads them.
template <unsigned N>
inline void block_operand(const block_vector<bfp16ebs8, N> &v,
                          int8_t (&m)[N / 8][8], int (&step)[N / 8]) {
  for (unsigned b = 0; b < N / 8; ++b) {
    step[b] = int(v.d_[9 * b]) - kBfp16Bias;
    for (unsigned k = 0; k < 8; ++k)
      m[b][k] = int8_t(v.d_[9 * b + 1 + k]);
  }
}

// The B operand of a block mmul, marked as transposed (aie::op_transpose).
template <typename Vec>
struct transposed_op {
  Vec v;
  const Vec &parent1() const { return v; }
};
template <typename X>
struct is_transposed_op : std::false_type {};
template <typename V>
struct is_transposed_op<transposed_op<V>> : std::true_type {};

template <typename>
inline constexpr bool dependent_false = false;

} // namespace host

template <typename X>
concept BlockVector = host::is_block_vector_v<X>;

// accfloat -> bfp16ebs8: every 8 consecutive lanes become one block, by the
// calibrated bfp16 rule (host::to_bfp16_block: E = the biased f32 exponent of
// the block's largest magnitude, mantissas rounded under the mode set by
// aie::set_rounding -- half to even under conv_even, toward -inf under the
// reset mode floor, as NPU2 measurements indicate (see to_bfp16_block) -- and
// saturated to [-128, 127]). aie_api on AIE2P ignores `shift` for block types
// (its conversion calls the intrinsic without it); so does the host.
template <typename Tag, unsigned N>
template <typename T>
  requires(host::is_block_type_v<T>)
block_vector<T, N>
accum<Tag, N>::to_vector(int /*shift: ignored, as in aie_api*/) const {
  block_vector<T, N> r;
  const host::rnd mode = host::current_rnd();
  ::host::profile::count(::host::profile::CONVERT,
                         (N + 63) / 64); // one block conversion per 64 lanes
  for (unsigned b = 0; b < N / 8; ++b) {
    int8_t m[8];
    int step;
    host::to_bfp16_block(d_ + 8 * b, 1, m, &step, mode);
    bool zero = true;
    for (unsigned k = 0; k < 8; ++k)
      zero = zero && m[k] == 0;
    r.d_[9 * b] = zero ? uint8_t(0) : uint8_t(step + host::kBfp16Bias);
    std::memcpy(r.d_ + 9 * b + 1, m, 8);
  }
  return r;
}

// bfp16ebs8 -> accfloat, exact: m * 2^(E - 133 + shift) (aie_api multiplies by
// an identity whose exponent bytes are 127 + shift).
template <typename Tag, unsigned N>
template <typename T>
void accum<Tag, N>::from_vector(const block_vector<T, N> &v, int shift) {
  static_assert(host::is_block_type_v<T>);
  ::host::profile::count(::host::profile::CONVERT, (N + 63) / 64);
  for (unsigned i = 0; i < N; ++i)
    d_[i] = float(
        std::ldexp(double(host::block_mantissa(v, i)),
                   host::block_exponent(v, i / 8) - host::kBfp16Bias + shift));
}

template <typename TR, typename Tag, unsigned N>
  requires(host::is_block_type_v<TR>)
inline block_vector<TR, N> to_vector(const accum<Tag, N> &acc) {
  return acc.template to_vector<TR>();
}

// The B operand of a block-floating-point mmul, given as N x K (aie_api: only
// block vectors).
template <typename T, unsigned N>
inline host::transposed_op<block_vector<T, N>>
op_transpose(const block_vector<T, N> &v) {
  return {v};
}
template <typename T, unsigned N>
inline void op_transpose(const vector<T, N> &) {
  static_assert(host::dependent_false<T>,
                "aie::op_transpose: block vectors only (the B operand of a "
                "block-floating-point mmul)");
}

// Block vector buffer streams. Block vectors (576 bits) cannot be read with
// load_v; aie_api reads and writes them through the core's FIFO interface, one
// after the other from the start pointer (72 bytes each). Its block streams
// start (and restart after seek) at the FIFO position 0 of the pointer's
// 512-bit word, with no reset for a misaligned pointer (unlike its unaligned
// vector streams), so the start must be 64-byte aligned: the host treats a
// misaligned start like a misaligned load_v (reads or writes from the aligned
// word below, counted by aie_host_misaligned_accesses()).
template <typename T, unsigned Elems,
          aie_dm_resource Resource = aie_dm_resource::none>
class block_vector_input_buffer_stream {
public:
  using vector_type = block_vector<std::remove_const_t<T>, Elems>;
  using value_type = vector_type;

  explicit block_vector_input_buffer_stream(const T *ptr) : p_(start(ptr)) {
    ::host::profile::stream_opened(true);
  }
  block_vector_input_buffer_stream(const block_vector_input_buffer_stream &o)
      : p_(o.p_), pos_(o.pos_), known_at_(o.known_at_) {
    ::host::profile::stream_opened(true);
  }
  ~block_vector_input_buffer_stream() { ::host::profile::stream_closed(true); }

  // A pop takes the block from the load FIFO, which refills 512 bits at a
  // time (aie_api detail/aie2p/array_helpers.hpp, fifo_buffer_stream). Where
  // the compiler knows the stream's fill counter (no rolled loop between the
  // pop and the stream's opening or last seek) the fills are placed statically:
  // one load per 512-bit word the pop enters, i.e. for 72-byte vectors from a
  // 64-byte aligned start 2 loads for the first pop, then 1 each, a second
  // every 8 pops (9 words per 8 pops). Elsewhere every pop issues its fill:
  // 2 loads per pop.
  vector_type pop() {
    vector_type v;
    std::memcpy(v.d_, p_, vector_type::bytes());
    p_ += vector_type::bytes();
    const unsigned first = pos_ / 64, end = pos_ + vector_type::bytes();
    const unsigned last = (end - 1) / 64;
    const unsigned entered = pos_ % 64 == 0 ? last - first + 1 : last - first;
    pos_ = end;
    if (::host::profile::rolled_depth() == known_at_) {
      ::host::profile::count(::host::profile::LOAD, entered);
      ::host::profile::fill(false, entered - 1);
    } else {
      ::host::profile::count(::host::profile::LOAD, 2);
      ::host::profile::fill(true);
    }
    return v;
  }
  block_vector_input_buffer_stream &operator>>(vector_type &v) {
    v = pop();
    return *this;
  }
  void seek(int inc) {
    p_ = start(p_ + inc * int(vector_type::bytes()));
    pos_ = 0;
    known_at_ = ::host::profile::rolled_depth();
  }
  void seek_byte(int inc) {
    p_ = start(p_ + inc);
    pos_ = 0;
    known_at_ = ::host::profile::rolled_depth();
  }

private:
  static const uint8_t *start(const void *p) {
    return host::aligned_access<64>(static_cast<const uint8_t *>(p));
  }
  const uint8_t *p_;
  unsigned pos_ = 0; // bytes popped since the start or the last seek
  // Rolled loops running when the fill counter was last known (opening, seek).
  int known_at_ = ::host::profile::rolled_depth();
};

// The output stream models the core's store FIFO in 512-bit words: a push
// appends the block's 72 bytes to the word being assembled, and only a whole
// word reaches memory (aie_api's push is fifo_st_push then fifo_st_flush, and
// the flush writes complete words only; aie_api gives a stream no call that
// writes a partial word). So a stream whose pushes do not end on a word
// boundary leaves its tail in the FIFO: the host stops with an error naming the
// stream (where it was opened) and the bytes left, when the stream is
// destroyed or seeks (aie_api's seek restarts the FIFO at position 0).
template <typename T, unsigned Elems,
          aie_dm_resource Resource = aie_dm_resource::none>
class block_vector_output_buffer_stream {
public:
  using vector_type = block_vector<std::remove_const_t<T>, Elems>;
  using value_type = vector_type;

  explicit block_vector_output_buffer_stream(
      T *ptr, std::source_location at = std::source_location::current())
      : p_(start(ptr)), at_(at) {
    ::host::profile::stream_opened(false);
  }
  block_vector_output_buffer_stream(const block_vector_output_buffer_stream &o)
      : p_(o.p_), fill_(o.fill_), at_(o.at_) {
    std::memcpy(word_, o.word_, sizeof(word_));
    ::host::profile::stream_opened(false);
  }
  ~block_vector_output_buffer_stream() {
    ::host::profile::stream_closed(false);
    require_whole_words("destroyed");
  }

  // A push is a push into the store FIFO and its flush: two store-slot
  // operations per 64 elements.
  void push(const vector_type &v) {
    for (unsigned i = 0; i < vector_type::bytes();) {
      const unsigned n = std::min(64u - fill_, vector_type::bytes() - i);
      std::memcpy(word_ + fill_, v.d_ + i, n);
      fill_ += n;
      i += n;
      if (fill_ == 64) { // a whole word: written
        std::memcpy(p_, word_, 64);
        p_ += 64;
        fill_ = 0;
      }
    }
    ::host::profile::count(::host::profile::STORE, 2 * (Elems / 64));
  }
  block_vector_output_buffer_stream &operator<<(const vector_type &v) {
    push(v);
    return *this;
  }
  void seek(int inc) {
    require_whole_words("seeking");
    p_ = start(p_ + inc * int(vector_type::bytes()));
  }
  void seek_byte(int inc) {
    require_whole_words("seeking");
    p_ = start(p_ + inc);
  }

private:
  static uint8_t *start(void *p) {
    return host::aligned_access<64>(static_cast<uint8_t *>(p));
  }
  void require_whole_words(const char *when) const {
    if (fill_ == 0)
      return;
    char msg[512];
    std::snprintf(msg, sizeof(msg),
                  "block_vector_output_buffer_stream opened at %s:%u (%s) %s "
                  "with %u bytes of a partial 512-bit word in the store FIFO: "
                  "they never reach memory (a stream must push a whole "
                  "number of 64-byte words: 8 block vectors of 72 bytes, 4 of "
                  "144)",
                  at_.file_name(), unsigned(at_.line()), at_.function_name(),
                  when, fill_);
    host::fatal(msg);
  }
  uint8_t *p_;        // the next word's address
  uint8_t word_[64];  // the word being assembled in the FIFO
  unsigned fill_ = 0; // its bytes so far
  std::source_location at_;
};

template <typename T, unsigned Elems,
          aie_dm_resource Resource = aie_dm_resource::none>
using block_vector_restrict_input_buffer_stream =
    block_vector_input_buffer_stream<T, Elems, Resource>;
template <typename T, unsigned Elems,
          aie_dm_resource Resource = aie_dm_resource::none>
using block_vector_restrict_output_buffer_stream =
    block_vector_output_buffer_stream<T, Elems, Resource>;

// Block mmul (aie_api, AIE2P): C (M x N, row-major) = A x B with A M x K
// (bfp16ebs8 blocks along K, or bf16 row-major, converted to blocks first as
// aie_api does) and B passed transposed, as an N x K block vector (row j =
// column j of B, blocks along K): mul/mac(a, aie::op_transpose(b)).
// There is no bfp16ebs16 mmul on AIE2P.
template <unsigned M, unsigned K, unsigned N, typename TypeA, typename AccumTag>
struct mmul<M, K, N, TypeA, bfp16ebs16, AccumTag> {
  static_assert(host::dependent_false<TypeA>,
                "aie::mmul: AIE2P has no bfp16ebs16 mmul (aie_api implements "
                "no shape for it); use bfp16ebs8");
};

template <unsigned M, unsigned K, unsigned N, typename TypeA, typename AccumTag>
struct mmul<M, K, N, TypeA, bfp16ebs8, AccumTag> : host::mmul_acc<M * N> {
  static_assert(
      std::is_same_v<TypeA, bfp16ebs8> || std::is_same_v<TypeA, bfloat16>,
      "aie::mmul: a bfp16ebs8 B pairs with a bfp16ebs8 or bfloat16 A on AIE2P");
  static_assert(M == 8 && K == 8 && N == 8,
                "aie::mmul: the host aie_api models the 8x8x8 block shape only "
                "(AIE2P also has "
                "bfp16ebs8 x bfp16ebs8 8x8x16)");
  static_assert(std::is_same_v<AccumTag, accauto> ||
                    std::is_same_v<AccumTag, accfloat>,
                "aie::mmul: block-floating-point mmul accumulates into "
                "accfloat (use accauto or accfloat)");

  static constexpr unsigned size_A = M * K;
  static constexpr unsigned size_B = K * N;
  static constexpr unsigned size_C = M * N;
  static constexpr unsigned size() { return size_C; }
  using accum_type = accum<accfloat, size_C>;
  using a_type = std::conditional_t<std::is_same_v<TypeA, bfp16ebs8>,
                                    block_vector<bfp16ebs8, size_A>,
                                    vector<bfloat16, size_A>>;
  using b_type = block_vector<bfp16ebs8, size_B>;

  using host::mmul_acc<size_C>::mmul_acc;
  mmul &operator=(const accum_type &acc) {
    this->assign(acc);
    return *this;
  }
  template <typename T>
  auto to_vector(int shift = 0) const {
    return this->to_accum().template to_vector<T>(shift);
  }

  void mul(const a_type &a, const host::transposed_op<b_type> &b) {
    this->zero_ = true;
    mac(a, b);
  }
  void mac(const a_type &a, const host::transposed_op<b_type> &b) {
    this->start_mac();
    ::host::profile::count(::host::profile::MAC); // one 8x8x8 block matmul
    int8_t ma[M][8], mb[N][8];
    int sa[M], sb[N];
    if constexpr (std::is_same_v<TypeA, bfp16ebs8>)
      host::block_operand(a, ma, sa);
    else
      host::block_operand(accum_type(a).template to_vector<bfp16ebs8>(), ma,
                          sa);
    host::block_operand(b.parent1(), mb, sb);
    host::bfp16_block_mac<M, N>(this->c_, ma, sa, mb, sb);
  }
  // aie_api accepts the block B operand only through aie::op_transpose.
  template <typename B>
    requires(!host::is_transposed_op<B>::value)
  void mac(const a_type &, const B &) {
    static_assert(host::dependent_false<B>,
                  "aie::mmul: pass the block B operand as "
                  "aie::op_transpose(b), b holding B as N x K");
  }
  template <typename B>
    requires(!host::is_transposed_op<B>::value)
  void mul(const a_type &, const B &) {
    static_assert(host::dependent_false<B>,
                  "aie::mmul: pass the block B operand as "
                  "aie::op_transpose(b), b holding B as N x K");
  }
};

} // namespace aie
