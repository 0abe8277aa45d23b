# SPDX-License-Identifier: MIT
"""The NPU2 resource model: the DMA channels, buffer descriptors (BDs), locks and memtile space that
aircc must find for every transfer of a design, checked after tracing and before anything runs.

How aircc lowers a design, as modelled here (mlir-air at e972f29 and mlir-aie; each rule names the
pass or function that enforces it):

* Every transfer becomes a stream between two DMA channels: air-dma-to-channel turns each
  `air.dma_memcpy_nd` into a channel of its own; an `air.channel` is one stream per index.  A side
  in a herd lands on each PE's compute tile, an L2 side on a memtile, an L3 side on a shim tile.
  NPU2 has 2 S2MM + 2 MM2S DMA channels on a compute tile and a shim tile, 6 + 6 on a memtile
  (mlir-aie AIETargetModel.cpp, the DMA bundle of the switchbox / shim mux).  aircc's allocators
  (AIRToAIESchedulingUtils.cpp: TileDMAAllocator and MemTileDMAAllocator::simpleDmaChannelAlloc)
  do not fail beyond that: they wrap round-robin and chain two flows on one channel, which
  serialises them and deadlocks when they must run together (repairS2MMChains warns so).  The
  model refuses both.
* An L2 buffer of a segment with more than 4 compute tiles is split along the dimension its
  herd-side accesses select by herd id (air-split-l2-memref, AIRMiscPasses.cpp getMemrefSplitDim),
  one piece per index.  PEs that read the same bytes of a piece share one broadcast stream; PEs
  that touch different bytes each need their own channel.
* Memtiles (compiler's rule, _assign_memtiles: L2MemrefToMemTileMap, AIRToAIEPass.cpp at e972f29):
  one logical memtile per column; the L2 allocs (pieces, whole buffers) are bucketed by shared
  channels; each bucket wants the column of the compute tiles across its channels; when no column
  is wanted twice each wanted column gets a memtile of its own, else the buckets go round-robin by
  shape, so piece i of every split buffer shares memtile i and the unsplit buffers fill memtiles
  0, 1, ...  Every logical memtile is a memtile of its own (merge-logical-tiles=false).  A
  memtile's channels are numbered in flow order (the device walk's first op of each channel).
* Shims (compiler's rule, _shims: ShimDMAAllocator::allocNewDmaChannel, AIRToAIESchedulingUtils.cpp
  at e972f29): each L3 flow goes to a shim of its far side's bucket (the column of the compute
  tiles it serves, else its memtile) with a free channel in its direction, 2 per direction; a
  broadcast L3 read may take any shim's free channel; else a new shim.  Each shim takes a column
  of its own: more shims than columns is aie-place-tiles' "no ShimNOCTile has sufficient DMA
  capacity", and refused.
* A stream's BD chain: the loops around the transfer are folded into the BD's wraps and strides
  while the pattern still fits the BD's dimensions (memtile 4, compute tile 3, shim 3 + repeat:
  applyAIRSpecializeChannelWrapAndStridePattern, AIRDependencyScheduleOpt.cpp); the first loop
  that does not fit is unrolled into one BD per iteration (AIRUnrollScfForIntoBDChain), and so is
  every outer loop that moves the pattern; a loop that only repeats it is the chain's own repeat.
  A ping-ponged buffer doubles its side's chain (two buffers, two BDs each step).  Pools: 16 BDs
  on a compute or shim tile, 48 on a memtile of which even channels draw ids 0-23 and odd ones
  24-47 (mlir-aie getNumBDs, isBdChannelAccessible; BdIdGenerator in
  AIEAssignBufferDescriptorIDs.cpp: "Allocator exhausted available BD IDs").
* The folded BD's strides and wraps must fit the tile's fields (see patterns.py).
* Locks: 16 on a compute or shim tile, 64 on a memtile (getNumLocks); each value must fit the 6-bit
  lock (getMaxLockValue, 63).  A compute tile: one producer/consumer pair per DMA-connected
  buffer and DMA channel (getLockForDMA), valued by its ping-pong slots (getLockValuePair over the
  channel's buffers, AIRToAIESchedulingUtils.cpp).  A memtile (compiler's rule, _Piece.settle: getLockForDMA and
  getLockValuePair at e972f29): a pair per memtile buffer, so two per ping-ponged piece, the larger
  init being the BDs per fill on the busier side: max(ceil(reads / writes), ceil(writes / reads))
  over the buffer's BDs, raised to the refeed count for a refed buffer.
* A buffer filled once and read in every iteration of a loop has no correct lowering (lock counts
  and ping-pong slots assume one fill per read: air-annotate-refeed in mlir-air's
  Transform/Passes.td), except through the refeed primitive: a single `air.channel.put` that is
  the whole body of an scf.for (matchRefeedLoop, AIRMiscPasses.cpp), which aircc lowers to one BD
  that re-sends the buffer once per trip, its lock set to the trip count.

Where the sources leave a choice open, the model takes the reading that refuses less of what
mlir-air runs on hardware, and says so in the comment beside the rule.
"""

from __future__ import annotations

import itertools

from ..ir import Block
from . import patterns as P
from .budget import _PingPong, _walk_all, sunk_herd_operands
from .errors import DesignError, ResourceError
from .refeed import annotate as annotate_refeed
from .split_l2 import aircc_columns, Decision, Refusal, SplitModel, env_key, partners
from .types import L1, L2, L3, LEVEL_NAMES, level_of, np_dtype

# NPU2 (AIE2P) per-tile resources, from mlir-aie's target model (include/aie/Dialect/AIE/IR/
# AIETargetModel.h, AIE2TargetModel / NPU2TargetModel: getNumDestSwitchboxConnections and
# getNumSourceSwitchboxConnections for the DMA bundle, getNumBDs, getNumLocks, getMaxLockValue,
# getMemTileSize) and mlir-aie's BD id allocator for memtiles (BdIdGenerator: channels of even
# index draw BD ids 0-23, odd ones 24-47).
TILES = {
    "compute": dict(s2mm=2, mm2s=2, bds=16, locks=16),
    "memtile": dict(s2mm=6, mm2s=6, bds=48, locks=64),
    "shim": dict(s2mm=2, mm2s=2, bds=16, locks=16),
}
MEMTILE_BD_PARITY = 24
# AIE2 lock values are 6-bit (mlir-aie AIE2TargetModel::getMaxLockValue = 0x3F).  Nothing in aircc
# checks it at compile time; on the device a larger value is silently truncated (mlir-air's
# fused_decode.py splits its refeed counts into groups of at most 63 for this reason), so the
# model refuses it: a design that compiles and then hangs is worse than one that is refused.
MAX_LOCK_VALUE = 63
MEMTILE_BYTES = 512 * 1024
BD_DIMS = {L1: 3, L2: 4, L3: 4}  # shim: 3 BD dims + the repeat dimension
MAX_REFEED = (
    MAX_LOCK_VALUE  # a refeed of N sets a lock to N; hardware truncates above 63
)
TILES_PER_L2_TILE = (
    4  # air-split-l2-memref splits only for segments of more compute tiles
)
COLUMNS, COMPUTE_ROWS = 8, 4

_HIER = ("air.launch", "air.segment", "air.herd")


class _NonAffine(Exception):
    """An offset the model cannot evaluate as an integer function of loop and hierarchy ids."""


# ------------------------------------------------------------------------------------ the IR walk
class _End:
    """One side of one transfer: the memory a DMA channel reads (mm2s) or writes (s2mm)."""

    def __init__(self, op, side, direction, ctx, chan=None):
        self.op, self.side, self.direction, self.chan = op, side, direction, chan
        self.hier, self.loops = list(ctx[0]), list(ctx[1])
        self.herd = next(
            (h for h in reversed(self.hier) if h.OPERATION_NAME == "air.herd"), None
        )
        self.segment = next(
            (h for h in reversed(self.hier) if h.OPERATION_NAME == "air.segment"), None
        )
        self.level = level_of(side.memref.type)
        self.dtype = np_dtype(side.memref.type.element_type)

    def key(self, w, env=None):
        """The stream this end belongs to: its own DMA, or its channel and index (under `env`)."""
        if self.chan is None:
            return ("dma", id(self.op))
        try:
            idx = tuple(w.value(v, env or {}) for v in self.op.indices)
        except _NonAffine:
            idx = ("?", id(self.op))
        return ("chan", self.chan, idx)

    def where(self):
        return f"{self.op.OPERATION_NAME} at {self.op._loc}"


_TRANSFERS = ("air.dma_memcpy_nd", "air.channel.put", "air.channel.get")


def _nested_ops(op):
    """Every op inside op's regions, at any depth."""
    for r in op.regions:
        for b in r.blocks:
            for o in b.operations:
                yield o
                yield from _nested_ops(o)


