# SPDX-License-Identifier: MIT
"""Running a compiled design (design.py): every core, DMA channel and the runtime sequence as agents that
act on locks, streams and memory, until the runtime sequence ends, or nothing can move (a hang, reported
agent by agent), or a step budget runs out.

The semantics, with where each is defined:

* Locks (AIE2P, AM020 "Lock" and mlir-aie AIE2 `aie.use_lock`): a semaphore of 0..63; AcquireGreaterEqual
  v waits until the value is at least v and subtracts v; Acquire v (acquire-equal) waits until the value
  equals v and leaves it unchanged (UG1583; mlir-aie lowers it to the acquire instruction with +v where
  AcquireGreaterEqual gets -v: AIECoreToStandard, and aie_api's aiev2_locks.h acquire_equal /
  acquire_greater_equal); Release v adds v (above 63 is an error here: the hardware's 6-bit lock would
  wrap). `lock_acquirable` / `lock_take` below.
* A DMA channel walks its BD chain (mlir-aie `aie.dma_start` / `aie.dma_bd` / `aie.next_bd`): for each BD
  acquire its locks, move its data, release its locks, go to the next; a chain that ends runs
  repeat_count + 1 times; one that loops runs forever.
* A stream (the circuit the switchboxes route, design.py) carries the words an MM2S BD reads to every S2MM
  port it reaches (a broadcast reaches several), through bounded FIFOs (`Stream`, the depths below): the
  sender runs ahead of each receiver by at most the FIFOs of its path, a broadcast moves at the pace of
  its slowest receiver (one receiver ahead of another by at most the FIFOs on the other's branch). An
  MM2S BD completes when its last word has left (every receiver has taken all but what its path holds,
  and none that is receiving can take more); an S2MM BD completes when it has received its length,
  whichever MM2S BDs they came from. When the two sides' lengths disagree the receiver takes what its BD
  needs and the rest goes to its next BD.
* A cascade (`aie.put_cascade` / `get_cascade`) holds CASCADE_DEPTH_WORDS 512-bit words between two
  cores: a put into a full cascade waits for the neighbour's get.
* Shim DMA tasks (mlir-aie `aiex.dma_configure_task_for` / `dma_start_task` / `dma_await_task`): a started
  task runs on its allocation's channel after the tasks started before it there, repeat_count + 1 times;
  an MM2S task reads the host array of its argument, an S2MM task writes it; a BD with four dimensions
  takes the outermost as its execution dimension (execution k starts stride x (k mod size) further).
* Cores run their body: control flow (`cf`), integer arithmetic (`arith`), `memref.load` / `store` on
  placed buffers, `aie.use_lock`, and `func.call` into the kernel built on the host from the same source,
  through ctypes, on the bytes of the buffers at their placed addresses.
* Lock ownership (the simulator's rule, `Ownership`): which locks guard which buffer comes from the BDs'
  use_lock pairs; a core access or a BD transfer on a guarded buffer without a held lock of its group, a
  release of a lock the agent does not hold, or two agents on the same bytes (one writing) is a `Race`.
* The end: words left in a stream or a cascade, a BD half received, a shim task not finished when the
  sequence ends are `Simulator.leftovers()`, which the callers fail.
* Interleavings: `Simulator(..., seed=S)` draws the order of the agents ready at one time and moves each
  BD's transfer in pieces of random size, the others acting between them.
* Several dispatches: `Simulator.run` called again runs the runtime sequence once more on the same array:
  the cores go on in their loops (every compiled core body is an endless loop; one that ends stays
  halted), locks, buffers, BD chains and the shim registers carry over, the host buffers are written
  again (docs/simulator.md, "Several dispatches").

Time (the timed mode) is MODELLED: each agent keeps its own clock; moving n bytes over a stream costs
n / STREAM_BYTES_PER_CYCLE cycles (AM027: AIE-ML v2 streams are 64 bits wide), a BD's setup,
a lock operation and a kernel call cost what `Costs` gives; an agent blocked on a lock or a stream resumes
at the time the other side acted; a broadcast receiver more than its sibling's branch FIFOs ahead goes at
that sibling's pace. Contention in the switch and DDR bandwidth are not modelled.
"""

from __future__ import annotations

import collections
import dataclasses
import heapq

import numpy as np

from .design import (
    ACQUIRE,
    ACQUIRE_GE,
    MM2S,
    S2MM,
    BD,
    Channel,
    Core,
    Design,
    DesignError,
    Lock,
    Task,
    make_bd,
)
from .generic import memref_shape

MAX_LOCK_VALUE = 63  # AIE2 locks are 6-bit (mlir-aie AIE2TargetModel::getMaxLockValue)
# AIE-ML v2's stream interconnect and DMA channels are 64 bits wide (AM027, "AIE-ML v2 Memory Tile
# Features": "the DMA MM2S and S2MM channels that are 64-bit wide"; AIE-ML's, AM020, were 32). NPU2's
# AIE2P is taken to be that architecture: its memtile as AM027 describes it (512 KB in eight 256-bit
# banks, six channels each way) is the one mlir-aie's NPU2 target model gives (an inference, not a
# statement of AMD's).
STREAM_BYTES_PER_CYCLE = 8

# Bounded FIFOs (docs/simulator.md, "Bounded FIFOs"): what a stream holds between its sender and each
# receiver, and what a cascade holds between two cores, in bytes.
# * A stream switch buffers 4 entries at each slave port and 4 at each master port a circuit passes (8
#   per switch): AM020, "Stream Switch Buffering and Latency" (AIE-ML; AM009 gives AIE the same). An
#   entry is one beat of the switch's data path, 64 bits on AIE-ML v2 (AM027, "AXI4-Stream
#   Interconnect": every element of the switch data path is 64-bit; UG1603: the v2 switch's FIFO is
#   64 bits wide): that the v2 ports keep AIE-ML's 4 entries is an inference, AM027's port list was
#   not at hand.
# * A DMA channel's own FIFO (MM2S after its memory reads, S2MM before its writes): AMD publishes no
#   depth; an ESTIMATE of 4 entries, as a switch port.
# * A cascade: two 512-bit words at the sender's output and two at the receiver's input, four between
#   two cores (AM027 and AM020, "Interfaces", "Cascade Stream Interface").
STREAM_FIFO_ENTRY_BYTES = 8
SWITCH_PORT_FIFO_ENTRIES = 4
DMA_CHANNEL_FIFO_ENTRIES = 4  # an estimate (no published figure)
CASCADE_WORD_BYTES = 64
CASCADE_DEPTH_WORDS = 4


def stage_bytes(stage) -> int:
    """The bytes one FIFO stage of a stream's path holds (design.py's stages: the sender's DMA channel,
    each switchbox's slave and master port, the receiver's DMA channel)."""
    entries = (
        DMA_CHANNEL_FIFO_ENTRIES
        if stage[0] in ("mm2s", "s2mm")
        else SWITCH_PORT_FIFO_ENTRIES
    )
    return entries * STREAM_FIFO_ENTRY_BYTES


@dataclasses.dataclass
class Costs:
    """Cycles of what the timed mode prices (MODELLED): a BD's setup, a lock operation, and a kernel
    call (a function of the callee's name; 0 when None)."""

    bd_setup: int = 0
    lock: int = 0
    call: object = None  # callable(name) -> cycles
    ddr_bytes_per_cycle: float | None = (
        None  # what all shim channels share (None: not limited)
    )


class Hang(Exception):
    """Nothing can move and the runtime sequence has not finished: `report` names every blocked agent,
    the BD it is on, and the lock or stream it waits for."""

    def __init__(self, report: list[str], steps: int):
        super().__init__("\n".join(report))
        self.report = report
        self.steps = steps


class SimError(Exception):
    """The design did something the hardware would not allow (a lock past 63, an access outside a
    buffer): the message says what."""


# -- locks ----------------------------------------------------------------------------------------------

_ACQ_SIGN = {ACQUIRE: "==", ACQUIRE_GE: ">="}


