# SPDX-License-Identifier: MIT
"""The vector and math dialect ops mlir-air's examples write in herd bodies (weighted_rms_norm,
decode_ffn_swiglu, llama32_1b_int4's multi-launch builders): built, printed as MLIR parses them, and
run against numpy references computed here step by step (not with the emulator's helpers).
"""

import math
import os
import shutil
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
from ml_dtypes import bfloat16

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "designs"))
import emu_testlib  # noqa: E402,F401  (puts the emulated `air` first on sys.path)
from emu_testlib import design, memref, run  # noqa: E402

import air.emu as emu  # noqa: E402
from air.dialects import arith  # noqa: E402
from air.dialects import math as math_dialect  # noqa: E402
from air.dialects.air import MemorySpace, T, dma_memcpy_nd, herd  # noqa: E402
from air.dialects.func import FuncOp  # noqa: E402
from air.dialects.memref import AllocOp, subview  # noqa: E402
from air.dialects.scf import for_, yield_  # noqa: E402
from air.dialects.vector import (  # noqa: E402
    BroadcastOp,
    CombiningKind,
    fma,
    reduction,
    transfer_read,
    transfer_write,
)
from air.dialects.air import module_builder  # noqa: E402
from air.ir import (  # noqa: E402
    AffineDimExpr,
    AffineMap,
    AffineMapAttr,
    BF16Type,
    F32Type,
    IndexType,
    IntegerAttr,
    MemRefType,
    VectorType,
)

L1 = IntegerAttr.get(T.i32(), MemorySpace.L1)
EPS = 1e-5


def _identity():
    return AffineMapAttr.get(AffineMap.get_identity(1))


def _rms_fma_design(R, N, V):
    """Per row (weighted_rms_norm's structure): sum of bf16 squares accumulated lane-wise in an f32
    vector in L1, reduced <add> to f32, rstd = rsqrt(mean + eps) truncated to bf16, then
    y = fma(x, broadcast(rstd), w) written back, and the f32 sum of squares to a second output.
    """
    bf, f32 = BF16Type.get(), F32Type.get()
    vt, vf = VectorType.get([V], bf), VectorType.get([V], f32)

    def body(x, w, y, sums):
        @herd(name="vec", sizes=[1, 1], operands=[x, w, y, sums])
        def h(_tx, _ty, _sx, _sy, X, W, Y, S):
            lx = AllocOp(memref([R, N], bf, L1), [], [])
            lw = AllocOp(memref([N], bf, L1), [], [])
            ly = AllocOp(memref([R, N], bf, L1), [], [])
            ls = AllocOp(memref([R], f32, L1), [], [])
            acc = AllocOp(memref([V], f32, L1), [], [])
            dma_memcpy_nd(lx, X)
            dma_memcpy_nd(lw, W)
            c0 = arith.ConstantOp.create_index(0)
            z, zf = arith.ConstantOp(bf, 0.0), arith.ConstantOp(f32, 0.0)
            n_f, eps_f = arith.ConstantOp(f32, float(N)), arith.ConstantOp(f32, EPS)
            idm = _identity()
            for r in for_(R):
                transfer_write(None, BroadcastOp(vf, zf), acc, [c0], idm, [True])
                for j in for_(0, N, V):
                    v = transfer_read(vt, lx, [r, j], None, z, [True])
                    sq = arith.extf(vf, arith.mulf(v, v))
                    a = transfer_read(vf, acc, [c0], idm, zf, [True])
                    transfer_write(None, arith.addf(a, sq), acc, [c0], idm, [True])
                    yield_([])
                total = reduction(
                    f32, "add", transfer_read(vf, acc, [c0], idm, zf, [True])
                )
                rs = subview(ls.result, [r], [1], [1])
                transfer_write(
                    None,
                    BroadcastOp(VectorType.get([1], f32), total),
                    rs,
                    [c0],
                    idm,
                    [True],
                )
                rstd = math_dialect.rsqrt(arith.addf(arith.divf(total, n_f), eps_f))
                vr = BroadcastOp(vt, arith.truncf(bf, rstd))
                for j in for_(0, N, V):
                    v = transfer_read(vt, lx, [r, j], None, z, [True])
                    sw = subview(lw.result, [j], [V], [1])
                    vw = transfer_read(vt, sw, [c0], idm, z, [True])
                    transfer_write(None, fma(v, vr, vw), ly, [r, j], None, [True])
                    yield_([])
                yield_([])
            dma_memcpy_nd(Y, ly)
            dma_memcpy_nd(S, ls)

    return design(
        [memref([R, N], bf), memref([N], bf), memref([R, N], bf), memref([R], f32)],
        body,
    )


