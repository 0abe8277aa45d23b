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


def test_a_compute_tile_buffer_holds_a_lock_pair_per_dma_channel():
    """getLockForDMA reuses a compute tile's lock pair only for the same buffer on the same channel
    (AIRToAIESchedulingUtils.cpp at e972f29, ~1182-1196): a buffer filled by one channel and read out by
    another holds two pairs (aiecc's placed design of the in-place drain probe shows 4 locks).
    """
    assert compile_(one_pe(1, 0)).tiles[0].locks == 2
    assert compile_(one_pe(1, 1)).tiles[0].locks == 4
    assert (
        compile_(one_pe(2, 1)).tiles[0].locks == 6
    )  # buffer 0 in and out, buffer 1 in


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


def passthroughs(n):
    """n L2 buffers that only pass L3 -> L2 -> L3 (no PE touches them: they fill the memtiles, then
    round-robin, two per memtile from n = 9) beside a 1x1 herd that copies a small input through its
    L1 (its L3 flows take a shim of their own, the column of the PE)."""

    def seg(a, out, x, y):
        for k in range(n):
            l2 = AllocOp(memref([8], space=L2), [], [])
            dma_memcpy_nd(l2, a, src_offsets=[8 * k], src_sizes=[8], src_strides=[1])
            dma_memcpy_nd(out, l2, dst_offsets=[8 * k], dst_sizes=[8], dst_strides=[1])

        @herd(name="h", sizes=[1, 1], operands=[x, y])
        def hb(i, j, si, sj, hx, hy):
            t = AllocOp(memref([8], space=L1), [], [])
            dma_memcpy_nd(t, hx)
            dma_memcpy_nd(hy, t)

    return in_segment([memref([8 * n]), memref([8 * n]), memref([8]), memref([8])], seg)


def test_every_shim_tile_takes_a_column_of_its_own():
    """aircc opens a shim tile per bucket of L3 flows (here: one per memtile, one for the PE's
    column) and aie-place-tiles gives each its own column: 8 place, a 9th does not ("no ShimNOCTile
    has sufficient DMA capacity", test_the_rules_agree_with_aircc)."""
    shims = [t for t in compile_(passthroughs(7)).tiles if t.kind == "shim"]
    assert len(shims) == 8
    assert all(len(t.mm2s) == 1 and len(t.s2mm) == 1 for t in shims)
    refused(
        passthroughs(8), r"shim tiles: aircc opens 9 shim tiles .* the device has 8"
    )


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
        **NO_PP,
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
                        # every send into its own rows of one buffer, sent back once (a buffer
                        # filled and sent in one loop is an aircc lock race: test_lock_races.py)
                        b = AllocOp(memref([8 * trips], space=L1), [], [])
                        for i in for_(0, trips):
                            ChannelGet(
                                "r", b, offsets=[scaled(i, 8)], sizes=[8], strides=[1]
                            )
                            yield_([])
                        dma_memcpy_nd(
                            ho,
                            b,
                            dst_offsets=[0],
                            dst_sizes=[8 * trips],
                            dst_strides=[1],
                        )

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


def ring(trips, loop_moves=False):
    """Two L2 buffers, each filled once and re-sent `trips` times on one channel, a refeed loop each
    (matmul_int4_packed's resident A: a buffer per K slice, one stream per herd row). loop_moves: the
    put's offset is the induction variable (@not_invariant in air_annotate_refeed.mlir), no refeed.
    """

    def seg(a, out):
        bufs = []
        for half in range(2):
            l2 = AllocOp(memref([16 if loop_moves else 8], space=L2), [], [])
            dma_memcpy_nd(
                l2,
                a,
                src_offsets=[8 * half],
                src_sizes=[16 if loop_moves else 8],
                src_strides=[1],
            )
            bufs.append(l2)
        for l2 in bufs:
            for i in for_(0, trips):
                if loop_moves:
                    ChannelPut("r", l2, offsets=[scaled(i, 8)], sizes=[8], strides=[1])
                else:
                    ChannelPut("r", l2)
                yield_([])

        @herd(name="h", sizes=[1, 1], operands=[out])
        def hb(x, y, sx, sy, ho):
            b = AllocOp(memref([16 * trips], space=L1), [], [])
            for i in for_(0, 2 * trips):
                ChannelGet("r", b, offsets=[scaled(i, 8)], sizes=[8], strides=[1])
                yield_([])
            dma_memcpy_nd(
                ho, b, dst_offsets=[0], dst_sizes=[16 * trips], dst_strides=[1]
            )

    return in_segment(
        [memref([24 if loop_moves else 16]), memref([16 * trips])],
        seg,
        channels=lambda: Channel("r", size=[1, 1]),
    )


