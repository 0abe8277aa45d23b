# SPDX-License-Identifier: MIT
"""MXFP4 weights (int4awq.mxfp4) as the kernel's MXFP4 entries read them: the offset nibbles, the record, and a
numpy model of what the entries compute (the layouts are int4awq/mxfp4.py's module doc).
"""

from __future__ import annotations

import numpy as np
from ml_dtypes import bfloat16, float4_e2m1fn

from .errors import ConfigError
from .kernel_model import bfp16_blocks
from .mxfp4 import E_BIAS, MX_BLOCK, Mxfp4Weights
from .record import _pad, _q_order, mxfp4_record_bytes, q_section_bytes

# The nibble of an exponent slot: u = 8 is t = 0, mantissa 0 (the slot then holds the pattern's exponent).
ZERO_NIBBLE = 8


def offset_nibbles(codes: np.ndarray) -> np.ndarray:
    """uint8 nibbles the record stores for E2M1 codes: the magnitude index k = c & 7 with the code's sign,
    t = +-k (-0 is 0), stored offset as u = t + 8 (1 .. 15). The kernel reads them unsigned and maps u to
    2 * value + 56 with four min / max and adds (kernels/mv_int4_bf16.cc e2m1_mantissas), the 56 taken
    back by its pattern word: no signed int4 anywhere, which Peano's aie_api mis-converts (mlir-air
    fused_decode/kernels/q4_k.h, #1818)."""
    k = (codes & 7).astype(np.int16)
    t = np.where(codes >= 8, -k, k)
    return (t + ZERO_NIBBLE).astype(np.uint8)


def mantissas(codes: np.ndarray) -> np.ndarray:
    """int8: twice each E2M1 code's value, the bfp16 mantissa it becomes."""
    return (codes.view(float4_e2m1fn).astype(np.float32) * 2).astype(np.int8)


# ------------------------------------------------------------------------------------------ record
record_bytes = mxfp4_record_bytes


def exponent_carriers(scales: np.ndarray) -> np.ndarray:
    """uint16 bf16 bits of 2^(x - 58) for E8M0 bytes x (x + 69 taken mod 256; check_scales first)."""
    return ((scales.astype(np.uint16) + 69) % 256) << 7


def check_tile(tile_n: int, tile_k: int) -> None:
    if tile_n % 16 or tile_k % MX_BLOCK:
        raise ConfigError(
            f"MXFP4 tile_n = {tile_n}, tile_k = {tile_k}: tile_n a multiple of 16, tile_k of 32 (the MX group)"
        )


def pack_mxfp4(w: Mxfp4Weights, tile_n: int, tile_k: int) -> np.ndarray:
    """uint8 [N // tile_n, K // tile_k, record_bytes]: one record per (N-tile, K-chunk), in L3 order."""
    w.validate()
    check_tile(tile_n, tile_k)
    if w.k % tile_k or w.n % tile_n:
        raise ConfigError(
            f"K = {w.k}, N = {w.n}: not multiples of tile_k = {tile_k}, tile_n = {tile_n}"
        )
    nt, kc = w.n // tile_n, w.k // tile_k
    q_bytes = q_section_bytes(tile_n, tile_k)
    x_off, groups = _pad(q_bytes), tile_k // MX_BLOCK
    out = np.zeros((nt, kc, record_bytes(tile_n, tile_k)), dtype=np.uint8)
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


# ------------------------------------------------------------------------------------------ numpy model
def weight_blocks(w: Mxfp4Weights) -> np.ndarray:
    """float64 [K / 8, N, 8]: W as the kernel's bfp16 blocks along K (exactly its values)."""
    m = mantissas(w.codes).astype(np.float64)  # [K, N]
    e = np.repeat(w.scales.astype(np.int64) + E_BIAS - 133, MX_BLOCK, axis=0)  # [K, N]
    vals = np.ldexp(m, e)
    return vals.reshape(w.k // 8, 8, w.n).transpose(0, 2, 1)


def kernel_mxfp4_model(a: np.ndarray, w: Mxfp4Weights) -> np.ndarray:
    """bf16 [M, N]: what the MXFP4 entries compute for C = A x W: A in bfp16 blocks of 8 along K (the model
    of kernel_model), each 8-deep block product exact, added to the f32 accumulator in K order (one
    round-to-nearest-even addition per block, across K-chunks), C = bf16(c)."""
    m, k = a.shape
    a_bfp = bfp16_blocks(a.astype(np.float32).reshape(m, k // 8, 8))
    w_bfp = weight_blocks(w)
    c = np.zeros((m, w.n), dtype=np.float32)
    for kb in range(k // 8):
        c = c + (a_bfp[:, kb, :] @ w_bfp[kb].T).astype(np.float32)
    return c.astype(bfloat16)
