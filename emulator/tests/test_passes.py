# SPDX-License-Identifier: MIT
"""The resource model's readings of aircc's passes, checked against the passes' own lit tests in
mlir-air (mlir/test/Transform/AIRMiscPasses/air_split_l2_memref*.mlir, air_annotate_refeed.mlir): each
test builds the case's structure as a design and asserts the decision the test's CHECK lines show
(split or not, into how many pieces of what shape; which refeed count). Those tests run the split with
tiles-per-l2-tile=1; aircc runs it with the default 4, so the cases with small herds set the model's
threshold to 1 as the test does. Plus the hazards aircc leaves on NPU2 (odd trip counts of ping-ponged
loops, runtime loop tiling on small segments), each at its limit and a step over.
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
)  # noqa: E402  (emulated `air` first)
import air.emu as emu  # noqa: E402
import air.emu.split_l2 as split_l2  # noqa: E402
from air.backend.xrt import XRTBackend  # noqa: E402
from air.dialects import arith  # noqa: E402
from air.dialects.affine import apply as affine_apply  # noqa: E402
from air.dialects.air import module_builder  # noqa: E402
from air.emu.engine import Options, Program  # noqa: E402
from air.dialects.air import (  # noqa: E402
    Channel,
    ChannelGet,
    ChannelPut,
    MemorySpace,
    T,
    channel,
    dma_memcpy_nd,
    herd,
    launch,
    segment,
)
from air.dialects.memref import AllocOp, load, store, subview  # noqa: E402
from air.dialects.scf import for_, yield_  # noqa: E402
from air.ir import (  # noqa: E402
    AffineMap,
    AffineSymbolExpr,
    IntegerAttr,
    IntegerType,
    StringAttr,
    UnitAttr,
)
from gemm_structures import build as gemm  # noqa: E402

L1 = IntegerAttr.get(T.i32(), MemorySpace.L1)
L2 = IntegerAttr.get(T.i32(), MemorySpace.L2)


def scaled(v, factor, plus=0):
    return affine_apply(
        AffineMap.get(0, 1, [AffineSymbolExpr.get(0) * factor + plus]), [v]
    )


def report(module, **backend_kw):
    backend = XRTBackend(**backend_kw)
    backend.compile(module)
    return backend.emu_resources


def unchecked(module):
    """The resource report of a design that may be over a limit (the decisions, not the verdict)."""
    return Program(module, Options(link=False), check=False).resources


def refused(module, match, **backend_kw):
    with pytest.raises(emu.ResourceError, match=match):
        report(module, **backend_kw)


def splits(res):
    """{L2 buffer type: (pieces, piece bytes)} of a report."""
    return {str(root.type): (d.factor, d.piece_bytes) for root, d in res.splits}


@pytest.fixture
def tiles_per_l2_tile_1(monkeypatch):
    """The split's threshold as the pass's lit tests run it (tiles-per-l2-tile=1)."""
    monkeypatch.setattr(split_l2, "TILES_PER_L2_TILE", 1)


def fan_out(shape, herd_sizes, offsets, sizes, strides, attrs=(), fill=None):
    """An L2 buffer filled from L3 (whole, or by `fill(l2, l3)`), read by each PE (x, y) of one herd
    at offsets(x, y) with sizes / strides into its own L1 buffer."""
    n = int(np.prod(shape))

    def seg(a):
        l2 = AllocOp(memref(shape, space=L2), [], [])
        for name, value in attrs:
            l2.attributes[name] = value
        if fill is None:
            dma_memcpy_nd(l2, a)
        else:
            fill(l2, a)

        @herd(name="herd_0", sizes=list(herd_sizes), operands=[l2])
        def hb(x, y, sx, sy, l2h):
            b = AllocOp(memref([int(np.prod(sizes))], space=L1), [], [])
            dma_memcpy_nd(
                b, l2h, src_offsets=offsets(x, y), src_sizes=sizes, src_strides=strides
            )

    return in_segment([memref([n])], seg)


# ------------------------------------------------------------------------ air-split-l2-memref
def test_test0_a_4x4_herd_of_distinct_reads_splits_along_the_herds_first_dimension():
    # air_split_l2_memref.mlir test0: 16 reads [64i, 64j] of a 256x256 buffer -> 4 pieces of 64x256
    # (the segment's scf.parallel is unrolled along its first dimension only); aircc's default
    # threshold of 4 tiles is passed by the 16-tile herd
    res = report(
        fan_out(
            [256, 256],
            [4, 4],
            lambda x, y: [scaled(x, 64), scaled(y, 64)],
            [64, 64],
            [256, 1],
        )
    )
    assert splits(res) == {"memref<256x256xi32, 1 : i32>": (4, 64 * 256 * 4)}
    # each piece: one fill stream, four PE streams
    mem = [t for t in res.tiles if t.kind == "memtile"]
    assert len(mem) == 4 and all(len(t.s2mm) == 1 and len(t.mm2s) == 4 for t in mem)


def test_test2_a_1d_herd_splits_along_the_dimension_its_reads_differ_in(
    tiles_per_l2_tile_1,
):
    # test2: herd 1x2, 8x64 buffer, reads [0, 32j] [8, 32] -> 2 pieces of 8x32 (dimension 1)
    res = report(
        fan_out([8, 64], [1, 2], lambda x, y: [0, scaled(y, 32)], [8, 32], [64, 1])
    )
    [(root, d)] = res.splits
    assert (d.factor, d.dim, d.piece_bytes) == (2, 1, 8 * 32 * 4)


def test_test5_a_4x2_herd_splits_by_four():
    # test5: herd 4x2, 128x64 buffer, reads [32i, 32j] [32, 32] -> 4 pieces of 32x64 (dim 0 only)
    res = report(
        fan_out(
            [128, 64],
            [4, 2],
            lambda x, y: [scaled(x, 32), scaled(y, 32)],
            [32, 32],
            [64, 1],
        )
    )
    assert splits(res) == {"memref<128x64xi32, 1 : i32>": (4, 32 * 64 * 4)}


def test_test4_broadcast_reads_split_by_their_groups_along_the_column_dimension():
    # test4: herd 4x4, 256x128 buffer, four channels reading columns {0, 32, 64, 96} (each broadcast
    # along the other herd dimension) -> 4 pieces of 256x32
    res = report(
        fan_out(
            [256, 128],
            [4, 4],
            lambda x, y: [0, scaled(y, 32)],
            [256, 32],
            [128, 1],
        )
    )
    [(root, d)] = res.splits
    assert (d.factor, d.dim, d.piece_bytes) == (4, 1, 256 * 32 * 4)


def test_test7_a_4d_buffer_with_leading_unit_dimensions():
    # test7: 1x1x256x256, reads [0, 0, 64i, 64j] [1, 1, 64, 64] -> 4 pieces of 1x1x64x256
    res = report(
        fan_out(
            [1, 1, 256, 256],
            [4, 4],
            lambda x, y: [0, 0, scaled(x, 64), scaled(y, 64)],
            [1, 1, 64, 64],
            [65536, 65536, 256, 1],
        )
    )
    assert splits(res) == {"memref<1x1x256x256xi32, 1 : i32>": (4, 64 * 256 * 4)}


def test_func16_a_single_side_inside_a_herd_is_not_split(tiles_per_l2_tile_1):
    # func16: the buffer's one writer is a herd's DMA, its readers four PEs: not split
    def seg(a, out):
        l2 = AllocOp(memref([16, 4], space=L2), [], [])

        @herd(name="writer", sizes=[1, 1], operands=[l2])
        def hw(x, y, sx, sy, l2h):
            b = AllocOp(memref([64], space=L1), [], [])
            dma_memcpy_nd(l2h, b)

        @herd(name="readers", sizes=[4, 1], operands=[l2])
        def hr(x, y, sx, sy, l2h):
            b = AllocOp(memref([16], space=L1), [], [])
            dma_memcpy_nd(
                b,
                l2h,
                src_offsets=[scaled(x, 4), 0],
                src_sizes=[4, 4],
                src_strides=[4, 1],
            )

    res = report(in_segment([memref([64]), memref([64])], seg))
    [(root, d)] = res.splits
    assert not d.split and "single side is inside a herd" in d.note


def halves(l2, a):
    """A 64x64 buffer filled from DDR in two halves of 32 rows: two writers."""
    for i in range(2):
        dma_memcpy_nd(
            l2,
            a,
            dst_offsets=[32 * i, 0],
            dst_sizes=[32, 64],
            dst_strides=[64, 1],
            src_offsets=[2048 * i],
            src_sizes=[2048],
            src_strides=[1],
        )


def test_test18_equal_writers_and_readers_split_together(tiles_per_l2_tile_1):
    # test18: herd 2x1, a 64x64 buffer written in two halves from L3 and read in the same halves
    res = report(
        fan_out(
            [64, 64],
            [2, 1],
            lambda x, y: [scaled(x, 32), 0],
            [32, 64],
            [64, 1],
            fill=halves,
        )
    )
    assert splits(res) == {"memref<64x64xi32, 1 : i32>": (2, 32 * 64 * 4)}


def test_unequal_writers_and_readers_are_not_split(tiles_per_l2_tile_1):
    res = report(
        fan_out(
            [64, 64],
            [4, 1],
            lambda x, y: [scaled(x, 16), 0],
            [16, 64],
            [64, 1],
            fill=halves,
        )
    )
    [(root, d)] = res.splits
    assert not d.split and d.note == "not split: 2 writers and 4 readers"


TEST0 = (
    [256, 256],
    [4, 4],
    lambda x, y: [scaled(x, 64), scaled(y, 64)],
    [64, 64],
    [256, 1],
)


def test_placed_alloc_not_split_and_pinned_to_its_memtile():
    # air_split_l2_memref_memtile_col.mlir: an integer air.memtile_col keeps the buffer whole (and on
    # that column); a string pin does not count
    pin = ("air.memtile_col", IntegerAttr.get(IntegerType.get_signless(32), 3))
    res = unchecked(fan_out(*TEST0, attrs=[pin]))
    [(root, d)] = res.splits
    assert not d.split and d.pinned == 3
    [mem] = [t for t in res.tiles if t.kind == "memtile"]
    assert (
        mem.name == "memtile 3" and len(mem.mm2s) == 16
    )  # whole: more than a memtile has
    malformed = ("air.memtile_col", StringAttr.get("col3"))
    assert splits(report(fan_out(*TEST0, attrs=[malformed])))[
        "memref<256x256xi32, 1 : i32>"
    ] == (4, 64 * 256 * 4)


def test_no_split_keeps_the_buffer_whole():
    # air_split_l2_memref_no_split.mlir
    res = unchecked(fan_out(*TEST0, attrs=[("air.no_split", UnitAttr.get())]))
    [(root, d)] = res.splits
    assert not d.split and d.note == "not split: air.no_split"
    assert "air.no_split" in str(
        fan_out(*TEST0, attrs=[("air.no_split", UnitAttr.get())])
    )


def _air_opt():
    """aircc's own passes (int4awq/design/compiler.py), or a skip with the reason they cannot run here."""
    sys.path.insert(
        0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    )
    from int4awq.design import compiled, compiler

    missing = compiler.tools_missing("air-opt")
    if missing:
        pytest.skip(missing)
    return compiled


