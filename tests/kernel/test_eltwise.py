# SPDX-License-Identifier: MIT
"""kernels/eltwise_bf16.cc's host build against int4awq.kernel.eltwise_model bit for bit, and the model
against float64 definitions of the residual add, Llama's RMSNorm and SwiGLU within bf16 rounding.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from ml_dtypes import bfloat16

from int4awq.kernel import eltwise_model as model
from int4awq.kernel.kernel_model import aligned_empty, build_eltwise_kernel


@pytest.fixture(scope="module")
def lib():
    lib = ctypes.CDLL(str(build_eltwise_kernel()))
    for name in ("eltwise_add_bf16", "rms_norm_bf16", "silu_mul_bf16"):
        getattr(lib, name).argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int32]
        getattr(lib, name).restype = None
    return lib


def aligned(x) -> np.ndarray:
    b = aligned_empty(np.shape(x), bfloat16)
    b[...] = np.asarray(x).astype(bfloat16)
    return b


def call(fn, x, y) -> np.ndarray:
    x, y = aligned(x), aligned(y)
    out = aligned_empty(x.shape, bfloat16)
    fn(x.ctypes.data, y.ctypes.data, out.ctypes.data, x.size)
    return out


def bits(x):
    return np.asarray(x).view(np.uint16)


def activations(n, seed, scale=1.0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(np.float32) * scale
    x[:4] = [0.0, -0.0, 1e-30, -60.0]  # zero, signed zero, tiny, saturating
    return x.astype(bfloat16)


@pytest.mark.parametrize("n", [16, 2048])
def test_add_matches_model(lib, n):
    a, b = activations(n, 1), activations(n, 2, scale=300.0)
    assert np.array_equal(bits(call(lib.eltwise_add_bf16, a, b)), bits(model.add(a, b)))


@pytest.mark.parametrize(
    "n,scale", [(16, 1.0), (2048, 1.0), (2048, 40.0), (8192, 0.01)]
)
def test_rms_norm_matches_model(lib, n, scale):
    x, w = activations(n, 3, scale), activations(n, 4)
    assert np.array_equal(
        bits(call(lib.rms_norm_bf16, x, w)), bits(model.rms_norm(x, w))
    )


@pytest.mark.parametrize("n", [16, 1024])
def test_silu_mul_matches_model(lib, n):
    g, u = activations(n, 5, scale=4.0), activations(n, 6)
    assert np.array_equal(
        bits(call(lib.silu_mul_bf16, g, u)), bits(model.silu_mul(g, u))
    )


def test_model_against_float_definitions():
    x, w = activations(2048, 7, 3.0), activations(2048, 8)
    xf, wf = x.astype(np.float64), w.astype(np.float64)
    want = xf / np.sqrt(np.mean(xf * xf) + 1e-5) * wf
    got = model.rms_norm(x, w).astype(np.float64)
    # two bf16 roundings (x * r with r held as hi + lo, then * w): each at most 2^-8 relative (bf16 unit
    # roundoff), with room to spare
    assert np.all(np.abs(got - want) <= 4 * 2.0**-8 * np.abs(want) + 1e-30)
    g, u = activations(2048, 9, 4.0), activations(2048, 10)
    gf, uf = g.astype(np.float64), u.astype(np.float64)
    want = gf / (1 + np.exp(-gf)) * uf
    got = model.silu_mul(g, u).astype(np.float64)
    # tanh, 1 + t, g * sigmoid, * up: four roundings; 1 + t loses bits of t where sigmoid is near 0
    # (an absolute 2^-8 of sigmoid); products below bf16's range (1e-30 squared) flush to zero
    err = np.abs(got - want)
    assert np.all(err <= 6 * 2.0**-8 * np.abs(want) + 2.0**-8 * np.abs(gf * uf) + 1e-37)
    a, b = activations(2048, 11), activations(2048, 12, 10.0)
    want = a.astype(np.float64) + b.astype(np.float64)
    assert np.all(
        np.abs(model.add(a, b).astype(np.float64) - want) <= 2.0**-8 * np.abs(want)
    )


def test_rms_norm_of_a_constant_row():
    # x = c everywhere: r = 1 / sqrt(c^2 + eps), so x * r is 1 up to bf16 rounding of r
    x = np.full(64, 3.0, np.float32).astype(bfloat16)
    w = np.full(64, 2.0, np.float32).astype(bfloat16)
    out = model.rms_norm(x, w).astype(np.float32)
    assert np.all(out == out[0]) and abs(out[0] - 2.0) <= 2.0 * 2.0**-7


def test_rms_norm_rounds_x_times_r_once(lib):
    """With w = 1 the output is x * r rounded to bf16 once: within half a bf16 ulp of the exact x * r, plus
    r's hi + lo error (under 2^-16 relative). bf16(r) then x * bf16(r), rounded again (the form before
    round 5, amd/IRON PR #139's drift), breaks that bound; the kernel and the model hold it.
    """
    x = activations(4096, 13, 2.0)
    ones = np.ones(4096, np.float32).astype(bfloat16)
    xf = x.astype(np.float64)
    r = 1.0 / np.sqrt(np.mean(xf * xf) + 1e-5)
    exact = xf * r
    half_ulp = np.ldexp(1.0, np.frexp(exact)[1] - 9)  # bf16: 8 significant bits
    bound = half_ulp + 2.0**-15 * np.abs(exact) + 1e-37
    got = call(lib.rms_norm_bf16, x, ones)
    assert np.array_equal(bits(got), bits(model.rms_norm(x, ones)))
    assert np.all(np.abs(got.astype(np.float64) - exact) <= bound)
    twice = (
        (x.astype(np.float32) * np.float32(bfloat16(np.float32(r))))
        .astype(bfloat16)
        .astype(np.float64)
    )
    assert np.any(np.abs(twice - exact) > bound)


def rope_table(position: int, d: int, theta: float = 500000.0) -> np.ndarray:
    """[cos | sin] of one position for heads of d (plain RoPE frequencies), bf16."""
    angles = position * theta ** (-np.arange(0, d, 2) / d)
    return np.concatenate([np.cos(angles), np.sin(angles)]).astype(bfloat16)


@pytest.mark.parametrize("n,d", [(64, 64), (2048, 64), (512, 128)])
def test_rope_matches_model(lib, n, d):
    lib.rope_bf16.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int32] * 2
    lib.rope_bf16.restype = None
    x, table = aligned(activations(n, 5, scale=3.0)), aligned(rope_table(37, d))
    out = aligned_empty(x.shape, bfloat16)
    lib.rope_bf16(x.ctypes.data, table.ctypes.data, out.ctypes.data, n, d)
    assert np.array_equal(bits(out), bits(model.rope(x, table, d)))


def test_rope_is_hugging_faces_rotation_rounded_once():
    """Against Llama's rotate_half form in float64 (q * cos + rotate_half(q) * sin, rotate_half(q) =
    [-q2, q1]): each output within half a bf16 unit of the exact value of the bf16 operands; position 0
    (cos 1, sin 0) is the identity (up to the sign of a zero: -0 - (-0) * 0 is +0)."""
    d, x = 64, activations(2048, 6, scale=3.0)
    table = rope_table(1234, d)
    cos = np.tile(table[: d // 2].astype(np.float64), 2)
    sin = np.tile(table[d // 2 :].astype(np.float64), 2)
    q = x.astype(np.float64).reshape(-1, d)
    rotated = np.concatenate([-q[:, d // 2 :], q[:, : d // 2]], axis=1)
    exact = (q * cos + rotated * sin).reshape(-1)
    got = model.rope(x, table, d).astype(np.float64)
    ulp = np.spacing(np.abs(exact).astype(bfloat16).astype(np.float32)).astype(
        np.float64
    )
    half_ulp_bf16 = ulp * 2.0**16 / 2  # bf16 has 16 fewer significand bits than f32
    assert (np.abs(got - exact) <= half_ulp_bf16 + 1e-38).all()
    assert np.array_equal(
        model.rope(x, rope_table(0, d), d).astype(np.float32), x.astype(np.float32)
    )


def attention_by_entries(lib, q, k, v, n, t):
    """The entries called as the attention launch calls them: attn_init_bf16, then attn_step_bf16 over the
    c / t chunks of one stream (each chunk's t key rows, then its t value rows), then attn_out_bf16; the q
    buffer holding q, the token's own key and value (k[n], v[n]) and ctx = n. The stream carries the
    cache's rows as they stand: row n onward NaN (not appended yet).
    """
    g, d = q.shape
    c = k.shape[0]
    i32, ptr = ctypes.c_int32, ctypes.c_void_p
    lib.attn_init_bf16.argtypes = [ptr] * 4 + [i32] * 3
    lib.attn_step_bf16.argtypes = [ptr] * 5 + [i32] * 5
    lib.attn_out_bf16.argtypes = [ptr] * 2 + [i32] * 2
    qctx = aligned_empty((g * d + 2 * d + 32,), bfloat16)
    qctx[: g * d] = q.reshape(-1)
    qctx[g * d : g * d + d], qctx[g * d + d : g * d + 2 * d] = k[n], v[n]
    qctx[g * d + 2 * d :].view(np.int32)[:] = n
    scores = aligned_empty((g * t,), np.float32)
    probs = aligned_empty((g * t,), bfloat16)
    o = aligned_empty((g * d + g + g * 16,), np.float32)
    out = aligned_empty((g * d,), bfloat16)
    cached_k, cached_v = k.copy(), v.copy()
    cached_k[n:], cached_v[n:] = np.nan, np.nan
    bufs = (qctx, scores, probs, o)
    lib.attn_init_bf16(*(b.ctypes.data for b in bufs), g, d, c)
    for step in range(c // t):
        rows = slice(step * t, (step + 1) * t)
        chunk = aligned(np.concatenate([cached_k[rows], cached_v[rows]]).reshape(-1))
        lib.attn_step_bf16(
            qctx.ctypes.data,
            chunk.ctypes.data,
            scores.ctypes.data,
            probs.ctypes.data,
            o.ctypes.data,
            step,
            g,
            d,
            t,
            c,
        )
    lib.attn_out_bf16(o.ctypes.data, out.ctypes.data, g, d)
    return out.reshape(g, d)


@pytest.mark.parametrize("n", [0, 1, 17, 31, 32, 95, 127])
def test_attention_entries_match_the_model(lib, n):
    """n cache rows and the token's own key and value (position n, from the q buffer): the model's
    attention over the n + 1 positions; cache rows from n on are NaN, so neither read nor used. Scores
    that rise along the positions make later chunks raise the running maximum (the rescale).
    """
    rng = np.random.default_rng(n)
    g, d, c, t = 4, 64, 128, 32
    q = (rng.standard_normal((g, d)) * 0.5).astype(bfloat16)
    k = (
        rng.standard_normal((c, d))
        + np.linspace(0, 2, c)[:, None] * q[0].astype(np.float32)
    ).astype(bfloat16)
    v = rng.standard_normal((c, d)).astype(bfloat16)
    got = attention_by_entries(lib, q, k, v, n, t)
    # the model takes the token's own position as the last row
    own_last = [np.concatenate([a[:n], a[n : n + 1]]) for a in (k, v)]
    want = model.attention(q, *own_last, n + 1)
    assert np.array_equal(bits(got), bits(want))
    assert np.isfinite(got.astype(np.float32)).all()


@pytest.mark.parametrize("rising", [False, True])
def test_the_attention_model_is_softmax_attention_within_bf16(rising):
    """Against float64 scaled dot-product attention with a stable softmax: within a few bf16 units; with
    scores that grow along the positions too (every chunk raises the maximum, so each rescales the running
    sum and output)."""
    rng = np.random.default_rng(11 if rising else 5)
    n = 300 if rising else 200
    q = rng.standard_normal((4, 64)).astype(bfloat16)
    ramp = np.linspace(0, 6, n)[:, None] * q[0].astype(np.float32) / 8 if rising else 0
    k = (rng.standard_normal((n, 64)) + ramp).astype(bfloat16)
    v = rng.standard_normal((n, 64)).astype(bfloat16)
    s = q.astype(np.float64) @ k.astype(np.float64).T / 8.0
    p = np.exp(s - s.max(axis=1, keepdims=True))
    want = (p / p.sum(axis=1, keepdims=True)) @ v.astype(np.float64)
    got = model.attention(q, k, v, n).astype(np.float64)
    assert np.abs(got - want).max() < 2**-7 * np.abs(want).max()
    assert np.corrcoef(got.ravel(), want.ravel())[0, 1] > 0.9999
