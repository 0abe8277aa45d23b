# SPDX-License-Identifier: MIT
"""The tools' side of the packed Q+S+Z weight record the AIE2P kernel reads: each format's packer and
unpacker, over the layout and rules of int4_packed_record.py (beside the builders; re-exported here).

One record per (N-tile nt, K-chunk kc) holds everything a PE needs for one `matmul_int4_bf16_packed_f32` call,
so a single DMA brings it. L3 order: record (nt, kc) at byte offset (nt * (K // tile_k) + kc) * record_bytes.
The layout (int4_packed_record's module doc): Q in the memory-image order of the kernel's W pair lines, one
nibble per image byte, so element (k, n) of the chunk is nibble

    i = (n // 16) * L + (2 * (k // 8) + (n // 8) % 2) * 72 + (n % 8) * 9 + 1 + k % 8,

stored in byte i // 2, low nibble when i is even (aie_api's cast_to<uint4> order), with all other nibbles 0;
then S, (M,) Z, each on 64 bytes. The kernel unpacks 32 bytes to 64 image bytes and subtracts a zero-point
word (123 at the exponent bytes, z at the mantissas), which writes exponent 133 (value = mantissa) and
mantissas q - z: the bfp16 operand without any conversion (w_scratch_bytes).

The other record formats (FORMAT_SPECS) change this layout in three ways: the scale parts (S holds P bf16
parts per group and column, part by part: awq_f16 and the GGUF formats), a min term (an M section laid out as
S, between S and Z: int4_min, int8_min), and byte codes (int8, int8_min: the Q section is the W pair lines'
image itself, one byte per image byte with exponent byte 133, each fold span's part padded to 64 bytes,
image_index; no Z). MXFP4's record is pack_mxfp4's, below (layout: int4awq/formats/mxfp4.py).

The GEMV's records of the 4-bit formats hold their codes dense instead (int4_packed_record.dense_codes):
tile_n x tile_k nibbles in the order the kernel pushes its W block vectors (dense_index), 4 bits a weight
where the image takes 4.5; the kernel converts each block vector and so makes its exponent bytes.
"""

from __future__ import annotations

import argparse

import numpy as np
from ml_dtypes import bfloat16

from ..errors import ConfigError
from ..formats.mxfp4 import MX_BLOCK, Mxfp4Weights
from ..formats.quant import (
    AwqWeights,
    bf16_parts,
    check_dims,
    check_group_size,
)

from int4_packed_record import (  # the example's rules, beside the builders
    FORMAT_GS,  # each format's usual group size: seeded weights' and the default table's rows'
    FORMAT_SPECS,
    FORMATS,
    KERNEL_LIVE_BYTES,
    L1_BYTES,
    KernelObject,
    _pad,
    _q_order,
    check_kernel_tiles,
    check_record_tile,
    check_stack_size,
    check_weight_tiling,
    format_record_bytes,
    kernel_stack_bytes,
    l1_budget,
    mxfp4_record_bytes,
    pack_records,
    nibble_index,
    q_nibble_index,
    q_section_bytes,
    record_bytes,
    record_layout,
    w_pair_line_bytes,
    w_scratch_bytes,
)

# What a default configuration leaves free of L1: the stack is an estimate from the kernel's live set
# (KERNEL_LIVE_BYTES), not Peano's frame, so a default keeps this much room for it to be wrong. A
# configuration given on the command line needs only to fit.
DEFAULT_L1_SPARE = 2048


def leaves_default_spare(l1_total: int) -> bool:
    """Whether a configuration using l1_total bytes of a PE's L1 may be a default (DEFAULT_L1_SPARE)."""
    return l1_total <= L1_BYTES - DEFAULT_L1_SPARE


