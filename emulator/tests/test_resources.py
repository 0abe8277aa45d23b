# SPDX-License-Identifier: MIT
"""The emulator's NPU2 resource model (air/emu/resources.py): every rule has a design that sits
exactly at its limit and passes, and one a step over it that is refused for that rule.
"""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "designs"))
from emu_testlib import (
    design,
    in_segment,
    memref,
    run,
)  # noqa: E402  (emulated `air` first on sys.path)
import air.emu as emu  # noqa: E402
from air.backend.xrt import XRTBackend  # noqa: E402
from air.dialects.affine import apply as affine_apply  # noqa: E402
from air.dialects.air import (
    Channel,
    ChannelGet,
    ChannelPut,
    MemorySpace,
    T,
    dma_memcpy_nd,
    herd,
    segment,
)  # noqa: E402
from air.dialects.air import launch  # noqa: E402
from air.dialects.memref import AllocOp  # noqa: E402
from air.dialects.scf import for_, yield_  # noqa: E402
from air.ir import AffineMap, AffineSymbolExpr, BF16Type, IntegerAttr  # noqa: E402

L1 = IntegerAttr.get(T.i32(), MemorySpace.L1)
L2 = IntegerAttr.get(T.i32(), MemorySpace.L2)


def compile_(module, **backend_kw):
    backend = XRTBackend(**backend_kw)
    backend.compile(module)
    return backend.emu_resources


def refused(module, match, **backend_kw):
    with pytest.raises(emu.ResourceError, match=match):
        compile_(module, **backend_kw)


# The BD-chain tests below loop an odd number of times; their buffers are not ping-ponged (an odd
# ping-ponged loop is refused for its own reason, test_odd_trip_count_of_a_ping_ponged_loop_is_refused).
NO_PP = dict(omit_pingpong="all")


def scaled(v, factor, plus=0):
    return affine_apply(
        AffineMap.get(0, 1, [AffineSymbolExpr.get(0) * factor + plus]), [v]
    )


# ---------------------------------------------------------------------------------- DMA channels
def one_pe(n_in, n_out):
    """A 1x1 herd with n_in L2 -> L1 and n_out L1 -> L2 DMAs, each its own stream."""

    def seg(a):
        l2 = AllocOp(memref([64], space=L2), [], [])
        dma_memcpy_nd(l2, a)

        @herd(name="h", sizes=[1, 1], operands=[l2])
        def hb(x, y, sx, sy, l2h):
            bufs = [AllocOp(memref([8], space=L1), [], []) for _ in range(max(n_in, 1))]
            for i in range(n_in):
                dma_memcpy_nd(
                    bufs[i], l2h, src_offsets=[8 * i], src_sizes=[8], src_strides=[1]
                )
            for i in range(n_out):
                dma_memcpy_nd(
                    l2h, bufs[0], dst_offsets=[8 * i], dst_sizes=[8], dst_strides=[1]
                )

    return in_segment([memref([64])], seg)


def test_compute_tile_has_two_s2mm_and_two_mm2s_channels():
    assert compile_(one_pe(2, 2)).summary() == "resources: within limits"
    refused(one_pe(3, 1), r"compute \(@h, per PE\): needs 3 S2MM channels, NPU2 has 2")
    refused(one_pe(1, 3), r"compute \(@h, per PE\): needs 3 MM2S channels, NPU2 has 2")


def readers(n_pes, per_pe=2):
    """A [1, n_pes] herd (at most 4 tiles: the L2 buffer stays whole), each PE reading its own two
    slices of one L2 buffer: 2 * n_pes MM2S streams on one memtile."""

    def seg(a):
        l2 = AllocOp(memref([128], space=L2), [], [])
        dma_memcpy_nd(l2, a)

        @herd(name="h", sizes=[1, n_pes], operands=[l2])
        def hb(x, y, sx, sy, l2h):
            for j in range(per_pe):
                b = AllocOp(memref([8], space=L1), [], [])
                dma_memcpy_nd(
                    b,
                    l2h,
                    src_offsets=[scaled(y, 16, 8 * j)],
                    src_sizes=[8],
                    src_strides=[1],
                )

    return in_segment([memref([128])], seg)


