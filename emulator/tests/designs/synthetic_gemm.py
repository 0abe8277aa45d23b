# SPDX-License-Identifier: MIT
"""A GEMM-shaped design with the op counts of the int4 GEMM at M = N = K = 2048 on a full
8 x 4 herd with 64 x 64 tiles and tile_k_l1 = 64: 32 x 32 x 32 = 32,768 kernel calls and
65,536 L2 -> L1 DMAs, plus the L3 <-> L2 traffic.  The kernels do nothing (noop1 / noop3 in
emu_kernels.cc), so a run measures the emulator's own overhead per operation."""

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
from air.dialects.func import CallOp, FuncOp
from air.dialects.memref import AllocOp, DeallocOp
from air.dialects.scf import for_, yield_
from air.ir import (
    AffineMap,
    AffineSymbolExpr,
    BF16Type,
    IntegerAttr,
    MemRefType,
    StringAttr,
)

M = N = K = 2048
TM = TN = TK1 = 64
TK2 = 256
HM, HN = 8, 4


def scaled(v, factor):
    return affine_apply(AffineMap.get(0, 1, [AffineSymbolExpr.get(0) * factor]), [v])


@module_builder
def build_module(kernel_object="emu_kernels.o"):
    bf16 = BF16Type.get()
    l1 = IntegerAttr.get(T.i32(), MemorySpace.L1)
    l2 = IntegerAttr.get(T.i32(), MemorySpace.L2)
    a3, b3, c3 = (MemRefType.get(s, bf16) for s in ([M, K], [K, N], [M, N]))
    a2 = MemRefType.get([HM * TM, TK2], bf16, memory_space=l2)
    b2 = MemRefType.get([TK2, HN * TN], bf16, memory_space=l2)
    c2 = MemRefType.get([HM * TM, HN * TN], bf16, memory_space=l2)
    a1 = MemRefType.get([TM, TK1], bf16, memory_space=l1)
    b1 = MemRefType.get([TK1, TN], bf16, memory_space=l1)
    c1 = MemRefType.get([TM, TN], bf16, memory_space=l1)
    mac = FuncOp("noop3", ([a1, b1, c1], []), visibility="private")
    zero = FuncOp("noop1", ([c1], []), visibility="private")
    for f in (mac, zero):
        f.attributes["link_with"] = StringAttr.get(kernel_object)

    @FuncOp.from_py_func(a3, b3, c3)
    def gemm(a, b, c):
        @launch(operands=[a, b, c], sizes=[M // (TM * HM), N // (TN * HN)])
        def launch_body(i, j, _si, _sj, la, lb, lc):
            @segment(name="seg", operands=[i, j, la, lb, lc])
            def segment_body(si, sj, sa, sb, sc):
                l2a, l2b, l2c = (
                    AllocOp(a2, [], []),
                    AllocOp(b2, [], []),
                    AllocOp(c2, [], []),
                )
                row, col = scaled(si, HM * TM), scaled(sj, HN * TN)
                for kk in for_(0, K // TK2):
                    k0 = scaled(kk, TK2)
                    dma_memcpy_nd(
                        l2a,
                        sa,
                        src_offsets=[row, k0],
                        src_sizes=[HM * TM, TK2],
                        src_strides=[K, 1],
                    )
                    dma_memcpy_nd(
                        l2b,
                        sb,
                        src_offsets=[k0, col],
                        src_sizes=[TK2, HN * TN],
                        src_strides=[N, 1],
                    )

                    @herd(name="gemm", sizes=[HM, HN], operands=[l2a, l2b, l2c])
                    def herd_body(x, y, _sx, _sy, ha, hb, hc):
                        ta, tb, tc = (
                            AllocOp(a1, [], []),
                            AllocOp(b1, [], []),
                            AllocOp(c1, [], []),
                        )
                        CallOp(zero, [tc])
                        r, q = scaled(x, TM), scaled(y, TN)
                        for k1 in for_(0, TK2 // TK1):
                            ko = scaled(k1, TK1)
                            dma_memcpy_nd(
                                ta,
                                ha,
                                src_offsets=[r, ko],
                                src_sizes=[TM, TK1],
                                src_strides=[TK2, 1],
                            )
                            dma_memcpy_nd(
                                tb,
                                hb,
                                src_offsets=[ko, q],
                                src_sizes=[TK1, TN],
                                src_strides=[HN * TN, 1],
                            )
                            CallOp(mac, [ta, tb, tc])
                            yield_([])
                        dma_memcpy_nd(
                            hc,
                            tc,
                            dst_offsets=[r, q],
                            dst_sizes=[TM, TN],
                            dst_strides=[HN * TN, 1],
                        )
                        for t in (ta, tb, tc):
                            DeallocOp(t)

                    yield_([])
                dma_memcpy_nd(
                    sc,
                    l2c,
                    dst_offsets=[row, col],
                    dst_sizes=[HM * TM, HN * TN],
                    dst_strides=[N, 1],
                )
                for t in (l2a, l2b, l2c):
                    DeallocOp(t)
