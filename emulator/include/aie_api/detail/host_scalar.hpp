// SPDX-License-Identifier: MIT
// Host (x86-64) aie_api: scalar element types, accumulator tags, rounding
// state.
//
// Written for this project from aie_api's documented semantics on AIE2P
// (__AIE_ARCH__ == 21); see docs/kernel.md#host-aie_api. Nothing here is
// aie_api's code.
#pragma once

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

// ---------------------------------------------------------------------------------------------
// chess-style loop annotations (the AIE toolchains accept them; they steer
// scheduling only) compile away.
#include "host_profile.hpp"

#ifndef chess_prepare_for_pipelining
#define chess_prepare_for_pipelining AIE_HOST_LOOP_ITERATION
#endif
#ifndef chess_loop_range
#define chess_loop_range(...)
#endif
#ifndef chess_unroll_loop
#define chess_unroll_loop(...)
#endif
#ifndef chess_flatten_loop
#define chess_flatten_loop
#endif
#ifndef chess_copy
#define chess_copy(x) (x)
#endif
// Data-memory bank hints (aie_api's aie_dm_resource, Peano's
// __aie_dm_resource_* qualifiers, as mlir-aie's mm_bfp_mixed.cc uses them):
// they steer which load unit and bank an access takes; the host has one memory,
// so they select nothing.
enum class aie_dm_resource { none, a, b, c, d, stack };
#ifndef __aie_dm_resource_a
#define __aie_dm_resource_a
#define __aie_dm_resource_b
#define __aie_dm_resource_c
#define __aie_dm_resource_d
#endif
#ifndef chess_storage
#define chess_storage(...)
#endif
#ifndef chess_manifest
#define chess_manifest(x) (x)
#endif
#ifndef __aie_inline
#define __aie_inline inline __attribute__((always_inline))
#endif
#ifndef __AIE_ARCH__
#define __AIE_ARCH__ 21 // the host build models AIE2P
#endif
#define AIE_API_HOST_EMULATION 1

// ---------------------------------------------------------------------------------------------
// Scalar types the AIE compilers predefine in the global namespace.
using int8 = int8_t;
using uint8 = uint8_t;
using int16 = int16_t;
using uint16 = uint16_t;
using int32 = int32_t;
using uint32 = uint32_t;
using int64 = int64_t;
using uint64 = uint64_t;

// 4-bit element types: like aie_api's, they are tags of sizeof 1
// (docs/hardware.md#4-bit-element-types-have-sizeof-1: pointer arithmetic on an
// int4* moves one byte per element). Values live only inside vectors, two per
// byte, low nibble first.
struct int4 {
  int8_t raw_;
};
struct uint4 {
  uint8_t raw_;
};

namespace aie::host {

// Bit-exact f32 -> bf16 conversion under an explicit rounding rule (see
// rounding_mode below).
enum class rnd : unsigned {
  floor,
  ceil,
  positive_inf,
  negative_inf,
  symmetric_inf,
  symmetric_zero,
  conv_even,
  conv_odd,
  symmetric_floor,
  symmetric_ceil
};

constexpr uint32_t f32_bits(float f) { return std::bit_cast<uint32_t>(f); }
constexpr float bits_f32(uint32_t u) { return std::bit_cast<float>(u); }

constexpr uint16_t f32_to_bf16_bits(float f, rnd mode) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7f800000u) == 0x7f800000u &&
      (u & 0x007fffffu)) // NaN stays (quiet) NaN
    return uint16_t((u >> 16) | 0x0040u);
  uint32_t upper = u >> 16, lower = u & 0xffffu;
  bool neg = (u >> 31) != 0;
  if (lower == 0)
    return uint16_t(upper);
  bool up; // increase the magnitude (upper + 1 in sign-magnitude order)
  switch (mode) {
  case rnd::floor:
    up = neg;
    break;
  case rnd::ceil:
    up = !neg;
    break;
  case rnd::symmetric_floor:
    up = false;
    break;
  case rnd::symmetric_ceil:
    up = true;
    break;
  default: {
    if (lower != 0x8000u) {
      up = lower > 0x8000u;
    } else {
      switch (mode) {
      case rnd::positive_inf:
        up = !neg;
        break;
      case rnd::negative_inf:
        up = neg;
        break;
      case rnd::symmetric_inf:
        up = true;
        break;
      case rnd::symmetric_zero:
        up = false;
        break;
      case rnd::conv_odd:
        up = (upper & 1u) == 0;
        break;
      default:
        up = (upper & 1u) != 0;
        break; // conv_even
      }
    }
  }
  }
  return uint16_t(upper + (up ? 1u : 0u));
}