@pytest.mark.parametrize("live", [False, True], ids=["dead", "a DMA through it"])
def test_a_subview_is_no_user_of_its_own(live):
    # air_split_l2_memref_nonchannel_user.mlir keeps a buffer whole for a user the split cannot
    # redistribute, but in aircc's pipeline a subview is never that user: canonicalize removes a dead
    # one before the split, and air-dma-to-channel folds one a DMA goes through into the channel op's
    # pattern. air-opt splits both into 4 pieces, as test0.
    def fill(l2, a):
        sv = subview(
            l2, offsets=[0, 0], sizes=[256 if live else 128, 256], strides=[1, 1]
        )
        dma_memcpy_nd(sv if live else l2, a)

    module = fan_out(*TEST0, fill=fill)
    assert splits(unchecked(module)) == {
        "memref<256x256xi32, 1 : i32>": (4, 64 * 256 * 4)
    }
    dec = _air_opt().air_decisions(str(module))
    assert dict(dec.l2_after_split) == {"memref<64x256xi32, 1 : i32>": 4}


def two_segments():
    """Two launches, each a segment reading one L2 buffer into each PE of its herd: a 4x4 herd (16
    tiles: the segment qualifies) and a 1x4 herd (4 tiles: it does not)."""
    from emu_testlib import design

    def body(a, b):
        for arg, sizes, name in ((a, [4, 4], "big"), (b, [1, 4], "small")):

            @launch(operands=[arg])
            def lb(la):
                @segment(name=f"seg_{name}", operands=[la])
                def sb(sa):
                    l2 = AllocOp(memref([256, 256], space=L2), [], [])
                    dma_memcpy_nd(l2, sa)

                    @herd(name=f"herd_{name}", sizes=sizes, operands=[l2])
                    def hb(x, y, sx, sy, l2h):
                        t = AllocOp(memref([64 * 64], space=L1), [], [])
                        dma_memcpy_nd(
                            t,
                            l2h,
                            src_offsets=[scaled(x, 64), scaled(y, 64)],
                            src_sizes=[64, 64],
                            src_strides=[256, 1],
                        )

    return design([memref([256 * 256]), memref([256 * 256])], body)


