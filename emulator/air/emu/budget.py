# SPDX-License-Identifier: MIT
"""Static memory budgets: per-PE L1 and per-segment L2.

L1, per herd (every PE of a herd has the same allocations):
    sum over the memref.alloc ops in the herd body of bytes x (2 if ping-ponged)
    + each herd-wide L1 operand's share (bytes / PEs), counted once
    + stack_size (XRTBackend(stack_size=...), default 1024)   <= 64 KiB
    Herds of one segment with the same sym_name are time phases of one physical herd (aircc merges
    them: MergeAIRHerdsPattern in AIRDependencyScheduleOpt.cpp, and air-split-l2-memref counts their
    tiles once), so their buffers share the same tiles: they are budgeted together.
L2, per segment:
    sum over the L2 memref.alloc ops in the segment body (outside herds) of
    bytes x (2 if ping-ponged)   <= 512 KiB x memtiles the segment may use
    (one memtile per column: 8 on NPU2, 4 on NPU1, or num_device_cols when set).

Ping-pong rule, modelled on aircc's pipeline (air-fuse-alloc-dealloc, then
air-label-scf-for-to-ping-pong, AIRDependencyScheduleOpt.cpp):
  * an alloc's home loop is the innermost scf.for (in the same herd / segment
    body) that contains every use of the buffer (fuse-alloc-dealloc sinks it there);
    a segment-level L1 buffer that only one herd op of a merged herd group takes
    is sunk into that herd too (AIRFuseAllocDeallocToAIRHierarchy, ~7796: a memref
    used by nothing but the hierarchy op), and from there into the innermost loop
    holding its uses (AIRFuseAllocDeallocToLoopLike, ~7709): a kernel's scratch
    passed to the compute herd alone lands in its chunk loop, where its first
    access is the call;
  * a loop is labelled (its home allocs are unrolled by 2 and hoisted, i.e. count
    twice, three times for an odd trip count: the unroll by 2 keeps a one-trip
    epilogue with its own copy) when: its trip count is not 1 (a one-trip loop is folded away) --
    unknown trip counts count as > 1; it has home allocs; omit_pingpong does not
    name their memory space ("L1", "L2", "all"); neither it nor a nested loop
    carries "unroll" or "air.disable_ping_pong"; the first access to each home
    alloc in the loop body is a definite write (a dma_memcpy_nd or channel.get
    into it, or a memref.store; a func.call, a load or a herd taking it first makes
    the loop unsafe); each home alloc gets at most one channel.get per iteration
    (a DMA into it counts as one; a store does not; a get in a nested loop of
    more than one trip disqualifies); no nested loop is unsafe; and no nested loop
    qualifies itself (only the deepest qualifying loop is labelled).
Bank placement (4 x 16 KiB banks), alignment padding and compiler-generated
buffers are not modelled.
"""

from .errors import BudgetError
from .stats import _table
from .types import L1, L2, level_of

L1_BYTES = 64 * 1024
MEMTILE_BYTES = 512 * 1024
# aiecc's buffer placement (mlir-aie AIEAssignBufferAddresses, bank-aware by default): four 16 KiB banks
# on a core, the stack at address 0 so that bank 0's first free byte is the stack's end, the buffers
# largest first, each into the next bank round-robin that still holds it whole; when one fits no bank it
# warns and places them all one after the other from the stack's end instead (basic sequential). A stack
# over one bank leaves bank 0 full and the bank-aware placement puts buffers at 0x4000, over the stack:
# "buffer ... at address 0x4000 overlaps with stack" (generated designs with small buffers at stacks of
# 16400 to 32768); when a buffer fits no bank, the sequential placement after the stack compiles.
BANKS, BANK_BYTES = 4, 16 * 1024
STACK_MAX = BANK_BYTES


