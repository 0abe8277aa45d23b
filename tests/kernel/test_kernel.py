# SPDX-License-Identifier: MIT
"""The int4-AWQ kernel (host builds of kernels/mm_int4_bf16.cc and mv_int4_bf16.cc) and its packed record.

* the kernel through ctypes on packed records, bit for bit against the numpy model of its arithmetic
  (int4awq.kernel.kernel_model), for 16x16, 64x64 and the largest tile the L1 budget allows, with chunks that
  hold whole groups and chunks inside a group;
* exact-mode operands: C bit-identical to the reference rounded to bf16;
* random operands: within the documented bfp16 error of the f64 reference;
* zero and drain, alignment, record layout and round trip, tile rules, build naming.
"""

from __future__ import annotations

import ctypes
import subprocess
import sys

import numpy as np
import pytest

from int4awq.kernel import record
from ml_dtypes import bfloat16

from int4awq.errors import ConfigError
from int4awq.kernel.kernel_model import (
    KERNELS_DIR,
    GemvHostKernel,
    HostKernel,
    a_tile_blocked,
    aligned_empty,
    kernel_gemm_model,
)
from int4awq.formats.quant import AwqWeights, random_activations, random_weights
from int4awq.kernel.record import (
    check_kernel_tiles,
    KernelObject,
    l1_budget,
    pack_weights,
    record_bytes,
    record_layout,
    unpack_weights,
)
from int4awq.run.reference import check, reference_gemm

# (tile_m, tile_n, tile_k, gs): 16x16 with whole groups per chunk and with a group spanning 4 chunks;
# 64x64 with K-chunk 64 inside GS 128 (the configuration that fits L1 with 64x64); 64x64 with 2 groups
# per chunk; 64x128 with K-chunk 32 (the 2048^3 default); and the largest C tile the L1 budget allows at
# GS 128, 144x80 with K-chunk 16, close to the L1 limit (64448 of 65536 bytes; at K-chunk 16 the A line
# that stages the zero points holds 128 columns' worth, so no wider tile;
# test_largest_tile_is_the_largest).
LARGEST = (144, 80, 16, 128)
CONFIGS = [
    (16, 16, 32, 32),
    (16, 16, 32, 128),
    (64, 64, 64, 128),
    (64, 64, 64, 32),
    (64, 128, 32, 128),
    LARGEST,
]


@pytest.fixture(scope="session")
def kernels():
    return {cfg: HostKernel(*cfg) for cfg in CONFIGS}


def operands(cfg, exact, seed, m_tiles=2, n_tiles=2, k_chunks=None):
    tm, tn, tk, gs = cfg
    k = max(tk, gs) * (k_chunks or 2)
    a = random_activations(tm * m_tiles, k, seed, exact=exact)
    w = random_weights(k, tn * n_tiles, gs, seed + 1, exact=exact)
    return a, w


def u16(x):
    return np.asarray(x).view(np.uint16)


@pytest.mark.parametrize("cfg", CONFIGS)
def test_kernel_matches_model_bit_for_bit(kernels, cfg):
    a, w = operands(cfg, exact=False, seed=10)
    hk = kernels[cfg]
    c = hk.gemm(a, w)
    np.testing.assert_array_equal(u16(c), u16(kernel_gemm_model(a, w, cfg[2])))
    assert hk.misaligned() == 0


@pytest.mark.parametrize("cfg", CONFIGS)
def test_exact_mode_is_bit_identical_to_reference(kernels, cfg):
    a, w = operands(cfg, exact=True, seed=20, k_chunks=4)
    c = kernels[cfg].gemm(a, w)
    ref_f32, ref_bf16 = reference_gemm(a, w)
    np.testing.assert_array_equal(u16(c), u16(ref_bf16))
    assert check(c, ref_f32, exact=True).passed


