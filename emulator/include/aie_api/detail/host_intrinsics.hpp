// SPDX-License-Identifier: MIT
// Host (x86-64) aie_api: the AIE2P intrinsic layer that kernels call next to
// aie_api.
//
// Kernels for AIE2P mix aie_api classes with the compiler's intrinsics
// (mac_8x8_8x8T on block vectors, mul_elem_64 on bf16 vectors, event0()
// markers, ...): on the device every aie::vector, aie::accum and
// aie::block_vector converts implicitly to and from its native register type
// (v64bfloat16, v64accfloat, v64bfp16ebs8, ...). The host makes each native
// type name an alias of the aie_api class that wraps it, so those conversions
// are the identity and argument-dependent lookup finds aie:: functions either
// way. Everything is declared in the global namespace, where the AIE compilers
// put their intrinsics.
//
// Modelled (the semantics are the ones aie_api's AIE2P implementation relies on
// when it calls the intrinsic; Xilinx/aie_api
// include/aie_api/detail/aie2p/{accum,mmul_bfp16_bfp16,mmul_bf16_bf16,
// mul_acc32_fp}.hpp; the bf16 _conf parameter lists follow Xilinx/llvm-aie
// clang/lib/Headers/aie2p_vmult.h, the block _conf list (a, b, acc, zero_acc,
// sub_mul, sub_acc1) is inferred from aie_api's call with the same shape):
//
//   native types   v<N><T> = aie::vector<T, N> for int4..uint32, bfloat16,
//   float at 128..1024 bits;
//                  v8/v16/v32/v64accfloat = aie::accum<accfloat, N>;
//                  v64bfp16ebs8 = aie::block_vector<bfp16ebs8, 64>
//   event0/event1  trace markers: no-ops on the host
//   broadcast_zero_to_v32bfloat16, broadcast_one_to_v32bfloat16,
//   broadcast_to_v32bfloat16(x) concat         aie::concat (lane order: first
//   operand's lanes first) extract_v32bfloat16 / extract_v32accfloat (half idx
//   of a 64-lane register), set_v64bfloat16 /
//                  set_v64accfloat (a 64-lane register holding the operand at
//                  half idx, the other half undefined)
//   mul/negmul/mac/msc_elem_64 on v64bfloat16 -> v64accfloat,
//   mul/negmul/mac/msc_elem_32 on v32bfloat16 ->
//                  v32accfloat, mac/msc_elem_{32,64}_conf: lane-wise, the bf16
//                  x bf16 product exact in f32 and one round-to-nearest-even
//                  f32 addition (aie::mul / aie::mac, detail/host_ops.hpp)
//   to_v64bfp16ebs8(v64accfloat)  = accum::to_vector<bfp16ebs8>()
//   (detail/host_block.hpp: blocks of 8
//                  consecutive lanes, the calibrated bfp16 rule under the
//                  current rounding mode)
//   mul/negmul/mac/msc_8x8_8x8T(a, b[, acc]), mac/msc_8x8_8x8T_conf: the native
//   bfp16ebs8 8x8x8 block
//                  matrix multiply with B transposed: for a holding A (8 x K=8,
//                  block i = row i) and b holding B^T (block j = column j of
//                  B), lane 8*i + j of the result is acc[8*i + j] +- sum_k
//                  A[i][k] * B[k][j]; the 8-term mantissa dot product is exact
//                  and is added to f32 with one rounding
//                  (host::bfp16_block_mac, shared with aie::mmul). aie_api's
//                  block -> accfloat conversion (mul_8x8_8x8T of a block vector
//                  with an identity block vector) and its bfp16ebs8 mmul
//                  (mac_8x8_8x8T_conf(a, b, acc, zero, 0, 0)) fix this operand
//                  and lane order.
//
// The _conf flags: zero_acc reads the accumulator as 0, sub_acc1 negates it,
// sub_mul negates the product (mac: acc' + p, msc: acc' - p). The sign
// arguments of the (a, sgn_a, b, sgn_b, ...) forms are accepted and ignored:
// bf16 values and bfp16 mantissas are signed (aie_api passes the element type's
// signedness). Not modelled (absent, so a kernel using them fails to compile):
// shuffle and its modes, the 8x8x16 (mul_4x8_8x16T), bfp16ebs16 and 128-lane
// block forms, integer mmul intrinsics, srs/ups, the addmac/addmsc forms,
// mul_elem_64 on two v32bfloat16.
#pragma once