def test_memtile_has_six_mm2s_channels():
    res = compile_(readers(3))
    mem = [t for t in res.tiles if t.kind == "memtile"]
    assert len(mem) == 1 and len(mem[0].mm2s) == 6 and len(mem[0].s2mm) == 1
    refused(readers(4), r"memtile 0: needs 8 MM2S channels, NPU2 has 6")


def test_pes_reading_the_same_bytes_share_one_broadcast_stream():
    def seg(a):
        l2 = AllocOp(memref([8], space=L2), [], [])
        dma_memcpy_nd(l2, a)

        @herd(name="h", sizes=[1, 4], operands=[l2])
        def hb(x, y, sx, sy, l2h):
            b = AllocOp(memref([8], space=L1), [], [])
            dma_memcpy_nd(b, l2h)

    mem = [
        t for t in compile_(in_segment([memref([8])], seg)).tiles if t.kind == "memtile"
    ]
    assert len(mem[0].mm2s) == 1


def l3_fills(n):
    """n L3 -> L2 DMAs into n separate L2 buffers: n shim MM2S streams."""

    def seg(*args):
        for i in range(n):
            l2 = AllocOp(memref([8], space=L2), [], [])
            dma_memcpy_nd(
                l2, args[0], src_offsets=[8 * i], src_sizes=[8], src_strides=[1]
            )

    return in_segment([memref([8 * n])], seg)


def test_shim_has_two_mm2s_channels_per_column():
    shims = [t for t in compile_(l3_fills(16)).tiles if t.kind == "shim"]
    assert len(shims) == 8 and all(len(t.mm2s) == 2 for t in shims)
    refused(l3_fills(17), r"shim, column 7: needs 3 MM2S channels, NPU2 has 2")


# --------------------------------------------------------------------------------------- BD chains
def unrolled_reads(trips):
    """A PE reads a 4-dimensional pattern of an L2 buffer in a loop that moves it: the loop cannot
    fold into the memtile BD (it would need 5 dimensions), so it unrolls into `trips` BDs on the
    read channel, beside the fill's one BD on the same (even) BD pool."""
    sizes, strides = [2, 2, 2, 2], [100, 20, 5, 1]

    def seg(a):
        l2 = AllocOp(memref([300 * trips + 300], space=L2), [], [])
        dma_memcpy_nd(l2, a)

        @herd(name="h", sizes=[1, 1], operands=[l2])
        def hb(x, y, sx, sy, l2h):
            for i in for_(0, trips):
                b = AllocOp(memref([16], space=L1), [], [])
                dma_memcpy_nd(
                    b,
                    l2h,
                    src_offsets=[0, 0, 0, scaled(i, 300)],
                    src_sizes=sizes,
                    src_strides=strides,
                )
                yield_([])

    return in_segment([memref([300 * trips + 300])], seg)


def test_memtile_channel_parity_pools_hold_24_bds():
    mem = [
        t for t in compile_(unrolled_reads(23), **NO_PP).tiles if t.kind == "memtile"
    ][0]
    assert mem.parity == [24, 0]
    refused(
        unrolled_reads(24),
        r"memtile 0: needs 25 BDs even channels, NPU2 has 24",
        **NO_PP
    )


def test_a_loop_that_fits_the_bd_folds_into_one_bd():
    def seg(a):
        l2 = AllocOp(memref([1024], space=L2), [], [])
        dma_memcpy_nd(l2, a)

        @herd(name="h", sizes=[1, 1], operands=[l2])
        def hb(x, y, sx, sy, l2h):
            for i in for_(0, 64):
                b = AllocOp(memref([16], space=L1), [], [])
                dma_memcpy_nd(
                    b,
                    l2h,
                    src_offsets=[0, scaled(i, 16)],
                    src_sizes=[2, 8],
                    src_strides=[8, 1],
                )
                yield_([])

    mem = [
        t
        for t in compile_(in_segment([memref([1024])], seg)).tiles
        if t.kind == "memtile"
    ][0]
    assert mem.parity == [2, 0]  # the fill's BD and one folded read BD


