# SPDX-License-Identifier: MIT
"""OCP MX v1.0 MXFP4 weights and their exact mapping onto the kernel's bfp16ebs8 blocks.

An MXFP4 weight is an E2M1 code (1 sign, 2 exponent, 1 mantissa bit: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their
negatives) times one E8M0 scale 2^(x - 127) per 32 values along K (x = 255 is NaN). Twice an E2M1 value is an
integer in {0, 1, 2, 3, 4, 6, 8, 12} (sign apart), so a block of 8 values along K is the bfp16ebs8 block with
mantissas 2 * value and exponent byte E = x + 5 (value = m * 2^(E - 133)): the weights enter the block mmul
exactly, with no zero point and no scale fold, and the accumulator runs over all of K.

The packed record (int4awq.kernel.record.pack_mxfp4; the numpy model is int4awq.kernel.kernel_model's) of one (N-tile, K-chunk), as the MXFP4 kernel entries read it (kernels/mv_int4_bf16.cc,
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
from ml_dtypes import float4_e2m1fn, float8_e8m0fnu

from ..errors import ConfigError
from .quant import check_dims, frozen

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

    def validate(self) -> "Mxfp4Weights":
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
        return frozen(self, c, s)

    def padded(self, n: int) -> "Mxfp4Weights":
        return pad_columns(self, n)

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
    return Mxfp4Weights(codes, scales).validate()


def pad_columns(w: Mxfp4Weights, n: int) -> Mxfp4Weights:
    """W with zero columns (code 0, scale 1) up to n columns."""
    if n == w.n:
        return w
    codes = np.zeros((w.k, n), np.uint8)
    scales = np.full((w.k // MX_BLOCK, n), 127, np.uint8)
    codes[:, : w.n], scales[:, : w.n] = w.codes, w.scales
    return Mxfp4Weights(codes, scales)
