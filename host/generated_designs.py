# SPDX-License-Identifier: MIT
"""Small AIR designs of many shapes, generated from a seed, for judging the emulator by the compiler
(host/aircc_fuzz.py): each is built with the `air` Python API (the emulator's, or mlir-air's) and comes
with the output it must compute, so that a design the compiler accepts can also be run and checked.

A design is a `Spec`: launches x segments, each segment one herd (or, one design in 20, none: the segment
copies its data L3 -> L2 -> L3, which aircc refuses); in every PE a loop nest (1-3 loops of 1-5 trips); and
L1 buffers, each allocated in the body of one loop of the nest (its `level`), first
accessed in one of five ways, and sent back to DDR from there:

* `dma`:   filled by `air.dma_memcpy_nd` from DDR, or from an L2 staging buffer of the segment (`via_l2`);
* `get`:   filled by `air.channel.get`, fed by one `air.channel.put` per PE at segment level;
* `store`: every element written by `memref.store` in a loop of its own (the buffer holds `value`);
* `call`:  written by a `func.call` of the host kernel `fill_i32` (the buffer holds `value`);
* `load`:  a `memref.load` reads it before its fill (what the buffer held, stored back into it, then
           overwritten by the fill): a first access that is not a definite write, for the ping-pong
           decision.

A filled buffer takes `fills` transfers per iteration, one per equal piece, either one after the other in
the loop body or in an inner loop of `fills` trips (`fill_nested`). The pieces' sizes are what brings the
transfers near the BD limits. Every buffer of one (launch, segment, PE, iteration) reads and writes its own
region of the one input and the one output array, so every element of the output is written exactly once.
"""

from __future__ import annotations

import dataclasses
import random

import numpy as np

