# SPDX-License-Identifier: MIT
"""The host aie_api against numpy models of aie_api's documented AIE2P semantics.

tests/aie_api/ops.cc wraps single operations in extern "C" functions; it is built (via make) with and
without AIE_API_EMULATE_BFLOAT16_MMUL_WITH_BFP16. The references below are written independently of the
header: nibble order, sign handling, rounding modes, reshapes, the bfp16 block rule and mmul operand
orders. A last group checks that what AIE2P lacks does not compile.
"""

from __future__ import annotations

import ctypes
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from ml_dtypes import bfloat16

from int4awq.kernel.kernel_model import aligned_empty

ROOT = Path(__file__).resolve().parent.parent
OPS_DIR = ROOT / "tests" / "aie_api"
BUILD = ROOT / "kernels" / "build" / "aie_api_tests"
INCLUDE = ROOT / "emulator" / "include"


@pytest.fixture(scope="session")
def libs():
    proc = subprocess.run(
        ["make", "-s", "-C", str(OPS_DIR)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = {}
    for name in ("bfp16", "bf16"):
        lib = ctypes.CDLL(str(BUILD / f"ops_{name}.so"))
        lib.op_reduce_add_f32.restype = ctypes.c_float
        lib.op_misaligned_load.restype = ctypes.c_int
        lib.aie_host_misaligned_accesses.restype = ctypes.c_ulong
        lib.aie_host_runtime_extracts.restype = ctypes.c_ulong
        out[name] = lib
    return out


def ptr(a: np.ndarray) -> ctypes.c_void_p:
    return ctypes.c_void_p(a.ctypes.data)


def buf(values, dtype) -> np.ndarray:
    v = np.asarray(values).astype(dtype)
    b = aligned_empty(v.shape, dtype)
    b[...] = v
    return b


def bits(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).view(np.uint16)


# ----------------------------------------------------------------------------------------------- 4-bit
def test_uint4_nibble_order_and_unpack(libs):
    rng = np.random.default_rng(0)
    raw = buf(rng.integers(0, 256, 64), np.uint8)
    out = aligned_empty((128,), np.int8)
    libs["bfp16"].op_unpack_uint4(ptr(raw), ptr(out))
    expect = np.empty(128, np.int16)
    expect[0::2] = raw & 0xF  # element 2i: low nibble of byte i
    expect[1::2] = raw >> 4
    np.testing.assert_array_equal(out, expect)


def test_int4_unpack_sign_extends(libs):
    raw = buf(
        np.arange(64) * 4 + 0x8F, np.uint8
    )  # mixes nibbles >= 8 (negative) and < 8
    out = aligned_empty((128,), np.int8)
    libs["bfp16"].op_unpack_int4(ptr(raw), ptr(out))
    nib = np.empty(128, np.int16)
    nib[0::2], nib[1::2] = raw & 0xF, raw >> 4
    np.testing.assert_array_equal(out, np.where(nib >= 8, nib - 16, nib))


def test_to_float_int8_with_shift(libs):
    v = buf(np.arange(-128, 128, 8), np.int8)
    for shift in (0, 3):
        out = aligned_empty((32,), bfloat16)
        libs["bfp16"].op_to_float_bf16(ptr(v), shift, ptr(out))
        np.testing.assert_array_equal(
            out.astype(np.float32), v.astype(np.float32) * 2.0**-shift
        )


def test_to_float_int4_converts_the_values(libs):
    """aie_api accepts 4-bit sources on AIE2P, so the host does (Peano folds them to zero on hardware, which
    is why the kernel unpacks to int8 instead)."""
    raw = buf(np.arange(32) * 7 + 3, np.uint8)
    out = aligned_empty((64,), np.float32)
    libs["bfp16"].op_to_float_int4(ptr(raw), ptr(out))
    nib = np.empty(64, np.int16)
    nib[0::2], nib[1::2] = raw & 0xF, raw >> 4
    np.testing.assert_array_equal(out, np.where(nib >= 8, nib - 16, nib))


@pytest.mark.parametrize("n", [0, 1, 16, 48, 63, 64])
def test_shuffle_down_fill(libs, n):
    v = buf(np.arange(64), np.uint8)
    fill = buf(np.arange(100, 164), np.uint8)
    out = aligned_empty((64,), np.uint8)
    libs["bf16"].op_shuffle_down_fill(ptr(v), ptr(fill), n, ptr(out))
    np.testing.assert_array_equal(out, np.concatenate([v, fill])[n : n + 64])


# ----------------------------------------------------------------------------------------------- rounding
MODES = [
    "floor",
    "ceil",
    "positive_inf",
    "negative_inf",
    "symmetric_inf",
    "symmetric_zero",
    "conv_even",
    "conv_odd",
    "symmetric_floor",
    "symmetric_ceil",
]


def bf16_round_ref(x: np.float32, mode: str) -> float:
    """Round one float32 to bf16 by the named rule, from first principles (two candidates and a tie rule)."""
    x = float(x)
    if x == 0.0:
        return x
    toward_zero = float(np.array([x], np.float32).view(np.uint32)[0] & 0xFFFF0000)
    tz = float(np.array([int(toward_zero)], np.uint32).view(np.float32)[0])
    if tz == x:
        return x
    _, e = math.frexp(abs(tz) if tz != 0 else abs(x))
    ulp = 2.0 ** (e - 8)
    away = tz + math.copysign(ulp, x)
    down, up = min(tz, away), max(tz, away)
    if mode == "floor":
        return down
    if mode == "ceil":
        return up
    if mode == "symmetric_floor":
        return tz
    if mode == "symmetric_ceil":
        return away
    dd, du = x - down, up - x
    if dd != du:
        return down if dd < du else up
    even = (
        down
        if (int(np.array([down], np.float32).view(np.uint32)[0]) >> 16) % 2 == 0
        else up
    )
    return {
        "positive_inf": up,
        "negative_inf": down,
        "symmetric_inf": away,
        "symmetric_zero": tz,
        "conv_even": even,
        "conv_odd": up if even == down else down,
    }[mode]


def test_to_vector_bf16_rounding_modes(libs):
    base = np.array([1.0, -1.0, 3.0, -3.0, 1.5, -1.5, 1000.0, -0.375], np.float32).view(
        np.uint32
    )
    lows = np.array(
        [0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x4000, 0xC000], np.uint32
    )
    x = (
        (base[:, None] | lows[None, :]).reshape(-1).view(np.float32)
    )  # 64 values: ties, near-ties, exact
    xin = buf(x, np.float32)
    for m, name in enumerate(MODES):
        out = aligned_empty((64,), bfloat16)
        libs["bfp16"].op_to_vector_bf16(ptr(xin), m, ptr(out))
        expect = np.array([bf16_round_ref(v, name) for v in x], np.float32)
        np.testing.assert_array_equal(out.astype(np.float32), expect, err_msg=name)


# ----------------------------------------------------------------------------------------------- reshape
@pytest.mark.parametrize("rows,cols", [(8, 8), (4, 16), (16, 4), (2, 32)])
def test_transpose(libs, rows, cols):
    v = buf(np.arange(64), bfloat16)
    out = aligned_empty((64,), bfloat16)
    libs["bfp16"].op_transpose_bf16(ptr(v), rows, cols, ptr(out))
    np.testing.assert_array_equal(
        out.astype(np.float32), np.arange(64).reshape(rows, cols).T.reshape(-1)
    )


@pytest.mark.parametrize("chunk", [1, 2, 8, 32])
def test_interleave_zip_unzip(libs, chunk):
    v, w = buf(np.arange(64), np.int8), buf(np.arange(64) + 64, np.int8)
    out = aligned_empty((128,), np.int8)
    libs["bfp16"].op_zip_int8(ptr(v), ptr(w), chunk, ptr(out))
    zipped = np.stack([v.reshape(-1, chunk), w.reshape(-1, chunk)], axis=1).reshape(
        -1
    )  # v0 w0 v1 w1 ...
    np.testing.assert_array_equal(out, zipped)
    back = aligned_empty((128,), np.int8)
    lo, hi = buf(out[:64], np.int8), buf(out[64:], np.int8)
    libs["bfp16"].op_unzip_int8(ptr(lo), ptr(hi), chunk, ptr(back))
    np.testing.assert_array_equal(back[:64], v)
    np.testing.assert_array_equal(back[64:], w)


# ----------------------------------------------------------------------------------------------- arithmetic
def test_reduce_add_halving_tree(libs):
    x = np.array([1e8, 1.0, -1e8, 3.0] * 8, np.float32)
    x[5] = 0.5
    t = x.copy()
    n = 32
    while n > 1:
        t[: n // 2] = (t[: n // 2] + t[n // 2 : n]).astype(np.float32)
        n //= 2
    x_buf = buf(x, np.float32)  # keep the buffer alive across the call
    assert libs["bfp16"].op_reduce_add_f32(ptr(x_buf)) == t[0]


def test_mac_bf16_exact_product_one_rounding(libs):
    rng = np.random.default_rng(1)
    a = buf(rng.standard_normal(32), bfloat16)
    b = buf(rng.standard_normal(32), bfloat16)
    c = buf(rng.standard_normal(32) * 1e3, np.float32)
    expect = (c + a.astype(np.float32) * b.astype(np.float32)).astype(np.float32)
    libs["bfp16"].op_mac_bf16(ptr(c), ptr(a), ptr(b))
    np.testing.assert_array_equal(c, expect)


# ----------------------------------------------------------------------------------------------- mmul
SHAPES = [(8, 8, 8), (4, 8, 8), (8, 8, 4), (4, 8, 4)]


def run_mmul(lib, shape, a_steps, b_steps, c0=None):
    m, k, n = shape
    steps = len(a_steps)
    a = buf(np.concatenate([x.reshape(-1) for x in a_steps]), bfloat16)
    b = buf(np.concatenate([x.reshape(-1) for x in b_steps]), bfloat16)
    c = buf(np.zeros(m * n) if c0 is None else c0.reshape(-1), np.float32)
    getattr(lib, f"op_mmul_{m}x{k}x{n}")(ptr(a), ptr(b), ptr(c), steps, int(c0 is None))
    return c.reshape(m, n)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("variant", ["bfp16", "bf16"])
def test_mmul_operand_orders(libs, shape, variant):
    """Small integers are exact on every path: C = A (M x K row-major) @ B (K x N row-major) + C0."""
    m, k, n = shape
    rng = np.random.default_rng(2)
    a = rng.integers(-4, 5, (m, k)).astype(np.float32)
    b = rng.integers(-15, 16, (k, n)).astype(np.float32)
    c0 = rng.integers(-100, 100, (m, n)).astype(np.float32)
    np.testing.assert_array_equal(
        run_mmul(libs[variant], shape, [a], [b], c0), a @ b + c0
    )
    a2 = rng.integers(-4, 5, (m, k)).astype(np.float32)
    b2 = rng.integers(-15, 16, (k, n)).astype(np.float32)
    np.testing.assert_array_equal(
        run_mmul(libs[variant], shape, [a, a2], [b, b2]), a @ b + a2 @ b2
    )


def bfp16_ref(x: np.ndarray) -> np.ndarray:
    """The calibrated bfp16 rule, one block of 8 at a time."""
    out = np.zeros_like(x, dtype=np.float64)
    for i, blk in enumerate(x.reshape(-1, 8).astype(np.float64)):
        mx = np.max(np.abs(blk))
        if mx == 0:
            continue
        e = math.floor(math.log2(mx))
        q = np.clip(np.round(blk / 2.0 ** (e - 6)), -128, 127)  # np.round: half to even
        out.reshape(-1, 8)[i] = q * 2.0 ** (e - 6)
    return out


def test_bfp16_conversion_of_a_through_identity(libs):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((8, 8)).astype(bfloat16).astype(np.float32)
    a[0] = [
        1.9921875,
        0.5,
        2.0**-7,
        3 * 2.0**-7,
        -5 * 2.0**-7,
        0,
        0,
        0,
    ]  # saturation and half-even ties
    a[1] = 0.0  # zero block
    eye = np.eye(8, dtype=np.float32)
    c = run_mmul(libs["bfp16"], (8, 8, 8), [a], [eye])
    np.testing.assert_array_equal(c, bfp16_ref(a))
    assert (
        c[0, 0] == 127 / 64
        and c[0, 2] == 0
        and c[0, 3] == 2 / 64
        and c[0, 4] == -2 / 64
    )
    # B is converted in blocks along K (its columns): transpose roles.
    c = run_mmul(libs["bfp16"], (8, 8, 8), [eye], [a.T.copy()])
    np.testing.assert_array_equal(c, bfp16_ref(a).T)


def test_bfp16_mmul_accumulates_in_f32_per_step(libs):
    rng = np.random.default_rng(4)
    a_steps = [
        rng.standard_normal((8, 8)).astype(bfloat16).astype(np.float32)
        for _ in range(6)
    ]
    b_steps = [
        (rng.standard_normal((8, 8)) * 100).astype(bfloat16).astype(np.float32)
        for _ in range(6)
    ]
    c = np.zeros((8, 8), np.float32)
    for a, b in zip(a_steps, b_steps):
        c = (c + (bfp16_ref(a) @ bfp16_ref(b.T.copy()).T).astype(np.float32)).astype(
            np.float32
        )
    np.testing.assert_array_equal(
        run_mmul(libs["bfp16"], (8, 8, 8), a_steps, b_steps), c
    )


@pytest.mark.parametrize("shape", SHAPES)
def test_bf16_mmul_elementwise_k_order(libs, shape):
    """Without the bfp16 macro: c += a[i, k] * b[k, j] for k = 0..K-1, one f32 rounding per step."""
    m, k, n = shape
    rng = np.random.default_rng(5)
    a = rng.standard_normal((m, k)).astype(bfloat16).astype(np.float32)
    b = (rng.standard_normal((k, n)) * 1e3).astype(bfloat16).astype(np.float32)
    c0 = rng.standard_normal((m, n)).astype(np.float32) * 1e4
    c = c0.copy()
    for kk in range(k):
        c = (c + a[:, kk : kk + 1] * b[kk : kk + 1, :]).astype(np.float32)
    np.testing.assert_array_equal(run_mmul(libs["bf16"], shape, [a], [b], c0), c)


# ----------------------------------------------------------------------------------------------- bfp16ebs8
def bfp16_encode_ref(x: np.ndarray) -> np.ndarray:
    """[n * 64] float32 -> n * 72 bytes: per block of 8, E = biased f32 exponent of the largest magnitude
    (0 for a zero block), then mantissas round_half_even(x * 2^(133 - E)) saturated to int8.
    """
    blocks = x.astype(np.float64).reshape(-1, 8)
    out = np.zeros((blocks.shape[0], 9), np.uint8)
    for i, blk in enumerate(blocks):
        mx = np.max(np.abs(blk))
        if mx < np.finfo(np.float32).tiny:
            continue
        e_byte = math.floor(math.log2(mx)) + 127
        out[i, 0] = e_byte
        out[i, 1:] = (
            np.clip(np.round(blk * 2.0 ** (133 - e_byte)), -128, 127)
            .astype(np.int8)
            .view(np.uint8)
        )
    return out.reshape(-1)


def bfp16_decode_ref(raw: np.ndarray) -> np.ndarray:
    """n * 72 bytes -> [n, 64] float64: m * 2^(E - 133), blocks of 8 in order."""
    r = raw.reshape(-1, 9)
    vals = r[:, 1:].view(np.int8).astype(np.float64) * np.exp2(
        r[:, :1].astype(np.float64) - 133
    )
    return vals.reshape(-1, 64)


def test_bfp16_block_vector_memory_layout_and_conversion(libs):
    rng = np.random.default_rng(6)
    x = (
        rng.standard_normal(3 * 64)
        * np.exp2(rng.integers(-30, 30, 3 * 64 // 8)).repeat(8)
    ).astype(np.float32)
    x[:8] = [
        1.9921875,
        0.5,
        2.0**-7,
        3 * 2.0**-7,
        -5 * 2.0**-7,
        0,
        0,
        0,
    ]  # saturation and half-even ties
    x[8:16] = 0.0  # zero block
    x[16:24] = [1e-40, -1e-40, 0, 0, 0, 0, 0, 0]  # f32 subnormals count as 0
    x[24:32] = [-1.0, 0.25, 0, 0, 0, 0, 0, 0.0078125]
    out = buf(np.full(8 * 72, 0xAA), np.uint8)  # the pushes padded to whole words
    x_buf = buf(x, np.float32)
    libs["bfp16"].op_to_bfp16(ptr(x_buf), 3, ptr(out))
    out = out[: 3 * 72]
    np.testing.assert_array_equal(out, bfp16_encode_ref(x))
    assert out[:9].tolist() == [
        127,
        127,
        32,
        0,
        2,
        254,
        0,
        0,
        0,
    ]  # E byte first, then m0..m7
    assert out[9] == 0 and out[18] == 0
    assert out[27:36].tolist() == [
        127,
        0xC0,
        16,
        0,
        0,
        0,
        0,
        0,
        0,
    ]  # -1.0 = -64 * 2^(127 - 133)
    # the same values through the bf16 mmul's conversion (identity B): one conversion rule everywhere
    np.testing.assert_array_equal(
        bfp16_decode_ref(out).reshape(-1), bfp16_ref(np.where(np.abs(x) < 1e-38, 0, x))
    )


def test_bfp16_128_element_block_vectors(libs):
    """block_vector<bfp16ebs8, 128>: 16 blocks, 144 bytes, the same image per block as the 64-element one."""
    rng = np.random.default_rng(8)
    x = (
        rng.standard_normal(3 * 128) * np.exp2(rng.integers(-9, 9, 48)).repeat(8)
    ).astype(np.float32)
    src = buf(x, np.float32)  # kept alive: ptr() holds only the address
    out = buf(np.full(4 * 144, 0xAA), np.uint8)  # the pushes padded to whole words
    back = aligned_empty((3 * 128,), np.float32)
    libs["bfp16"].op_bfp16_128_round_trip(ptr(src), 3, ptr(out), ptr(back))
    out = out[: 3 * 144]
    np.testing.assert_array_equal(out, bfp16_encode_ref(x))
    np.testing.assert_array_equal(back, bfp16_decode_ref(out).reshape(-1))


def test_bfp16_block_vector_to_accum_and_stream_seek(libs):
    rng = np.random.default_rng(7)
    raw = rng.integers(0, 256, 9 * 72).astype(np.uint8)
    raw.reshape(-1, 9)[:, 0] = rng.integers(100, 160, 9 * 8)
    src = buf(raw, np.uint8)
    out = aligned_empty((64,), np.float32)
    for index in (
        0,
        8,
    ):  # seek by 8 vectors = 576 bytes keeps the stream 64-byte aligned
        for shift in (0, 5, -3):
            libs["bfp16"].op_from_bfp16(ptr(src), index, shift, ptr(out))
            np.testing.assert_array_equal(
                out, bfp16_decode_ref(raw)[index] * 2.0**shift
            )
    copy = buf(np.zeros(8 * 72), np.uint8)
    before = libs["bfp16"].aie_host_misaligned_accesses()
    libs["bfp16"].op_stream_copy(
        ptr(src), 0, 8, ptr(copy)
    )  # contiguous 72-byte vectors, 8 of them: 9 whole words
    np.testing.assert_array_equal(copy, raw[: 8 * 72])
    assert libs["bfp16"].aie_host_misaligned_accesses() == before


def test_bfp16_stream_misaligned_start_reads_the_aligned_word_and_is_counted(libs):
    lib = libs["bfp16"]
    raw = buf(np.arange(16 * 72) % 251, np.uint8)
    copy = buf(
        np.zeros(8 * 72), np.uint8
    )  # 8 vectors: the copy's pushes make whole words
    before = lib.aie_host_misaligned_accesses()
    lib.op_stream_copy(
        ptr(raw), 72, 8, ptr(copy)
    )  # block vector 1 starts at byte 72, not 64-aligned
    np.testing.assert_array_equal(copy, raw[64:640])
    assert lib.aie_host_misaligned_accesses() == before + 1
    lib.op_stream_copy(
        ptr(raw), 576, 8, ptr(copy)
    )  # 8 vectors = 576 bytes = 9 words: aligned
    np.testing.assert_array_equal(copy, raw[576:1152])
    assert lib.aie_host_misaligned_accesses() == before + 1


def test_bank_hinted_restrict_streams_copy_like_plain_ones(libs):
    """aie_dm_resource and the __aie_dm_resource_* qualifiers pick a bank on the core; on the host they
    must change nothing: the same bytes arrive."""
    raw = buf(np.arange(9 * 72) % 253, np.uint8)
    copy = buf(np.zeros(16 * 72), np.uint8)  # 9 pushes padded to 16: whole words
    libs["bfp16"].op_stream_copy_banked(ptr(raw), 9, ptr(copy))
    np.testing.assert_array_equal(copy[: 9 * 72], raw)


def _stream_copy_in_a_child(count: int) -> subprocess.CompletedProcess:
    """op_stream_copy of `count` block vectors in a child process (a partial word stops the process)."""
    script = (
        "import ctypes, sys\n"
        f"lib = ctypes.CDLL({str(BUILD / 'ops_bfp16.so')!r})\n"
        "src = ctypes.create_string_buffer(8 * 72 + 64)\n"
        "dst = ctypes.create_string_buffer(8 * 72 + 64)\n"
        "a = lambda b: ctypes.c_void_p((ctypes.addressof(b) + 63) // 64 * 64)\n"
        "for i in range(8 * 72): src[(a(src).value - ctypes.addressof(src)) + i] = i % 251\n"
        f"lib.op_stream_copy(a(src), 0, {count}, a(dst))\n"
        "print('done', flush=True)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True
    )


def test_a_stream_that_ends_mid_word_stops_the_process(libs):
    """The GEMV's A span at SB = 4: 4 block vectors, 288 bytes, 4.5 words. The store FIFO writes whole
    512-bit words only, so the last 32 bytes would never reach memory: the host stops, naming the stream.
    """
    out = _stream_copy_in_a_child(4)
    assert out.returncode != 0 and "done" not in out.stdout
    assert "block_vector_output_buffer_stream opened at" in out.stderr, out.stderr
    assert "ops.cc" in out.stderr and "op_stream_copy" in out.stderr
    assert "destroyed with 32 bytes of a partial 512-bit word" in out.stderr


def test_a_stream_of_whole_words_holds(libs):
    """SB = 8: 8 block vectors, 576 bytes, 9 whole words: every byte arrives, in place, and nothing else."""
    out = _stream_copy_in_a_child(8)
    assert out.returncode == 0 and out.stdout == "done\n", out.stderr
    raw = buf(np.arange(8 * 72) % 251, np.uint8)
    copy = buf(np.full(8 * 72 + 64, 0xAA), np.uint8)
    libs["bfp16"].op_stream_copy(ptr(raw), 0, 8, ptr(copy))
    np.testing.assert_array_equal(copy[: 8 * 72], raw)
    assert (copy[8 * 72 :] == 0xAA).all()


@pytest.mark.parametrize("n_rows", [1, 5, 8])
def test_a_run_time_extract_index_is_counted_a_constant_one_is_not(libs, n_rows):
    """aie_api takes extract's index at run time; with an index the compiler cannot fold it emits a run-time
    sub-vector extract. The host counts those (aie_host_runtime_extracts): the GEMV drain's old form (a loop
    to a run-time row count) trips the count once per row, the unrolled rows under their own guards do not.
    Both store the same rows."""
    lib = libs["bf16"]
    lib.op_rows_runtime_index.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint,
        ctypes.c_void_p,
    ]
    lib.op_rows_constant_index.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint,
        ctypes.c_void_p,
    ]
    block = buf(np.arange(64), bfloat16)
    old, new = buf(np.zeros(64), bfloat16), buf(np.zeros(64), bfloat16)
    before = lib.aie_host_runtime_extracts()
    lib.op_rows_runtime_index(ptr(block), n_rows, ptr(old))
    assert lib.aie_host_runtime_extracts() == before + n_rows
    lib.op_rows_constant_index(ptr(block), n_rows, ptr(new))
    assert lib.aie_host_runtime_extracts() == before + n_rows
    np.testing.assert_array_equal(bits(new), bits(old))
    np.testing.assert_array_equal(bits(new[: 8 * n_rows]), bits(block[: 8 * n_rows]))
    assert not bits(new[8 * n_rows :]).any()


def random_blocks(rng, count):
    raw = rng.integers(0, 256, count * 72).astype(np.uint8)
    raw.reshape(-1, 9)[:, 0] = rng.integers(120, 140, count * 8)
    return raw


def test_bfp16_block_mmul_operand_order_and_per_step_f32(libs):
    """C (row-major) += A_s (8x8, blocks = rows, along K) @ B_s, B_s given transposed (block j = column j)."""
    rng = np.random.default_rng(8)
    steps = 5
    a_raw, b_raw = random_blocks(rng, steps), random_blocks(rng, steps)
    a_val, bt_val = bfp16_decode_ref(a_raw).reshape(steps, 8, 8), bfp16_decode_ref(
        b_raw
    ).reshape(steps, 8, 8)
    c0 = (rng.standard_normal((8, 8)) * 100).astype(np.float32)
    for from_zero in (True, False):
        c = np.zeros((8, 8), np.float32) if from_zero else c0.copy()
        for s in range(steps):
            c = (c + (a_val[s] @ bt_val[s].T).astype(np.float32)).astype(
                np.float32
            )  # block products exact
        got, a_buf, b_buf = (
            buf(c0, np.float32),
            buf(a_raw, np.uint8),
            buf(b_raw, np.uint8),
        )
        libs["bfp16"].op_mmul_bfp16_bfp16(
            ptr(a_buf), ptr(b_buf), ptr(got), steps, int(from_zero)
        )
        np.testing.assert_array_equal(got, c)


@pytest.mark.parametrize("variant", ["bfp16", "bf16"])
def test_block_mmul_equals_bfp16_emulated_bf16_mmul(libs, variant):
    """bf16 x bfp16ebs8 and bfp16ebs8 x bfp16ebs8 (operands converted once) give bit for bit what the bf16
    8x8x8 mmul gives under AIE_API_EMULATE_BFLOAT16_MMUL_WITH_BFP16 (operands converted on every mac).
    """
    rng = np.random.default_rng(9)
    steps = 6
    a = [
        (rng.standard_normal((8, 8)) * 2.0 ** rng.integers(-8, 8))
        .astype(bfloat16)
        .astype(np.float32)
        for _ in range(steps)
    ]
    b = [
        (rng.standard_normal((8, 8)) * 2.0 ** rng.integers(-8, 8))
        .astype(bfloat16)
        .astype(np.float32)
        for _ in range(steps)
    ]
    emulated = run_mmul(libs["bfp16"], (8, 8, 8), a, b)
    lib = libs[variant]  # the block mmul does not depend on the bf16 emulation macro
    b_t = buf(
        np.concatenate([x.T.reshape(-1) for x in b]), np.float32
    )  # B^T: block j = column j of B
    a_f32 = buf(np.concatenate([x.reshape(-1) for x in a]), np.float32)
    a_bf16 = buf(a_f32, bfloat16)
    whole = -(-steps // 8) * 8 * 72  # op_to_bfp16 pads its pushes to whole words
    bt_raw, a_raw = aligned_empty((whole,), np.uint8), aligned_empty((whole,), np.uint8)
    lib.op_to_bfp16(ptr(b_t), steps, ptr(bt_raw))
    lib.op_to_bfp16(ptr(a_f32), steps, ptr(a_raw))
    c = buf(np.zeros(64), np.float32)
    lib.op_mmul_bfp16_bfp16(ptr(a_raw), ptr(bt_raw), ptr(c), steps, 1)
    np.testing.assert_array_equal(c.reshape(8, 8), emulated)
    c = buf(np.zeros(64), np.float32)
    lib.op_mmul_bf16_bfp16(ptr(a_bf16), ptr(bt_raw), ptr(c), steps, 1)
    np.testing.assert_array_equal(c.reshape(8, 8), emulated)


# ----------------------------------------------------------------------------------------------- alignment
def test_misaligned_vector_access_reads_the_aligned_vector_and_is_counted(libs):
    lib = libs["bf16"]
    base = buf(np.arange(128), np.int8)
    before = lib.aie_host_misaligned_accesses()
    assert lib.op_misaligned_load(ptr(base), 0) == 0
    assert lib.aie_host_misaligned_accesses() == before
    assert (
        lib.op_misaligned_load(ptr(base), 70) == 64
    )  # 512-bit load: address floored to 64 bytes
    assert lib.aie_host_misaligned_accesses() == before + 1


# ----------------------------------------------------------------------------------------------- rejections
REJECTED = {
    "narrow_vector": ("aie::vector<int8, 8> v;", "narrower than 128 bits"),
    "bf16_shape": (
        "aie::mmul<8, 8, 16, bfloat16, bfloat16, accauto> m;",
        "does not exist on AIE2P",
    ),
    "f32_mul": (
        "auto r = aie::mul(aie::zeros<float, 16>(), aie::zeros<float, 16>());",
        "f32 x f32",
    ),
    "accum_implicit_from_vector": (
        "aie::accum<accfloat, 64> a = aie::zeros<bfloat16, 64>();",
        "conversion from",
    ),
    "block_vector_32": (
        "aie::block_vector<bfp16ebs8, 32> v;",
        "64 or 128 elements",
    ),
    "bfp16ebs16_mmul": (
        "aie::mmul<8, 8, 8, bfp16ebs16, bfp16ebs16> m;",
        "no bfp16ebs16 mmul",
    ),
    "f32_mmul": ("aie::mmul<8, 8, 8, float, float, accauto> m;", "no f32 mmul"),
    "block_b_not_transposed": (
        "aie::mmul<8, 8, 8, bfp16ebs8, bfp16ebs8> m; aie::block_vector<bfp16ebs8, 64> b; "
        "m.mac(b, b);",
        "aie::op_transpose(b)",
    ),
    "block_a_bf16_b": (
        "aie::mmul<8, 8, 8, bfp16ebs8, bfloat16> m;",
        "no bfp16ebs8 x bf16 mmul",
    ),
    "block_shape": (
        "aie::mmul<4, 8, 8, bfp16ebs8, bfp16ebs8> m;",
        "8x8x8 block shape only",
    ),
    "bfp16ebs16": (
        "aie::block_vector<bfp16ebs16, 64> v;",
        "bfp16ebs16 is not modelled",
    ),
    "block_load_v": (
        "alignas(64) static bfp16ebs8 p[72]; auto v = aie::load_v<64>(p);",
        "not an AIE2P vector element",
    ),
    "tanh_to_float": (
        "auto t = aie::tanh<float>(aie::zeros<float, 16>());",
        "bfloat16 out",
    ),
    "op_transpose_vector": (
        "auto t = aie::op_transpose(aie::zeros<bfloat16, 64>());",
        "block vectors only",
    ),
}


@pytest.mark.parametrize("case", sorted(REJECTED))
def test_compile_time_rejection(tmp_path, case):
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