def test_the_split_decides_segment_by_segment():
    # AIRMiscPasses.cpp ~2576-2600: only the allocs of segments with more than 4 compute tiles are
    # candidates; one qualifying segment does not make the other's buffer split
    res = unchecked(two_segments())
    notes = sorted(d.note for _, d in res.splits)
    assert notes[0].startswith(
        "not split: its segment has no more than 4 compute tiles"
    )
    assert notes[1].startswith("split along dimension 0 into 4 pieces")
    dec = _air_opt().air_decisions(str(two_segments()))
    assert dict(dec.l2_after_split) == {
        "memref<256x256xi32, 1 : i32>": 1,
        "memref<64x256xi32, 1 : i32>": 4,
    }


def test_the_launch_cap_follows_aircc_s_column_count():
    # aircc.cpp ~1001-1011 and ~944-956: max-launch-channels = 2 x the columns of the device name
    # XRTBackend builds; npu2_3col gets npu2's 8 (names, not counts), npu2_4col 4, npu1 4
    sys.path.insert(
        0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    )
    from int4awq.design.compiler import device_columns, target_device

    for device, cols in (
        ("npu2", 0),
        ("npu2", 3),
        ("npu2", 4),
        ("npu1", 0),
        ("npu1", 2),
    ):
        name = target_device(dict(target_device=device, num_device_cols=cols))
        assert split_l2.aircc_columns(device, cols) == device_columns(name)
    assert split_l2.aircc_columns("npu2", 3) == 8
    assert split_l2.aircc_columns("npu2", 4) == 4