def lock_acquirable(lock: Lock, value: int, action: int) -> bool:
    """Whether an acquire of `value` can pass now: acquire-equal when the lock holds exactly `value`,
    AcquireGreaterEqual when it holds at least `value`."""
    return lock.value == value if action == ACQUIRE else lock.value >= value


def lock_take(lock: Lock, value: int, action: int) -> None:
    """An acquire that passed: AcquireGreaterEqual takes `value` from the lock; acquire-equal leaves the
    value as it is (the hardware's acquire with a positive value only compares, UG1583).
    """
    if action != ACQUIRE:
        lock.value -= value


class Race(SimError):
    """An access to a buffer that the lock-ownership rule does not allow (Ownership): the message names
    the agent, the core's line or the BD, the buffer and the locks that guard it."""


def _span_bytes(buf) -> int:
    """The bytes a (placed or viewed) buffer spans in its tile's memory."""
    span = 1 + sum((d - 1) * st for d, st in zip(buf.shape, buf.strides()))
    return span * buf.dtype.itemsize


class Ownership:
    """Which locks guard which buffers, derived from the design itself, and what each agent holds.

    The rule (the simulator's, written from how aiecc lowers every buffer a DMA touches: each BD takes a
    lock before its transfer and gives one after, `aie.use_lock` around `aie.dma_bd`; the core's side of
    the same buffer uses the same two locks the other way round): every lock a BD acquires or releases
    guards that BD's buffer, and locks that meet in one BD form one group (a ping-pong pair's two
    buffers share one group: its two locks count the free and the full slots). An agent holds a group
    from an AcquireGreaterEqual of one of its locks until a Release of one of them gives the value back
    (counted: acquire 2, release 1 and 1). Then:

    * a core's access (memref.load / store, vector.load / store, a func.call's memref arguments) and a
      DMA BD's transfer touching a guarded buffer must hold a group that guards it: else a Race, naming
      the core's line or the BD;
    * a release of a guarding lock by an agent that holds none of its group is a Race (a release twice,
      or one with no acquire);
    * while a DMA BD is in flight (from its acquire to its release) no other agent may touch the same
      bytes if either side writes (two readers may overlap): a Race. This catches one buffer guarded by
      two unrelated groups (a fill and a send of one buffer) when the schedule makes them meet.

    A buffer no BD touches is the core's own (a scratch, a stack): no lock is needed for it. A lock no BD
    uses (core-to-core synchronisation) guards nothing and is not counted. An acquire-equal takes no
    token (it leaves the value), so it gives no ownership.
    """

    def __init__(self, design):
        parent: dict[int, int] = {}
        self.locks: dict[int, Lock] = {}

        def find(x):
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        bds = []
        for ch in design.channels.values():
            seen, bd = set(), ch.first
            while bd is not None and id(bd) not in seen:
                seen.add(id(bd))
                bds.append(bd)
                bd = bd.next
        for bd in bds:
            locks = [lk for lk, _, _ in bd.acquires] + [lk for lk, _ in bd.releases]
            for lk in locks:
                parent.setdefault(id(lk), id(lk))
                self.locks[id(lk)] = lk
            for lk in locks[1:]:
                a, b = find(id(locks[0])), find(id(lk))
                if a != b:
                    parent[b] = a
        self.group = {k: find(k) for k in parent}
        # per tile: [start, end, buffer, set of groups guarding it]
        ranges: dict[int, dict[int, list]] = {}
        for bd in bds:
            buf = bd.buffer
            if buf.tile is None:
                continue
            entry = ranges.setdefault(id(buf.tile), {}).setdefault(
                id(buf), [buf.address, buf.address + _span_bytes(buf), buf, set()]
            )
            for lk in [lk for lk, _, _ in bd.acquires] + [lk for lk, _ in bd.releases]:
                entry[3].add(self.group[id(lk)])
        self.ranges = {t: list(v.values()) for t, v in ranges.items()}
        self.inflight: list[tuple] = []  # (agent, tile id, start, end, writes, what)
        self.hazards: list[str] = []  # latent races (an armed S2MM met), see access()

    def describe_group(self, g) -> str:
        return " / ".join(
            sorted(
                f"lock {lk.lock_id}"
                for k, lk in self.locks.items()
                if self.group[k] == g
            )
        ) + (
            f" of {next(lk.tile.name for k, lk in self.locks.items() if self.group[k] == g)}"
        )

    @staticmethod
    def holds(agent) -> collections.Counter:
        h = agent.__dict__.get("holds")
        if h is None:
            h = agent.__dict__["holds"] = collections.Counter()
        return h

    def acquired(self, agent, lock, value, action):
        g = self.group.get(id(lock))
        if g is not None and action != ACQUIRE:
            self.holds(agent)[g] += value

    def released(self, agent, lock, value, where: str):
        g = self.group.get(id(lock))
        if g is None:
            return
        h = self.holds(agent)
        if h[g] < value:
            guarded = sorted(
                e[2].name for es in self.ranges.values() for e in es if g in e[3]
            )
            raise Race(
                f"race: {agent.name} {where} releases {lock.describe()} by {value} holding "
                f"{h[g]} of its group ({self.describe_group(g)}, guarding {', '.join(guarded)}): a "
                f"release with no acquire of its own before it (a release twice, or an acquire "
                f"missing)"
            )
        h[g] -= value

    def access(
        self, agent, buf, start: int, end: int, where: str, writes=True, armed=False
    ):
        """agent touches bytes [start, end) of buf's tile memory (absolute offsets in the tile); armed:
        an S2MM BD that starts (it writes only when words arrive)."""
        tile = buf.tile
        if tile is None:
            return
        h = self.holds(agent)
        for s, e, base, groups in self.ranges.get(id(tile), ()):
            if start < e and s < end and not any(h[g] > 0 for g in groups):
                raise Race(
                    f"race: {agent.name} {where} touches {base.name} holding no lock that guards "
                    f"it ({'; '.join(self.describe_group(g) for g in sorted(groups))}): on the "
                    f"device another agent may be using it"
                )
        for other, t, s, e, w, what in self.inflight:
            if other is agent or t != id(tile) or not (start < e and s < end):
                continue
            if not (w or writes):
                continue  # two readers
            overlap = f"bytes {max(s, start)}..{min(e, end) - 1} of {tile.name}"
            if armed or (w and not getattr(other, "received", 0)):
                # an S2MM BD that holds its lock but has not written yet: armed to write whatever
                # arrives. A latent race (the data's arrival decides), recorded, not raised.
                s2mm, other_side = (agent, other) if armed else (other, agent)
                s2mm_what, other_what = (where, what) if armed else (what, where)
                note = (
                    f"{other_side.name} {other_what} touches {overlap} while {s2mm.name} "
                    f"{s2mm_what} holds its lock and may write them as soon as words arrive (it "
                    f"has none yet): the locks do not keep the two apart"
                )
                if note not in self.hazards:
                    self.hazards.append(note)
                continue
            raise Race(
                f"race: {agent.name} {where} touches {overlap} while {other.name} {what} is "
                f"{'writing' if w else 'reading'} them"
            )

    def others_inflight(self, agent, tile) -> bool:
        if tile is None:
            return False
        on = self.__dict__.setdefault("on_tile", {}).get(id(tile))
        return bool(on) and any(a is not agent for a in on)

    def begin(self, agent, buf, start, end, writes, what):
        if buf.tile is not None:
            self.inflight.append((agent, id(buf.tile), start, end, writes, what))
            # the agents with a BD in flight on each tile (others_inflight, called on every piece)
            self.__dict__.setdefault("on_tile", {}).setdefault(id(buf.tile), []).append(
                agent
            )

    def end(self, agent):
        if any(x[0] is agent for x in self.inflight):
            self.inflight = [x for x in self.inflight if x[0] is not agent]
            for on in self.__dict__.setdefault("on_tile", {}).values():
                while agent in on:
                    on.remove(agent)


