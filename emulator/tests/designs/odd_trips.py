# SPDX-License-Identifier: MIT
"""The smallest design whose L1 buffers aircc ping-pongs in a loop of a chosen trip count (issue 51, "what
it shows": mlir-air pads odd trip counts of ping-ponged loops to even ones on NPU2).

One PE and a loop of `trips` over 16-word rows of two i32 arrays: each trip fills an L1 buffer from row t
of `a` and one from row t of `b` by DMA, the core adds them word by word into a third L1 buffer, and that
buffer goes back to row t of `out` by DMA: out = a + b, the shape of mlir-air's EltwiseAdd_bf16 on one
tile. The three buffers are allocated inside the loop, so aircc's ping-pong transform takes the loop
(unrolled by 2, each buffer given a second slot); for an odd trip count the unroll leaves a one-trip
epilogue (docs/emulator.md#odd-trip-counts).
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


def _l1() -> MemRefType:
    return MemRefType.get(
        [ROW], T.i32(), memory_space=IntegerAttr.get(T.i32(), MemorySpace.L1)
    )


def _row(t):
    return affine_apply(AffineMap.get(0, 1, [AffineSymbolExpr.get(0) * ROW]), [t])


def build(trips: int):
    """func @add(%a, %b, %out), each [16 * trips] i32: out = a + b, one row per trip."""
    l3 = MemRefType.get([ROW * trips], T.i32())

    @module_builder
    def module():
        @FuncOp.from_py_func(l3, l3, l3)
        def add(a, b, out):
            @launch(operands=[a, b, out])
            def launch_body(l_a, l_b, l_out):
                @segment(name="seg", operands=[l_a, l_b, l_out])
                def segment_body(s_a, s_b, s_out):
                    @herd(name="pe", sizes=[1, 1], operands=[s_a, s_b, s_out])
                    def herd_body(_tx, _ty, _sx, _sy, h_a, h_b, h_out):
                        for t in for_(0, trips):
                            at = _row(t)
                            x, y, z = (AllocOp(_l1(), [], []) for _ in range(3))
                            for buf, src in ((x, h_a), (y, h_b)):
                                dma_memcpy_nd(
                                    buf,
                                    src,
                                    src_offsets=[at],
                                    src_sizes=[ROW],
                                    src_strides=[1],
                                )
                            for e in for_(0, ROW):
                                store(arith.AddIOp(load(x, [e]), load(y, [e])), z, [e])
                                yield_([])
                            dma_memcpy_nd(
                                h_out,
                                z,
                                dst_offsets=[at],
                                dst_sizes=[ROW],
                                dst_strides=[1],
                            )
                            for buf in (x, y, z):
                                DeallocOp(buf)
                            yield_([])

    return module()


def inputs(trips: int):
    """(a, b): distinct words in every row, so a stale or missing row shows."""
    import numpy as np

    n = ROW * trips
    a = np.arange(n, dtype=np.int32) * 3 + 1
    b = np.arange(n, dtype=np.int32) * 1000 + 7
    return a, b