def _reference(x, w, V):
    """The design's arithmetic, step by step: bf16 products rounded to bf16, f32 lane sums in chunk
    order, the lanes reduced sequentially from lane 0, rsqrt in double rounded to f32, and the fma exact
    then rounded once to bf16 (Fraction: exact rationals)."""
    R, N = x.shape
    y = np.empty((R, N), bfloat16)
    sums = np.empty(R, np.float32)
    for r in range(R):
        lanes = [np.float32(0)] * V
        for j in range(0, N, V):
            for l in range(V):
                xv = Fraction(float(x[r, j + l]))
                sq = np.float32(bfloat16(float(xv * xv)))
                lanes[l] = np.float32(lanes[l] + sq)
        t = lanes[0]
        for l in range(1, V):
            t = np.float32(t + lanes[l])
        sums[r] = t
        mean = np.float32(t / np.float32(N))
        rstd = np.float32(1.0 / math.sqrt(float(np.float32(mean + np.float32(EPS)))))
        rb = Fraction(float(bfloat16(rstd)))
        for k in range(N):
            exact = Fraction(float(x[r, k])) * rb + Fraction(float(w[k]))
            y[r, k] = bfloat16(float(exact))  # exact in a double for these magnitudes
    return y, sums


def test_transfer_arith_fma_reduction_rsqrt_in_a_herd_match_numpy():
    R, N, V = 4, 64, 16
    rng = np.random.default_rng(7)
    x = rng.uniform(-2, 2, (R, N)).astype(bfloat16)
    w = rng.uniform(0.5, 1.5, N).astype(bfloat16)
    outs, _ = run(
        _rms_fma_design(R, N, V),
        x,
        w,
        np.zeros((R, N), bfloat16),
        np.zeros(R, np.float32),
    )
    y = outs[2].reshape(R, N)
    ref_y, ref_s = _reference(x, w, V)
    np.testing.assert_array_equal(outs[3], ref_s)
    np.testing.assert_array_equal(y.astype(np.float32), ref_y.astype(np.float32))
    # the fma is fused: rounding x * rstd to bf16 first gives other values on these data
    rb = bfloat16(1.0 / math.sqrt(float(ref_s[0]) / N + EPS))
    unfused = (
        (x[0].astype(np.float32) * np.float32(rb)).astype(bfloat16).astype(np.float32)
        + w.astype(np.float32)
    ).astype(bfloat16)
    assert np.any(unfused != ref_y[0])


def _one_vector(fn, in_type, out_type, n_in, n_out, V):
    """A 1x1 herd: read V lanes of the input (L1 copy), out = fn(vector value), written from lane 0."""

    def body(a, b):
        @herd(name="one", sizes=[1, 1], operands=[a, b])
        def h(_tx, _ty, _sx, _sy, A, B):
            la = AllocOp(memref([n_in], in_type, L1), [], [])
            lb = AllocOp(memref([n_out], out_type, L1), [], [])
            dma_memcpy_nd(la, A)
            c0 = arith.ConstantOp.create_index(0)
            pad = arith.ConstantOp(in_type, -7.0)
            fn(la, lb, c0, pad)
            dma_memcpy_nd(B, lb)

    return design([memref([n_in], in_type), memref([n_out], out_type)], body)


def test_reduction_is_sequential_from_lane_0():
    """2^24 + 1 rounds back to 2^24 in f32 (half to even), so lane 0 first absorbs every 1 and the last
    lane cancels it: 0. A pairwise tree would give 14."""
    f32 = F32Type.get()
    V = 16
    vf = VectorType.get([V], f32)

    def fn(la, lb, c0, pad):
        v = transfer_read(vf, la, [c0], _identity(), pad, [True])
        s = reduction(f32, CombiningKind.ADD, v)
        m = reduction(f32, CombiningKind.MAXIMUMF, v, acc=s)
        transfer_write(
            None,
            BroadcastOp(VectorType.get([2], f32), s),
            lb,
            [c0],
            _identity(),
            [True],
        )
        c1 = arith.ConstantOp.create_index(1)
        transfer_write(
            None,
            BroadcastOp(VectorType.get([1], f32), m),
            lb,
            [c1],
            _identity(),
            [True],
        )

    a = np.ones(V, np.float32)
    a[0], a[-1] = 2.0**24, -(2.0**24)
    outs, _ = run(_one_vector(fn, f32, f32, V, 2, V), a, np.zeros(2, np.float32))
    assert outs[1].tolist() == [0.0, 2.0**24]


