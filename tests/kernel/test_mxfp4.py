# SPDX-License-Identifier: MIT
"""MXFP4 weights (int4awq/formats/mxfp4.py) and the kernel's MXFP4 entries (-DINT4_MXFP4): the exact mapping onto
bfp16 blocks, the refusals at pack time, the record, and the host build bit for bit against the numpy
model. Expected values are written out by hand from the OCP MX v1.0 definitions."""

import subprocess

import numpy as np
import pytest
from ml_dtypes import bfloat16

from int4awq.errors import ConfigError
from int4awq.kernel.kernel_model import (
    KERNELS_DIR,
    GemvHostKernel,
    HostKernel,
    a_tile_blocked,
    gemv_acc_elems,
)
from int4awq.formats.mxfp4 import Mxfp4Weights, check_scales, random_mxfp4
from int4awq.kernel.kernel_model import kernel_mxfp4_model, mantissas, weight_blocks
from int4awq.kernel.record import exponent_carriers, mxfp4_record_bytes, pack_mxfp4
from int4awq.formats.quant import random_activations
from int4awq.kernel.record import KernelObject, q_nibble_index

# E2M1 codes 0..15 (OCP MX v1.0, table of FP4 values), and twice each: the bfp16 mantissas.
E2M1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6]
MANTISSAS = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12]


def test_codes_decode_to_the_e2m1_values_times_their_group_scale():
    codes = np.tile(np.arange(16, dtype=np.uint8), (2, 1)).T.repeat(
        2, axis=0
    )  # [32, 2]
    w = Mxfp4Weights(codes, np.array([[127, 129]], np.uint8))
    d = w.dequantize()
    assert d[::2, 0].tolist() == E2M1 and d[::2, 1].tolist() == [4 * v for v in E2M1]


def test_mantissas_are_twice_the_values():
    assert mantissas(np.arange(16, dtype=np.uint8)).tolist() == MANTISSAS


def test_weight_blocks_are_exactly_the_dequantised_weights():
    w = random_mxfp4(128, 48, seed=2)
    blocks = weight_blocks(w)  # [K/8, N, 8]
    assert np.array_equal(
        blocks.transpose(0, 2, 1).reshape(128, 48), w.dequantize().astype(np.float64)
    )


@pytest.mark.parametrize(
    "x, accepted",
    [
        (0, True),
        (185, True),
        (186, False),
        (187, False),
        (188, True),
        (250, True),
        (251, False),
        (255, False),
    ],
)
def test_scale_bytes_the_kernel_cannot_hold_are_refused(x, accepted):
    s = np.array([[127, x]], np.uint8)
    if accepted:
        check_scales(s)
    else:
        with pytest.raises(
            ConfigError, match=rf"MXFP4 scale byte {x} \(group 0, column 1\)"
        ):
            check_scales(s)


def test_nan_scale_says_nan_and_bad_shapes_are_one_line():
    with pytest.raises(ConfigError, match="NaN"):
        Mxfp4Weights(
            np.zeros((32, 1), np.uint8), np.full((1, 1), 255, np.uint8)
        ).validate()
    with pytest.raises(ConfigError, match="do not match"):
        Mxfp4Weights(np.zeros((48, 2), np.uint8), np.zeros((1, 2), np.uint8)).validate()
    with pytest.raises(ConfigError, match="not a 4-bit E2M1 code"):
        Mxfp4Weights(
            np.full((32, 1), 16, np.uint8), np.zeros((1, 1), np.uint8)
        ).validate()


def test_exponent_carrier_is_the_bf16_power_of_two_whose_block_exponent_is_e_plus_64():
    # x = 127 (scale 1): E = 132; the carrier 2^(127 - 58) = 2^69, bf16 bits 196 << 7
    assert exponent_carriers(np.array([127], np.uint8)).tolist() == [196 << 7]
    # x = 200 wraps: (200 + 69) mod 256 = 13
    assert exponent_carriers(np.array([200], np.uint8)).tolist() == [13 << 7]


