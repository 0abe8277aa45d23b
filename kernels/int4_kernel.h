// SPDX-License-Identifier: MIT
//===- int4_kernel.h - int4 weight kernel for AIE2P (aie_api), shared ----===//
//
// One PE computes a DIM_M x DIM_N tile of C = A x dequant(W), one K-chunk of
// DIM_K_CHUNK per call:
//
//   zero_vectorized_f32_mn(c_mem)                          c = 0
//   matmul_int4_bf16_packed_f32(w_record, a_tile, c_mem, w_scratch)
//                                                  c += a_tile x
//                                                  dequant(w_record)
//   f32_to_bf16_mn(c_mem)                         bf16(c), in place
//
// c_mem is the accumulator's memory: DIM_M x DIM_N f32 during the K sweep in
// 8x8 blocks, column-block outer; its first half the same blocks in bf16 after
// the drain (typed bf16 in the design, twice as many elements, so the drain's
// DMA reads it as it is and un-blocks C on its way to L2).
//
// dequant(W)[k, n] = (q[k, n] - z[g, n]) * s[g, n], g = k / DIM_GS; with a
// min term (GGUF Q4_1, Q5_1, Q4_K, Q5_K) v[k, n] * s[g, n] + m[g, n]; with
// byte codes (GGUF Q5_*, Q6_K, Q8_0, IQ4_*) v is any int8 the record holds
// (the record formats: int4_packed_record.py FORMAT_SPECS,
// kernels/Makefile).
//
// How a call works (docs/kernel.md has the byte-exact record and the buffer
// layouts):
//  1. Dequantise the record's Q once into bfp16ebs8 block vectors of (q - z),
//     written as plain bytes: the packer stored the 4-bit codes in the memory
//     image order of the B operand lines (one line per pair of 8-column blocks,
//     the two blocks' K blocks interleaved, B^T [n][k] inside), with a 0 nibble
//     at every exponent byte. Unpacking 32 bytes of nibbles gives 64 image
//     bytes; subtracting a zero-point word whose exponent lanes hold 123 and
//     whose mantissa lanes hold z of their column gives exponent 133 (0 - 123
//     as a byte; value = mantissa) and mantissas q - z, exactly. No to_float,
//     no transpose, no block conversion per block. The zero-point words (the
//     image repeats every 144 bytes, so 9 words per 576) come from two block
//     vectors per column pair and span (one conversion each, exact), pushed
//     four times to a 576-byte staging (every output stream pushes whole
//     512-bit words: pad_to_words) and loaded back as 9 aligned words.
//  2. Per pair of 8-row blocks of A: convert those 16 rows to bfp16 blocks
//     first, in a loop of their own (the same accfloat -> bfp16ebs8
//     conversion the bfp16-emulated bf16 mmul applies to A), into one
//     interleaved A line (A0 kb, A1 kb, A0 kb+1, ...), so each A value is
//     converted once per call. Then, per column pair, the hot loop: a 2x2
//     block of native bfp16ebs8 x bfp16ebs8 8x8x8 mmul accumulators fed by two
//     block streams (the A line, and the pair's W line with B0/B1 interleaved:
//     the core's two load FIFOs), nothing but pops and macs, with the scale
//     folds of the pair after each span. Four mmul accumulators are live in
//     the hot loop, five at most in a fold (AIE2P has five 2048-bit
//     accumulator registers). Each accumulator G covers one "fold span" of K:
//     a whole group when the chunk holds whole groups (DIM_K_CHUNK % DIM_GS ==
//     0), the whole chunk when a group spans several chunks (DIM_GS %
//     DIM_K_CHUNK == 0).
//  3. Scale fold, once per span: c += G * s. AIE2P has no f32 x f32 vector
//     multiply, so G is split into hi = bf16(G) and lo = bf16(G - hi) and both
//     are multiplied by the bf16 scale (products exact in f32) and added to c
//     in f32. hi + lo keeps 17 significant bits of G (round to nearest), so
//     integer-valued G below 2^16 (exact-mode operands) survive exactly;
//     upstream's single bf16(G) does not. A scale of more than 8 significant
//     bits is held as 2 or 3 bf16 parts (scale_parts), each multiplied in
//     turn. A min term adds R * m the same way, R the span's row sums of the
//     converted A.
//
// Roundings, in order: A to bfp16 blocks (exact for exact-mode operands; (q -
// z) and byte codes are always exact), one f32 addition per mmul into G (and
// R), bf16(G) and bf16(G - hi), two f32 additions per scale part per fold into
// c (and as many for the min term), and the final f32 -> bf16
// round-to-nearest-even in the drain. For AWQ (one part, no min term) these are
// the same roundings, in the same order, as the bf16 mmul built with
// AIE_API_EMULATE_BFLOAT16_MMUL_WITH_BFP16 (it converts both operands to
// bfp16ebs8 on every mac), so the results are bit-identical to that
// formulation; the other formats' are int4awq/kernel/kernel_model.py's.
//
// Block streams: at most two input and one output stream are live at any time
// (AIE2P has two load FIFOs and one store FIFO); each is opened per fold span,
// so the pops of a span are counted from its start (see KB_UNROLLED).
//
// Every buffer must be 64-byte aligned (512-bit vector accesses on AIE2P); a
// debug build (no -DNDEBUG) asserts it on every buffer argument.
//
// This header holds what both entry sets share (the record, the dequantisation,
// the A conversion, the folds); mm_int4_bf16.cc holds the GEMM's entries
// above, mv_int4_bf16.cc the decode GEMV's, so each design links only what it
// calls (kernels/Makefile ENTRIES=gemm|gemv).
//
//===----------------------------------------------------------------------===//