from air.dialects import arith
from air.dialects.affine import apply as affine_apply
from air.dialects.air import (
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
from air.dialects.func import CallOp, FuncOp
from air.dialects.memref import AllocOp, DeallocOp, load, store
from air.dialects.scf import for_, yield_
from air.ir import (
    AffineConstantExpr,
    AffineMap,
    AffineSymbolExpr,
    IntegerAttr,
    MemRefType,
    StringAttr,
)

FIRST_ACCESSES = ("dma", "get", "store", "call", "load")
KERNEL = "fill_i32"  # void fill_i32(int32_t *p, int32_t n, int32_t v): p[0:n] = v (emu_kernels.cc)
KERNEL_OBJECT = "emu_kernels.o"


@dataclasses.dataclass(frozen=True)
class Buffer:
    words: int  # int32 elements
    level: int  # the loop of the nest (0 = outermost) whose body allocates, fills and drains it
    first: str  # FIRST_ACCESSES
    fills: int = (
        1  # transfers filling it per iteration, one per equal piece (dma, get, load)
    )
    fill_nested: bool = False  # the fills in an inner loop of `fills` trips
    # dma: from an L2 staging buffer of the segment instead of DDR, laid out as [herd x, herd y, the PE's
    # data] and read at [x, y, offset] ("rows", upstream's layout), or flat and read at one offset that
    # mixes the herd ids with the loop counters ("flat")
    via_l2: str = ""

    @property
    def piece(self) -> int:
        return self.words // self.fills


@dataclasses.dataclass(frozen=True)
class Spec:
    herd: tuple[int, int]
    trips: tuple[int, ...]  # the loop nest in each PE, outermost first
    buffers: tuple[Buffer, ...]
    segments: int = 1  # per launch; each segment one herd on its own data
    launches: int = 1
    stack: int = 1024
    # each segment moves its buffers' regions L3 -> L2 -> L3 with no herd (aircc refuses such a segment)
    herdless: bool = False

    @property
    def pes(self) -> int:
        return self.herd[0] * self.herd[1]

    def iterations(self, level: int) -> int:
        """How many times the body of loop `level` runs in one PE."""
        return int(np.prod(self.trips[: level + 1]))

    def regions(self) -> list[tuple[int, int]]:
        """(offset, words) of each buffer's region in the input and output arrays."""
        out, at = [], 0
        for b in self.buffers:
            n = self.launches * self.segments * self.pes * self.iterations(b.level)
            out.append((at, n * b.words))
            at += n * b.words
        return out

    @property
    def words(self) -> int:
        return sum(n for _, n in self.regions())

    def value(self, i: int) -> int:
        """What a store / call buffer holds."""
        return 1000 + i

    def describe(self) -> str:
        bufs = ", ".join(
            f"{b.first}{'@L2' + b.via_l2 if b.via_l2 else ''} {b.words}w@loop{b.level}"
            + (
                f" x{b.fills}{' nested' if b.fill_nested else ''}"
                if b.fills != 1 or b.fill_nested
                else ""
            )
            for b in self.buffers
        )
        if self.herdless:
            return f"{self.launches} launch x {self.segments} segment, no herd: {bufs}"
        return (
            f"{self.launches} launch x {self.segments} segment, herd {self.herd[0]}x{self.herd[1]}, "
            f"loops {list(self.trips)}, stack {self.stack}: {bufs}"
        )


# -- the module -----------------------------------------------------------------------------------


def _l1(words: int) -> MemRefType:
    return MemRefType.get(
        [words], T.i32(), memory_space=IntegerAttr.get(T.i32(), MemorySpace.L1)
    )


def _l2(shape: list[int]) -> MemRefType:
    return MemRefType.get(
        shape, T.i32(), memory_space=IntegerAttr.get(T.i32(), MemorySpace.L2)
    )


def _affine(constant: int, terms: list[tuple[object, int]]):
    """constant + sum(value * factor) as one affine.apply (an index constant when there are no terms)."""
    terms = [(v, f) for v, f in terms if f]
    if not terms:
        return arith.ConstantOp.create_index(constant)
    expr = AffineConstantExpr.get(constant)
    for i, (_, f) in enumerate(terms):
        expr = expr + AffineSymbolExpr.get(i) * f
    return affine_apply(AffineMap.get(0, len(terms), [expr]), [v for v, _ in terms])


def _iteration_terms(spec: Spec, level: int, ivs: list) -> list[tuple[object, int]]:
    """The flat iteration index of loop `level`'s body as (induction variable, factor) terms."""
    out, factor = [], 1
    for lv in range(level, -1, -1):
        out.append((ivs[lv], factor))
        factor *= spec.trips[lv]
    return out


def build(spec: Spec):
    """The AIR module of a spec: func @generated(%in: memref<Wxi32>, %out: memref<Wxi32>)."""
    words = spec.words
    regions = spec.regions()
    hx, hy = spec.herd

    @module_builder
    def module():
        for li in range(spec.launches):
            for si in range(spec.segments):
                for i, b in enumerate(spec.buffers):
                    if b.first == "get":
                        channel(f"c{li}_{si}_{i}", size=[hx, hy])
        if any(b.first == "call" for b in spec.buffers):
            [w] = {b.words for b in spec.buffers if b.first == "call"}
            f = FuncOp(KERNEL, ([_l1(w), T.i32(), T.i32()], []), visibility="private")
            f.attributes["link_with"] = StringAttr.get(KERNEL_OBJECT)

        l3 = MemRefType.get([words], T.i32())

        @FuncOp.from_py_func(l3, l3)
        def generated(inp, out):
            for li in range(spec.launches):
                _launch(spec, regions, li, inp, out)

    return module()


def _launch(spec: Spec, regions, li: int, inp, out):
    @launch(operands=[inp, out])
    def launch_body(l_in, l_out):
        for si in range(spec.segments):
            _segment(spec, regions, li, si, l_in, l_out)


def _block(spec: Spec, li: int, si: int, b: Buffer, region) -> int:
    """Where (launch li, segment si)'s part of a buffer's region starts."""
    per_segment = spec.pes * spec.iterations(b.level) * b.words
    return region[0] + (li * spec.segments + si) * per_segment


def _segment(spec: Spec, regions, li: int, si: int, s_in, s_out):
    hx, hy = spec.herd

    @segment(name=f"seg{li}_{si}", operands=[s_in, s_out])
    def segment_body(g_in, g_out):
        if spec.herdless:
            _copy_through_l2(spec, regions, li, si, g_in, g_out)
            return
        staged = {}
        for i, b in enumerate(spec.buffers):
            base = _block(spec, li, si, b, regions[i])
            span = spec.pes * spec.iterations(b.level) * b.words
            if b.first == "get":
                # one put per PE: its iterations' data in one stream, taken a piece per get
                per_pe = spec.iterations(b.level) * b.words
                for x in range(hx):
                    for y in range(hy):
                        ChannelPut(
                            f"c{li}_{si}_{i}",
                            g_in,
                            indices=[x, y],
                            offsets=[base + (x * hy + y) * per_pe],
                            sizes=[per_pe],
                            strides=[1],
                        )
            elif b.via_l2:
                # [herd x, herd y, the PE's data]: each PE reads the row its ids select, as upstream's
                # L2 buffers are laid out (what air-split-l2-memref can cut along the herd)
                per_pe = spec.iterations(b.level) * b.words
                shape = [hx, hy, per_pe] if b.via_l2 == "rows" else [span]
                staged[i] = AllocOp(_l2(shape), [], [])
                dma_memcpy_nd(
                    staged[i],
                    g_in,
                    src_offsets=[base],
                    src_sizes=[span],
                    src_strides=[1],
                )
        operands = [g_in, g_out] + [staged[i] for i in sorted(staged)]

        @herd(name=f"herd{li}_{si}", sizes=[hx, hy], operands=operands)
        def herd_body(tx, ty, _sx, _sy, h_in, h_out, *h_staged):
            sources = dict(zip(sorted(staged), h_staged))
            _nest(spec, regions, li, si, tx, ty, h_in, h_out, sources, 0, [])

        for v in staged.values():
            DeallocOp(v)


def _copy_through_l2(spec, regions, li, si, g_in, g_out):
    """A herd-less segment: each buffer's part of its region in and out through an L2 buffer."""
    for i, b in enumerate(spec.buffers):
        base = _block(spec, li, si, b, regions[i])
        span = spec.pes * spec.iterations(b.level) * b.words
        l2 = AllocOp(_l2([span]), [], [])
        dma_memcpy_nd(l2, g_in, src_offsets=[base], src_sizes=[span], src_strides=[1])
        dma_memcpy_nd(g_out, l2, dst_offsets=[base], dst_sizes=[span], dst_strides=[1])
        DeallocOp(l2)


def _nest(spec, regions, li, si, tx, ty, h_in, h_out, sources, level, ivs):
    for iv in for_(0, spec.trips[level]):
        here = ivs + [iv]
        mine = [(i, b) for i, b in enumerate(spec.buffers) if b.level == level]
        bufs = {i: AllocOp(_l1(b.words), [], []) for i, b in mine}
        for i, b in mine:
            _first_access(
                spec, li, si, i, b, bufs[i], regions[i], tx, ty, h_in, sources, here
            )
        if level + 1 < len(spec.trips):
            _nest(spec, regions, li, si, tx, ty, h_in, h_out, sources, level + 1, here)
        for i, b in mine:
            dst = _offset(spec, li, si, b, regions[i], tx, ty, here, 0)
            dma_memcpy_nd(
                h_out,
                bufs[i],
                dst_offsets=[dst],
                dst_sizes=[b.words],
                dst_strides=[1],
            )
            DeallocOp(bufs[i])
        yield_([])


def _offset(spec, li, si, b, region, tx, ty, ivs, extra, base=None):
    """The element offset of this PE's, this iteration's piece `extra` words into a buffer's region
    (into the segment's part of it from `base`, when given)."""
    hx, hy = spec.herd
    per_pe = spec.iterations(b.level) * b.words
    start = _block(spec, li, si, b, region) if base is None else base
    terms = [(tx, hy * per_pe), (ty, per_pe)]
    terms += [(v, f * b.words) for v, f in _iteration_terms(spec, b.level, ivs)]
    return _affine(start + extra, terms)


def _first_access(spec, li, si, i, b, buf, region, tx, ty, h_in, sources, ivs):
    if b.first == "store":
        value = arith.ConstantOp(T.i32(), spec.value(i))
        for e in for_(0, b.words):
            store(value, buf, [e])
            yield_([])
        return
    if b.first == "call":
        CallOp(
            [],
            KERNEL,
            [
                buf,
                arith.ConstantOp(T.i32(), b.words),
                arith.ConstantOp(T.i32(), spec.value(i)),
            ],
        )
        return
    if b.first == "load":
        # read before anything wrote it; stored back so that no pass drops the read as dead
        v = load(buf, [arith.ConstantOp.create_index(0)])
        store(v, buf, [arith.ConstantOp.create_index(b.words - 1)])

    def fill(piece_index, piece_iv=None):
        """Piece `piece_index` (or the inner loop's piece_iv) of the buffer."""
        if piece_iv is None:
            at = arith.ConstantOp.create_index(piece_index * b.piece)
            extra_terms = []
            extra = piece_index * b.piece
        else:
            at = _affine(0, [(piece_iv, b.piece)])
            extra_terms = [(piece_iv, b.piece)]
            extra = 0
        dst = dict(dst_offsets=[at], dst_sizes=[b.piece], dst_strides=[1])
        if b.fills == 1:
            dst = {}
        if b.first == "get":
            ChannelGet(f"c{li}_{si}_{i}", buf, indices=[tx, ty], **_as_channel(dst))
            return
        if (
            i in sources and b.via_l2 == "rows"
        ):  # the PE's row of the segment's L2 staging buffer
            per_pe = spec.iterations(b.level) * b.words
            terms = [(v, f * b.words) for v, f in _iteration_terms(spec, b.level, ivs)]
            at = _affine(extra, terms + extra_terms)
            dma_memcpy_nd(
                buf,
                sources[i],
                src_offsets=[tx, ty, at],
                src_sizes=[1, 1, b.piece],
                src_strides=[spec.herd[1] * per_pe, per_pe, 1],
                **dst,
            )
            return
        base = (
            0 if i in sources else None
        )  # a flat staging buffer holds the segment's region
        src = _offset(spec, li, si, b, region, tx, ty, ivs, extra, base)
        if extra_terms:
            src = affine_apply(
                AffineMap.get(
                    0, 2, [AffineSymbolExpr.get(0) + AffineSymbolExpr.get(1) * b.piece]
                ),
                [src, piece_iv],
            )
        dma_memcpy_nd(
            buf,
            sources.get(i, h_in),
            src_offsets=[src],
            src_sizes=[b.piece],
            src_strides=[1],
            **dst,
        )

    if b.fill_nested:
        for p in for_(0, b.fills):
            fill(None, p)
            yield_([])
    else:
        for p in range(b.fills):
            fill(p)


def _as_channel(dst: dict) -> dict:
    if not dst:
        return {}
    return dict(
        offsets=dst["dst_offsets"], sizes=dst["dst_sizes"], strides=dst["dst_strides"]
    )


# -- what a design computes ------------------------------------------------------------------------


def io(spec: Spec) -> tuple[np.ndarray, np.ndarray]:
    """The input a run takes and the output it must give: a filled buffer's region is copied through,
    a store or call buffer's region holds its value."""
    inp = (np.arange(spec.words, dtype=np.int64) * 7 + 3).astype(np.int32)
    want = inp.copy()
    for i, ((at, n), b) in enumerate(zip(spec.regions(), spec.buffers)):
        if b.first in ("store", "call") and not spec.herdless:
            want[at : at + n] = spec.value(i)
    return inp, want


# -- drawing specs ------------------------------------------------------------------------------------

HERDS = ((1, 1), (1, 2), (2, 1), (2, 2), (1, 4), (4, 1), (2, 4), (4, 4), (8, 4), (4, 8))
# Piece sizes at and around the limits a transfer meets: the BD's wrap fields (1023 / 1024), the 512
# wrap some mlir-aie verifiers apply, the 8-bit core-tile wrap (255 / 256); whole buffers from a few words
# to past half of L1 (so that two copies do not fit).
PIECES = (
    8,
    64,
    255,
    256,
    511,
    512,
    513,
    1023,
    1024,
    1025,
    1536,
    2048,
    3072,
    4096,
    5120,
    6144,
)
INTERPRETED_STORES = (
    300_000  # the emulator interprets each memref.store: keep a run short
)


def random_spec(rng: random.Random) -> Spec:
    if (
        rng.random() < 0.05
    ):  # a segment with no herd: L3 <-> L2 only, small enough for one memtile
        words = rng.choice((8, 64, 256, 1024))
        return Spec(
            (1, 1),
            (1,),
            (Buffer(words, 0, "dma"),),
            launches=rng.choice((1, 2)),
            herdless=True,
        )
    depth = rng.choice((1, 1, 2, 2, 3))
    trips = tuple(rng.choice((1, 2, 2, 3, 4, 5)) for _ in range(depth))
    if rng.random() < 0.5:
        # at most two fills of each buffer a dispatch: a buffer filled and sent back in a loop of more
        # trips than its slots is an aircc lock race (docs/emulator.md#aircc-lock-races), so without
        # this half of the designs would be hazards and few would run
        trips = (min(trips[0], 2),) + (1,) * (depth - 1)
    herd_ = rng.choice(HERDS)
    segments = rng.choice((1, 1, 1, 2))
    launches = rng.choice((1, 1, 1, 2))
    n = rng.choice((1, 1, 2, 2, 3))
    buffers = []
    for _ in range(n):
        first = rng.choice(("dma", "dma", "get", "get", "store", "call", "load"))
        fills = (
            rng.choice((1, 1, 1, 2, 2, 3, 4)) if first in ("dma", "get", "load") else 1
        )
        piece = rng.choice(PIECES)
        words = piece * fills
        if first == "call":
            words = next((b.words for b in buffers if b.first == "call"), words)
        b = Buffer(
            words=words,
            level=rng.randrange(depth),
            first=first,
            fills=fills,
            fill_nested=fills > 1 and rng.random() < 0.3,
            via_l2=(
                rng.choice(("rows", "rows", "flat"))
                if first == "dma" and rng.random() < 0.3
                else ""
            ),
        )
        buffers.append(b)
    # stacks of 1 and 4 KiB, and at and just over the one bank aiecc keeps it in
    stack = rng.choice((1024, 1024, 1024, 4096, 4096, 16384, 16400))
    spec = Spec(herd_, trips, tuple(buffers), segments, launches, stack)
    return _affordable(spec)


def _affordable(spec: Spec) -> Spec:
    """The spec with store buffers shrunk until the emulator interprets at most INTERPRETED_STORES."""
    runs = spec.launches * spec.segments * spec.pes
    bufs = []
    for b in spec.buffers:
        if b.first == "store":
            limit = max(8, INTERPRETED_STORES // (runs * spec.iterations(b.level)))
            b = dataclasses.replace(b, words=min(b.words, limit))
        bufs.append(b)
    return dataclasses.replace(spec, buffers=tuple(bufs))


def specs(n: int, seed: int = 0) -> list[Spec]:
    rng = random.Random(seed)
    return [random_spec(rng) for _ in range(n)]