#include "host_block.hpp"

// -------------------------------------------------------------------------------
// native types v<N><type> = aie::vector<type, N>, as the AIE compilers name
// their native vector types.
#define AIE_HOST_NATIVE_VECTOR(T, N) using v##N##T = aie::vector<T, N>
AIE_HOST_NATIVE_VECTOR(int4, 32);
AIE_HOST_NATIVE_VECTOR(int4, 64);
AIE_HOST_NATIVE_VECTOR(int4, 128);
AIE_HOST_NATIVE_VECTOR(int4, 256);
AIE_HOST_NATIVE_VECTOR(uint4, 32);
AIE_HOST_NATIVE_VECTOR(uint4, 64);
AIE_HOST_NATIVE_VECTOR(uint4, 128);
AIE_HOST_NATIVE_VECTOR(uint4, 256);
AIE_HOST_NATIVE_VECTOR(int8, 16);
AIE_HOST_NATIVE_VECTOR(int8, 32);
AIE_HOST_NATIVE_VECTOR(int8, 64);
AIE_HOST_NATIVE_VECTOR(int8, 128);
AIE_HOST_NATIVE_VECTOR(uint8, 16);
AIE_HOST_NATIVE_VECTOR(uint8, 32);
AIE_HOST_NATIVE_VECTOR(uint8, 64);
AIE_HOST_NATIVE_VECTOR(uint8, 128);
AIE_HOST_NATIVE_VECTOR(int16, 8);
AIE_HOST_NATIVE_VECTOR(int16, 16);
AIE_HOST_NATIVE_VECTOR(int16, 32);
AIE_HOST_NATIVE_VECTOR(int16, 64);
AIE_HOST_NATIVE_VECTOR(uint16, 8);
AIE_HOST_NATIVE_VECTOR(uint16, 16);
AIE_HOST_NATIVE_VECTOR(uint16, 32);
AIE_HOST_NATIVE_VECTOR(uint16, 64);
AIE_HOST_NATIVE_VECTOR(int32, 4);
AIE_HOST_NATIVE_VECTOR(int32, 8);
AIE_HOST_NATIVE_VECTOR(int32, 16);
AIE_HOST_NATIVE_VECTOR(int32, 32);
AIE_HOST_NATIVE_VECTOR(uint32, 4);
AIE_HOST_NATIVE_VECTOR(uint32, 8);
AIE_HOST_NATIVE_VECTOR(uint32, 16);
AIE_HOST_NATIVE_VECTOR(uint32, 32);
AIE_HOST_NATIVE_VECTOR(bfloat16, 8);
AIE_HOST_NATIVE_VECTOR(bfloat16, 16);
AIE_HOST_NATIVE_VECTOR(bfloat16, 32);
AIE_HOST_NATIVE_VECTOR(bfloat16, 64);
AIE_HOST_NATIVE_VECTOR(float, 4);
AIE_HOST_NATIVE_VECTOR(float, 8);
AIE_HOST_NATIVE_VECTOR(float, 16);
AIE_HOST_NATIVE_VECTOR(float, 32);
#undef AIE_HOST_NATIVE_VECTOR
using v8accfloat = aie::accum<accfloat, 8>;
using v16accfloat = aie::accum<accfloat, 16>;
using v32accfloat = aie::accum<accfloat, 32>;
using v64accfloat = aie::accum<accfloat, 64>;
using v64bfp16ebs8 = aie::block_vector<bfp16ebs8, 64>;

// -------------------------------------------------------------------------------
// trace markers
inline void event0() {}
inline void event1() {}

// -------------------------------------------------------------------------------
// initialisation, reshaping
inline v32bfloat16 broadcast_zero_to_v32bfloat16() {
  return aie::zeros<bfloat16, 32>();
}
inline v32bfloat16 broadcast_one_to_v32bfloat16() {
  return aie::broadcast<bfloat16, 32>(1.0f);
}
inline v32bfloat16 broadcast_to_v32bfloat16(bfloat16 x) {
  return aie::broadcast<bfloat16, 32>(x);
}