def shim_chain(trips):
    """An L3 read of 4 unmergeable dimensions (the shim's 3 + repeat) in a loop that moves it:
    `trips` BDs on one shim channel."""

    def seg(a):
        l2 = AllocOp(memref([16], space=L2), [], [])
        for i in for_(0, trips):
            dma_memcpy_nd(
                l2,
                a,
                src_offsets=[0, 0, 0, scaled(i, 300)],
                src_sizes=[2, 2, 2, 2],
                src_strides=[100, 20, 5, 1],
            )
            yield_([])

    return in_segment([memref([300 * trips + 300])], seg)


def test_shim_tile_holds_16_bds():
    shim = [t for t in compile_(shim_chain(16), **NO_PP).tiles if t.kind == "shim"][0]
    assert shim.bds == 16
    refused(shim_chain(17), r"shim, column 0: needs 17 BDs, NPU2 has 16", **NO_PP)


def channel_gets(n_gets, n_buffers):
    """A PE takes n_gets transfers from one channel (one S2MM channel, n_gets BDs) into n_buffers
    L1 buffers (a lock pair each)."""

    def seg(a):
        l2 = AllocOp(memref([8], space=L2), [], [])
        dma_memcpy_nd(l2, a)
        for _ in range(n_gets):
            ChannelPut("c", l2)

        @herd(name="h", sizes=[1, 1])
        def hb(x, y, sx, sy):
            bufs = [AllocOp(memref([8], space=L1), [], []) for _ in range(n_buffers)]
            for i in range(n_gets):
                ChannelGet("c", bufs[i % n_buffers])

    return in_segment([memref([8])], seg, channels=lambda: Channel("c", size=[1, 1]))


def test_compute_tile_holds_16_bds():
    pe = compile_(channel_gets(16, 1)).tiles[0]
    assert pe.kind == "compute" and pe.bds == 16 and len(pe.s2mm) == 1
    refused(channel_gets(17, 1), r"compute \(@h, per PE\): needs 17 BDs, NPU2 has 16")


def test_compute_tile_has_16_locks():
    assert compile_(channel_gets(8, 8)).tiles[0].locks == 16
    refused(channel_gets(9, 9), r"compute \(@h, per PE\): needs 18 locks, NPU2 has 16")


# ------------------------------------------------------------------- refeed and fill once, read many
def refeed(trips, refeed_form=True):
    """An L2 buffer filled once and sent `trips` times: by the refeed primitive (a put alone in its
    loop) or, otherwise, by a herd reading it in every trip of a segment loop."""

    def body(a, out):
        @launch(operands=[a, out])
        def lb(la, lo):
            @segment(name="seg", operands=[la, lo])
            def sb(sa, so):
                l2 = AllocOp(memref([8], space=L2), [], [])
                dma_memcpy_nd(l2, sa)
                if refeed_form:
                    for _ in for_(0, trips):
                        ChannelPut("r", l2)
                        yield_([])

                    @herd(name="h", sizes=[1, 1], operands=[so])
                    def hb(x, y, sx, sy, ho):
                        for i in for_(0, trips):
                            b = AllocOp(memref([8], space=L1), [], [])
                            ChannelGet("r", b)
                            dma_memcpy_nd(
                                ho,
                                b,
                                dst_offsets=[scaled(i, 8)],
                                dst_sizes=[8],
                                dst_strides=[1],
                            )
                            yield_([])

                else:
                    for i in for_(0, trips):

                        @herd(name="h", sizes=[1, 1], operands=[l2, so, i])
                        def hb(x, y, sx, sy, hl2, ho, hi):
                            b = AllocOp(memref([8], space=L1), [], [])
                            dma_memcpy_nd(b, hl2)
                            dma_memcpy_nd(
                                ho,
                                b,
                                dst_offsets=[scaled(hi, 8)],
                                dst_sizes=[8],
                                dst_strides=[1],
                            )

                        yield_([])

    return design(
        [memref([8]), memref([8 * trips])],
        body,
        channels=lambda: Channel("r", size=[1, 1]),
    )