def bank_aware_fits(sizes, stack):
    """Whether aiecc's bank-aware placement places every buffer (sizes in bytes) of a core whose stack
    takes `stack` bytes of bank 0; False means it falls back to the sequential placement.
    """
    nxt = [stack] + [BANK_BYTES * b for b in range(1, BANKS)]
    bank = 0
    for size in sorted(sizes, reverse=True):
        for i in range(BANKS):
            b = (bank + i) % BANKS
            if nxt[b] + size <= BANK_BYTES * (b + 1):
                nxt[b] += size
                bank = (b + 1) % BANKS
                break
        else:
            return False
    return True


_HIER = ("air.launch", "air.segment", "air.herd")


def _nbytes(t):
    from .types import np_dtype

    return t.num_elements * np_dtype(t.element_type).itemsize


def _scope_ops(block, loops, out):
    """(op, enclosing loops) for every op below `block`, not entering hierarchy ops."""
    for op in block.operations:
        out.append((op, loops))
        if op.OPERATION_NAME in _HIER:
            continue
        inner = loops + [op] if op.OPERATION_NAME == "scf.for" else loops
        for r in op.regions:
            for b in r.blocks:
                _scope_ops(b, inner, out)
    return out


def _walk_all(block):
    """Every op below `block`, pre-order, including inside hierarchy ops."""
    for op in block.operations:
        yield op
        for r in op.regions:
            for b in r.blocks:
                yield from _walk_all(b)


def _really_uses(op, v):
    """Whether `op` still uses `v` when aircc's passes reach it: a launch, segment or herd operand whose
    block argument nothing in the body uses is dropped by canonicalize, which runs before
    air-fuse-alloc-dealloc (mlir-air's bf16_in_fp32_out passes its L2 A and B to the drain herd unused,
    and aircc ping-pongs them in the K loop all the same)."""
    if op.OPERATION_NAME not in _HIER:
        return True
    body = list(_walk_all(op.regions[0].blocks[0]))
    used = {u._uid for o in body for u in o.operands}
    return any(
        arg._uid in used
        for arg, w in zip(op.kernel_arguments, op.kernel_operands)
        if w is v
    )


def _fills(op, v):
    """Whether op's access to v is what air-label-scf-for-to-ping-pong calls a definite write
    (isDefiniteWrite, AIRDependencyScheduleOpt.cpp ~1645-1654): a channel get into it, or an op whose
    memory effects write it without reading it (a DMA into it, a memref.store, a vector.transfer_write).
    """
    name = op.OPERATION_NAME
    if name == "air.dma_memcpy_nd":
        return op.dst.memref is v
    if name == "air.channel.get":
        return op.side.memref is v
    if name in ("memref.store", "vector.transfer_write"):
        return op.operands[1] is v
    return False


def _channel_fill(op, v):
    """Whether op becomes an `air.channel.get` into v by the time the ping-pong label runs (a DMA into v
    is one after air-dma-to-channel): the only fills the multi-fill rule counts (isPingPongCandidate,
    AIRDependencyScheduleOpt.cpp ~1755-1790). A memref.store is a definite first write, never a fill.
    """
    name = op.OPERATION_NAME
    if name == "air.dma_memcpy_nd":
        return op.dst.memref is v
    if name == "air.channel.get":
        return op.side.memref is v
    return False


class _Sunk:
    """A herd operand air-fuse-alloc-dealloc sinks into the herd body: its block argument stands for the
    alloc there."""

    OPERATION_NAME = "memref.alloc"

    def __init__(self, block_arg, operand):
        self.results = [block_arg]
        owner = getattr(operand, "owner", None)
        self._loc = getattr(owner, "_loc", "a segment-level alloc")


def _users(seg) -> dict:
    """value uid -> the ops of a segment that take it (deallocs aside)."""
    users = {}
    for op in _walk_all(seg.regions[0].blocks[0]):
        if op.OPERATION_NAME == "memref.dealloc":
            continue
        for v in op.operands:
            users.setdefault(v._uid, []).append(op)
    return users


def sunk_into_herd(seg, herd_op, value) -> bool:
    """Whether aircc sinks the segment-level buffer `value` into `herd_op`: no other op of the segment
    takes it (sunk_herd_operands' rule, for one operand)."""
    return _users(seg).get(value._uid) == [herd_op]