class _Walk:
    def __init__(self, entry):
        self.ends = []
        self.problems = []  # rule violations that are not a tile's count over its limit
        self.argmap = (
            {}
        )  # block-argument uid -> ("operand", value) | ("const", int) | ("var", None)
        self.loop_of_iv = {}
        self.herds = []
        self.walk(entry.entry_block, ([], []))

    def walk(self, block, ctx):
        for op in block.operations:
            name = op.OPERATION_NAME
            if name == "scf.for":
                self.argmap[op.induction_variable._uid] = ("var", None)
                self.loop_of_iv[op.induction_variable._uid] = op
                for a in op.inner_iter_args:
                    self.argmap[a._uid] = ("iter", None)
                self.walk(op.body, (ctx[0], ctx[1] + [op]))
            elif name in _HIER:
                for a in op.ids:
                    self.argmap[a._uid] = ("var", None)
                for a, v in zip(op.size_args, op.size_operands):
                    self.argmap[a._uid] = ("operand", v)
                for a, v in zip(op.kernel_arguments, op.kernel_operands):
                    self.argmap[a._uid] = ("operand", v)
                if name == "air.herd":
                    self.herds.append((op, ctx[0][:]))
                self.walk(op.regions[0].blocks[0], (ctx[0] + [op], ctx[1]))
            elif name == "scf.if":
                moved = [o for o in _nested_ops(op) if o.OPERATION_NAME in _TRANSFERS]
                if moved:
                    self.problems.append(
                        (
                            f"not modelled: a transfer under scf.if at {op._loc}",
                            f"not modelled: {moved[0].OPERATION_NAME} at {moved[0]._loc} runs under "
                            f"the scf.if at {op._loc}; the NPU2 resource model does not count transfers "
                            f"under a condition (its channels, BDs and locks would go uncounted): "
                            f"check the design with aircc (make aircc-check)",
                        )
                    )
            elif name == "air.dma_memcpy_nd":
                self.ends.append(_End(op, op.src, "mm2s", ctx))
                self.ends.append(_End(op, op.dst, "s2mm", ctx))
            elif name == "air.channel.put":
                self.ends.append(_End(op, op.side, "mm2s", ctx, op.chan_name))
            elif name == "air.channel.get":
                self.ends.append(_End(op, op.side, "s2mm", ctx, op.chan_name))

    # Integer evaluation of index values, for probing how an offset moves with a loop or a PE id.
    def value(self, v, env):
        if v._uid in env:
            return env[v._uid]
        o = v.owner
        if isinstance(o, Block):
            kind, x = self.argmap.get(v._uid, ("var", None))
            if kind == "operand":
                return self.value(x, env)
            if kind == "var":
                return 0
            raise _NonAffine(v.describe())
        name = o.OPERATION_NAME
        if name == "arith.constant":
            return int(o.attributes["value"].value)
        if name == "affine.apply":
            return int(o._fn(*[self.value(x, env) for x in o.operands]))
        ev = getattr(o, "_eval", None)
        if ev is not None:
            return int(ev([self.value(x, env) for x in o.operands], o.results[0].type))
        raise _NonAffine(f"{name} at {o._loc}")

    def root(self, v):
        """(root value, element offset function) of a memref value through subviews, casts, reshapes
        and hierarchy operands."""
        terms = []
        while True:
            o = v.owner
            if isinstance(o, Block):
                kind, x = self.argmap.get(v._uid, (None, None))
                if kind == "operand":
                    v = x
                    continue
                return v, terms
            if o.OPERATION_NAME == "memref.subview":
                for off, st in zip(o.static_offsets, o.src_strides):
                    terms.append((off, st))
                v = o.operands[0]
                continue
            if o.OPERATION_NAME in (
                "memref.cast",
                "memref.expand_shape",
                "memref.collapse_shape",
            ):  # same origin, same buffer
                v = o.operands[0]
                continue
            return v, terms

    def offset(self, end, env):
        """The element offset of `end`'s first element in its root buffer, for index values `env`."""
        side = end.side
        total = 0
        root, terms = self.root(side.memref)
        for off, st in terms:
            total += (off if isinstance(off, int) else self.value(off, env)) * st
        if side.implicit:
            return total
        strides = [
            s if isinstance(s, int) else self.value(s, env) for s in side.strides
        ]
        pad = len(strides) - len(side.offsets)
        for i, off in enumerate(side.offsets):
            total += (off if isinstance(off, int) else self.value(off, env)) * strides[
                pad + i
            ]
        return total

    def pattern(self, end):
        side = end.side
        if side.implicit:
            mt = side.memref.type
            strides, _ = mt.get_strides_and_offset()
            return P.canonical(mt.shape or [1], strides or [1])
        sizes = [s if isinstance(s, int) else self.value(s, {}) for s in side.sizes]
        strides = [s if isinstance(s, int) else self.value(s, {}) for s in side.strides]
        return P.canonical(sizes, strides)

    def coefficient(self, end, iv, lo, step):
        """Elements the end's offset moves per trip of the loop with induction variable `iv`
        (None: not an affine function of it)."""
        try:
            f = [self.offset(end, {iv._uid: lo + t * step}) for t in range(3)]
        except _NonAffine:
            return None
        if f[2] - f[1] != f[1] - f[0]:
            return None
        return f[1] - f[0]


# --------------------------------------------------------------------------------- BD chains
def _fits(dims, level):
    """Whether a canonical pattern is one BD of the DMA at `level` (wraps and dims, not strides)."""
    try:
        P.check_limits(
            dims,
            [d[0] for d in dims],
            [d[1] for d in dims],
            level,
            "",
            check_strides=False,
            verifier=False,
        )
    except DesignError:
        return False
    return True


def _trip(loop):
    return getattr(loop, "_emu_trip", None)


class _Chain:
    """The BD chain of one end: how many BDs, and the pattern of each once loops are folded in."""

    def __init__(self, bds, dims):
        self.bds, self.dims = bds, dims


def _chain(w, end, loops, pp_loop, dims=None):
    """The BD chain of `end` (its own pattern, or `dims`: a piece's copy after air-split-l2-memref),
    once per buffer aiecc places for its memory (w.copies: two for a ping-pong pair, three with an odd
    count's epilogue, and every copy a labelled loop's unroll makes of a nested loop).
    """
    dims = w.pattern(end) if dims is None else dims
    bds, folding = 1, True
    for loop in reversed(loops):
        trip = _trip(loop)
        if trip is not None and trip <= 1:
            continue
        if (
            loop is pp_loop
        ):  # the buffers alternate, a BD each (counted below); their cycle
            folding = False
            continue
        lo = w.value(loop.operands[0], {})
        step = w.value(loop.operands[2], {})
        coef = w.coefficient(end, loop.induction_variable, lo, step)
        if (
            trip is None or coef is None
        ):  # unknown trip or offset not affine in the loop: unrolled
            bds *= trip or 1
            folding = False
            continue
        if folding:
            # folding adds the loop as the outermost wrap; it merges into the next one only within the
            # wrap field (applyAIRSpecializeChannelWrapAndStridePattern's maxSize 1023)
            new = P.canonical(
                [trip] + [d[0] for d in dims],
                [coef] + [d[1] for d in dims],
                P.BD_WRAP_MAX[L2],
            )
            if _fits(new, end.level):
                dims = new
                continue
            folding = False
            bds *= trip  # it would need more dimensions than the BD has: one BD per iteration
        elif coef != 0:
            bds *= trip  # it moves a pattern that is already a chain
        # coef == 0 after the chain: the whole chain again, the DMA's own repeat, no new BD
    return _Chain(bds * w.copies(end), dims)


