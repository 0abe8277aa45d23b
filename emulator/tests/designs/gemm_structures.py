# SPDX-License-Identifier: MIT
"""The data movement of the int4 GEMM in three structures, for the resource model's tests (no kernels:
only what aircc's passes see).

* "proven": mlir-air's bf16_x_bfp16 GEMM structure, the product's today: A copied into L2 as rows
  ([herd_m, 1, tile_m, tile_k_l2]), re-laid into 8x8 blocks on the 6-D read to L1;
* "relaid_fill": the product's earlier fill, which re-laid A into 8x8 blocks on the memtile's write
  side ([herd_m, tile_m/8, K'/8, 8, 8], dst strides [8*K', 8, 64, 1]) so each PE's chunk read was 3-D;
* "resident": the product's earlier resident A: all of K in L2 once, re-sent to the herd by herd_m
  sibling refeed loops (one air.channel.put each, n_per_segment trips) on that one buffer.
"""

from air.dialects.affine import apply as affine_apply
from air.dialects.air import (
    Channel,
    ChannelGet,
    ChannelPut,
    MemorySpace,
    T,
    dma_memcpy_nd,
    herd,
    launch,
    module_builder,
    segment,
)
from air.dialects.func import FuncOp
from air.dialects.memref import AllocOp
from air.dialects.scf import for_, yield_
from air.ir import AffineMap, AffineSymbolExpr, BF16Type, IntegerAttr, MemRefType

B = 8  # mmul block edge


def scaled(v, factor):
    return affine_apply(AffineMap.get(0, 1, [AffineSymbolExpr.get(0) * factor]), [v])


@module_builder
def build(structure, m=512, k=256, n=256, tm=64, tn=64, tk1=64, hm=8, hn=4, nps=1):
    bf16 = BF16Type.get()
    l1 = IntegerAttr.get(T.i32(), MemorySpace.L1)
    l2 = IntegerAttr.get(T.i32(), MemorySpace.L2)
    chunks = k // tk1
    if structure == "proven":
        a2 = MemRefType.get([hm, 1, tm, k], bf16, memory_space=l2)
    else:
        a2 = MemRefType.get([hm, tm // B, k // B, B, B], bf16, memory_space=l2)
    w2 = MemRefType.get([hn, chunks, tn * tk1], bf16, memory_space=l2)
    c2 = MemRefType.get([hm, hn, tm, tn], bf16, memory_space=l2)
    a1 = MemRefType.get([tm // B, tk1 // B, B, B], bf16, memory_space=l1)
    w1 = MemRefType.get([tn * tk1], bf16, memory_space=l1)
    c1 = MemRefType.get([tm * tn], bf16, memory_space=l1)
    if structure == "resident":
        Channel("a_refeed", size=[hm, 1], broadcast_shape=[hm, hn])

    @FuncOp.from_py_func(
        MemRefType.get([m, k], bf16),
        MemRefType.get([n // tn, chunks, tn * tk1], bf16),
        MemRefType.get([m, n], bf16),
    )
    def gemm(a, w, c):
        @launch(operands=[a, w, c], sizes=[m // (hm * tm), n // (hn * tn * nps)])
        def lb(bm, bn, _sm, _sn, la, lw, lc):
            @segment(name="seg", operands=[bm, bn, la, lw, lc])
            def sb(bm_s, bn_s, la_s, lw_s, lc_s):
                row0 = scaled(bm_s, hm * tm)
                l2a, l2w, l2c = (AllocOp(t, [], []) for t in (a2, w2, c2))
                if structure == "proven":
                    dma_memcpy_nd(
                        l2a,
                        la_s,
                        src_offsets=[0, 0, row0, 0],
                        src_sizes=[hm, 1, tm, k],
                        src_strides=[k * tm, k, k, 1],
                    )
                else:  # rows into 8x8 blocks on the memtile's write side
                    dma_memcpy_nd(
                        l2a,
                        la_s,
                        dst_offsets=[0, 0, 0, 0],
                        dst_sizes=[hm * tm // B, B, k // B, B],
                        dst_strides=[B * k, B, B * B, 1],
                        src_offsets=[row0, 0],
                        src_sizes=[hm * tm, k],
                        src_strides=[k, 1],
                    )
                if structure == "resident":
                    for x in range(hm):
                        for _ in for_(0, nps):
                            ChannelPut(
                                "a_refeed",
                                l2a,
                                indices=[x, 0],
                                offsets=[x, 0, 0, 0],
                                sizes=[1, chunks, tm // B, tk1 * B],
                                strides=[tm * k, tk1 * B, B * k, 1],
                            )
                            yield_([])
                for nb in for_(0, nps):
                    dma_memcpy_nd(
                        l2w,
                        lw_s,
                        src_offsets=[scaled(bn_s, hn), 0, 0],
                        src_sizes=[hn, chunks, tn * tk1],
                        src_strides=[chunks * tn * tk1, tn * tk1, 1],
                    )
                    operands = [l2w] if structure == "resident" else [l2w, l2a]

                    @herd(name="herd_0", sizes=[hm, hn], operands=operands)
                    def hb(x, y, _sx, _sy, l2w_h, *l2a_h):
                        a_chunk, w_rec = AllocOp(a1, [], []), AllocOp(w1, [], [])
                        for ci in for_(0, chunks):
                            if structure == "resident":
                                ChannelGet("a_refeed", a_chunk, indices=[x, y])
                            elif structure == "proven":
                                dma_memcpy_nd(
                                    a_chunk,
                                    l2a_h[0],
                                    src_offsets=[x, 0, 0, 0, 0, scaled(ci, tk1)],
                                    src_sizes=[1, 1, tm // B, tk1 // B, B, B],
                                    src_strides=[tm * k, tm * k, B * k, B, k, 1],
                                )
                            else:
                                dma_memcpy_nd(
                                    a_chunk,
                                    l2a_h[0],
                                    src_offsets=[x, 0, scaled(ci, tk1 * B)],
                                    src_sizes=[1, tm // B, tk1 * B],
                                    src_strides=[tm * k, B * k, 1],
                                )
                            dma_memcpy_nd(
                                w_rec,
                                l2w_h,
                                src_offsets=[y, ci, 0],
                                src_sizes=[1, 1, tn * tk1],
                                src_strides=[chunks * tn * tk1, tn * tk1, 1],
                            )
                            yield_([])

                    @herd(name="herd_0", sizes=[hm, hn], operands=[l2c])
                    def hd(x, y, _sx, _sy, l2c_h):
                        out = AllocOp(c1, [], [])
                        dma_memcpy_nd(
                            l2c_h,
                            out,
                            dst_offsets=[x, y, 0, 0],
                            dst_sizes=[1, 1, tm, tn],
                            dst_strides=[hn * tm * tn, tm * tn, tn, 1],
                        )

                    dma_memcpy_nd(
                        lc_s,
                        l2c,
                        dst_offsets=[row0, scaled(bn_s, hn * tn)],
                        dst_sizes=[hm * tm, hn * tn],
                        dst_strides=[n, 1],
                        src_offsets=[0, 0, 0, 0],
                        src_sizes=[hm, tm, hn, tn],
                        src_strides=[hn * tm * tn, tn, tm * tn, 1],
                    )
                    yield_([])