def test_a_fill_that_relays_its_l2_side_is_refused_and_the_plain_fill_splits():
    # The product's earlier A fill (rows into 8x8 blocks on the memtile's write side): the split
    # stride is missing from the fill's L2 pattern, the pass falls back to its dimension 0 and tiles
    # the DDR side by its own dimension 0: 16384 elements sent per piece, 2048 accepted.
    refused(
        gemm("relaid_fill"),
        r"splits the L2 buffer memref<8x8x32x8x8xbf16.*falls back to pattern position 0.*"
        r"16384 elements from the L3 side .* and 2048 on the L2 side",
    )
    res = report(gemm("proven"))
    assert splits(res)["memref<8x1x64x256xbf16, 1 : i32>"] == (8, 64 * 256 * 2)


def test_at_most_four_tiles_nothing_is_split():
    # the pass's own threshold (tiles-per-l2-tile 4): at 2x2 the re-laying fill stays whole and is
    # legal; at 5x1 the segment qualifies and the same fill is refused
    res = report(gemm("relaid_fill", m=128, hm=2, hn=2))
    assert all(not d.split for _, d in res.splits)
    refused(gemm("relaid_fill", m=320, hm=5, hn=1), r"falls back to pattern position 0")


def test_the_launch_cap_skips_a_split_past_16_shim_endpoints(tiles_per_l2_tile_1):
    # air_split_l2_memref_launch_cap.mlir (aircc's cap: 2 per column = 16): nine buffers filled from
    # DDR, each read by two rows of PEs; splitting seven in two takes the launch's MM2S endpoints to
    # 16, an eighth would take them to 17, so it and the ninth stay whole
    def seg(a):
        bufs = []
        for i in range(9):
            l2 = AllocOp(memref([2, 8], space=L2), [], [])
            dma_memcpy_nd(l2, a, src_offsets=[16 * i], src_sizes=[16], src_strides=[1])
            bufs.append(l2)

        @herd(name="herd_0", sizes=[2, 1], operands=bufs)
        def hb(x, y, sx, sy, *l2h):
            for b2 in l2h:
                b = AllocOp(memref([8], space=L1), [], [])
                dma_memcpy_nd(
                    b, b2, src_offsets=[x, 0], src_sizes=[1, 8], src_strides=[8, 1]
                )

    decided = [d for _, d in unchecked(in_segment([memref([144])], seg)).splits]
    assert [d.factor for d in decided] == [2] * 7 + [1, 1]
    assert decided[7].note == (
        "not split (factor 2): it would take the launch's MM2S endpoints from 16 to 17 (cap 16)"
    )


