// SPDX-License-Identifier: MIT
// Host (x86-64) aie_api: memory access, initialisation, reshaping and
// element-wise arithmetic.
#pragma once

#include <cmath>
#include <utility>

#include "host_vector.hpp"

namespace aie {

namespace host {

// Alignment AIE2P's load/store unit needs for a vector of `bytes` bytes
// (128-bit: 16, 256-bit: 32, wider: 64), as aie_api states for __AIE_ARCH__
// == 21.
constexpr uintptr_t ldst_align(unsigned bytes) {
  return bytes == 16 ? 16 : bytes == 32 ? 32 : 64;
}

// True for an address in the calling thread's stack (at or above the current
// frame: the stack grows down). The AIE compilers raise the alignment of a
// stack object to what the vector accesses on it need (LLVM enforces a load's
// alignment on an alloca), so a local array is never misaligned there.
__attribute__((noinline)) inline bool on_stack(const void *p) {
  const uintptr_t here =
      reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  return a >= here && a - here < (uintptr_t(8) << 20);
}

template <unsigned Bytes, typename P>
inline P *aligned_access(P *ptr) {
  constexpr uintptr_t a = ldst_align(Bytes);
  uintptr_t addr = reinterpret_cast<uintptr_t>(ptr);
  if ((addr & (a - 1)) && !on_stack(ptr)) {
#ifdef AIE_HOST_STRICT_ALIGNMENT
    fatal("misaligned vector load/store (the hardware would silently access "
          "the aligned vector below)");
#endif
    ++g_misaligned;
    addr &= ~(a - 1);
  }
  return reinterpret_cast<P *>(addr);
}

template <typename T>
inline constexpr unsigned native_elems_v = 512 / type_bits_v<T>;

template <typename T>
inline T wrap_int(int64_t v) {
  return T(std::make_unsigned_t<T>(uint64_t(v)));
}

// One element-wise add/sub in the element type's own arithmetic: integers wrap,
// float rounds to nearest even, bfloat16 goes through accfloat and back under
// the current rounding mode.
template <typename T>
inline T add_elem(T a, T b, bool subtract) {
  if constexpr (std::is_same_v<T, float>) {
    return subtract ? a - b : a + b;
  } else if constexpr (std::is_same_v<T, bfloat16>) {
    float r = subtract ? float(a) - float(b) : float(a) + float(b);
    return bfloat16::from_bits(f32_to_bf16_bits(r, current_rnd()));
  } else {
    return wrap_int<T>(subtract ? int64_t(a) - int64_t(b)
                                : int64_t(a) + int64_t(b));
  }
}

template <typename A, typename B>
inline constexpr bool is_bf16_mul_v =
    std::is_same_v<A, bfloat16> && std::is_same_v<B, bfloat16>;

template <typename A, typename B>
constexpr void check_mul_types() {
  static_assert(
      !(std::is_same_v<A, float> || std::is_same_v<B, float>),
      "aie::mul/mac: f32 x f32 vector multiplication is not available on AIE2P "
      "(docs/hardware.md#no-f32-x-f32-vector-multiply); "
      "multiply bf16 x bf16 into an accfloat accumulator");
  static_assert(is_bf16_mul_v<A, B>,
                "aie::mul/mac: the host aie_api models bf16 x bf16 -> accfloat "
                "element-wise products only");
}

} // namespace host

// -------------------------------------------------------------------------------
// memory access
template <unsigned Elems, typename T>
inline auto load_v(const T *ptr) {
  using U = std::remove_cv_t<T>;
  vector<U, Elems> r;
  constexpr unsigned bytes = vector<U, Elems>::bits() / 8;
  const T *p = host::aligned_access<bytes>(ptr);
  std::memcpy(r.d_, p, bytes);
  ::host::profile::count(::host::profile::LOAD,
                         ::host::profile::words512(bytes * 8));
  return r;
}
template <typename T>
inline auto load_v(const T *ptr) {
  return load_v<host::native_elems_v<std::remove_cv_t<T>>>(ptr);
}

template <typename T, unsigned Elems>
inline T *store_v(T *ptr, const vector<std::remove_cv_t<T>, Elems> &v) {
  constexpr unsigned bytes = vector<std::remove_cv_t<T>, Elems>::bits() / 8;
  T *p = host::aligned_access<bytes>(ptr);
  std::memcpy(p, v.d_, bytes);
  ::host::profile::count(::host::profile::STORE,
                         ::host::profile::words512(bytes * 8));
  return ptr;
}

// Unaligned variants: the hardware splits them into aligned accesses and
// shuffles; the result is the plain memory contents at ptr. aligned_elems is a
// promise the host ignores.
template <unsigned Elems, typename T>
inline auto load_unaligned_v(const T *ptr, unsigned /*aligned_elems*/ = 1) {
  using U = std::remove_cv_t<T>;
  vector<U, Elems> r;
  std::memcpy(r.d_, ptr, vector<U, Elems>::bits() / 8);
  // two aligned loads and a shuffle per 512-bit word
  ::host::profile::count(
      ::host::profile::LOAD,
      2 * ::host::profile::words512(vector<U, Elems>::bits()));
  ::host::profile::count(::host::profile::SHUFFLE,
                         ::host::profile::words512(vector<U, Elems>::bits()));
  return r;
}
template <typename T, unsigned Elems>
inline T *store_unaligned_v(T *ptr, const vector<std::remove_cv_t<T>, Elems> &v,
                            unsigned /*aligned_elems*/ = 1) {
  std::memcpy(ptr, v.d_, vector<std::remove_cv_t<T>, Elems>::bits() / 8);
  ::host::profile::count(::host::profile::STORE,
                         2 * ::host::profile::words512(
                                 vector<std::remove_cv_t<T>, Elems>::bits()));
  return ptr;
}

// -------------------------------------------------------------------------------
// initialisation
template <typename T, unsigned Elems = host::native_elems_v<T>>
inline auto zeros() {
  if constexpr (host::accum_tag_ok<T>::value) {
    accum<accfloat, Elems> r;
    for (unsigned i = 0; i < Elems; ++i)
      r.d_[i] = 0.0f;
    return r;
  } else {
    vector<T, Elems> r;
    std::memset(r.d_, 0, sizeof(r.d_));
    return r;
  }
}

template <typename T, unsigned Elems = host::native_elems_v<T>, typename V>
inline vector<T, Elems> broadcast(V value) {
  ::host::profile::count(::host::profile::SHUFFLE);
  vector<T, Elems> r;
  if constexpr (host::is_4bit_v<T>) {
    for (unsigned i = 0; i < Elems; ++i)
      r.raw_set(int(value), i);
  } else {
    const T t = T(value);
    for (unsigned i = 0; i < Elems; ++i)
      r.d_[i] = t;
  }
  return r;
}

// -------------------------------------------------------------------------------
// reshaping
template <typename T, unsigned E, typename... Vs>
inline auto concat(const vector<T, E> &v, const Vs &...vs) {
  static_assert((std::is_same_v<Vs, vector<T, E>> && ...),
                "concat: all vectors must have the same type and size");
  constexpr unsigned n = 1 + sizeof...(Vs);
  static_assert(host::is_pow2(n),
                "concat: the number of vectors must be a power of two");
  vector<T, E * n> r;
  unsigned i = 0;
  r.insert(i++, v);
  (r.insert(i++, vs), ...);
  return r;
}
template <typename Tag, unsigned E, typename... As>
inline auto concat(const accum<Tag, E> &a, const As &...as) {
  static_assert((std::is_same_v<As, accum<Tag, E>> && ...),
                "concat: all accumulators must have the same type and size");
  constexpr unsigned n = 1 + sizeof...(As);
  accum<Tag, E * n> r;
  unsigned i = 0;
  r.insert(i++, a);
  (r.insert(i++, as), ...);
  return r;
}

// v seen as a Row x Col row-major matrix; returns its Col x Row transpose:
// out[c * Row + r] = v[r * Col + c].
template <typename T, unsigned N>
inline vector<T, N> transpose(const vector<T, N> &v, unsigned Row,
                              unsigned Col) {
  if (Row * Col != N || Row == 0 || Col == 0)
    host::fatal("transpose: Row * Col must equal the vector size");
  ::host::profile::count(::host::profile::SHUFFLE,
                         ::host::profile::words512(vector<T, N>::bits()));
  vector<T, N> r;
  for (unsigned rr = 0; rr < Row; ++rr)
    for (unsigned c = 0; c < Col; ++c)
      r.raw_set(v.raw_get(rr * Col + c), c * Row + rr);
  return r;
}

// zip: {v[0:c], w[0:c], v[c:2c], w[c:2c], ...} split into two vectors of the
// input size.
template <typename T, unsigned N>
inline std::pair<vector<T, N>, vector<T, N>>
interleave_zip(const vector<T, N> &v, const vector<T, N> &w, unsigned chunk) {
  if (!host::is_pow2(chunk) || chunk > N || host::type_bits_v<T> * chunk < 8)
    host::fatal("interleave_zip: chunk must be a power of two, <= the vector "
                "size, and >= 8 bits");
  ::host::profile::count(::host::profile::SHUFFLE,
                         2 * ::host::profile::words512(vector<T, N>::bits()));
  vector<T, N> out[2];
  unsigned o = 0;
  for (unsigned base = 0; base < N; base += chunk)
    for (const vector<T, N> *src : {&v, &w})
      for (unsigned i = 0; i < chunk; ++i, ++o)
        out[o / N].raw_set(src->raw_get(base + i), o % N);
  return {out[0], out[1]};
}

// unzip: first = even chunks of v then of w, second = odd chunks of v then of
// w.
template <typename T, unsigned N>
inline std::pair<vector<T, N>, vector<T, N>>
interleave_unzip(const vector<T, N> &v, const vector<T, N> &w, unsigned chunk) {
  if (!host::is_pow2(chunk) || chunk > N || host::type_bits_v<T> * chunk < 8)
    host::fatal("interleave_unzip: chunk must be a power of two, <= the vector "
                "size, and >= 8 bits");
  ::host::profile::count(::host::profile::SHUFFLE,
                         2 * ::host::profile::words512(vector<T, N>::bits()));
  vector<T, N> out[2];
  unsigned o[2] = {0, 0};
  for (const vector<T, N> *src : {&v, &w})
    for (unsigned base = 0; base < N; base += chunk) {
      unsigned which = (base / chunk) & 1u;
      for (unsigned i = 0; i < chunk; ++i)
        out[which].raw_set(src->raw_get(base + i), o[which]++);
    }
  return {out[0], out[1]};
}

// -------------------------------------------------------------------------------
// add / sub / neg
template <typename T, unsigned N>
inline vector<T, N> add(const vector<T, N> &a, const vector<T, N> &b) {
  ::host::profile::count(::host::profile::ALU,
                         ::host::profile::words512(vector<T, N>::bits()));
  static_assert(!host::is_4bit_v<T>,
                "add: 4-bit vectors have no arithmetic on AIE2P; unpack first");
  vector<T, N> r;
  for (unsigned i = 0; i < N; ++i)
    r.d_[i] = host::add_elem<T>(a.d_[i], b.d_[i], false);
  return r;
}
template <typename T, unsigned N>
inline vector<T, N> sub(const vector<T, N> &a, const vector<T, N> &b) {
  ::host::profile::count(::host::profile::ALU,
                         ::host::profile::words512(vector<T, N>::bits()));
  static_assert(!host::is_4bit_v<T>,
                "sub: 4-bit vectors have no arithmetic on AIE2P; unpack first");
  vector<T, N> r;
  for (unsigned i = 0; i < N; ++i)
    r.d_[i] = host::add_elem<T>(a.d_[i], b.d_[i], true);
  return r;
}
template <typename T, unsigned N, typename E>
  requires(!Vector<E> && !Accum<E>)
inline vector<T, N> add(const vector<T, N> &a, E s) {
  return add(a, broadcast<T, N>(s));
}
template <typename T, unsigned N, typename E>
  requires(!Vector<E> && !Accum<E>)
inline vector<T, N> add(E s, const vector<T, N> &a) {
  return add(broadcast<T, N>(s), a);
}
template <typename T, unsigned N, typename E>
  requires(!Vector<E> && !Accum<E>)
inline vector<T, N> sub(const vector<T, N> &a, E s) {
  return sub(a, broadcast<T, N>(s));
}
template <typename T, unsigned N, typename E>
  requires(!Vector<E> && !Accum<E>)
inline vector<T, N> sub(E s, const vector<T, N> &a) {
  return sub(broadcast<T, N>(s), a);
}

template <typename Tag, unsigned N>
inline accum<Tag, N> add(const accum<Tag, N> &a, const accum<Tag, N> &b) {
  ::host::profile::count(::host::profile::ALU,
                         (N + 15) / 16); // 16 f32 lanes per add
  accum<Tag, N> r;
  for (unsigned i = 0; i < N; ++i)
    r.d_[i] = a.d_[i] + b.d_[i];
  return r;
}
template <typename Tag, unsigned N>
inline accum<Tag, N> sub(const accum<Tag, N> &a, const accum<Tag, N> &b) {
  ::host::profile::count(::host::profile::ALU,
                         (N + 15) / 16); // 16 f32 lanes per add
  accum<Tag, N> r;
  for (unsigned i = 0; i < N; ++i)
    r.d_[i] = a.d_[i] - b.d_[i];
  return r;
}
template <typename Tag, unsigned N, typename T>
inline accum<Tag, N> add(const accum<Tag, N> &a, const vector<T, N> &v) {
  ::host::profile::count(::host::profile::ALU,
                         (N + 15) / 16); // 16 f32 lanes per add
  static_assert(host::is_float_elem_v<T>,
                "add(accfloat, vector): bfloat16 or float vector");
  accum<Tag, N> r;
  for (unsigned i = 0; i < N; ++i)
    r.d_[i] = a.d_[i] + float(v.d_[i]);
  return r;
}
template <typename Tag, unsigned N, typename T>
inline accum<Tag, N> sub(const accum<Tag, N> &a, const vector<T, N> &v) {
  ::host::profile::count(::host::profile::ALU,
                         (N + 15) / 16); // 16 f32 lanes per add
  static_assert(host::is_float_elem_v<T>,
                "sub(accfloat, vector): bfloat16 or float vector");
  accum<Tag, N> r;
  for (unsigned i = 0; i < N; ++i)
    r.d_[i] = a.d_[i] - float(v.d_[i]);
  return r;
}

template <typename T, unsigned N>
inline vector<T, N> neg(const vector<T, N> &a) {
  static_assert(!host::is_4bit_v<T>, "neg: unpack 4-bit vectors first");
  vector<T, N> r;
  for (unsigned i = 0; i < N; ++i) {
    if constexpr (host::is_float_elem_v<T>)
      r.d_[i] = -a.d_[i];
    else
      r.d_[i] = host::wrap_int<T>(-int64_t(a.d_[i]));
  }
  return r;
}
template <typename Tag, unsigned N>
inline accum<Tag, N> neg(const accum<Tag, N> &a) {
  accum<Tag, N> r;
  for (unsigned i = 0; i < N; ++i)
    r.d_[i] = -a.d_[i];
  return r;
}

template <typename T, unsigned N>
inline vector<T, N> max(const vector<T, N> &a, const vector<T, N> &b) {
  static_assert(!host::is_4bit_v<T>, "max: unpack 4-bit vectors first");
  vector<T, N> r;
  for (unsigned i = 0; i < N; ++i)
    r.d_[i] = float(a.d_[i]) >= float(b.d_[i]) ? a.d_[i] : b.d_[i];
  return r;
}
template <typename T, unsigned N>
inline vector<T, N> min(const vector<T, N> &a, const vector<T, N> &b) {
  static_assert(!host::is_4bit_v<T>, "min: unpack 4-bit vectors first");
  vector<T, N> r;
  for (unsigned i = 0; i < N; ++i)
    r.d_[i] = float(a.d_[i]) <= float(b.d_[i]) ? a.d_[i] : b.d_[i];
  return r;
}

// -------------------------------------------------------------------------------
// mul / mac / msc bf16 x bf16 products are exact in f32 (8 + 8 significand
// bits); mac/msc round the sum once (f32, nearest even).
namespace host {
template <bool Negate, typename Tag, unsigned N, typename A, typename B>
inline accum<accfloat, N> mul_acc(const accum<Tag, N> *acc, bool subtract,
                                  const vector<A, N> &a,
                                  const vector<B, N> &b) {
  check_mul_types<A, B>();
  ::host::profile::count(::host::profile::MAC,
                         (N + 31) / 32); // 32 bf16 lanes per element-wise MAC
  // A mac / msc writes the accumulator register it reads (`acc = mac(acc,
  // ...)`): no new register.
  accum<accfloat, N> r =
      acc ? accum<accfloat, N>(::host::profile::view) : accum<accfloat, N>();
  for (unsigned i = 0; i < N; ++i) {
    float p = float(a.d_[i]) * float(b.d_[i]);
    if (Negate)
      p = -p;
    r.d_[i] = acc ? (subtract ? acc->d_[i] - p : acc->d_[i] + p) : p;
  }
  return r;
}
} // namespace host

template <typename AccTag = accauto, typename A, unsigned N, typename B>
inline accum<accfloat, N> mul(const vector<A, N> &a, const vector<B, N> &b) {
  return host::mul_acc<false>((const accum<accfloat, N> *)nullptr, false, a, b);
}
template <typename AccTag = accauto, typename A, unsigned N, typename E>
  requires(!Vector<E>)
inline accum<accfloat, N> mul(const vector<A, N> &a, E s) {
  return mul(a, broadcast<A, N>(s));
}
template <typename AccTag = accauto, typename A, unsigned N, typename E>
  requires(!Vector<E>)
inline accum<accfloat, N> mul(E s, const vector<A, N> &a) {
  return mul(broadcast<A, N>(s), a);
}
template <typename AccTag = accauto, typename A, unsigned N, typename B>
inline accum<accfloat, N> negmul(const vector<A, N> &a, const vector<B, N> &b) {
  return host::mul_acc<true>((const accum<accfloat, N> *)nullptr, false, a, b);
}

template <typename Tag, unsigned N, typename A, typename B>
inline accum<Tag, N> mac(const accum<Tag, N> &acc, const vector<A, N> &a,
                         const vector<B, N> &b) {
  return host::mul_acc<false>(&acc, false, a, b);
}
template <typename Tag, unsigned N, typename A, typename E>
  requires(!Vector<E>)
inline accum<Tag, N> mac(const accum<Tag, N> &acc, const vector<A, N> &a, E s) {
  return mac(acc, a, broadcast<A, N>(s));
}
template <typename Tag, unsigned N, typename A, typename E>
  requires(!Vector<E>)
inline accum<Tag, N> mac(const accum<Tag, N> &acc, E s, const vector<A, N> &a) {
  return mac(acc, broadcast<A, N>(s), a);
}
template <typename Tag, unsigned N, typename A, typename B>
inline accum<Tag, N> msc(const accum<Tag, N> &acc, const vector<A, N> &a,
                         const vector<B, N> &b) {
  return host::mul_acc<false>(&acc, true, a, b);
}
template <typename Tag, unsigned N, typename A, typename E>
  requires(!Vector<E>)
inline accum<Tag, N> msc(const accum<Tag, N> &acc, const vector<A, N> &a, E s) {
  return msc(acc, a, broadcast<A, N>(s));
}
template <typename Tag, unsigned N, typename A, typename E>
  requires(!Vector<E>)
inline accum<Tag, N> msc(const accum<Tag, N> &acc, E s, const vector<A, N> &a) {
  return msc(acc, broadcast<A, N>(s), a);
}

// -------------------------------------------------------------------------------
// reductions Halving tree, as aie_api reduces on AIE2P: x[i] += x[i + n/2]
// until one lane is left (f32 rounding at every step for float; integers wrap).
template <typename T, unsigned N>
inline T reduce_add(const vector<T, N> &v) {
  static_assert(
      std::is_same_v<T, float> ||
          (!host::is_float_elem_v<T> && !host::is_4bit_v<T>),
      "reduce_add: float or 8/16/32-bit integer vectors (host aie_api)");
  T x[N];
  std::memcpy(x, v.d_, sizeof(x));
  for (unsigned n = N; n > 1; n /= 2)
    for (unsigned i = 0; i < n / 2; ++i)
      x[i] = host::add_elem<T>(x[i], x[i + n / 2], false);
  return x[0];
}
template <typename T, unsigned N>
inline T reduce_max(const vector<T, N> &v) {
  T m = v.d_[0];
  for (unsigned i = 1; i < N; ++i)
    if (float(v.d_[i]) > float(m))
      m = v.d_[i];
  return m;
}
template <typename T, unsigned N>
inline T reduce_min(const vector<T, N> &v) {
  T m = v.d_[0];
  for (unsigned i = 1; i < N; ++i)
    if (float(v.d_[i]) < float(m))
      m = v.d_[i];
  return m;
}

// -------------------------------------------------------------------------------
// conversions Integer -> floating point: v * 2^-shift. Exact into f32 for
// 4/8/16-bit integers; to bf16 the f32 value is rounded under the current
// rounding mode (exact for |v| <= 256). aie_api on AIE2P also accepts 4-bit
// sources, and so does the host; but Peano compiles to_float on int4 / uint4
// to zeros (docs/hardware.md#to_float-on-4-bit-vectors-folds-to-zero), so
// kernels must unpack to int8 first (kernels/mv_int4_bf16.cc never calls it).
template <typename TR, typename T, unsigned N>
inline vector<TR, N> to_float(const vector<T, N> &v, int shift = 0) {
  ::host::profile::count(::host::profile::CONVERT, (N + 31) / 32);
  static_assert(!host::is_float_elem_v<T>,
                "to_float: integer source vectors only");
  static_assert(host::is_float_elem_v<TR>,
                "to_float: the result type must be bfloat16 or float");
  vector<TR, N> r;
  const host::rnd m = host::current_rnd();
  for (unsigned i = 0; i < N; ++i) {
    float f = float(std::ldexp(double(v.raw_get(i)), -shift));
    if constexpr (std::is_same_v<TR, float>)
      r.d_[i] = f;
    else
      r.d_[i] = bfloat16::from_bits(host::f32_to_bf16_bits(f, m));
  }
  return r;
}

// -------------------------------------------------------------------------------
// shifts across two vectors (aie_api's reshape group): out[i] = v[i + n] for
// i < N - n, then fill[0 .. n - 1]. One shuffle per 512-bit word.
template <typename T, unsigned N>
inline vector<T, N> shuffle_down_fill(const vector<T, N> &v,
                                      const vector<T, N> &fill, unsigned n) {
  if (n > N)
    host::fatal("shuffle_down_fill: n must not exceed the vector length");
  ::host::profile::count(::host::profile::SHUFFLE,
                         ::host::profile::words512(vector<T, N>::bits()));
  vector<T, N> r;
  for (unsigned i = 0; i < N; ++i)
    r.raw_set(i + n < N ? v.raw_get(i + n) : fill.raw_get(i + n - N), i);
  return r;
}

// -------------------------------------------------------------------------------
// elementary functions (aie_api's group_elementary, UG1529 2025.2): the three
// the element-wise kernels call (kernels/eltwise_bf16.cc, as mlir-air's
// silu_and_mul.cc and mlir-aie's aie2p rms_norm.cc call them). The hardware's
// approximations are not published: the host computes in double and rounds to
// f32 (tanh, exp2 then to bf16, half to even), so the emulator's element-wise
// results are a model, not the core's bits (docs/kernel.md#host-aie_api).
namespace host {
// f(x) of each lane in double, to f32, then to bf16 half to even, priced as one
// vector ALU pass (the body of aie::tanh and aie::exp2 below).
template <unsigned N, typename F>
inline vector<bfloat16, N> elementary_to_bf16(const vector<float, N> &v, F f) {
  ::host::profile::count(::host::profile::ALU,
                         ::host::profile::words512(vector<float, N>::bits()));
  vector<bfloat16, N> r;
  for (unsigned i = 0; i < N; ++i)
    r.d_[i] = bfloat16::from_bits(
        f32_to_bf16_bits(float(f(double(v.d_[i]))), rnd::conv_even));
  return r;
}
} // namespace host
template <typename TR = bfloat16, unsigned N>
inline vector<TR, N> tanh(const vector<float, N> &v) {
  static_assert(std::is_same_v<TR, bfloat16>,
                "aie::tanh: on AIE2P (XDNA2) a vector of float in, bfloat16 "
                "out (UG1529)");
  return host::elementary_to_bf16(v, [](double x) { return std::tanh(x); });
}
// 2^x of a float vector to bf16 (UG1529: AIE2P's exp2 takes float in, gives
// bfloat16 out; mlir-air's flash_attention attn_npu2.cc builds its softmax on
// it).
template <typename TR = bfloat16, unsigned N>
inline vector<TR, N> exp2(const vector<float, N> &v) {
  static_assert(std::is_same_v<TR, bfloat16>,
                "aie::exp2: on AIE2P (XDNA2) a vector of float in, bfloat16 "
                "out (UG1529)");
  return host::elementary_to_bf16(v, [](double x) { return std::exp2(x); });
}
template <typename E>
  requires(std::is_same_v<E, float>)
inline float invsqrt(E a) {
  return float(1.0 / std::sqrt(double(a)));
}

} // namespace aie