#pragma once

#include <aie_api/aie.hpp>
#include <stdint.h>

// mlir-aie's loop annotations (AIE_LOOP_*, AIE_PREPARE_FOR_*): the installed
// header under Peano (kernels/Makefile: -I <mlir-aie>/include/aie_kernels),
// emulator/include's stand-in on the host.
#include "aie_kernel_utils.h"

#if !defined(NDEBUG)
#include <cassert>
// Debug builds (the host build; Peano builds pass -DNDEBUG) check every buffer
// argument's alignment: 512-bit vector accesses and block streams need 64
// bytes.
#define KERNEL_ALIGNED(p)                                                      \
  assert((reinterpret_cast<uintptr_t>(p) & 63u) == 0 &&                        \
         "kernel buffer not 64-byte aligned")
#else
#define KERNEL_ALIGNED(p) ((void)0)
#endif

// The first statement of a loop marked with AIE_LOOP_MIN_ITERATION_COUNT:
// nothing on the core; the host build's hooks (kernels/host_hooks.h, given
// with -include) count one iteration there for the profile.
#ifndef KERNEL_ITERATION
#define KERNEL_ITERATION ((void)0)
#endif

#if !defined(DIM_N) || !defined(DIM_K_CHUNK) || !defined(DIM_GS)
#error                                                                         \
    "define the tile: -DDIM_N=<tile_n> -DDIM_K_CHUNK=<tile_k_l1> -DDIM_GS=<group size>, and -DDIM_M=<tile_m> for the GEMM"
#endif

// The rounding mode the accumulate entries set (A to bfp16 blocks, the fold's
// bf16 splits). conv_even (half to even) is the product's; the bring-up
// ladder's numerics probe (host/bringup.py) also builds
// -DINT4_A_ROUNDING=floor, the core's reset mode, to measure whether the bfp16
// conversion follows aie::set_rounding on NPU2.
#ifndef INT4_A_ROUNDING
#define INT4_A_ROUNDING conv_even
#endif

// The record format, one of the policy types below by name (kernels/Makefile
// FORMAT: -DINT4_FORMAT=awq, awq_f16, ...).
#ifndef INT4_FORMAT
#define INT4_FORMAT awq
#endif
// The GEMV's entries (mv_int4_bf16.cc) define INT4_DENSE_CODES: their record
// holds the 4-bit codes dense (DENSE below).
#ifndef INT4_DENSE_CODES
#define INT4_DENSE_CODES 0
#endif