def test_fma_is_fused_where_float64_double_rounding_is_not():
    """a * b + c = 1 + 2^-23 + 2^-24 - 2^-60 exactly: just below the halfway point, so f32 gives
    1 + 2^-23; the sum rounded to a double first lands on the halfway point, which ties to 1 + 2^-22.
    """
    f32 = F32Type.get()
    vf = VectorType.get([1], f32)
    a = np.float32(1 + 2.0**-18)
    b = np.float32(2.0**-24 * (1 - 2.0**-18))
    c = np.float32(1 + 2.0**-23)

    def fn(la, lb, c0, pad):
        vs = [
            transfer_read(
                vf, la, [arith.ConstantOp.create_index(i)], _identity(), pad, [True]
            )
            for i in range(3)
        ]
        transfer_write(None, fma(*vs), lb, [c0], _identity(), [True])

    outs, _ = run(
        _one_vector(fn, f32, f32, 3, 1, 1),
        np.array([a, b, c], np.float32),
        np.zeros(1, np.float32),
    )
    exact = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    assert exact == 1 + Fraction(1, 2**23) + Fraction(1, 2**24) - Fraction(1, 2**60)
    assert outs[1][0] == np.float32(1 + 2.0**-23)
    assert np.float32(float(a) * float(b) + float(c)) == np.float32(1 + 2.0**-22)


def test_tanh_and_exp_of_bf16_vectors_and_out_of_bounds_lanes():
    """math.tanh / math.exp element-wise on bf16, rounded once to bf16; a transfer_read with in_bounds
    false past the end of the memref gives the padding, the transfer_write skips those lanes.
    """
    bf = BF16Type.get()
    V, n = 8, 12
    vt = VectorType.get([V], bf)

    def fn(la, lb, c0, pad):
        c8 = arith.ConstantOp.create_index(8)
        v0 = transfer_read(vt, la, [c0], _identity(), pad, [True])
        v1 = transfer_read(
            vt, la, [c8], _identity(), pad, [False]
        )  # lanes 12..15 are padding
        transfer_write(None, math_dialect.tanh(v0), lb, [c0], _identity(), [True])
        e = math_dialect.exp(v1)
        transfer_write(None, e, lb, [c8], _identity(), [True])  # 12..15: exp(padding)
        c16 = arith.ConstantOp.create_index(16)
        transfer_write(None, e, lb, [c16], _identity(), [False])  # lanes 4..7 skipped

    a = np.linspace(-3, 3, n).astype(bfloat16)
    outs, _ = run(_one_vector(fn, bf, bf, n, n + 8, V), a, np.zeros(n + 8, bfloat16))
    got = outs[1].astype(np.float64)
    want = [math.tanh(float(v)) for v in a[:8]]
    want += [math.exp(float(v)) for v in a[8:12]]
    want += [math.exp(-7.0)] * 4
    want += [math.exp(float(v)) for v in a[8:12]]
    assert got.tolist() == [float(bfloat16(v)) for v in want]


def _refusal(build):
    with pytest.raises(emu.UnsupportedError) as e:
        build()
    text = str(e.value)
    assert "\n" not in text and "not supported by the emulator" in text
    return text