def ownership(sim) -> Ownership | None:
    """The simulator's Ownership (made on first use), or None when sim.check_ownership is False."""
    if not getattr(sim, "check_ownership", True):
        return None
    own = sim.__dict__.get("_ownership")
    if own is None:
        own = sim.__dict__["_ownership"] = Ownership(sim.design)
    return own


# -- streams --------------------------------------------------------------------------------------------


class Segment:
    """The words one MM2S BD execution sends: each receiver takes them in order."""

    def __init__(
        self, data: np.ndarray, source: str, receivers: int, t: float, ready_t=None
    ):
        self.data = data
        self.avail = (
            data.size
        )  # bytes the sender has put on the stream so far (seeded runs: in pieces)
        self.source = source
        self.pending = receivers
        self.t = t  # when the first word can leave
        self.ready_t = (
            t if ready_t is None else ready_t
        )  # when the last word can leave (DDR reads)
        # where its first byte is in its stream (Stream.head when it was sent), and the receivers that
        # had to take words before its last could leave (their FIFOs were full of it)
        self.start = 0
        self.room: list[int] = []


class Port:
    """An S2MM port: the segments on their way to it, oldest first."""

    def __init__(self, name: str):
        self.name = name
        self.queue: collections.deque = collections.deque()  # [segment, bytes taken]
        # the circuit that reaches it (one: circuits do not merge)
        self.stream: Stream | None = None
        self.k = 0  # its index among the stream's receivers
        self.agent = None  # its S2MM DmaAgent
        self.taken = 0  # bytes taken from the stream, ever
        self.last_t = 0.0  # when its last take ended


class Stream:
    """The circuit of one MM2S port to its S2MM ports, with the FIFOs on the way (bounded).

    With pushed the bytes the sender has put on the stream and taken_k what receiver k has taken:
    pushed - taken_k <= depth[k] (the FIFOs from the sender to k: the sender runs ahead of each receiver
    by at most that), and taken_i - taken_k <= lead[k][i] (the FIFOs on k's branch that are not on i's:
    a word i has taken waits for k there, so a broadcast moves at the pace of its slowest receiver).
    """

    def __init__(self, source: str, ports: list, paths):
        self.source = source
        self.ports = ports
        if paths is None or len(paths) != len(ports):
            # a design given without its paths (not from design.load): unbounded, as before
            self.depth = [float("inf")] * len(ports)
            self.lead = [[float("inf")] * len(ports) for _ in ports]
        else:
            sets = [set(p) for p in paths]
            self.depth = [sum(stage_bytes(st) for st in p) for p in paths]
            self.lead = [
                [
                    sum(stage_bytes(st) for st in paths[k] if st not in sets[i])
                    for i in range(len(ports))
                ]
                for k in range(len(ports))
            ]
        # for each receiver k, (j, lead[j][k]) of every other receiver j (fit)
        self.others = [
            [(j, self.lead[j][k]) for j in range(len(ports)) if j != k]
            for k in range(len(ports))
        ]
        self.head = 0  # bytes of every segment sent so far
        self.last: Segment | None = None  # the newest segment
        self.waiters: list = []  # the sender, waiting for room

    def capacity(self) -> float:
        """How far (in bytes of the stream) the sender can have pushed: the receivers' room."""
        return min(
            (p.taken + d for p, d in zip(self.ports, self.depth)), default=float("inf")
        )

    def published(self) -> int:
        """The bytes the sender has read and offers (a seeded schedule reads a BD in pieces)."""
        return self.head if self.last is None else self.last.start + self.last.avail

    def fit(self, pos, ub, active) -> list:
        """The furthest each receiver can have taken, given where each is (pos), how far each active one
        wants to go (ub: its BD's remaining bytes) and the FIFOs: the greatest positions within the
        bounds (a fixed point of the difference constraints, at most a pass per receiver and one more).
        """
        x = list(ub)
        raw = self.published()
        depth, others, n = self.depth, self.others, len(x)
        for _ in range(n + 2):
            pushed = raw
            for j in range(n):
                v = x[j] + depth[j]
                if v < pushed:
                    pushed = v
            changed = False
            for k in active:
                v = x[k] if x[k] < pushed else pushed
                for j, lead in others[k]:
                    w = x[j] + lead
                    if w < v:
                        v = w
                if v < x[k]:
                    x[k] = v if v > pos[k] else pos[k]
                    changed = True
            if not changed:
                break
        return x

    def describe_full(self) -> str:
        """Which receivers' FIFOs are full (back-pressure on the sender)."""
        cap = self.capacity()
        full = [
            f"{p.name} (its path buffers {self.depth[k]} bytes, and it has taken {p.taken} "
            f"bytes of the stream)"
            for k, p in enumerate(self.ports)
            if p.taken + self.depth[k] <= cap
        ]
        return "; ".join(full)


# -- agents -------------------------------------------------------------------------------------------------


class Agent:
    name = "agent"

    def __init__(self, sim):
        self.sim = sim
        self.t = 0.0
        self.waiting = ""  # what it waits for, when blocked
        self.done = False

    def step(self) -> bool:
        """Make progress at self.t; False when blocked (self.waiting says on what)."""
        raise NotImplementedError


