# SPDX-License-Identifier: MIT
"""Two launches in one module, the second reading through DDR what the first wrote: the shape of a
multi-launch module (mlir-air's llms multi_launch_builder). aircc compiles each air.launch to an aie.device
of its own and a main runtime sequence that configures and runs them in turn; the emulator runs the
launches in program order.

    mid = copy(a)   (launch 1: L3 -> L2 -> L1 -> L2 -> L3)
    out = copy(mid) (launch 2, the same)
"""

import numpy as np

from air.backend.xrt_runner import XRTRunner
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
from air.dialects.memref import AllocOp, DeallocOp
from air.ir import IntegerAttr, MemRefType


@module_builder
def build_module(n=1024):
    l3 = MemRefType.get([n], T.i32())
    l2 = MemRefType.get(
        [n], T.i32(), memory_space=IntegerAttr.get(T.i32(), MemorySpace.L2)
    )
    l1 = MemRefType.get(
        [n], T.i32(), memory_space=IntegerAttr.get(T.i32(), MemorySpace.L1)
    )

    def copy_launch(src, dst, name):
        @launch(operands=[src, dst])
        def launch_body(l_src, l_dst):
            @segment(name=f"seg_{name}", operands=[l_src, l_dst])
            def segment_body(s_src, s_dst):
                x2, y2 = AllocOp(l2, [], []), AllocOp(l2, [], [])
                dma_memcpy_nd(x2, s_src)

                @herd(name=f"copy_{name}", sizes=[1, 1], operands=[x2, y2])
                def herd_body(_tx, _ty, _sx, _sy, hx, hy):
                    b = AllocOp(l1, [], [])
                    dma_memcpy_nd(b, hx)
                    dma_memcpy_nd(hy, b)
                    DeallocOp(b)

                dma_memcpy_nd(s_dst, y2)
                DeallocOp(x2)
                DeallocOp(y2)

    @FuncOp.from_py_func(l3, l3, l3)
    def two_launches(a, mid, out):
        copy_launch(a, mid, "first")
        copy_launch(mid, out, "second")


def main(n=1024):
    data = np.arange(n, dtype=np.int32) * 5 - 3
    return XRTRunner(omit_while_true_loop=False).run_test(
        build_module(n), inputs=[data], expected_outputs=[data.copy(), data.copy()]
    )
