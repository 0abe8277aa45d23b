# SPDX-License-Identifier: MIT
"""bf16 element-wise add on a 2x2 herd, in plain mlir-air style.

A, B [4, 256] bf16 in L3; each of the 4 PEs takes one row: L3 -> L2 -> L1 by
DMA, an external kernel (add_bf16_256 in emu_kernels.cc, linked as
"emu_kernels.o") adds, the result goes L1 -> L2 -> L3.
"""

import numpy as np
from ml_dtypes import bfloat16

from air.backend.xrt_runner import XRTRunner
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
from air.ir import (
    AffineConstantExpr,
    AffineExpr,
    AffineMap,
    AffineSymbolExpr,
    BF16Type,
    IntegerAttr,
    MemRefType,
    StringAttr,
    UnitAttr,
)

ROWS, COLS = 4, 256


@module_builder
def build_module(kernel_object="emu_kernels.o"):
    bf16 = BF16Type.get()
    l2 = IntegerAttr.get(T.i32(), MemorySpace.L2)
    l1 = IntegerAttr.get(T.i32(), MemorySpace.L1)
    l3_ty = MemRefType.get([ROWS, COLS], bf16)
    l2_ty = MemRefType.get([ROWS, COLS], bf16, memory_space=l2)
    l1_ty = MemRefType.get([COLS], bf16, memory_space=l1)

    add = FuncOp("add_bf16_256", ([l1_ty, l1_ty, l1_ty], []), visibility="private")
    add.attributes["link_with"] = StringAttr.get(kernel_object)
    add.attributes["llvm.emit_c_interface"] = UnitAttr.get()

    # PE (x, y) takes row x * 2 + y.
    row_of = AffineMap.get(
        0,
        2,
        [
            AffineExpr.get_add(
                AffineExpr.get_mul(AffineSymbolExpr.get(0), AffineConstantExpr.get(2)),
                AffineSymbolExpr.get(1),
            )
        ],
    )

    @FuncOp.from_py_func(l3_ty, l3_ty, l3_ty)
    def add_2x2(arg_a, arg_b, arg_c):
        @launch(operands=[arg_a, arg_b, arg_c])
        def launch_body(la, lb, lc):
            @segment(name="seg", operands=[la, lb, lc])
            def segment_body(sa, sb, sc):
                l2a, l2b, l2c = (
                    AllocOp(l2_ty, [], []),
                    AllocOp(l2_ty, [], []),
                    AllocOp(l2_ty, [], []),
                )
                dma_memcpy_nd(l2a, sa)
                dma_memcpy_nd(l2b, sb)

                @herd(name="add", sizes=[2, 2], operands=[l2a, l2b, l2c])
                def herd_body(tx, ty, _sx, _sy, ha, hb, hc):
                    row = affine_apply(row_of, [tx, ty])
                    a1, b1, c1 = (
                        AllocOp(l1_ty, [], []),
                        AllocOp(l1_ty, [], []),
                        AllocOp(l1_ty, [], []),
                    )
                    dma_memcpy_nd(
                        a1,
                        ha,
                        src_offsets=[row, 0],
                        src_sizes=[1, COLS],
                        src_strides=[COLS, 1],
                    )
                    dma_memcpy_nd(
                        b1,
                        hb,
                        src_offsets=[row, 0],
                        src_sizes=[1, COLS],
                        src_strides=[COLS, 1],
                    )
                    CallOp(add, [a1, b1, c1])
                    dma_memcpy_nd(
                        hc,
                        c1,
                        dst_offsets=[row, 0],
                        dst_sizes=[1, COLS],
                        dst_strides=[COLS, 1],
                    )
                    for buf in (a1, b1, c1):
                        DeallocOp(buf)

                dma_memcpy_nd(sc, l2c)
                for buf in (l2a, l2b, l2c):
                    DeallocOp(buf)


def main(kernel_object="emu_kernels.o", seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((ROWS, COLS)).astype(bfloat16)
    b = rng.standard_normal((ROWS, COLS)).astype(bfloat16)
    c = (a.astype(np.float32) + b.astype(np.float32)).astype(bfloat16)
    runner = XRTRunner(omit_while_true_loop=False)
    return runner.run_test(
        build_module(kernel_object),
        inputs=[a, b],
        expected_outputs=[c],
        rtol=0,
        atol=0,
        min_correlation=0.999,
    )


if __name__ == "__main__":
    raise SystemExit(main())