def sunk_herd_operands(compiler):
    """id(herd op) -> [_Sunk]: the segment-level L1 buffers aircc sinks into one herd op's body, those that
    no other op of the segment takes (AIRFuseAllocDeallocToAIRHierarchy; herds of one name are merged
    first, so a buffer two phases take stays at the merged herd's top level, outside every loop).
    """
    out = {}
    for seg in compiler.segment_ops:
        users = _users(seg)
        for op in _walk_all(seg.regions[0].blocks[0]):
            if op.OPERATION_NAME != "air.herd":
                continue
            for arg, v in zip(op.kernel_arguments, op.kernel_operands):
                t = v.type
                if not (
                    hasattr(t, "memory_space_value") and t.memory_space_value == L1
                ):
                    continue
                if users.get(v._uid) == [op]:
                    out.setdefault(id(op), []).append(_Sunk(arg, v))
    return out


class _PingPong:
    """air-label-scf-for-to-ping-pong's decisions in one scope (a herd's L1, or a segment's L2: per_alloc).

    per_alloc: aircc isolates a segment's DMA loop nests before it labels (air-isolate-async-dma-loop-nests
    {scope=launch}, aircc.cpp ~931, and again after air-split-l2-memref ~950): each L2 buffer's fills and
    reads get a copy of their loops of their own, so each buffer is judged alone, and a buffer the loop
    cannot ping-pong (C, drained by a herd) does not keep another (A, filled by a DMA) from it. Seen on
    matmul_int4_packed with m_per_segment = 2: the M-block loop holds A, W and C, and aircc doubles A and W.
    """

    def __init__(self, scope_block, levels, omit, sunk=(), per_alloc=False):
        self.levels = levels
        self.omit = omit
        self.only = None  # judging one alloc alone (per_alloc)
        self.ops = _scope_ops(scope_block, [], [])
        self.loops_of = {id(op): loops for op, loops in self.ops}
        self.allocs = [
            op
            for op, _ in self.ops
            if op.OPERATION_NAME == "memref.alloc"
            and level_of(op.results[0].type) in levels
        ] + list(sunk)
        self.home = {}
        for a in self.allocs:
            v = a.results[0]
            chains = [
                loops
                for op, loops in self.ops
                if op.OPERATION_NAME != "memref.dealloc"
                and op is not a
                and any(o is v for o in op.operands)
                and _really_uses(op, v)
            ]
            if not chains:
                continue
            common = []
            for level in zip(*chains):
                if all(x is level[0] for x in level):
                    common.append(level[0])
                else:
                    break
            # a loop of one trip is folded into its parent by canonicalize before the alloc is sunk
            # (mlir-air's int4 GEMV allocs its L2 record in a 1-trip loop inside its K loop, and aircc
            # ping-pongs it in the K loop)
            common = [f for f in common if getattr(f, "_emu_trip", None) != 1]
            if common:
                self.home[id(a)] = common[-1]
        self.loops = [op for op, _ in self.ops if op.OPERATION_NAME == "scf.for"]
        self.reason = {}
        self.labelled = set()
        self.labelled_allocs = None if not per_alloc else set()
        if per_alloc:
            for f in self.loops:
                for a in self.home_allocs(f):
                    self.only = a
                    if self._candidate(f):
                        self.labelled_allocs.add(id(a))
                        self.labelled.add(id(f))
                    self.only = None
            return
        cand = {id(f): self._candidate(f) for f in self.loops}
        for f in self.loops:
            if not cand[id(f)]:
                continue
            nested = [g for g in self.loops if f in self.loops_of[id(g)]]
            if any(cand[id(g)] for g in nested):
                self.reason[id(f)] = "a nested loop is ping-ponged instead"
                continue
            self.labelled.add(id(f))

    def home_allocs(self, f):
        return [
            a
            for a in self.allocs
            if self.home.get(id(a)) is f and (self.only is None or a is self.only)
        ]

    def _alloc_labelled(self, alloc) -> bool:
        f = self.home.get(id(alloc))
        if f is None or id(f) not in self.labelled:
            return False
        return self.labelled_allocs is None or id(alloc) in self.labelled_allocs

    def _unsafe(self, f):
        cands = {a.results[0]._uid: a for a in self.home_allocs(f)}
        seen = set()
        for op in _walk_all(f.body):
            name = op.OPERATION_NAME
            if name in ("memref.alloc", "memref.dealloc") or op._is_terminator:
                continue
            for v in op.operands:
                if v._uid in cands and v._uid not in seen:
                    seen.add(v._uid)
                    if not _fills(op, v):
                        a = cands[v._uid]
                        what = (
                            "the herd operand sunk here by air-fuse-alloc-dealloc"
                            if isinstance(a, _Sunk)
                            else "the buffer"
                        )
                        return (
                            f"loop unsafe for aircc: the first access to {what} allocated at {a._loc} "
                            f"is {name} at {op._loc}, not a DMA/get writing it"
                        )
        return None

    def _candidate(self, f):
        trip = getattr(f, "_emu_trip", None)
        if trip is not None and trip <= 1:
            self.reason[id(f)] = f"trip count {trip}: the loop is folded away"
            return False
        nested = [g for g in self.loops if f in self.loops_of[id(g)]]
        for g in [f] + nested:
            if "unroll" in g.attributes or "air.disable_ping_pong" in g.attributes:
                self.reason[id(f)] = (
                    f"scf.for at {g._loc} opts out (unroll / air.disable_ping_pong)"
                )
                return False
        homes = self.home_allocs(f)
        if not homes:
            return False
        for a in homes:
            lv = level_of(a.results[0].type)
            if (
                self.omit == "all"
                or (self.omit == "L1" and lv == L1)
                or (self.omit == "L2" and lv == L2)
            ):
                self.reason[id(f)] = f"omit_pingpong={self.omit!r}"
                return False
        for g in [f] + nested:
            why = self._unsafe(g)
            if why:
                self.reason[id(f)] = why
                return False
        for a in homes:
            v = a.results[0]
            fills = []
            for op, loops in self.ops:
                if f not in loops or not _channel_fill(op, v):
                    continue
                inner = loops[loops.index(f) + 1 :]
                for g in inner:
                    t = getattr(g, "_emu_trip", None)
                    if t is None or t > 1:
                        self.reason[id(f)] = (
                            f"a buffer is filled inside a nested loop at {g._loc}"
                        )
                        return False
                fills.append(op)
            if len(fills) > 1:
                self.reason[id(f)] = "a buffer is filled more than once per iteration"
                return False
        return True

    @staticmethod
    def unrolled(f):
        """Copies of its body a labelled loop leaves: 2, or 3 for an odd trip count, whose one-trip
        epilogue runLoopUnroll keeps (AIRDependencyScheduleOpt.cpp ~3739-3765)."""
        trip = getattr(f, "_emu_trip", None)
        return 3 if trip is not None and trip % 2 else 2

    def pingponged(self, alloc):
        """Whether aircc labels the alloc hoist_alloc (its home loop is labelled, for it)."""
        return self._alloc_labelled(alloc)

    def factor(self, alloc):
        """(copies aiecc places, note): a labelled loop's own allocs 2 (3 with the epilogue), and the
        unroll also copies every nested loop with the allocs it holds ("Labeling a loop unrolls its
        body by 2, which duplicates a nested loop and everything that loop allocates per trip",
        isPingPongCandidate's comment)."""
        f = self.home.get(id(alloc))
        if f is None:
            return 1, ""
        outer = [g for g in self.loops_of.get(id(f), []) if id(g) in self.labelled]
        copies = 1
        for g in outer:
            copies *= self.unrolled(g)
        nested = (
            f", copied {copies} times by the unroll of the scf.for at {outer[-1]._loc}"
            if outer
            else ""
        )
        if self._alloc_labelled(alloc):
            n = self.unrolled(f)
            what = (
                f"ping-pong (scf.for at {f._loc})"
                if n == 2
                else f"ping-pong and a one-trip epilogue ({f._emu_trip} trips, scf.for at {f._loc})"
            )
            return n * copies, what + nested
        if id(f) in self.reason:
            return copies, f"single ({self.reason[id(f)]}){nested}"
        return copies, nested.lstrip(", ")


