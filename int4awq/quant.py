# SPDX-License-Identifier: MIT
"""AWQ int4 weights: the container, AutoAWQ's quantiser, dequantisation and seeded generators.

Layout used everywhere on the host (logical, before packing into kernel records):

    q[k, n]   uint8 in 0..15   the 4-bit code of W[k, n]
    z[g, n]   uint8 in 0..15   zero point of group g = k // gs, column n
    s[g, n]   bfloat16 > 0     scale of that group and column
    dequant(W)[k, n] = (q[k, n] - z[g, n]) * s[g, n]

Groups run along K (the reduction dimension), as in AutoAWQ where K is `in_features`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ml_dtypes import bfloat16

from .errors import ConfigError

QMAX = 15
# The one group-size rule (the kernel's, and so the host's, the checkpoint importer's and the design's):
# its dequantisation converts two 8-deep K blocks per step, so a group holds whole 16-row steps.
GS_MULTIPLE = 16
GS_REASON = "the kernel's dequantisation converts two 8-deep K blocks per step"


def check_dims(**dims: int) -> None:
    """Every named dimension must be a positive int (no empty GEMMs)."""
    for name, value in dims.items():
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, np.integer))
            or value <= 0
        ):
            raise ConfigError(f"{name} = {value!r}: must be a positive integer")


def check_group_size(k: int, gs: int) -> None:
    check_dims(K=k, GS=gs)
    if gs % GS_MULTIPLE:
        raise ConfigError(
            f"GS = {gs}: must be a multiple of {GS_MULTIPLE} ({GS_REASON})"
        )
    if k % gs:
        raise ConfigError(
            f"K = {k} is not a multiple of GS = {gs}: groups must tile K exactly"
        )


@dataclass(frozen=True)
class AwqWeights:
    q: np.ndarray  # uint8 [K, N], 0..15
    z: np.ndarray  # uint8 [K // gs, N], 0..15
    s: np.ndarray  # bfloat16 [K // gs, N], finite and > 0
    gs: int

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
        for name, arr, dtype in (
            ("q", self.q, np.uint8),
            ("z", self.z, np.uint8),
            ("s", self.s, bfloat16),
        ):
            if not isinstance(arr, np.ndarray) or arr.dtype != dtype:
                got = getattr(arr, "dtype", type(arr).__name__)
                raise ConfigError(
                    f"{name}: dtype {got}, expected {np.dtype(dtype).name}"
                )
            if arr.ndim != 2:
                raise ConfigError(f"{name}: shape {arr.shape}, expected 2 dimensions")
        check_dims(K=self.q.shape[0], N=self.q.shape[1])
        check_group_size(self.k, self.gs)
        for name, arr in (("z", self.z), ("s", self.s)):
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
        s = self.s.astype(np.float32)
        bad = np.flatnonzero(~(np.isfinite(s) & (s > 0)))
        if bad.size:
            idx = tuple(int(i) for i in np.unravel_index(bad[0], s.shape))
            raise ConfigError(f"s{list(idx)} = {s[idx]}: scales must be finite and > 0")
        return self


def dequantize(w) -> np.ndarray:
    """(q - z) * s as float32 [K, N]; exact, since |q - z| <= 15 needs 4 bits and s has 8. Other formats'
    weights (int4awq.mxfp4.Mxfp4Weights) dequantise themselves."""
    if not isinstance(w, AwqWeights):
        return w.dequantize()
    q = w.q.reshape(w.groups, w.gs, w.n).astype(np.float32)
    deq = (q - w.z[:, None, :].astype(np.float32)) * w.s[:, None, :].astype(np.float32)
    return deq.reshape(w.k, w.n)


def quantize_awq(w: np.ndarray, gs: int) -> AwqWeights:
    """AutoAWQ's asymmetric int4 quantiser (zero point, no clipping search) on W[K, N], groups along K.

    Per group and column, in W's own float dtype as AutoAWQ computes in the weight's dtype:
    s = max(max - min, 1e-5) / 15, z = clamp(-round(min / s), 0, 15), q = clamp(round(w / s) + z, 0, 15),
    round = half to even (torch.round). z and q come from that s; s is then stored as bf16, the type the
    kernel takes (as a checkpoint's fp16 scales are converted on import).
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
    return AwqWeights(
        q.reshape(k, n).astype(np.uint8), z.astype(np.uint8), s.astype(bfloat16), gs
    )


def random_weights(
    k: int, n: int, gs: int, seed: int, exact: bool = False
) -> AwqWeights:
    """Seeded weights. Default: AutoAWQ quantisation of W ~ N(0, 1/K), realistic codes and scales.

    exact=True: q, z uniform in 0..15 (so q - z in -15..15) and scales 2^-3 .. 2^0. With
    random_activations(exact=True) every product a * (q - z) * s is a multiple of 2^-3 below 2^6 and every
    partial sum over K <= 8192 stays below 2^19, so all of them are exact in f32 in any order, and the
    operands are exact in bfp16 blocks (8-bit mantissas): only the final rounding of C to bf16 remains.
    """
    check_dims(K=k, N=n)
    check_group_size(k, gs)
    rng = np.random.default_rng(seed)
    if not exact:
        w = rng.standard_normal((k, n), dtype=np.float32) / np.float32(np.sqrt(k))
        return quantize_awq(w, gs)
    q = rng.integers(0, QMAX + 1, size=(k, n), dtype=np.uint8)
    z = rng.integers(0, QMAX + 1, size=(k // gs, n), dtype=np.uint8)
    s = np.exp2(-rng.integers(0, 4, size=(k // gs, n))).astype(bfloat16)
    return AwqWeights(q, z, s, gs)


def random_activations(m: int, k: int, seed: int, exact: bool = False) -> np.ndarray:
    """Seeded bf16 A[M, K]: N(0, 1) by default; exact=True gives integers in -4..4 (see random_weights)."""
    check_dims(M=m, K=k)
    rng = np.random.default_rng(seed)
    if exact:
        return rng.integers(-4, 5, size=(m, k)).astype(bfloat16)
    return rng.standard_normal((m, k), dtype=np.float32).astype(bfloat16)