# The tiles a configuration search tries (int4awq.design.sweep for the GEMM, int4awq.design.gemv for the decode GEMV), and
# so the tiles the kernel cost model's table covers (int4awq.design.kernel_cost).
GEMM_TILES = (16, 32, 48, 64, 80, 96, 128)  # tile_m and tile_n
GEMM_K_CHUNKS = (16, 32, 64, 128, 256)  # tile_k_l1
GEMV_TILE_NS = (16, 32, 48, 64, 80, 96, 128)
GEMV_TILE_KS = (32, 64, 128, 256, 512)


def pack_weights(
    w: AwqWeights,
    tile_n: int,
    tile_k: int,
    fmt: str | None = None,
    dense: bool = False,
) -> np.ndarray:
    """uint8 [N // tile_n, K // tile_k, record_bytes]: one record per (N-tile, K-chunk), in L3 order, in
    record format fmt ("awq" or "awq_f16"; None: the weights' own); dense: the GEMV's dense codes
    (dense_codes). bf16 scales go into an awq_f16 record as pairs with zero low halves; scale pairs do not
    fit an awq record (refused). w is validated where it was made (a reader or generator), so it is
    trusted here."""
    fmt = w.format if fmt is None else fmt
    if fmt not in ("awq", "awq_f16"):
        raise ConfigError(f"record format {fmt!r}: AWQ weights pack as awq or awq_f16")
    if fmt == "awq" and w.s_lo is not None:
        raise ConfigError(
            "these weights hold their scales as exact bf16 pairs (fp16 scales): they need the awq_f16 "
            "record (--format awq_f16)"
        )
    parts = [w.s]
    if fmt == "awq_f16":
        parts.append(np.zeros_like(w.s) if w.s_lo is None else w.s_lo)
    return pack_records(w.q, w.z, parts, None, w.gs, tile_n, tile_k, fmt, dense)


def unpack_weights(
    packed: np.ndarray,
    k: int,
    n: int,
    gs: int,
    tile_n: int,
    tile_k: int,
    fmt: str = "awq",
    dense: bool = False,
) -> AwqWeights:
    """Exact inverse of pack_weights (an awq_f16 record gives weights with s_lo)."""
    # an edge: k, n and gs come from the caller, not from a validated weight
    check_dims(K=k, N=n)
    check_group_size(k, gs)
    check_weight_tiling(k, n, gs, tile_n, tile_k)
    lay = record_layout(tile_n, tile_k, gs, fmt, dense)
    nt, kc = n // tile_n, k // tile_k
    if (
        not isinstance(packed, np.ndarray)
        or packed.dtype != np.uint8
        or packed.shape != (nt, kc, lay.total)
    ):
        raise ConfigError(
            f"packed: dtype {getattr(packed, 'dtype', '?')} shape {getattr(packed, 'shape', '?')}, "
            f"expected uint8 {(nt, kc, lay.total)} for K={k} N={n} gs={gs} tile_n={tile_n} tile_k={tile_k}"
        )
    qb = packed[:, :, : lay.q_bytes]
    codes = np.empty((nt, kc, 2 * lay.q_bytes), dtype=np.uint8)
    codes[:, :, 0::2] = qb & 0xF
    codes[:, :, 1::2] = qb >> 4
    tiles = codes[
        :, :, nibble_index(tile_n, tile_k, gs, fmt, dense)
    ]  # [NT, KC, TK, TN]
    q = tiles.transpose(1, 2, 0, 3).reshape(k, n)

    def groups_of(section: np.ndarray) -> np.ndarray:  # [NT, KC, G*TN] -> [groups, N]
        x = (
            section.reshape(nt, kc, lay.groups, tile_n)
            .transpose(1, 2, 0, 3)
            .reshape(kc * lay.groups, n)
        )
        if tile_k >= gs:
            return x
        return x[
            :: gs // tile_k
        ]  # every chunk of a group carries the same S, Z: take the first

    s_raw = np.ascontiguousarray(
        packed[:, :, lay.s_offset : lay.s_offset + lay.s_bytes]
    ).view(bfloat16)
    halves = [
        groups_of(h) for h in np.split(s_raw, 2 if fmt == "awq_f16" else 1, axis=2)
    ]
    z = (
        groups_of(packed[:, :, lay.z_offset : lay.z_offset + lay.z_bytes]) // 2
    )  # stored doubled
    return AwqWeights(
        np.ascontiguousarray(q),
        np.ascontiguousarray(z),
        np.ascontiguousarray(halves[0]),
        gs,
        np.ascontiguousarray(halves[1]) if len(halves) == 2 else None,
    )