class Entry:
    def __init__(self, loc, type_str, nbytes, factor, note, pingpong=False):
        self.loc, self.type, self.bytes, self.factor, self.note = (
            loc,
            type_str,
            nbytes,
            factor,
            note,
        )
        self.pingpong = (
            pingpong  # labelled hoist_alloc by air-label-scf-for-to-ping-pong
        )

    @property
    def total(self):
        return self.bytes * self.factor


class Budget:
    """One herd's L1 (per PE) or one segment's L2."""

    def __init__(
        self, kind, name, loc, limit, entries, extra=0, extra_name="", shape=None
    ):
        self.kind, self.name, self.loc, self.limit = kind, name, loc, limit
        self.entries, self.extra, self.extra_name, self.shape = (
            entries,
            extra,
            extra_name,
            shape,
        )

    @property
    def used(self):
        return sum(e.total for e in self.entries) + self.extra

    @property
    def ok(self):
        return self.used <= self.limit

    def lines(self):
        shape = f" [{self.shape[0]} x {self.shape[1]}]" if self.shape else ""
        head = (
            f"{self.kind} @{self.name}{shape} at {self.loc}: {self.used} / {self.limit} bytes "
            f"({100.0 * self.used / self.limit:.1f}%) {'OK' if self.ok else 'OVER'}"
        )
        rows = [
            (e.loc, e.type, e.bytes, f"x{e.factor}", e.total, e.note)
            for e in self.entries
        ]
        if self.extra_name:
            rows.append((self.extra_name, "", self.extra, "x1", self.extra, ""))
        return [head] + [
            "  " + ln
            for ln in _table(("alloc", "type", "bytes", "", "total", ""), rows)
        ]