class DmaAgent(Agent):
    """One tile DMA channel walking its BD chain, or a shim channel running the tasks started on it."""

    def __init__(self, sim, ch: Channel):
        super().__init__(sim)
        self.ch = ch
        self.name = ch.name
        self.bd: BD | None = ch.first
        self.runs_left = ch.repeat
        self.stage = "acquire"
        self.segment: Segment | None = None
        self.received = 0  # S2MM: bytes of the current BD written
        self.target: np.ndarray | None = (
            None  # S2MM: byte indices the current BD writes
        )
        self.tasks: collections.deque = collections.deque()  # shim: started tasks
        self.task = None
        self.execution = 0
        self.task_bd = 0
        self.bds_done = 0
        if ch.first is None:
            self.bd = None
        self.port = (
            sim.ports.get((ch.tile.col, ch.tile.row, ch.index))
            if ch.direction == S2MM
            else None
        )
        if self.port is not None:
            self.port.agent = self
        self.stream = (
            sim.streams.get((ch.tile.col, ch.tile.row, ch.index))
            if ch.direction == MM2S
            else None
        )

    # the BD to work on next (tile chains and shim tasks alike)
    def current(self) -> BD | None:
        if self.ch.first is not None:
            return self.bd
        if self.task is None:
            if not self.tasks:
                return None
            self.task, self.execution, self.task_bd = self.tasks.popleft(), 0, 0
        return self.task.bds[self.task_bd]

    def finish_bd(self):
        self.bds_done += 1
        self.sim.trace_event(self, "bd", self.bd_start, self.t, self.bd_name)
        if self.ch.first is not None:
            nxt = self.bd.next
            if nxt is None:
                self.runs_left -= 1
                nxt = self.ch.first if self.runs_left > 0 else None
            self.bd = nxt
            if nxt is None:
                self.done = True
                self.waiting = "its BD chain ended"
            return
        task = self.task
        self.task_bd += 1
        if self.task_bd == len(task.bds):
            self.task_bd = 0
            self.execution += 1
            if self.execution > task.repeat:
                self.sim.task_done(task, self.t)
                self.task = None

    def step(self) -> bool:
        bd = self.current()
        if bd is None:
            self.waiting = (
                "idle (no BD to run)" if self.ch.first is None else "its chain ended"
            )
            return False
        sim = self.sim
        if self.stage == "acquire":
            for lock, value, action in bd.acquires:
                if not lock_acquirable(lock, value, action):
                    self.waiting = (
                        f"on {bd.describe()}: acquire {lock.describe()} "
                        f"{_ACQ_SIGN[action]} {value}, it holds {lock.value}"
                    )
                    sim.wait_lock(self, lock)
                    return False
            own = ownership(sim)
            for lock, value, action in bd.acquires:
                lock_take(lock, value, action)
                if own is not None:
                    own.acquired(self, lock, value, action)
                self.t = (
                    max(self.t, sim.acquire_time(lock, value, action)) + sim.costs.lock
                )
            self.bd_start = self.t
            self.bd_name = bd.describe()
            self.t += sim.costs.bd_setup
            self.stage = "move"
            if own is not None and bd.buffer.tile is not None:
                # the lock-ownership rule: the BD's bytes, held from its acquire to its release
                idx = bd.indices(self.execution)
                if idx.size:
                    e = bd.buffer.dtype.itemsize
                    lo = bd.buffer.address + int(idx.min()) * e
                    hi = bd.buffer.address + (int(idx.max()) + 1) * e
                    where = f"on {bd.describe()} (line {bd.line})"
                    writes = self.ch.direction == S2MM
                    own.access(self, bd.buffer, lo, hi, where, writes, armed=writes)
                    own.begin(self, bd.buffer, lo, hi, writes, where)
            if self.ch.direction == MM2S:
                data = self.read(bd)
                receivers = sim.routes.get(
                    (self.ch.tile.col, self.ch.tile.row, self.ch.index), []
                )
                if not receivers:  # the hardware stalls: nothing takes the words
                    self.waiting = (
                        f"on {bd.describe()}: its stream reaches no S2MM channel (no route from "
                        f"this MM2S port through the switchboxes)"
                    )
                    return False  # holding its locks, for good
                ready = sim.ddr(self.t, data.size) if self.ch.tile.row == 0 else self.t
                seg = self.segment = Segment(
                    data, f"{self.name} {bd.describe()}", len(receivers), self.t, ready
                )
                seg.sender = self
                st = self.stream
                seg.start = st.head
                seg.room = [
                    k
                    for k, p in enumerate(st.ports)
                    if seg.start + data.size > p.taken + st.depth[k]
                ]
                st.head += data.size
                st.last = seg
                if sim.rng is not None:
                    # a seeded schedule: the words leave in pieces, each read from memory when it
                    # leaves (as far as the FIFOs have room), the other agents acting between them
                    seg.avail = 0
                    self.source = (self.sim.view(bd.buffer), bd.indices(self.execution))
                    self.receivers = receivers
                    self.publish()
                for p in receivers:
                    p.queue.append([seg, 0])
                    sim.wake_port(p)
            else:
                self.received = 0
                self.target = self.write_indices(bd)
        if self.stage == "move":
            if self.ch.direction == MM2S:
                seg, st = self.segment, self.stream
                size = seg.data.size
                if seg.avail < size and self.publish():
                    self.waiting = f"on {bd.describe()}: sending, in pieces"
                    return True  # the others act before the next piece
                if seg.avail < size or st.capacity() < seg.start + size:
                    # back-pressure: the FIFOs to a receiver are full, the rest cannot leave
                    self.waiting = self.stall(bd)
                    st.waiters.append(self)
                    return False
                takers = sim.stream_takers(st)
                if takers:
                    # a receiver that is taking words takes the rest in the same move; the BD ends
                    # when it has (the words left in the FIFOs matter only where no receiver takes them)
                    self.waiting = (
                        f"on {bd.describe()}: {size} bytes sent, "
                        f"{', '.join(st.ports[k].name for k in takers)} still taking them"
                    )
                    st.waiters.append(self)
                    return False
                # the last word has left: when the receivers that had to make room took it (the
                # timed mode keeps the time of their whole take), and not before the stream's rate
                self.t = max(
                    self.t,
                    seg.t + size / STREAM_BYTES_PER_CYCLE,
                    seg.ready_t,
                    *(st.ports[k].last_t for k in seg.room),
                )
                self.segment = None
            else:
                got = self.receive(bd)
                if got is None:
                    return True  # a piece received; the others act before the next
                if not got:
                    return False
                if self.ch.tile.row == 0:  # into DDR
                    self.t = sim.ddr(self.t, self.received)
            self.stage = "release"
        own = ownership(sim)
        if own is not None:
            own.end(self)
        for lock, value in bd.releases:
            if own is not None:
                own.released(self, lock, value, f"on {bd.describe()} (line {bd.line})")
            lock.value += value
            if lock.value > MAX_LOCK_VALUE:
                raise SimError(
                    f"{self.name} {bd.describe()}: release of {value} takes {lock.describe()} to "
                    f"{lock.value}, past the 6-bit lock's 63"
                )
            self.t += sim.costs.lock
            sim.lock_released(lock, self.t, value)
        self.stage = "acquire"
        self.finish_bd()
        return True

    def stall(self, bd: BD) -> str:
        """The hang line of a sender held by back-pressure (as things are now)."""
        seg, st = self.segment, self.stream
        size = seg.data.size
        sent = int(min(st.capacity(), seg.start + seg.avail) - seg.start)
        return (
            f"on {bd.describe()}: {sent} of {size} bytes sent, stalled by back-pressure: the "
            f"FIFOs of its stream are full towards {st.describe_full()}"
        )

    def refresh(self):
        """Its waiting line brought up to date (a hang report): a stream's state changes while an agent
        waits on it without waking it."""
        if self.stage != "move" or self.done:
            return
        bd = self.current()
        if self.ch.direction == MM2S:
            seg, st = self.segment, self.stream
            if (
                seg is not None
                and self in st.waiters
                and (
                    seg.avail < seg.data.size
                    or st.capacity() < seg.start + seg.data.size
                )
            ):
                self.waiting = self.stall(bd)
        elif self.target is not None and self.received < self.target.size:
            self.waiting = (
                f"on {bd.describe()}: {self.received} of {self.target.size} bytes received, "
                + self.sim.stream_block(self)
            )

    def publish(self):
        """A seeded schedule's next piece of the current MM2S BD: a random number of its elements (at
        least one, at most what the FIFOs have room for), read from memory now and put on the stream.
        False when there is no room (or nothing left)."""
        seg, (arr, idx) = self.segment, self.source
        e = arr.dtype.itemsize
        done = seg.avail // e
        room = (
            min(self.sim.stream_room(self.stream) - seg.start, seg.data.size) // e
            - done
        )
        if room <= 0 or idx.size <= done:
            return False  # the FIFOs are full (or nothing is left to read)
        k = int(self.sim.rng.integers(1, min(idx.size - done, room) + 1))
        seg.data[done * e : (done + k) * e] = (
            np.ascontiguousarray(arr[idx[done : done + k]]).view(np.uint8).reshape(-1)
        )
        seg.avail = (done + k) * e
        for p in self.receivers:
            self.sim.wake_port(p)
        return True

    def read(self, bd: BD) -> np.ndarray:
        arr = self.sim.view(bd.buffer)
        idx = bd.indices(self.execution)
        if idx.size and (idx.min() < 0 or idx.max() >= arr.size):
            raise SimError(
                f"{self.name} {bd.describe()} reads outside {bd.buffer.name}"
            )
        return np.ascontiguousarray(arr[idx]).view(np.uint8).copy()

    def write_indices(self, bd: BD) -> np.ndarray:
        arr = self.sim.view(bd.buffer)
        idx = bd.indices(self.execution)
        if idx.size and (idx.min() < 0 or idx.max() >= arr.size):
            raise SimError(
                f"{self.name} {bd.describe()} writes outside {bd.buffer.name}"
            )
        e = arr.dtype.itemsize
        return (idx[:, None] * e + np.arange(e)[None, :]).ravel()

    def receive(self, bd: BD) -> bool | None:
        """Take words from the port into the BD: True when it has its length, False when it waits for
        words, None (a seeded schedule) after a piece, to let the others act. The receivers of a
        broadcast that are receiving too move with it (Simulator.stream_move)."""
        sim, need = self.sim, self.target.size
        if self.received >= need:
            return True
        moved = sim.stream_move(self) if self.port.stream is not None else 0
        if self.received >= need:
            return True
        if moved and sim.rng is not None:
            return None
        self.waiting = (
            f"on {bd.describe()}: {self.received} of {need} bytes received, "
            + (sim.stream_block(self))
        )
        sim.wait_port(self, self.port)
        return False

    def take(self, bd: BD, n: int):
        """Move n bytes from the port (published, within the FIFOs' bounds) into the BD's buffer."""
        sim = self.sim
        raw = sim.view(bd.buffer).view(np.uint8)
        own = ownership(sim)
        while n > 0:
            entry = self.port.queue[0]
            seg, taken = entry
            m = min(n, seg.data.size - taken)
            if own is not None and own.others_inflight(self, bd.buffer.tile):
                part = self.target[self.received : self.received + m]
                own.access(
                    self,
                    bd.buffer,
                    bd.buffer.address + int(part.min()),
                    bd.buffer.address + int(part.max()) + 1,
                    f"on {bd.describe()} (line {bd.line}), writing",
                )
            raw[self.target[self.received : self.received + m]] = seg.data[
                taken : taken + m
            ]
            start = max(self.t, seg.t)
            self.t = start + m / STREAM_BYTES_PER_CYCLE
            self.received += m
            self.port.taken += m
            entry[1] += m
            n -= m
            if entry[1] == seg.data.size:
                self.t = max(self.t, seg.ready_t)
                self.port.queue.popleft()
                seg.pending -= 1


