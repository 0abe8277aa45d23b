# SPDX-License-Identifier: MIT
"""Passthrough through L2 and L1, written in plain mlir-air style.

L3 -> L2 in one DMA, then a 1x1 herd walks the L2 buffer in two tiles: L2 -> L1 -> L2,
then L2 -> L3. Two tiles, no more: one L1 buffer filled and sent back in a loop of more trips than its two
ping-pong slots is an aircc lock race (docs/emulator.md#aircc-lock-races).  Runs unchanged on the emulator (PYTHONPATH=emulator) and, in
principle, with real mlir-air.
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
from air.dialects.scf import for_, yield_
from air.ir import IntegerAttr, MemRefType


@module_builder
def build_module(n=4096, tile=2048):
    l3_ty = MemRefType.get([n], T.i32())
    l2_ty = MemRefType.get(
        [n], T.i32(), memory_space=IntegerAttr.get(T.i32(), MemorySpace.L2)
    )
    l1_ty = MemRefType.get(
        [tile], T.i32(), memory_space=IntegerAttr.get(T.i32(), MemorySpace.L1)
    )

    @FuncOp.from_py_func(l3_ty, l3_ty)
    def passthrough(arg_in, arg_out):
        @launch(operands=[arg_in, arg_out])
        def launch_body(l_in, l_out):
            @segment(name="seg", operands=[l_in, l_out])
            def segment_body(s_in, s_out):
                l2_in = AllocOp(l2_ty, [], [])
                l2_out = AllocOp(l2_ty, [], [])
                dma_memcpy_nd(l2_in, s_in)

                @herd(name="copy", sizes=[1, 1], operands=[l2_in, l2_out])
                def herd_body(_tx, _ty, _sx, _sy, h_in, h_out):
                    for off in for_(0, n, tile):
                        l1 = AllocOp(l1_ty, [], [])
                        dma_memcpy_nd(
                            l1,
                            h_in,
                            src_offsets=[off],
                            src_sizes=[tile],
                            src_strides=[1],
                        )
                        dma_memcpy_nd(
                            h_out,
                            l1,
                            dst_offsets=[off],
                            dst_sizes=[tile],
                            dst_strides=[1],
                        )
                        DeallocOp(l1)
                        yield_([])

                dma_memcpy_nd(s_out, l2_out)
                DeallocOp(l2_in)
                DeallocOp(l2_out)


def main(n=4096, tile=2048):
    data = np.arange(n, dtype=np.int32) * 3 - 7
    runner = XRTRunner(omit_while_true_loop=False)
    return runner.run_test(
        build_module(n, tile), inputs=[data], expected_outputs=[data.copy()]
    )


if __name__ == "__main__":
    raise SystemExit(main())