class BudgetReport:
    """Static budget of a design: `herds` (per-PE L1) and `segments` (L2)."""

    def __init__(self, herds, segments, stack_size, l2_limit, memtiles, notes):
        self.herds = herds
        self.segments = segments
        self.stack_size = stack_size
        self.l1_limit = L1_BYTES
        self.l2_limit = l2_limit
        self.memtiles = memtiles
        self.notes = notes

    @property
    def stack_problem(self):
        """A stack over one bank on a core whose buffers aiecc's bank-aware placement takes: they land at
        0x4000, over the stack (bank_aware_fits)."""
        if self.stack_size <= STACK_MAX:
            return None
        for b in self.herds:
            sizes = [e.bytes for e in b.entries for _ in range(e.factor)]
            if sizes and bank_aware_fits(sizes, self.stack_size):
                return (
                    f"stack_size {self.stack_size} is over one 16 KiB bank ({STACK_MAX} bytes) and "
                    f"aiecc's bank-aware placement puts the buffers of @{b.name} from 0x4000, over the "
                    f"stack ('buffer ... at address 0x4000 overlaps with stack')"
                )
        return None

    @property
    def ok(self):
        return not self.stack_problem and all(b.ok for b in self.herds + self.segments)

    def table(self):
        lines = [
            f"Emulator budget: L1 per PE {L1_BYTES} B (64 KiB) incl. stack_size {self.stack_size}; "
            f"L2 per segment {self.memtiles} memtiles x {MEMTILE_BYTES} B = {self.l2_limit} B"
        ]
        for b in self.herds + self.segments:
            lines.append("")
            lines += b.lines()
        for n in self.notes:
            lines.append("note: " + n)
        return "\n".join(lines)

    __str__ = table

    def raise_if_over(self):
        if self.stack_problem:
            raise BudgetError(f"{self.stack_problem}\n{self.table()}")
        over = [b for b in self.herds + self.segments if not b.ok]
        if not over:
            return
        first = over[0]
        what = (
            "per-PE L1 (allocations + stack)"
            if first.kind == "herd"
            else "per-segment L2"
        )
        raise BudgetError(
            f"{first.kind} @{first.name} at {first.loc}: {what} needs {first.used} bytes, "
            f"the limit is {first.limit}\n{self.table()}"
        )


