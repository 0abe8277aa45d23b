// SPDX-License-Identifier: MIT
// Host (x86-64) aie_api: aie::vector and aie::accum.
//
// Sizes follow AIE2P's register file as aie_api exposes it: a vector is a
// power-of-two number of elements and at least 128 bits (vector<int8, 8> or
// vector<bfloat16, 4> do not exist); an accfloat accumulator is a power of two
// of at least 8 lanes. Violations fail at compile time with a message.
#pragma once

#include "host_scalar.hpp"

namespace aie {

template <typename T, unsigned N>
class vector;
template <typename Tag, unsigned N>
class accum;
template <typename T, unsigned N>
class block_vector; // detail/host_block.hpp

namespace host {

// A fresh register holds whatever was there before; the host build fills it
// with all-ones bytes (NaN for float and bf16 lanes, -1 for integers) so that a
// kernel reading an unset lane gets a visibly wrong answer, not a lucky zero.
inline constexpr uint8_t kPoisonByte = 0xFF;

template <typename T, unsigned N>
struct vector_storage {
  static constexpr bool four = is_4bit_v<T>;
  using unit = std::conditional_t<four, uint8_t, T>;
  static constexpr unsigned count = four ? N / 2 : N;
};

template <typename Tag>
struct accum_tag_ok : std::false_type {};
template <>
struct accum_tag_ok<accfloat> : std::true_type {};
template <>
struct accum_tag_ok<accauto> : std::true_type {};

} // namespace host

template <typename T, unsigned N>
class vector {
  static_assert(host::is_elem_v<T>,
                "aie::vector: element type is not an AIE2P vector element type "
                "(int4, uint4, int8, uint8, int16, uint16, int32, uint32, "
                "bfloat16, float)");
  static_assert(host::is_pow2(N),
                "aie::vector: the number of elements must be a power of two");
  static_assert(
      host::type_bits_v<T> * N >= 128,
      "aie::vector: AIE2P has no vectors narrower than 128 bits "
      "(minimum 32 x int4, 16 x int8, 8 x int16/bfloat16, 4 x int32/float)");
  static_assert(host::type_bits_v<T> * N <= 8192,
                "aie::vector: larger than 8192 bits (host limit)");

  using storage = host::vector_storage<T, N>;

public:
  using value_type = T;
  using unit_type = typename storage::unit;
  using elem_type = host::elem_value_t<T>;

  static constexpr unsigned size() { return N; }
  static constexpr unsigned bits() { return host::type_bits_v<T> * N; }
  static constexpr bool is_signed() { return host::is_signed_elem_v<T>; }
  static constexpr bool is_floating_point() { return host::is_float_elem_v<T>; }

  unit_type d_[storage::count];

  vector() { std::memset(d_, host::kPoisonByte, sizeof(d_)); }
  vector(const vector &) = default;
  vector &operator=(const vector &) = default;

  // Element access: a move between a vector register and the scalar unit
  // (vextract / vinsert), counted as SCALAR in the profiling build. The
  // host aie_api itself uses raw_get / raw_set, which count nothing.
  elem_type get(unsigned i) const {
    ::host::profile::count(::host::profile::SCALAR);
    return raw_get(i);
  }
  vector &set(elem_type v, unsigned i) {
    ::host::profile::count(::host::profile::SCALAR);
    return raw_set(v, i);
  }
  // 4-bit elements read as int (sign-extended for int4).
  elem_type raw_get(unsigned i) const {
    if constexpr (storage::four) {
      unsigned nib = (d_[i >> 1] >> ((i & 1u) * 4)) & 0xFu;
      if constexpr (std::is_same_v<T, int4>)
        return int(nib ^ 8u) - 8;
      else
        return int(nib);
    } else {
      return d_[i];
    }
  }
  vector &raw_set(elem_type v, unsigned i) {
    if constexpr (storage::four) {
      unsigned sh = (i & 1u) * 4;
      d_[i >> 1] =
          uint8_t((d_[i >> 1] & ~(0xFu << sh)) | ((unsigned(v) & 0xFu) << sh));
    } else {
      d_[i] = v;
    }
    return *this;
  }
  elem_type operator[](unsigned i) const { return get(i); }
  // Writable element reference (not for 4-bit elements, which are not
  // addressable).
  template <typename U = T, typename = std::enable_if_t<!host::is_4bit_v<U>>>
  T &operator[](unsigned i) {
    ::host::profile::count(::host::profile::SCALAR);
    return d_[i];
  }

