# SPDX-License-Identifier: MIT
"""memref.expand_shape / memref.collapse_shape, scf.if and Module.parse's refusal (the ops mlir-air's
int4 GEMV users reach: rms_qkv_int4_rope_multi.py, o_gemv_ffn_int4_fused.py, o_gemv_ffn_int4_multi.py).
Each op is run and its output checked against numpy's reshape or a plain Python expression, and each
refusal is tripped."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "designs"))
from emu_testlib import design, in_segment, memref, run  # noqa: E402

import air.emu as emu  # noqa: E402
from air.backend.xrt import XRTBackend  # noqa: E402
from air.dialects import arith  # noqa: E402
from air.dialects import scf  # noqa: E402
from air.dialects.air import (  # noqa: E402
    MemorySpace,
    T,
    dma_memcpy_nd,
    herd,
    launch,
    segment,
)
from air.dialects.memref import (  # noqa: E402
    AllocOp,
    collapse_shape,
    expand_shape,
    subview,
)
from air.dialects.memref import load as memref_load, store as memref_store  # noqa: E402
from air.dialects.scf import yield_  # noqa: E402
from air.ir import (  # noqa: E402
    InsertionPoint,
    IntegerAttr,
    MemRefType,
    Module,
    ShapedType,
    StridedLayoutAttr,
)

L1 = IntegerAttr.get(T.i32(), MemorySpace.L1)
L2 = IntegerAttr.get(T.i32(), MemorySpace.L2)


def idx(i):
    return arith.ConstantOp.create_index(i)


# --------------------------------------------------------------------------- expand / collapse
def test_reshaped_l3_arguments_address_the_same_bytes_as_numpy_reshape():
    # rms_qkv_int4_rope_multi's pattern: the launch reshapes its L3 arguments and hands the views to the
    # segment; a DMA with explicit offsets then addresses the view's dimensions.
    def body(a, b, out1, out2):
        @launch(operands=[a, b, out1, out2])
        def lb(la, lb_, lo1, lo2):
            a3 = expand_shape(memref([2, 3, 4]), la, [[0, 1, 2]], [], [2, 3, 4])
            b1 = collapse_shape(memref([24]), lb_, [[0, 1]])

            @segment(name="seg", operands=[a3, b1, lo1, lo2])
            def sb(sa, sbb, so1, so2):
                t1 = AllocOp(memref([3, 2], space=L2), [], [])
                # a3[1, :, 1:3]: offsets in the expanded view's dimensions
                dma_memcpy_nd(
                    t1,
                    sa,
                    src_offsets=[1, 0, 1],
                    src_sizes=[1, 3, 2],
                    src_strides=[12, 4, 1],
                )
                dma_memcpy_nd(so1, t1)
                t2 = AllocOp(memref([7], space=L2), [], [])
                dma_memcpy_nd(t2, sbb, src_offsets=[5], src_sizes=[7], src_strides=[1])
                dma_memcpy_nd(so2, t2)

                @herd(name="idle", sizes=[1, 1])
                def idle(_tx, _ty, _sx, _sy):
                    pass

    m = design([memref([24]), memref([4, 6]), memref([6]), memref([7])], body)
    a = np.arange(100, 124, dtype=np.int32)
    b = np.arange(200, 224, dtype=np.int32).reshape(4, 6)
    (_, _, o1, o2), _ = run(m, a, b, np.zeros(6, np.int32), np.zeros(7, np.int32))
    np.testing.assert_array_equal(o1, a.reshape(2, 3, 4)[1, :, 1:3].reshape(-1))
    np.testing.assert_array_equal(o2, b.reshape(-1)[5:12])


def test_expand_and_collapse_of_a_strided_view_read_what_numpy_reads():
    # A subview (offset and strides of its own) expanded, and a contiguous one collapsed: each element
    # loaded through the reshaped view against numpy's reshape of the same slice.
    def seg(a, out):
        @herd(name="h", sizes=[1, 1], operands=[a, out])
        def hb(_tx, _ty, _sx, _sy, ha, ho):
            buf = AllocOp(memref([4, 6], space=L1), [], [])
            dma_memcpy_nd(buf, ha)
            res = AllocOp(memref([24], space=L1), [], [])
            rows = subview(buf.result, [1, 0], [2, 6], [1, 1])  # rows 1..2
            assert rows.type.get_strides_and_offset() == ([6, 1], 6)
            ex = expand_shape(
                MemRefType.get(
                    [2, 2, 3], T.i32(), StridedLayoutAttr.get(6, [6, 3, 1]), L1
                ),
                rows,
                [[0], [1, 2]],
                [],
                [2, 2, 3],
            )
            k = 0
            for i in range(2):
                for j in range(2):
                    for m in range(3):
                        v = memref_load(ex, [idx(i), idx(j), idx(m)])
                        memref_store(v, res, [idx(k)])
                        k += 1
            co = collapse_shape(
                MemRefType.get([12], T.i32(), StridedLayoutAttr.get(6, [1]), L1),
                rows,
                [[0, 1]],
            )
            for n in range(12):
                memref_store(memref_load(co, [idx(n)]), res, [idx(12 + n)])
            dma_memcpy_nd(ho, res)

    m = in_segment([memref([4, 6]), memref([24])], seg)
    a = np.arange(24, dtype=np.int32).reshape(4, 6) * 7 + 3
    (_, out), _ = run(m, a, np.zeros(24, np.int32))
    want = np.concatenate(
        [a[1:3].reshape(2, 2, 3).reshape(-1), a[1:3].reshape(-1)]
    ).astype(np.int32)
    np.testing.assert_array_equal(out, want)


def _trace(fn, *arg_types):
    """Build fn(*args) in an entry function (only tracing: the op's verifier runs at build)."""
    design(list(arg_types), fn)


def test_expand_and_collapse_refuse_what_mlirs_verifier_refuses():
    # sizes of a group that do not multiply to the source dimension
    with pytest.raises(
        emu.TraceError, match="product 12, but source dimension 0 is 10"
    ):
        _trace(
            lambda a: expand_shape(memref([2, 6]), a, [[0, 1]], [], [2, 6]),
            memref([10]),
        )
    # a result layout other than the one MLIR infers
    with pytest.raises(emu.TraceError, match="expected expanded type"):
        _trace(
            lambda a: expand_shape(
                MemRefType.get([2, 5], T.i32(), StridedLayoutAttr.get(0, [5, 1])),
                a,
                [[0, 1]],
                [],
                [2, 5],
            ),
            memref([10]),
        )
    # groups out of order
    with pytest.raises(emu.TraceError, match="in order"):
        _trace(
            lambda a: collapse_shape(memref([6, 4]), a, [[1, 0], [2]]),
            memref([2, 3, 4]),
        )

    # a group of non-contiguous dimensions: the first two columns of a 4x6 buffer, collapsed (rows
    # 6 apart, 2 elements each); every other column would be contiguous at stride 2 (collapsible)
    def strided(a):
        every_other = subview(a, [0, 0], [4, 3], [1, 2])
        collapse_shape(
            MemRefType.get([12], T.i32(), StridedLayoutAttr.get(0, [2])),
            every_other,
            [[0, 1]],
        )
        cols = subview(a, [0, 0], [4, 2], [1, 1])
        collapse_shape(
            MemRefType.get([8], T.i32(), StridedLayoutAttr.get(0, [1])), cols, [[0, 1]]
        )

    with pytest.raises(emu.TraceError, match="not contiguous.*undefined behavior"):
        _trace(strided, memref([4, 6]))


def test_expand_shape_refuses_dynamic_shapes():
    n = ShapedType.get_dynamic_size()
    with pytest.raises(emu.UnsupportedError, match="only static shapes"):
        _trace(
            lambda a: expand_shape(memref([2, 5]), a, [[0, 1]], [idx(2)], [n, 5]),
            memref([10]),
        )


# --------------------------------------------------------------------------- scf.if
def _if_design(n_pe):
    """Each PE of a [n_pe, 1] herd writes two values: an scf.if's result (tx * 10 when tx is even, else
    100 + tx, through yield), and, only for tx == n_pe - 1, a 7 over the 0 stored first (an scf.if with
    no else)."""

    def seg(out):
        l2 = AllocOp(memref([n_pe, 2], space=L2), [], [])

        @herd(name="h", sizes=[n_pe, 1], operands=[l2])
        def hb(tx, _ty, _sx, _sy, l2h):
            b = AllocOp(memref([2], space=L1), [], [])
            two = idx(2)
            even = arith.CmpIOp(
                arith.CmpIPredicate.eq, arith.remui(tx, two), idx(0)
            ).result
            txi = arith.IndexCastOp(T.i32(), tx).result
            pick = scf.IfOp(even, [T.i32()], has_else=True)
            with InsertionPoint(pick.then_block):
                yield_([arith.muli(txi, arith.ConstantOp(T.i32(), 10).result)])
            with InsertionPoint(pick.else_block):
                yield_([arith.addi(txi, arith.ConstantOp(T.i32(), 100).result)])
            memref_store(pick.results[0], b, [idx(0)])
            memref_store(arith.ConstantOp(T.i32(), 0).result, b, [idx(1)])
            last = arith.CmpIOp(arith.CmpIPredicate.eq, tx, idx(n_pe - 1)).result
            only = scf.IfOp(last)
            with InsertionPoint(only.then_block):
                memref_store(arith.ConstantOp(T.i32(), 7).result, b, [idx(1)])
                yield_([])
            dma_memcpy_nd(
                l2h, b, dst_offsets=[tx, 0], dst_sizes=[1, 2], dst_strides=[2, 1]
            )

        dma_memcpy_nd(out, l2)

    return in_segment([memref([n_pe * 2])], seg)


def test_scf_if_runs_the_branch_its_condition_picks():
    n = 4
    (out,), _ = run(_if_design(n), np.zeros(2 * n, np.int32))
    want = []
    for tx in range(n):
        want += [tx * 10 if tx % 2 == 0 else 100 + tx, 7 if tx == n - 1 else 0]
    np.testing.assert_array_equal(out, np.array(want, np.int32))


def test_scf_if_refusals():
    c32 = lambda: arith.ConstantOp(T.i32(), 1).result  # noqa: E731
    # the condition must be an i1
    with pytest.raises(emu.TraceError, match="must be i1"):
        _trace(lambda a: scf.IfOp(c32()), memref([1]))
    # results need an else region
    with pytest.raises(emu.TraceError, match="must have an else region"):
        _trace(
            lambda a: scf.IfOp(
                arith.CmpIOp(arith.CmpIPredicate.eq, c32(), c32()).result, [T.i32()]
            ),
            memref([1]),
        )

    # a branch that yields another type than the op's result: refused when compiled
    def seg(a):
        @herd(name="h", sizes=[1, 1])
        def hb(tx, _ty, _sx, _sy):
            cond = arith.CmpIOp(arith.CmpIPredicate.eq, tx, idx(0)).result
            op = scf.IfOp(cond, [T.i32()], has_else=True)
            with InsertionPoint(op.then_block):
                yield_([idx(1)])
            with InsertionPoint(op.else_block):
                yield_([arith.ConstantOp(T.i32(), 2).result])

    with pytest.raises(emu.TraceError, match=r"then block yields \(index\)"):
        XRTBackend().compile(in_segment([memref([1])], seg))


def test_a_transfer_under_scf_if_is_refused_as_not_modelled():
    # the interpreter would run it, but the NPU2 resource model does not count conditional transfers
    def seg(out):
        l2 = AllocOp(memref([2], space=L2), [], [])

        @herd(name="h", sizes=[2, 1], operands=[l2])
        def hb(tx, _ty, _sx, _sy, l2h):
            b = AllocOp(memref([1], space=L1), [], [])
            memref_store(arith.ConstantOp(T.i32(), 5).result, b, [idx(0)])
            op = scf.IfOp(arith.CmpIOp(arith.CmpIPredicate.eq, tx, idx(0)).result)
            with InsertionPoint(op.then_block):
                dma_memcpy_nd(l2h, b, dst_offsets=[0], dst_sizes=[1], dst_strides=[1])
                yield_([])

        dma_memcpy_nd(out, l2)

    with pytest.raises(emu.ResourceError, match="not modelled.*under the scf.if"):
        XRTBackend().compile(in_segment([memref([2])], seg))


# --------------------------------------------------------------------------- Module.parse
def test_module_parse_refuses_naming_what_a_parser_would_need():
    m = _if_design(2)
    text = str(m)
    names = set()
    m.operation.walk(lambda op: names.add(op.OPERATION_NAME))
    dialects = sorted({n.split(".")[0] for n in names} - {"builtin"})
    with pytest.raises(emu.UnsupportedError) as e:
        Module.parse(text)
    msg = str(e.value)
    assert "not modelled" in msg and "\n" not in msg
    assert f"({', '.join(dialects)})" in msg
