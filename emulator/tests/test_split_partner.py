# SPDX-License-Identifier: MIT
"""air-split-l2-memref tiles the single side of a split L2 buffer and its DDR partner: the partner as
`canonicalize` leaves it. A DDR pattern that is its whole buffer in row-major order is emptied to
`[] [] []` (AIRDialect.cpp canonicalizeEmptyLists ~2364-2381); the pass rebuilds it from the
memref's shape, brings it to the L2 side's rank around the L2 side's sizes (AIRMiscPasses.cpp
~2764-2822) and tiles it at the L2 side's position of the split stride by its own size there
(~2741-2743, ~2852-2855).

The decode GEMV's C drain (L2 [8, hy, M, tn] -> C[M, N], herd column x split into 8 pieces) with x second
([M, 8, hy, tn]) at M = 1 and one launch iteration: that position lands on C's size-1 row dimension and
every piece gets the whole C (the compiled runtime sequence wrote each element 8 times). With x first, a
DDR part of a larger buffer, a launch offset, or M = 2, each piece gets its own part. Each case asserts
the emulator's verdict, and air-opt's split (skipped with the reason when air-opt is not installed).
"""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "designs"))
sys.path.insert(0, REPO)
from emu_testlib import design, memref  # noqa: E402  (emulated `air` first)
from air.dialects.affine import apply as affine_apply  # noqa: E402
from air.dialects.air import MemorySpace, T, dma_memcpy_nd, herd  # noqa: E402
from air.dialects.air import launch, segment  # noqa: E402
from air.dialects.memref import AllocOp  # noqa: E402
import air.emu as emu  # noqa: E402
from air.backend.xrt import XRTBackend  # noqa: E402
from air.emu.engine import Options, Program  # noqa: E402
from air.emu.split_l2 import Pattern  # noqa: E402
from air.ir import AffineMap, AffineSymbolExpr, IntegerAttr  # noqa: E402
from gemm_structures import build as gemm  # noqa: E402
from int4awq.design import compiler  # noqa: E402

AIR_OPT_MISSING = compiler.tools_missing("air-opt")
needs_air_opt = pytest.mark.skipif(
    AIR_OPT_MISSING is not None, reason=str(AIR_OPT_MISSING)
)

L1 = IntegerAttr.get(T.i32(), MemorySpace.L1)
L2 = IntegerAttr.get(T.i32(), MemorySpace.L2)
HX, HY, TN = 8, 2, 16  # herd 8 x 2 (16 tiles: the segment qualifies), tn = 16


def scaled(v, factor):
    return affine_apply(AffineMap.get(0, 1, [AffineSymbolExpr.get(0) * factor]), [v])


def drain(x_first, m=1, launches=1, extra_cols=0):
    """The GEMV's C drain: PE (x, y) writes its [m, tn] block of an L2 [8, 2, m, tn] buffer, which goes
    to C[m, n] in one DMA at launch column j * 8*2*tn, herd column x first or second in its patterns.
    """
    blk = HX * HY * TN
    n = blk * launches + extra_cols

    def body(c):
        @launch(operands=[c], sizes=[1, launches])
        def lb(i, j, si, sj, lc):
            @segment(name="seg", operands=[j, lc])
            def sb(j_s, lc_s):
                l2 = AllocOp(memref([HX, HY, m, TN], space=L2), [], [])

                @herd(name="herd_0", sizes=[HX, HY], operands=[l2])
                def hb(x, y, sx, sy, l2h):
                    b = AllocOp(memref([m * TN], space=L1), [], [])
                    dma_memcpy_nd(
                        l2h,
                        b,
                        dst_offsets=[x, y, 0, 0],
                        dst_sizes=[1, 1, m, TN],
                        dst_strides=[HY * m * TN, m * TN, TN, 1],
                    )

                col = scaled(j_s, blk) if launches > 1 else 0
                if x_first:  # the GEMV's C today
                    sizes = [HX, m, HY, TN]
                    dst, src = [HY * TN, n, TN, 1], [HY * m * TN, TN, m * TN, 1]
                else:  # before 8d08a5b
                    sizes = [m, HX, HY, TN]
                    dst, src = [n, HY * TN, TN, 1], [TN, HY * m * TN, m * TN, 1]
                dma_memcpy_nd(
                    lc_s,
                    l2,
                    dst_offsets=[0, 0, 0, col],
                    dst_sizes=sizes,
                    dst_strides=dst,
                    src_offsets=[0, 0, 0, 0],
                    src_sizes=sizes,
                    src_strides=src,
                )

    return design([memref([m, n])], body)


def resources(module):
    """The resource report, refused or not (the decisions and the problems)."""
    return Program(module, Options(link=False), check=False).resources


def ddr_copies(decision):
    """The split drain's DDR side, one pattern per piece: the tiled single side is recorded first,
    its DDR partner second (split_l2.SplitModel._rewrite)."""
    single, partner = decision.tiled.values()
    return partner


