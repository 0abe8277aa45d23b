# SPDX-License-Identifier: MIT
"""Scale pairs (record format awq_f16, the kernel's -DINT4_SCALE_PARTS=2): an fp16 scale held exactly as
s + s_lo, both bf16, for GGUF Q4_0's d and AWQ / GPTQ fp16 scales.

* every finite fp16 value splits exactly; a float32 scale with more bits than a pair holds is refused;
* the record: S holds the groups' high halves, then their low halves (byte offsets worked by hand);
* the host build of the kernel equals the numpy model bit for bit (GEMM and GEMV, a chunk holding groups
  and a group spanning chunks), and the low halves change the result (the fold uses them);
* exact-mode operands leave only C's bf16 rounding;
* awq records refuse pair weights; the object names and the stack.
"""

from __future__ import annotations

import numpy as np
import pytest
from ml_dtypes import bfloat16

from int4awq.kernel import record
from int4awq.errors import ConfigError
from int4awq.kernel.kernel_model import (
    GemvHostKernel,
    HostKernel,
    kernel_gemm_model,
    kernel_gemv_model,
)
from int4awq.formats.quant import (
    AwqWeights,
    dequantize,
    random_activations,
    random_weights,
    scale_pair_of,
)
from int4awq.run.reference import check, reference_gemm


def u16(x):
    return np.asarray(x).view(np.uint16)


def test_every_finite_fp16_value_is_an_exact_pair():
    f16 = np.arange(0, 0x7C00, dtype=np.uint16).view(np.float16)  # +0 .. max finite
    f16 = np.concatenate([f16, -f16])
    hi, lo = scale_pair_of(f16)
    assert hi.dtype == lo.dtype == bfloat16
    np.testing.assert_array_equal(
        hi.astype(np.float64) + lo.astype(np.float64), f16.astype(np.float64)
    )
    # about 7 in 8 need the low half: fp16 has 3 significant bits more than bf16
    assert 0.8 < np.count_nonzero(lo.astype(np.float32)) / f16.size < 0.9


def test_a_scale_a_pair_cannot_hold_is_refused():
    ok = np.float32(
        1 + 2**-15
    )  # 16 significant bits: 1 + 2^-15 = bf16(1) + bf16(2^-15)
    hi, lo = scale_pair_of(np.array([ok]))
    assert (float(hi[0]), float(lo[0])) == (1.0, 2**-15)
    with pytest.raises(ConfigError, match=r"scale\[1\] = .*more significant bits"):
        scale_pair_of(np.array([ok, 1 + 2**-8 + 2**-23], np.float32))


def test_a_low_half_that_is_not_the_remainder_is_refused():
    w = random_weights(64, 16, 32, 0, scale_pair=True)
    bad_lo = w.s_lo.copy()
    bad_lo[1, 3] = bfloat16(float(w.s[1, 3]) / 2)
    with pytest.raises(ConfigError, match=r"s_lo\[1, 3\].*is not bf16\(s \+ s_lo\)"):
        AwqWeights(w.q, w.z, w.s, w.gs, bad_lo).validate()


def test_dequantize_uses_both_halves_exactly():
    w = random_weights(128, 32, 32, 3, scale_pair=True)
    s = w.s.astype(np.float64) + w.s_lo.astype(np.float64)
    q = w.q.astype(np.float64).reshape(4, 32, 32) - w.z[:, None, :]
    np.testing.assert_array_equal(dequantize(w), (q * s[:, None, :]).reshape(128, 32))
    assert w.format == "awq_f16" and AwqWeights(w.q, w.z, w.s, w.gs).format == "awq"