# -------------------------------------------------------------------------- air-annotate-refeed
def refed(loops, *, pure=False):
    """An L2 buffer filled once and re-sent by sibling refeed loops (`loops`: a list of trip counts,
    or of tuples for nested loops), each on its own channel to a PE that reads every send.
    """
    chans = [f"r{i}" for i in range(len(loops))]

    def seg(a, out):
        l2 = AllocOp(memref([8], space=L2), [], [])
        dma_memcpy_nd(l2, a)
        for name, trips in zip(chans, loops):
            nest = trips if isinstance(trips, tuple) else (trips,)

            def put(level):
                if level == len(nest):
                    if pure:  # the put's pattern as index constants made in the body
                        c0, c1, c8 = (
                            arith.ConstantOp.create_index(v) for v in (0, 1, 8)
                        )
                        ChannelPut(name, l2, offsets=[c0], sizes=[c8], strides=[c1])
                    else:
                        ChannelPut(name, l2)
                    return
                for _ in for_(0, nest[level]):
                    put(level + 1)
                    yield_([])

            put(0)

        @herd(name="h", sizes=[1, 1], operands=[out])
        def hb(x, y, sx, sy, ho):
            for name, trips in zip(chans, loops):
                n = int(np.prod(trips if isinstance(trips, tuple) else (trips,)))
                # every send taken into one buffer, sent back once (a buffer filled and sent in one
                # loop is an aircc lock race: test_lock_races.py)
                b = AllocOp(memref([8], space=L1), [], [])
                for i in for_(0, n):
                    ChannelGet(name, b)
                    yield_([])
                dma_memcpy_nd(ho, b, dst_offsets=[0], dst_sizes=[8], dst_strides=[1])

    return in_segment(
        [memref([8]), memref([8])],
        seg,
        channels=lambda: [Channel(c, size=[1, 1]) for c in chans],
    )


def lock_value(res):
    return max(t.lock_value for t in res.tiles if t.kind == "memtile")


NO_PP = dict(
    omit_pingpong="all"
)  # the PE's read loops are not what these cases are about


@pytest.mark.parametrize(
    "loops, count",
    [
        ([4], 4),  # @l2_carrier: the count lands on the alloc
        ([3, 4], 7),  # @counts_add: siblings add
        ([(3, 4)], 12),  # @nested_composes: a nest multiplies
        ([(2, 3), 4], 10),  # @nest_plus_sibling
        ([1], 1),  # @single_trip: erased, no count
        ([(1, 5)], 5),
    ],
)
def test_refeed_counts_as_the_pass_writes_them(loops, count):
    assert lock_value(report(refed(loops), **NO_PP)) == max(count, 1)


def test_pure_ops_in_the_body_still_make_a_refeed():
    # @pure_ops_in_body: index arithmetic beside the put is hoisted with it
    assert lock_value(report(refed([5], pure=True), **NO_PP)) == 5


def test_sibling_refeeds_past_63_are_refused_and_63_is_not():
    # fused_decode groups its refeeds at most 63 per loop; on one L2 alloc they still add
    assert lock_value(report(refed([32, 31]), **NO_PP)) == 63
    refused(
        refed([32, 32]),
        r"air.refeed_count = 64 on its L2 buffer .*x32; .*x32.*accumulateRefeed",
        **NO_PP,
    )