def hard_activations(m, k, seed):
    """bf16 A that exercises every branch of the bfp16 conversion: zero and subnormal blocks, mantissas
    that round half to even and that saturate at 127 (1.9961 * 2^e), and blocks spanning 2^-20 .. 2^6.
    """
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)) * np.exp2(
        rng.integers(-20, 7, (m, k // 8, 1))
    ).repeat(8, axis=2).reshape(m, k)
    a[::5, 8:16] = 0.0
    a[1::7, 16:24] = 1e-40  # f32 subnormal -> counts as 0
    a[2::3, 0] = 1.99609375 * np.sign(
        a[2::3, 0] + 0.5
    )  # mantissa 127.75 -> saturates to 127
    a[3::4, 24:32] = np.array(
        [1.0, 3 / 128, 5 / 128, -3 / 128, 0.5, 2.0**-7, 0, 1.5]
    )  # ties
    return a.astype(np.float32).astype(bfloat16)


@pytest.mark.parametrize("cfg", CONFIGS)
def test_kernel_matches_model_on_hard_bfp16_inputs(kernels, cfg):
    """A converted once per call to bfp16 blocks, W exact: bit-identical to the model of the bf16 mmul that
    converts both operands on every step (same rounding, same accumulation order)."""
    tm, tn, tk, gs = cfg
    k = max(tk, gs) * 2
    a = hard_activations(2 * tm, k, 11)
    w = random_weights(k, 2 * tn, gs, 12)
    np.testing.assert_array_equal(
        u16(kernels[cfg].gemm(a, w)), u16(kernel_gemm_model(a, w, tk))
    )


@pytest.mark.parametrize("cfg", CONFIGS)
def test_kernel_stays_inside_w_scratch(kernels, cfg):
    """The kernel's bfp16 lines fit record.w_scratch_bytes: bytes past the scratch are never written."""
    hk = kernels[cfg]
    n = hk.scratch.size
    big = aligned_empty((n + 512,), bfloat16)
    big.view(np.uint16)[...] = 0x7FC1
    saved, hk.scratch = hk.scratch, big[:n]
    try:
        a, w = operands(cfg, exact=False, seed=13, m_tiles=1, n_tiles=1, k_chunks=1)
        c = hk.gemm(a, w)
    finally:
        hk.scratch = saved
    assert (big.view(np.uint16)[n:] == 0x7FC1).all()
    np.testing.assert_array_equal(u16(c), u16(kernel_gemm_model(a, w, cfg[2])))
    assert hk.misaligned() == 0


def test_exact_mode_large_partial_sums(kernels):
    """Group sums up to 128 * 4 * 15 = 7680 (13 bits): bf16(G) alone would lose them; hi + lo does not."""
    cfg = (64, 64, 64, 128)
    k, n, m = 512, 64, 64
    a = np.full((m, k), 4, dtype=np.float32).astype(bfloat16)
    a[1::2] = -3
    w = AwqWeights(
        np.full((k, n), 15, np.uint8),
        np.zeros((k // 128, n), np.uint8),
        np.full((k // 128, n), 0.125, np.float32).astype(bfloat16),
        128,
    )
    w.q[::7] = 2
    c = kernels[cfg].gemm(a, w)
    np.testing.assert_array_equal(u16(c), u16(reference_gemm(a, w)[1]))


@pytest.mark.parametrize("cfg", [(16, 16, 32, 128), (64, 64, 64, 128)])
def test_random_operands_within_bfp16_error(kernels, cfg):
    """Within the documented bfp16 error: mean relative L1 ~ 6.7e-3 (docs/hardware.md#how-conversion-to-bfp16-rounds),
    correlation > 0.9999 (that the error is the bfp16 model's own is the bit-exact tests' job).
    """
    a, w = operands(cfg, exact=False, seed=30, m_tiles=4, n_tiles=2, k_chunks=8)
    c = kernels[cfg].gemm(a, w).astype(np.float32)
    ref = reference_gemm(a, w)[0]
    rel_l1 = np.abs(c - ref).mean() / np.abs(ref).mean()
    assert rel_l1 < 1e-2, rel_l1
    assert np.corrcoef(c.ravel(), ref.ravel())[0, 1] > 0.9999


@pytest.mark.parametrize(
    "cfg", [(64, 64, 64, 128), (64, 128, 32, 128), LARGEST, (16, 16, 32, 32)]
)
def test_zero_and_drain(kernels, cfg):
    """The drain in place, at square, wide and narrow tiles: each bf16 block over the first half of f32
    block j / 2."""
    tm, tn, tk, gs = cfg
    hk = kernels[cfg]
    hk.c_acc[...] = np.nan
    hk.zero()
    assert (hk.c_acc.view(np.uint32) == 0).all()
    rng = np.random.default_rng(5)
    tile = (rng.standard_normal((tm, tn)) * 1000).astype(np.float32)
    tile[0, :4] = np.array(
        [1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 1 + 2**-8 + 2**-20], np.float32
    )  # ties
    # c_acc layout: 8x8 blocks (mb, nb) at (nb * tm/8 + mb) * 64, row-major inside
    blocked = tile.reshape(tm // 8, 8, tn // 8, 8).transpose(2, 0, 1, 3).reshape(-1)
    hk.c_acc[...] = blocked
    out = hk.drain()  # in place: the accumulator's first tm * tn * 2 bytes, un-blocked
    np.testing.assert_array_equal(u16(out), u16(tile.astype(bfloat16)))
    # the drain keeps the blocks' order: bf16 block j where f32 block j / 2 was
    np.testing.assert_array_equal(
        u16(hk.c_acc.view(bfloat16)[: tm * tn]), u16(blocked.astype(bfloat16))
    )
    assert out[0, :4].astype(np.float32).tolist() == [1.0, 1 + 2**-6, -1.0, 1 + 2**-7]


def test_accumulate_adds_to_existing_c(kernels):
    cfg = (16, 16, 32, 32)
    hk = kernels[cfg]
    a, w = operands(cfg, exact=True, seed=40, m_tiles=1, n_tiles=1, k_chunks=1)
    packed = pack_weights(w, 16, 32)
    a_blk = a.reshape(2, 8, 4, 8).transpose(0, 2, 1, 3).reshape(-1)
    hk.zero()
    hk.accumulate(packed[0, 0], a_blk)
    hk.accumulate(packed[0, 0], a_blk)
    np.testing.assert_array_equal(
        u16(hk.drain()), u16((2 * reference_gemm(a, w)[0]).astype(bfloat16))
    )


@pytest.mark.parametrize("cfg", [(64, 64, 64, 128), (16, 16, 32, 32)])
def test_w_lines_are_q_minus_z_with_exponent_133(kernels, cfg):
    """After a call the W pair lines hold the bfp16ebs8 images the packer's order promises: block vector
    2 * kb + c of pair p, block j = column 16p + 8c + j: exponent byte 133 (value = mantissa), then the 8
    int8 mantissas q - z of K values 8kb .. 8kb + 7 of that column (docs/kernel.md)."""
    tm, tn, tk, gs = cfg
    hk = kernels[cfg]
    a, w = operands(cfg, exact=False, seed=14, m_tiles=1, n_tiles=1, k_chunks=1)
    hk.zero()
    hk.accumulate(
        pack_weights(w, tn, tk)[0, 0], a_tile_blocked(np.ascontiguousarray(a[:, :tk]))
    )
    line = -(-(2 * (tk // 8) * 72) // 64) * 64
    qz = w.q[:tk].astype(np.int16) - np.repeat(w.z, gs, axis=0)[:tk].astype(np.int16)
    for p in range(tn // 16):
        img = hk.scratch[p * line : p * line + 2 * (tk // 8) * 72].reshape(
            tk // 8, 2, 8, 9
        )
        assert (img[..., 0] == 133).all()
        for c in range(2):
            cols = qz[:, 16 * p + 8 * c : 16 * p + 8 * c + 8]  # [TK, 8]
            expect = cols.reshape(tk // 8, 8, 8).transpose(0, 2, 1)  # [kb, j, i]
            np.testing.assert_array_equal(img[:, c, :, 1:].view(np.int8), expect)


# ----------------------------------------------------------------------------------------------- record
def test_record_layout_byte_exact():
    """One nonzero code at (k, n) lands at nibble (n//16)*L + (2*(k//8) + (n//8)%2)*72 + (n%8)*9 + 1 + k%8
    (L = 1152 bytes, one W pair line for tile_k 64); every other nibble, the exponent slots included, is 0;
    S and Z where documented."""
    tn, tk, gs, k, n = 32, 64, 32, 128, 64
    lay = record_layout(tn, tk, gs)
    # Q: 2 pairs x 1152 nibbles = 1152 bytes; S: 2 groups x 32 bf16 = 128; Z: 64 bytes
    assert (lay.groups, lay.q_bytes, lay.s_offset, lay.z_offset, lay.total) == (
        2,
        1152,
        1152,
        1280,
        1344,
    )
    for kk, nn in [(0, 0), (1, 0), (0, 1), (9, 3), (70, 29), (127, 63), (64, 40)]:
        q = np.zeros((k, n), np.uint8)
        q[kk, nn] = 0xB
        s = np.zeros((k // gs, n), np.float32).astype(bfloat16)
        z = np.zeros((k // gs, n), np.uint8)
        g = kk // gs
        s[g, nn] = 1.5
        z[g, nn] = 7
        p = pack_weights(
            AwqWeights(q, z, np.where(s == 0, 1, s).astype(bfloat16), gs), tn, tk
        )
        nt, kc, k0, n0 = nn // tn, kk // tk, kk % tk, nn % tn
        i = (
            (n0 // 16) * 1152
            + (2 * (k0 // 8) + (n0 // 8) % 2) * 72
            + (n0 % 8) * 9
            + 1
            + k0 % 8
        )
        rec = p[nt, kc]
        expect_q = np.zeros(lay.q_bytes, np.uint8)
        expect_q[i // 2] = 0xB << (4 * (i % 2))
        np.testing.assert_array_equal(rec[: lay.q_bytes], expect_q)
        j = g - kc * (tk // gs)
        s_at = lay.s_offset + 2 * (j * tn + n0)
        assert rec[s_at : s_at + 2].view(bfloat16)[0] == 1.5
        assert rec[lay.z_offset + j * tn + n0] == 14  # stored doubled
        assert not rec[lay.z_offset + lay.z_bytes :].any()


@pytest.mark.parametrize(
    "k,n,gs,tn,tk",
    [
        (256, 64, 32, 16, 32),
        (256, 64, 128, 16, 32),
        (512, 128, 128, 64, 64),
        (256, 128, 32, 64, 128),
        (1024, 112, 128, 112, 32),
    ],
)
def test_record_round_trip(k, n, gs, tn, tk):
    w = random_weights(k, n, gs, 7)
    p = pack_weights(w, tn, tk)
    assert (
        p.shape == (n // tn, k // tk, record_bytes(tn, tk, gs)) and p.dtype == np.uint8
    )
    assert record_bytes(tn, tk, gs) % 64 == 0
    u = unpack_weights(p, k, n, gs, tn, tk)
    np.testing.assert_array_equal(u.q, w.q)
    np.testing.assert_array_equal(u.z, w.z)
    np.testing.assert_array_equal(u16(u.s), u16(w.s))


@pytest.mark.parametrize("tn, tk, gs", [(32, 64, 128), (32, 128, 32)])
def test_dense_record_round_trip_and_code_position(tn, tk, gs):
    """The GEMV's dense record: 4 bits a code, and element (k, n) where the kernel's pushes put it: for
    (9, 17) of a 32-column chunk, pair 1 (16 x tile_k nibbles in), K block 1 (128 nibbles a K block of
    the two blocks), column block 0, lane 8 * 1 + 1."""
    k, n = 2 * max(tk, gs), 2 * tn
    w = random_weights(k, n, gs, 9)
    p = pack_weights(w, tn, tk, dense=True)
    assert p.shape[2] == record.record_layout(tn, tk, gs, "awq", True).total
    assert record.record_layout(tn, tk, gs, "awq", True).q_bytes == tn * tk // 2
    u = unpack_weights(p, k, n, gs, tn, tk, dense=True)
    np.testing.assert_array_equal(u.q, w.q)
    np.testing.assert_array_equal(u.z, w.z)
    nibble = 1 * 16 * tk + 128 + 8 + 1
    byte = p[0, 0, nibble // 2]
    assert (byte >> 4 if nibble % 2 else byte & 0xF) == w.q[9, 17]


def test_record_l3_order():
    w = random_weights(256, 128, 64, 8)
    p = pack_weights(w, 64, 64)
    flat = p.reshape(-1)
    rb = record_bytes(64, 64, 64)
    nt, kc = 1, 3
    np.testing.assert_array_equal(flat[(nt * (256 // 64) + kc) * rb :][:rb], p[nt, kc])


# ----------------------------------------------------------------------------------------------- rules
@pytest.mark.parametrize(
    "args,words",
    [
        ((24, 16, 32, 32), ["tile_m = 24", "16"]),
        ((16, 8, 32, 32), ["tile_n = 8"]),
        ((16, 16, 24, 24), ["tile_k = 24"]),
        ((16, 16, 32, 48), ["gs = 48"]),
        ((16, 16, 64, 96), ["tile_k = 64", "gs = 96"]),
        ((128, 128, 64, 128), ["128 x 128 x 64", "65536"]),
        ((64, 64, 128, 128), ["64 x 64 x 128", "65536"]),
        ((0, 16, 32, 32), ["tile_m"]),
        ((16, 16, 64, 16), ["gs = 16", "32"]),
    ],
)
def test_check_kernel_tiles_rejects(args, words):
    with pytest.raises(ConfigError) as e:
        check_kernel_tiles(*args)
    assert "\n" not in str(e.value)
    for word in words:
        assert word in str(e.value)


def test_l1_budget_64x64_fits():
    b = l1_budget(64, 64, 64, 128)
    assert b == {
        "c_acc": 16384,
        "a_tile_x2": 16384,
        "w_record_x2": 2 * (2304 + 128 + 64),  # Q 4 pairs x 576 B, S, Z
        "w_scratch": 5 * 1152 + 576,  # 4 W pair lines, 1 A pair line, staging (9 words)
        "stack": 4096,
        "total": 16384 + 16384 + 4992 + 6336 + 4096,
    }
    assert l1_budget(*LARGEST)["total"] <= 65536


def test_default_stack_is_the_live_set_plus_the_core_frame():
    # 4 accumulators of 64 f32, 4 operand registers of 128 B, 2 streams of 80 B, 2 scale vectors, fold
    # temporaries, and mlir-air's measured LLVM 22 core frame: 2720 + 1216 = 3936, rounded to 4096.
    assert sum(record.KERNEL_LIVE_BYTES.values()) == 1024 + 512 + 160 + 256 + 768
    assert record.kernel_stack_bytes() == 4096
    assert l1_budget(64, 64, 64, 128, stack=1024)["total"] == 48192 - 3072


# ----------------------------------------------------------------------------------------------- build
def _make_path(target: str, obj: KernelObject) -> str:
    """What `make -s -C kernels <target>-path` prints for this object."""
    return subprocess.run(
        ["make", "-s", "-C", str(KERNELS_DIR), f"{target}-path", *obj.make_args()],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_makefile_naming_matches_record(kernels):
    gemm = KernelObject("gemm", 64, 64, 128, 64)
    assert _make_path("host", gemm).endswith("/mv_int4_bf16_gemm_m64_n64_k64_gs128.so")
    gemv = KernelObject("gemv", 16, 32, 32)
    assert _make_path("peano", gemv).endswith("/mv_int4_bf16_gemv_n16_k32_gs32.o")
    assert gemv.lib_name() == "mv_int4_bf16_gemv_n16_k32_gs32.o"
    assert gemv.make_args() == [
        "ENTRIES=gemv",
        "DIM_N=16",
        "DIM_K_CHUNK=32",
        "DIM_GS=32",
    ]
    assert (
        kernels[(64, 64, 64, 128)].path.name == "mv_int4_bf16_gemm_m64_n64_k64_gs128.so"
    )
    floor = KernelObject("gemv", 16, 32, 32, rounding="floor")
    assert _make_path("peano", floor).endswith(
        "/mv_int4_bf16_gemv_n16_k32_gs32_rfloor.o"
    )
    assert floor.lib_name() == "mv_int4_bf16_gemv_n16_k32_gs32_rfloor.o"
    assert floor.make_args()[-1] == "ROUNDING=floor"
    with pytest.raises(ConfigError, match="conv_even or floor"):
        KernelObject("gemv", 16, 32, 32, rounding="ceil")
    bad_mode = subprocess.run(
        ["make", "-s", "-C", str(KERNELS_DIR), "stem", "ROUNDING=ceil"],
        capture_output=True,
        text=True,
    )
    assert (
        bad_mode.returncode
        and "give ROUNDING=conv_even or ROUNDING=floor" in bad_mode.stderr
    )
    bad = subprocess.run(
        ["make", "-s", "-C", str(KERNELS_DIR), "stem", "ENTRIES=both"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode and "give ENTRIES=gemm, gemv or eltwise" in bad.stderr


def test_a_symbol_prefix_renames_the_gemv_entries_and_the_object(kernels):
    """Two GEMV objects in one module (o_gemv_ffn_int4.py) need entries of their own names: the prefix
    reaches the stem, make's arguments and the built library's symbols."""
    import ctypes

    from int4awq.kernel.kernel_model import build_host_kernel

    obj = KernelObject("gemv", 16, 32, 32, symbol_prefix="k1_")
    assert obj.lib_name() == "k1_mv_int4_bf16_gemv_n16_k32_gs32.o"
    assert (
        obj.make_args()[-1] == "SYMBOL_PREFIX=k1_"
        and obj.symbol("gemv_int4_zero") == "k1_gemv_int4_zero"
    )
    assert _make_path("host", obj).endswith("/k1_mv_int4_bf16_gemv_n16_k32_gs32.so")
    lib = ctypes.CDLL(str(build_host_kernel(obj)))
    assert hasattr(lib, "k1_gemv_int4_accumulate") and not hasattr(
        lib, "gemv_int4_accumulate"
    )
    with pytest.raises(ConfigError, match="for the GEMV's entries only"):
        KernelObject("gemm", 16, 32, 32, tile_m=16, symbol_prefix="k1_")
    gemm_prefixed = subprocess.run(
        ["make", "-s", "-C", str(KERNELS_DIR), "stem", "SYMBOL_PREFIX=k1_"],
        capture_output=True,
        text=True,
    )
    assert (
        gemm_prefixed.returncode and "give it with ENTRIES=gemv" in gemm_prefixed.stderr
    )


def test_peano_target_without_peano_fails_with_one_line():
    proc = subprocess.run(
        ["make", "-s", "-C", str(KERNELS_DIR), "peano", "PEANO_INSTALL_DIR="],
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0
    ours = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(ours) == 1 and "PEANO_INSTALL_DIR" in ours[0]


def test_bad_tile_fails_to_compile_with_a_clear_message(tmp_path):
    proc = subprocess.run(
        [
            "make",
            "-s",
            "-C",
            str(KERNELS_DIR),
            "host",
            "DIM_M=24",
            "DIM_N=16",
            "DIM_K_CHUNK=32",
            "DIM_GS=32",
            f"BUILD={tmp_path}",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0
    assert "DIM_M (tile_m) must be a positive multiple of 16" in proc.stderr


def test_kernel_buffers_are_aligned():
    x = aligned_empty((100,), bfloat16)
    assert x.ctypes.data % 64 == 0


def test_largest_tile_is_the_largest():
    """No legal tile at GS 128 has a larger C tile (tile_m * tile_n) than LARGEST."""
    from int4awq.errors import ConfigError
    from int4awq.kernel.record import check_kernel_tiles

    best = 0
    for tm in range(16, 513, 16):
        for tn in range(16, 513, 16):
            for tk in (16, 32, 64, 128, 256):
                try:
                    check_kernel_tiles(tm, tn, tk, 128)
                except ConfigError:
                    continue
                best = max(best, tm * tn)
    check_kernel_tiles(*LARGEST)
    assert LARGEST[0] * LARGEST[1] == best


# ----------------------------------------------------------------------------------------------- toolchain
def _toolchain(*args):
    return subprocess.run(
        [sys.executable, str(KERNELS_DIR / "toolchain.py"), *args],
        capture_output=True,
        text=True,
    )


@pytest.mark.parametrize(
    "version, code, says",
    [
        (
            "clang version 21.0.0.2026080601+f4a72c27 (llvm-aie)",
            0,
            "",
        ),  # the pin: silent
        ("21.0.0.2026072200", 0, "is not 21.0.0.2026080601"),  # the minimum: a warning
        (
            "clang version 22.0.0.2026082101+f3081197",
            0,
            "llvm-aie #1262",
        ),  # newer: a warning
        (
            "clang version 21.0.0.2026072101+0",
            2,
            "older than 21.0.0.2026072200",
        ),  # one below
        ("clang version 21.0.0.2026062301+cb664e8c", 2, "#995, fixed by #1184"),
        ("clang version 21.0.0", 0, "cannot read the llvm-aie build"),
    ],
)
def test_peano_build_is_checked_against_the_minimum_and_the_pin(version, code, says):
    out = _toolchain(
        "version",
        "--minimum",
        "21.0.0.2026072200",
        "--pin",
        "21.0.0.2026080601",
        version,
    )
    assert out.returncode == code
    assert says in out.stderr and (says or out.stderr == "")
    assert len(out.stderr.strip().splitlines()) <= 1


def test_program_memory_is_refused_over_16_kb():
    # llvm-size -A: only the .text sections count (-ffunction-sections gives one per entry); .rodata,
    # which mlir-aie's linker script puts in data memory, does not
    size = (
        "k.o  :\nsection            size   addr\n.text                 0      0\n"
        ".text.zero_vectorized_f32_mn  {}      0\n.text.f32_to_bf16_mn  {}   0\n"
        ".rodata            5000      0\n.bss                 64      0\nTotal  99\n"
    )
    at = _toolchain(
        "size", "--limit", "16384", "--object", "k.o", size.format(16000, 384)
    )
    assert at.returncode == 0 and "16384 of 16384 bytes" in at.stdout
    over = _toolchain(
        "size", "--limit", "16384", "--object", "k.o", size.format(16000, 385)
    )
    assert (
        over.returncode == 2
        and "holds 16385 bytes of code, more than the 16384" in over.stderr
    )
    berkeley = "   text    data     bss     dec     hex filename\n100 0 0 100 64 k.o\n"
    for junk in ("nothing", berkeley):
        out = _toolchain("size", "--limit", "16384", "--object", "k.o", junk)
        assert out.returncode == 2 and "not llvm-size -A output" in out.stderr


def test_a_misaligned_buffer_stops_a_debug_build(kernels):
    # The host build has no -DNDEBUG: every entry asserts its buffers are 64-byte aligned.
    hk = kernels[(64, 64, 64, 128)]
    script = (
        "import ctypes, sys\n"
        f"lib = ctypes.CDLL({str(hk.path)!r})\n"
        "buf = ctypes.create_string_buffer(1 << 16)\n"
        "p = (ctypes.addressof(buf) + 63) // 64 * 64\n"
        "lib.zero_vectorized_f32_mn(ctypes.c_void_p(p))\n"
        "print('aligned ok', flush=True)\n"
        "lib.zero_vectorized_f32_mn(ctypes.c_void_p(p + 32))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.stdout == "aligned ok\n"
    assert out.returncode != 0 and "kernel buffer not 64-byte aligned" in out.stderr


@pytest.mark.parametrize("tile_k, gs", [(32, 32), (64, 64), (32, 128), (16, 16)])
def test_every_stream_ends_on_a_word_and_rows_4_to_7_arrive(tile_k, gs):
    """The host's output streams write whole 512-bit words only and stop the process on a stream that ends
    inside one (tests/test_aie_api.py). The GEMV's A spans of SB = 4 K blocks (288 bytes, 4.5 words: GS 32,
    every GS-32 GGUF decode default) and SB = 2 (the GEMM's 288-byte span at GS 16) are padded to 576 bytes;
    SB = 8 is whole already. With 8 rows, rows 4 to 7 sit in the span's last word: bit for bit the model.
    """
    a = random_activations(8, 4 * max(tile_k, gs), 40)
    w = random_weights(4 * max(tile_k, gs), 32, gs, 41)
    gemv = GemvHostKernel(32, tile_k, gs)
    np.testing.assert_array_equal(
        u16(gemv.gemv(a, w)), u16(kernel_gemm_model(a, w, tile_k))
    )
    gemm = HostKernel(16, 32, tile_k, gs)
    np.testing.assert_array_equal(
        u16(gemm.gemm(a[:8].repeat(2, 0), w)),
        u16(kernel_gemm_model(a[:8].repeat(2, 0), w, tile_k)),
    )


def test_the_gemv_drain_extracts_rows_at_constant_indices():
    """The drain stores each of a band's rows from its own compile-time sub-vector (rows unrolled, each under
    its own guard): the host counts no run-time extract index (aie_host_runtime_extracts;
    tests/test_aie_api.py shows the old loop trips it), bit for bit the model at every row count.
    """
    gemv = GemvHostKernel(32, 32, 32)
    count = gemv.lib.aie_host_runtime_extracts
    count.restype = ctypes.c_ulong
    w = random_weights(64, 64, 32, 42)
    for m in (1, 5, 8, 13):
        a = random_activations(m, 64, 43 + m)
        before = count()
        np.testing.assert_array_equal(
            u16(gemv.gemv(a, w)), u16(kernel_gemm_model(a, w, 32))
        )
        assert count() == before