constexpr float bf16_bits_to_f32(uint16_t b) {
  return bits_f32(uint32_t(b) << 16);
}

} // namespace aie::host

// bfloat16: 1 sign, 8 exponent, 7 mantissa bits; conversion from float rounds
// to nearest even (what the compiler's scalar fptrunc does), conversion to
// float is exact.
struct bfloat16 {
  uint16_t bits_;
  bfloat16() = default;
  template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>>
  constexpr bfloat16(T v)
      : bits_(
            aie::host::f32_to_bf16_bits(float(v), aie::host::rnd::conv_even)) {}
  operator float() const { return aie::host::bf16_bits_to_f32(bits_); }
  static bfloat16 from_bits(uint16_t b) {
    bfloat16 r;
    r.bits_ = b;
    return r;
  }
  bfloat16 &operator+=(float o) { return *this = bfloat16(float(*this) + o); }
  bfloat16 &operator-=(float o) { return *this = bfloat16(float(*this) - o); }
  bfloat16 &operator*=(float o) { return *this = bfloat16(float(*this) * o); }
  bfloat16 operator-() const { return from_bits(uint16_t(bits_ ^ 0x8000u)); }
};
static_assert(sizeof(bfloat16) == 2 && std::is_trivially_copyable_v<bfloat16>);

// Accumulator tags (aie_api names). Only the floating-point class is modelled
// by the host build.
struct accfloat {};
struct acc32 {};
struct acc48 {};
struct acc64 {};
struct accauto {};

// Block floating point: 8 values share one 8-bit exponent, 8-bit
// two's-complement mantissas.
struct bfp16ebs8 {};
// Block floating point with blocks of 16 (AIE2P has it; the host aie_api does
// not model it).
struct bfp16ebs16 {};