# ------------------------------------------------------------------------------------------ operands
def pad_weights(w: AwqWeights, n: int) -> AwqWeights:
    """Zero columns up to n (q = z = 0, s = 1): they dequantise to 0 and their C columns are dropped."""
    extra = n - w.n
    if not extra:
        return w
    return AwqWeights(
        np.pad(w.q, ((0, 0), (0, extra))),
        np.pad(w.z, ((0, 0), (0, extra))),
        np.pad(w.s, ((0, 0), (0, extra)), constant_values=bfloat16(1)),
        w.gs,
        None if w.s_lo is None else np.pad(w.s_lo, ((0, 0), (0, extra))),
    )


def padded_operands(cfg, a: np.ndarray, w: AwqWeights) -> tuple[np.ndarray, np.ndarray]:
    """(A with zero rows up to cfg.m, W padded to cfg.n and packed into the kernel's records), for a
    configuration's padded shape (cfg.m, cfg.k, cfg.n, cfg.tile_n, cfg.tile_k_l1)."""
    a_padded = np.zeros((cfg.m, cfg.k), bfloat16)
    a_padded[: a.shape[0]] = a
    w_padded = pad_weights(w, cfg.n) if isinstance(w, AwqWeights) else w.padded(cfg.n)
    return a_padded, pack_format(
        w_padded, cfg.tile_n, cfg.tile_k_l1, cfg.format, cfg.kernel.dense
    )


def pack_format(
    w, tile_n: int, tile_k: int, fmt: str, dense: bool = False
) -> np.ndarray:
    """Weights packed into the records of format fmt (dense: the GEMV's dense codes, where the format has
    them: KernelObject.dense): AWQ weights by pack_weights, MXFP4 weights by pack_mxfp4, GGUF's
    block-integer weights by pack_block_int.
    """
    if isinstance(w, AwqWeights):
        return pack_weights(w, tile_n, tile_k, fmt, dense)
    if w.format != fmt:
        raise ConfigError(f"{w.format} weights do not pack into {fmt} records")
    if fmt == "mxfp4":
        return pack_mxfp4(w, tile_n, tile_k)
    return pack_block_int(w, tile_n, tile_k, dense)


def block_int_parts(w) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
    """The scale's and the min term's exact bf16 parts ([K / gs, N] each; None without a min term) of GGUF
    block-integer weights (int4awq.formats.gguf_quants.BlockIntWeights), as many as their format holds.
    """
    parts = FORMAT_SPECS[w.format].scale_parts
    return bf16_parts(w.s, parts), None if w.m is None else bf16_parts(w.m, parts)


def pack_block_int(w, tile_n: int, tile_k: int, dense: bool = False) -> np.ndarray:
    """uint8 [N / tile_n, K / tile_k, record bytes]: GGUF block-integer weights in their format's records:
    int4_min as 4-bit codes v with zero point 0 (dense: the GEMV's dense codes), the int8 formats as v in
    the bfp16 image.
    """
    if FORMAT_SPECS[w.format].codes == "int4":
        codes = w.v.astype(np.uint8)
        z = np.zeros((w.groups, w.n), np.uint8)
    else:
        codes, z = w.v.astype(np.int8), None
    s_parts, m_parts = block_int_parts(w)
    return pack_records(
        codes, z, s_parts, m_parts, w.gs, tile_n, tile_k, w.format, dense
    )