# --------------------------------------------------------------------------------- air-opt's split
def air_opt_split(module):
    text, _ = compiler.run_air_pipeline(str(module), until="air-split-l2-memref")
    return text


def ddr_pieces(text, ddr_type, op="get"):
    """[(offsets, sizes, strides)] of the launch's air.channel.<op> ops on the DDR buffer `ddr_type`
    (one per piece after the split), constants resolved; an offset computed from the launch's
    induction variable reads 0 (launch iteration 0)."""
    consts = dict(re.findall(r"(%\w+) = arith\.constant (-?\d+) : index", text))
    get = re.compile(
        rf"air\.channel\.{op} .*\(%\w+\[([^\]]*)\] \[([^\]]*)\] \[([^\]]*)\]\)"
        r".*: \(" + re.escape(ddr_type) + r"\)$"
    )

    def ints(lst):
        return [int(consts.get(v.strip(), 0)) for v in lst.split(",") if v.strip()]

    return [
        tuple(ints(g) for g in mm.groups())
        for line in text.splitlines()
        for mm in [get.search(line.strip())]
        if mm
    ]


def canonicalized(text):
    r = subprocess.run(
        [
            compiler.find_tool("air-opt"),
            "-",
            "--pass-pipeline=builtin.module(canonicalize)",
        ],
        input=text,
        capture_output=True,
        text=True,
        check=True,
    )
    return r.stdout


def addresses(piece):
    return Pattern(*[list(x) for x in piece]).addresses()


# ------------------------------------------------------------------------------ the refused case
def test_emulator_refuses_the_split_dimension_second_to_a_whole_ddr_buffer():
    res = resources(drain(x_first=False))
    [(root, d)] = res.splits
    assert not d.split and d.note.startswith("refused")
    [(short, detail)] = res.problems
    assert re.fullmatch(
        r"split of L2 buffer memref<8x2x1x16xi32, 1 : i32>: each of its 8 pieces gets the whole L3 "
        r"buffer memref<1x256xi32> from air\.dma_memcpy_nd at test_split_partner\.py:\d+ "
        r"\(32 its own\)",
        short,
    ), short
    for part in (
        "its pattern (sizes [1, 8, 2, 16] strides [256, 32, 16, 1]) is the whole memref<1x256xi32>",
        "empties it to [] [] []",
        "canonicalizeEmptyLists ~2364-2381",
        "isDefaultDataAccessPattern ~2307-2335",
        "populateDefaultWrapsAndStrides ~1981-1997",
        "(sizes [1, 256] strides [256, 1]",
        "(sizes [1, 1, 8, 2, 16] strides [256, 256, 32, 16, 1], AIRMiscPasses.cpp ~2785-2822)",
        "position of the split stride, 1 (~2741-2743)",
        "by its own size there, 1 (~2852-2855",
        "piece 0 gets offsets [0, 0, 0, 0, 0] sizes [1, 1, 8, 2, 16] strides [256, 256, 32, 16, 1]",
        "the 8 pieces write every element of it 8 times",
        "Put the split dimension first in both patterns",
    ):
        assert part in detail, part
    # the design is refused when compiled
    with pytest.raises(emu.ResourceError, match=r"is the whole memref<1x256xi32>"):
        XRTBackend().compile(drain(x_first=False))


@needs_air_opt
def test_air_opt_gives_every_piece_the_whole_ddr_buffer():
    text = air_opt_split(drain(x_first=False))
    pieces = ddr_pieces(text, "memref<1x256xi32>")
    assert len(pieces) == 8
    for i, (offs, sizes, strides) in enumerate(pieces):
        # the emulator's reading: the bumped default, tiled at position 1 (C's row) by its size 1
        assert (offs, sizes, strides) == (
            [0, i, 0, 0, 0],
            [1, 1, 8, 2, 16],
            [256, 256, 32, 16, 1],
        )
        assert len(addresses((offs, sizes, strides))) == 256  # the whole C, not 32
    # the emulator's refusal names air-opt's pattern of piece 0
    [(_, detail)] = resources(drain(x_first=False)).problems
    offs, sizes, strides = pieces[0]
    assert f"piece 0 gets offsets {offs} sizes {sizes} strides {strides}" in detail
    # and canonicalize after the split makes each the whole buffer outright
    gets = re.findall(
        r"air\.channel\.get .*\(%\w+(\[[^\]]*\] \[[^\]]*\] \[[^\]]*\])\).*: \(memref<1x256xi32>\)",
        canonicalized(text),
    )
    assert gets == ["[] [] []"] * 8


# ----------------------------------------------------------------------------- the accepted cases
ACCEPTED = {
    # the GEMV's C today: the DDR side is no plain row-major buffer, canonicalize leaves it
    "split dim first, whole buffer": dict(x_first=True),
    # one tile of columns more in C: the pattern is a strict part of the buffer, kept as written
    "split dim second, buffer one tile larger": dict(x_first=False, extra_cols=TN),
    # two launch iterations: a part of the buffer at a launch offset
    "split dim second, launch offset": dict(x_first=False, launches=2),
    # M = 2: emptied, but the bump rebuilds [2, 8, 2, 16] and position 1 is the herd column again
    "split dim second, whole buffer, M = 2": dict(x_first=False, m=2),
}