def test_unsupported_vector_and_math_ops_are_refused_in_one_line():
    text = _refusal(
        lambda: __import__("air.dialects.vector", fromlist=["shuffle"]).shuffle
    )
    assert "air.dialects.vector.shuffle" in text
    with pytest.raises(emu.UnsupportedError, match="air.dialects.math.log1p"):
        exec("from air.dialects.math import log1p", {})
    with pytest.raises(emu.UnsupportedError, match="air.dialects.vector.contract"):
        exec("from air.dialects.vector import contract", {})

    f32, i32 = F32Type.get(), T.i32()

    def with_vector(fn, elt=f32):
        @module_builder
        def build():
            @FuncOp.from_py_func(
                MemRefType.get([16], elt, memory_space=L1), IndexType.get()
            )
            def f(m, i):
                pad = arith.ConstantOp(elt, 0)
                v = transfer_read(
                    VectorType.get([16], elt), m, [i], _identity(), pad, [True]
                )
                fn(v, m, i, pad)

        return build

    assert "<xor>" in _refusal(with_vector(lambda v, m, i, p: reduction(f32, "xor", v)))
    assert "integer vectors" in _refusal(
        with_vector(lambda v, m, i, p: reduction(i32, "add", v), i32)
    )
    assert "integer vector" in _refusal(
        with_vector(lambda v, m, i, p: arith.addi(v, v), i32)
    )
    assert "mask" in _refusal(
        with_vector(
            lambda v, m, i, p: transfer_write(
                None, v, m, [i], _identity(), [True], mask=v
            )
        )
    )

    def transposed():
        @module_builder
        def build():
            @FuncOp.from_py_func(
                MemRefType.get([4, 4], f32, memory_space=L1), IndexType.get()
            )
            def f(m, i):
                pad = arith.ConstantOp(f32, 0.0)
                swap = AffineMap.get(2, 0, [AffineDimExpr.get(0)])
                transfer_read(VectorType.get([4], f32), m, [i, i], swap, pad, [True])

        return build()

    assert "permutation map" in _refusal(transposed)


def test_in_bounds_true_past_the_end_is_an_execution_error():
    f32 = F32Type.get()
    vf = VectorType.get([4], f32)

    def fn(la, lb, c0, pad):
        c2 = arith.ConstantOp.create_index(2)
        transfer_write(
            None,
            transfer_read(vf, la, [c2], _identity(), pad, [True]),
            lb,
            [c0],
            _identity(),
            [True],
        )

    with pytest.raises(emu.DmaBoundsError, match="in_bounds = true"):
        run(
            _one_vector(fn, f32, f32, 4, 4, 4),
            np.ones(4, np.float32),
            np.zeros(4, np.float32),
        )


MLIR_OPT = shutil.which("mlir-opt-22") or shutil.which("mlir-opt")


@pytest.mark.skipif(
    MLIR_OPT is None, reason="mlir-opt is not installed (mlir-22-tools)"
)
def test_printed_vector_and_math_ops_parse_in_mlir_opt():
    """Both the custom and the generic form of every vector / math op the emulator builds parse and
    verify in stock mlir-opt, and give the same module."""
    bf, f32 = BF16Type.get(), F32Type.get()

    @module_builder
    def build():
        vt, vf = VectorType.get([16], bf), VectorType.get([16], f32)
        minor = AffineMapAttr.get(AffineMap.get(2, 0, [AffineDimExpr.get(1)]))

        @FuncOp.from_py_func(
            MemRefType.get([32], bf, memory_space=L1),
            MemRefType.get([4, 32], f32),
            IndexType.get(),
        )
        def f(a, b, j):
            c0 = arith.ConstantOp.create_index(0)
            z, zf = arith.ConstantOp(bf, 0.0), arith.ConstantOp(f32, 0.0)
            sa = subview(a, [j], [16], [1])
            x = transfer_read(vt, sa, [c0], _identity(), z, [True])
            y = transfer_read(vf, b, [c0, j], minor, zf, [False])
            e = arith.extf(vf, fma(x, x, x))
            s = reduction(f32, "add", e)
            s2 = reduction(f32, CombiningKind.MAXIMUMF, y, acc=s)
            r = math_dialect.rsqrt(s2)
            q = arith.mulf(math_dialect.exp(y), BroadcastOp(vf, r).result)
            transfer_write(None, q, b, [c0, j], minor, [False])
            t = arith.truncf(vt, arith.extf(vf, math_dialect.tanh(x)))
            transfer_write(None, t, sa, [c0], _identity(), [True])

    m = build()
    custom = str(m)
    generic = m.operation.get_asm(print_generic_op_form=True)
    for needle in (
        "vector.transfer_read %3[%0], %1 {in_bounds = [true]} : memref<16xbf16, strided<[1], offset: ?>, 2 : i32>, vector<16xbf16>",
        "vector.reduction <maximumf>, %",
        "vector.fma %",
        "math.rsqrt %",
    ):
        assert needle in custom, custom
    outs = []
    for text in (custom, generic):
        res = subprocess.run(
            [MLIR_OPT], input=text, capture_output=True, text=True, timeout=60
        )
        assert res.returncode == 0, res.stderr
        outs.append(res.stdout)
    assert outs[0] == outs[1]
