# SPDX-License-Identifier: MIT
"""AWQ int4 weights: the container, AutoAWQ's quantiser, dequantisation and seeded generators.

Layout used everywhere on the host (logical, before packing into kernel records):

    q[k, n]   uint8 in 0..15   the 4-bit code of W[k, n]
    z[g, n]   uint8 in 0..15   zero point of group g = k // gs, column n
    s[g, n]   bfloat16 > 0     scale of that group and column
    dequant(W)[k, n] = (q[k, n] - z[g, n]) * s[g, n]

A scale the source holds in more than bf16's 8 significant bits (an fp16 scale: GGUF Q4_0's d, AWQ / GPTQ
checkpoints' scales) can be kept exactly as a pair, s + s_lo with s = bf16(scale) and s_lo = bf16(scale - s):
the record format "awq_f16" (the kernel's -DINT4_SCALE_PARTS=2).

Groups run along K (the reduction dimension), as in AutoAWQ where K is `in_features`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ml_dtypes import bfloat16

from ..errors import ConfigError

QMAX = 15
# The one group-size rule and the dimension check are the kernel's, kept beside the builders
from int4_packed_record import (
    GS_MULTIPLE,
    GS_REASON,
    check_dims,
    check_group_size,
)  # noqa: E402


@dataclass(frozen=True)
class AwqWeights:
    q: np.ndarray  # uint8 [K, N], 0..15
    z: np.ndarray  # uint8 [K // gs, N], 0..15
    s: np.ndarray  # bfloat16 [K // gs, N], finite and > 0
    gs: int
    s_lo: np.ndarray | None = (
        None  # bfloat16 [K // gs, N]: the scale pair's low halves (format awq_f16); None: bf16 scales
    )

    @property
    def format(self) -> str:
        """The kernel record format these weights need (record.FORMATS)."""
        return "awq" if self.s_lo is None else "awq_f16"

    def scales(self) -> np.ndarray:
        """The scales as float64 [K // gs, N]: s, or s + s_lo (exact)."""
        s = self.s.astype(np.float64)
        return s if self.s_lo is None else s + self.s_lo.astype(np.float64)

    @property
    def k(self) -> int:
        return self.q.shape[0]

    @property
    def n(self) -> int:
        return self.q.shape[1]

    @property
    def groups(self) -> int:
        return self.k // self.gs

    def validate(self) -> "AwqWeights":
        """Raise ConfigError naming the first broken rule; return self when all hold."""
        arrays = [
            ("q", self.q, np.uint8),
            ("z", self.z, np.uint8),
            ("s", self.s, bfloat16),
        ]
        if self.s_lo is not None:
            arrays.append(("s_lo", self.s_lo, bfloat16))
        for name, arr, dtype in arrays:
            if not isinstance(arr, np.ndarray) or arr.dtype != dtype:
                got = getattr(arr, "dtype", type(arr).__name__)
                raise ConfigError(
                    f"{name}: dtype {got}, expected {np.dtype(dtype).name}"
                )
            if arr.ndim != 2:
                raise ConfigError(f"{name}: shape {arr.shape}, expected 2 dimensions")
        check_dims(K=self.q.shape[0], N=self.q.shape[1])
        check_group_size(self.k, self.gs)
        for name, arr, _ in arrays[1:]:
            if arr.shape != (self.groups, self.n):
                raise ConfigError(
                    f"{name}: shape {arr.shape}, expected (K/GS, N) = ({self.groups}, {self.n}) for K={self.k} GS={self.gs}"
                )
        for name, arr in (("q", self.q), ("z", self.z)):
            bad = np.flatnonzero(arr > QMAX)
            if bad.size:
                idx = tuple(int(i) for i in np.unravel_index(bad[0], arr.shape))
                raise ConfigError(
                    f"{name}{list(idx)} = {arr[idx]}: 4-bit values must lie in 0..{QMAX}"
                )
        with np.errstate(invalid="ignore", over="ignore"):
            s = self.scales()
        bad = np.flatnonzero(~(np.isfinite(s) & (s > 0)))
        if bad.size:
            idx = tuple(int(i) for i in np.unravel_index(bad[0], s.shape))
            raise ConfigError(f"s{list(idx)} = {s[idx]}: scales must be finite and > 0")
        # a pair is (bf16(scale), the rest): s must be s + s_lo rounded to bf16
        if self.s_lo is not None:
            bad = np.flatnonzero(bf16_rne(s) != self.s.astype(np.float32))
            if bad.size:
                idx = tuple(int(i) for i in np.unravel_index(bad[0], s.shape))
                raise ConfigError(
                    f"s_lo{list(idx)} = {self.s_lo[idx]}: a scale pair is (bf16(scale), the rest), and "
                    f"s{list(idx)} = {self.s[idx]} is not bf16(s + s_lo) (see scale_pair_of)"
                )
        return frozen(self, self.q, self.z, self.s, self.s_lo)


def frozen(w, *arrays):
    """w, with its arrays made read-only: a validated weight is an immutable value, which everything
    inward trusts without validating it again (a new weight, padded or packed, is a new value).
    """
    for a in arrays:
        if a is not None:
            a.flags.writeable = False
    return w


def bf16_rne(x: np.ndarray) -> np.ndarray:
    """float -> bf16 (round to nearest even) -> float32."""
    return np.asarray(x, dtype=np.float32).astype(bfloat16).astype(np.float32)


def scale_pair_of(scale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(s, s_lo) bf16 with s + s_lo == scale exactly, for scales of at most 17 significant bits (every fp16
    value; a float32 scale that needs more is refused, naming the first)."""
    hi, lo = bf16_parts(scale, 2)
    return hi, lo


def bf16_parts(x: np.ndarray, parts: int) -> list[np.ndarray]:
    """bf16 parts p_0, p_1, ... of x (float32) with sum(p) == x exactly: p_0 = bf16(x), p_1 = bf16(x - p_0),
    and so on (round to nearest even, as the kernel's folds split). Rounding to nearest leaves a remainder of
    at most half a unit of p_0's last place, so it carries its sign in place of one bit: a pair holds every
    value of up to 17 significant bits, three parts every float32 whose parts stay normal. A value the parts
    cannot hold is refused, naming the first."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    out, rest = [], x
    for _ in range(parts):
        p = rest.astype(bfloat16)
        out.append(p)
        rest = rest - p.astype(np.float32)  # exact: the rounding error of p
    back = sum(p.astype(np.float64) for p in out)
    tiny = float(np.finfo(np.float32).tiny)
    lost = (back != x.astype(np.float64)) | np.any(
        [(p != 0) & (np.abs(p.astype(np.float32)) < tiny) for p in out], axis=0
    )
    bad = np.flatnonzero(lost & np.isfinite(x))
    if bad.size:
        idx = tuple(int(i) for i in np.unravel_index(bad[0], x.shape))
        raise ConfigError(
            f"scale{list(idx)} = {x[idx]!r}: more significant bits than {parts} bf16 parts hold "
            "(a pair holds 17, three parts any float32 whose parts stay normal)"
        )
    return out


def dequantize(w) -> np.ndarray:
    """(q - z) * s as float32 [K, N]; exact, since |q - z| <= 15 needs 4 bits and s has 8 (a pair from
    scale_pair_of at most 16: its product is formed in f64). Other formats' weights
    (int4awq.formats.mxfp4.Mxfp4Weights) dequantise themselves."""
    if not isinstance(w, AwqWeights):
        return w.dequantize()
    dt = np.float32 if w.s_lo is None else np.float64
    q = w.q.reshape(w.groups, w.gs, w.n).astype(dt)
    deq = (q - w.z[:, None, :].astype(dt)) * w.scales().astype(dt)[:, None, :]
    return deq.reshape(w.k, w.n).astype(np.float32)


def quantize_awq(w: np.ndarray, gs: int, scale_pair: bool = False) -> AwqWeights:
    """AutoAWQ's asymmetric int4 quantiser (zero point, no clipping search) on W[K, N], groups along K.

    Per group and column, in W's own float dtype as AutoAWQ computes in the weight's dtype:
    s = max(max - min, 1e-5) / 15, z = clamp(-round(min / s), 0, 15), q = clamp(round(w / s) + z, 0, 15),
    round = half to even (torch.round). z and q come from that s; s is then stored as bf16, the type the
    kernel takes (as a checkpoint's fp16 scales are converted on import), or with scale_pair as the exact
    pair of the scale in W's dtype (fp16 W: AutoAWQ's fp16 scales, format awq_f16).
    """
    w = np.asarray(w)
    if w.ndim != 2 or not np.issubdtype(w.dtype, np.floating):
        raise ConfigError(
            f"W: dtype {w.dtype} shape {w.shape}, expected a 2-D float array [K, N]"
        )
    k, n = w.shape
    check_dims(K=k, N=n)
    check_group_size(k, gs)
    if not np.isfinite(w.astype(np.float64)).all():
        raise ConfigError("W: contains NaN or Inf; cannot quantise")
    dt = w.dtype.type
    g = w.reshape(k // gs, gs, n)
    wmax, wmin = g.max(axis=1), g.min(axis=1)
    s = np.maximum(wmax - wmin, dt(1e-5)) / dt(QMAX)
    z = np.clip(-np.round(wmin / s), 0, QMAX)
    q = np.clip(np.round(g / s[:, None, :]) + z[:, None, :], 0, QMAX)
    q, z = q.reshape(k, n).astype(np.uint8), z.astype(np.uint8)
    if scale_pair:
        hi, lo = scale_pair_of(s)
        return AwqWeights(q, z, hi, gs, lo).validate()
    return AwqWeights(q, z, s.astype(bfloat16), gs).validate()


def random_weights(
    k: int, n: int, gs: int, seed: int, exact: bool = False, scale_pair: bool = False
) -> AwqWeights:
    """Seeded weights. Default: AutoAWQ quantisation of W ~ N(0, 1/K), realistic codes and scales.
    scale_pair (format awq_f16): W in fp16, so its scales are fp16, held as exact bf16 pairs.

    exact=True: q, z uniform in 0..15 (so q - z in -15..15) and scales 2^-3 .. 2^0. With
    random_activations(exact=True) every product a * (q - z) * s is a multiple of 2^-3 below 2^6 and every
    partial sum over K <= 8192 stays below 2^19, so all of them are exact in f32 in any order, and the
    operands are exact in bfp16 blocks (8-bit mantissas): only the final rounding of C to bf16 remains.
    With scale_pair the scales are 2^-e (1 + 2^-8), e in 0..3: the pair (2^-e, 2^-(e + 8)) has a non-zero
    low half, every product is still exact and a partial sum stays exact while below 2^13 in magnitude
    (the sums' standard deviation is about 9 sqrt(K): 2^13 is ten of them at K = 8192); past it f32 adds
    at most 2^-24 relative, far inside exact mode's 2^-8 bound.
    """
    check_dims(K=k, N=n)
    check_group_size(k, gs)
    rng = np.random.default_rng(seed)
    if not exact:
        w = rng.standard_normal((k, n), dtype=np.float32) / np.float32(np.sqrt(k))
        if scale_pair:
            return quantize_awq(w.astype(np.float16), gs, scale_pair=True)
        return quantize_awq(w, gs)
    q = rng.integers(0, QMAX + 1, size=(k, n), dtype=np.uint8)
    z = rng.integers(0, QMAX + 1, size=(k // gs, n), dtype=np.uint8)
    e = rng.integers(0, 4, size=(k // gs, n))
    if scale_pair:
        hi, lo = scale_pair_of(np.exp2(-e) * (1 + 2.0**-8))
        return AwqWeights(q, z, hi, gs, lo).validate()
    return AwqWeights(q, z, np.exp2(-e).astype(bfloat16), gs).validate()


def random_activations(m: int, k: int, seed: int, exact: bool = False) -> np.ndarray:
    """Seeded bf16 A[M, K]: N(0, 1) by default; exact=True gives integers in -4..4 (see random_weights)."""
    check_dims(M=m, K=k)
    rng = np.random.default_rng(seed)
    if exact:
        return rng.integers(-4, 5, size=(m, k)).astype(bfloat16)
    return rng.standard_normal((m, k), dtype=np.float32).astype(bfloat16)
