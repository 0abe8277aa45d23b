# SPDX-License-Identifier: MIT
"""The element-wise entries of kernels/eltwise_bf16.cc in numpy, step for step (each rounding where the
kernel rounds): what the emulator's host build must reproduce bit for bit, and what the decoder-layer
module's checks model. tanh and 1/sqrt are computed in float64 and rounded to float32, as the host
aie_api models the core's (unpublished) approximations."""

from __future__ import annotations

import numpy as np
from ml_dtypes import bfloat16

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


def _halving_sum(lanes: np.ndarray) -> np.float32:
    """The 16 lanes summed by halving in f32 (the host aie_api's reduce_add)."""
    x = lanes.astype(np.float32).copy()
    n = x.size
    while n > 1:
        x[: n // 2] = x[: n // 2] + x[n // 2 : n]
        n //= 2
    return np.float32(x[0])


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, n: int) -> np.ndarray:
    """One key/value head's decode attention as attn_scores / attn_softmax / attn_values / attn_out
    compute it: q [g, d] bf16, k and v [>= n, d] bf16 (the cache's rows for this head), n positions;
    returns out [g, d] bf16. Each step rounds where the kernel does (kernels/eltwise_bf16.cc).
    """
    q, k, v = (_f32(x) for x in (q, k, v))
    g, d = q.shape
    scale = np.float32(1.0 / np.sqrt(np.float64(d)))
    s = np.empty((g, n), np.float32)
    for h in range(g):
        for pos in range(n):
            lanes = np.zeros(LANES, np.float32)
            for i in range(0, d, LANES):  # one f32 rounding a mac, exact products
                lanes = (lanes + q[h, i : i + LANES] * k[pos, i : i + LANES]).astype(
                    np.float32
                )
            s[h, pos] = np.float32(_halving_sum(lanes) * scale)
    out = np.empty((g, d), np.float32)
    log2e = np.float32(1.4426950408889634)
    for h in range(g):
        x = ((s[h] - s[h].max()).astype(np.float32) * log2e).astype(np.float32)
        p = _f32(_bf16(np.exp2(x.astype(np.float64)).astype(np.float32)))
        total = np.float32(0)
        for value in p:  # in position order
            total = np.float32(total + value)
        r = np.float32(np.float32(1) / total)
        r_hi = _f32(_bf16(r))
        r_lo = _f32(_bf16(r - r_hi))
        p = _f32(_bf16(p * r_hi + p * r_lo))
        o = np.zeros(d, np.float32)
        for pos in range(n):
            o = (o + p[pos] * v[pos]).astype(np.float32)
        out[h] = o
    return _bf16(out)