  // Sub-vector idx of E elements (idx is a partition index, not an element
  // offset). An index the optimizer cannot fold is counted
  // (aie_host_runtime_extracts): always inlined, so that a constant index at
  // the call site is seen as one.
  template <unsigned E>
  [[gnu::always_inline]] inline vector<T, E> extract(unsigned idx) const {
    static_assert(N % E == 0 && E <= N,
                  "extract: E must divide the vector size");
    if (!__builtin_constant_p(idx))
      ++host::g_runtime_extracts;
    if (idx >= N / E)
      host::fatal("extract: partition index out of range");
    vector<T, E> r;
    if constexpr (storage::four)
      std::memcpy(r.d_, d_ + idx * E / 2, E / 2);
    else
      std::memcpy(r.d_, d_ + idx * E, sizeof(T) * E);
    return r;
  }
  template <unsigned E>
  vector &insert(unsigned idx, const vector<T, E> &v) {
    static_assert(N % E == 0 && E <= N,
                  "insert: E must divide the vector size");
    if (idx >= N / E)
      host::fatal("insert: partition index out of range");
    if constexpr (storage::four)
      std::memcpy(d_ + idx * E / 2, v.d_, E / 2);
    else
      std::memcpy(d_ + idx * E, v.d_, sizeof(T) * E);
    return *this;
  }
  // A larger vector holding this one at partition idx; the other lanes are
  // undefined.
  template <unsigned E>
  vector<T, E> grow(unsigned idx = 0) const {
    static_assert(E >= N && E % N == 0,
                  "grow: target size must be a multiple of the vector size");
    vector<T, E> r;
    r.insert(idx, *this);
    return r;
  }
  template <unsigned E>
  vector<T, E> grow_replicate() const {
    static_assert(
        E >= N && E % N == 0,
        "grow_replicate: target size must be a multiple of the vector size");
    vector<T, E> r;
    for (unsigned i = 0; i < E / N; ++i)
      r.insert(i, *this);
    return r;
  }

  // Reinterpret the register bits as another element type (little-endian,
  // 4-bit: low nibble first).
  template <typename U>
  vector<U, bits() / host::type_bits_v<U>> cast_to() const {
    vector<U, bits() / host::type_bits_v<U>> r;
    static_assert(sizeof(r.d_) == sizeof(d_));
    std::memcpy(r.d_, d_, sizeof(d_));
    return r;
  }

  // Widen every element to the next integer type (4 -> 8 -> 16 -> 32 bits).
  // unpack_sign(s) reads the source as signed when s is true (sign-extension)
  // and as unsigned otherwise (zero-extension).
  template <typename U = host::next_int_t<T>>
  vector<U, N> unpack_sign(bool sign) const {
    static_assert(!host::is_float_elem_v<T>, "unpack: integer vectors only");
    static_assert(
        host::type_bits_v<U> == 2 * host::type_bits_v<T>,
        "unpack: the destination type must be twice as wide as the source");
    vector<U, N> r;
    ::host::profile::count(::host::profile::SHUFFLE,
                           ::host::profile::words512(vector<U, N>::bits()));
    constexpr unsigned b = host::type_bits_v<T>;
    for (unsigned i = 0; i < N; ++i) {
      int64_t raw;
      if constexpr (storage::four)
        raw = (d_[i >> 1] >> ((i & 1u) * 4)) & 0xF;
      else
        raw = int64_t(std::make_unsigned_t<T>(d_[i]));
      if (sign && (raw >> (b - 1)) & 1)
        raw -= (int64_t(1) << b);
      r.d_[i] = U(raw);
    }
    return r;
  }
  template <typename U = host::next_int_t<T>>
  vector<U, N> unpack() const {
    return unpack_sign<U>(is_signed());
  }
};

template <typename Tag, unsigned N>
class accum {
  static_assert(host::accum_tag_ok<Tag>::value,
                "aie::accum: the host aie_api models floating-point "
                "accumulators (accfloat) only");
  static_assert(
      host::is_pow2(N) && N >= 8,
      "aie::accum: accfloat accumulators have a power-of-two size >= 8 lanes");

public:
  using value_type = accfloat;
  static constexpr unsigned size() { return N; }
  static constexpr unsigned bits() { return 32 * N; }

  float d_[N];
  [[no_unique_address]] ::host::profile::live_acc<32 * N> live_;