class CoreAgent(Agent):
    """A core running its body."""

    def __init__(self, sim, core: Core):
        super().__init__(sim)
        self.core = core
        self.name = f"core {core.tile.name}"
        self.blocks = {b.label: b for b in core.op.regions[0]}
        self.block = core.op.regions[0][0]
        self.pc = 0
        self.env: dict[str, object] = {}
        self.calls = 0
        # the core's rounding and saturation registers (aie::set_rounding / set_saturation), at their reset
        # value, floor and none (aie_api's documented reset); they persist across this core's calls and
        # dispatches, and no other core sees them
        self.control = 0

    def value(self, name):
        if name in self.env:
            return self.env[name]
        return self.sim.design.values[name]

    def jump(self, label, args):
        block = self.blocks[label]
        for (name, _), v in zip(block.args, args):
            self.env[name] = v
        self.block, self.pc = block, 0

    def step(self) -> bool:
        sim = self.sim
        while True:
            ops = self.block.ops
            if self.pc >= len(ops):
                raise SimError(
                    f"{self.name}: fell off the end of block {self.block.label}"
                )
            op = ops[self.pc]
            n = op.name
            if n == "aie.use_lock":
                lock = self.value(op.operands[0])
                v = (
                    self.value(op.operands[1])
                    if len(op.operands) > 1
                    else (op.attr("value") or 1)
                )
                action = op.attr("action")
                own = ownership(sim)
                if action == 1:  # release
                    if own is not None:
                        own.released(self, lock, v, f"at line {op.line}")
                    lock.value += v
                    if lock.value > MAX_LOCK_VALUE:
                        raise SimError(
                            f"{self.name}: release takes {lock.describe()} past 63"
                        )
                    self.t += sim.costs.lock
                    sim.lock_released(lock, self.t, v)
                else:
                    if not lock_acquirable(lock, v, action):
                        self.waiting = (
                            f"at line {op.line}: acquire {lock.describe()} {_ACQ_SIGN[action]} "
                            f"{v}, it holds {lock.value}"
                        )
                        sim.wait_lock(self, lock)
                        return False
                    lock_take(lock, v, action)
                    if own is not None:
                        own.acquired(self, lock, v, action)
                    self.t = (
                        max(self.t, sim.acquire_time(lock, v, action)) + sim.costs.lock
                    )
                self.pc += 1
                return True
            if n == "cf.br":
                self.jump(op.successors[0], [self.value(x) for x in op.operands])
                continue
            if n == "cf.cond_br":
                seg = op.attr("operandSegmentSizes") or [1, 0, 0]
                cond = self.value(op.operands[0])
                a = op.operands[1 : 1 + seg[1]]
                b = op.operands[1 + seg[1] :]
                if cond:
                    self.jump(op.successors[0], [self.value(x) for x in a])
                else:
                    self.jump(op.successors[1], [self.value(x) for x in b])
                continue
            if n == "aie.end":
                self.done = True
                self.waiting = "its body ended"
                return False
            if n == "func.call":
                self.call(op)
                self.pc += 1
                return True
            if n == "aie.put_cascade":
                if not sim.cascade_put(self, self.value(op.operands[0])):
                    self.waiting = f"at line {op.line}: {self.waiting}"
                    return False
                self.pc += 1
                continue
            if n == "aie.get_cascade":
                queue = sim.cascade_in(self.core.tile)
                if not queue:
                    self.waiting = f"at line {op.line}: get_cascade, nothing has come down the cascade"
                    sim.wait_cascade(self, self.core.tile)
                    return False
                vec, t, _ = queue.popleft()
                self.t = max(self.t, t)
                sim.cascade_taken(self.core.tile, self.t)
                self.env[op.results[0]] = vec
                self.pc += 1
                continue
            self.compute(op)
            self.pc += 1

    def compute(self, op):
        n = op.name
        if n == "arith.constant":
            v = op.attr("value")
            if not isinstance(v, int):
                raise DesignError(
                    f"{self.name}: constant {op.attrs.get('value')} not simulated"
                )
            self.env[op.results[0]] = v
        elif n in _ARITH:
            a, b = (self.value(x) for x in op.operands)
            self.env[op.results[0]] = _ARITH[n](a, b)
        elif n == "arith.cmpi":
            a, b = (self.value(x) for x in op.operands)
            self.env[op.results[0]] = _CMP[op.attr("predicate")](a, b)
        elif n in ("arith.index_cast", "arith.extsi", "arith.extui", "arith.trunci"):
            self.env[op.results[0]] = self.value(op.operands[0])
        elif n == "vector.load":
            buf = self.value(op.operands[0])
            at = self._flat(buf, op.operands[1:])
            count = _vector_length(op.result_types[0])
            self.touch(buf, at, count, op, writes=False)
            self.env[op.results[0]] = self.sim.view(buf)[at : at + count].copy()
        elif n == "vector.store":
            buf = self.value(op.operands[1])
            at = self._flat(buf, op.operands[2:])
            vec = self.value(op.operands[0])
            self.touch(buf, at, vec.size, op, writes=True)
            self.sim.view(buf)[at : at + vec.size] = vec
        elif n == "memref.subview":
            self.env[op.results[0]] = self.subview(op)
        elif n == "memref.cast":
            self.env[op.results[0]] = self.value(op.operands[0])
        elif n in ("memref.store", "memref.load"):
            is_store = n == "memref.store"
            mem = op.operands[1] if is_store else op.operands[0]
            idx = op.operands[2:] if is_store else op.operands[1:]
            buf = self.value(mem)
            flat = self._flat(buf, idx)
            self.touch(buf, flat, 1, op, writes=is_store)
            arr = self.sim.view(buf)
            if is_store:
                arr[flat] = self.value(op.operands[0])
            else:
                self.env[op.results[0]] = arr[flat].item()
        else:
            raise DesignError(f"{self.name}: {n} (line {op.line}) is not simulated")

    def touch(self, buf, first: int, count: int, op, writes: bool, what: str = ""):
        """The lock-ownership rule on count elements of buf from element `first` (Ownership)."""
        own = ownership(self.sim)
        if own is None or getattr(buf, "tile", None) is None:
            return
        e = buf.dtype.itemsize
        start = buf.address + first * e
        own.access(
            self,
            buf,
            start,
            start + count * e,
            f"at line {op.line} ({what or op.name})",
            writes,
        )

    def _flat(self, buf, idx) -> int:
        return sum(i * st for i, st in zip((self.value(x) for x in idx), buf.strides()))

    def subview(self, op):
        """A view of a placed buffer: its first element offset in, its own sizes and strides."""
        import dataclasses as dc

        src = self.value(op.operands[0])
        seg = op.attr("operandSegmentSizes") or [1, 0, 0, 0]
        dyn = iter(self.value(x) for x in op.operands[1:])

        def fill(
            static,
        ):  # MLIR's kDynamic marks a value taken from the operands, in order
            return [next(dyn) if v == -(2**63) else v for v in static]

        offsets = fill(op.attr("static_offsets") or [])
        sizes = fill(op.attr("static_sizes") or [])
        steps = fill(op.attr("static_strides") or [])
        if seg[1:] and sum(seg[1:]) and len(offsets) + len(sizes) + len(steps) == 0:
            raise DesignError(
                f"{self.name}: memref.subview at line {op.line} is not simulated"
            )
        base = src.strides()
        first = sum(o * b for o, b in zip(offsets, base))
        return dc.replace(
            src,
            address=src.address + first * src.dtype.itemsize,
            shape=tuple(sizes),
            layout=tuple(b * s for b, s in zip(base, steps)),
        )

    def call(self, op):
        sim = self.sim
        callee = op.attr("callee")
        t0 = self.t
        own = ownership(sim)
        if own is not None:
            # a kernel may read and write all of each buffer it is given
            for x in op.operands:
                v = self.value(x)
                if getattr(v, "tile", None) is not None:
                    own.access(
                        self,
                        v,
                        v.address,
                        v.address + _span_bytes(v),
                        f"at line {op.line} (func.call @{callee}, argument {v.name})",
                    )
        if sim.run_kernels:
            from air.emu.kernels import (
                call_on_core,
            )  # the emulator's: one save-and-restore rule

            fn = sim.kernel(callee, op)
            args = []
            for x in op.operands:
                v = self.value(x)
                args.append(
                    v.tile.memory.ctypes.data + v.address
                    if hasattr(v, "address")
                    else v
                )
            self.control = call_on_core(
                fn, args, getattr(fn, "control_registers", None), self.control
            )
        self.calls += 1
        self.t += sim.costs.call(callee) if sim.costs.call else 0
        sim.trace_event(self, "call", t0, self.t, callee)


