# SPDX-License-Identifier: MIT
"""The emulated air API: tracing, DMA semantics against numpy, channels, counters,
and one small design per strictness rule (each must get its error)."""

import os
import sys

import numpy as np
import pytest
from ml_dtypes import bfloat16

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "designs"))
import emu_testlib  # noqa: E402  (puts the emulated `air` first on sys.path)
from emu_testlib import design, in_segment, memref, run  # noqa: E402

import air.emu as emu  # noqa: E402
from air.backend.xrt import XRTBackend  # noqa: E402
from air.dialects import arith  # noqa: E402
from air.dialects.affine import apply as affine_apply  # noqa: E402
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
    module_builder,
    segment,
)
from air.dialects.func import CallOp, FuncOp  # noqa: E402
from air.dialects.memref import AllocOp, DeallocOp, subview  # noqa: E402
from air.dialects.memref import load as memref_load, store as memref_store  # noqa: E402
from air.dialects.scf import for_, yield_  # noqa: E402
from air.ir import (  # noqa: E402
    AffineMap,
    AffineSymbolExpr,
    BF16Type,
    F32Type,
    IntegerAttr,
    MemRefType,
    StringAttr,
)

assert getattr(
    __import__("air"), "EMULATED", False
), "tests must import the emulated air package"

L1 = IntegerAttr.get(T.i32(), MemorySpace.L1)
L2 = IntegerAttr.get(T.i32(), MemorySpace.L2)
POISON_I32 = np.frombuffer(bytes([0xA5] * 4), np.int32)[0]


@pytest.fixture(scope="module")
def kernels(monkeypatch_module):
    d = emu_testlib.build_kernels()
    monkeypatch_module.setenv("AIR_EMU_LIB_PATH", d)
    return d


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def copy_design(n_in, n_out, src=None, dst=None, level_mid=None, background=False):
    """L3 in -> (optional L2 mid) -> L3 out with the given patterns on the first DMA.  With
    background, a third argument fills all of mid first (the pattern then overwrites part of it).
    """
    src = src or {}
    dst = dst or {}

    def seg(a, b, *bg):
        mid = AllocOp(memref([n_out], space=L2), [], [])
        if bg:
            dma_memcpy_nd(mid, bg[0])
        dma_memcpy_nd(
            mid,
            a,
            **{f"src_{k}": v for k, v in src.items()},
            **{f"dst_{k}": v for k, v in dst.items()},
        )
        dma_memcpy_nd(b, mid)

    args = [memref([n_in]), memref([n_out])] + ([memref([n_out])] if background else [])
    return in_segment(args, seg)


# --------------------------------------------------------------------------- tracing


def test_symbolic_values_refuse_python_arithmetic():
    def body(a):
        @launch(operands=[a], sizes=[2, 1])
        def lb(i, j, si, sj, aa):
            with pytest.raises(emu.SymbolicValueError, match=r"Python '\+'"):
                i + 1
            with pytest.raises(emu.SymbolicValueError, match="'<'"):
                i < 2
            with pytest.raises(emu.SymbolicValueError, match="int"):
                int(i)
            with pytest.raises(emu.SymbolicValueError):
                range(i)
            with pytest.raises(emu.SymbolicValueError, match="truth value"):
                if i:
                    pass
            with pytest.raises(emu.SymbolicValueError, match="'=='"):
                i == 0  # noqa: B015
            with pytest.raises(emu.SymbolicValueError):
                AffineSymbolExpr.get(0) * i

    design([memref([4])], body)


def test_print_shows_a_readable_module():
    m = copy_design(64, 64)
    text = str(m)
    assert "func.func @entry(%arg0: memref<64xi32>, %arg1: memref<64xi32>)" in text
    assert "air.segment @seg" in text
    assert "memref.alloc() : memref<64xi32, 1 : i32>" in text
    assert "air.dma_memcpy_nd" in text


def test_attributes_set_after_building_land_on_the_op():
    seen = {}

    def seg(a):
        @herd(name="h", sizes=[1, 1])
        def hb(x, y, sx, sy):
            pass

        hb.attributes["link_with"] = StringAttr.get("k.o")
        seen["herd"] = hb

    m = in_segment([memref([4])], seg)
    assert seen["herd"].attributes["link_with"].value == "k.o"
    assert 'link_with = "k.o"' in str(m)


def test_missing_yield_is_a_trace_error():
    def seg(a):
        @herd(name="h", sizes=[1, 1])
        def hb(x, y, sx, sy):
            for i in for_(0, 4):
                pass  # no yield_([])

    with pytest.raises(emu.TraceError, match="no scf.yield"):
        XRTBackend().compile(in_segment([memref([4])], seg))


def test_hierarchy_regions_are_isolated_from_above():
    def seg(a):
        buf = AllocOp(memref([4], space=L2), [], [])

        @herd(name="h", sizes=[1, 1])
        def hb(x, y, sx, sy):
            l1 = AllocOp(memref([4], space=L1), [], [])
            dma_memcpy_nd(l1, buf)  # buf is not a herd operand

    with pytest.raises(emu.TraceError, match="isolated from above"):
        XRTBackend().compile(in_segment([memref([4])], seg))


# --------------------------------------------------------------------------- DMA semantics


