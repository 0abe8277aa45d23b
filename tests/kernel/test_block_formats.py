# SPDX-License-Identifier: MIT
"""The kernel's entries for GGUF's block-integer types (record formats int4_min, int8, int8_min): the host
build of the kernel (kernels/int4_kernel.h) through ctypes, bit for bit against the numpy model (int4awq.kernel.kernel_model),
GEMM and GEMV; exact-mode operands against the f64 reference; the min term and the 8-bit image checked
against numbers computed here by hand; the record layout, the scratch bound and the tile rules.
"""

from __future__ import annotations

import numpy as np
import pytest
from ml_dtypes import bfloat16

from int4awq.errors import ConfigError
from int4awq.formats.gguf_quants import TYPES, BlockIntWeights, random_block_weights
from int4awq.kernel.kernel_model import (
    GemvHostKernel,
    HostKernel,
    aligned_empty,
    kernel_gemm_model,
)
from int4awq.formats.quant import bf16_parts, random_activations, scale_pair_of
from int4awq.kernel.record import (
    block_int_parts,
    check_kernel_tiles,
    check_record_tile,
    pack_block_int,
    l1_budget,
    record_layout,
    w_scratch_bytes,
)
from int4awq.run.reference import check, reference_gemm

FORMATS = ("int4_min", "int8", "int8_min")
# (tile_m, tile_n, tile_k, gs): one group per chunk; two groups per chunk (several fold spans, with row sums
# per span); a group over two chunks; 8-bit codes with Q6_K's 16-value groups, four spans per chunk, each
# padded from 288 to 320 bytes.
TILES = [(16, 16, 32, 32), (32, 32, 64, 32), (16, 32, 16, 32)]
GS16 = (16, 32, 64, 16)


def u16(x):
    return np.asarray(x).view(np.uint16)


def weights(fmt, k, n, seed, exact=False, gs=None):
    return random_block_weights(fmt, k, n, seed, exact=exact, gs=gs)


@pytest.fixture(scope="module")
def kernels():
    cache = {}

    def get(fmt, cfg):
        if (fmt, cfg) not in cache:
            cache[fmt, cfg] = HostKernel(*cfg, format=fmt)
        return cache[fmt, cfg]

    return get


# Every format at the first two tilings, the min term also at the third, and int8_triple at Q6_K's groups.
CASES = [(f, c) for f in FORMATS for c in TILES[:2]] + [
    ("int4_min", TILES[2]),
    ("int8_triple", GS16),
]


@pytest.mark.parametrize("fmt, cfg", CASES)
def test_kernel_matches_model_bit_for_bit(kernels, fmt, cfg):
    """Random weights: scales that take every bf16 part the format holds (two, or three for int8_triple)."""
    tm, tn, tk, gs = cfg
    k = 4 * max(tk, gs)
    w = weights(fmt, k, 2 * tn, 30, gs=gs)
    assert all(p.any() for p in block_int_parts(w)[0])  # no vacuous part
    a = random_activations(2 * tm, k, 31)
    np.testing.assert_array_equal(
        u16(kernels(fmt, cfg).gemm(a, w)), u16(kernel_gemm_model(a, w, tk))
    )


@pytest.mark.parametrize("fmt, cfg", CASES)
def test_gemv_matches_model_bit_for_bit(fmt, cfg):
    _, tn, tk, gs = cfg
    k = 4 * max(tk, gs)
    w = weights(fmt, k, 2 * tn, 32, gs=gs)
    a = random_activations(11, k, 33)
    gemv = GemvHostKernel(tn, tk, gs, format=fmt)
    for m in (1, 9):
        np.testing.assert_array_equal(
            u16(gemv.gemv(a[:m], w)), u16(kernel_gemm_model(a[:m], w, tk))
        )