def _vector_length(type_text: str) -> int:
    """vector<32xbf16> -> 32."""
    return int(type_text.split("<", 1)[1].split("x", 1)[0])


_ARITH = {
    "arith.addi": lambda a, b: a + b,
    "arith.subi": lambda a, b: a - b,
    "arith.muli": lambda a, b: a * b,
    "arith.divsi": lambda a, b: int(a / b),
    "arith.divui": lambda a, b: a // b,
    "arith.remsi": lambda a, b: a - int(a / b) * b,
    "arith.remui": lambda a, b: a % b,
    "arith.andi": lambda a, b: a & b,
    "arith.ori": lambda a, b: a | b,
    "arith.maxsi": max,
    "arith.minsi": min,
}
# arith.cmpi predicates (mlir ArithBase.td): eq 0, ne 1, slt 2, sle 3, sgt 4, sge 5, ult 6, ule 7, ugt 8, uge 9
_CMP = {
    0: lambda a, b: a == b,
    1: lambda a, b: a != b,
    2: lambda a, b: a < b,
    3: lambda a, b: a <= b,
    4: lambda a, b: a > b,
    5: lambda a, b: a >= b,
    6: lambda a, b: a < b,
    7: lambda a, b: a <= b,
    8: lambda a, b: a > b,
    9: lambda a, b: a >= b,
}


class SequenceAgent(Agent):
    """The runtime sequence: configures, starts and awaits the shim tasks, in order."""

    def __init__(self, sim, seq):
        super().__init__(sim)
        self.seq = seq
        self.name = f"runtime sequence @{seq.name}"
        self.ops = seq.op.regions[0][0].ops
        self.pc = 0
        self.tasks: dict[str, Task] = {}

    def step(self) -> bool:
        sim = self.sim
        while self.pc < len(self.ops):
            op = self.ops[self.pc]
            n = op.name
            if n == "aiex.dma_configure_task_for":
                ch = sim.design.allocations[op.attr("alloc")]
                bds = []
                for o in op.body:
                    if o.name == "aie.dma_bd":
                        bds.append(
                            make_bd(o, sim.args[o.operands[0]], [], [], shim=True)
                        )
                    elif o.name not in ("aie.end", "aie.next_bd"):
                        raise DesignError(
                            f"{o.name} in a shim task (line {o.line}) is not simulated"
                        )
                self.tasks[op.results[0]] = Task(
                    ch,
                    bds,
                    op.attr("repeat_count", 0) or 0,
                    bool(op.attr("issue_token")),
                    op.results[0],
                )
            elif n == "aiex.dma_start_task":
                task = self.tasks[op.operands[0]]
                task.started_t = self.t
                agent = sim.dma[id(task.channel)]
                agent.tasks.append(task)
                agent.t = max(agent.t, self.t)
                sim.ready(agent)
            elif n == "aiex.dma_await_task":
                task = self.tasks[op.operands[0]]
                if not getattr(task, "done", False):
                    self.waiting = f"awaits task {task.name} on {task.channel.name}"
                    sim.wait_task(self, task)
                    return False
                self.t = max(self.t, task.done_t)
            elif n == "aiex.dma_free_task":
                pass
            elif n in ("aie.end",):
                pass
            else:
                raise DesignError(
                    f"{n} in the runtime sequence (line {op.line}) is not simulated"
                )
            self.pc += 1
        self.done = True
        self.waiting = "finished"
        return False


# -- the simulator -----------------------------------------------------------------------------------------