  accum() { std::memset(d_, host::kPoisonByte, sizeof(d_)); }
  // Another value's register (the profiling build does not count it).
  explicit accum(::host::profile::view_t v) : live_(v) {
    std::memset(d_, host::kPoisonByte, sizeof(d_));
  }
  accum(const accum &) = default;
  accum &operator=(const accum &) = default;
  template <typename Tag2>
  accum(const accum<Tag2, N> &o) {
    std::memcpy(d_, o.d_, sizeof(d_));
  }
  // Explicit, as in aie_api: `accum<accfloat, 64> a(v);` or `a = v;`, never
  // `accum<accfloat, 64> a = v;`.
  template <typename T>
  explicit accum(const vector<T, N> &v, int shift = 0) {
    from_vector(v, shift);
  }
  // From a block vector (detail/host_block.hpp): exact, times 2^shift.
  template <typename T>
  explicit accum(const block_vector<T, N> &v, int shift = 0) {
    from_vector(v, shift);
  }
  template <typename T>
  void from_vector(const block_vector<T, N> &v, int shift = 0);
  template <typename T>
  accum &operator=(const vector<T, N> &v) {
    from_vector(v);
    return *this;
  }

  // bf16 / f32 -> accfloat is exact (shift must be 0 for floating-point
  // sources, as in aie_api).
  template <typename T>
  void from_vector(const vector<T, N> &v, int shift = 0) {
    static_assert(
        host::is_float_elem_v<T>,
        "accum<accfloat>::from_vector: bfloat16 or float vectors only");
    if (shift != 0)
      host::fatal("accum<accfloat>::from_vector: shift must be 0 for "
                  "floating-point data");
    ::host::profile::count(::host::profile::CONVERT, (N + 31) / 32); // ups
    for (unsigned i = 0; i < N; ++i)
      d_[i] = float(v.d_[i]);
  }

  // accfloat -> bf16 rounds under the mode set by aie::set_rounding (assumed,
  // see docs/kernel.md#host-aie_api); -> f32 exact. accfloat -> block vector
  // (detail/host_block.hpp).
  template <typename T>
    requires(host::is_block_type_v<T>)
  block_vector<T, N> to_vector(int shift = 0) const;

  template <typename T>
    requires(!host::is_block_type_v<T>)
  vector<T, N> to_vector(int shift = 0) const {
    static_assert(host::is_float_elem_v<T>,
                  "accum<accfloat>::to_vector: bfloat16 or float only");
    if (shift != 0)
      host::fatal("accum<accfloat>::to_vector: shift must be 0 for "
                  "floating-point data");
    vector<T, N> r;
    if constexpr (std::is_same_v<T, float>) {
      std::memcpy(r.d_, d_, sizeof(d_)); // a register move
    } else {
      ::host::profile::count(::host::profile::CONVERT, (N + 31) / 32); // srs
      const host::rnd m = host::current_rnd();
      for (unsigned i = 0; i < N; ++i)
        r.d_[i] = bfloat16::from_bits(host::f32_to_bf16_bits(d_[i], m));
    }
    return r;
  }
  template <typename T>
  auto to_vector_sign(bool, int shift = 0) const {
    return to_vector<T>(shift);
  }

  template <unsigned E>
  [[gnu::always_inline]] inline accum<Tag, E> extract(unsigned idx) const {
    static_assert(N % E == 0 && E <= N,
                  "accum::extract: E must divide the size");
    if (!__builtin_constant_p(idx)) // as vector::extract
      ++host::g_runtime_extracts;
    if (idx >= N / E)
      host::fatal("accum::extract: partition index out of range");
    accum<Tag, E> r;
    std::memcpy(r.d_, d_ + idx * E, sizeof(float) * E);
    return r;
  }
  template <unsigned E>
  accum &insert(unsigned idx, const accum<Tag, E> &a) {
    static_assert(N % E == 0 && E <= N,
                  "accum::insert: E must divide the size");
    if (idx >= N / E)
      host::fatal("accum::insert: partition index out of range");
    std::memcpy(d_ + idx * E, a.d_, sizeof(float) * E);
    return *this;
  }
  template <unsigned E>
  accum<Tag, E> grow(unsigned idx = 0) const {
    static_assert(E >= N && E % N == 0,
                  "accum::grow: target size must be a multiple of the size");
    accum<Tag, E> r;
    r.insert(idx, *this);
    return r;
  }
};

namespace host {
template <typename X>
struct is_vector : std::false_type {};
template <typename T, unsigned N>
struct is_vector<vector<T, N>> : std::true_type {};
template <typename X>
inline constexpr bool is_vector_v = is_vector<std::remove_cvref_t<X>>::value;
template <typename X>
struct is_accum : std::false_type {};
template <typename Tag, unsigned N>
struct is_accum<accum<Tag, N>> : std::true_type {};
template <typename X>
inline constexpr bool is_accum_v = is_accum<std::remove_cvref_t<X>>::value;
} // namespace host

template <typename X>
concept Vector = host::is_vector_v<X>;
template <typename X>
concept Accum = host::is_accum_v<X>;
template <typename X>
concept Elem = host::is_elem_v<std::remove_cvref_t<X>> ||
               std::is_arithmetic_v<std::remove_cvref_t<X>>;

} // namespace aie
