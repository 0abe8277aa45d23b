# SPDX-License-Identifier: MIT
"""AWQ quantisation, generators, the reference GEMM and the checks."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from ml_dtypes import bfloat16

from int4awq.errors import ConfigError
from int4awq.formats.quant import (
    AwqWeights,
    dequantize,
    quantize_awq,
    random_activations,
    random_weights,
)
from int4awq.run.reference import check, reference_gemm


def naive_awq(w, gs):
    """AutoAWQ's formula written per group with Python loops: an independent spelling to compare with."""
    k, n = w.shape
    q = np.zeros((k, n), np.uint8)
    z = np.zeros((k // gs, n), np.uint8)
    s = np.zeros((k // gs, n), bfloat16)
    for g in range(k // gs):
        for j in range(n):
            col = w[g * gs : (g + 1) * gs, j].astype(np.float32)
            scale = max(col.max() - col.min(), np.float32(1e-5)) / np.float32(
                15
            )  # f32, as torch on f32
            zero = min(
                max(-round(float(col.min() / scale)), 0), 15
            )  # Python round: half to even
            s[g, j], z[g, j] = scale, zero  # the scale is stored as bf16
            for i, v in enumerate(col):
                q[g * gs + i, j] = min(max(round(float(v / scale)) + zero, 0), 15)
    return q, z, s


def test_quantize_matches_the_formula_element_by_element():
    w = np.random.default_rng(0).standard_normal((64, 12), dtype=np.float32)
    w[:32, 3] = 0.25  # a constant group: scale floor 1e-5/15
    got = quantize_awq(w, 32)
    q, z, s = naive_awq(w, 32)
    np.testing.assert_array_equal(got.q, q)
    np.testing.assert_array_equal(got.z, z)
    np.testing.assert_array_equal(got.s.view(np.uint16), s.view(np.uint16))


@settings(max_examples=40, deadline=None)
@given(
    groups=st.integers(1, 4),
    gs=st.sampled_from([16, 32, 128]),
    n=st.integers(1, 9),
    seed=st.integers(0, 2**32 - 1),
    scale=st.floats(1e-3, 1e3),
)
def test_dequantised_values_stay_within_group_bounds(groups, gs, n, seed, scale):
    w = np.random.default_rng(seed).standard_normal((groups * gs, n)).astype(
        np.float32
    ) * np.float32(scale)
    aw = quantize_awq(w, gs).validate()
    deq = dequantize(aw).reshape(groups, gs, n)
    g = w.reshape(groups, gs, n)
    s = aw.s.astype(np.float32)[:, None, :]
    # Codes reach 0 and 15 at most one step beyond the range; rounding moves a value by <= s/2 (+ bf16 slack).
    assert (deq >= g.min(axis=1, keepdims=True) - 1.01 * s).all()
    assert (deq <= g.max(axis=1, keepdims=True) + 1.01 * s).all()
    # Where the group straddles zero the zero point is not clamped, so no code clips: rounding error only.
    # (A group entirely above or below zero clips at 15 or 0, as AutoAWQ's quantiser does too.)
    straddles = (g.min(axis=1, keepdims=True) <= 0) & (
        g.max(axis=1, keepdims=True) >= 0
    )
    assert (np.abs(deq - g) <= 0.51 * s + 0.02 * np.abs(g))[
        np.broadcast_to(straddles, g.shape)
    ].all()


def test_dequantize_is_exact_definition():
    aw = random_weights(64, 16, 32, seed=3)
    q = aw.q.astype(np.float64)
    z = np.repeat(aw.z, 32, axis=0).astype(np.float64)
    s = np.repeat(aw.s.astype(np.float64), 32, axis=0)
    np.testing.assert_array_equal(dequantize(aw), ((q - z) * s).astype(np.float32))


def test_generators_are_seeded():
    a, b = random_weights(64, 8, 32, seed=7), random_weights(64, 8, 32, seed=7)
    np.testing.assert_array_equal(a.q, b.q)
    assert not np.array_equal(
        random_activations(4, 64, 1), random_activations(4, 64, 2)
    )


@settings(max_examples=15, deadline=None)
@given(
    m=st.integers(1, 9),
    groups=st.integers(1, 8),
    gs=st.sampled_from([32, 128]),
    n=st.integers(1, 40),
    seed=st.integers(0, 2**31),
)
def test_exact_mode_is_exact_in_any_order(m, groups, gs, n, seed):
    k = groups * gs
    aw = random_weights(k, n, gs, seed, exact=True)
    a = random_activations(m, k, seed + 1, exact=True).astype(np.float32)
    deq = dequantize(aw)
    products = a[:, :, None] * deq[None, :, :]
    # Sum in f32 forwards, backwards and pairwise: all three equal the f64 sum bit for bit.
    exact = products.astype(np.float64).sum(axis=1)
    fwd = np.zeros((m, n), np.float32)
    for i in range(k):
        fwd += products[:, i]
    bwd = np.zeros((m, n), np.float32)
    for i in reversed(range(k)):
        bwd += products[:, i]
    pairwise = products.sum(axis=1, dtype=np.float32)
    for got in (fwd, bwd, pairwise):
        np.testing.assert_array_equal(got.astype(np.float64), exact)
    c32, c16 = reference_gemm(a.astype(bfloat16), aw)
    np.testing.assert_array_equal(c32, exact.astype(np.float32))
    assert check(c16, c32, exact=True).passed


def test_exact_mode_operands_survive_bfp16_blocks():
    # 8-bit mantissas under the block maximum's exponent (docs/hardware.md#how-conversion-to-bfp16-rounds): small integers stay exact.
    a = random_activations(16, 256, 5, exact=True).astype(np.float32).reshape(-1, 8)
    e = np.floor(np.log2(np.maximum(np.abs(a).max(axis=1, keepdims=True), 2.0**-30)))
    m = np.round(a / np.exp2(e - 6))
    assert (np.abs(m) <= 127).all()
    np.testing.assert_array_equal(m * np.exp2(e - 6), a)


def test_reference_matches_float64_matmul():
    aw = random_weights(256, 48, 64, seed=11)
    a = random_activations(10, 256, 12)
    c32, c16 = reference_gemm(a, aw)
    want = a.astype(np.float64) @ dequantize(aw).astype(np.float64)
    np.testing.assert_allclose(c32, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(c16, c32.astype(bfloat16))


def test_check_passes_bf16_rounding_and_catches_one_corrupted_element():
    aw = random_weights(512, 64, 128, seed=1, exact=True)
    a = random_activations(64, 512, 2, exact=True)
    c32, c16 = reference_gemm(a, aw)
    ok = check(c16, c32, exact=True)
    assert ok.passed and ok.report().endswith("PASS!")
    bad = c16.copy()
    i = np.unravel_index(np.argmax(np.abs(c32)), c32.shape)
    bad[i] = bfloat16(
        float(bad[i]) * 1.02
    )  # 2 %: invisible to correlation, not to the exact bound
    res = check(bad, c32, exact=True)
    assert not res.passed and res.report().endswith("FAIL!")
    assert "exact mode: 1 elements" in res.report()


def test_check_counts_mismatches_and_correlation():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((100, 100)).astype(np.float32)
    noisy = ref + 0.5 * rng.standard_normal(ref.shape).astype(np.float32)
    res = check(noisy, ref)
    assert not res.passed
    assert res.correlation == pytest.approx(
        np.corrcoef(noisy.ravel(), ref.ravel())[0, 1]
    )
    assert res.mismatches == np.count_nonzero(
        ~np.isclose(noisy, ref, rtol=0.05, atol=res.thresholds["atol"])
    )
    assert any("correlation" in f for f in res.failures)
    nan = ref.copy()
    nan[3, 3] = np.nan
    assert "1 non-finite outputs" in check(nan, ref).report()


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: random_weights(100, 8, 32, 0), "K = 100 is not a multiple of GS = 32"),
        (lambda: random_weights(128, 8, 12, 0), "GS = 12: must be a multiple of 16"),
        (
            lambda: random_weights(128, 8, 8, 0),
            r"GS = 8: must be a multiple of 16 \(the kernel's dequantisation",
        ),
        (lambda: random_weights(128, 8, 0, 0), "GS = 0: must be a positive integer"),
        (lambda: random_weights(128, 0, 32, 0), "N = 0: must be a positive integer"),
        (lambda: random_activations(0, 128, 0), "M = 0: must be a positive integer"),
        (
            lambda: quantize_awq(np.ones((64, 4), np.int32), 32),
            "expected a 2-D float array",
        ),
        (lambda: quantize_awq(np.full((64, 4), np.nan, np.float32), 32), "NaN or Inf"),
    ],
)
def test_bad_input_raises_config_error(make, message):
    with pytest.raises(ConfigError, match=message):
        make()


def corrupt(field, value):
    aw = random_weights(64, 4, 32, seed=0)
    arr = getattr(aw, field).copy()
    arr[1, 2] = value
    return AwqWeights(**{**aw.__dict__, field: arr})


@pytest.mark.parametrize(
    "weights, message",
    [
        (lambda: corrupt("q", 16), r"q\[1, 2\] = 16: 4-bit values must lie in 0..15"),
        (lambda: corrupt("z", 200), r"z\[1, 2\] = 200"),
        (lambda: corrupt("s", 0.0), r"s\[1, 2\] = 0.0: scales must be finite and > 0"),
        (lambda: corrupt("s", -1.0), r"s\[1, 2\] = -1.0"),
        (lambda: corrupt("s", np.inf), r"s\[1, 2\] = inf"),
        (
            lambda: AwqWeights(
                np.zeros((64, 4), np.int32),
                np.zeros((2, 4), np.uint8),
                np.ones((2, 4), bfloat16),
                32,
            ),
            "q: dtype int32, expected uint8",
        ),
        (
            lambda: AwqWeights(
                np.zeros((64, 4), np.uint8),
                np.zeros((3, 4), np.uint8),
                np.ones((2, 4), bfloat16),
                32,
            ),
            r"z: shape \(3, 4\), expected \(K/GS, N\) = \(2, 4\)",
        ),
        (
            lambda: AwqWeights(
                np.zeros((64, 4), np.uint8),
                np.zeros((2, 4), np.uint8),
                np.ones((2, 4), np.float16),
                32,
            ),
            "s: dtype float16, expected bfloat16",
        ),
    ],
)
def test_bad_weights_raise_config_error(weights, message):
    with pytest.raises(ConfigError, match=message):
        weights().validate()


@pytest.mark.parametrize(
    "a, message",
    [
        (np.ones((4, 64), np.float32), "expected a 2-D bfloat16 array"),
        (np.ones((4, 32), bfloat16), "K = 32 columns but the weights have K = 64"),
        (np.ones((0, 64), bfloat16), "M = 0 rows"),
    ],
)
def test_reference_rejects_bad_activations(a, message):
    with pytest.raises(ConfigError, match=message):
        reference_gemm(a, random_weights(64, 4, 32, seed=0))