namespace {

// How the record holds the values: 4-bit codes with zero points (AWQ's),
// the W lines' image itself (byte codes), or MXFP4's E2M1 codes.
enum class Codes { nibbles, bytes, e2m1 };

// Weight formats as policy types (int4_packed_record.py FORMAT_SPECS). AWQ is
// the base; each other format states what it changes.
namespace formats {
// int4 AWQ / GPTQ / compressed-tensors: q, z and a bf16 s per group and
// column, dequant(W) = (q - z) * s.
struct awq {
  static constexpr Codes codes = Codes::nibbles;
  // Each scale as this many bf16 parts s = s_0 + .. + s_{P-1}, split with
  // round to nearest; the fold multiplies G's two halves by every part. P = 2
  // holds every value of up to 17 significant bits (the remainder of a round
  // to nearest is at most half an ulp, so its sign stands in for a bit); P =
  // 3 any f32 whose parts stay normal.
  static constexpr unsigned scale_parts = 1;
  // value = v * s + m per group and column (m in scale_parts parts): per fold
  // span the kernel adds R * m, R the span's row sums of A as converted to
  // bfp16 (one more 8x8x8 mmul per A block, against a block of ones).
  static constexpr bool min_term = false;
};
// fp16 scales as exact bf16 pairs (GGUF Q4_0, AWQ / GPTQ fp16 scales).
struct awq_f16 : awq {
  static constexpr unsigned scale_parts = 2;
};
// GGUF Q4_1, Q4_K: 4-bit codes (zero point 0), scales and min terms as pairs.
struct int4_min : awq {
  static constexpr unsigned scale_parts = 2;
  static constexpr bool min_term = true;
};
// Q4_1, Q4_K in the fast mode: one bf16 per scale and per min term.
struct int4_min_bf16 : awq {
  static constexpr bool min_term = true;
};
// Byte codes: the record holds the W pair lines' image itself, one signed
// 8-bit mantissa per value (already v = q - z, q - 16, kvalues[q], ...) and
// exponent byte 133, so the block streams read the record directly: no
// dequantisation, no zero points (GGUF Q5_0, Q8_0, IQ4_NL, IQ4_XS).
struct int8 : awq {
  static constexpr Codes codes = Codes::bytes;
  static constexpr unsigned scale_parts = 2;
};
// Q6_K: d * sc_j, an fp16 times an int8, needs up to 18 bits: triples.
struct int8_triple : int8 {
  static constexpr unsigned scale_parts = 3;
};
// Q5_1, Q5_K: byte codes with min terms, pairs.
struct int8_min : int8 {
  static constexpr bool min_term = true;
};
// Q5_1, Q5_K in the fast mode.
struct int8_min_bf16 : int8 {
  static constexpr unsigned scale_parts = 1;
  static constexpr bool min_term = true;
};
// MXFP4: E2M1 codes with one E8M0 scale per 32 values along K, exact in the
// block mmul (mantissa 2 * value, block exponent x + 5): no zero point, no
// scale fold, the accumulator runs over all of K (int4awq/formats/mxfp4.py).
struct mxfp4 : awq {
  static constexpr Codes codes = Codes::e2m1;
};
} // namespace formats

using Format = formats::INT4_FORMAT;
constexpr unsigned SCALE_PARTS = Format::scale_parts;
constexpr bool MIN_TERM = Format::min_term;
constexpr bool CODES8 = Format::codes == Codes::bytes;
constexpr bool MXFP4 = Format::codes == Codes::e2m1;
static_assert(SCALE_PARTS >= 1 && SCALE_PARTS <= 3,
              "1, 2 or 3 bf16 parts per scale");
static_assert(!MXFP4 || (SCALE_PARTS == 1 && !MIN_TERM),
              "MXFP4 has no scale fold and no min term");

constexpr unsigned TN = DIM_N;       // columns of W and C per PE
constexpr unsigned TK = DIM_K_CHUNK; // K per call
constexpr unsigned GS = DIM_GS;      // quantisation group size along K

static_assert(TN > 0 && TN % 16 == 0,
              "DIM_N (tile_n) must be a positive multiple of 16: 2x2 blocks of "
              "8x8 mmul tiles, and zero points are read 16 columns at a time");
static_assert(TK > 0 && TK % 16 == 0,
              "DIM_K_CHUNK (tile_k_l1) must be a positive multiple of 16");
static_assert(GS > 0 && GS % 16 == 0,
              "DIM_GS must be a positive multiple of 16");
static_assert(TK % GS == 0 || GS % TK == 0,
              "DIM_K_CHUNK and DIM_GS must divide one another: a chunk holds "
              "whole groups, or a group spans whole chunks");
static_assert(TN * TK * 2 <= 65536,
              "tile larger than a PE's 64 KiB data memory");
constexpr unsigned MX_GROUP = 32;
static_assert(!MXFP4 || (GS == MX_GROUP && TK % MX_GROUP == 0),
              "MXFP4: DIM_GS must be 32 (the MX group) and DIM_K_CHUNK a "
              "multiple of it");

using MMUL = aie::mmul<8, 8, 8, bfp16ebs8, bfp16ebs8, accauto>;
using BLOCKS = aie::block_vector<bfp16ebs8, 64>; // one 8x8 mmul operand: 8
                                                 // blocks of 8 along K
static_assert(MMUL::size_A == 64 && MMUL::size_B == 64 && MMUL::size_C == 64 &&
              BLOCKS::bytes() == 72);

constexpr unsigned NB = TN / 8; // 8-column blocks of W / C
constexpr unsigned NP = NB / 2; // column pairs
constexpr unsigned KB = TK / 8; // 8-deep K blocks per chunk
// K covered by one scale fold (MXFP4: no fold, one span per call).
constexpr unsigned SPAN = MXFP4 ? TK : (TK < GS ? TK : GS);
constexpr unsigned SB = SPAN / 8;  // K blocks per fold
constexpr unsigned NF = TK / SPAN; // folds per call = groups held by the record
constexpr unsigned BLK = 64;       // elements per 8x8 block
// Dense codes (the GEMV's record, nibble formats): two codes a byte, 64 per W
// block vector in the order the kernel pushes them, no exponent slots: 4 bits
// a weight where the line image takes 4.5. The kernel makes each block's
// exponent by converting (dequantize_dense). A span's pushes must end on a
// whole stream word (SB a multiple of 4, 8 block vectors), else the GEMV keeps
// the line image (int4_packed_record.dense_codes, the same rule).
constexpr bool DENSE =
    INT4_DENSE_CODES && Format::codes == Codes::nibbles && SB % 4 == 0;

// The K-block loop of a fold span (SB steps) is fully unrolled up to
// KB_UNROLL_MAX steps: aie_api places a block stream's FIFO fills at compile
// time only where it can count the pops since the stream was opened (otherwise
// every pop issues a fill), and the streams are opened per span for that (the
// Peano-built ATB bfp16 kernel unrolls its K steps the same way). Longer spans
// stay a rolled, pipelined loop. The entries write both loops over one step
// and `if constexpr (KB_UNROLLED)` keeps one.
constexpr unsigned KB_UNROLL_MAX = 16;
constexpr bool KB_UNROLLED = SB <= KB_UNROLL_MAX;

constexpr unsigned round64(unsigned x) { return (x + 63u) / 64u * 64u; }

// Every mmul starts from a zero accumulator, as the Peano-built kernels that
// run on NPU2 build theirs (mlir-air mm_aie2p.cc, mm_bf16_x_bfp16.cc): a
// default-constructed mmul carries a run-time "zero" flag into every mac.
inline MMUL zero_mmul() { return MMUL(aie::zeros<accfloat, 64>()); }

// Input block streams with restrict semantics: their pops do not alias each
// other or the entry's other buffers, so they may overlap. Every block the
// kernel pushes (the A line, the zero-point staging) is read back in the same
// call, so the output streams are the plain ones: a restrict stream promises
// that nothing else touches its bytes, and llvm-aie's alias analysis takes FIFO
// and ordinary accesses as non-aliasing on that promise (llvm-aie PR #327).
// mlir-aie PR #3650's mm_bfp_mixed.cc pushes its re-read A staging the same
// way.
using BlockIn = aie::block_vector_restrict_input_buffer_stream<bfp16ebs8, 64>;
using BlockOut = aie::block_vector_output_buffer_stream<bfp16ebs8, 64>;

// A pair line: the block vectors of two 8-row (A) or 8-column (W) blocks,
// interleaved along K (block 0 kb, block 1 kb, block 0 kb+1, ...), 144 bytes
// per K block. Each fold span's part (144 * SB bytes) starts on 64 bytes (a
// block stream starts at FIFO position 0 of a 512-bit word): SPAN_STRIDE.
// With several spans per call the nibble formats' spans are whole 576-byte
// periods of the zero-point pattern, so their stride is the span itself and
// the line is unpadded; byte codes pad each span (Q6_K's 16-value groups: 288
// bytes in a stride of 320).
constexpr unsigned SPAN_BYTES = 2 * SB * BLOCKS::bytes();
constexpr unsigned SPAN_STRIDE = round64(SPAN_BYTES);
constexpr unsigned PAIR_LINE = NF * SPAN_STRIDE;
static_assert(CODES8 || NF == 1 || SPAN_BYTES % 576 == 0,
              "DIM_GS must be a multiple of 32 when a chunk holds several "
              "groups: each group's part of a W line is then whole 576-byte "
              "periods of the zero-point pattern");
// The zero-point pattern repeats every 9 words: whole periods, then a tail.
constexpr unsigned SPAN_WORDS = SPAN_STRIDE / 64;
constexpr unsigned SPAN_PERIODS = SPAN_WORDS / 9, SPAN_TAIL = SPAN_WORDS % 9;

// Every output stream pushes whole 512-bit words: the store FIFO writes a word
// to memory only when it is complete (aie_api's push is fifo_st_push then
// fifo_st_flush, which writes complete words; no aie_api call writes a partial
// one), so a stream that ends inside a word may leave its tail unwritten. 72
// and 64 meet at 576 bytes: a stream pushes a multiple of 8 block vectors,
// padding its last span with copies of a block it holds (pad_to_words); the
// pad is never read. The A line keeps each span's pushes whole: the GEMM's
// 2 * SB block vectors per span padded to a multiple of 8 (A_SPAN_STRIDE;
// the GEMV's SB fit inside), so a span of 2 or 6 K blocks (GS 16, tile_k 16
// or 48) takes 576 bytes where its W line takes 320.
constexpr unsigned WORD_BLOCKS = 8; // 8 x 72 bytes = 9 words
constexpr unsigned whole_words(unsigned blocks) {
  return (blocks + WORD_BLOCKS - 1) / WORD_BLOCKS * WORD_BLOCKS;
}
constexpr unsigned A_SPAN_STRIDE = whole_words(2 * SB) * BLOCKS::bytes();
constexpr unsigned A_LINE_BYTES = NF * A_SPAN_STRIDE;
static_assert(A_SPAN_STRIDE % 64 == 0 && A_LINE_BYTES >= PAIR_LINE);

// Packed record (see int4_packed_record.py, which must agree), each section
// starting on a 64-byte boundary:
//   Q  nibble formats: the 4-bit codes in the image order of the W pair lines
//      (PAIR_LINE nibbles per pair), or DENSE (16 x TK nibbles per pair);
//      byte codes: the image itself (PAIR_LINE bytes per pair)
//   S  SCALE_PARTS x NF x TN bf16 (part i of span f, column n at i * NF * TN
//      + f * TN + n)
//   M  (MIN_TERM) the min terms, laid out as S
//   Z  (nibble formats) NF x TN uint8 zero points, doubled (2z)
// MXFP4 (int4awq/formats/mxfp4.py): the E2M1 codes in the nibble order, then X,
// per 32-value group and column the bf16 2^(E - 64 - 127) whose block
// conversion carries the group's exponent byte E = x + 5 (see dequantize).
constexpr unsigned Q_PAIR_BYTES =
    DENSE ? 8 * TK : (CODES8 ? PAIR_LINE : PAIR_LINE / 2);
constexpr unsigned Q_BYTES = NP * Q_PAIR_BYTES;
constexpr unsigned S_OFFSET = round64(Q_BYTES);
constexpr unsigned S_PART = NF * TN; // bf16 elements of one part
constexpr unsigned S_BYTES = round64(S_PART * 2 * SCALE_PARTS);
constexpr unsigned M_OFFSET = S_OFFSET + S_BYTES;
constexpr unsigned M_BYTES = MIN_TERM ? S_BYTES : 0;
constexpr unsigned Z_OFFSET = M_OFFSET + M_BYTES;
constexpr unsigned Z_BYTES = CODES8 ? 0 : round64(NF * TN);
constexpr unsigned RECORD_BYTES = Z_OFFSET + Z_BYTES;
// MXFP4: the X section, and a group's 576 bytes (9 words) of a pair line.
constexpr unsigned MX_GROUPS = TK / MX_GROUP; // per record
constexpr unsigned X_OFFSET = round64(Q_BYTES);
constexpr unsigned GROUP_WORDS = 2 * (MX_GROUP / 8) * 72 / 64;
static_assert(!MXFP4 || PAIR_LINE == MX_GROUPS * GROUP_WORDS * 64);

// w_scratch (see int4_packed_record.py, w_scratch_bytes): NP W pair lines
// (nibble formats), one A pair line (A_LINE_BYTES), 576 bytes where the
// zero-point pattern is staged (nibble formats: 8 block vectors, 9 words),
// with MIN_TERM the row sums R of each span's two 8-row blocks (bf16 hi then
// lo, 64 lanes each: 256 bytes per block).
constexpr unsigned A_LINE_OFFSET = CODES8 ? 0 : NP * PAIR_LINE;
constexpr unsigned STAGE_OFFSET = A_LINE_OFFSET + A_LINE_BYTES;
constexpr unsigned STAGE_BYTES = CODES8 ? 0 : WORD_BLOCKS * BLOCKS::bytes();
constexpr unsigned R_OFFSET = STAGE_OFFSET + STAGE_BYTES;
constexpr unsigned R_BLOCK_BYTES = 256;
constexpr unsigned R_BYTES = MIN_TERM ? 2 * NF * R_BLOCK_BYTES : 0;
constexpr unsigned SCRATCH_BYTES = R_OFFSET + R_BYTES;
static_assert(SCRATCH_BYTES % 64 == 0 && SCRATCH_BYTES <= 65536,
              "w_scratch does not fit a PE's L1");

// 8 values replicated 8 times: the per-column operand of an 8x8 row-major
// block.
inline aie::vector<bfloat16, 64>
replicate_row(const aie::vector<bfloat16, 8> &v) {
  return aie::concat(v, v, v, v, v, v, v, v);
}

inline bfp16ebs8 *blocks_at(uint8_t *scratch, unsigned offset) {
  return reinterpret_cast<bfp16ebs8 *>(scratch + offset);
}

// After PUSHED block vectors, pushes copies of `fill` until the stream ends on
// a whole 512-bit word (the pad is never read).
template <unsigned PUSHED>
inline void pad_to_words(BlockOut &out, const BLOCKS &fill) {
  // live: 1 vec, 0 acc
  AIE_LOOP_UNROLL_FULL
  for (unsigned i = PUSHED; i < whole_words(PUSHED); ++i)
    out << fill;
}

// z of 8 columns, as the bf16 bits 0x5D80 + 2z = (64 + z) * 2^54, lanes 8j ..
// 8j+7 = column j -> one block vector: block j has exponent byte 187 and 8
// mantissas 64 + z_j (exact: every lane of a block is the same power-of-two
// multiple of 64 + z_j, 64 <= 64 + z_j < 128).
inline BLOCKS zero_point_blocks(const aie::vector<bfloat16, 8> &zbits) {
  return aie::accum<accfloat, 64>(aie::transpose(replicate_row(zbits), 8, 8))
      .to_vector<bfp16ebs8>();
}

// The 576-byte pattern [V0 V1] repeated over one span of a pair line (9
// words), staged as [V0 V1] four times (8 block vectors, 9 whole words, so the
// stream ends on a word). Each pattern word is loaded from there where it is
// used (pattern_word), so no loop holds all nine.
inline const uint8_t *stage_pattern(const BLOCKS &v0, const BLOCKS &v1,
                                    uint8_t *__restrict scratch) {
  BlockOut st(blocks_at(scratch, STAGE_OFFSET));
  st << v0 << v1 << v0 << v1 << v0 << v1 << v0 << v1;
  return scratch + STAGE_OFFSET;
}
// Staged pattern word j minus c per byte.
inline aie::vector<uint8, 64> pattern_word(const uint8_t *__restrict stage,
                                           unsigned j,
                                           const aie::vector<uint8, 64> &c) {
  return aie::sub(aie::load_v<64>(stage + 64 * j), c);
}

// Record Q -> the W pair lines of w_scratch (nibble formats). For column pair
// p and fold span f, the zero-point pattern of the span's image is Z2 = [V0
// V1] repeated (V0, V1: the two column blocks' block vectors with exponent
// byte 123 and mantissas z, staged by stage_pattern, minus 64). Each image
// word is then 32 record bytes unpacked to uint8 minus its zero-point word:
// exponent lanes 0 - 123 = 133, mantissa lanes q - z.
//
// Image word w: 32 record bytes of nibbles unpacked to bytes, minus its
// zero-point pattern word.
inline void dequantize_word(const uint8_t *__restrict q,
                            uint8_t *__restrict dst, unsigned w,
                            const aie::vector<uint8, 64> &pattern) {
  const aie::vector<uint8, 64> u =
      aie::load_v<32>(q + 32 * w).cast_to<uint4>().unpack();
  aie::store_v(dst + 64 * w, aie::sub(u, pattern));
}

// Column pair p, fold span f: the W pair line's span from the record's codes
// and the two column blocks' zero-point block vectors.
inline void dequantize_pair(const uint8_t *__restrict record,
                            uint8_t *__restrict scratch, unsigned p, unsigned f,
                            const BLOCKS &v0, const BLOCKS &v1,
                            const aie::vector<uint8, 64> &c64) {
  const uint8_t *__restrict stage = stage_pattern(v0, v1, scratch);
  const uint8_t *__restrict q =
      record + p * Q_PAIR_BYTES + f * (SPAN_STRIDE / 2);
  uint8_t *__restrict dst = scratch + p * PAIR_LINE + f * SPAN_STRIDE;
  // Word w takes pattern word w % 9: pattern word j outer (unrolled: one
  // pattern word live, no modulo at run time, an unsigned remainder being a
  // library call on AIE2P), then the words 9r + j of the span.
  // live: 4 vec, 0 acc
  AIE_LOOP_UNROLL_FULL
  for (unsigned j = 0; j < 9; ++j) {
    const aie::vector<uint8, 64> pz = pattern_word(stage, j, c64);
    // live: 4 vec, 0 acc
    for (unsigned r = 0; r < SPAN_PERIODS + (j < SPAN_TAIL); ++r)
      dequantize_word(q, dst, 9 * r + j, pz);
  }
}

// The zero points are read 64 at a time (their section is whole 64-byte words),
// stored doubled by the packer (2z: no byte vector is added to itself here,
// x + x on bytes being llvm-aie #480's trigger): 0x80 + 2z on 512-bit vectors,
// zipped with 0x5D into the bf16 bits 0x5D80 + 2z of 64 columns, staged in the
// A line's bytes (free until the A conversion writes them), from where each
// column pair's loop iteration loads its 16. No 8-bit arithmetic on 128-bit
// vectors: 128-bit values live only in AIE2P's q registers, and an int8 x 16
// add that LLVM turned into a shift crashed llvm-aie's legalizer (llvm-aie
// #480); upstream's kernels work on 64 lanes. Zero point i = f * TN + c is
// column c of span f.
constexpr unsigned Z_WORDS = (NF * TN + 63) / 64;
static_assert(MXFP4 || Z_WORDS * 128 <= PAIR_LINE,
              "the zero points' bf16 bits are staged in the A line");

inline void dequantize_nibbles(const uint8_t *__restrict record,
                               uint8_t *__restrict scratch) {
  const uint8_t *__restrict zp = record + Z_OFFSET;
  bfloat16 *zbits = reinterpret_cast<bfloat16 *>(scratch + A_LINE_OFFSET);
  const aie::vector<uint8, 64> c80 = aie::broadcast<uint8, 64>(0x80);
  const aie::vector<uint8, 64> c5d = aie::broadcast<uint8, 64>(0x5D);
  // live: 5 vec, 0 acc
  AIE_LOOP_MIN_ITERATION_COUNT(1)
  for (unsigned c = 0; c < Z_WORDS; ++c) {
    KERNEL_ITERATION;
    const aie::vector<uint8, 64> z2 = aie::load_v<64>(zp + 64 * c);
    const auto zz = aie::interleave_zip(aie::add(z2, c80), c5d, 1);
    aie::store_v(zbits + 64 * c, zz.first.cast_to<bfloat16>());
    aie::store_v(zbits + 64 * c + 32, zz.second.cast_to<bfloat16>());
  }
  const aie::vector<uint8, 64> c64 = aie::broadcast<uint8, 64>(64);
  // live: 6 vec, 1 acc
  AIE_LOOP_MIN_ITERATION_COUNT(1)
  for (unsigned it = 0; it < NP * NF; ++it) {
    KERNEL_ITERATION;
    const unsigned p = it / NF, f = it - p * NF; // no remainder in a loop
    const bfloat16 *zb = zbits + f * TN + p * 16;
    dequantize_pair(record, scratch, p, f,
                    zero_point_blocks(aie::load_v<8>(zb)),
                    zero_point_blocks(aie::load_v<8>(zb + 8)), c64);
  }
}

// MXFP4: the record's offset nibbles u = t + 8 (uint8 lanes, 1 .. 15; t the
// E2M1 code's magnitude index with its sign, int4awq/formats/mxfp4.py) -> 2 *
// value + 62 (mod 256), an odd piecewise-linear map of t shifted: with m(t) =
// t + max(t, 4) + min(t, -4) + 2 (max(t, 6) + min(t, -6)) (0, 1, 2, 3, 4, 6, 8,
// 12 for t = 0 .. 7), m(u - 8) + 56 = u + max(u, 12) + min(u, 4) + 2 (max(u,
// 14) + min(u, 2)). Each doubled term is taken once from u and once from w = u
// + 2 (max(w, 16) = max(u, 14) + 2, min(w, 4) = min(u, 2) + 2), and max(u, 12)
// as max(w, 14) - 2, so no byte vector is added to itself (x + x on bytes is
// llvm-aie #480's trigger) and four constants serve (2, 4, 14, 16: register
// pressure); the sum is m + 62. All unsigned: Peano's aie_api mis-converts
// signed int4 (mlir-air fused_decode/kernels/q4_k.h, issue #1818), so the codes
// never are. The 62 is taken back by the pattern word (dequantize_e2m1).
constexpr unsigned E2M1_OFFSET = 62;
struct E2m1Constants {
  aie::vector<uint8, 64> c2 = aie::broadcast<uint8, 64>(2),
                         c4 = aie::broadcast<uint8, 64>(4),
                         c14 = aie::broadcast<uint8, 64>(14),
                         c16 = aie::broadcast<uint8, 64>(16);
};
inline aie::vector<uint8, 64> e2m1_mantissas(const aie::vector<uint8, 64> &u,
                                             const E2m1Constants &k) {
  const aie::vector<uint8, 64> w = aie::add(u, k.c2);
  aie::vector<uint8, 64> s = aie::add(u, aie::max(w, k.c14));
  s = aie::add(s, aie::min(u, k.c4));
  s = aie::add(s, aie::max(u, k.c14));
  s = aie::add(s, aie::max(w, k.c16));
  s = aie::add(s, aie::min(u, k.c2));
  return aie::add(s, aie::min(w, k.c4));
}

// Record codes -> the W pair lines of w_scratch (MXFP4). For column pair p and
// MX group g (576 bytes of the line, 9 words), the exponent pattern is [V0 V1]
// repeated, V0, V1 the two column blocks' block vectors with exponent byte E +
// 64 and mantissas 64 (the block conversion of X, 2^(E + 64 - 133) * 64),
// staged as [V0 V1] x 4 and taken minus 64 + 62 per byte (the AWQ zero points'
// 64, and the mantissa map's offset): exponent lanes E - 62, mantissa lanes
// -62. Each image word is 32 record bytes unpacked to offset nibbles, mapped
// to mantissas + 62 (an 8 sits where an exponent byte goes: 0 + 62) plus its
// pattern word.
inline void dequantize_e2m1(const uint8_t *__restrict record,
                            uint8_t *__restrict scratch) {
  const bfloat16 *__restrict xp =
      reinterpret_cast<const bfloat16 *>(record + X_OFFSET);
  const aie::vector<uint8, 64> c126 =
      aie::broadcast<uint8, 64>(64 + E2M1_OFFSET);
  const E2m1Constants k;
  // live: 10 vec, 1 acc
  AIE_LOOP_MIN_ITERATION_COUNT(1)
  for (unsigned it = 0; it < NP * MX_GROUPS; ++it) {
    KERNEL_ITERATION;
    const unsigned p = it / MX_GROUPS, g = it - p * MX_GROUPS;
    const bfloat16 *__restrict x = xp + g * TN + p * 16;
    const uint8_t *__restrict stage =
        stage_pattern(zero_point_blocks(aie::load_v<8>(x)),
                      zero_point_blocks(aie::load_v<8>(x + 8)), scratch);
    const uint8_t *__restrict q =
        record + p * Q_PAIR_BYTES + g * (GROUP_WORDS * 32);
    uint8_t *__restrict dst = scratch + p * PAIR_LINE + g * GROUP_WORDS * 64;
    // Unrolled (issue 50): a rolled loop over w could keep the nine pattern
    // words as a 576-byte array on the stack.
    // live: 9 vec, 0 acc
    AIE_LOOP_UNROLL_FULL
    for (unsigned w = 0; w < GROUP_WORDS; ++w) {
      const aie::vector<uint8, 64> u =
          aie::load_v<32>(q + 32 * w).cast_to<uint4>().unpack();
      aie::store_v(dst + 64 * w, aie::add(e2m1_mantissas(u, k),
                                          pattern_word(stage, w, c126)));
    }
  }
}

// Dense codes -> the W pair lines (DENSE). The zero points (stored doubled)
// are staged as bf16 z in the A line's bytes (to_float(2z, 1), exact); per
// column pair and span, each column block's zero vector is its 8 z replicated
// (lane 8j + i: column j, zero_point_blocks' transpose). Each block vector is
// then 32 record bytes unpacked to int8 and converted to bf16 (mlir-air
// mv_int4_bf16.cc's conversion), minus z in the accumulator (exact: integers
// below 16 in magnitude), converted to bfp16: the conversion makes the
// exponent bytes the line image stores, and the values are the line image's,
// so the mmul results are too.
inline BLOCKS dense_block(const uint8_t *__restrict q,
                          const aie::vector<bfloat16, 64> &z) {
  const aie::vector<int8, 64> u =
      aie::load_v<32>(q).cast_to<uint4>().unpack_sign<int8>(false);
  return aie::sub(aie::accum<accfloat, 64>(aie::to_float<bfloat16>(u, 0)), z)
      .to_vector<bfp16ebs8>();
}

inline void dequantize_dense(const uint8_t *__restrict record,
                             uint8_t *__restrict scratch) {
  const uint8_t *__restrict zp = record + Z_OFFSET;
  bfloat16 *zs = reinterpret_cast<bfloat16 *>(scratch + A_LINE_OFFSET);
  // live: 2 vec, 0 acc
  AIE_LOOP_MIN_ITERATION_COUNT(1)
  for (unsigned c = 0; c < Z_WORDS; ++c) {
    KERNEL_ITERATION;
    const aie::vector<int8, 64> z2 =
        aie::load_v<64>(zp + 64 * c).cast_to<int8>();
    aie::store_v(zs + 64 * c, aie::to_float<bfloat16>(z2, 1));
  }
  const uint8_t *__restrict q = record;
  // live: 5 vec, 1 acc
  AIE_LOOP_MIN_ITERATION_COUNT(1)
  for (unsigned it = 0; it < NP * NF; ++it) {
    KERNEL_ITERATION;
    const unsigned p = it / NF, f = it - p * NF; // no remainder in a loop
    const bfloat16 *zb = zs + f * TN + p * 16;
    const aie::vector<bfloat16, 64> z0 =
        aie::transpose(replicate_row(aie::load_v<8>(zb)), 8, 8);
    const aie::vector<bfloat16, 64> z1 =
        aie::transpose(replicate_row(aie::load_v<8>(zb + 8)), 8, 8);
    BlockOut out(blocks_at(scratch, p * PAIR_LINE + f * SPAN_STRIDE));
    // live: 5 vec, 1 acc
    AIE_LOOP_MIN_ITERATION_COUNT(4)
    for (unsigned kb = 0; kb < SB; ++kb) {
      KERNEL_ITERATION;
      out << dense_block(q, z0) << dense_block(q + 32, z1);
      q += 64;
    }
  }
}

// Record -> the W pair lines the block streams read: nibbles and E2M1 codes
// are dequantised into w_scratch; byte codes are read from the record itself.
inline void dequantize(const uint8_t *__restrict record,
                       uint8_t *__restrict scratch) {
  if constexpr (DENSE)
    dequantize_dense(record, scratch);
  else if constexpr (Format::codes == Codes::nibbles)
    dequantize_nibbles(record, scratch);
  else if constexpr (Format::codes == Codes::e2m1)
    dequantize_e2m1(record, scratch);
}

// One A block (8x8 bf16, row-major) -> bfp16ebs8 blocks along K: the vector
// goes to an accumulator by a move (to_blocks) or, for the second block of a
// pair, by a multiply by one on the MAC slot (to_blocks_on_mac; exact), so the
// two conversions of a step do not queue for one slot (mlir-air
// mm_bf16_x_bfp16.cc converts its second A block the same way).
inline BLOCKS to_blocks(const bfloat16 *__restrict a) {
  return aie::accum<accfloat, 64>(aie::load_v<64>(a)).to_vector<bfp16ebs8>();
}
inline BLOCKS to_blocks_on_mac(const bfloat16 *__restrict a,
                               const aie::vector<bfloat16, 64> &ones) {
  return aie::mul(aie::load_v<64>(a), ones).to_vector<bfp16ebs8>();
}

// acc += (hi + lo) * s, part by part: hi * s_i, then lo * s_i (acc in place:
// one accumulator register, as a mac chain). s_i is the scales (or min terms)
// of 8 columns at sp + i * S_PART, each replicated down the 8 rows of a block,
// loaded where it is used: one part live at a time.
inline void mac_parts(aie::accum<accfloat, 64> &acc,
                      const aie::vector<bfloat16, 64> &hi,
                      const aie::vector<bfloat16, 64> &lo, const bfloat16 *sp) {
  // live: 7 vec, 1 acc
  AIE_LOOP_UNROLL_FULL
  for (unsigned i = 0; i < SCALE_PARTS; ++i) {
    const aie::vector<bfloat16, 64> s =
        replicate_row(aie::load_v<8>(sp + i * S_PART));
    acc = aie::mac(acc, hi, s);
    acc = aie::mac(acc, lo, s);
  }
}

// MIN_TERM: the row sums R of fold span f's 8-row block j (0, 1: the pair the
// GEMM sweeps; the GEMV's band is block 0) in w_scratch, as bf16 hi then lo.
// R is an mmul of the block against a block of ones, so lane 8r + c holds
// row r's sum in every column c, the layout of the C block it is added to.
// Without a min term there are none (and no pointer past the scratch).
inline bfloat16 *row_sums_at(uint8_t *scratch, unsigned f, unsigned j) {
  if constexpr (!MIN_TERM)
    return nullptr;
  return reinterpret_cast<bfloat16 *>(scratch + R_OFFSET +
                                      (2 * f + j) * R_BLOCK_BYTES);
}
inline void store_row_sums(const MMUL &r, bfloat16 *dst) {
  const aie::accum<accfloat, 64> racc = r.to_accum();
  const aie::vector<bfloat16, 64> hi = racc.to_vector<bfloat16>();
  aie::store_v(dst, hi);
  aie::store_v(dst + 64, aie::sub(racc, hi).to_vector<bfloat16>());
}
// The row sums of the A blocks one span converts (MIN_TERM); without a min
// term, nothing at all.
template <bool ON>
struct RowSums {
  void add(const BLOCKS &) {}
  void store(bfloat16 *) const {}
};
template <>
struct RowSums<true> {
  // a block of ones (exact in bfp16) and R += a x ones, one mmul per block
  BLOCKS ones = aie::accum<accfloat, 64>(aie::broadcast<bfloat16, 64>(1.0f))
                    .to_vector<bfp16ebs8>();
  MMUL r = zero_mmul();
  void add(const BLOCKS &a) { r.mac(a, aie::op_transpose(ones)); }
  void store(bfloat16 *dst) const { store_row_sums(r, dst); }
};

// c (one 8x8 f32 block of the accumulator) += G * s (+ R * m with MIN_TERM, R
// at r, the min terms S_BYTES after the scales), G and R each split into bf16
// hi + lo, in the order of mac_parts. Each fold loads its own terms, so no
// fold holds the scales and the min terms at once (register pressure).
inline void fold(const MMUL &g, const bfloat16 *sp, const bfloat16 *r,
                 float *__restrict c) {
  const aie::accum<accfloat, 64> gacc = g.to_accum();
  const aie::vector<bfloat16, 64> hi = gacc.to_vector<bfloat16>();
  const aie::vector<bfloat16, 64> lo = aie::sub(gacc, hi).to_vector<bfloat16>();
  aie::accum<accfloat, 64> acc(aie::load_v<64>(c));
  mac_parts(acc, hi, lo, sp);
  if constexpr (MIN_TERM)
    mac_parts(acc, aie::load_v<64>(r), aie::load_v<64>(r + 64),
              sp + S_BYTES / 2);
  aie::store_v(c, acc.to_vector<float>());
}

// A span's accumulators: AWQ starts each from zero and folds it into c at the
// end (G * s); MXFP4 starts from c itself and stores it back (no fold: the
// scales are in the block exponents), one span per call.
inline MMUL span_start(const float *__restrict c) {
  if constexpr (MXFP4)
    return MMUL(aie::accum<accfloat, 64>(aie::load_v<64>(c)));
  else
    return zero_mmul();
}
// One column block: its terms at sp, the row sums at r.
inline void span_end(const MMUL &g, const bfloat16 *sp, const bfloat16 *r,
                     float *__restrict c) {
  if constexpr (MXFP4)
    aie::store_v(c, g.to_accum().to_vector<float>());
  else
    fold(g, sp, r, c);
}
// The 2x2 block of C at c00 (blocks (mb, nb), (mb, nb+1), (mb+1, nb), (mb+1,
// nb+1); the next column block `col` floats on, the next row block `row`):
// the terms of columns 8nb .. 8nb+15 at sp, the row sums of the two row blocks
// at r0, r1. Each fold writes its own C block, so the order is free.
inline void span_end_2x2(const MMUL &g00, const MMUL &g01, const MMUL &g10,
                         const MMUL &g11, const bfloat16 *sp,
                         const bfloat16 *r0, const bfloat16 *r1, float *c00,
                         unsigned col, unsigned row) {
  span_end(g00, sp, r0, c00);
  span_end(g10, sp, r1, c00 + row);
  span_end(g01, sp + 8, r0, c00 + col);
  span_end(g11, sp + 8, r1, c00 + col + row);
}

// The block stream base of column pair p's W line, span f: the record itself
// with byte codes, else the line dequantize wrote in w_scratch.
inline bfp16ebs8 *w_line(uint8_t *record, uint8_t *scratch, unsigned p,
                         unsigned f) {
  return blocks_at(CODES8 ? record : scratch, p * PAIR_LINE + f * SPAN_STRIDE);
}

} // namespace