namespace aie {

enum class rounding_mode : unsigned {
  floor = unsigned(host::rnd::floor),
  ceil = unsigned(host::rnd::ceil),
  positive_inf = unsigned(host::rnd::positive_inf),
  negative_inf = unsigned(host::rnd::negative_inf),
  symmetric_inf = unsigned(host::rnd::symmetric_inf),
  symmetric_zero = unsigned(host::rnd::symmetric_zero),
  conv_even = unsigned(host::rnd::conv_even),
  conv_odd = unsigned(host::rnd::conv_odd),
  symmetric_floor = unsigned(host::rnd::symmetric_floor),
  symmetric_ceil = unsigned(host::rnd::symmetric_ceil),
};

enum class saturation_mode : unsigned { none = 0, saturate = 1, symmetric = 3 };

namespace host {
// The core's rounding/saturation control registers. aie_api documents floor as
// the reset value. Hidden: one state per shared library (one kernel = one
// core), shared by its translation units.
#define AIE_HOST_PER_LIBRARY __attribute__((visibility("hidden")))
AIE_HOST_PER_LIBRARY inline thread_local rounding_mode g_rounding =
    rounding_mode::floor;
AIE_HOST_PER_LIBRARY inline thread_local saturation_mode g_saturation =
    saturation_mode::none;
inline rnd current_rnd() { return rnd(unsigned(g_rounding)); }
} // namespace host

inline void set_rounding(rounding_mode m) { host::g_rounding = m; }
inline rounding_mode get_rounding() { return host::g_rounding; }
inline void set_saturation(saturation_mode m) { host::g_saturation = m; }
inline saturation_mode get_saturation() { return host::g_saturation; }

namespace host {

template <typename T>
inline constexpr unsigned type_bits_v = sizeof(T) * 8;
template <>
inline constexpr unsigned type_bits_v<int4> = 4;
template <>
inline constexpr unsigned type_bits_v<uint4> = 4;

template <typename T>
inline constexpr bool is_4bit_v =
    std::is_same_v<T, int4> || std::is_same_v<T, uint4>;

template <typename T>
inline constexpr bool is_elem_v =
    std::is_same_v<T, int4> || std::is_same_v<T, uint4> ||
    std::is_same_v<T, int8> || std::is_same_v<T, uint8> ||
    std::is_same_v<T, int16> || std::is_same_v<T, uint16> ||
    std::is_same_v<T, int32> || std::is_same_v<T, uint32> ||
    std::is_same_v<T, bfloat16> || std::is_same_v<T, float>;

// Block types (aie_api's BlockType): bfp16ebs8 is modelled
// (detail/host_block.hpp), bfp16ebs16 is not.
template <typename T>
inline constexpr bool is_block_type_v = std::is_same_v<T, bfp16ebs8>;

template <typename T>
inline constexpr bool is_float_elem_v =
    std::is_same_v<T, bfloat16> || std::is_same_v<T, float>;

template <typename T>
inline constexpr bool is_signed_elem_v =
    std::is_same_v<T, int4> || std::is_same_v<T, int8> ||
    std::is_same_v<T, int16> || std::is_same_v<T, int32> || is_float_elem_v<T>;

// Value type seen when reading one element (4-bit types read as int).
template <typename T>
struct elem_value {
  using type = T;
};
template <>
struct elem_value<int4> {
  using type = int;
};
template <>
struct elem_value<uint4> {
  using type = int;
};
template <typename T>
using elem_value_t = typename elem_value<T>::type;

constexpr bool is_pow2(unsigned x) { return x && !(x & (x - 1)); }

// Next wider integer type for unpack (4 -> 8 -> 16 -> 32 bits, signedness
// kept).
template <typename T>
struct next_int {
  using type = void;
};
template <>
struct next_int<int4> {
  using type = int8;
};
template <>
struct next_int<uint4> {
  using type = uint8;
};
template <>
struct next_int<int8> {
  using type = int16;
};
template <>
struct next_int<uint8> {
  using type = uint16;
};
template <>
struct next_int<int16> {
  using type = int32;
};
template <>
struct next_int<uint16> {
  using type = uint32;
};
template <typename T>
using next_int_t = typename next_int<T>::type;

// Misaligned vector accesses: the AIE load/store unit ignores the low address
// bits (it accesses the aligned vector that contains the address). The host
// build does the same, and counts the events so a test can assert the kernel
// never relies on it. -DAIE_HOST_STRICT_ALIGNMENT aborts instead.
AIE_HOST_PER_LIBRARY inline unsigned long g_misaligned = 0;

// Sub-vector extracts whose partition index the compiler does not know: aie_api
// takes the index as a run-time argument, and with one the compiler emits a
// run-time sub-vector extract, which no upstream Peano-built kernel uses
// outside a loop of constant trip count. The host cannot refuse it (the
// signature is aie_api's), so it counts extracts whose index GCC's optimizer
// has not folded to a constant (__builtin_constant_p after inlining; builds at
// -O1 or above), for a test to assert the kernel has none.
AIE_HOST_PER_LIBRARY inline unsigned long g_runtime_extracts = 0;

[[noreturn]] inline void fatal(const char *msg) {
  std::fprintf(stderr, "host aie_api: %s\n", msg);
  std::abort();
}

} // namespace host
} // namespace aie

// The core's control registers, rounding mode | saturation mode << 8, for a
// host that runs several cores through one loaded library (the simulator of
// the compiled design): on the device each core has its own, so the host saves
// a core's after each of its calls and restores them before the next.
extern "C" __attribute__((visibility("default"), used, weak)) unsigned
aie_host_control_registers() {
  return unsigned(aie::host::g_rounding) | unsigned(aie::host::g_saturation)
                                               << 8;
}
extern "C" __attribute__((visibility("default"), used, weak)) void
aie_host_set_control_registers(unsigned v) {
  aie::host::g_rounding = aie::rounding_mode(v & 0xFFu);
  aie::host::g_saturation = aie::saturation_mode(v >> 8);
}

// The count of misaligned vector accesses since load, for tests (ctypes) of a
// host-built kernel.
extern "C" __attribute__((visibility("default"), used, weak)) unsigned long
aie_host_misaligned_accesses() {
  return aie::host::g_misaligned;
}

// The count of sub-vector extracts with a run-time index since load (see
// g_runtime_extracts), for tests (ctypes) of a host-built kernel.
extern "C" __attribute__((visibility("default"), used, weak)) unsigned long
aie_host_runtime_extracts() {
  return aie::host::g_runtime_extracts;
}
