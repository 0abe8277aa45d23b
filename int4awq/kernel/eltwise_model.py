# SPDX-License-Identifier: MIT
"""The element-wise entries of kernels/eltwise_bf16.cc in numpy, step for step (each rounding where the
kernel rounds): what the emulator's host build must reproduce bit for bit, and what the decoder-layer
module's checks model. tanh and 1/sqrt are computed in float64 and rounded to float32, as the host
aie_api models the core's (unpublished) approximations."""

from __future__ import annotations

import numpy as np
from ml_dtypes import bfloat16

from int4_packed_record import ATTN_CHUNK

LANES = 16  # bf16 lanes per vector in the kernel
RMS_EPSILON = np.float32(1e-5)


def _bf16(x) -> np.ndarray:
    return np.asarray(x, np.float32).astype(bfloat16)


def _f32(x) -> np.ndarray:
    return np.asarray(x).astype(np.float32)


def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return _bf16(_f32(a) + _f32(b))


def rms_norm(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """One row: sums of squares per lane in order, the lanes summed by halving, r = 1 / sqrt(mean + eps)
    held as bf16 hi = bf16(r) and lo = bf16(r - hi), then x * r = x * hi + x * lo in f32 (exact products,
    one f32 addition) to bf16 (one rounding of x * r to bf16), and times w to bf16."""
    xf = _f32(x).reshape(-1, LANES)
    lanes = np.zeros(LANES, np.float32)
    for row in xf:
        lanes = (lanes + row * row).astype(np.float32)  # bf16 x bf16 is exact in f32
    n = LANES
    while n > 1:
        lanes[: n // 2] = lanes[: n // 2] + lanes[n // 2 : n]
        n //= 2
    mean = np.float32(lanes[0] / np.float32(xf.size))
    r = np.float32(1.0 / np.sqrt(np.float64(np.float32(mean + RMS_EPSILON))))
    r_hi = _f32(_bf16(r))
    r_lo = _f32(_bf16(r - r_hi))  # r - r_hi is exact in f32
    xf = _f32(x)
    normed = _bf16(xf * r_hi + xf * r_lo)  # f32 products (exact), one f32 addition
    return _bf16(_f32(normed) * _f32(w))


def silu_mul(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    g = _f32(gate)
    t = _f32(
        _bf16(np.tanh((g * np.float32(0.5)).astype(np.float64)).astype(np.float32))
    )
    sigmoid = _bf16(_f32(_bf16(np.float32(1.0) + t)) * np.float32(0.5))
    silu = _bf16(g * _f32(sigmoid))
    return _bf16(_f32(silu) * _f32(up))


def rope(x: np.ndarray, table: np.ndarray, d: int) -> np.ndarray:
    """Half-split rotary embedding of x's heads of d (bf16), table = [cos | sin] of one position (bf16,
    d values): out[i] = x[i] c[i] - x[i + h] s[i], out[i + h] = x[i] s[i] + x[i + h] c[i], h = d / 2, each
    the f32 sum of two exact products rounded once to bf16."""
    h = d // 2
    xf = _f32(x).reshape(-1, d)
    c, s = _f32(table)[:h], _f32(table)[h:]
    x1, x2 = xf[:, :h], xf[:, h:]
    out = np.concatenate(
        [x1 * c - x2 * s, x1 * s + x2 * c], axis=1
    )  # f32: one rounding each
    return _bf16(out).reshape(np.shape(x))


LOG2E = np.float32(1.4426950408889634)


LOWEST = np.float32(
    -3.3895313892515355e38
)  # the lowest finite bf16: a score lane past the valid ones


def _split3(o: np.ndarray) -> list[np.ndarray]:
    """f32 values as three bf16 parts, largest first (each the rounding of what the ones before leave)."""
    parts, rest = [], _f32(o)
    for _ in range(3):
        parts.append(_f32(_bf16(rest)))
        rest = (rest - parts[-1]).astype(np.float32)
    return parts


def _mac_parts(acc: np.ndarray, parts: list[np.ndarray], s) -> np.ndarray:
    """acc + x * s, x's parts each times the bf16 s (exact products), one f32 rounding a step."""
    s = np.asarray(s, np.float32)
    for part in parts:
        acc = (acc + part * s).astype(np.float32)
    return acc


def _times(x: np.ndarray, b) -> np.ndarray:
    """x (f32) times a bf16 b: x's three parts each times b, summed in f32 (no f32 x f32 multiply)."""
    return _mac_parts(np.zeros(np.shape(x), np.float32), _split3(x), b)


def _exp2_scaled(x: np.ndarray, c_hi, c_lo) -> np.ndarray:
    """2^(x c) to bf16 (as f32 values), x f32: x's parts times c's hi, then times its lo."""
    parts = _split3(x)
    y = _mac_parts(
        _mac_parts(np.zeros(np.shape(x), np.float32), parts, c_hi), parts, c_lo
    )
    return _f32(_bf16(np.exp2(y.astype(np.float64)).astype(np.float32)))


def _scores(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Each head of q [g, d] against each row of k [rows, d] ([g, rows]): q . k in 16 lanes, one f32
    rounding a mac, the lanes by halving (unscaled)."""
    d = q.shape[1]
    lanes = np.zeros((q.shape[0], k.shape[0], LANES), np.float32)
    for i in range(0, d, LANES):
        lanes = (lanes + q[:, None, i : i + LANES] * k[None, :, i : i + LANES]).astype(
            np.float32
        )
    return _halving(lanes)


def _halving(lanes: np.ndarray) -> np.ndarray:
    """The last axis's 16 lanes summed by halving in f32 (the host aie_api's reduce_add)."""
    lanes = lanes.astype(np.float32).copy()
    width = LANES
    while width > 1:
        lanes[..., : width // 2] = (
            lanes[..., : width // 2] + lanes[..., width // 2 : width]
        )
        width //= 2
    return lanes[..., 0]


def _running_sum(start: np.ndarray, terms: np.ndarray) -> np.ndarray:
    """start + terms[:, 0] + terms[:, 1] + ... in that order, one f32 rounding an addition (numpy's
    accumulate adds left to right in the array's type), over axis 1 of terms [g, n, ...].
    """
    both = np.concatenate([start[:, None], terms], axis=1).astype(np.float32)
    return np.add.accumulate(both, axis=1, dtype=np.float32)[:, -1]


def attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, n: int, t: int = ATTN_CHUNK
) -> np.ndarray:
    """One key/value head's decode attention as attn_init / attn_step / attn_out compute it: q [g, d]
    bf16, k and v [>= n, d] bf16, n positions, row n - 1 the token's own (taken first, as the launch takes
    it from its q buffer), then rows 0 .. n - 2 in chunks of t: an online softmax, every step on vectors
    (kernels/eltwise_bf16.cc's comment has them); returns out [g, d] bf16. The query heads run side by
    side, each on its own state.
    """
    q, k, v = (_f32(x) for x in (q, k, v))
    g, d = q.shape
    c = np.float32(np.float32(1.0 / np.sqrt(np.float64(d))) * LOG2E)
    c_hi = _f32(_bf16(c))
    c_lo = _f32(_bf16(c - c_hi))
    cached = n - 1
    s = _scores(q, k[cached : cached + 1])[:, 0]
    m = _f32(_bf16(s))
    p = _exp2_scaled((s - m).astype(np.float32), c_hi, c_lo)
    l = np.zeros((g, LANES), np.float32)
    l[:, 0] = p
    o = (p[:, None] * v[cached][None]).astype(np.float32)
    for start in range(0, cached, t):
        valid = min(start + t, cached) - start
        s = np.full((g, t), LOWEST, np.float32)
        s[:, :valid] = _scores(q, k[start : start + valid])
        top = np.maximum(m, _f32(_bf16(s)).max(axis=1))  # bf16 values: exact
        up = top != m
        if up.any():
            a = _exp2_scaled((m - top).astype(np.float32), c_hi, c_lo)[:, None]
            l = np.where(up[:, None], _times(l, a), l)
            o = np.where(up[:, None], _times(o, a), o)
            m = top
        p = _exp2_scaled((s - top[:, None]).astype(np.float32), c_hi, c_lo)
        l = _running_sum(
            l, p.reshape(g, t // LANES, LANES)
        )  # lane by lane, block by block
        o = _running_sum(o, p[:, :valid, None] * v[None, start : start + valid])
    r = (np.float32(1) / _halving(l)).astype(np.float32)
    r_hi = _f32(_bf16(r))[:, None]
    r_lo = _f32(_bf16(r[:, None] - r_hi))
    parts = _split3(o)
    return _bf16(
        _mac_parts(_mac_parts(np.zeros((g, d), np.float32), parts, r_hi), parts, r_lo)
    )