# ------------------------------------------------------------------------------------------ MXFP4 record
# (int4awq/formats/mxfp4.py's module doc has the layout)
# The nibble of an exponent slot: u = 8 is t = 0, mantissa 0 (the slot then holds the pattern's exponent).
ZERO_NIBBLE = 8


def offset_nibbles(codes: np.ndarray) -> np.ndarray:
    """uint8 nibbles the record stores for E2M1 codes: the magnitude index k = c & 7 with the code's sign,
    t = +-k (-0 is 0), stored offset as u = t + 8 (1 .. 15). The kernel reads them unsigned and maps u to
    2 * value + 62 with six min / max and seven adds (kernels/int4_kernel.h e2m1_mantissas), the 62 taken
    back by its pattern word: no signed int4 anywhere, which Peano's aie_api mis-converts (mlir-air
    fused_decode/kernels/q4_k.h, #1818)."""
    k = (codes & 7).astype(np.int16)
    t = np.where(codes >= 8, -k, k)
    return (t + ZERO_NIBBLE).astype(np.uint8)


def exponent_carriers(scales: np.ndarray) -> np.ndarray:
    """uint16 bf16 bits of 2^(x - 58) for E8M0 bytes x (x + 69 taken mod 256; check_scales first)."""
    return ((scales.astype(np.uint16) + 69) % 256) << 7


def check_mxfp4_tile(tile_n: int, tile_k: int) -> None:
    if tile_n % 16 or tile_k % MX_BLOCK:
        raise ConfigError(
            f"MXFP4 tile_n = {tile_n}, tile_k = {tile_k}: tile_n a multiple of 16, tile_k of 32 (the MX group)"
        )


def pack_mxfp4(w: Mxfp4Weights, tile_n: int, tile_k: int) -> np.ndarray:
    """uint8 [N // tile_n, K // tile_k, record_bytes]: one record per (N-tile, K-chunk), in L3 order (w
    validated where it was made)."""
    check_mxfp4_tile(tile_n, tile_k)
    if w.k % tile_k or w.n % tile_n:
        raise ConfigError(
            f"K = {w.k}, N = {w.n}: not multiples of tile_k = {tile_k}, tile_n = {tile_n}"
        )
    nt, kc = w.n // tile_n, w.k // tile_k
    q_bytes = q_section_bytes(tile_n, tile_k)
    x_off, groups = _pad(q_bytes), tile_k // MX_BLOCK
    out = np.zeros((nt, kc, mxfp4_record_bytes(tile_n, tile_k)), dtype=np.uint8)
    nib = _q_order(
        offset_nibbles(w.codes), tile_n, tile_k, 2 * q_bytes, fill=ZERO_NIBBLE
    )
    out[:, :, :q_bytes] = nib[:, :, 0::2] | (nib[:, :, 1::2] << 4)
    x = (
        exponent_carriers(w.scales)
        .reshape(kc, groups, nt, tile_n)
        .transpose(2, 0, 1, 3)
    )
    x = np.ascontiguousarray(x.reshape(nt, kc, groups * tile_n)).astype("<u2")
    out[:, :, x_off : x_off + 2 * groups * tile_n] = x.view(np.uint8)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="int4-AWQ packed record: layout and L1 budget"
    )
    ap.add_argument("--tile-m", type=int, default=64)
    ap.add_argument("--tile-n", type=int, default=64)
    ap.add_argument("--tile-k", type=int, default=64)
    ap.add_argument("--gs", type=int, default=128)
    args = ap.parse_args(argv)
    try:
        budget = l1_budget(args.tile_m, args.tile_n, args.tile_k, args.gs)
        lay = record_layout(args.tile_n, args.tile_k, args.gs)
    except ConfigError as e:
        print(f"error: {e}")
        return 2
    print(f"record {lay}")
    print(
        "L1 budget (bytes): "
        + ", ".join(f"{k} {v}" for k, v in budget.items())
        + f" of {L1_BYTES}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