def piece_parts(kw):
    """C's elements of each piece x at launch iteration 0: rows 0..m-1, columns x*hy*tn + 0..hy*tn-1."""
    m = kw.get("m", 1)
    n = HX * HY * TN * kw.get("launches", 1) + kw.get("extra_cols", 0)
    return [
        np.sort(
            (
                np.arange(m)[:, None] * n + x * HY * TN + np.arange(HY * TN)[None, :]
            ).ravel()
        )
        for x in range(HX)
    ]


def ddr_type(kw):
    n = HX * HY * TN * kw.get("launches", 1) + kw.get("extra_cols", 0)
    return f"memref<{kw.get('m', 1)}x{n}xi32>"


@pytest.mark.parametrize("kw", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_emulator_splits_the_drain_with_each_piece_its_own_ddr_part(kw):
    res = resources(drain(**kw))
    [(root, d)] = res.splits
    assert res.problems == [] and d.split and (d.factor, d.dim) == (8, 0)
    # the DDR side's copies: piece x writes C's columns of herd column x
    ddr = ddr_copies(d)
    assert len(ddr) == 8
    for copy, part in zip(ddr, piece_parts(kw)):
        np.testing.assert_array_equal(np.sort(copy.addresses()), part)


@needs_air_opt
@pytest.mark.parametrize("kw", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_air_opt_gives_each_piece_its_own_ddr_part(kw):
    module = drain(**kw)
    pieces = ddr_pieces(air_opt_split(module), ddr_type(kw))
    assert len(pieces) == 8
    for piece, part in zip(pieces, piece_parts(kw)):
        np.testing.assert_array_equal(np.sort(addresses(piece)), part)
    # the emulator's DDR copies are air-opt's patterns, offset for offset
    [(_, d)] = resources(module).splits
    assert pieces == [(c.offsets, c.sizes, c.strides) for c in ddr_copies(d)]


# ------------------------------------------------------------------- the GEMM's C (make run2x4)
def test_gemm_c_to_its_whole_ddr_buffer_splits_with_the_split_dimension_first():
    # M = 128, N = 256, herd 2 x 4: C's DDR pattern [128, 256] is the whole buffer (emptied by
    # canonicalize), bumped to [2, 64, 4, 64] around the L2 side's sizes, tiled at position 0
    res = resources(gemm("proven", m=128, n=256, hm=2, hn=4))
    assert res.problems == []
    dec = {str(r.type): d for r, d in res.splits}["memref<2x4x64x64xbf16, 1 : i32>"]
    assert dec.factor == 2
    expected = [([i, 0, 0, 0], [1, 64, 4, 64], [16384, 256, 64, 1]) for i in range(2)]
    assert [(c.offsets, c.sizes, c.strides) for c in ddr_copies(dec)] == expected
    if AIR_OPT_MISSING is not None:
        pytest.skip(str(AIR_OPT_MISSING))
    text = air_opt_split(gemm("proven", m=128, n=256, hm=2, hn=4))
    assert ddr_pieces(text, "memref<128x256xbf16>") == expected


# ------------------------------------------------- a whole-buffer L2 side is read canonicalised too
def test_a_flat_whole_buffer_fill_splits_as_its_default_pattern():
    # the fill's L2 side [256] [1] is the whole [8, 32] buffer: emptied, tiled at dimension 0 as the
    # default [8, 32] (it was refused before, reading the written 1-D pattern)
    def body(a):
        @launch(operands=[a])
        def lb(la):
            @segment(name="seg", operands=[la])
            def sb(la_s):
                l2 = AllocOp(memref([8, 32], space=L2), [], [])
                dma_memcpy_nd(l2, la_s, dst_sizes=[256], dst_strides=[1])

                @herd(name="herd_0", sizes=[8, 1], operands=[l2])
                def hb(x, y, sx, sy, l2h):
                    b = AllocOp(memref([32], space=L1), [], [])
                    dma_memcpy_nd(
                        b,
                        l2h,
                        src_offsets=[x, 0],
                        src_sizes=[1, 32],
                        src_strides=[32, 1],
                    )

    module = design([memref([256])], body)
    res = resources(module)
    [(_, d)] = res.splits
    assert res.problems == [] and d.factor == 8
    # the DDR side [] [] [] read as [256] [1], bumped to [8, 32]: piece x gets row x
    expected = [([x, 0], [1, 32], [32, 1]) for x in range(8)]
    assert [(c.offsets, c.sizes, c.strides) for c in ddr_copies(d)] == expected
    if AIR_OPT_MISSING is not None:
        pytest.skip(str(AIR_OPT_MISSING))
    assert ddr_pieces(air_opt_split(module), "memref<256xi32>", op="put") == expected