def analyse(compiler, options):
    omit = options.omit_pingpong
    if omit is True:
        omit = "all"
    if not omit:
        omit = ""
    herds = []
    notes = []
    groups = (
        {}
    )  # (segment, sym_name) -> [(herd op, sizes)]; an unnamed herd is its own group
    for op, sizes in compiler.herd_ops:
        seg = compiler.herd_segment.get(id(op))
        key = (id(seg), op.sym_name) if op.sym_name else (id(op), None)
        groups.setdefault(key, []).append((op, sizes))
    sunk = sunk_herd_operands(compiler)
    for members in groups.values():
        entries, shared = [], []
        for op, sizes in members:
            pp = _PingPong(op.regions[0].blocks[0], (L1,), omit, sunk.get(id(op), ()))
            for a in _all_allocs(op):
                t = a.results[0].type
                f, note = pp.factor(a) if a in pp.allocs else (1, "")
                entries.append(
                    Entry(a._loc, str(t), _nbytes(t), f, note, pp.pingponged(a))
                )
            sunk_here = {a.results[0]._uid: a for a in sunk.get(id(op), ())}
            npe = 1
            for z in sizes:
                npe *= z
            for v in op.kernel_operands:
                t = v.type
                if any(v is w for w in shared) or not (
                    hasattr(t, "memory_space_value") and t.memory_space_value == L1
                ):
                    continue
                shared.append(v)
                where = v.owner._loc if hasattr(v.owner, "_loc") else "operand"
                note = f"herd-wide L1 buffer: 1/{npe} of {_nbytes(t)} B per PE"
                arg = next(
                    a for a, w in zip(op.kernel_arguments, op.kernel_operands) if w is v
                )
                f, why = (
                    pp.factor(sunk_here[arg._uid]) if arg._uid in sunk_here else (1, "")
                )
                if arg._uid in sunk_here:
                    note += "; sunk into this herd by air-fuse-alloc-dealloc" + (
                        f", {why}" if why else ""
                    )
                pingponged = arg._uid in sunk_here and pp.pingponged(
                    sunk_here[arg._uid]
                )
                entries.append(
                    Entry(where, str(t), _nbytes(t) // npe, f, note, pingponged)
                )
        op, sizes = members[0]
        name = op.sym_name or "herd"
        if len(members) > 1:
            name += f" ({len(members)} phases merged: same sym_name, same tiles)"
        shape = (sizes[0], sizes[1] if len(sizes) > 1 else 1)
        herds.append(
            Budget(
                "herd",
                name,
                op._loc,
                L1_BYTES,
                entries,
                options.stack_size,
                "stack (stack_size)",
                shape,
            )
        )
    memtiles = options.columns
    l2_limit = memtiles * MEMTILE_BYTES
    segments = []
    for op in compiler.segment_ops:
        pp = _PingPong(op.regions[0].blocks[0], (L2,), omit, per_alloc=True)
        entries = []
        for a in pp.allocs:
            t = a.results[0].type
            f, note = pp.factor(a)
            nb = _nbytes(t)
            if nb > MEMTILE_BYTES:
                notes.append(
                    f"L2 buffer at {a._loc} ({nb} B) is larger than one memtile; aircc must split "
                    f"it across memtiles (air-split-l2-memref): the resource model checks that it does"
                )
            entries.append(Entry(a._loc, str(t), nb, f, note, pp.pingponged(a)))
        segments.append(
            Budget("segment", op.sym_name or "segment", op._loc, l2_limit, entries)
        )
    return BudgetReport(herds, segments, options.stack_size, l2_limit, memtiles, notes)


def _all_allocs(herd_op):
    out = []
    for op in _walk_all(herd_op.regions[0].blocks[0]):
        if op.OPERATION_NAME == "memref.alloc":
            out.append(op)
    return out