def _check_strides(w, end, chain, tile):
    """The folded BD's strides against the tile's step field, in 32-bit words (see patterns.py)."""
    limit = P.MAX_STRIDE[end.level]
    isz = end.dtype.itemsize
    if end.level in P.MAX_BD_WORDS:
        dims = list(chain.dims)
        while (
            dims and dims[0][1] == 0
        ):  # a leading repeat is the task's, not the BD's length
            dims.pop(0)
        why = P.wrap_problem(dims, end.level) if len(dims) > 1 else None
        if why:
            w.problems.append(
                (
                    f"BD size on the {tile} ({end.where()})",
                    f"{end.where()}: the {tile} BD of its {LEVEL_NAMES[end.level]} side, once the "
                    f"surrounding loops are folded into it: {why}",
                )
            )
        length = -(-P.count(dims) * isz // 4)
        if length > P.MAX_BD_WORDS[end.level]:
            w.problems.append(
                (
                    f"BD length {length} words > {P.MAX_BD_WORDS[end.level]} on the {tile} ({end.where()})",
                    f"{end.where()}: the {tile} BD of its {LEVEL_NAMES[end.level]} side moves {length} "
                    f"32-bit words {[list(d) for d in dims]}, the BD length field holds at most "
                    f"{P.MAX_BD_WORDS[end.level]} (aie.dma_bd verifier: 'buffer descriptor length ... "
                    f"exceeds the maximum of {P.MAX_BD_WORDS[end.level]} words supported by this tile "
                    f"type')",
                )
            )
    for size, stride in chain.dims:
        if size > 1 and P.words(stride, isz) > limit:
            w.problems.append(
                (
                    f"BD stride {P.words(stride, isz)} words > {limit} on the {tile} ({end.where()})",
                    f"{end.where()}: the {tile} BD of its {LEVEL_NAMES[end.level]} side has stride {stride} "
                    f"once the surrounding loops are folded into it {[list(d) for d in chain.dims]}: Stride "
                    f"{stride} exceeds the [1:{limit}] range ({P.words(stride, isz)} 32-bit words; aie.dma_bd verifier, mlir-aie AIEDialect.cpp; mlir-air's kernel registry documents "
                    f"the same failure for its bf16 GEMM when tile_k_l2 * N passes 2^20 words)",
                )
            )


# ---------------------------------------------------------------------------------- the report
class Tile:
    def __init__(self, kind, name):
        self.kind, self.name = kind, name
        self.s2mm, self.mm2s = [], []  # stream descriptions
        self.bds = 0
        self.parity = [0, 0]
        self.locks = 0
        self.lock_value = 0
        self.bytes = 0
        self.pieces = []

    def usage(self):
        lim = TILES[self.kind]
        rows = [
            ("S2MM channels", len(self.s2mm), lim["s2mm"]),
            ("MM2S channels", len(self.mm2s), lim["mm2s"]),
        ]
        if self.kind == "memtile":
            rows += [
                ("BDs even channels", self.parity[0], MEMTILE_BD_PARITY),
                ("BDs odd channels", self.parity[1], MEMTILE_BD_PARITY),
            ]
        else:
            rows.append(("BDs", self.bds, lim["bds"]))
        rows += [
            ("locks", self.locks, lim["locks"]),
            ("largest lock value", self.lock_value, MAX_LOCK_VALUE),
        ]
        if self.kind == "memtile":
            rows.append(("L2 bytes", self.bytes, MEMTILE_BYTES))
        return rows


class ResourceReport:
    def __init__(self, tiles, problems=()):
        self.tiles, self.problems = tiles, list(problems)
        self.splits = (
            []
        )  # (L2 root value, split_l2.Decision): what air-split-l2-memref does

    def first_exceeded(self):
        for t in self.tiles:
            for what, used, limit in t.usage():
                if used > limit:
                    return t, what, used, limit
        return None

    def table(self):
        lines = [
            "NPU2 resources (emulator's model of aircc's lowering): used / limit per tile",
            "  aircc's own rules (e972f29) as modelled: memtile and shim placement, memtile locks",
        ]
        header = f"  {'tile':<36}{'S2MM':>6}{'MM2S':>6}{'BDs':>14}{'locks':>7}{'lock val':>9}{'L2 KiB':>10}"
        lines.append(header)
        for t in self.tiles:
            u = {what: (used, limit) for what, used, limit in t.usage()}
            bds = (
                f"{u['BDs even channels'][0]}+{u['BDs odd channels'][0]}/24+24"
                if t.kind == "memtile"
                else f"{u['BDs'][0]}/{u['BDs'][1]}"
            )
            l2 = (
                f"{t.bytes // 1024}/{MEMTILE_BYTES // 1024}"
                if t.kind == "memtile"
                else ""
            )
            lines.append(
                (
                    f"  {t.name:<36}{'%d/%d' % u['S2MM channels']:>6}{'%d/%d' % u['MM2S channels']:>6}"
                    f"{bds:>14}{'%d/%d' % u['locks']:>7}{'%d/%d' % u['largest lock value']:>9}{l2:>10}"
                ).rstrip()
            )
        if self.splits:
            lines.append("L2 buffers (air-split-l2-memref):")
            for root, dec in self.splits:
                lines.append(f"  {root.type}: {dec.note}")
        for _, n in self.problems:
            lines.append("error: " + n)
        lines.append(self.summary())
        return "\n".join(lines)

    __str__ = table

    def summary(self):
        if self.problems:
            return "resources: " + self.problems[0][0]
        over = self.first_exceeded()
        if over is None:
            return "resources: within limits"
        t, what, used, limit = over
        return f"resources: {t.name}: {what} {used} > {limit}"

    def raise_if_over(self):
        if self.problems:
            raise ResourceError(self.problems[0][1])
        over = self.first_exceeded()
        if over is None:
            return
        t, what, used, limit = over
        detail = {"S2MM channels": t.s2mm, "MM2S channels": t.mm2s}.get(what)
        streams = f" ({'; '.join(detail)})" if detail else ""
        raise ResourceError(
            f"{t.name}: needs {used} {what}, NPU2 has {limit}{streams}\n{self.table()}"
        )


# -------------------------------------------------------------------------------- the analysis
def analyse(compiler, options, check=True):
    """The ResourceReport of a compiled design; with check, a ResourceError for its first problem."""
    w = _Walk(compiler.entry)
    w.compiler = compiler
    pp_l1, pp_l2, labelled = {}, {}, []
    copies_of = (
        {}
    )  # id(alloc) -> the buffers aiecc places for it (ping-pong, epilogue, unrolled nests)
    sunk = sunk_herd_operands(compiler)
    for scopes, level, homes in (
        ([op for op, _ in compiler.herd_ops], L1, pp_l1),
        (compiler.segment_ops, L2, pp_l2),
    ):
        for op in scopes:
            pp = _PingPong(
                op.regions[0].blocks[0],
                (level,),
                options.omit_pingpong or "",
                sunk.get(id(op), ()) if level == L1 else (),
                per_alloc=level == L2,
            )
            labelled += [f for f in pp.loops if id(f) in pp.labelled]
            for a in pp.allocs:
                if pp.pingponged(a):
                    homes[id(a)] = pp.home[id(a)]
                copies_of[id(a)] = pp.factor(a)[0]

    def pp_loop(end):
        root, _ = w.root(end.side.memref)
        o = root.owner
        if isinstance(o, Block):
            return None
        return (pp_l1 if end.level == L1 else pp_l2).get(id(o))

    def copies(end):
        root, _ = w.root(end.side.memref)
        return 1 if isinstance(root.owner, Block) else copies_of.get(id(root.owner), 1)

    w.copies = copies

    columns = getattr(options, "columns", COLUMNS)
    w.end_index = {id(e): i for i, e in enumerate(w.ends)}
    w.herd_x = _herd_columns(compiler, columns)
    w.segment_tiles = _check_total_pes(w, compiler)
    _check_segments_per_launch(w, compiler)
    _check_segments_have_herds(w, compiler)
    _check_packet_upgrade(w, compiler)
    w.refeeds = annotate_refeed(w, lambda e: e.where())
    w.problems += w.refeeds.problems
    _check_fill_once_read_many(w)
    _check_odd_ping_pong(w, labelled)
    _check_l1_lock_races(w, pp_loop)
    tiles = _compute_tiles(w, compiler, pp_loop)
    mem, tiled = _memtiles(w, pp_loop, columns)
    _check_runtime_loop_tiling(w, compiler, options)
    report = ResourceReport(tiles + mem + _shims(w, tiled, columns), w.problems)
    report.splits = w.splits
    report.refeeds = w.refeeds
    if check:
        report.raise_if_over()
    return report


def _herd_group(compiler, herd):
    seg = compiler.herd_segment.get(id(herd))
    return (id(seg), herd.sym_name) if herd.sym_name else (id(herd), None)


def _check_total_pes(w, compiler):
    """The herds of one segment run at once on distinct tiles: at most the 32 compute tiles.
    (Same-named herds are phases of one herd: aircc merges them, MergeAIRHerdsPattern.)
    """
    per_seg = {}
    for op, sizes in compiler.herd_ops:
        seg = compiler.herd_segment.get(id(op))
        group = _herd_group(compiler, op)
        n = 1
        for s in sizes:
            n *= s
        groups = per_seg.setdefault(id(seg), {})
        if n >= groups.get(group, (0, None))[0]:
            groups[group] = (n, op)
    for groups in per_seg.values():
        total = sum(n for n, _ in groups.values())
        if total > COLUMNS * COMPUTE_ROWS:
            names = ", ".join(
                f"@{op.sym_name or 'herd'} ({n})" for n, op in groups.values()
            )
            w.problems.append(
                (
                    f"compute tiles: {total} PEs > {COLUMNS * COMPUTE_ROWS}",
                    f"compute tiles: the herds of one segment need {total} PEs ({names}), "
                    f"NPU2 has {COLUMNS} x {COMPUTE_ROWS} = {COLUMNS * COMPUTE_ROWS} "
                    f"(aircc places each herd on its own tiles: air-place-herds)",
                )
            )
    return {seg: sum(n for n, _ in groups.values()) for seg, groups in per_seg.items()}


PLACEMENT_ATTRS = ("x_loc", "y_loc", "x_size", "y_size")


def _check_segments_per_launch(w, compiler):
    """Several segments in one launch: air-place-herds gives a segment without its own placement the
    whole device from its options (8 x 6 anchored at column 0, row 2: AIRHerdPlacementPass.cpp
    ~228-245, segment by segment), so the herds of every such segment take the same tiles from column
    0, and air-to-aie then finds no shim channel for the second one's L3 transfers ("failed to get
    S2MM tile for L3 allocation", "failed to link to any shim dma allocation": seen on every such
    design of host/generated_designs.py)."""
    for launch_op, _ in compiler.launch_ops:
        segs = [s for s in compiler.segment_ops if _inside(s, launch_op)]
        unplaced = [
            s for s in segs if not all(a in s.attributes for a in PLACEMENT_ATTRS)
        ]
        if len(segs) > 1 and unplaced:
            names = ", ".join(f"@{s.sym_name or 'segment'}" for s in segs)
            w.problems.append(
                (
                    f"{len(segs)} segments in one launch",
                    f"{len(segs)} segments in one launch: the air.launch at {launch_op._loc} holds "
                    f"{names} without "
                    f"their own placement (x_loc, y_loc, x_size, y_size): air-place-herds places each "
                    f"on the whole device from column 0 (AIRHerdPlacementPass.cpp ~228-245), so their "
                    f"herds take the same tiles and air-to-aie finds no shim channel for the second "
                    f"segment's L3 transfers. Use one segment per launch, or one launch per segment",
                )
            )


def _check_segments_have_herds(w, compiler):
    """A segment with no herd (L3 <-> L2 transfers only): aircc lowers each runtime DMA through a
    `metadata` symbol naming a shim DMA allocation that air-to-aie makes for the flows of a segment's
    herds; with no herd there is none, the pattern does not apply, and airrt-to-npu fails with "failed
    to legalize operation 'airrt.dma_memcpy_nd'" (AIRRtToNpuPass.cpp DmaToNpuPattern ~554-590; every
    such design tried, at e972f29)."""
    for seg in compiler.segment_ops:
        if not any(_inside(h, seg) for h, _ in compiler.herd_ops):
            w.problems.append(
                (
                    f"segment @{seg.sym_name or 'segment'} without a herd",
                    f"the segment @{seg.sym_name or 'segment'} at {seg._loc} has no herd: aircc lowers "
                    f"a runtime DMA only through the shim allocation air-to-aie makes for a herd's "
                    f'flows, so airrt-to-npu cannot lower its L3 transfers ("failed to legalize '
                    f"operation 'airrt.dma_memcpy_nd'\", AIRRtToNpuPass.cpp DmaToNpuPattern). Give "
                    f"the segment a herd that moves the data",
                )
            )


# aircc's shim DMA channels per column and direction (AIRDmaToChannel.cpp clShimDmaChannelsPerCol).
SHIM_CHANNELS_PER_COLUMN = 2


def _check_packet_upgrade(w, compiler):
    """air-dma-to-channel upgrades a segment's herd <-> L3 channels to packet-switched flows when more
    of them go one way than a shim column has channels (AIRDmaToChannel.cpp ~1570-1745: a DMA between
    a herd and L3 is one channel whose L3 side moves to the launch, and so does the L3 side of an
    explicit channel put or got in a segment (seen in aircc's output): each counts; the upgrade is per
    direction). Packet flows time-share one DMA channel
    per tile and direction and draw 5-bit packet ids; the model does not lower them, so it refuses the
    design as not modelled rather than count channels aircc does not use. Broadcast channels, which
    the pass counts by their column span, are counted one each here: the model may name an upgrade
    aircc would not make, never miss one."""
    by_segment = {}
    for e in w.ends:
        if e.level != L1 or e.herd is None or e.segment is None:
            continue
        if e.chan is None:
            other = e.op.src if e.direction == "s2mm" else e.op.dst
            if level_of(other.memref.type) != L3:
                continue
            key = ("dma", id(e.op))
        else:
            far = "mm2s" if e.direction == "s2mm" else "s2mm"
            if not any(
                o.chan == e.chan
                and o.direction == far
                and o.level == L3
                and o.herd is None
                for o in w.ends
            ):
                continue
            key = ("chan", e.chan)
        way = "input" if e.direction == "s2mm" else "output"
        by_segment.setdefault(
            id(e.segment), (e.segment, {"input": set(), "output": set()})
        )
        by_segment[id(e.segment)][1][way].add(key)
    for seg, ways in by_segment.values():
        for way, keys in ways.items():
            if len(keys) > SHIM_CHANNELS_PER_COLUMN:
                w.problems.append(
                    (
                        f"not modelled: {len(keys)} {way} channels of @{seg.sym_name or 'segment'} "
                        f"become packet flows",
                        f"not modelled: segment @{seg.sym_name or 'segment'} at {seg._loc} moves "
                        f"{len(keys)} {way} channels between its herds and L3, more than the "
                        f"{SHIM_CHANNELS_PER_COLUMN} shim channels of a column: aircc upgrades them to "
                        f"packet-switched flows (air-dma-to-channel, AIRDmaToChannel.cpp ~1570-1745), "
                        f"which time-share one DMA channel per tile and take 5-bit packet ids. The "
                        f"emulator does not model that lowering: check the design with aircc "
                        f"(make aircc-check), or stage the transfers through L2",
                    )
                )


def _segment_loops(end):
    """Loops around an end that belong to its segment's own program (not inside a herd)."""
    if end.segment is None:
        return []
    out = []
    for loop in end.loops:
        if _inside(loop, end.segment) and (
            end.herd is None or not _inside(loop, end.herd)
        ):
            out.append(loop)
    return out


def _inside(op, ancestor):
    p = op.parent if hasattr(op, "parent") else None
    while p is not None:
        if p is ancestor:
            return True
        p = getattr(p, "parent", None)
    return False


def _check_fill_once_read_many(w):
    by_root = {}
    for e in w.ends:
        if e.level != L2:
            continue
        root, _ = w.root(e.side.memref)
        by_root.setdefault(root._uid, []).append(e)
    for ends in by_root.values():
        fills = [e for e in ends if e.direction == "s2mm"]
        for r in (e for e in ends if e.direction == "mm2s"):
            # a loop around the read that no fill of the buffer is inside, and that
            # air-annotate-refeed does not erase: one fill, many reads
            extra = [
                lp
                for lp in _segment_loops(r)
                if (_trip(lp) or 2) > 1
                and not any(lp in f.loops for f in fills)
                and id(lp) not in w.refeeds.erased
            ]
            if not extra or not fills:
                continue
            lp, f, trip = extra[0], fills[0], _trip(extra[0])
            w.problems.append(
                (
                    f"fill once, read many: L2 buffer {r.side.memref.type} read in the scf.for at {lp._loc}",
                    f"{r.where()}: reads the L2 buffer {r.side.memref.type} in every iteration of the "
                    f"scf.for at {lp._loc} ({trip if trip is not None else 'unknown'} trips), but "
                    f"{f.where()} fills it once, outside that loop: aircc's locks and ping-pong slots "
                    f"assume one fill per read (mlir-air air-annotate-refeed, AIRToAIESchedulingUtils.cpp "
                    f"getLockValuePair). Refill it inside the loop, or re-send it with the refeed "
                    f"primitive: one air.channel.put alone in an scf.for of the reads' trip count",
                )
            )


def _check_odd_ping_pong(w, labelled):
    """A ping-ponged loop of odd static trip count: air-ping-pong-transform unrolls it by 2 with MLIR's
    loopUnrollByFactor and keeps the one-trip epilogue (AIRDependencyScheduleOpt.cpp runLoopUnroll: only
    a provably even count's dead epilogue is erased), whose buffer is a third copy outside the
    ping-pong ring. mlir-air documents the corruption (kernel_registry/details/EltwiseAdd_bf16.md: 15
    iterations mis-transfer, 16 pass; fused_decode_qwen.py pads 11 trips to 12) and nothing in the
    passes at e972f29 guards it."""
    for f in labelled:
        trip = _trip(f)
        if trip is not None and trip > 1 and trip % 2:
            w.problems.append(
                (
                    f"odd trip count {trip} of the ping-ponged scf.for at {f._loc}",
                    f"the scf.for at {f._loc} runs {trip} times and aircc ping-pongs its buffers: it "
                    f"unrolls the loop by 2 and leaves a one-trip epilogue whose buffer is not in the "
                    f"ping-pong ring (air-ping-pong-transform, AIRDependencyScheduleOpt.cpp runLoopUnroll); "
                    f"mlir-air documents the data corruption this causes on NPU2 (kernel_registry "
                    f"EltwiseAdd_bf16.md, fused_decode_qwen.py). Use an even trip count, or mark the loop "
                    f"air.disable_ping_pong",
                )
            )


def _executions(loops) -> int:
    """How often an op runs per dispatch inside its herd, from its herd loops: the product of their trips
    (a loop of unknown trip count taken as 2, the smallest that repeats)."""
    n = 1
    for lp in loops:
        n *= _trip(lp) or 2
    return n


def _check_l1_lock_races(w, pp_loop):
    """Four L1 buffer shapes aircc compiles to a racy or hanging lock protocol (found by running the
    compiled designs in the simulator of the compiled design; their lock sequences in docs/emulator.md).

    air-to-aie gives each core-side transfer a lock pair and places the core's release of a fill at the
    end of the buffer's lifetime as it sees it: before the next transfer that writes the buffer, else
    after the last op that touches it (AIRToAIEPass.cpp allocateCoreLocksPerMemcpyOp ~6136-6300,
    findNextDmaWriteOp ~6040-6075). Two readings follow:

    * a buffer filled by a DMA and sent by a DMA: the send (a channel put has no destination memref,
      so it is no write) does not end the fill's lifetime, and the S2MM and the MM2S of one buffer draw
      unrelated lock pairs (getLockForDMA, AIRToAIESchedulingUtils.cpp ~1038-1200). The core hands the
      buffer back to the S2MM before the MM2S has sent it: once fills outnumber the buffer's slots, a
      fill overwrites a result not yet sent;
    * a buffer filled in several transfers per round (pieces): the second piece's fill counts as a
      write of the same buffer (isDmaWriteToBuffer ~6006 compares buffers, not offsets), so the core
      releases the first piece as soon as it acquires it, before it reads the buffer, and the next
      round's first piece can land first once rounds outnumber the slots;
    * a core access before the buffer's first transfer: the acquire of the fill's lock sits at the fill,
      so the access holds none;
    * a buffer filled in several transfers in its alloc's body and sent in that body: the send's BD
      acquires one token per fill, the core releases one a round, and the design hangs.

    Refused as compiler hazards: the compiler compiles them and the compiled design computes a wrong
    output or hangs. Upstream's hardware-tested examples keep such buffers apart (passthrough_dma: one L1 buffer
    in, another out)."""
    by_root = {}
    for e in w.ends:
        if e.level != L1 or e.herd is None:
            continue
        root, _ = w.root(e.side.memref)
        by_root.setdefault(root._uid, (root, []))[1].append(e)
    for root, ends in by_root.values():
        fills = [e for e in ends if e.direction == "s2mm"]
        sends = [e for e in ends if e.direction == "mm2s"]
        if not fills:
            continue
        early = _access_before_fill(w, root, {id(e.op) for e in ends})
        if early is not None:
            w.problems.append(
                (
                    f"aircc lock race: L1 buffer {root.type} used by the core before its fill",
                    f"{early.where()} uses the L1 buffer {root.type} before {fills[0].where()} fills "
                    f"it: aircc places the core's acquire of the fill's lock at the fill "
                    f"(AIRToAIEPass.cpp allocateCoreLocksPerMemcpyOp), so this access holds no lock "
                    f"and the fill can land around it: the compiled design computes a wrong output "
                    f"(the simulator of the compiled design shows the fill landing before a store "
                    f"that precedes it). Touch the buffer only after its fill",
                )
            )
            continue
        herd = fills[0].herd
        slots = 2 if pp_loop(fills[0]) is not None else 1
        owner = root.owner
        home = [] if isinstance(owner, Block) else _loops_around(owner, herd)
        rounds = _executions(home)
        # a send between two fills: in a loop around both, of more trips than the buffer has slots
        shared = [
            (f, s, _executions([lp for lp in _herd_loops(f, herd) if lp in s.loops]))
            for f in fills
            for s in sends
        ]
        f, s, n_fills = max(shared, key=lambda t: t[2], default=(None, None, 0))
        if n_fills > slots:
            w.problems.append(
                (
                    f"aircc lock race: L1 buffer {root.type} filled and sent by DMA, {n_fills} fills "
                    f"in {slots} slot(s)",
                    f"{f.where()} fills the L1 buffer {root.type} and {s.where()} sends it, {n_fills} "
                    f"times a dispatch in a loop around both, with {slots} slot(s): aircc's core "
                    f"releases the fill's lock after its last use of the buffer and before the send "
                    f"(AIRToAIEPass.cpp "
                    f"allocateCoreLocksPerMemcpyOp; a put is not a write; the S2MM and MM2S of one "
                    f"buffer draw unrelated lock pairs, getLockForDMA), so a later fill overwrites a "
                    f"result not yet sent: the compiled design computes a wrong output. Give the "
                    f"result a buffer of its own (as mlir-air's passthrough_dma does)",
                )
            )
            continue
        # fills and a send side by side in the alloc's own body: a buffer filled in pieces each round
        side = [e for e in fills if _herd_loops(e, herd) == home]
        sent = [e for e in sends if _herd_loops(e, herd) == home]
        if len(side) > 1 and sent:
            w.problems.append(
                (
                    f"aircc lock race: L1 buffer {root.type} filled in {len(side)} transfers a "
                    f"round and sent by DMA",
                    f"{side[0].where()} and {len(side) - 1} more fill the L1 buffer {root.type} in "
                    f"one round and {sent[0].where()} sends it: aircc gives the send's BD an acquire "
                    f"of one token per fill (AcquireGreaterEqual {len(side)}) while the core releases "
                    f"one a round, so the compiled design hangs (found by make fuzz-aircc's three-way "
                    f"judgement; docs/emulator.md has the lock sequence). Fill it in one transfer a "
                    f"round, or send a buffer of its own",
                )
            )
            continue
        n_fills = sum(_executions(_herd_loops(e, herd)) for e in fills)
        if n_fills > rounds and rounds > slots:
            f = fills[0]
            w.problems.append(
                (
                    f"aircc lock race: L1 buffer {root.type} filled in {n_fills // rounds} pieces a "
                    f"round, {rounds} rounds in {slots} slot(s)",
                    f"{f.where()} and {len(fills) - 1 or 'its loop'} more fill the L1 buffer "
                    f"{root.type} in {n_fills // rounds} pieces a round, {rounds} rounds a dispatch with "
                    f"{slots} slot(s): aircc counts each piece's fill as a write of the whole buffer "
                    f"(AIRToAIEPass.cpp isDmaWriteToBuffer compares buffers, not offsets), so the core "
                    f"releases a piece as soon as it acquires it and the next round's fill can land "
                    f"before the core reads it: the compiled design computes a wrong output. Fill it "
                    f"in one transfer a round",
                )
            )


def _loops_around(op, herd) -> list:
    """The scf.for ops around op inside the herd, outermost first."""
    out, p = [], getattr(op, "parent", None)
    while p is not None and p is not herd:
        if getattr(p, "OPERATION_NAME", "") == "scf.for":
            out.append(p)
        p = getattr(p, "parent", None)
    return out[::-1]


def _herd_loops(end, herd) -> list:
    return [lp for lp in end.loops if _inside(lp, herd)]


def _self_and_nested(op):
    """op, then every op nested in it, pre-order."""
    yield op
    for r in op.regions:
        for b in r.blocks:
            yield from _walk_all(b)


def _access_before_fill(w, root, transfers):
    """The first op after the buffer's alloc, in its block, that uses the buffer (as an operand, through
    views, at any depth) before any of its transfers (`transfers`: ids of its DMA / channel ops) has
    run, or None."""
    alloc = root.owner
    if isinstance(alloc, Block) or alloc.parent_block is None:
        return None
    ops = alloc.parent_block.operations
    for op in ops[ops.index(alloc) + 1 :]:
        inner = list(_self_and_nested(op))
        if any(id(o) in transfers for o in inner):
            return None
        if op.OPERATION_NAME == "memref.dealloc":
            continue
        if any(
            "memref" in str(getattr(v, "type", "")) and w.root(v)[0] is root
            for o in inner
            for v in o.operands
        ):
            return op
    return None


def _check_runtime_loop_tiling(w, compiler, options):
    """runtime_loop_tiling_sizes on a small segment with several launch iterations: mlir-air's bfp16
    GEMM documents that when its output drains from one memtile buffer over a single shim channel, the
    shim-BD fold collapses that drain across the tiled launch iterations into one task, so only the
    first launch iteration's output is written (programming_examples/matrix_multiplication/bfp16/run.py
    ~549-575; seen at herds 2x2, 2x1, 1x2; herds of 8 and more split the drain and are fine). The
    model refuses that profile: tiling that groups launch iterations (air-opt-shim-dma-bds tiles each
    launch dimension by the largest divisor of its trip count not above the size), fewer than 8
    compute tiles in the segment, and an output leaving through an L2 buffer that is not split.
    """
    sizes = options.runtime_loop_tiling_sizes
    if not sizes:
        return
    unsplit = {root._uid for root, dec in w.splits if not dec.split}
    for op, grid in compiler.launch_ops:
        iterations = 1
        grouped = 1
        for i, n in enumerate(grid):
            iterations *= n
            if i < len(sizes):
                grouped *= max(f for f in range(1, min(n, sizes[i]) + 1) if n % f == 0)
        if iterations <= 1 or grouped <= 1:
            continue
        for e in w.ends:
            if e.level != L3 or e.direction != "s2mm" or not _inside(e.op, op):
                continue
            src = partners(w, e)
            if not src or src[0].level != L2:
                continue
            root, _ = w.root(src[0].side.memref)
            tiles = w.segment_tiles.get(id(src[0].segment), 0)
            if root._uid in unsplit and tiles < 8:
                w.problems.append(
                    (
                        f"runtime_loop_tiling_sizes {list(sizes)} on a {tiles}-tile segment with "
                        f"{iterations} launch iterations",
                        f"{e.where()}: the output drains from one memtile buffer ({root.type}) over one "
                        f"shim channel, in a segment of {tiles} compute tiles, and "
                        f"runtime_loop_tiling_sizes={list(sizes)} groups {grouped} of the {iterations} "
                        f"launch iterations: on NPU2 the shim-BD fold collapses that drain into one "
                        f"task and only the first launch iteration's output is written (mlir-air "
                        f"matrix_multiplication/bfp16/run.py, which chooses [1, 1] there). Use "
                        f"runtime_loop_tiling_sizes=[1, 1] or a herd of 8 or more tiles",
                    )
                )
                return


def _compute_tiles(w, compiler, pp_loop):
    groups = {}
    for e in w.ends:
        if e.level != L1:
            continue
        if e.herd is None:
            continue  # an L1 side outside any herd has no core tile of its own to count on
        groups.setdefault(_herd_group(compiler, e.herd), []).append(e)
    tiles = []
    for key, ends in groups.items():
        herd = ends[0].herd
        t = Tile("compute", f"compute (@{herd.sym_name or 'herd'}, per PE)")
        seen = {"s2mm": {}, "mm2s": {}}
        buffers = {}
        for e in ends:
            loops = [lp for lp in e.loops if _inside(lp, e.herd)]
            ch = _chain(w, e, loops, pp_loop(e))
            _check_strides(w, e, ch, t.name)
            streams = seen[e.direction]
            streams.setdefault(e.key(w), e.where())
            t.bds += ch.bds
            root, _ = w.root(e.side.memref)
            slots = 2 if pp_loop(e) is not None else 1
            # a lock pair per (buffer, DMA channel): getLockForDMA reuses a compute tile's pair only for
            # the same buffer on the same channel (AIRToAIESchedulingUtils.cpp at e972f29, ~1182-1196),
            # so a buffer filled by one channel and drained by another holds two pairs
            key = (root._uid, e.direction, e.key(w))
            buffers[key] = max(buffers.get(key, 0), slots)
        t.s2mm = list(seen["s2mm"].values())
        t.mm2s = list(seen["mm2s"].values())
        t.locks = 2 * len(buffers)
        t.lock_value = max(buffers.values(), default=0)
        tiles.append(t)
    return tiles


class _Piece:
    """One L2 alloc as air-to-aie sees it: a piece of an L2 buffer after air-split-l2-memref (the
    whole buffer when it is not split), with its ping-pong copy (a second memtile buffer) when the
    buffer is ping-ponged."""

    def __init__(self, name, nbytes, slots, pinned=None, shape=None, order=(0,)):
        self.name, self.bytes, self.slots, self.pinned = name, nbytes, slots, pinned
        # (shape, element type) of the piece: the round-robin key; where its alloc sits in the
        # program (the allocs are walked in that order)
        self.shape, self.order = shape, order
        self.count = 1  # air.refeed_count of the buffer
        self.lock_value = 1
        self.locks = 2 * slots
        self._streams = {}  # (direction, stream key) -> [description, bds, flow order]
        # stream key (its channel after specialisation) -> columns of the compute tiles across it
        self.peers = {}

    def add(
        self, direction, key, what, bds, shared=False, order=(0,), cols=frozenset()
    ):
        """One more BD chain on a stream: a new stream, or more BDs on one it already has (the ops of
        one channel share its DMA channel, one BD chain after the other).  shared: the same chain
        seen again from another PE of a broadcast, no new BDs.  cols: the columns of the compute
        tiles on the other side of the channel."""
        entry = self._streams.get((direction, key))
        if entry is None:
            self._streams[(direction, key)] = [what, bds, order]
        else:
            entry[2] = min(entry[2], order)
            if not shared:
                entry[1] += bds
        self.peers.setdefault(key, set()).update(cols)

    @property
    def streams(self):
        return [(d, what, bds) for (d, _), (what, bds, _) in self._streams.items()]

    def settle(self):
        """Locks and the largest lock init, as getLockForDMA sets them for a memtile buffer
        (AIRToAIESchedulingUtils.cpp 1038-1276 at e972f29): every buffer of the piece (each
        ping-pong copy is one) gets its own pair (the first DMA op on a buffer allocates it,
        1233-1275; every later op on the same buffer reuses it, 1124-1132, aircc leaving
        use-lock-race-condition-fix off); init = getLockValuePair(buffer) (1233-1239, 488-529): the
        buffer's DMA ops once loops are unrolled into BD chains, counted as writes (dst) and reads
        (src), max(ceil(reads / writes), ceil(writes / reads)), 1 when one side has none; the write
        lock raised to air.refeed_count (1259-1271).  A buffer written and never read gets one
        self-recycling lock (isConsumerlessMemtileDrain, 637-643 and 1241-1256)."""
        per = self.slots
        wr = -(-sum(b for d, _, b in self.streams if d == "s2mm") // per)
        rd = -(-sum(b for d, _, b in self.streams if d == "mm2s") // per)
        ratio = -(-max(wr, rd) // min(wr, rd)) if wr and rd else 1
        self.lock_value = max(ratio, self.count)
        self.locks = self.slots * (1 if wr and not rd else 2)


def _pe_space(compiler, herd):
    sizes = next(s for op, s in compiler.herd_ops if op is herd)
    return [
        dict(zip((a._uid for a in herd.ids), pe))
        for pe in itertools.product(*[range(s) for s in sizes])
    ]


def _row_major(shape):
    rs = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        rs[d] = rs[d + 1] * shape[d + 1]
    return rs


# ------------------------------------------------------------------- columns and channel peers
def _herd_columns(compiler, columns):
    """id(herd op) -> its first column, as air-place-herds places it (AIRHerdPlacementPass.cpp at
    e972f29): a herd with x_loc and y_loc keeps them (extractPinnedHerds 499-557); the others,
    largest first, go to the first free cell of the segment's grid, rows then columns
    (placeHerdsInSegment 559-589, naivePlacement 1487-1511).  Same-named herds are one herd
    (MergeAIRHerdsPattern)."""
    out, by_seg = {}, {}
    for op, sizes in compiler.herd_ops:
        seg = compiler.herd_segment.get(id(op))
        by_seg.setdefault(id(seg), {}).setdefault(_herd_group(compiler, op), []).append(
            (op, sizes)
        )
    for groups in by_seg.values():
        busy, todo = set(), []
        for members in groups.values():
            op, sizes = members[0]
            nx = sizes[0]
            ny = sizes[1] if len(sizes) > 1 else 1
            xl = op.attributes.get("x_loc")
            if xl is not None and op.attributes.get("y_loc") is not None:
                x = xl.value
                busy |= {(r, c) for r in range(ny) for c in range(x, x + nx)}
                for m, _ in members:
                    out[id(m)] = x
            else:
                todo.append((members, nx, ny))
        todo.sort(key=lambda t: -(t[1] * t[2]))
        for r in range(COMPUTE_ROWS):
            for c in range(columns):
                if (r, c) in busy:
                    continue
                for k, (members, nx, ny) in enumerate(todo):
                    cells = {
                        (rr, cc) for rr in range(r, r + ny) for cc in range(c, c + nx)
                    }
                    if (
                        r + ny <= COMPUTE_ROWS
                        and c + nx <= columns
                        and not cells & busy
                    ):
                        busy |= cells
                        for m, _ in members:
                            out[id(m)] = c
                        del todo[k]
                        break
    return out


def _column(w, herd, env):
    """The column of the compute tile of `herd`'s PE `env` (herd x is the column)."""
    return w.herd_x.get(id(herd), 0) + env.get(herd.ids[0]._uid, 0)


def _chan_index(w, end, env, rank):
    try:
        idx = [w.value(v, env) for v in end.op.indices]
    except _NonAffine:
        return None
    return tuple([0] * (rank - len(idx)) + idx)


def _chan_match(w, end, env, other, oenv):
    """Whether the op `end` at `env` and the op `other` (other direction, same channel) at `oenv` are
    the two sides of one channel after air-to-aie specialises the bundle: the get's index is among
    the put's targets (its index, widened over broadcast_shape)."""
    ch = w.compiler.channels.get(end.chan)
    size = list(ch.size) if ch is not None else [1]
    bshape = (ch.broadcast_shape if ch is not None else None) or size
    put, penv, get, genv = (
        (end, env, other, oenv) if end.direction == "mm2s" else (other, oenv, end, env)
    )
    p = _chan_index(w, put, penv, len(size))
    g = _chan_index(w, get, genv, len(bshape))
    if p is None or g is None or len(p) != len(g):
        return p is None or g is None  # not evaluable: assume they meet
    return all(
        gi == pi or (s == 1 and b > 1 and 0 <= gi < b)
        for gi, pi, s, b in zip(g, p, size, bshape)
    )


def _peer_columns(w, end, env):
    """Columns of the compute tiles on the other side of `end`'s channel at `env` (aircc reads them
    off the aie.core parents of the channel's other ops: L2MemrefToMemTileMap otherSideCoreCol,
    AIRToAIEPass.cpp 2597-2620; effectiveColForMemTileLTO, AIRToAIESchedulingUtils.cpp 2340-2373).
    """
    if end.chan is None:  # a DMA: air-dma-to-channel gives it a channel of its own
        return {_column(w, end.herd, env)} if end.herd is not None else set()
    cols = set()
    for p in partners(w, end):
        if p.herd is None:
            continue
        for penv in _pe_space(w.compiler, p.herd):
            if _chan_match(w, end, env, p, penv):
                cols.add(_column(w, p.herd, penv))
    return cols


def _flow_order(w, end, sub=0):
    """Where `end`'s flow falls in air-to-aie's list of flows (placeDMAChannelsAndRouteFlows,
    AIRToAIEPass.cpp 4893-4946: one flow per channel, in the order the device's walk first meets
    one of its ops).  The launch's and segment's transfers are cloned into the device in program
    order ahead of the cores (cloneL2AndL3MemcpysToDeviceOp 4477-4622 inserts them after the last
    aie.tile, 4488-4492), so a flow's first op is its earliest launch- or segment-level end, else
    its first herd-level one. A flow with a DDR side comes first: air-dma-to-channel hoists a
    transfer's L3 side into the launch, ahead of the segment (seen compiling the GEMM's resident A:
    the C drain's memtile MM2S is channel 0, ahead of the segment-level re-send's)."""
    idx = w.end_index
    ends = [e for e in [end] + partners(w, end) if e.chan == end.chan]
    ddr = any(e.level == L3 for e in ends)
    first = min((not ddr, e.herd is not None, idx[id(e)]) for e in ends)
    return first + (sub,)


def _stream_key(w, end, env):
    """The channel a memtile or shim side of `end` uses at `env` after air-dma-to-channel and the
    bundle's specialisation: a channel op's (name, indices); a DMA in a herd, one channel per
    broadcast group (PEs that touch the same bytes); any other DMA, its own."""
    if end.chan is None and end.herd is not None:
        return (end.key(w, env), w.offset(end, env))
    return end.key(w, env)


# ------------------------------------------------------------------------------------- memtiles
def _program_order(w):
    return {id(op): i for i, op in enumerate(_walk_all(w.compiler.entry.entry_block))}


def _memtiles(w, pp_loop, columns):
    """Split every L2 buffer as air-split-l2-memref does (split_l2.py), count each piece's streams and
    BDs, place the pieces (_place). Returns the memtiles and, per end, its tiled copies (the split
    single side and its L3 partner: one stream per piece)."""
    by_root = {}
    for e in w.ends:
        if e.level == L2:
            root, _ = w.root(e.side.memref)
            by_root.setdefault(root._uid, (root, []))[1].append(e)
    opts = w.compiler.opt
    model = SplitModel(
        w,
        w.segment_tiles,
        aircc_columns(opts.target_device, opts.num_device_cols),
    )
    pieces, tiled = [], {}
    w.splits = []
    # id(L3 end) -> the pieces its streams feed or drain, by index; id(L2 end) -> {env key: piece}
    w.piece_of_l3, w.piece_of_end = {}, {}
    order = _program_order(w)
    for uid, (root, ends) in by_root.items():
        try:
            dec = model.decide(root, ends)
        except Refusal as r:
            w.problems.append((r.short, r.detail))
            dec = Decision(
                piece_bytes=root.type.num_elements
                * np_dtype(root.type.element_type).itemsize,
                note="refused: " + r.short,
                pieces=r.pieces,
            )
        w.splits.append((root, dec))
        tiled.update(dec.tiled)
        n = dec.factor
        count = w.refeeds.alloc_counts.get(uid, 1)
        if count > 1 and dec.split:
            w.problems.append(
                (
                    f"refeed: L2 buffer {root.type} is split and loses its air.refeed_count",
                    f"L2 buffer {root.type} (at {root.owner._loc}) carries air.refeed_count = {count} "
                    f"({'; '.join(w.refeeds.where[('alloc', uid)])}), but air-split-l2-memref, which aircc "
                    f"runs after air-annotate-refeed, cuts it into {n} pieces ({dec.note}) and creates them "
                    f"as fresh allocs without the count (AIRMiscPasses.cpp partitionMemref): each piece is "
                    f"sent once and its readers wait forever for the second send. Pin the buffer with "
                    f"air.memtile_col = <column> (the split leaves pinned allocs alone), as mlir-air's "
                    f"fused_decode does",
                )
            )
        slots = 2 if any(pp_loop(e) is not None for e in ends) else 1
        shape = list(root.type.shape)
        if dec.split and dec.dim is not None:
            shape[dec.dim] //= n
        at = order.get(id(root.owner), len(order) + w.end_index[id(ends[0])])
        segment = next((e.segment for e in ends if e.segment is not None), None)
        mine = [
            _Piece(
                f"{root.type}" + (f" [piece {i} of {n}]" if n > 1 else ""),
                dec.piece_bytes * slots,
                slots,
                dec.pinned,
                shape=(tuple(shape), str(root.type.element_type)),
                order=(at, i),
            )
            for i in range(n)
        ]
        for p in mine:
            p.segment = segment
        for e in ends:
            loops = [
                lp for lp in e.loops if e.segment is None or _inside(lp, e.segment)
            ]
            if (
                id(e) in dec.tiled
            ):  # the single side: one stream per piece, its copy's BD chain
                for i, pat in enumerate(dec.tiled[id(e)]):
                    ch = _chain(w, e, loops, pp_loop(e), dims=pat.dims())
                    _check_strides(w, e, ch, "memtile")
                    mine[i].add(
                        e.direction,
                        (e.key(w), i),
                        e.where(),
                        ch.bds,
                        order=_flow_order(w, e, i),
                    )
                for p in partners(w, e):
                    if p.level == L3:
                        w.piece_of_l3[id(p)] = mine
                continue
            ch = _chain(w, e, loops, pp_loop(e))
            _check_strides(w, e, ch, "memtile")
            where = dec.piece_of.get(id(e), {})
            envs = _pe_space(w.compiler, e.herd) if e.herd is not None else [{}]
            for k, env in enumerate(envs):
                # PEs that read the same bytes of a piece share one broadcast stream (a BD chain once)
                piece = mine[where.get(env_key(env), 0)]
                w.piece_of_end.setdefault(id(e), {})[env_key(env)] = piece
                piece.add(
                    e.direction,
                    _stream_key(w, e, env),
                    e.where(),
                    ch.bds,
                    shared=e.herd is not None,
                    order=_flow_order(w, e, k),
                    cols=_peer_columns(w, e, env),
                )
        for p in mine:
            p.count = count
            p.settle()
        pieces += mine
    tiles = []
    for seg, group in _by_segment(pieces).items():
        tiles += _place(w, group, columns)
    return tiles, tiled


def _by_segment(items):
    out = {}
    for x in items:
        out.setdefault(id(x.segment), []).append(x)
    return out


class _Lto:
    """One aie.logical_tile of air-to-aie: a memtile or a shim tile not yet placed."""

    def __init__(self, ir, col=None):
        self.ir, self.col, self.pieces = ir, col, []

    def effective_col(self):
        """effectiveColForMemTileLTO (AIRToAIESchedulingUtils.cpp 2340-2373): the one column every
        compute tile across its buffers' channels sits in, else None."""
        cols = set()
        for p in self.pieces:
            for c in p.peers.values():
                cols |= c
        return next(iter(cols)) if len(cols) == 1 else None


def _buckets(pieces):
    """L2MemrefToMemTileMap's first stage (AIRToAIEPass.cpp 2509-2572): the allocs in program order,
    each joining the first bucket one of whose allocs shares a channel with it (same name and
    indices: areReferencedByTheSameAIRChannel 2467-2490) and carries no other air.memtile_col pin,
    else opening its own."""
    buckets = []
    for p in sorted(pieces, key=lambda p: p.order):
        for b in buckets:
            if not any(p.peers.keys() & q.peers.keys() for q in b):
                continue
            if p.pinned is not None and any(
                q.pinned is not None and q.pinned != p.pinned for q in b
            ):
                continue
            b.append(p)
            break
        else:
            buckets.append([p])
    return buckets


def _bucket_col(bucket, columns):
    """deriveBucketCol (AIRToAIEPass.cpp 2621-2639): the column of the compute tiles across the
    bucket's channels, when every channel that reaches tiles of one column agrees; a channel whose
    tiles span columns, or reaches none, has no say."""
    consensus = None
    for p in bucket:
        for cols in p.peers.values():
            if len(cols) != 1:
                continue
            c = next(iter(cols))
            if consensus is None:
                consensus = c
            elif consensus != c:
                return None
    return consensus if consensus is not None and 0 <= consensus < columns else None


def _assign_memtiles(pieces, columns):
    """The memtile (logical tile) of each piece, as L2MemrefToMemTileMap decides it at e972f29.

    outlineAIEMemtiles (AIRToAIEPass.cpp 802-901, 877-890) emits one unplaced memtile per column
    of the segment (air-place-herds sizes the segment to the device's columns), in column order.  The
    allocs are bucketed (_buckets); a bucket's column is its air.memtile_col pin, else the column of
    the compute tiles across its channels (_bucket_col).  When no column is wanted by two unpinned
    buckets, each wanted column gets one memtile (the next unclaimed one, given that column:
    findOrCreateLtoForCol 2713-2740) and the other buckets take the next unclaimed memtile, then
    round-robin (2773-2803).  Otherwise ("saturated", 2666-2701 and 2742-2771) pinned buckets
    still get their column's memtile, and the rest go round-robin over the memtiles: a bucket whose
    shape (its first alloc's type) several buckets share takes that shape's next slot, one of a
    unique shape the next global slot, memtile = slot mod the number of memtiles.  So piece i of
    every split buffer lands on memtile i (i mod 8) and the unsplit buffers fill memtiles 0, 1, ...
    aircc runs aie-place-tiles with merge-logical-tiles=false (aircc.cpp 1253): every logical
    memtile is a memtile of its own."""
    buckets = _buckets(pieces)
    ltos = [_Lto(i) for i in range(columns)]
    claimed, by_col = set(), {}

    def for_col(c):
        if c in by_col:
            return by_col[c]
        lto = next((t for t in ltos if id(t) not in claimed and t.col is None), None)
        if lto is None:
            lto = _Lto(len(ltos))
            ltos.append(lto)
        lto.col = c
        claimed.add(id(lto))
        by_col[c] = lto
        return lto

    pins, cols, demand = [], [], {}
    for b in buckets:
        pin = next(
            (p.pinned for p in b if p.pinned is not None and 0 <= p.pinned < columns),
            None,
        )
        col = pin if pin is not None else _bucket_col(b, columns)
        if pin is None and col is not None:
            demand[col] = demand.get(col, 0) + 1
        pins.append(pin)
        cols.append(col)
    saturated = any(n > 1 for n in demand.values())
    where = []
    if saturated:
        shapes = {}
        for b in buckets:
            shapes[b[0].shape] = shapes.get(b[0].shape, 0) + 1
        per_shape, glob = {}, 0
        for b, pin in zip(buckets, pins):
            if pin is not None:
                where.append(for_col(pin))
                continue
            s = b[0].shape
            if shapes[s] > 1:
                slot = per_shape.get(s, 0)
                per_shape[s] = slot + 1
            else:
                slot, glob = glob, glob + 1
            where.append(ltos[slot % len(ltos)])
    else:
        where = [for_col(c) if c is not None else None for c in cols]
        rr = 0
        for i, b in enumerate(buckets):
            if where[i] is not None:
                continue
            lto = next((t for t in ltos if id(t) not in claimed), None)
            if lto is None:
                lto = ltos[rr % len(ltos)]
                rr += 1
            else:
                claimed.add(id(lto))
            where[i] = lto
    for b, lto in zip(buckets, where):
        lto.pieces += b
    return ltos


def _columns_of(ltos, columns):
    """The column each logical tile lands in: its column hint, else the free columns in IR order
    (aie-place-tiles' SequentialPlacer packs each pool in IR order from column 0, as the comment in
    ShimDMAAllocator::allocNewDmaChannel says, AIRToAIESchedulingUtils.cpp 2715-2722).
    """
    taken = {t.col for t in ltos if t.col is not None}
    free = (c for c in itertools.count() if c not in taken)
    return {
        id(t): t.col if t.col is not None else next(free)
        for t in sorted(ltos, key=lambda t: t.ir)
    }


def _place(w, pieces, columns):
    """The memtiles of one segment: the pieces on their logical memtiles (_assign_memtiles), each
    memtile's DMA channels numbered in flow order (MemTileDMAAllocator::simpleDmaChannelAlloc,
    AIRToAIESchedulingUtils.cpp 3073-3175: a new channel is the tile's count of channels in that
    direction so far, 3171, channels of one logical flow collapse onto one, 3101-3138;
    simpleDMAChannelAllocation 3697-3851 allocates every flow's MM2S side, then every flow's S2MM
    side, in flow order), so channel k draws its BD ids from the pool of k's parity."""
    for p in pieces:
        if p.bytes > MEMTILE_BYTES:
            w.problems.append(
                (
                    f"memtile: {p.name} needs {p.bytes} > {MEMTILE_BYTES} bytes",
                    f"memtile: the L2 buffer {p.name} needs {p.bytes} bytes in one memtile "
                    f"({'with its ping-pong copy' if p.slots == 2 else 'one copy'}), which has "
                    f"{MEMTILE_BYTES}; aircc splits L2 buffers only along their herd fan-out "
                    f"(air-split-l2-memref, AIRMiscPasses.cpp), not by size",
                )
            )
    ltos = _assign_memtiles(pieces, columns)
    col_of = _columns_of(ltos, columns)
    w.memtile_lto = getattr(w, "memtile_lto", {})
    tiles = []
    for lto in sorted(ltos, key=lambda t: col_of[id(t)]):
        if not lto.pieces:
            continue
        t = Tile("memtile", f"memtile {col_of[id(lto)]}")
        streams = {}
        for p in lto.pieces:
            w.memtile_lto[id(p)] = lto
            t.bytes += p.bytes
            t.pieces.append(p.name)
            t.locks += p.locks
            t.lock_value = max(t.lock_value, p.lock_value)
            for (direction, key), (what, bds, order) in p._streams.items():
                s = streams.get((direction, key))
                if s is None:
                    streams[(direction, key)] = [what, bds, order]
                else:  # two allocs of one bucket on one channel: one DMA channel, both chains
                    s[1] += bds
                    s[2] = min(s[2], order)
        for direction in ("mm2s", "s2mm"):
            lst = t.s2mm if direction == "s2mm" else t.mm2s
            mine = sorted(
                (v for (d, _), v in streams.items() if d == direction),
                key=lambda v: v[2],
            )
            for what, bds, _ in mine:
                # channel i draws on the BD pool of its parity
                t.parity[len(lst) % 2] += bds
                lst.append(f"{what}: {bds} BD{'s' if bds != 1 else ''}")
        tiles.append(t)
    return tiles


# ---------------------------------------------------------------------------------------- shims
class _Flow:
    def __init__(self, end, direction, bds, ident, other, col, broadcast, order):
        self.end, self.direction, self.bds, self.ident = end, direction, bds, ident
        # the far side: its memtile (_Lto), ("core", column), or None; and its column when known
        # (a core's, a column-hinted memtile's)
        self.other, self.col = other, col
        self.broadcast, self.order = broadcast, order
        self.segment = None

    def bucket_col(self):
        """bucketColFor (AIRToAIESchedulingUtils.cpp 2447-2456)."""
        if self.col is not None:
            return self.col
        return self.other.effective_col() if isinstance(self.other, _Lto) else None


def _shim_flows(w, tiled, columns):
    """Every L3 side as the flows aircc gives the shim: one per piece when air-split-l2-memref tiled it
    with its L2 buffer, one per broadcast group of PEs (PEs reading the same bytes) when the other side
    is a herd's L1 through a DMA, one per channel (name and indices) otherwise."""
    flows = []
    for e in w.ends:
        if e.level != L3:
            continue
        loops = [lp for lp in e.loops if e.segment is None or _inside(lp, e.segment)]
        if id(e) in tiled:
            pieces = w.piece_of_l3.get(id(e), [])
            for i, pat in enumerate(tiled[id(e)]):
                ch = _chain(w, e, loops, None, dims=pat.dims())
                _check_strides(w, e, ch, "shim")
                lto = w.memtile_lto.get(id(pieces[i])) if i < len(pieces) else None
                f = _Flow(
                    e,
                    e.direction,
                    ch.bds,
                    (e.key(w), i),
                    lto,
                    lto.col if lto is not None else None,
                    False,
                    _flow_order(w, e, i),
                )
                f.segment = pieces[i].segment if i < len(pieces) else None
                flows.append(f)
            continue
        ch = _chain(w, e, loops, None)
        _check_strides(w, e, ch, "shim")
        if e.chan is None:
            other = partners(w, e)[0]
            if other.herd is not None:
                groups = {}
                for env in _pe_space(w.compiler, other.herd):
                    groups.setdefault(w.offset(e, env), []).append(env)
                for k, (off, envs) in enumerate(groups.items()):
                    col = _column(w, other.herd, envs[0])
                    f = _Flow(
                        e,
                        e.direction,
                        ch.bds,
                        (e.key(w), off),
                        ("core", col),
                        col,
                        len(envs) > 1,
                        _flow_order(w, e, k),
                    )
                    f.segment = other.segment
                    flows.append(f)
                continue
            matches = [(other, {})]
        else:
            matches = [
                (p, penv)
                for p in partners(w, e)
                for penv in (
                    _pe_space(w.compiler, p.herd) if p.herd is not None else [{}]
                )
                if _chan_match(w, e, {}, p, penv)
            ]
        far, col, segment = None, None, None
        if matches:
            p, penv = matches[0]
            segment = p.segment
            if p.level == L2:
                piece = w.piece_of_end.get(id(p), {}).get(env_key(penv))
                far = w.memtile_lto.get(id(piece)) if piece is not None else None
                col = far.col if far is not None else None
            elif p.herd is not None:
                col = _column(w, p.herd, penv)
                far = ("core", col)
        ch_decl = w.compiler.channels.get(e.chan) if e.chan is not None else None
        f = _Flow(
            e,
            e.direction,
            ch.bds,
            _stream_key(w, e, {}),
            far,
            col,
            ch_decl is not None and ch_decl.broadcast_shape is not None,
            _flow_order(w, e),
        )
        f.segment = segment
        flows.append(f)
    return flows


def _shims(w, tiled, columns):
    """The shim tiles, as ShimDMAAllocator::allocNewDmaChannel picks them at e972f29
    (AIRToAIESchedulingUtils.cpp 2380-2809), in simpleDMAChannelAllocation's order (3852-3946: flows
    in flow order, every L3 S2MM and non-broadcast L3 MM2S first, then broadcast L3 MM2S):

    * a flow on a channel that already has a shim channel reuses it (2402-2410);
    * its bucket is the far side's column (a core's, a column-hinted memtile's, else the one column
      of the compute tiles its memtile serves: effectiveColForMemTileLTO), else the far-side memtile
      itself (2438-2480); it takes the first shim of its bucket with a free channel in its direction
      (2 per direction: shim_dma_channels, 2375-2378; 2666-2681);
    * else a broadcast L3 MM2S takes the least used shim with a free MM2S channel (2682-2704);
    * else a new shim tile, ordered among the others by its memtile's place (2705-2766).

    aie-place-tiles (merge-logical-tiles=false, aircc.cpp 1253) gives each shim tile a column of its
    own, in that order: more shim tiles than columns do not place ("no ShimNOCTile has sufficient
    DMA capacity")."""
    flows = sorted(_shim_flows(w, tiled, columns), key=lambda f: f.order)
    segments = {id(f.segment) for f in flows if f.segment is not None}
    # one segment, one aie.device: a flow whose far side was not found is still in it
    if len(segments) == 1:
        for f in flows:
            f.segment = f.segment or next(g.segment for g in flows if g.segment)
    tiles = []
    for seg, group in _by_segment(flows).items():
        tiles += _allocate_shims(w, group, columns)
    return tiles


def _allocate_shims(w, flows, columns):
    allocs = {"mm2s": [], "s2mm": []}  # [shim, channel, flow] in allocation order
    shims = []  # in IR order

    def used(shim, direction):
        return {ch for s, ch, _ in allocs[direction] if s is shim}

    def same_bucket(t, f):
        tc, fc = t.bucket_col(), f.bucket_col()
        if tc is not None and fc is not None:
            return tc == fc
        return t.other is f.other or (isinstance(t.other, tuple) and t.other == f.other)

    def all_allocs():
        return allocs["mm2s"] + allocs["s2mm"]

    def target(shim):
        for s, _, t in all_allocs():
            if s is shim and isinstance(t.other, _Lto):
                return t.other.ir
        return float("inf")

    by_ident = {}
    rigid = [f for f in flows if not (f.direction == "mm2s" and f.broadcast)]
    flexible = [f for f in flows if f.direction == "mm2s" and f.broadcast]
    for f in rigid + flexible:
        known = by_ident.get((f.direction, f.ident))
        if known is not None:  # one more BD chain on a channel with its shim channel
            shim, lst, i, bds = known
            known[3] = bds = bds + f.bds
            shim.bds += f.bds
            lst[i] = f"{lst[i].rsplit(': ', 1)[0]}: {bds} BD{'s' if bds != 1 else ''}"
            continue
        seen = []
        for s, _, t in all_allocs():
            if same_bucket(t, f) and s not in seen:
                seen.append(s)
        shim = next((s for s in seen if len(used(s, f.direction)) < 2), None)
        if shim is None and f.direction == "mm2s" and f.broadcast:
            seen = []
            for s, _, _ in all_allocs():
                if s not in seen:
                    seen.append(s)
            free = [s for s in seen if len(used(s, f.direction)) < 2]
            shim = min(free, key=lambda s: len(used(s, f.direction)), default=None)
        if shim is None:
            shim = Tile("shim", "")
            at = len(shims)
            if isinstance(f.other, _Lto):
                at = next(
                    (i for i, s in enumerate(shims) if target(s) > f.other.ir),
                    len(shims),
                )
            shims.insert(at, shim)
        ch = min(set(range(2)) - used(shim, f.direction))
        allocs[f.direction].append((shim, ch, f))
        shim.bds += f.bds
        lst = shim.s2mm if f.direction == "s2mm" else shim.mm2s
        lst.append(f"{f.end.where()}: {f.bds} BD{'s' if f.bds != 1 else ''}")
        by_ident[(f.direction, f.ident)] = [shim, lst, len(lst) - 1, f.bds]
    if len(shims) > columns:
        w.problems.append(
            (
                f"shim tiles: {len(shims)} needed, NPU2 has {columns}",
                f"shim tiles: aircc opens {len(shims)} shim tiles for the design's L3 transfers "
                f"(ShimDMAAllocator::allocNewDmaChannel, AIRToAIESchedulingUtils.cpp: two channels "
                f"per direction each, a new one when the far side's bucket has none free) and "
                f"aie-place-tiles gives each a column of its own (merge-logical-tiles=false, "
                f"aircc.cpp 1253): the device has {columns}, so it fails with 'no ShimNOCTile has "
                f"sufficient DMA capacity' ("
                + "; ".join(s.mm2s[0] if s.mm2s else s.s2mm[0] for s in shims[columns:])
                + " find none)",
            )
        )
    for i, s in enumerate(shims):
        s.name = f"shim, column {i}"
    return shims