def test_record_holds_high_halves_then_low_halves():
    """tile_n 32, tile_k 64, gs 32: Q 1152 bytes; S at 1152 holds 2 groups x 32 high halves (128 bytes),
    then 2 x 32 low halves (128 bytes); Z at 1152 + 256 = 1408; total 1472 (awq: 1344).
    """
    tn, tk, gs = 32, 64, 32
    lay = record.record_layout(tn, tk, gs, "awq_f16")
    assert (lay.s_offset, lay.s_bytes, lay.z_offset, lay.total) == (
        1152,
        256,
        1408,
        1472,
    )
    assert record.format_record_bytes("awq_f16", tn, tk, gs) == 1472
    assert record.format_record_bytes("awq", tn, tk, gs) == 1344
    q = np.zeros((128, 64), np.uint8)
    z = np.zeros((4, 64), np.uint8)
    hi, lo = scale_pair_of(np.full((4, 64), 1.0, np.float32))
    (hi[3, 37],), (lo[3, 37],) = scale_pair_of(np.array([1 + 2**-10], np.float32))
    p = record.pack_weights(AwqWeights(q, z, hi, gs, lo), tn, tk)
    rec = p[
        1, 1
    ]  # column 37 is n0 = 5 of N-tile 1; group 3 is group j = 1 of K-chunk 1
    at = 1152 + 2 * (1 * 32 + 5)
    assert rec[at : at + 2].view(bfloat16)[0] == 1.0
    at_lo = 1152 + 128 + 2 * (1 * 32 + 5)
    assert rec[at_lo : at_lo + 2].view(bfloat16)[0] == bfloat16(2**-10)
    others = np.delete(rec[1152 + 128 : 1152 + 256].view(bfloat16), 37)
    assert not others.astype(np.float32).any()
    back = record.unpack_weights(p, 128, 64, gs, tn, tk, "awq_f16")
    np.testing.assert_array_equal(u16(back.s), u16(hi))
    np.testing.assert_array_equal(u16(back.s_lo), u16(lo))


def test_formats_and_pairs_meet_only_where_they_fit():
    w = random_weights(64, 16, 32, 0, scale_pair=True)
    with pytest.raises(ConfigError, match="need the awq_f16 record"):
        record.pack_weights(w, 16, 32, "awq")
    plain = random_weights(64, 16, 32, 0)
    as_pair = record.unpack_weights(
        record.pack_weights(plain, 16, 32, "awq_f16"), 64, 16, 32, 16, 32, "awq_f16"
    )
    assert not as_pair.s_lo.astype(np.float32).any()
    np.testing.assert_array_equal(dequantize(as_pair), dequantize(plain))


PAIR_TILES = [(32, 32, 64, 32), (16, 32, 32, 64), (32, 64, 128, 128)]


@pytest.mark.parametrize("tm, tn, tk, gs", PAIR_TILES)
def test_gemm_and_gemv_entries_are_the_numpy_model_bit_for_bit(tm, tn, tk, gs):
    k = 2 * max(tk, gs)
    w = random_weights(k, 2 * tn, gs, 5, scale_pair=True)
    a = random_activations(2 * tm, k, 6)
    c = HostKernel(tm, tn, tk, gs, format="awq_f16").gemm(a, w)
    model = kernel_gemm_model(a, w, tk)
    np.testing.assert_array_equal(u16(c), u16(model))
    rows = a[:5]
    gv = GemvHostKernel(tn, tk, gs, format="awq_f16").gemv(rows, w)
    np.testing.assert_array_equal(u16(gv), u16(kernel_gemv_model(rows, w, tk)))
    # the low halves matter: without them the model gives other bits
    hi_only = AwqWeights(w.q, w.z, w.s, w.gs)
    assert not np.array_equal(u16(kernel_gemm_model(a, hi_only, tk)), u16(model))


def test_exact_operands_leave_only_the_bf16_rounding_of_c():
    tm, tn, tk, gs = PAIR_TILES[0]
    w = random_weights(512, 64, gs, 8, exact=True, scale_pair=True)
    assert np.count_nonzero(w.s_lo.astype(np.float32)) == w.s_lo.size
    a = random_activations(64, 512, 9, exact=True)
    c = HostKernel(tm, tn, tk, gs, format="awq_f16").gemm(a, w)
    ref32, ref = reference_gemm(a, w)
    np.testing.assert_array_equal(u16(c), u16(ref))
    assert check(c, ref32, exact=True).passed


def test_the_pair_object_has_its_own_name_and_stack():
    obj = record.KernelObject("gemm", 64, 64, 32, 64, format="awq_f16")
    assert obj.lib_name() == "mv_int4_bf16_f16s_gemm_m64_n64_k64_gs32.o"
    assert obj.make_args()[-1] == "FORMAT=awq_f16"
    # two more 64-lane bf16 scale vectors live: 3936 + 256 = 4192 bytes, rounded up to 5120
    assert record.kernel_stack_bytes("awq_f16") == 5120
    assert record.kernel_stack_bytes("awq") == 4096