@pytest.mark.parametrize("fmt", FORMATS)
def test_exact_mode_leaves_only_the_rounding_of_c(kernels, fmt):
    cfg = (32, 32, 64, 32)
    w = weights(fmt, 512, 64, 34, exact=True)
    a = random_activations(64, 512, 35, exact=True)
    c = kernels(fmt, cfg).gemm(a, w)
    ref32, ref16 = reference_gemm(a, w)
    assert check(c, ref32, exact=True).passed
    np.testing.assert_array_equal(u16(c), u16(ref16))


@pytest.mark.parametrize("fmt", ["int4_min", "int8_min"])
def test_the_min_term_adds_row_sums_times_m(kernels, fmt):
    """v = 0 and m = 1 + 2^-9 (two bf16 parts): C[r, n] is the sum of A's row r times m, which numpy gives
    exactly here (integer A, at most 128 * 4 in magnitude)."""
    cfg = (16, 16, 32, 32)
    k, n = 128, 32
    m = np.float32(1 + 2.0**-9)
    assert all(p.any() for p in bf16_parts(np.array([m]), 2))
    base = weights(fmt, k, n, 36)
    w = BlockIntWeights(
        np.zeros((k, n), np.int16),
        32,
        base.s,
        np.full((k // 32, n), m, np.float32),
        base.type_name,
    )
    a = random_activations(32, k, 37, exact=True)
    rows = a.astype(np.float64).sum(axis=1)
    want = (rows[:, None] * np.float64(m) * np.ones(n)).astype(np.float32)
    np.testing.assert_array_equal(
        u16(kernels(fmt, cfg).gemm(a, w)), u16(want.astype(bfloat16))
    )


def test_eight_bit_codes_reach_the_mmul_whole(kernels):
    """Codes -128 and 127 side by side in one 8-value block (a bfp16 conversion would round 127 to 128 in a
    block holding -128: they are stored, not converted): with s = 1, A = e_j picks row j of W exactly.
    """
    cfg = (16, 16, 32, 32)
    k, n = 32, 16
    v = np.zeros((k, n), np.int16)
    v[0:8, 3] = [-128, 127, 1, -1, 64, -65, 0, 5]
    w = BlockIntWeights(v, 32, np.ones((1, n), np.float32), None, "Q8_0").validate()
    a = np.eye(16, k, dtype=np.float32).astype(bfloat16)
    c = kernels("int8", cfg).gemm(a, w)
    np.testing.assert_array_equal(c.astype(np.float32)[:8, 3], v[0:8, 3])


@pytest.mark.parametrize("fmt, cfg", CASES)
def test_kernel_stays_inside_its_scratch(kernels, fmt, cfg):
    hk = kernels(fmt, cfg)
    _, tn, tk, gs = cfg
    n = hk.scratch.size
    assert n == w_scratch_bytes(tn, tk, gs, fmt)
    big = aligned_empty((n + 512,), np.uint8)
    big[...] = 0xA5
    saved, hk.scratch = hk.scratch, big[:n]
    try:
        w = weights(fmt, max(tk, gs), tn, 38, gs=gs)
        a = random_activations(cfg[0], max(tk, gs), 39)
        hk.gemm(a, w)
    finally:
        hk.scratch = saved
    assert (big[n:] == 0xA5).all()
    assert hk.misaligned() == 0


def test_record_layouts_by_hand():
    """tile_n 32, tile_k 64. int4_min, gs 32: Q 2 pairs x 1152 nibbles = 1152 bytes; S 2 groups x 32 columns x
    2 parts x 2 bytes = 256 at 1152; M the same at 1408; Z 64 bytes (2 x 32, padded) at 1664; 1728 in all.
    int8, gs 16: 4 spans of 2 x 2 x 72 = 288 bytes, each in 320, so a pair line of 1280 and Q 2560 bytes;
    S 4 x 32 x 3 parts x 2 = 768; no M, no Z: 3328."""
    a = record_layout(32, 64, 32, "int4_min")
    assert (a.q_bytes, a.s_offset, a.s_bytes, a.m_offset, a.m_bytes) == (
        1152,
        1152,
        256,
        1408,
        256,
    )
    assert (a.z_offset, a.z_bytes, a.total) == (1664, 64, 1728)
    b = record_layout(32, 64, 16, "int8_triple")
    assert (b.q_bytes, b.s_offset, b.s_bytes, b.m_bytes, b.z_bytes, b.total) == (
        2560,
        2560,
        768,
        0,
        0,
        3328,
    )
    # scratch: int4_min 3 lines of 1152 + 576 staging + 2 spans x 2 row blocks x 256; int8 the A line,
    # each span's 4 block vectors pushed as 8 (whole 512-bit words): 4 spans x 576 where the W line
    # takes 4 x 320; int8 at tile_n 128, tile_k 16: the 576-byte A line, whatever tile_n (the drain stages
    # nothing)
    assert w_scratch_bytes(32, 64, 32, "int4_min") == 3 * 1152 + 576 + 1024
    assert w_scratch_bytes(32, 64, 16, "int8") == 4 * 576
    assert w_scratch_bytes(128, 16, 32, "int8") == 576


def test_eight_bit_image_in_the_record():
    """One code at (k, n) = (21, 19) of a 32 x 64 chunk, gs 16 (Q6_K): pair 1, span 1, K block 0 of the span
    and column block 0 of the pair: byte 1280 + 320 + (2 * 0 + 0) * 72 + 3 * 9 + 1 + 5 = 1633; every block's
    exponent byte is 133 and the padding between spans is 0."""
    k, n = 64, 32
    v = np.zeros((k, n), np.int16)
    v[21, 19] = -7
    w = BlockIntWeights(v, 16, np.ones((4, n), np.float32), None, "Q6_K")
    rec = pack_block_int(w, 32, 64)[0, 0]
    q = rec[:2560]
    assert q[1633] == np.uint8(-7 & 0xFF)
    exps = np.zeros(2560, bool)
    for pair in range(2):
        for span in range(4):
            at = pair * 1280 + span * 320
            exps[at : at + 288 : 9] = True
            assert not q[at + 288 : at + 320].any()
    assert (q[exps] == 133).all()
    rest = ~exps
    rest[1633] = False
    assert not q[rest].any()


def test_tile_rules_per_code_width():
    """4-bit codes: several groups per chunk need gs % 32 == 0 (the zero-point pattern's period); 8-bit codes
    pad each span instead, so gs 16 passes at the same tile."""
    with pytest.raises(ConfigError, match="multiple of 32"):
        check_kernel_tiles(16, 32, 64, 16, fmt="int4_min")
    check_kernel_tiles(16, 32, 64, 16, fmt="int8")
    with pytest.raises(ConfigError, match="bytes of L1"):
        check_kernel_tiles(32, 32, 256, 16, fmt="int8")
    assert l1_budget(16, 32, 256, 16, fmt="int8")["total"] <= 65536


def test_bf16_parts_pairs_hold_17_bits_and_triples_every_f32():
    """Round to nearest leaves a signed remainder of at most half an ulp: a pair holds 17 significant bits (a
    K-quant's d * sc_j, fp16 2047/1024 times 63: 128961 / 1024), not always 18 (Q6_K's fp16 times an int8:
    2045 * 127 = 259715, / 1024); three parts hold any float32."""
    rng = np.random.default_rng(40)
    x = (rng.standard_normal(1000) * 2.0 ** rng.integers(-30, 30, 1000)).astype(
        np.float32
    )
    assert np.array_equal(sum(p.astype(np.float64) for p in bf16_parts(x, 3)), x)
    k_quant = np.array([2047 * 63 / 1024], np.float32)
    hi, lo = scale_pair_of(k_quant)
    assert hi.astype(np.float64) + lo.astype(np.float64) == k_quant[0] and lo != 0
    q6_k = np.array([2045 * 127 / 1024], np.float32)
    with pytest.raises(ConfigError, match="more significant bits than 2 bf16 parts"):
        bf16_parts(q6_k, 2)
    assert sum(p.astype(np.float64) for p in bf16_parts(q6_k, 3)) == q6_k[0]


def test_every_scale_of_the_pair_types_fits_a_pair():
    """The types int8 takes hold their scales exactly in two bf16 parts, checked on every value their
    fields can give: every finite fp16 d (Q5_0, Q8_0, IQ4_NL) and every d * (ls - 32) of IQ4_XS (ls 6 bits:
    11 + 5 significant bits); Q6_K's d * sc with an int8 sc is the one that needs three.
    """
    assert {
        t: TYPES[t].format for t in ("Q5_0", "Q8_0", "IQ4_NL", "IQ4_XS")
    } == dict.fromkeys(("Q5_0", "Q8_0", "IQ4_NL", "IQ4_XS"), "int8")
    assert TYPES["Q6_K"].format == "int8_triple"
    d = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    d = d[np.isfinite(d)].astype(np.float32)
    bf16_parts(d, 2)  # refuses the first value two parts cannot hold
    ls = np.arange(64, dtype=np.float32) - 32
    bf16_parts((d[:, None] * ls[None, :]).astype(np.float32), 2)


def test_seeded_weights_pick_a_type_of_the_group():
    assert weights("int8_triple", 64, 16, 1, gs=16).type_name == "Q6_K"
    assert weights("int8", 64, 16, 1).type_name == "Q8_0"
    assert weights("int4_min", 64, 16, 1).type_name == "Q4_1"
    with pytest.raises(ConfigError, match="groups of 32 values along K, not --gs 64"):
        weights("int4_min", 128, 16, 1, gs=64)


def test_the_fast_mode_rounds_each_scale_and_min_to_one_bf16():
    """with_bf16_scales: s and m each to the nearest bf16 (at most 2^-8 of themselves away), the line
    counts what moved, and a type without a min term has no fast mode."""
    w = random_block_weights(
        "int4_min", 256, 64, seed=3
    )  # Q4_1-like, 6-bit sc: most scales move
    fast, line = w.with_bf16_scales()
    assert (fast.format, w.format) == ("int4_min_bf16", "int4_min")
    for exact, rounded in ((w.s, fast.s), (w.m, fast.m)):
        assert np.array_equal(rounded, exact.astype(bfloat16).astype(np.float32))
        assert np.all(np.abs(rounded - exact) <= np.abs(exact) * 2.0**-8)
    moved = np.count_nonzero(fast.s != w.s) + np.count_nonzero(fast.m != w.m)
    assert 0 < moved and line.startswith(
        f"scales and min terms rounded to bf16 (format int4_min_bf16, the fast mode): {moved} of "
        f"{w.s.size + w.m.size} changed"
    )
    assert np.array_equal(fast.v, w.v)
    with pytest.raises(ConfigError, match="Q8_0: its scales have no one-bf16 mode"):
        random_block_weights("int8", 64, 16, seed=1).with_bf16_scales()


@pytest.mark.parametrize("fmt, gs", [("awq", 128), ("int8", 32), ("int4_min_bf16", 32)])
def test_the_zero_point_staging_bounds_tile_n_at_tile_k_16(fmt, gs):
    """At tile_k 16 the A line is pad64(18 * 16) = 320 bytes: 128 columns' zero points as bf16 (256 bytes)
    fit, 144 (pad64 to 192, 384 bytes) do not; the kernel's static_assert binds every object of the
    source, byte codes included; MXFP4 has its own dequantisation and no such bound."""
    check_record_tile(128, 16, gs, fmt)
    with pytest.raises(ConfigError, match="384 bytes\\) in its 320-byte A line"):
        check_record_tile(144, 16, gs, fmt)
    check_record_tile(144, 32, 32, "mxfp4")