using aie::concat;

inline v32bfloat16 extract_v32bfloat16(const v64bfloat16 &v, int idx) {
  return v.extract<32>(unsigned(idx));
}
inline v32accfloat extract_v32accfloat(const v64accfloat &a, int idx) {
  return a.extract<32>(unsigned(idx));
}
inline v64bfloat16 set_v64bfloat16(int idx, const v32bfloat16 &v) {
  return v.grow<64>(unsigned(idx));
}
inline v64accfloat set_v64accfloat(int idx, const v32accfloat &a) {
  return a.grow<64>(unsigned(idx));
}

namespace aie::host {

// The accumulator input of a _conf multiply: 0 (zero_acc), -acc (sub_acc1) or
// acc; negation is exact.
template <unsigned N>
inline accum<accfloat, N> conf_acc(const accum<accfloat, N> &acc, int zero_acc,
                                   int sub_acc1) {
  if (zero_acc)
    return zeros<accfloat, N>();
  return sub_acc1 ? neg(acc) : acc;
}

// acc +- (A x B^T) with a, b as the block instruction reads them (rows of A,
// columns of B, blocks along K).
inline accum<accfloat, 64>
block_mac_8x8_8x8T(accum<accfloat, 64> acc,
                   const block_vector<bfp16ebs8, 64> &a,
                   const block_vector<bfp16ebs8, 64> &b, bool subtract) {
  int8_t ma[8][8], mb[8][8];
  int sa[8], sb[8];
  ::host::profile::count(::host::profile::MAC);
  block_operand(a, ma, sa);
  block_operand(b, mb, sb);
  bfp16_block_mac<8, 8>(acc.d_, ma, sa, mb, sb, subtract);
  return acc;
}

} // namespace aie::host

// -------------------------------------------------------------------------------
// bf16 element-wise
namespace aie::host {
// acc' +- a * b lane-wise, acc' the _conf accumulator input; subtract = msc XOR
// sub_mul.
template <unsigned N>
inline accum<accfloat, N> elem_conf(const vector<bfloat16, N> &a,
                                    const vector<bfloat16, N> &b,
                                    const accum<accfloat, N> &acc, int zero_acc,
                                    bool subtract, int sub_acc1) {
  const accum<accfloat, N> c = conf_acc(acc, zero_acc, sub_acc1);
  return subtract ? msc(c, a, b) : mac(c, a, b);
}
} // namespace aie::host

inline v64accfloat mul_elem_64(const v64bfloat16 &a, const v64bfloat16 &b) {
  return aie::mul(a, b);
}
inline v64accfloat negmul_elem_64(const v64bfloat16 &a, const v64bfloat16 &b) {
  return aie::negmul(a, b);
}
inline v64accfloat mac_elem_64(const v64bfloat16 &a, const v64bfloat16 &b,
                               const v64accfloat &acc) {
  return aie::mac(acc, a, b);
}
inline v64accfloat msc_elem_64(const v64bfloat16 &a, const v64bfloat16 &b,
                               const v64accfloat &acc) {
  return aie::msc(acc, a, b);
}
inline v64accfloat mul_elem_64(const v64bfloat16 &a, int, const v64bfloat16 &b,
                               int) {
  return aie::mul(a, b);
}
inline v64accfloat negmul_elem_64(const v64bfloat16 &a, int,
                                  const v64bfloat16 &b, int) {
  return aie::negmul(a, b);
}
inline v64accfloat mac_elem_64(const v64bfloat16 &a, int, const v64bfloat16 &b,
                               int, const v64accfloat &acc) {
  return aie::mac(acc, a, b);
}
inline v64accfloat msc_elem_64(const v64bfloat16 &a, int, const v64bfloat16 &b,
                               int, const v64accfloat &acc) {
  return aie::msc(acc, a, b);
}
inline v64accfloat mac_elem_64_conf(const v64bfloat16 &a, const v64bfloat16 &b,
                                    const v64accfloat &acc, int zero_acc,
                                    int sub_mul, int sub_acc1) {
  return aie::host::elem_conf(a, b, acc, zero_acc, sub_mul != 0, sub_acc1);
}
inline v64accfloat msc_elem_64_conf(const v64bfloat16 &a, const v64bfloat16 &b,
                                    const v64accfloat &acc, int zero_acc,
                                    int sub_mul, int sub_acc1) {
  return aie::host::elem_conf(a, b, acc, zero_acc, sub_mul == 0, sub_acc1);
}