def test_a_refed_buffer_the_split_would_cut_is_refused_unless_pinned():
    # The product's earlier resident A: herd_m sibling refeeds on one alloc, which the split cuts
    # into herd_m pieces without the count (and at n_per_segment 8, 64 sends in all)
    refused(gemm("resident", nps=8, n=2048), r"air.refeed_count = 64")

    # a plain refed buffer read by 6 PEs, twice each: split, so its count is lost -> refused
    def seg(a, out):
        l2 = AllocOp(memref([6, 8], space=L2), [], [])
        if pinned:
            l2.attributes["air.memtile_col"] = IntegerAttr.get(
                IntegerType.get_signless(32), 2
            )
        dma_memcpy_nd(l2, a)
        for x in range(6):
            for _ in for_(0, 2):
                ChannelPut(
                    "a",
                    l2,
                    indices=[x, 0],
                    offsets=[x, 0],
                    sizes=[1, 8],
                    strides=[8, 1],
                )
                yield_([])

        @herd(name="h", sizes=[6, 1], operands=[out])
        def hb(x, y, sx, sy, ho):
            # both rows taken into one buffer, sent back once (test_lock_races.py)
            b = AllocOp(memref([16], space=L1), [], [])
            for i in for_(0, 2):
                ChannelGet(
                    "a",
                    b,
                    indices=[x, y],
                    offsets=[scaled(i, 8)],
                    sizes=[8],
                    strides=[1],
                )
                yield_([])
            dma_memcpy_nd(
                ho, b, dst_offsets=[scaled(x, 16)], dst_sizes=[16], dst_strides=[1]
            )

    def build():
        return in_segment(
            [memref([48]), memref([96])],
            seg,
            channels=lambda: Channel("a", size=[6, 1]),
        )

    pinned = False
    refused(
        build(),
        r"carries air.refeed_count = 12 .* cuts it into 6 pieces .* without the count.*"
        r"air.memtile_col",
        **NO_PP,
    )
    pinned = True  # placed_alloc_not_split: the pin keeps it whole, the count stays
    res = report(build(), **NO_PP)
    assert lock_value(res) == 12 and all(not d.split for _, d in res.splits)


def test_a_refeed_runs_as_repeated_sends():
    src = np.arange(8, dtype=np.int32) + 1
    (_, out), _ = run(refed([3, 4]), src, np.zeros(8, np.int32), **NO_PP)
    np.testing.assert_array_equal(out, src)


def test_two_puts_in_one_loop_are_not_a_refeed():
    # @two_puts: no count, and the buffer is then read in every trip of a loop it is not filled in
    def seg(a, out):
        l2 = AllocOp(memref([8], space=L2), [], [])
        dma_memcpy_nd(l2, a)
        for _ in for_(0, 4):
            ChannelPut("p", l2)
            ChannelPut("q", l2)
            yield_([])

        @herd(name="h", sizes=[1, 1], operands=[out])
        def hb(x, y, sx, sy, ho):
            for _ in for_(0, 4):
                b = AllocOp(memref([8], space=L1), [], [])
                ChannelGet("p", b)
                ChannelGet("q", b)
                dma_memcpy_nd(ho, b)
                yield_([])

    refused(
        in_segment(
            [memref([8]), memref([8])],
            seg,
            channels=lambda: [Channel("p", size=[1, 1]), Channel("q", size=[1, 1])],
        ),
        r"fill once, read many|fills it once, outside that loop",
        **NO_PP,
    )


# ----------------------------------------------------------------- odd trip counts, loop tiling
def pp_loop(trips):
    """A PE reads `trips` slices of an L2 buffer into an L1 buffer allocated in the loop (ping-pong)."""

    def seg(a, out):
        l2 = AllocOp(memref([8 * trips], space=L2), [], [])
        dma_memcpy_nd(l2, a)

        @herd(name="h", sizes=[1, 1], operands=[l2, out])
        def hb(x, y, sx, sy, l2h, ho):
            # the core copies each slice into a result buffer sent back once: a buffer filled and
            # sent in one loop is an aircc lock race (test_lock_races.py)
            r = AllocOp(memref([8 * trips], space=L1), [], [])
            for i in for_(0, trips):
                b = AllocOp(memref([8], space=L1), [], [])
                dma_memcpy_nd(
                    b, l2h, src_offsets=[scaled(i, 8)], src_sizes=[8], src_strides=[1]
                )
                for e in for_(0, 8):
                    at = affine_apply(
                        AffineMap.get(
                            0,
                            2,
                            [AffineSymbolExpr.get(0) * 8 + AffineSymbolExpr.get(1)],
                        ),
                        [i, e],
                    )
                    store(load(b, [e]), r, [at])
                    yield_([])
                yield_([])
            dma_memcpy_nd(ho, r)

    return in_segment([memref([8 * trips]), memref([8 * trips])], seg)


