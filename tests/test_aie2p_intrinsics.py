# SPDX-License-Identifier: MIT
"""The host AIE2P intrinsic layer (emulator/include/aie_api/detail/host_intrinsics.hpp) and the
rounding-mode-following bfp16 conversion, against numpy.

tests/aie_api/intrinsics.cc holds small kernels of our own that call the intrinsics the way AIE2P
kernels do (mac_8x8_8x8T on block vectors streamed from memory, mul_elem_64 with concat of broadcast
ones, to_v64bfp16ebs8, event0/event1, ...); this file builds it with g++ and checks each result against
an independent numpy model: block operand and lane order, f32 rounding once per mac, the _conf flags,
and the bfp16 mantissa rounding under every aie::rounding_mode.
"""

from __future__ import annotations

import ctypes
import math
import subprocess

import numpy as np
import pytest
from ml_dtypes import bfloat16

from int4awq.kernel.kernel_model import aligned_empty
from test_aie_api import (
    INCLUDE,
    OPS_DIR,
    MODES,
    bfp16_decode_ref,
    buf,
    ptr,
    random_blocks,
)

SRC = OPS_DIR / "intrinsics.cc"


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    out = tmp_path_factory.mktemp("aie2p_intrinsics") / "intrinsics.so"
    proc = subprocess.run(
        [
            "g++",
            "-std=c++20",
            "-O2",
            "-fPIC",
            "-shared",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-I",
            str(INCLUDE),
            "-DAIE_API_EMULATE_BFLOAT16_MMUL_WITH_BFP16",
            str(SRC),
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    so = ctypes.CDLL(str(out))
    so.op_events.restype = ctypes.c_int
    so.aie_host_misaligned_accesses.restype = ctypes.c_ulong
    so.op_broadcasts.argtypes = [ctypes.c_float, ctypes.c_void_p]
    return so


def call(fn, *args):
    """fn(*args), numpy arrays passed by address (args keeps them alive for the call)."""
    return fn(*[ptr(a) if isinstance(a, np.ndarray) else a for a in args])


def f32(x) -> np.ndarray:
    return np.asarray(x, np.float32)


# ----------------------------------------------------------------------------------------------- rounding rules
def round_int_ref(q: float, mode: str) -> float:
    """q rounded to an integer by the named aie::rounding_mode, from its two neighbours and a tie rule."""
    lo, hi = math.floor(q), math.ceil(q)
    if lo == hi:
        return q
    rule = {
        "floor": lo,
        "ceil": hi,
        "symmetric_floor": lo if q > 0 else hi,
        "symmetric_ceil": hi if q > 0 else lo,
    }
    if mode in rule:
        return rule[mode]
    if q - lo != 0.5:
        return lo if q - lo < 0.5 else hi
    even = lo if lo % 2 == 0 else hi
    return {
        "positive_inf": hi,
        "negative_inf": lo,
        "symmetric_inf": hi if q > 0 else lo,
        "symmetric_zero": lo if q > 0 else hi,
        "conv_even": even,
        "conv_odd": lo + hi - even,
    }[mode]


def bfp16_encode_mode_ref(x: np.ndarray, mode: str) -> np.ndarray:
    """64 floats -> 72 bytes: E = biased f32 exponent of each block's largest magnitude (0 for a zero block),
    mantissas x * 2^(133 - E) rounded by `mode`, saturated to [-128, 127]."""
    out = np.zeros((8, 9), np.uint8)
    for i, blk in enumerate(np.asarray(x, np.float64).reshape(8, 8)):
        mx = np.max(np.abs(blk))
        if mx < np.finfo(np.float32).tiny:
            continue
        e = math.floor(math.log2(mx)) + 127
        m = [
            min(127, max(-128, round_int_ref(v * 2.0 ** (133 - e), mode))) for v in blk
        ]
        out[i, 0] = e
        out[i, 1:] = np.array(m, np.int64).astype(np.int8).view(np.uint8)
    return out.reshape(-1)


def rounding_probe() -> np.ndarray:
    """8 blocks: block maxima 1.0 (step 1/64) or 1.9921875 (saturates), remainders 0, 1/4, 1/2, 3/4 of a
    step on both signs, even and odd neighbours; one zero block; one block of wide exponent spread.
    """
    s = 1 / 64
    x = np.zeros((8, 8))
    x[0] = [1.0, 2.5 * s, 3.5 * s, -2.5 * s, -3.5 * s, 0.25 * s, -0.75 * s, 10.5 * s]
    x[1] = [-1.0, 0.5 * s, -0.5 * s, 1.5 * s, -1.5 * s, 7.25 * s, -7.75 * s, 0.75 * s]
    x[2] = [1.9921875, -1.9921875, 1.0, 0.5, -0.5 * s, 63.5 * s, -64.5 * s, 127.25 * s]
    x[3] = 0.0
    x[4] = [
        2.0**-20,
        2.0**-30,
        -3 * 2.0**-29,
        2.0**-27 + 2.0**-29,
        0,
        0,
        0,
        -(2.0**-21),
    ]
    x[5] = np.array([100.0, -33.3, 0.7, 1e-3, -1e-3, 55.5, -99.9, 12.25])
    x[6] = [
        -2.0,
        1.0 - 2.0**-8,
        2.0**-8,
        -(2.0**-8),
        3 * 2.0**-7,
        -(3 * 2.0**-7),
        0.75,
        -0.25,
    ]
    x[7] = [1e30, -1e30, 3e29, 0, 0, 0, 0, 1e28]
    return f32(x.reshape(-1))


@pytest.mark.parametrize("mode", MODES)
def test_to_v64bfp16ebs8_rounds_under_the_rounding_mode(lib, mode):
    x = buf(rounding_probe(), np.float32)
    out = buf(np.full(72, 0xAA), np.uint8)
    lib.op_to_v64bfp16ebs8(ptr(x), MODES.index(mode), ptr(out))
    np.testing.assert_array_equal(out, bfp16_encode_mode_ref(x, mode), err_msg=mode)


def test_to_v64bfp16ebs8_floor_and_conv_even_examples(lib):
    """The two modes NPU2 measurements pin down: floor (the reset value) rounds toward -inf, conv_even to
    nearest with ties to even (docs/hardware.md#how-conversion-to-bfp16-rounds; host_mmul.hpp, to_bfp16_block).
    """
    x = buf(rounding_probe(), np.float32)
    got = {}
    for mode in ("floor", "conv_even"):
        out = aligned_empty((72,), np.uint8)
        lib.op_to_v64bfp16ebs8(ptr(x), MODES.index(mode), ptr(out))
        got[mode] = out.reshape(8, 9)[:, 1:].view(np.int8)
    assert got["floor"][0].tolist() == [64, 2, 3, -3, -4, 0, -1, 10]
    assert got["conv_even"][0].tolist() == [64, 2, 4, -2, -4, 0, -1, 10]
    assert got["floor"][2, :2].tolist() == [127, -128] and got["conv_even"][
        2, :2
    ].tolist() == [127, -128]


# ----------------------------------------------------------------------------------------------- block mmul
def block_values(raw: np.ndarray, index: int = 0) -> np.ndarray:
    """Block vector `index` of a buffer as an 8x8 float64 matrix, row r = block r."""
    return bfp16_decode_ref(raw)[index].reshape(8, 8)


BLOCK_OPS = {  # name: (op code, zero_acc, sub_mul, sub_acc1, reference(c0, p))
    "mul": (0, 0, 0, 0, lambda c0, p: p),
    "negmul": (1, 0, 0, 0, lambda c0, p: -p),
    "mac": (2, 0, 0, 0, lambda c0, p: c0 + p),
    "msc": (3, 0, 0, 0, lambda c0, p: c0 - p),
    "mac_conf_zero": (4, 1, 0, 0, lambda c0, p: 0 + p),
    "mac_conf_sub_mul": (4, 0, 1, 0, lambda c0, p: c0 - p),
    "mac_conf_sub_acc": (4, 0, 0, 1, lambda c0, p: -c0 + p),
    "mac_conf_all": (4, 1, 1, 1, lambda c0, p: 0 - p),
    "msc_conf_none": (5, 0, 0, 0, lambda c0, p: c0 - p),
    "msc_conf_sub_mul": (5, 0, 1, 0, lambda c0, p: c0 + p),
    "msc_conf_sub_acc": (5, 0, 0, 1, lambda c0, p: -c0 - p),
}


@pytest.mark.parametrize("name", sorted(BLOCK_OPS))
def test_block_mmul_intrinsics(lib, name):
    """lane 8i + j = acc (or 0, or -acc) +- sum_k A[i][k] * B[k][j]: a's block i is row i of A, b's block j is
    column j of B (B transposed); the exact block product is added to f32 with one rounding.
    """
    op, zero_acc, sub_mul, sub_acc1, ref = BLOCK_OPS[name]
    rng = np.random.default_rng(10 + op)
    a_raw, b_raw = random_blocks(rng, 1), random_blocks(rng, 1)
    p = (
        block_values(a_raw) @ block_values(b_raw).T
    )  # exact in float64 and in f32 (|d| < 2^17, power-of-two scale)
    assert np.array_equal(p.astype(np.float32).astype(np.float64), p)
    c0 = f32(rng.standard_normal((8, 8)) * np.abs(p).max() * 3)
    c = buf(c0, np.float32)
    call(
        lib.op_block_mmul,
        buf(a_raw, np.uint8),
        buf(b_raw, np.uint8),
        c,
        op,
        zero_acc,
        sub_mul,
        sub_acc1,
    )
    np.testing.assert_array_equal(c, f32(ref(c0, p.astype(np.float32))))


def test_mul_by_identity_blocks_gives_the_block_values(lib):
    """aie_api's block -> accfloat conversion multiplies by identity blocks (exponent bytes 127, diagonal
    mantissas 0x40): lane 8i + j is element j of block i."""
    rng = np.random.default_rng(11)
    v_raw = random_blocks(rng, 1)
    eye = np.zeros((8, 9), np.uint8)
    eye[:, 0] = 127
    eye[np.arange(8), 1 + np.arange(8)] = 0x40
    c = buf(np.zeros(64), np.float32)
    call(
        lib.op_block_mmul,
        buf(v_raw, np.uint8),
        buf(eye.reshape(-1), np.uint8),
        c,
        0,
        0,
        0,
        0,
    )
    np.testing.assert_array_equal(c, bfp16_decode_ref(v_raw)[0])


def test_block_gemm_tile_per_step_f32(lib):
    """A 32 x 64 x 32 tile of our own 2x2-blocked kernel: every mac adds one exact 8x8x8 block product."""
    mb, nb, kb = 4, 4, 8
    rng = np.random.default_rng(12)
    a_raw, b_raw = random_blocks(rng, mb * kb), random_blocks(rng, nb * kb)
    av = bfp16_decode_ref(a_raw).reshape(mb, kb, 8, 8)
    bv = bfp16_decode_ref(b_raw).reshape(nb, kb, 8, 8)
    c0 = f32(rng.standard_normal((mb, nb, 8, 8)) * 50)
    expect = c0.copy()
    for k in range(kb):
        expect = (
            expect + np.einsum("mik,njk->mnij", av[:, k], bv[:, k]).astype(np.float32)
        ).astype(np.float32)
    c = buf(c0, np.float32)
    before = lib.aie_host_misaligned_accesses()
    call(lib.op_block_gemm, buf(a_raw, np.uint8), buf(b_raw, np.uint8), c, mb, nb, kb)
    np.testing.assert_array_equal(c, expect)
    assert (
        lib.aie_host_misaligned_accesses() == before
    )  # every stream starts on a 64-byte boundary


def test_intrinsics_equal_aie_mmul_bit_for_bit(lib):
    rng = np.random.default_rng(13)
    steps = 7
    a_raw, b_raw = random_blocks(rng, steps), random_blocks(rng, steps)
    c_intr, c_mmul = aligned_empty((64,), np.float32), aligned_empty((64,), np.float32)
    call(
        lib.op_intrinsic_vs_mmul,
        buf(a_raw, np.uint8),
        buf(b_raw, np.uint8),
        steps,
        c_intr,
        c_mmul,
    )
    np.testing.assert_array_equal(c_intr, c_mmul)
    expect = np.zeros((8, 8), np.float32)
    for s in range(steps):
        expect = (
            expect
            + (block_values(a_raw, s) @ block_values(b_raw, s).T).astype(np.float32)
        ).astype(np.float32)
    np.testing.assert_array_equal(c_intr.reshape(8, 8), expect)


@pytest.mark.parametrize("mode", ["conv_even", "floor"])
def test_bf16_a_through_mul_elem_ones_and_to_v64bfp16ebs8(lib, mode):
    """The bf16 x bfp16ebs8 route: A (bf16) * ones is exact, its blocks are rows of A rounded under the mode;
    the result equals aie::mmul<8, 8, 8, bfloat16, bfp16ebs8> under the same mode."""
    rng = np.random.default_rng(14)
    a = (rng.standard_normal((8, 8)) * 2.0 ** rng.integers(-6, 6, (8, 1))).astype(
        bfloat16
    )
    b_raw = random_blocks(rng, 1)
    a_blocks = bfp16_decode_ref(
        bfp16_encode_mode_ref(a.astype(np.float32).reshape(-1), mode)
    )[0].reshape(8, 8)
    c0 = f32(rng.standard_normal((8, 8)))
    expect = (c0 + (a_blocks @ block_values(b_raw).T).astype(np.float32)).astype(
        np.float32
    )
    a_buf, b_buf = buf(a, bfloat16), buf(b_raw, np.uint8)
    c, c_mmul = buf(c0, np.float32), buf(c0, np.float32)
    lib.op_bf16_block_mac(
        ptr(a_buf), ptr(b_buf), MODES.index(mode), ptr(c), ptr(c_mmul)
    )
    np.testing.assert_array_equal(c, expect)
    np.testing.assert_array_equal(c_mmul, expect)


@pytest.mark.parametrize("mode", ["conv_even", "floor"])
def test_bfp16_emulated_bf16_mmul_rounds_under_the_mode(lib, mode):
    """AIE_API_EMULATE_BFLOAT16_MMUL_WITH_BFP16: both operands go through the same conversion (rows of A,
    columns of B), so under floor the products are biased low, as mlir-air's mm_aie2p.cc notes.
    """
    rng = np.random.default_rng(15)
    a = rng.standard_normal((8, 8)).astype(bfloat16)
    b = rng.standard_normal((8, 8)).astype(bfloat16)
    qa = bfp16_decode_ref(
        bfp16_encode_mode_ref(a.astype(np.float32).reshape(-1), mode)
    )[0].reshape(8, 8)
    qbt = bfp16_decode_ref(
        bfp16_encode_mode_ref(b.astype(np.float32).T.reshape(-1), mode)
    )[0].reshape(8, 8)
    c0 = f32(rng.standard_normal((8, 8)))
    c = buf(c0, np.float32)
    call(
        lib.op_mmul_bf16_mode, buf(a, bfloat16), buf(b, bfloat16), MODES.index(mode), c
    )
    np.testing.assert_array_equal(
        c, (c0 + (qa @ qbt.T).astype(np.float32)).astype(np.float32)
    )


# ----------------------------------------------------------------------------------------------- element-wise
ELEM_OPS = {name: spec for name, spec in BLOCK_OPS.items()}
ELEM_OPS["mul_signed_form"] = (6, 0, 0, 0, lambda c0, p: p)
ELEM_OPS["mac_signed_form"] = (7, 0, 0, 0, lambda c0, p: c0 + p)


@pytest.mark.parametrize(
    "name,n",
    [
        (name, n)
        for name in sorted(ELEM_OPS)
        for n in (32, 64)
        if n == 64 or ELEM_OPS[name][0] < 6
    ],
)  # sign-argument forms: 64 lanes
def test_elem_mul_intrinsics(lib, name, n):
    """Lane-wise: the bf16 x bf16 product is exact in f32; one f32 round-to-nearest-even addition."""
    op, zero_acc, sub_mul, sub_acc1, ref = ELEM_OPS[name]
    rng = np.random.default_rng(16 + op)
    a = rng.standard_normal(n).astype(bfloat16)
    b = (rng.standard_normal(n) * 1e3).astype(bfloat16)
    p = a.astype(np.float32) * b.astype(np.float32)
    assert np.array_equal(
        p.astype(np.float64), a.astype(np.float64) * b.astype(np.float64)
    )
    c0 = f32(rng.standard_normal(n) * 1e5)
    c = buf(c0, np.float32)
    call(
        lib.op_elem,
        buf(a, bfloat16),
        buf(b, bfloat16),
        c,
        n,
        op,
        zero_acc,
        sub_mul,
        sub_acc1,
    )
    np.testing.assert_array_equal(c, f32(ref(c0, p)))


# ----------------------------------------------------------------------------------------------- reshaping, misc
def test_broadcasts(lib):
    out = aligned_empty((96,), bfloat16)
    lib.op_broadcasts(-2.75, ptr(out))
    o = out.astype(np.float32)
    assert (o[:32] == 0).all() and (o[32:64] == 1).all() and (o[64:] == -2.75).all()


def test_concat_puts_the_first_operand_first(lib):
    lo, hi = buf(np.arange(32), bfloat16), buf(np.arange(32) + 100, bfloat16)
    out, out_g = aligned_empty((64,), bfloat16), aligned_empty((64,), bfloat16)
    lib.op_concat(ptr(lo), ptr(hi), ptr(out), ptr(out_g))
    np.testing.assert_array_equal(
        out.astype(np.float32), np.concatenate([np.arange(32), np.arange(32) + 100])
    )
    np.testing.assert_array_equal(out_g.astype(np.float32), out.astype(np.float32))


@pytest.mark.parametrize("idx", [0, 1])
def test_extract_and_set_halves(lib, idx):
    v, acc = buf(np.arange(64), bfloat16), buf(np.arange(64) * 0.5, np.float32)
    half, acc_half = aligned_empty((32,), bfloat16), aligned_empty((32,), np.float32)
    grown, acc_grown = aligned_empty((64,), bfloat16), aligned_empty((64,), np.float32)
    lib.op_extract_set(
        ptr(v), ptr(acc), idx, ptr(half), ptr(acc_half), ptr(grown), ptr(acc_grown)
    )
    sl = slice(32 * idx, 32 * idx + 32)
    np.testing.assert_array_equal(half.astype(np.float32), np.arange(64)[sl])
    np.testing.assert_array_equal(acc_half, (np.arange(64) * 0.5)[sl])
    np.testing.assert_array_equal(grown[sl].astype(np.float32), np.arange(64)[sl])
    np.testing.assert_array_equal(acc_grown[sl], (np.arange(64) * 0.5)[sl])


def test_event_markers_are_no_ops(lib):
    assert lib.op_events(41) == 41


REJECTED = {  # body, what g++ says
    # AIE2P's mul_elem_64 on two v32bfloat16 (a 64-lane result) is not modelled: no host overload.
    "mul_elem_64_on_32_lanes": (
        "auto r = mul_elem_64(v32bfloat16(), v32bfloat16());",
        "no matching function",
    ),
    # block vectors have 64 or 128 elements on AIE2P (and the host has no 128-lane block intrinsics)
    "block_vector_256": (
        "aie::block_vector<bfp16ebs8, 256> a;",
        "64 or 128 elements",
    ),
    # shuffles are not modelled
    "shuffle": ("auto r = shuffle(v64bfloat16(), 0);", "not declared"),
}


@pytest.mark.parametrize("case", sorted(REJECTED))
def test_unmodelled_intrinsics_do_not_compile(tmp_path, case):
    body, message = REJECTED[case]
    src = tmp_path / f"{case}.cc"
    src.write_text(f"#include <aie_api/aie.hpp>\nvoid f() {{ {body} }}\n")
    proc = subprocess.run(
        ["g++", "-std=c++20", "-fsyntax-only", "-I", str(INCLUDE), str(src)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr[-2000:]
