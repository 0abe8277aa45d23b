# SPDX-License-Identifier: MIT
"""OCP MX v1.0 MXFP4 weights and their exact mapping onto the kernel's bfp16ebs8 blocks.

An MXFP4 weight is an E2M1 code (1 sign, 2 exponent, 1 mantissa bit: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their
negatives) times one E8M0 scale 2^(x - 127) per 32 values along K (x = 255 is NaN). Twice an E2M1 value is an
integer in {0, 1, 2, 3, 4, 6, 8, 12} (sign apart), so a block of 8 values along K is the bfp16ebs8 block with
mantissas 2 * value and exponent byte E = x + 5 (value = m * 2^(E - 133)): the weights enter the block mmul
exactly, with no zero point and no scale fold, and the accumulator runs over all of K.

The packed record of one (N-tile, K-chunk), as the MXFP4 kernel entries read it (kernels/mv_int4_bf16.cc,
-DINT4_MXFP4): the E2M1 codes as offset nibbles (offset_nibbles: the magnitude index with the code's sign,
plus 8) in the image order of the W pair lines (record.q_nibble_index; a nibble where an exponent byte lives
is 8), then X, per 32-value group and column ([K-chunk / 32, tile_n]) the bf16 power of two 2^(x - 58) (bits ((x + 69) mod 256) << 7): its block conversion has exponent
byte x + 69, which the kernel turns into E = x + 5 the way it turns AWQ zero points into exponent bytes.
Each section starts on 64 bytes.

Decoding is ml_dtypes' (float4_e2m1fn, float8_e8m0fnu); the validation here refuses what the kernel cannot
hold: x = 255 (NaN), x > 250 (E = x + 5 past a byte) and x = 186, 187 (the kernel builds the exponent bytes of
a group from the bf16 power of two 2^(x - 58), which for these is infinity or zero).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ml_dtypes import bfloat16, float4_e2m1fn, float8_e8m0fnu

from .errors import ConfigError
from .kernel_model import bfp16_blocks
from .quant import check_dims
from .record import _pad, _q_order, mxfp4_record_bytes, q_section_bytes

MX_BLOCK = 32  # values along K that share one E8M0 scale
E8M0_NAN = 0xFF
E_BIAS = 5  # bfp16 exponent byte E = x + 5
UNSUPPORTED_SCALES = (186, 187)  # 2^(x - 58) in bf16 is infinity / zero


@dataclass(frozen=True)
class Mxfp4Weights:
    """MXFP4 weights of a [K, N] projection: codes uint8 [K, N] (E2M1, 0..15), scales uint8 [K / 32, N]."""

    codes: np.ndarray
    scales: np.ndarray

    @property
    def k(self) -> int:
        return self.codes.shape[0]

    @property
    def n(self) -> int:
        return self.codes.shape[1]

    @property
    def gs(self) -> int:
        """Values per scale along K (the MX group)."""
        return MX_BLOCK

    format = "mxfp4"

    def validate(self) -> None:
        c, s = self.codes, self.scales
        if not (isinstance(c, np.ndarray) and c.dtype == np.uint8 and c.ndim == 2):
            raise ConfigError(
                "MXFP4 codes: expected a uint8 [K, N] array of E2M1 codes"
            )
        if not (isinstance(s, np.ndarray) and s.dtype == np.uint8 and s.ndim == 2):
            raise ConfigError(
                "MXFP4 scales: expected a uint8 [K/32, N] array of E8M0 bytes"
            )
        k, n = c.shape
        if k % MX_BLOCK or s.shape != (k // MX_BLOCK, n):
            raise ConfigError(
                f"MXFP4: codes {c.shape} and scales {s.shape} do not match (K a multiple of 32, "
                f"scales [K/32, N])"
            )
        if (c > 15).any():
            raise ConfigError(f"MXFP4 codes: {int(c.max())} is not a 4-bit E2M1 code")
        check_scales(s)

    def padded(self, n: int) -> "Mxfp4Weights":
        return pad_columns(self, n)

    def pack(self, tile_n: int, tile_k: int) -> np.ndarray:
        return pack_mxfp4(self, tile_n, tile_k)

    def dequantize(self) -> np.ndarray:
        """float32 [K, N]: code value times its group's scale (ml_dtypes' decoding)."""
        vals = self.codes.view(float4_e2m1fn).astype(np.float32)
        scale = self.scales.view(float8_e8m0fnu).astype(np.float32)
        return vals * np.repeat(scale, MX_BLOCK, axis=0)


def check_scales(scales: np.ndarray) -> None:
    """One line naming the first E8M0 byte the kernel cannot hold, if any."""
    bad = (
        (scales == E8M0_NAN)
        | (scales > 255 - E_BIAS)
        | np.isin(scales, UNSUPPORTED_SCALES)
    )
    if bad.any():
        g, col = (int(i) for i in np.argwhere(bad)[0])
        x = int(scales[g, col])
        why = (
            "NaN"
            if x == E8M0_NAN
            else (
                "2^%d: its block exponent byte x + 5 exceeds 255" % (x - 127)
                if x > 255 - E_BIAS
                else "2^%d: the kernel builds block exponents from bf16 2^(x - 58), infinite or zero here"
                % (x - 127)
            )
        )
        raise ConfigError(
            f"MXFP4 scale byte {x} (group {g}, column {col}) is not supported: {why}"
        )


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


def random_mxfp4(k: int, n: int, seed: int, exact: bool = False) -> Mxfp4Weights:
    """Seeded MXFP4 weights: codes uniform over the 16, scales around 2^-7 (W ~ 1/sqrt(K)-sized); exact=True
    gives scale 1 (2^0), whose products with exact-mode A are exact in f32."""
    check_dims(K=k, N=n)
    if k % MX_BLOCK:
        raise ConfigError(
            f"K = {k}: MXFP4 groups are 32 values along K, K must be a multiple of 32"
        )
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 16, (k, n), dtype=np.uint8)
    if exact:
        scales = np.full((k // MX_BLOCK, n), 127, np.uint8)
    else:
        scales = rng.integers(118, 123, (k // MX_BLOCK, n), dtype=np.uint8)
    return Mxfp4Weights(codes, scales)


def pad_columns(w: Mxfp4Weights, n: int) -> Mxfp4Weights:
    """W with zero columns (code 0, scale 1) up to n columns."""
    if n == w.n:
        return w
    codes = np.zeros((w.k, n), np.uint8)
    scales = np.full((w.k // MX_BLOCK, n), 127, np.uint8)
    codes[:, : w.n], scales[:, : w.n] = w.codes, w.scales
    return Mxfp4Weights(codes, scales)


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