def test_odd_trip_count_of_a_ping_ponged_loop_is_refused():
    assert report(pp_loop(4)).summary() == "resources: within limits"
    refused(
        pp_loop(3), r"runs 3 times and aircc ping-pongs its buffers.*EltwiseAdd_bf16"
    )
    # a loop that is not ping-ponged is not affected
    assert (
        report(pp_loop(3), omit_pingpong="L1").summary() == "resources: within limits"
    )


def drained(pes, launches):
    """A herd of `pes` PEs in a row writes C through one L2 buffer that goes to DDR in one DMA, over a
    launch grid of `launches` iterations."""

    def body(a, c):
        @launch(operands=[a, c], sizes=[launches, 1])
        def lb(i, j, si, sj, la, lc):
            @segment(name="seg", operands=[i, la, lc])
            def sb(i_s, la_s, lc_s):
                l2 = AllocOp(memref([pes, 8], space=L2), [], [])

                @herd(name="herd_0", sizes=[pes, 1], operands=[l2])
                def hb(x, y, sx, sy, l2h):
                    b = AllocOp(memref([8], space=L1), [], [])
                    dma_memcpy_nd(
                        l2h, b, dst_offsets=[x, 0], dst_sizes=[1, 8], dst_strides=[8, 1]
                    )

                dma_memcpy_nd(
                    lc_s,
                    l2,
                    dst_offsets=[scaled(i_s, pes * 8)],
                    dst_sizes=[pes * 8],
                    dst_strides=[1],
                )

    return design([memref([8]), memref([pes * 8 * launches])], body)


def test_runtime_loop_tiling_on_a_small_segment_with_several_launches_is_refused():
    # mlir-air's bfp16 GEMM: [2, 2] on a herd of < 8 cores with > 1 launch iteration writes only the
    # first launch iteration's C (its drain leaves one memtile buffer over one shim channel); it
    # chooses [1, 1] there
    tiled = dict(runtime_loop_tiling_sizes=[2, 2])
    refused(
        drained(1, 2),
        r"runtime_loop_tiling_sizes=\[2, 2\] groups 2 of the 2 launch iterations.*bfp16/run.py",
        **tiled,
    )
    refused(drained(4, 2), r"in a segment of 4 compute tiles", **tiled)
    # 5 tiles: air-split-l2-memref splits the drain over 5 shim channels (herds of 8 and more are
    # fine on NPU2 for this reason)
    assert report(drained(5, 2), **tiled).summary() == "resources: within limits"
    for ok in (dict(runtime_loop_tiling_sizes=[1, 1]), {}):
        assert report(drained(1, 2), **ok).summary() == "resources: within limits"
    # one launch iteration, or a launch dimension the tile size does not divide: nothing is grouped
    for launches in (1, 3):
        assert (
            report(drained(1, launches), **tiled).summary()
            == "resources: within limits"
        )


def test_channel_declarations_take_mlir_airs_arguments():
    # mlir-air's Channel (_air_ops_ext.py) has no channel_type; the generated channel() has it, and
    # its size is keyword-only
    seen = []

    @module_builder
    def build():
        with pytest.raises(TypeError):
            Channel("c", size=[1], channel_type="npu_cascade")
        with pytest.raises(TypeError):
            channel("d", [1])
        seen.append(channel("e", size=[1], channel_type="npu_cascade").channel_type)

    build()
    assert seen == ["npu_cascade"]


@pytest.mark.parametrize("seed", range(4))
def test_the_split_checks_address_maps_as_a_dictionary_would(seed):
    # The tiled single side's check, vectorised: an address of a piece must be one the transfer moved, and
    # move to the same partner element (the last one, where the transfer moves an address twice). The
    # reference is the plain dictionary of the transfer's (address -> partner address) pairs.
    rng = np.random.default_rng(seed)
    orig = rng.integers(0, 40, 60)  # repeats on purpose
    porig = rng.integers(0, 1000, 60)
    keys, last = np.unique(orig[::-1], return_index=True)
    partner_of = porig[len(orig) - 1 - last]
    pairs = dict(zip(orig.tolist(), porig.tolist()))
    for _ in range(50):
        a = rng.integers(0, 45, 8)  # some addresses it never moved
        b = np.array([pairs.get(x, -1) for x in a.tolist()])
        if rng.random() < 0.5:
            b[rng.integers(0, 8)] += 1
        want = all(pairs.get(x) == y for x, y in zip(a.tolist(), b.tolist()))
        assert split_l2._maps_to(keys, partner_of, a, b) == want
        assert split_l2._found(keys, a)[0].tolist() == [x in pairs for x in a.tolist()]
    assert split_l2._maps_to(keys[:0], partner_of[:0], a[:0], b[:0])
    assert not split_l2._maps_to(keys[:0], partner_of[:0], a, b)


