# SPDX-License-Identifier: MIT
"""The two smallest designs aircc compiles to a racy lock protocol (docs/emulator.md#aircc-lock-races):
one PE, a loop of `trips` over 16-word rows of an i32 array, a result sent back by DMA.

* `in_place`: each row filled into an L1 buffer, its first word incremented by the core, and the buffer
  sent back: out = in with out[16 t] + 1.
* `halves`: each row filled into an L1 buffer in two transfers of 8 words, and the core writing row + 1
  into a second buffer that is sent back: out = in + 1.
* `read_first` (one row a trip): the core copies the buffer's first word into its last before the
  row's fill lands, then the row is filled and sent back: out = in (the fill overwrites both words);
  `fill_first` is the same without the early access.
"""

from air.dialects import arith
from air.dialects.affine import apply as affine_apply
from air.dialects.air import (
    MemorySpace,
    T,
    dma_memcpy_nd,
    herd,
    launch,
    module_builder,
    segment,
)
from air.dialects.func import FuncOp
from air.dialects.memref import AllocOp, DeallocOp, load, store
from air.dialects.scf import for_, yield_
from air.ir import AffineMap, AffineSymbolExpr, IntegerAttr, MemRefType

ROW = 16


def _l1(words: int) -> MemRefType:
    return MemRefType.get(
        [words], T.i32(), memory_space=IntegerAttr.get(T.i32(), MemorySpace.L1)
    )


def _row(t, extra: int = 0):
    """The element offset of row t (plus `extra`)."""
    return affine_apply(
        AffineMap.get(0, 1, [AffineSymbolExpr.get(0) * ROW + extra]), [t]
    )


def _plus_one(v):
    return arith.AddIOp(v, arith.ConstantOp(T.i32(), 1))


def build(kind: str, trips: int):
    """The module of `kind` (in_place or halves) over `trips` rows: func @race(%in, %out)."""
    l3 = MemRefType.get([ROW * trips], T.i32())

    @module_builder
    def module():
        @FuncOp.from_py_func(l3, l3)
        def race(inp, out):
            @launch(operands=[inp, out])
            def launch_body(l_in, l_out):
                @segment(name="seg", operands=[l_in, l_out])
                def segment_body(s_in, s_out):
                    @herd(name="pe", sizes=[1, 1], operands=[s_in, s_out])
                    def herd_body(_tx, _ty, _sx, _sy, h_in, h_out):
                        for t in for_(0, trips):
                            BODIES[kind](t, h_in, h_out)
                            yield_([])

    return module()


def _in_place(t, h_in, h_out):
    buf = AllocOp(_l1(ROW), [], [])
    at = _row(t)
    dma_memcpy_nd(buf, h_in, src_offsets=[at], src_sizes=[ROW], src_strides=[1])
    first = arith.ConstantOp.create_index(0)
    store(_plus_one(load(buf, [first])), buf, [first])
    dma_memcpy_nd(h_out, buf, dst_offsets=[at], dst_sizes=[ROW], dst_strides=[1])
    DeallocOp(buf)


def _halves(t, h_in, h_out):
    half = ROW // 2
    buf, res = AllocOp(_l1(ROW), [], []), AllocOp(_l1(ROW), [], [])
    for piece in range(2):
        dma_memcpy_nd(
            buf,
            h_in,
            dst_offsets=[piece * half],
            dst_sizes=[half],
            dst_strides=[1],
            src_offsets=[_row(t, piece * half)],
            src_sizes=[half],
            src_strides=[1],
        )
    for e in for_(0, ROW):
        store(_plus_one(load(buf, [e])), res, [e])
        yield_([])
    dma_memcpy_nd(h_out, res, dst_offsets=[_row(t)], dst_sizes=[ROW], dst_strides=[1])
    DeallocOp(buf)
    DeallocOp(res)


def _read_first(t, h_in, h_out, early=True):
    buf = AllocOp(_l1(ROW), [], [])
    if early:
        first, last = (arith.ConstantOp.create_index(i) for i in (0, ROW - 1))
        store(load(buf, [first]), buf, [last])
    at = _row(t)
    dma_memcpy_nd(buf, h_in, src_offsets=[at], src_sizes=[ROW], src_strides=[1])
    dma_memcpy_nd(h_out, buf, dst_offsets=[at], dst_sizes=[ROW], dst_strides=[1])
    DeallocOp(buf)


BODIES = {
    "in_place": _in_place,
    "halves": _halves,
    "read_first": _read_first,
    "fill_first": lambda t, i, o: _read_first(t, i, o, early=False),
}


def expected(kind: str, inp):
    out = inp.copy()
    if kind == "in_place":
        out[::ROW] += 1
    elif kind == "halves":
        out += 1
    return out