inline v32accfloat mul_elem_32(const v32bfloat16 &a, const v32bfloat16 &b) {
  return aie::mul(a, b);
}
inline v32accfloat negmul_elem_32(const v32bfloat16 &a, const v32bfloat16 &b) {
  return aie::negmul(a, b);
}
inline v32accfloat mac_elem_32(const v32bfloat16 &a, const v32bfloat16 &b,
                               const v32accfloat &acc) {
  return aie::mac(acc, a, b);
}
inline v32accfloat msc_elem_32(const v32bfloat16 &a, const v32bfloat16 &b,
                               const v32accfloat &acc) {
  return aie::msc(acc, a, b);
}
inline v32accfloat mac_elem_32_conf(const v32bfloat16 &a, const v32bfloat16 &b,
                                    const v32accfloat &acc, int zero_acc,
                                    int sub_mul, int sub_acc1) {
  return aie::host::elem_conf(a, b, acc, zero_acc, sub_mul != 0, sub_acc1);
}
inline v32accfloat msc_elem_32_conf(const v32bfloat16 &a, const v32bfloat16 &b,
                                    const v32accfloat &acc, int zero_acc,
                                    int sub_mul, int sub_acc1) {
  return aie::host::elem_conf(a, b, acc, zero_acc, sub_mul == 0, sub_acc1);
}

// -------------------------------------------------------------------------------
// bfp16ebs8
inline v64bfp16ebs8 to_v64bfp16ebs8(const v64accfloat &acc) {
  return acc.to_vector<bfp16ebs8>();
}

inline v64accfloat mul_8x8_8x8T(const v64bfp16ebs8 &a, const v64bfp16ebs8 &b) {
  return aie::host::block_mac_8x8_8x8T(aie::zeros<accfloat, 64>(), a, b, false);
}
inline v64accfloat negmul_8x8_8x8T(const v64bfp16ebs8 &a,
                                   const v64bfp16ebs8 &b) {
  return aie::host::block_mac_8x8_8x8T(aie::zeros<accfloat, 64>(), a, b, true);
}
inline v64accfloat mac_8x8_8x8T(const v64bfp16ebs8 &a, const v64bfp16ebs8 &b,
                                const v64accfloat &acc) {
  return aie::host::block_mac_8x8_8x8T(acc, a, b, false);
}
inline v64accfloat msc_8x8_8x8T(const v64bfp16ebs8 &a, const v64bfp16ebs8 &b,
                                const v64accfloat &acc) {
  return aie::host::block_mac_8x8_8x8T(acc, a, b, true);
}
inline v64accfloat mac_8x8_8x8T_conf(const v64bfp16ebs8 &a,
                                     const v64bfp16ebs8 &b,
                                     const v64accfloat &acc, int zero_acc,
                                     int sub_mul, int sub_acc1) {
  return aie::host::block_mac_8x8_8x8T(
      aie::host::conf_acc(acc, zero_acc, sub_acc1), a, b, sub_mul != 0);
}
inline v64accfloat msc_8x8_8x8T_conf(const v64bfp16ebs8 &a,
                                     const v64bfp16ebs8 &b,
                                     const v64accfloat &acc, int zero_acc,
                                     int sub_mul, int sub_acc1) {
  return aie::host::block_mac_8x8_8x8T(
      aie::host::conf_acc(acc, zero_acc, sub_acc1), a, b, sub_mul == 0);
}
inline v64accfloat mac_8x8_8x8T_conf(const v64bfp16ebs8 &a, int,
                                     const v64bfp16ebs8 &b, int,
                                     const v64accfloat &acc, int zero_acc,
                                     int sub_mul, int sub_acc1) {
  return mac_8x8_8x8T_conf(a, b, acc, zero_acc, sub_mul, sub_acc1);
}