def refill_loop(pass_unused=False, one_trip_inner=False):
    """An L2 buffer refilled in a 4-trip segment loop and read by a herd in it. pass_unused: a second
    same-named herd after the loop takes the buffer as an operand it never uses (as mlir-air's
    bf16_in_fp32_out drain herd takes its A and B). one_trip_inner: the buffer is allocated, filled and read
    inside a 1-trip loop in the refill loop (as mlir-air's int4 GEMV allocates its L2 record).
    """

    def fill_and_read(l2, a, out, k):
        dma_memcpy_nd(
            l2, a, src_offsets=[scaled(k, 64)], src_sizes=[64], src_strides=[1]
        )

        @herd(name="h", sizes=[1, 1], operands=[l2, out])
        def hb(x, y, sx, sy, l2h, o):
            b = AllocOp(memref([64], space=L1), [], [])
            dma_memcpy_nd(b, l2h)
            dma_memcpy_nd(o, b)

    def seg(a, out):
        l2 = None if one_trip_inner else AllocOp(memref([64], space=L2), [], [])
        for k in for_(0, 4):
            if one_trip_inner:
                for _ in for_(0, 1):
                    fill_and_read(AllocOp(memref([64], space=L2), [], []), a, out, k)
                    yield_([])
            else:
                fill_and_read(l2, a, out, k)
            yield_([])
        if pass_unused:

            @herd(name="h", sizes=[1, 1], operands=[l2])
            def hd(x, y, sx, sy, l2h):
                pass

    return in_segment([memref([256]), memref([64])], seg)


@pytest.mark.parametrize(
    "variant",
    [{}, {"pass_unused": True}, {"one_trip_inner": True}],
    ids=["plain", "an operand a herd never uses", "a one-trip loop around it"],
)
def test_the_refill_loop_ping_pongs_its_buffer_as_aircc_does(variant):
    # canonicalize drops an unused herd operand and folds a one-trip loop before air-fuse-alloc-dealloc,
    # so the buffer's home is the refill loop in each case, and aircc ping-pongs it there
    module = refill_loop(**variant)
    [seg] = Program(module, Options(link=False), check=False).budget.segments
    assert [e.factor for e in seg.entries] == [2]
    dec = _air_opt().air_decisions(str(module))
    assert dict(dec.doubled) == {(1, "memref<64xi32, 1 : i32>"): 1}


def block_loop():
    """A 2-trip segment loop holding two L2 buffers: `a_l2`, filled by a DMA and read by a herd, and
    `c_l2`, written by the herd and sent out by a DMA (the shape of matmul_int4_packed's M-block loop,
    m_per_segment = 2)."""

    def seg(a, out):
        a_l2 = AllocOp(memref([64], space=L2), [], [])
        c_l2 = AllocOp(memref([64], space=L2), [], [])
        for k in for_(0, 2):
            dma_memcpy_nd(
                a_l2, a, src_offsets=[scaled(k, 64)], src_sizes=[64], src_strides=[1]
            )

            @herd(name="h", sizes=[1, 1], operands=[a_l2, c_l2])
            def hb(x, y, sx, sy, ah, ch):
                b = AllocOp(memref([64], space=L1), [], [])
                dma_memcpy_nd(b, ah)
                dma_memcpy_nd(ch, b)

            dma_memcpy_nd(
                out, c_l2, dst_offsets=[scaled(k, 64)], dst_sizes=[64], dst_strides=[1]
            )
            yield_([])

    return in_segment([memref([128]), memref([128])], seg)


def test_each_l2_buffer_of_a_segment_loop_is_judged_alone_as_aircc_does():
    # aircc isolates the segment's DMA loop nests before labelling (air-isolate-async-dma-loop-nests):
    # the DMA-filled buffer is ping-ponged though the loop also holds one a herd writes first
    module = block_loop()
    [seg] = Program(module, Options(link=False), check=False).budget.segments
    assert [e.factor for e in seg.entries] == [2, 1]
    dec = _air_opt().air_decisions(str(module))
    assert dict(dec.doubled) == {(1, "memref<64xi32, 1 : i32>"): 1}