def test_the_record_holds_the_offset_nibbles_in_image_order_then_the_carriers():
    tn, tk = 32, 64
    w = random_mxfp4(tk, tn, seed=5)
    rec = pack_mxfp4(w, tn, tk)[0, 0]
    # 2 pair lines of 1152 nibbles (576 bytes each), then 2 groups x 32 columns of bf16
    assert rec.size == mxfp4_record_bytes(tn, tk) == 1152 + 128
    nib = np.empty(2 * 1152, np.uint8)
    nib[0::2], nib[1::2] = rec[:1152] & 15, rec[:1152] >> 4
    # t = +-(c & 7) stored as t + 8: codes 0..7 as 8..15, 8..15 (negative, -0 = 0) as 8, 7, 6, .. 1
    offset = np.array([8, 9, 10, 11, 12, 13, 14, 15, 8, 7, 6, 5, 4, 3, 2, 1], np.uint8)
    assert np.array_equal(nib[q_nibble_index(tn, tk)], offset[w.codes])
    # every other nibble (the exponent slots, the padding) is 8: t = 0
    rest = np.ones(nib.size, bool)
    rest[q_nibble_index(tn, tk)] = False
    assert (nib[rest] == 8).all()
    carriers = rec[1152 : 1152 + 128].view("<u2").reshape(2, tn)
    assert np.array_equal(carriers, ((w.scales.astype(np.uint16) + 69) % 256) << 7)


# ------------------------------------------------------------------------------------------ the kernel
def _host_gemm(a, w, tm, tn, tk):
    packed = pack_mxfp4(w, tn, tk)
    hk = HostKernel(tm, tn, tk, 32, format="mxfp4")
    c = np.empty((tm, w.n), bfloat16)
    for nt in range(w.n // tn):
        hk.zero()
        for kc in range(w.k // tk):
            hk.accumulate(
                packed[nt, kc],
                a_tile_blocked(np.ascontiguousarray(a[:, kc * tk : (kc + 1) * tk])),
            )
        c[:, nt * tn : (nt + 1) * tn] = hk.drain()
    return c, packed


@pytest.mark.parametrize(
    "tm, tn, tk, k",
    [(64, 64, 64, 128), (16, 32, 256, 256)],
    ids=["unrolled-2-chunks", "rolled-32-blocks"],
)
def test_gemm_and_gemv_entries_are_the_numpy_model_bit_for_bit(tm, tn, tk, k):
    w = random_mxfp4(k, 2 * tn, seed=3)
    a = random_activations(tm, k, seed=4)
    c, packed = _host_gemm(a, w, tm, tn, tk)
    ref = kernel_mxfp4_model(a, w)
    assert np.array_equal(c.view(np.uint16), ref.view(np.uint16))
    g, m = GemvHostKernel(tn, tk, 32, format="mxfp4"), 5
    acc = g.g_acc[: gemv_acc_elems(m, tn)]
    for nt in range(w.n // tn):
        g.gemv_zero(acc, m)
        for kc in range(k // tk):
            g.gemv_accumulate(
                packed[nt, kc],
                np.ascontiguousarray(a[:m, kc * tk : (kc + 1) * tk]),
                acc,
            )
        g.lib.gemv_int4_drain(acc.ctypes.data, g.g_out.ctypes.data, m)
        got = g.g_out[: m * tn].reshape(m, tn)
        assert np.array_equal(
            got.view(np.uint16), ref[:m, nt * tn : (nt + 1) * tn].view(np.uint16)
        )


def test_exact_operands_leave_only_the_bf16_rounding_of_c():
    """Integer A in -4..4 and scale 1: every product and sum is exact in f32, so C differs from the exact
    product by its bf16 rounding alone (relative error at most 2^-8)."""
    w = random_mxfp4(128, 64, seed=6, exact=True)
    a = random_activations(64, 128, seed=7, exact=True)
    c, _ = _host_gemm(a, w, 64, 64, 64)
    exact = a.astype(np.float64) @ w.dequantize().astype(np.float64)
    assert np.array_equal(
        c.astype(np.float64),
        exact.astype(np.float32).astype(bfloat16).astype(np.float64),
    )
    nz = exact != 0
    assert np.max(np.abs(c.astype(np.float64)[nz] / exact[nz] - 1)) <= 2.0**-8


def test_the_mxfp4_object_has_its_own_name_and_refuses_other_groups():
    obj = KernelObject("gemm", 64, 64, 32, 64, format="mxfp4")
    out = subprocess.run(
        ["make", "-s", "-C", str(KERNELS_DIR), "host-path", *obj.make_args()],
        capture_output=True,
        text=True,
        check=True,
    )
    assert (
        out.stdout.strip().endswith("/mv_int4_bf16_mxfp4_gemm_m64_n64_k64.so")
        and obj.stem in out.stdout
    )
    with pytest.raises(ConfigError, match="MXFP4 groups are 32"):
        KernelObject("gemm", 64, 64, 128, 64, format="mxfp4")
    bad = subprocess.run(
        ["make", "-s", "-C", str(KERNELS_DIR), "stem", "FORMAT=nf4"],
        capture_output=True,
        text=True,
    )
    assert (
        bad.returncode
        and "give FORMAT=awq, awq_f16, int4_min, int4_min_bf16, int8, int8_triple, int8_min, int8_min_bf16 or mxfp4"
        in bad.stderr
    )
