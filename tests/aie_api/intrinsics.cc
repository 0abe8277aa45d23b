// SPDX-License-Identifier: MIT
// Small extern "C" kernels over the host AIE2P intrinsic layer
// (emulator/include/aie_api/detail/ host_intrinsics.hpp) and the
// rounding-mode-following bfp16 conversion, for tests/test_aie2p_intrinsics.py
// (ctypes). Built by that test with AIE_API_EMULATE_BFLOAT16_MMUL_WITH_BFP16.
//
// Block buffers hold bfp16ebs8 block vectors back to back (72 bytes each: per
// block of 8, the exponent byte, then 8 mantissas), read and written through
// block streams, as kernels do.
#include <aie_api/aie.hpp>

static_assert(std::is_same_v<v64bfloat16, aie::vector<bfloat16, 64>>);
static_assert(std::is_same_v<v64accfloat, aie::accum<accfloat, 64>>);
static_assert(std::is_same_v<v64bfp16ebs8, aie::block_vector<bfp16ebs8, 64>>);

namespace {

// The first block vector of a buffer.
v64bfp16ebs8 first_blocks(const uint8_t *p) {
  aie::block_vector_input_buffer_stream<bfp16ebs8, 64> s(
      reinterpret_cast<const bfp16ebs8 *>(p));
  return s.pop();
}

// One block vector (72 bytes) to p: an output stream writes whole 512-bit
// words only (the host stops on a stream that ends inside one), so the vector
// is pushed 8 times (9 words) into a staging buffer and its image copied out.
void store_blocks(uint8_t *p, const v64bfp16ebs8 &v) {
  alignas(64) uint8_t staged[8 * 72];
  {
    aie::block_vector_output_buffer_stream<bfp16ebs8, 64> s(
        reinterpret_cast<bfp16ebs8 *>(staged));
    for (int i = 0; i < 8; ++i)
      s << v;
  }
  std::memcpy(p, staged, 72);
}

v64accfloat load_acc(const float *c) { return v64accfloat(aie::load_v<64>(c)); }
void store_acc(float *c, const v64accfloat &acc) {
  aie::store_v(c, acc.to_vector<float>());
}

} // namespace