def test_refed_buffers_on_one_channel_come_out_as_aircc_s_bd_ring():
    """aircc lowers the channel's re-sent buffers to one ring of count-free read BDs, each buffer's
    lock primed for `trips` reads a fill (AIRToAIEPass.cpp generateDmaBdProgram, the refeed BD
    ~6562-6581): each pass sends every buffer once, in program order. The emulator sends the same
    stream (A B A B ...), not the loops' sequential order (A A ... B B ...)."""
    src = np.arange(16, dtype=np.int32) + 1
    (_, out), backend = run(ring(3), src, np.zeros(16 * 3, np.int32), **NO_PP)
    np.testing.assert_array_equal(out, np.tile(src, 3))
    mem = [t for t in backend.emu_resources.tiles if t.kind == "memtile"][0]
    assert mem.lock_value == 3
    # @l2_carrier: the count is a lock value per buffer, 63 at most
    run(ring(63), src, np.zeros(16 * 63, np.int32), **NO_PP)
    refused(ring(64), r"air.refeed_count = 64 on its L2 buffer .* 63 at most", **NO_PP)


def test_a_put_that_moves_with_its_loop_is_not_a_refeed():
    # @not_invariant: each trip sends other bytes, so air-annotate-refeed leaves the loop, and a
    # buffer filled once and read in its every trip is the form aircc has no lowering for
    refused(
        ring(2, loop_moves=True), r"fills it once, outside that loop.*refeed primitive"
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


# ------------------------------------------------- memtile and shim placement, memtile locks (aircc's)
def echo_pe(out, chunks):
    """A 1x1 herd that takes `chunks` 8-element chunks from channel c and writes each back to L3."""

    @herd(name="h", sizes=[1, 1], operands=[out])
    def hb(x, y, sx, sy, ho):
        # each chunk into its own rows of one buffer, sent back once (test_lock_races.py)
        b = AllocOp(memref([8 * chunks], space=L1), [], [])
        for j in for_(0, chunks):
            ChannelGet(
                "c", b, indices=[0, 0], offsets=[scaled(j, 8)], sizes=[8], strides=[1]
            )
            yield_([])
        dma_memcpy_nd(ho, b, dst_offsets=[0], dst_sizes=[8 * chunks], dst_strides=[1])


def through_channel_c(chunks, seg):
    """The design of a segment body that feeds channel c [1, 1] from A[8 * chunks] to echo_pe."""
    return in_segment(
        [memref([8 * chunks]), memref([8 * chunks])],
        seg,
        channels=lambda: Channel("c", size=[1, 1]),
    )


def pingponged(trips=2):
    """An L2 buffer refilled from L3 in every trip of a segment loop (ping-ponged: two memtile
    buffers) and sent to a PE each trip."""

    def seg(a, out):
        for i in for_(0, trips):
            l2 = AllocOp(memref([8], space=L2), [], [])
            dma_memcpy_nd(
                l2, a, src_offsets=[scaled(i, 8)], src_sizes=[8], src_strides=[1]
            )
            ChannelPut("c", l2, indices=[0, 0])
            yield_([])

        echo_pe(out, trips)

    return through_channel_c(trips, seg)


def memtiles(res):
    return [t for t in res.tiles if t.kind == "memtile"]


def test_every_memtile_buffer_has_a_lock_pair():
    # the ping-ponged piece is two memtile buffers: two pairs; one write and one read per buffer
    [mem] = memtiles(compile_(pingponged()))
    assert (mem.locks, mem.lock_value, mem.parity) == (4, 1, [4, 0])


def chunked_reads(k):
    """One L2 buffer filled once per run and sent to the PE in k puts on one channel (k BDs on the
    memtile's read side, one on its fill side); the PE writes each chunk back to L3."""

    def seg(a, out):
        l2 = AllocOp(memref([8 * k], space=L2), [], [])
        dma_memcpy_nd(l2, a)
        for j in range(k):
            ChannelPut("c", l2, indices=[0, 0], offsets=[8 * j], sizes=[8], strides=[1])
        echo_pe(out, k)

    return through_channel_c(k, seg)


def test_a_memtile_lock_value_is_the_bds_per_fill_of_the_busier_side():
    # getLockValuePair: 4 read BDs per fill -> init 4 (one stream each way, so not a stream ratio)
    [mem] = memtiles(compile_(chunked_reads(4)))
    assert (len(mem.s2mm), len(mem.mm2s), mem.lock_value, mem.locks) == (1, 1, 4, 2)
    assert mem.parity == [5, 0]


def split_by_column():
    """A [8, 1] herd (split): A[8, 16] read a row per PE and C[8, 16] written a row per PE, both
    split into 8 pieces, and B[16] that every PE reads whole (one broadcast stream, not split).
    """

    def seg(a, b, c):
        la = AllocOp(memref([8, 16], space=L2), [], [])
        lb = AllocOp(memref([16], space=L2), [], [])
        lc = AllocOp(memref([8, 16], space=L2), [], [])
        dma_memcpy_nd(la, a)
        dma_memcpy_nd(lb, b)

        @herd(name="h", sizes=[8, 1], operands=[la, lb, lc])
        def hb(x, y, sx, sy, ha, hb_, hc):
            ta = AllocOp(memref([1, 16], space=L1), [], [])
            tb = AllocOp(memref([16], space=L1), [], [])
            row = dict(offsets=[x, 0], sizes=[1, 16], strides=[16, 1])
            dma_memcpy_nd(ta, ha, **{"src_" + k: v for k, v in row.items()})
            dma_memcpy_nd(tb, hb_)
            dma_memcpy_nd(hc, ta, **{"dst_" + k: v for k, v in row.items()})

        dma_memcpy_nd(c, lc)

    return in_segment([memref([8, 16]), memref([16]), memref([8, 16])], seg)


def test_piece_i_of_every_split_buffer_shares_memtile_i():
    """L2MemrefToMemTileMap: A's and C's pieces of column i both want column i, so the buckets go
    round-robin by shape (piece i -> memtile i); B, the one buffer of its shape, takes global slot
    0. The L3 flows go to the shim of their memtile: memtile 0's three, memtile i's two.
    """
    res = compile_(split_by_column())
    mem = memtiles(res)
    assert [t.name for t in mem] == [f"memtile {i}" for i in range(8)]
    assert [p.split(" [")[0] for p in mem[0].pieces] == [
        "memref<8x16xi32, 1 : i32>",
        "memref<16xi32, 1 : i32>",
        "memref<8x16xi32, 1 : i32>",
    ]
    for i, t in enumerate(mem):
        assert sum(f"[piece {i} of 8]" in p for p in t.pieces) == 2
    shims = [t for t in res.tiles if t.kind == "shim"]
    assert [(len(t.s2mm), len(t.mm2s)) for t in shims] == [(1, 2)] + [(1, 1)] * 7


def two_columns():
    """A [2, 1] herd: PE x gets its input from L2 buffer A_x (channel @a[x, 0]) and puts its output
    into L2 buffer C_x (channel @c[x, 0]); each buffer has its own L3 transfer."""

    def seg(a0, a1, c0, c1):
        ins = [AllocOp(memref([16], space=L2), [], []) for _ in range(2)]
        outs = [AllocOp(memref([16], space=L2), [], []) for _ in range(2)]
        for x, (a, l2) in enumerate(zip((a0, a1), ins)):
            dma_memcpy_nd(l2, a)
            ChannelPut("a", l2, indices=[x, 0])
        for x, l2 in enumerate(outs):
            ChannelGet("c", l2, indices=[x, 0])

        @herd(name="h", sizes=[2, 1])
        def hb(x, y, sx, sy):
            t = AllocOp(memref([16], space=L1), [], [])
            ChannelGet("a", t, indices=[x, y])
            ChannelPut("c", t, indices=[x, y])

        for c, l2 in zip((c0, c1), outs):
            dma_memcpy_nd(c, l2)

    return in_segment(
        [memref([16])] * 4,
        seg,
        channels=lambda: [Channel("a", size=[2, 1]), Channel("c", size=[2, 1])],
    )


def test_l3_flows_share_the_shim_of_the_column_their_memtile_serves():
    """ShimDMAAllocator: A_0's fill and C_0's drain serve column 0's PE, so they share one shim, and
    column 1's another (not one shim with both fills and both drains)."""
    res = compile_(two_columns())
    assert len(memtiles(res)) == 4  # four buckets of one shape: round-robin
    shims = [t for t in res.tiles if t.kind == "shim"]
    assert [(len(t.s2mm), len(t.mm2s)) for t in shims] == [(1, 1), (1, 1)]


RULE_DESIGNS = {
    "passthroughs(7)": lambda: passthroughs(7),
    "pingponged": pingponged,
    "chunked_reads(4)": lambda: chunked_reads(4),
    "split_by_column": split_by_column,
    "two_columns": two_columns,
}


@pytest.mark.parametrize("name", list(RULE_DESIGNS))
def test_the_rules_agree_with_aircc(name, tmp_path):
    """The designs above through aircc + aiecc (skipped without them): every memtile and shim tile
    of the placed, routed design has the emulator's figures (host/aircc_check.py compares them the
    same way for the project's own designs)."""
    compiler, aircc_check = _compiler()
    module = RULE_DESIGNS[name]()
    compiler.compile_module(str(module), {}, str(tmp_path))
    with open(tmp_path / "input_physical.mlir") as f:
        theirs = aircc_check.compiler_tiles(f.read())
    ours = aircc_check.emulator_tiles(
        aircc_check.emulator_program(module, {}).resources
    )
    # the compute tiles are the older part of the model (and these cores carry no stack size)
    ours["compute"] = theirs["compute"]
    assert aircc_check.resource_differences(ours, theirs) == []


def test_more_shim_tiles_than_columns_do_not_place_in_aircc_either(tmp_path):
    compiler, _ = _compiler()
    with pytest.raises(
        compiler.CompileError, match="no ShimNOCTile has sufficient DMA capacity"
    ):
        compiler.compile_module(str(passthroughs(8)), {}, str(tmp_path))


def _compiler():
    """int4awq's compiler driver and host/aircc_check, or a skip with the reason the tools do not
    run here."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if repo not in sys.path:
        sys.path.insert(0, repo)
    from int4awq.design import compiler

    missing = compiler.tools_missing()
    if missing is not None:
        pytest.skip(missing)
    from host import aircc_check

    return compiler, aircc_check