class Simulator:
    """One design, one runtime sequence, run on host arrays."""

    def __init__(
        self,
        design: Design,
        kernels=None,
        costs: Costs | None = None,
        trace=False,
        run_kernels=True,
        seed: int | None = None,
    ):
        """kernels(callee, func) -> a ctypes function; costs: the timed mode's prices; run_kernels=False
        charges the calls' cycles without computing (a timing run: the data still move). seed: a seeded
        schedule (the order of agents ready at one time drawn at random, each BD's transfer moved in
        pieces of random size with the other agents acting between them); None: the one deterministic
        order, each transfer whole.
        """
        self.design = design
        self.seed = seed
        self.rng = None if seed is None else np.random.default_rng(seed)
        self.run_kernels = run_kernels
        self.costs = costs or Costs()
        self.kernels = kernels
        self._fns = {}
        self.ports = {}
        for (col, row, d, idx), ch in design.channels.items():
            if d == S2MM:
                self.ports[(col, row, idx)] = Port(ch.name)
        self.routes = {}
        for src, dsts in design.routes.items():
            missing = [d for d in dsts if d not in self.ports]
            if missing:
                raise DesignError(
                    f"the stream from {src} reaches {missing}, where no S2MM channel is started"
                )
            self.routes[src] = [self.ports[d] for d in dsts]
        self.streams = {}
        for src, ports in self.routes.items():
            st = Stream(
                f"tile ({src[0]}, {src[1]}) MM2S {src[2]}",
                ports,
                design.paths.get(src),
            )
            for k, p in enumerate(ports):
                if p.stream is not None:
                    raise DesignError(
                        f"two circuits reach {p.name} ({p.stream.source} and {st.source})"
                    )
                p.stream, p.k = st, k
            self.streams[src] = st
        self.dma = {id(ch): DmaAgent(self, ch) for ch in design.channels.values()}
        self.cores = [CoreAgent(self, c) for c in design.cores]
        self.lock_waiters = collections.defaultdict(list)
        self.lock_t = {}
        self.lock_tokens = (
            {}
        )  # per lock, when each token it holds was released (acquire_time)
        self.port_waiters = collections.defaultdict(list)
        self.task_waiters = collections.defaultdict(list)
        self._heap = []
        self._queued = set()
        self._seq = 0
        self.trace = [] if trace else None
        self.cascades, self.cascade_waiters, self.cascade_put_waiters = {}, {}, {}
        self.steps = 0
        self.ddr_free = 0.0
        # several dispatches (run called again): the runtime sequence of the last one, and when each ended
        self.main = None
        self.dispatch_ends: list[float] = []

    # scheduling
    def ready(self, agent):
        if id(agent) in self._queued or agent.done:
            return
        self._queued.add(id(agent))
        self._seq += 1
        # a seeded schedule draws the order of the agents ready at one time
        key = self._seq if self.rng is None else (self.rng.random(), self._seq)
        heapq.heappush(self._heap, (agent.t, key, agent))

    def _wake(self, agents, t):
        for a in agents:
            a.t = max(a.t, t)
            self.ready(a)
        agents.clear()

    def wait_lock(self, agent, lock):
        self.lock_waiters[id(lock)].append(agent)

    def lock_time(self, lock) -> float:
        return self.lock_t.get(id(lock), 0.0)

    def _tokens(self, lock, held: int) -> list[float]:
        """The times at which the tokens a counting lock holds were released (a min-heap), made on first
        use with the `held` tokens it then holds, there from the start."""
        tokens = self.lock_tokens.get(id(lock))
        if tokens is None:
            tokens = self.lock_tokens[id(lock)] = [0.0] * max(held, 0)
        return tokens

    def acquire_time(self, lock, value: int, action: int) -> float:
        """When an acquire that has passed could have passed (the timed mode). AcquireGreaterEqual takes
        `value` tokens, the earliest released: it is dated by the last of those, not by the lock's latest
        release, which (each agent keeping its own clock) can lie in the future of a token released long
        before; acquire-equal, which takes nothing, by the lock's latest release. Found by the traces of
        the GEMM at small M: a core waited for the next-but-one record of its ping-pong
        (docs/simulator.md, the timed mode)."""
        if action == ACQUIRE or value <= 0:
            return self.lock_time(lock)
        tokens = self._tokens(lock, lock.value + value)
        taken = [heapq.heappop(tokens) for _ in range(min(value, len(tokens)))]
        return max(taken, default=self.lock_time(lock))

    def lock_released(self, lock, t, value: int = 0):
        tokens = self._tokens(lock, lock.value - value)
        for _ in range(max(value, 0)):
            heapq.heappush(tokens, t)
        self.lock_t[id(lock)] = max(self.lock_t.get(id(lock), 0.0), t)
        self._wake(self.lock_waiters[id(lock)], t)

    def wait_port(self, agent, port):
        self.port_waiters[id(port)].append(agent)

    def wake_port(self, port):
        self._wake(self.port_waiters[id(port)], 0.0)

    def stream_move(self, me) -> int:
        """me, an S2MM DmaAgent receiving, takes what its stream offers within the FIFOs' bounds; the
        stream's other receivers that are receiving too (on a BD, short of its length) move with it, in
        one step, as the hardware moves a broadcast word to every branch at once. The timed mode: a
        receiver that gets further ahead of another than the FIFOs between them hold goes at that one's
        pace. Returns the bytes me took."""
        st = me.port.stream
        ports = st.ports
        pos, ub, active = self._receiving(st)
        x = st.fit(pos, ub, active) if len(ports) > 1 else None
        me_k = me.port.k
        if x is None:  # one receiver: no coupling, only what was published
            x = [min(ub[0], st.published())]
        if self.rng is not None and x[me_k] - pos[me_k] > 1:
            # a seeded schedule: a piece of random size (the others within their bounds of it)
            ub[me_k] = pos[me_k] + int(self.rng.integers(1, x[me_k] - pos[me_k] + 1))
            x = st.fit(pos, ub, active) if len(ports) > 1 else [ub[0]]
        starts = {}
        for k in active:
            if x[k] > pos[k]:
                a = ports[k].agent
                starts[k] = max(a.t, ports[k].queue[0][0].t)
        for k in starts:
            a = ports[k].agent
            a.take(a.current(), x[k] - pos[k])
        for k in starts:
            a = ports[k].agent
            for j, t0 in starts.items():
                ahead = x[k] - pos[j] - st.lead[j][k]
                if j != k and ahead > 0:  # the pace of the slower one
                    a.t = max(a.t, t0 + ahead / STREAM_BYTES_PER_CYCLE)
            ports[k].last_t = a.t
            if a is not me:
                self.ready(a)  # to its release, at its time
        if starts:
            last = st.last
            if (
                last is not None
                and last.avail == last.data.size
                and st.capacity() >= last.start + last.data.size
            ):
                # every word of the sender's BD has left its memory: its bytes are free to be
                # written, though it holds its locks until it steps to its release
                own = ownership(self)
                sender = getattr(last, "sender", None)
                if own is not None and sender is not None and sender.segment is last:
                    own.end(sender)
            if st.waiters and self._sender_may_go(st):
                self._wake(st.waiters, me.t)
        return x[me_k] - pos[me_k]

    @staticmethod
    def _receiving(st):
        """Where each receiver of st is (bytes taken), how far each that is receiving (on a BD short of
        its length) wants to go, and which those are."""
        pos = [p.taken for p in st.ports]
        ub = list(pos)
        active = []
        for k, p in enumerate(st.ports):
            a = p.agent
            if (
                a is not None
                and a.stage == "move"
                and a.target is not None
                and a.received < a.target.size
            ):
                ub[k] += a.target.size - a.received
                active.append(k)
        return pos, ub, active

    def stream_takers(self, st) -> list[int]:
        """The receivers of st that are receiving and could take words now."""
        pos, ub, active = self._receiving(st)
        if not active:
            return []
        x = (
            st.fit(pos, ub, active)
            if len(st.ports) > 1
            else [min(ub[0], st.published())]
        )
        return [k for k in active if x[k] > pos[k]]

    def stream_room(self, st) -> float:
        """How far the sender of st may read ahead now (a seeded schedule's pieces): the FIFOs' room
        past where each receiver will be once those receiving have taken what their BDs want (they
        take as the words come), so a piece waits only for a receiver that is not receiving.
        """
        pos, ub, active = self._receiving(st)
        return min((u + d for u, d in zip(ub, st.depth)), default=float("inf"))

    def _sender_may_go(self, st) -> bool:
        """Whether the sender waiting on st can move on: room for its next piece (a seeded schedule),
        or its BD's last word gone and no receiver still taking."""
        last = st.last
        if last is None:
            return True
        cap = st.capacity()
        end = last.start + last.data.size
        if last.avail < last.data.size:
            return self.stream_room(st) > last.start + last.avail
        return cap >= end and not self.stream_takers(st)

    def stream_block(self, me) -> str:
        """Why receiver me cannot take more now (its hang line)."""
        st = me.port.stream
        if st is None:
            return "waiting for words on its stream (nothing is routed to it)"
        k, pos = me.port.k, me.port.taken
        for j, p in enumerate(st.ports):
            if j != k and p.taken + st.lead[j][k] <= pos and st.published() > pos:
                return (
                    f"held back by its broadcast ({st.source}): {p.name} has taken {pos - p.taken} "
                    f"bytes fewer, which fills the {st.lead[j][k]} bytes of FIFOs on its branch (a "
                    f"broadcast moves at the pace of its slowest receiver)"
                )
        if st.published() > pos and st.capacity() <= pos:
            return (
                f"the sender ({st.source}) is held back by back-pressure from "
                f"{st.describe_full()}"
            )
        return "waiting for words on its stream"

    def wait_task(self, agent, task):
        self.task_waiters[id(task)].append(agent)

    def task_done(self, task, t):
        task.done, task.done_t = True, t
        self._wake(self.task_waiters.pop(id(task), []), t)

    def ddr(self, t: float, nbytes: int) -> float:
        """When n bytes reach or leave DDR for a shim channel ready at t: the channels share
        costs.ddr_bytes_per_cycle, first come first served (MODELLED)."""
        rate = self.costs.ddr_bytes_per_cycle
        if not rate:
            return t
        start = max(t, self.ddr_free)
        self.ddr_free = start + nbytes / rate
        return self.ddr_free

    # cascades: a core's put goes to the neighbour its tile's configure_cascade names; the get waits
    def cascade_in(self, tile):
        return self.cascades.setdefault((tile.col, tile.row), collections.deque())

    def cascade_put(self, agent, vec):
        tile = agent.core.tile
        d = self.design.cascade_out.get((tile.col, tile.row))
        if d is None:
            raise SimError(
                f"{agent.name}: put_cascade with no configure_cascade output on its tile"
            )
        dx, dy = {3: (0, -1), 4: (-1, 0), 5: (0, 1), 6: (1, 0)}[d]
        dest = (tile.col + dx, tile.row + dy)
        arr = np.array(vec)
        words = max(1, -(-arr.nbytes // CASCADE_WORD_BYTES))
        queue = self.cascades.setdefault(dest, collections.deque())
        held = sum(w for _, _, w in queue)
        if held and held + words > CASCADE_DEPTH_WORDS:
            # the cascade's FIFOs are full: the put stalls until the neighbour takes a word (a put
            # of more than the depth into an empty cascade passes: its words stream through)
            agent.waiting = (
                f"put_cascade to tile {dest}: stalled by back-pressure, the cascade's FIFOs hold "
                f"{held} of {CASCADE_DEPTH_WORDS} 512-bit words the core of tile {dest} has not taken"
            )
            self.cascade_put_waiters.setdefault(dest, []).append(agent)
            return False
        queue.append((arr, agent.t, words))
        self._wake(self.cascade_waiters.pop(dest, []), agent.t)
        return True

    def cascade_taken(self, tile, t):
        """A get took a word at t: a put that waited for room goes on."""
        self._wake(self.cascade_put_waiters.pop((tile.col, tile.row), []), t)

    def wait_cascade(self, agent, tile):
        self.cascade_waiters.setdefault((tile.col, tile.row), []).append(agent)

    def trace_event(self, agent, kind, t0, t1, what):
        if self.trace is not None:
            self.trace.append((agent.name, kind, t0, t1, what))

    def kernel(self, callee, op):
        fn = self._fns.get(callee)
        if fn is None:
            func = self.design.funcs.get(callee)
            if func is None or self.kernels is None:
                raise DesignError(
                    f"func.call @{callee} (line {op.line}): no kernel to call"
                )
            fn = self._fns[callee] = self.kernels(callee, func)
        return fn

    def view(self, buffer):
        if buffer.tile is None:
            return self.host[buffer.name]
        return buffer.view()

    # running
    def run(self, arrays, sequence: int = 0, max_steps: int = 50_000_000, insts=None):
        """Run the runtime sequence on the host arrays (one per argument, in order); returns them as
        the device left them. Hang when nothing can move; SimError past max_steps (counted per call).
        insts: the sequence's instruction stream (insts.Stream), run instead of the dialect-level ops
        (insts.InstsAgent).

        Called again, it runs the next dispatch on the same array: the cores go on from where they are
        in their loops, the locks, the buffers, the BD chains and the shim BD registers (the previous
        stream's register model, insts.InstsAgent) stay as the last dispatch left them, and the host
        arrays are written again into the same host buffers (XRT writes each buffer object before a
        run: the addresses the stream patches stay those of the same buffers). The arrays returned are
        views of those buffers: copy them before the next call.
        """
        from .design import Buffer

        seq = self.design.sequences[sequence]
        if arrays is None:  # zeros of the arguments' types (a timing run)
            arrays = [np.zeros(shape, dtype) for _, shape, dtype in seq.args]
        if len(arrays) != len(seq.args):
            raise DesignError(
                f"@{seq.name} takes {len(seq.args)} arguments, got {len(arrays)}"
            )
        prior = self.main
        if prior is None:
            self.host, self.args = {}, {}
        for (name, shape, dtype), a in zip(seq.args, arrays):
            raw = np.frombuffer(
                np.ascontiguousarray(a).tobytes(), dtype=np.uint8
            ).copy()
            need = int(np.prod(shape)) * dtype.itemsize
            if raw.size != need:
                raise DesignError(f"argument {name} needs {need} bytes, got {raw.size}")
            if name in self.host:
                # the same buffer object written again, in place (word views of it stay valid)
                self.host[name].view(np.uint8)[:] = raw
            else:
                self.host[name] = raw.view(dtype)
                self.args[name] = Buffer(name, None, 0, shape, dtype)
        if insts is None:
            main = SequenceAgent(self, seq)
        else:
            from .insts import InstsAgent

            main = InstsAgent(
                self, seq, insts, prior=prior if isinstance(prior, InstsAgent) else None
            )
        if prior is not None:
            main.t = prior.t  # the next dispatch starts when the last one returned
        self.main = main
        agents = [main, *self.cores, *self.dma.values()]
        if prior is None:
            for a in agents:
                self.ready(a)
        else:
            # the others go on as the last dispatch left them: ready, or waiting on a lock, a stream,
            # a task
            self.ready(main)
        start = self.steps
        while not main.done:
            if not self._heap:
                raise Hang(self.report(agents), self.steps)
            _, _, agent = heapq.heappop(self._heap)
            self._queued.discard(id(agent))
            self.steps += 1
            if self.steps - start > max_steps:
                raise SimError(
                    f"no end after {max_steps} steps (the time-out): "
                    + "; ".join(self.report(agents)[:4])
                )
            if agent.step():
                self.ready(agent)
        self.end_t = main.t
        self.dispatch_ends.append(main.t)
        return [
            self.host[name].view(a.dtype).reshape(np.shape(a))
            for (name, _, _), a in zip(seq.args, arrays)
        ]

    @staticmethod
    def _in_stream(p) -> int:
        """The bytes on their way to port p: what its sender has pushed (within the FIFOs' bounds) and
        p has not taken."""
        st = p.stream
        if st is None:
            return sum(s.data.size - t for s, t in p.queue)
        return int(min(st.capacity(), st.published()) - p.taken)

    def hazards(self) -> list[str]:
        """After a run: the latent races the lock-ownership rule met (Ownership.access)."""
        own = self.__dict__.get("_ownership")
        return list(own.hazards) if own is not None else []

    def leftovers(self) -> list[str]:
        """After a run: words still on their way to a port or down a cascade, a BD half received, a shim
        task started and not finished. On
        hardware they would meet the next dispatch: a run that leaves any fails (host/run.py --backend
        sim, sim_costs.simulate_compiled, host/sim_check.py)."""
        out = []
        for p in self.ports.values():
            if p.queue:
                out.append(
                    f"{self._in_stream(p)} bytes left in the stream into {p.name}"
                )
        for a in self.dma.values():
            if a.ch.direction == S2MM and a.stage == "move" and a.received:
                out.append(
                    f"{a.name} holds {a.received} bytes of a BD that never completes"
                )
        for a in self.dma.values():
            if a.ch.first is None and (a.task is not None or a.tasks):
                n = len(a.tasks) + (a.task is not None)
                out.append(
                    f"{a.name} has {n} started task(s) not finished (the first: "
                    f"{(a.task or a.tasks[0]).name})"
                )
        for (col, row), queue in self.cascades.items():
            if queue:
                out.append(
                    f"{len(queue)} cascade word(s) sent to tile ({col}, {row}) and never taken"
                )
        return out

    def report(self, agents) -> list[str]:
        lines = []
        later = bool(self.dispatch_ends)  # a dispatch after the first
        for a in agents:
            if isinstance(a, DmaAgent):
                a.refresh()
            if a.done and later and isinstance(a, (CoreAgent, DmaAgent)):
                # what ended on an earlier dispatch stays ended: the stream starts no core, no tile DMA
                lines.append(
                    f"{a.name}: {a.waiting} on an earlier dispatch, and nothing starts it again"
                )
                continue
            if a.done and not isinstance(a, SequenceAgent):
                continue
            if isinstance(a, DmaAgent) and a.waiting.startswith("idle"):
                continue
            lines.append(f"{a.name}: {a.waiting or 'ready'}")
        for p in self.ports.values():
            if p.queue:
                seg, taken = p.queue[0]
                lines.append(
                    f"stream into {p.name}: {self._in_stream(p)} bytes waiting (in its FIFOs), "
                    f"first from {seg.source}"
                )
        return lines