extern "C" {

// One block multiply: c (8x8 f32, row-major) <- op(a, b, c), a = A (block i =
// row i), b = B^T (block j = column j of B). op: 0 mul, 1 negmul, 2 mac, 3 msc,
// 4 mac_conf, 5 msc_conf.
void op_block_mmul(const uint8_t *a, const uint8_t *b, float *c, int op,
                   int zero_acc, int sub_mul, int sub_acc1) {
  const v64bfp16ebs8 va = first_blocks(a), vb = first_blocks(b);
  const v64accfloat acc = load_acc(c);
  v64accfloat r;
  switch (op) {
  case 0:
    r = mul_8x8_8x8T(va, vb);
    break;
  case 1:
    r = negmul_8x8_8x8T(va, vb);
    break;
  case 2:
    r = mac_8x8_8x8T(va, vb, acc);
    break;
  case 3:
    r = msc_8x8_8x8T(va, vb, acc);
    break;
  case 4:
    r = mac_8x8_8x8T_conf(va, vb, acc, zero_acc, sub_mul, sub_acc1);
    break;
  default:
    r = msc_8x8_8x8T_conf(va, vb, acc, zero_acc, sub_mul, sub_acc1);
    break;
  }
  store_acc(c, r);
}

// A block GEMM tile, two by two output blocks at a time: C[mi][ni] += sum_k
// A[mi][k] x B[ni][k]^T, with a holding mb x kb block vectors (row block
// outer), b holding nb x kb, c mb x nb 8x8 f32 blocks. One stream per operand
// row, started at its first block: kb must be a multiple of 8 so every start is
// 64-byte aligned (8 block vectors = 576 bytes), as block streams need.
void op_block_gemm(const uint8_t *a, const uint8_t *b, float *c, int mb, int nb,
                   int kb) {
  using stream = aie::block_vector_input_buffer_stream<bfp16ebs8, 64>;
  const bfp16ebs8 *pa = reinterpret_cast<const bfp16ebs8 *>(a),
                  *pb = reinterpret_cast<const bfp16ebs8 *>(b);
  for (int mi = 0; mi < mb; mi += 2)
    for (int ni = 0; ni < nb; ni += 2) {
      float *c00 = c + (mi * nb + ni) * 64, *c01 = c00 + 64,
            *c10 = c00 + nb * 64, *c11 = c10 + 64;
      v64accfloat acc00 = load_acc(c00), acc01 = load_acc(c01),
                  acc10 = load_acc(c10), acc11 = load_acc(c11);
      stream sa0(pa), sa1(pa), sb0(pb), sb1(pb);
      sa0.seek(mi * kb);
      sa1.seek((mi + 1) * kb);
      sb0.seek(ni * kb);
      sb1.seek((ni + 1) * kb);
      for (int k = 0; k < kb; ++k) {
        const v64bfp16ebs8 a0 = sa0.pop(), a1 = sa1.pop(), b0 = sb0.pop(),
                           b1 = sb1.pop();
        acc00 = mac_8x8_8x8T(a0, b0, acc00);
        acc01 = mac_8x8_8x8T(a0, b1, acc01);
        acc10 = mac_8x8_8x8T(a1, b0, acc10);
        acc11 = mac_8x8_8x8T(a1, b1, acc11);
      }
      store_acc(c00, acc00);
      store_acc(c01, acc01);
      store_acc(c10, acc10);
      store_acc(c11, acc11);
    }
}

// The same product two ways, over `steps` block pairs popped from a and b: the
// intrinsic chain (mul, then mac) into c_intr and aie::mmul<8, 8, 8, bfp16ebs8,
// bfp16ebs8> into c_mmul.
void op_intrinsic_vs_mmul(const uint8_t *a, const uint8_t *b, int steps,
                          float *c_intr, float *c_mmul) {
  aie::block_vector_input_buffer_stream<bfp16ebs8, 64> sa(
      reinterpret_cast<const bfp16ebs8 *>(a));
  aie::block_vector_input_buffer_stream<bfp16ebs8, 64> sb(
      reinterpret_cast<const bfp16ebs8 *>(b));
  v64bfp16ebs8 va = sa.pop(), vb = sb.pop();
  v64accfloat acc = mul_8x8_8x8T(va, vb);
  aie::mmul<8, 8, 8, bfp16ebs8, bfp16ebs8> mm;
  mm.mul(va, aie::op_transpose(vb));
  for (int s = 1; s < steps; ++s) {
    va = sa.pop();
    vb = sb.pop();
    acc = mac_8x8_8x8T(va, vb, acc);
    mm.mac(va, aie::op_transpose(vb));
  }
  store_acc(c_intr, acc);
  aie::store_v(c_mmul, mm.to_vector<float>());
}

// bf16 A (8x8 row-major) x blocks B^T: A reaches an accumulator through
// mul_elem_64 by ones, is converted with to_v64bfp16ebs8 under rounding mode
// `mode`, and multiplied with mac_8x8_8x8T into c (8x8 f32). c_mmul gets
// aie::mmul<8, 8, 8, bfloat16, bfp16ebs8> of the same operands under the same
// mode.
void op_bf16_block_mac(const bfloat16 *a, const uint8_t *b, int mode, float *c,
                       float *c_mmul) {
  aie::set_rounding(aie::rounding_mode(mode));
  const v64accfloat acc_a =
      mul_elem_64(aie::load_v<64>(a), concat(broadcast_one_to_v32bfloat16(),
                                             broadcast_one_to_v32bfloat16()));
  store_acc(c,
            mac_8x8_8x8T(to_v64bfp16ebs8(acc_a), first_blocks(b), load_acc(c)));
  aie::mmul<8, 8, 8, bfloat16, bfp16ebs8> mm(aie::load_v<64>(c_mmul));
  mm.mac(aie::load_v<64>(a), aie::op_transpose(first_blocks(b)));
  aie::store_v(c_mmul, mm.to_vector<float>());
}

// 64 floats -> accfloat -> bfp16ebs8 under rounding mode `mode`
// (aie::rounding_mode's order).
void op_to_v64bfp16ebs8(const float *in, int mode, uint8_t *out) {
  aie::set_rounding(aie::rounding_mode(mode));
  store_blocks(out, to_v64bfp16ebs8(load_acc(in)));
}

// The bf16 8x8x8 mmul, bfp16-emulated (this file is built with
// AIE_API_EMULATE_BFLOAT16_MMUL_WITH_BFP16), under rounding mode `mode`: c (8x8
// f32) += a (8x8) x b (8x8), row-major.
void op_mmul_bf16_mode(const bfloat16 *a, const bfloat16 *b, int mode,
                       float *c) {
  aie::set_rounding(aie::rounding_mode(mode));
  aie::mmul<8, 8, 8, bfloat16, bfloat16> mm(aie::load_v<64>(c));
  mm.mac(aie::load_v<64>(a), aie::load_v<64>(b));
  aie::store_v(c, mm.to_vector<float>());
}

// Element-wise bf16 x bf16 -> accfloat on n = 32 or 64 lanes: c <- op(a, b, c),
// op as op_block_mmul; op 6 / 7: mul / mac through the forms with sign
// arguments.
void op_elem(const bfloat16 *a, const bfloat16 *b, float *c, int n, int op,
             int zero_acc, int sub_mul, int sub_acc1) {
  if (n == 64) {
    const v64bfloat16 va = aie::load_v<64>(a), vb = aie::load_v<64>(b);
    const v64accfloat acc(aie::load_v<64>(c));
    v64accfloat r;
    switch (op) {
    case 0:
      r = mul_elem_64(va, vb);
      break;
    case 1:
      r = negmul_elem_64(va, vb);
      break;
    case 2:
      r = mac_elem_64(va, vb, acc);
      break;
    case 3:
      r = msc_elem_64(va, vb, acc);
      break;
    case 4:
      r = mac_elem_64_conf(va, vb, acc, zero_acc, sub_mul, sub_acc1);
      break;
    case 5:
      r = msc_elem_64_conf(va, vb, acc, zero_acc, sub_mul, sub_acc1);
      break;
    case 6:
      r = mul_elem_64(va, 1, vb, 1);
      break;
    default:
      r = mac_elem_64(va, 1, vb, 1, acc);
      break;
    }
    aie::store_v(c, r.to_vector<float>());
  } else {
    const v32bfloat16 va = aie::load_v<32>(a), vb = aie::load_v<32>(b);
    const v32accfloat acc(aie::load_v<32>(c));
    v32accfloat r;
    switch (op) {
    case 0:
      r = mul_elem_32(va, vb);
      break;
    case 1:
      r = negmul_elem_32(va, vb);
      break;
    case 2:
      r = mac_elem_32(va, vb, acc);
      break;
    case 3:
      r = msc_elem_32(va, vb, acc);
      break;
    case 4:
      r = mac_elem_32_conf(va, vb, acc, zero_acc, sub_mul, sub_acc1);
      break;
    default:
      r = msc_elem_32_conf(va, vb, acc, zero_acc, sub_mul, sub_acc1);
      break;
    }
    aie::store_v(c, r.to_vector<float>());
  }
}

// out (96 bf16): broadcast_zero, broadcast_one, broadcast_to(x), 32 lanes each.
void op_broadcasts(float x, bfloat16 *out) {
  aie::store_v(out, broadcast_zero_to_v32bfloat16());
  aie::store_v(out + 32, broadcast_one_to_v32bfloat16());
  aie::store_v(out + 64, broadcast_to_v32bfloat16(bfloat16(x)));
}

// concat(lo, hi) (32 + 32 bf16 -> 64), through the unqualified and the
// global-scope name.
void op_concat(const bfloat16 *lo, const bfloat16 *hi, bfloat16 *out,
               bfloat16 *out_global) {
  const v32bfloat16 l = aie::load_v<32>(lo), h = aie::load_v<32>(hi);
  aie::store_v(out, concat(l, h));
  aie::store_v(out_global, ::concat(l, h));
}

// Half `idx` of a 64-lane bf16 vector / accumulator, and a 64-lane register
// built from it at half idx (only that half is defined; the test reads only
// it).
void op_extract_set(const bfloat16 *v, const float *acc, int idx,
                    bfloat16 *half, float *acc_half, bfloat16 *grown,
                    float *acc_grown) {
  const v32bfloat16 h = extract_v32bfloat16(aie::load_v<64>(v), idx);
  const v32accfloat ah = extract_v32accfloat(load_acc(acc), idx);
  aie::store_v(half, h);
  aie::store_v(acc_half, ah.to_vector<float>());
  aie::store_v(grown, set_v64bfloat16(idx, h));
  store_acc(acc_grown, set_v64accfloat(idx, ah));
}

// Trace markers compile and do nothing: returns x unchanged.
int op_events(int x) {
  event0();
  event1();
  return x;
}

} // extern "C"