def test_refeed_resends_the_buffer_and_its_count_is_a_lock_value():
    src = np.arange(8, dtype=np.int32) + 1
    (_, out), backend = run(refeed(63), src, np.zeros(8 * 63, np.int32), **NO_PP)
    np.testing.assert_array_equal(out, np.tile(src, 63))
    mem = [t for t in backend.emu_resources.tiles if t.kind == "memtile"][0]
    assert mem.lock_value == 63 and mem.parity == [
        2,
        0,
    ]  # fill BD + one self-looping send BD
    refused(
        refeed(64), r"air.refeed_count = 64 on its L2 buffer .* 63 at most", **NO_PP
    )


def test_a_buffer_filled_once_and_read_in_every_trip_is_refused_outside_the_refeed_primitive():
    refused(
        refeed(2, refeed_form=False),
        r"fills it once, outside that loop.*refeed primitive",
    )

    # the same reads with the fill inside the loop are one fill per read
    def seg(a, out):
        for i in for_(0, 2):
            l2 = AllocOp(memref([8], space=L2), [], [])
            dma_memcpy_nd(l2, a)

            @herd(name="h", sizes=[1, 1], operands=[l2, out, i])
            def hb(x, y, sx, sy, hl2, ho, hi):
                b = AllocOp(memref([8], space=L1), [], [])
                dma_memcpy_nd(b, hl2)
                dma_memcpy_nd(
                    ho, b, dst_offsets=[scaled(hi, 8)], dst_sizes=[8], dst_strides=[1]
                )

            yield_([])

    assert (
        compile_(in_segment([memref([8]), memref([16])], seg)).summary()
        == "resources: within limits"
    )


# ------------------------------------------------------------------- memtiles, strides, PEs
def one_l2_buffer(n_bytes):
    def seg(a):
        l2 = AllocOp(memref([n_bytes // 4], space=L2), [], [])
        dma_memcpy_nd(
            l2,
            a,
            src_offsets=[0],
            src_sizes=[4],
            src_strides=[1],
            dst_offsets=[0],
            dst_sizes=[4],
            dst_strides=[1],
        )

    return in_segment([memref([4])], seg)


def test_an_l2_buffer_that_stays_whole_must_fit_one_memtile():
    assert compile_(one_l2_buffer(512 << 10)).tiles[0].bytes == 512 << 10
    refused(
        one_l2_buffer((512 << 10) + 4),
        r"memtile: the L2 buffer .* needs 524292 bytes in one memtile",
    )


def folded_stride(stride, elt=None):
    """A 2-trip segment loop around an L3 read of 4 elements, folded into the shim BD as a dimension
    of stride `stride` elements."""

    def seg(a):
        l2 = AllocOp(memref([4], elt, space=L2), [], [])
        for i in for_(0, 2):
            dma_memcpy_nd(
                l2, a, src_offsets=[scaled(i, stride)], src_sizes=[4], src_strides=[1]
            )
            yield_([])

    return in_segment([memref([2 * stride + 4], elt)], seg)


def test_strides_are_checked_in_words_after_folding_loops_into_the_bd():
    shim = [t for t in compile_(folded_stride(1 << 20)).tiles if t.kind == "shim"][0]
    assert shim.bds == 1
    refused(
        folded_stride((1 << 20) + 4), r"Stride 1048580 exceeds the \[1:1048576\] range"
    )
    # bf16: 2^21 elements are 2^20 words, the limit; two elements more are one word over
    compile_(folded_stride(1 << 21, BF16Type.get()))
    refused(
        folded_stride((1 << 21) + 2, BF16Type.get()),
        r"Stride 2097154 exceeds the \[1:1048576\] range \(1048577 32-bit words",
    )


def two_herds(a_shape, b_shape):
    def seg(x):
        for name, shape in (("a", a_shape), ("b", b_shape)):

            @herd(name=name, sizes=shape)
            def hb(i, j, si, sj):
                pass

    return in_segment([memref([4])], seg)


def test_the_herds_of_a_segment_share_32_compute_tiles():
    compile_(two_herds([8, 3], [8, 1]))
    refused(two_herds([8, 4], [1, 1]), r"the herds of one segment need 33 PEs")


def test_the_table_names_every_tile_and_ends_in_the_verdict():
    res = compile_(readers(3))
    lines = res.table().splitlines()
    assert lines[-1] == "resources: within limits"
    assert any(line.lstrip().startswith("memtile 0") for line in lines)
    assert all(len(line) <= 100 for line in lines)