def _random_slices(rng, shape, max_dims):
    """numpy slices start:start+(size-1)*step+1:step with start a multiple of step, since an AIR
    offset is scaled by its dimension's stride (address = sum(offset_d * stride_d) + walk).
    """
    offs, sizes, steps = [], [], []
    for n in shape:
        step = int(rng.integers(1, 3))
        size = int(rng.integers(1, (n - 1) // step + 2))
        last_start = n - 1 - (size - 1) * step
        off = int(rng.integers(0, last_start // step + 1)) * step
        offs.append(off)
        sizes.append(size)
        steps.append(step)
    return offs, sizes, steps


def test_dma_src_patterns_match_numpy_slicing():
    rng = np.random.default_rng(1)
    shape = (3, 4, 5, 6)
    row = [120, 30, 6, 1]
    base = np.arange(np.prod(shape), dtype=np.int32)
    for _ in range(25):
        offs, sizes, steps = _random_slices(rng, shape, 4)
        expect = base.reshape(shape)[
            tuple(
                slice(o, o + (s - 1) * t + 1, t) for o, s, t in zip(offs, sizes, steps)
            )
        ].reshape(-1)
        n = expect.size
        m = copy_design(
            base.size,
            n,
            src=dict(
                offsets=[o // t for o, t in zip(offs, steps)],
                sizes=sizes,
                strides=[r * t for r, t in zip(row, steps)],
            ),
        )
        (_, out), _ = run(m, base, np.zeros(n, np.int32))
        np.testing.assert_array_equal(out, expect)


def test_dma_dst_patterns_scatter_like_numpy_and_leave_the_rest_alone():
    rng = np.random.default_rng(2)
    shape = (4, 5, 6)
    row = [30, 6, 1]
    for _ in range(20):
        offs, sizes, steps = _random_slices(rng, shape, 3)
        n = int(np.prod(sizes))
        src = np.arange(n, dtype=np.int32) + 100
        bg = -np.arange(np.prod(shape), dtype=np.int32).reshape(shape)
        expect = bg.copy()
        expect[
            tuple(
                slice(o, o + (s - 1) * t + 1, t) for o, s, t in zip(offs, sizes, steps)
            )
        ] = src.reshape(sizes)
        m = copy_design(
            n,
            expect.size,
            dst=dict(
                offsets=[o // t for o, t in zip(offs, steps)],
                sizes=sizes,
                strides=[r * t for r, t in zip(row, steps)],
            ),
            background=True,
        )
        (_, out, _), _ = run(m, src, np.zeros(expect.size, np.int32), bg.reshape(-1))
        np.testing.assert_array_equal(out, expect.reshape(-1))


def test_never_written_elements_may_travel_but_not_reach_the_host():
    # The same scatter without the background fill: the second DMA delivers the untouched elements.
    m = copy_design(4, 8, dst=dict(offsets=[0], sizes=[4], strides=[2]))
    with pytest.raises(
        emu.UnwrittenReadError,
        match=r"4 of the 8 elements it delivers to host memory were never",
    ):
        run(m, np.arange(4, dtype=np.int32), np.zeros(8, np.int32))

    # Padding may cross L2 and a channel (mlir-air's cascade GEMV sends a partly filled buffer); only
    # what was written goes on to the host.
    def seg(a, b):
        mid = AllocOp(memref([8], space=L2), [], [])
        dma_memcpy_nd(mid, a, dst_offsets=[0], dst_sizes=[4], dst_strides=[1])
        ChannelPut("pad", mid)
        far = AllocOp(memref([8], space=L2), [], [])
        ChannelGet("pad", far)
        dma_memcpy_nd(b, far, src_offsets=[0], src_sizes=[4], src_strides=[1])

    m = in_segment(
        [memref([4]), memref([4])], seg, channels=lambda: Channel("pad", size=[1, 1])
    )
    (_, out), _ = run(m, np.arange(4, dtype=np.int32), np.zeros(4, np.int32))
    np.testing.assert_array_equal(out, np.arange(4))

    # at the limit: every element written, by two DMAs that interleave
    def seg(a, b):
        mid = AllocOp(memref([8], space=L2), [], [])
        dma_memcpy_nd(mid, a, dst_offsets=[0, 0], dst_sizes=[4, 1], dst_strides=[2, 1])
        dma_memcpy_nd(mid, a, dst_offsets=[0, 1], dst_sizes=[4, 1], dst_strides=[2, 1])
        dma_memcpy_nd(b, mid)

    (_, out), _ = run(
        in_segment([memref([4]), memref([8])], seg),
        np.arange(4, dtype=np.int32),
        np.zeros(8, np.int32),
    )
    np.testing.assert_array_equal(out, np.repeat(np.arange(4), 2))


def test_dma_outer_zero_stride_replays_and_offsets_may_be_shorter():
    base = np.arange(8, dtype=np.int32)
    m = copy_design(8, 24, src=dict(offsets=[2], sizes=[4, 6], strides=[0, 1]))
    (_, out), _ = run(m, base, np.zeros(24, np.int32))
    np.testing.assert_array_equal(out, np.tile(base[2:8], 4))


def test_dma_with_dynamic_offsets_from_loops_and_affine_apply():
    n, tile = 64, 16
    rev = AffineMap.get(0, 1, [AffineSymbolExpr.get(0) * -1 + (n - tile)])

    def seg(a, b):
        mid = AllocOp(memref([n], space=L2), [], [])
        for i in for_(0, n, tile):
            j = affine_apply(rev, [i])  # tiles in reverse order
            dma_memcpy_nd(
                mid,
                a,
                dst_offsets=[j],
                dst_sizes=[tile],
                dst_strides=[1],
                src_offsets=[i],
                src_sizes=[tile],
                src_strides=[1],
            )
            yield_([])
        dma_memcpy_nd(b, mid)

    base = np.arange(n, dtype=np.int32)
    (_, out), _ = run(
        in_segment([memref([n]), memref([n])], seg), base, np.zeros(n, np.int32)
    )
    np.testing.assert_array_equal(out, base.reshape(-1, tile)[::-1].reshape(-1))


# --------------------------------------------------------------------------- strictness: DMAs


def test_dma_out_of_bounds_is_an_error():
    m = copy_design(16, 8, src=dict(offsets=[10], sizes=[8], strides=[1]))
    with pytest.raises(
        emu.DmaBoundsError, match=r"reads elements \[10, 17\].*16 elements"
    ):
        run(m, np.zeros(16, np.int32), np.zeros(8, np.int32))


def test_dma_element_counts_must_match():
    m = copy_design(16, 8, src=dict(offsets=[0], sizes=[6], strides=[1]))
    with pytest.raises(
        emu.DmaBoundsError, match="src moves 6 elements.*dst receives 8"
    ):
        XRTBackend().compile(m)


def _l1_design(l1_dst_pattern, l2_shape=(2, 3, 4, 5)):
    n = int(np.prod(l2_shape))

    def seg(a):
        l2 = AllocOp(memref([n], space=L2), [], [])
        dma_memcpy_nd(l2, a)

        @herd(name="h", sizes=[1, 1], operands=[l2])
        def hb(x, y, sx, sy, l2h):
            l1 = AllocOp(memref([n], space=L1), [], [])
            cnt = int(np.prod(l1_dst_pattern["sizes"]))
            dma_memcpy_nd(
                l1,
                l2h,
                src_offsets=[0],
                src_sizes=[cnt],
                src_strides=[1],
                **{f"dst_{k}": v for k, v in l1_dst_pattern.items()},
            )

    return in_segment([memref([n])], seg)


def test_core_tile_side_has_three_dimensions():
    ok = dict(
        offsets=[0, 0, 0], sizes=[3, 4, 10], strides=[40, 10, 1]
    )  # merges to 1 dim
    XRTBackend().compile(_l1_design(ok))
    four = dict(
        offsets=[0, 0, 0, 0], sizes=[2, 3, 4, 5], strides=[101, 31, 7, 1]
    )  # nothing merges
    with pytest.raises(
        emu.DmaLimitError,
        match=r"dst \(L1, core-tile DMA\).*4 buffer-descriptor "
        r"dimensions.*supports 3",
    ):
        XRTBackend().compile(_l1_design(four, l2_shape=(4, 61)))


def test_memtile_side_has_four_dimensions_and_shim_four_with_repeat():
    five = dict(offsets=[0] * 5, sizes=[2, 2, 2, 2, 3], strides=[97, 41, 17, 7, 1])
    with pytest.raises(
        emu.DmaLimitError,
        match=r"dst \(L2, memtile DMA\).*5 buffer-descriptor.*supports 4",
    ):
        XRTBackend().compile(copy_design(48, 200, dst=five))
    with pytest.raises(emu.DmaLimitError, match=r"src \(L3, shim DMA\).*5 dimensions"):
        XRTBackend().compile(copy_design(200, 48, src=five))
    four = dict(offsets=[0] * 4, sizes=[2, 2, 2, 3], strides=[41, 17, 7, 1])
    XRTBackend().compile(copy_design(100, 24, src=four))


def test_strides_above_2_to_the_20_are_an_error():
    big = (1 << 20) + 1
    m = copy_design(
        big + 4, 4, src=dict(offsets=[0, 0], sizes=[2, 2], strides=[big, 1])
    )
    with pytest.raises(emu.DmaLimitError, match="stride 1048577 exceeds"):
        XRTBackend().compile(m)


def test_zero_strides_only_where_air_makes_repeats():
    inner = dict(offsets=[0, 0], sizes=[4, 3], strides=[1, 0])
    with pytest.raises(
        emu.DmaLimitError, match="zero stride in the innermost dimension"
    ):
        XRTBackend().compile(copy_design(8, 12, src=inner))
    middle = dict(offsets=[0, 0, 0], sizes=[2, 3, 4], strides=[4, 0, 1])
    with pytest.raises(
        emu.DmaLimitError, match=r"\(L2, memtile DMA\).*zero stride in a non-outermost"
    ):
        XRTBackend().compile(copy_design(24, 24, dst=middle))
    # the shim folds a middle zero stride into its repeat count: allowed, and it replays
    (_, out), _ = run(
        copy_design(8, 24, src=middle),
        np.arange(8, dtype=np.int32),
        np.zeros(24, np.int32),
    )
    np.testing.assert_array_equal(
        out,
        np.tile(np.arange(8, dtype=np.int32).reshape(2, 1, 4), (1, 3, 1)).reshape(-1),
    )


def test_shim_wraps_over_the_bounds_need_extra_dimensions():
    # [3, 2000] rows of a 3 x 4096 array: 2000 >= 1024 is split by AIR (2 -> 3 dims): fine
    XRTBackend().compile(
        copy_design(
            3 * 4096, 6000, src=dict(offsets=[0, 0], sizes=[3, 2000], strides=[4096, 1])
        )
    )
    # four dims already, and the outermost (repeat slot, bound 64) is 70: no room to split
    m = copy_design(
        70 * 65,
        70 * 24,
        src=dict(offsets=[0] * 4, sizes=[70, 2, 3, 4], strides=[65, 32, 8, 1]),
    )
    with pytest.raises(emu.DmaLimitError, match="splitting them needs 5 > 4"):
        XRTBackend().compile(m)


# --------------------------------------------------------------------------- strictness: budgets


def _l1_budget_design(n_bytes, in_loop):
    n = n_bytes // 4

    def seg(a):
        l2 = AllocOp(memref([n], space=L2), [], [])
        dma_memcpy_nd(l2, a)

        @herd(name="h", sizes=[1, 1], operands=[l2])
        def hb(x, y, sx, sy, l2h):
            if in_loop:
                for i in for_(0, 4):
                    l1 = AllocOp(memref([n], space=L1), [], [])
                    dma_memcpy_nd(l1, l2h)
                    DeallocOp(l1)
                    yield_([])
            else:
                l1 = AllocOp(memref([n], space=L1), [], [])
                dma_memcpy_nd(l1, l2h)

    return in_segment([memref([n])], seg)


def test_l1_budget_counts_stack_and_ping_pong():
    XRTBackend(stack_size=1024).compile(_l1_budget_design(60 * 1024, in_loop=False))
    with pytest.raises(
        emu.BudgetError, match="per-PE L1.*needs 67584 bytes, the limit is 65536"
    ):
        XRTBackend(stack_size=6 * 1024).compile(
            _l1_budget_design(60 * 1024, in_loop=False)
        )
    # 28 KiB filled by a DMA in a loop is ping-ponged: 56 KiB + 16 KiB stack > 64 KiB
    m = _l1_budget_design(28 * 1024, in_loop=True)
    with pytest.raises(emu.BudgetError, match="needs 73728 bytes"):
        XRTBackend(stack_size=16 * 1024).compile(m)
    be = XRTBackend(stack_size=16 * 1024, omit_pingpong="L1")
    be.compile(m)
    assert be.emu_budget.herds[0].used == 44 * 1024
    assert "x1" in be.emu_budget.table()


def test_l2_budget_per_segment():
    def seg_of(*n_bytes):
        def seg(a):
            for n in n_bytes:
                buf = AllocOp(memref([n // 4], space=L2), [], [])
                dma_memcpy_nd(
                    buf,
                    a,
                    src_offsets=[0],
                    src_sizes=[4],
                    src_strides=[1],
                    dst_offsets=[0],
                    dst_sizes=[4],
                    dst_strides=[1],
                )

        return in_segment([memref([4])], seg)

    XRTBackend().compile(seg_of(*[512 << 10] * 8))  # 8 memtiles x 512 KiB
    with pytest.raises(
        emu.BudgetError,
        match="per-segment L2 needs 4194308 bytes, the limit is 4194304",
    ):
        XRTBackend().compile(seg_of(*[512 << 10] * 8, 4))
    with pytest.raises(emu.BudgetError, match="limit is 1048576"):
        XRTBackend(num_device_cols=2).compile(seg_of(*[512 << 10] * 4))


def _herd_design(sizes, **attrs):
    def seg(a):
        @herd(name="h", sizes=sizes)
        def hb(x, y, sx, sy):
            pass

        for k, v in attrs.items():
            hb.attributes[k] = IntegerAttr.get(T.i64(), v)

    return in_segment([memref([4])], seg)


def test_herd_shape_fits_8_columns_by_4_rows():
    XRTBackend().compile(_herd_design([8, 4]))
    with pytest.raises(
        emu.HerdShapeError, match=r"herd sizes \[4, 8\].*8 x 4 compute array"
    ):
        XRTBackend().compile(_herd_design([4, 8]))
    with pytest.raises(emu.HerdShapeError, match=r"\[9, 1\]"):
        XRTBackend().compile(_herd_design([9, 1]))
    with pytest.raises(emu.HerdShapeError, match="y_loc 4 with 4 rows"):
        XRTBackend().compile(_herd_design([8, 4], y_loc=4))
    with pytest.raises(emu.HerdShapeError, match="4 compute array of npu1"):
        XRTBackend(target_device="npu1").compile(_herd_design([8, 4]))


# --------------------------------------------------------------------------- strictness: run time


def test_fresh_buffers_are_poisoned():
    # A DMA may not read what nothing wrote (test_reading_elements_nothing_wrote_is_an_error), but a
    # core's own loads can: they see the poison, never a lucky zero.
    def seg(a, b):
        l2 = AllocOp(memref([8], F32Type.get(), L2), [], [])
        l2i = AllocOp(memref([8], T.i32(), L2), [], [])
        outs = [
            AllocOp(memref([1], F32Type.get(), L2), [], []),
            AllocOp(memref([1], T.i32(), L2), [], []),
        ]
        zero = arith.ConstantOp.create_index(0)
        for src, dst, l3 in zip((l2, l2i), outs, (a, b)):
            memref_store(
                memref_load(src, [arith.ConstantOp.create_index(3)]), dst, [zero]
            )
            dma_memcpy_nd(l3, dst)

    m = in_segment([memref([1], F32Type.get()), memref([1])], seg)
    (f, i), _ = run(m, np.zeros(1, np.float32), np.zeros(1, np.int32))
    assert np.isnan(f).all()
    assert (i.view(np.uint8) == 0xA5).all()


def test_two_pes_writing_one_element_is_an_error():
    def seg(a):
        l2 = AllocOp(memref([16], space=L2), [], [])

        @herd(name="h", sizes=[2, 1], operands=[l2, a])
        def hb(x, y, sx, sy, l2h, ah):
            l1 = AllocOp(memref([8], space=L1), [], [])
            dma_memcpy_nd(l1, ah, src_offsets=[0], src_sizes=[8], src_strides=[1])
            dma_memcpy_nd(
                l2h, l1, dst_offsets=[4], dst_sizes=[8], dst_strides=[1]
            )  # same place

        dma_memcpy_nd(a, l2)

    with pytest.raises(
        emu.WriteConflictError, match="PE #1 and PE #0 of one herd execution"
    ):
        run(in_segment([memref([16])], seg), np.zeros(16, np.int32))


def _call_design(kernel_object, arg_type_of_call, declared):
    def body_builder():
        f = FuncOp("inc_i32_64", ([declared], []), visibility="private")
        f.attributes["link_with"] = StringAttr.get(kernel_object)

        def seg(a):
            l2 = AllocOp(memref([64], space=L2), [], [])
            dma_memcpy_nd(l2, a)

            @herd(name="h", sizes=[1, 1], operands=[l2])
            def hb(x, y, sx, sy, l2h):
                l1 = AllocOp(arg_type_of_call, [], [])
                dma_memcpy_nd(l1, l2h)
                CallOp(f, [l1])
                dma_memcpy_nd(l2h, l1)

            dma_memcpy_nd(a, l2)

        return seg

    @module_builder
    def build():
        seg = body_builder()

        @FuncOp.from_py_func(memref([64]))
        def entry(a):
            @launch(operands=[a])
            def lb(la):
                @segment(name="seg", operands=[la])
                def sb(sa):
                    seg(sa)

    return build()


def test_kernel_call_runs_the_host_library(kernels):
    m = _call_design("emu_kernels.o", memref([64], space=L1), memref([64], space=L1))
    (out,), be = run(m, np.arange(64, dtype=np.int32))
    np.testing.assert_array_equal(out, np.arange(64, dtype=np.int32) + 1)
    assert be.emu_stats.kernel_calls == {"inc_i32_64": 1}


def test_call_types_must_match_the_funcop(kernels):
    m = _call_design("emu_kernels.o", memref([8, 8], space=L1), memref([64], space=L1))
    with pytest.raises(
        emu.CallSignatureError,
        match=r"argument #0 of @inc_i32_64 is memref<8x8xi32, "
        r"2 : i32>, the FuncOp declares memref<64xi32, 2 : i32>",
    ):
        XRTBackend().compile(m)


def test_missing_library_names_object_and_library(kernels):
    m = _call_design(
        "no_such_kernels.o", memref([64], space=L1), memref([64], space=L1)
    )
    with pytest.raises(
        emu.LibraryError,
        match=r'link_with = "no_such_kernels.o" needs the host library '
        r'"no_such_kernels.so".*AIR_EMU_LIB_PATH',
    ):
        XRTBackend().compile(m)


def test_kernel_writing_past_its_buffer_is_caught(kernels):
    t = memref([64], F32Type.get(), L1)

    @module_builder
    def build():
        f = FuncOp("overrun_f32_64", ([t], []), visibility="private")
        f.attributes["link_with"] = StringAttr.get("emu_kernels.o")

        @FuncOp.from_py_func(memref([4]))
        def entry(a):
            @launch(operands=[a])
            def lb(la):
                @segment(name="seg")
                def sb():
                    @herd(name="h", sizes=[1, 1])
                    def hb(x, y, sx, sy):
                        CallOp(f, [AllocOp(t, [], [])])

    with pytest.raises(emu.KernelOverrunError, match="4 bytes past its end"):
        run(build(), np.zeros(4, np.int32))


def test_use_after_dealloc_is_counted_not_refused():
    """aircc keeps buffers static (mlir-air's eltwise_add_with_l2 example uses L1 buffers after
    their dealloc and passes on hardware), so the emulator reports it instead of failing.
    """

    def seg(a, b):
        l2 = AllocOp(memref([4], space=L2), [], [])
        dma_memcpy_nd(l2, a)
        DeallocOp(l2)
        dma_memcpy_nd(b, l2)

    (_, out), be = run(
        in_segment([memref([4]), memref([4])], seg),
        np.arange(4, dtype=np.int32),
        np.zeros(4, np.int32),
    )
    np.testing.assert_array_equal(out, np.arange(4))
    assert be.emu_stats.uses_after_dealloc == 1
    assert "uses of buffers after their memref.dealloc" in be.emu_stats.table()


def test_error_families_say_static_or_run_time():
    assert issubclass(emu.BudgetError, emu.DesignError) and emu.DesignError.static
    assert (
        issubclass(emu.DmaBoundsError, emu.ExecutionError)
        and not emu.ExecutionError.static
    )
    from air.backend.abc import AirBackendError

    assert issubclass(emu.EmulatorError, AirBackendError)


# --------------------------------------------------------------------------- channels


def test_channels_one_put_feeds_many_gets_and_broadcasts(kernels):
    """The GEMV upstream shape: launch-level puts, a segment forwarding L2 -> L1, a herd getting
    per-core tiles plus a broadcast vector, results back by channel after the segment.
    """
    # two tiles a core: each L1 slot of the get-then-put buffer is filled once (more fills than its two
    # ping-pong slots is an aircc lock race the model refuses: test_lock_races.py)
    cores, tiles, tile = 4, 2, 16

    @module_builder
    def build():
        channel("inL3", size=[cores])
        channel("toL1", size=[cores])
        Channel("bcast", size=[1, 1], broadcast_shape=[cores, 1])
        channel("out", size=[cores])
        fill = FuncOp(
            "fill_i32_16",
            ([memref([tile], space=L1), T.i32()], []),
            visibility="private",
        )
        fill.attributes["link_with"] = StringAttr.get("emu_kernels.o")

        @FuncOp.from_py_func(
            memref([cores * tiles * tile]),
            memref([tile]),
            memref([cores * tiles * tile]),
            memref([cores * 2 * tile]),
        )
        def entry(a, v, b, w):
            @launch(operands=[a, v, b, w])
            def lb(la, lv, lb_, lw):
                for c in range(cores):
                    ci = arith.ConstantOp.create_index(c)
                    # one put of `tiles` tiles, consumed by as many gets of one tile each
                    ChannelPut(
                        "inL3",
                        la,
                        indices=[ci],
                        offsets=[c * tiles * tile],
                        sizes=[tiles * tile],
                        strides=[1],
                    )
                # one put, replayed twice (outer zero stride) and broadcast to every core
                ChannelPut("bcast", lv, offsets=[0, 0], sizes=[2, tile], strides=[0, 1])

                @segment(name="seg")
                def sb():
                    for c in range(cores):
                        ci = arith.ConstantOp.create_index(c)
                        for _ in for_(tiles):
                            l2 = AllocOp(memref([tile], space=L2), [], [])
                            ChannelGet("inL3", l2, indices=[ci])
                            ChannelPut("toL1", l2, indices=[ci])
                            DeallocOp(l2)
                            yield_([])

                    @herd(name="h", sizes=[cores, 1])
                    def hb(tx, ty, sx, sy):
                        acc = AllocOp(memref([tiles * tile], space=L1), [], [])
                        for t in for_(tiles):
                            l1 = AllocOp(memref([tile], space=L1), [], [])
                            ChannelGet("toL1", l1, indices=[tx])
                            off = affine_apply(
                                AffineMap.get(0, 1, [AffineSymbolExpr.get(0) * tile]),
                                [t],
                            )
                            ChannelPut("out", l1, indices=[tx])
                            DeallocOp(l1)
                            yield_([])
                        vec = AllocOp(memref([2 * tile], space=L1), [], [])
                        ChannelGet("bcast", vec, indices=[tx, ty])
                        ChannelPut(
                            "out",
                            vec,
                            indices=[tx],
                            offsets=[tile],
                            sizes=[tile],
                            strides=[1],
                        )
                        mark = AllocOp(memref([tile], space=L1), [], [])
                        CallOp(fill, [mark, arith.index_cast(T.i32(), tx)])
                        ChannelPut("out", mark, indices=[tx])
                        _ = (acc, off)

                for c in range(cores):
                    ci = arith.ConstantOp.create_index(c)
                    ChannelGet(
                        "out",
                        lb_,
                        indices=[ci],
                        offsets=[c * tiles * tile],
                        sizes=[tiles * tile],
                        strides=[1],
                    )
                    ChannelGet(
                        "out",
                        lw,
                        indices=[ci],
                        offsets=[c * 2 * tile],
                        sizes=[2 * tile],
                        strides=[1],
                    )

    a = np.arange(cores * tiles * tile, dtype=np.int32)
    v = np.arange(tile, dtype=np.int32) + 1000
    b = np.zeros_like(a)
    w = np.zeros(cores * 2 * tile, np.int32)
    (_, _, b, w), be = run(build(), a, v, b, w)
    np.testing.assert_array_equal(b, a)
    # after the tiles, each core's "out" FIFO holds the broadcast vector (second replay) and its mark
    w = w.reshape(cores, 2, tile)
    np.testing.assert_array_equal(w[:, 0], np.tile(v, (cores, 1)))
    np.testing.assert_array_equal(
        w[:, 1], np.repeat(np.arange(cores, dtype=np.int32), tile).reshape(cores, tile)
    )
    st = be.emu_stats
    assert st.channel_puts == cores + 1 + cores * tiles + cores * (tiles + 2)
    assert st.bytes[("L3", "L2")] == a.nbytes
    assert st.bytes[("L3", "L1")] == cores * 2 * tile * 4


def test_get_from_an_empty_channel_says_the_design_needs_concurrency():
    @module_builder
    def build():
        channel("c", size=[1])

        @FuncOp.from_py_func(memref([4]))
        def entry(a):
            @launch(operands=[a])
            def lb(la):
                ChannelGet("c", la)  # nothing was put yet

                @segment(name="seg")
                def sb():
                    l2 = AllocOp(memref([4], space=L2), [], [])
                    ChannelPut("c", l2)

                    @herd(name="idle", sizes=[1, 1])
                    def idle(_tx, _ty, _sx, _sy):
                        pass

    with pytest.raises(
        emu.ChannelError, match="holds 0 bytes.*does not model concurrency"
    ):
        run(build(), np.zeros(4, np.int32))


def test_unbalanced_channels_are_reported():
    @module_builder
    def build():
        channel("c", size=[1])

        @FuncOp.from_py_func(memref([4]))
        def entry(a):
            @launch(operands=[a])
            def lb(la):
                ChannelPut("c", la)

    with pytest.raises(
        emu.ChannelError, match=r"data left in channels.*@c\[0\]: 16 bytes"
    ):
        run(build(), np.zeros(4, np.int32))


# --------------------------------------------------------------------------- counters


def test_counters_count_bytes_transfers_calls_and_herds(kernels):
    """Herd 2x2 in a 3-trip segment loop, each PE: 1 L2->L1 DMA, one call, one L1->L2 DMA."""
    t = memref([64], space=L1)

    @module_builder
    def build():
        f = FuncOp("inc_i32_64", ([t], []), visibility="private")
        f.attributes["link_with"] = StringAttr.get("emu_kernels.o")

        @FuncOp.from_py_func(memref([4, 64]))
        def entry(a):
            @launch(operands=[a], sizes=[2, 1])
            def lb(i, j, si, sj, la):
                @segment(name="seg", operands=[la])
                def sb(sa):
                    l2 = AllocOp(memref([4, 64], space=L2), [], [])
                    dma_memcpy_nd(l2, sa)
                    for _ in for_(3):

                        @herd(name="h", sizes=[2, 2], operands=[l2])
                        def hb(x, y, sx, sy, l2h):
                            row = affine_apply(
                                AffineMap.get(
                                    0,
                                    2,
                                    [
                                        AffineSymbolExpr.get(0) * 2
                                        + AffineSymbolExpr.get(1)
                                    ],
                                ),
                                [x, y],
                            )
                            l1 = AllocOp(t, [], [])
                            dma_memcpy_nd(
                                l1,
                                l2h,
                                src_offsets=[row, 0],
                                src_sizes=[1, 64],
                                src_strides=[64, 1],
                            )
                            CallOp(f, [l1])
                            dma_memcpy_nd(
                                l2h,
                                l1,
                                dst_offsets=[row, 0],
                                dst_sizes=[1, 64],
                                dst_strides=[64, 1],
                            )

                        yield_([])
                    dma_memcpy_nd(sa, l2)

    a = np.zeros((4, 64), np.int32)
    (out,), be = run(build(), a)
    np.testing.assert_array_equal(
        out, np.full(256, 6, np.int32)
    )  # launch 2 reads what launch 1 wrote
    st = be.emu_stats
    assert st.launch_iterations == 2 and st.segment_iterations == 2
    assert st.herd_executions == {"h": 6} and st.pe_executions == 24
    assert st.kernel_calls == {"inc_i32_64": 24}
    assert st.transfers == {
        ("L3", "L2"): 2,
        ("L2", "L3"): 2,
        ("L2", "L1"): 24,
        ("L1", "L2"): 24,
    }
    assert st.bytes[("L2", "L1")] == 24 * 256 and st.bytes[("L3", "L2")] == 2 * 1024
    assert st.dma_ops == 2 + 2 + 24 + 24
    table = st.table()
    assert "L2 -> L1" in table and "inc_i32_64" in table
    assert "herd @h [2 x 2]" in be.emu_budget.table()


def test_subview_slices_of_a_herd_wide_l1_buffer(kernels):
    """A segment-level L1 buffer [2, 2, 16], each PE filling its own slice through a kernel."""
    hw = memref([2, 2, 16], space=L1)
    from air.ir import ShapedType, StridedLayoutAttr

    slice_t = MemRefType.get(
        [1, 1, 16],
        T.i32(),
        memory_space=L1,
        layout=StridedLayoutAttr.get(ShapedType.get_dynamic_size(), [32, 16, 1]),
    )

    def build(overlap):
        @module_builder
        def b():
            f = FuncOp("fill_i32_16", ([slice_t, T.i32()], []), visibility="private")
            f.attributes["link_with"] = StringAttr.get("emu_kernels.o")

            @FuncOp.from_py_func(memref([64]))
            def entry(a):
                @launch(operands=[a])
                def lb(la):
                    @segment(name="seg", operands=[la])
                    def sb(sa):
                        acc = AllocOp(hw, [], [])

                        @herd(name="h", sizes=[2, 2], operands=[acc])
                        def hb(x, y, sx, sy, acc_h):
                            xs = arith.ConstantOp.create_index(0) if overlap else x
                            s = subview(
                                acc_h,
                                offsets=[xs, y, 0],
                                sizes=[1, 1, 16],
                                strides=[1, 1, 1],
                            )
                            v = arith.index_cast(
                                T.i32(),
                                affine_apply(
                                    AffineMap.get(
                                        0,
                                        2,
                                        [
                                            AffineSymbolExpr.get(0) * 2
                                            + AffineSymbolExpr.get(1)
                                        ],
                                    ),
                                    [x, y],
                                ),
                            )
                            CallOp(f, [s, v])

                        l2 = AllocOp(memref([64], space=L2), [], [])

                        @herd(name="out", sizes=[1, 1], operands=[acc, l2])
                        def ho(x, y, sx, sy, acc_h, l2h):
                            dma_memcpy_nd(l2h, acc_h)

                        dma_memcpy_nd(sa, l2)

        return b()

    (out,), be = run(build(False), np.zeros(64, np.int32))
    np.testing.assert_array_equal(out, np.repeat(np.arange(4, dtype=np.int32), 16))
    assert "herd-wide L1 buffer: 1/4" in be.emu_budget.table()
    with pytest.raises(emu.WriteConflictError):
        run(build(True), np.zeros(64, np.int32))


def test_invoker_checks_argument_sizes_and_returns_flat_arrays():
    m = copy_design(8, 8)
    inv = XRTBackend().compile_and_load(m)
    with pytest.raises(emu.ExecutionError, match="has 16 bytes.*needs 32"):
        inv(np.zeros(4, np.int32), np.zeros(8, np.int32))
    outs = inv(np.arange(8, dtype=np.int32).reshape(2, 4), np.zeros((2, 4), np.float32))
    assert outs[1].dtype == np.float32 and outs[1].shape == (8,)
    np.testing.assert_array_equal(outs[1].view(np.int32), np.arange(8))


def test_bf16_dtype_round_trips():
    m = in_segment(
        [memref([8], BF16Type.get()), memref([8], BF16Type.get())],
        lambda a, b: (lambda l2: (dma_memcpy_nd(l2, a), dma_memcpy_nd(b, l2)))(
            AllocOp(memref([8], BF16Type.get(), L2), [], [])
        ),
    )
    x = (np.arange(8) / 3).astype(bfloat16)
    (_, y), _ = run(m, x, np.zeros(8, bfloat16))
    np.testing.assert_array_equal(y.view(np.uint16), x.view(np.uint16))


# --------------------------------------------------------------------------- linalg and memref.view
def test_linalg_fill_sets_every_element_of_its_output():
    from air.dialects.linalg import fill

    def seg(a):
        l2 = AllocOp(memref([2, 8], space=L2), [], [])

        @herd(name="h", sizes=[2, 1], operands=[l2])
        def hb(x, y, sx, sy, l2h):
            b = AllocOp(memref([8], space=L1), [], [])
            fill(arith.ConstantOp(T.i32(), 7), outs=[b])
            dma_memcpy_nd(
                l2h, b, dst_offsets=[x, 0], dst_sizes=[1, 8], dst_strides=[8, 1]
            )

        dma_memcpy_nd(a, l2)

    (out,), _ = run(in_segment([memref([16])], seg), np.zeros(16, np.int32))
    np.testing.assert_array_equal(out, np.full(16, 7, np.int32))


def test_memref_view_reads_the_bytes_of_an_i8_buffer_as_another_type():
    from air.dialects.memref import ViewOp

    def seg(a, b):
        raw = AllocOp(memref([16], T.i8(), L2), [], [])
        dma_memcpy_nd(raw, a)
        words = ViewOp(
            memref([2], T.i32(), L2), raw, arith.ConstantOp.create_index(8), []
        )
        dma_memcpy_nd(b, words)

    src = np.arange(16, dtype=np.uint8)
    (_, out), _ = run(
        in_segment([memref([16], T.i8()), memref([2])], seg),
        src.view(np.int8),
        np.zeros(2, np.int32),
    )
    np.testing.assert_array_equal(out, src[8:].view(np.int32))


def test_opdsl_definitions_import_but_calling_one_is_unsupported():
    from air.dialects.linalg.opdsl.lang import (
        D,
        S,
        TV,
        TensorDef,
        TypeFn,
        domain,
        linalg_structured_op,
    )

    @linalg_structured_op()
    def scaled_copy(A=TensorDef(TV.T1, S.m), B=TensorDef(TV.U, S.m, output=True)):
        domain(D.m)
        B[D.m] += TypeFn.cast_signed(TV.U, A[D.m])

    with pytest.raises(emu.UnsupportedError, match="'scaled_copy'.*external kernel"):
        scaled_copy(None, outs=[None])


def _herd_wide_read_design(offsets, sizes, strides, l1_shape, phases=2):
    """A [2, 1] herd fills its herd-wide L1 buffer (one 8-element slice per PE) and sends each PE's slice
    to L3 with the given read pattern on the herd-wide buffer (x the herd's column index). phases=2: the
    fill and the read are two same-named herd ops, so the buffer is taken by two (as the GEMM's
    accumulator is by its zero, compute and drain phases) and stays at segment level; phases=1: one herd
    op takes it, and aircc sinks it into that herd.
    """

    def seg(a, c):
        acc = AllocOp(memref(l1_shape, space=L1), [], [])

        def fill(x, acc_h, ah):
            dma_memcpy_nd(
                acc_h,
                ah,
                dst_offsets=[x, 0],
                dst_sizes=[1, 8],
                dst_strides=[8, 1],
                src_offsets=[x, 0],
                src_sizes=[1, 8],
                src_strides=[8, 1],
            )

        def read(x, acc_h, ch):
            off = [v if v != "x" else x for v in offsets]
            dma_memcpy_nd(
                ch,
                acc_h,
                dst_offsets=[x, 0],
                dst_sizes=[1, 8],
                dst_strides=[8, 1],
                src_offsets=off,
                src_sizes=sizes,
                src_strides=strides,
            )

        if phases == 1:

            @herd(name="h", sizes=[2, 1], operands=[acc, a, c])
            def hb(x, y, sx, sy, acc_h, ah, ch):
                fill(x, acc_h, ah)
                read(x, acc_h, ch)

        else:

            @herd(name="h", sizes=[2, 1], operands=[acc, a])
            def hf(x, y, sx, sy, acc_h, ah):
                fill(x, acc_h, ah)

            @herd(name="h", sizes=[2, 1], operands=[acc, c])
            def hr(x, y, sx, sy, acc_h, ch):
                read(x, acc_h, ch)

    return in_segment([memref([16]), memref([16])], seg)


def test_herd_dependent_offset_left_of_the_buffer_rank_is_refused():
    """aircc's air-shrink-memref-sizes-by-access resets herd-dependent offsets only where they line up
    with the buffer's dimensions from the innermost (Util.cpp getUpdatedOffsetsAfterShrinkage): with
    three offsets on a 2-D [2, 8] buffer that two phases take, the herd index in offset 0 is kept, and the
    compiled read lies outside the PE's slice (aiecc compiled such a read of the GEMM's accumulator to
    offset (x herd_n + y) 2 tile in a buffer of 2 tile; the simulator refused it)."""
    d = _herd_wide_read_design(["x", 0, 0], [1, 1, 8], [8, 8, 1], [2, 8])
    with pytest.raises(emu.DesignError, match="offset 0 depends on the herd's index"):
        run(d, np.arange(16, dtype=np.int32), np.zeros(16, np.int32))


def test_a_buffer_one_herd_takes_may_have_more_offsets_than_dimensions():
    """The same read of a buffer only one herd op takes, which aircc sinks into the herd first, runs: as
    mlir-air's bfp16 GEMM drains its [herd_m, herd_n, c] output buffer with 6 offsets (bfp16/run.py,
    herd_drain; its NPU2 lit tests run it, and so does the simulator of the compiled design).
    """
    d = _herd_wide_read_design(["x", 0, 0], [1, 1, 8], [8, 8, 1], [2, 8], phases=1)
    a = np.arange(16, dtype=np.int32)
    (_, out), _ = run(d, a, np.zeros(16, np.int32))
    np.testing.assert_array_equal(out, a)


def test_herd_offsets_one_per_dimension_run():
    """At the limit: as many offsets as the buffer has dimensions (and a constant one to their left,
    which aircc keeps as it is) run, each PE's slice to its place."""
    a = np.arange(16, dtype=np.int32)
    for offsets, sizes, strides in (
        (["x", 0], [1, 8], [8, 1]),
        ([0, "x", 0], [1, 1, 8], [16, 8, 1]),
    ):
        (_, out), _ = run(
            _herd_wide_read_design(offsets, sizes, strides, [2, 8]),
            a,
            np.zeros(16, np.int32),
        )
        np.testing.assert_array_equal(out, a)
