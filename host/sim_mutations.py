# SPDX-License-Identifier: MIT
"""Broken copies of a compiled design, run by the simulator of the compiled design (emulator/aiesim):
each mutation changes one thing aiecc decided, in a copy of the compiler's output folder (the originals
under build/aircc-runs/ are never written), and the simulator, running the copy from its instruction
stream for two dispatches on one array, must not pass it silently: it hangs with its report, reports a
race (the lock-ownership rule), gives another C on some dispatch, leaves data behind (a failure), breaks a
rule of the instruction stream (a push dropped by a full task queue, a BD rewritten in flight, the host
returning early), or the mutation is harmless for a reason the table states.

Two levels are mutated. The generic-form text of input_physical.mlir: a lock's initial value, a BD's
length, a BD chain, BD ids, a switchbox connection, a buffer's address, a core acquire removed, a release
doubled, a core access moved past its release, an acquire whose release comes only on the next dispatch,
the accumulator zeroed once instead of on every trip, a BD's acquire removed, a task started twice. The
instruction stream (insts_*.bin): C's task cut into four or five tasks pushed before the sync, the sync
moved onto another channel, the wrong task awaited, a BD id reused while its task is in flight.

`python3 host/sim_mutations.py [run1x1|gemv]` prints the table for `make run1x1`'s compiled design and for
the decode GEMV's at a small size (each of its core's acquires removed in turn); docs/verification.md has
both. tests/run/test_sim.py checks every run1x1 row, tests/run/test_sim_mutations_insts.py the
instruction-stream rows and the GEMV's by their messages.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _p in (REPO, os.path.join(REPO, "emulator")):
    if _p not in sys.path:
        sys.path.insert(0, _p)


@dataclasses.dataclass
class Mutation:
    name: str
    mutate: object  # (generic text) -> mutated text
    expect: str  # "hang", "wrong C", ..., or "harmless: <why>"
    # (the bytes of an instruction stream) -> the mutated bytes; None: the compiler's streams as written
    mutate_insts: object = None


def _same(text):
    return text


def _lines(text):
    return text.split("\n")


def _core_tile(lines) -> str:
    """The SSA name of the first compute tile (row >= 2)."""
    for ln in lines:
        m = re.match(
            r'\s*(%\w+) = "aie.tile"\(\) <\{col = \d+ : i32, row = (\d+) : i32\}>', ln
        )
        if m and int(m.group(2)) >= 2:
            return m.group(1)
    raise ValueError("no compute tile")


def lock_init(delta: int, init: int):
    """The first lock of the first compute tile with this initial value, changed by delta."""

    def mutate(text):
        lines = _lines(text)
        tile = _core_tile(lines)
        for i, ln in enumerate(lines):
            if f'"aie.lock"({tile})' in ln and f"init = {init} : i32" in ln:
                lines[i] = ln.replace(
                    f"init = {init} : i32", f"init = {init + delta} : i32"
                )
                return "\n".join(lines)
        raise ValueError(f"no lock with init {init}")

    return mutate


def _mem_bds(lines):
    """(line index, bd_id) of the first compute tile's BDs, in order."""
    tile = _core_tile(lines)
    start = next(i for i, ln in enumerate(lines) if f'"aie.mem"({tile})' in ln)
    out = []
    for i in range(start, len(lines)):
        if lines[i].strip().startswith("})"):
            break
        m = re.search(r'"aie.dma_bd".*<\{bd_id = (\d+) : i32', lines[i])
        if m:
            out.append((i, int(m.group(1))))
    return out


def bd_length(delta: int, nth: int = 1):
    """The nth BD of the first compute tile (0: its output, 1: its first input), its length changed."""

    def mutate(text):
        lines = _lines(text)
        i, _ = _mem_bds(lines)[nth]
        lines[i] = re.sub(
            r"static_len = (\d+)",
            lambda m: f"static_len = {int(m.group(1)) + delta}",
            lines[i],
        )
        return "\n".join(lines)

    return mutate


def next_bd_to(target):
    """The first input chain's second BD chains to `target` (a BD id: "self", or "end" to cut it)."""

    def mutate(text):
        lines = _lines(text)
        bds = _mem_bds(lines)
        i, own = bds[2]
        if target == "end":
            lines[i] = re.sub(r"next_bd_id = \d+ : i32, ", "", lines[i])
            j = next(k for k in range(i, len(lines)) if '"aie.next_bd"' in lines[k])
            lines[j] = re.sub(r'"aie.next_bd"\(\)\[\^\w+\]', '"aie.end"()', lines[j])
        else:
            lines[i] = re.sub(r"next_bd_id = \d+", f"next_bd_id = {own}", lines[i])
        return "\n".join(lines)

    return mutate


def swap_bd_ids(text):
    """The first input chain's two BDs exchange their ids (the next_bd_ids stay)."""
    lines = _lines(text)
    bds = _mem_bds(lines)
    (i, a), (j, b) = bds[1], bds[2]
    lines[i] = lines[i].replace(
        f"bd_id = {a} : i32, next", f"bd_id = {b} : i32, next", 1
    )
    lines[j] = lines[j].replace(
        f"bd_id = {b} : i32, next", f"bd_id = {a} : i32, next", 1
    )
    return "\n".join(lines)


def drop_connect(text):
    """The compute tile's switchbox loses the connection into its DMA channel 0 (its first input)."""
    lines = _lines(text)
    tile = _core_tile(lines)
    start = next(i for i, ln in enumerate(lines) if f'"aie.switchbox"({tile})' in ln)
    for i in range(start, len(lines)):
        if "dest_bundle = 1 : i32, dest_channel = 0 : i32" in lines[i]:
            del lines[i]
            return "\n".join(lines)
    raise ValueError("no connection into DMA 0")


def overlap_buffers(text):
    """The first input's pong buffer moved onto its ping buffer's address."""
    lines = _lines(text)
    tile = _core_tile(lines)
    bufs = [
        (
            i,
            re.search(r"address = (\d+)", ln),
            re.search(r"-> (memref<[^>]*>)", ln).group(1),
        )
        for i, ln in enumerate(lines)
        if f'"aie.buffer"({tile})' in ln
    ]
    by_type = {}
    for i, m, t in bufs:
        by_type.setdefault(t, []).append((i, m))
    (i, a), (j, b) = next(v for v in by_type.values() if len(v) == 2)
    lines[j] = lines[j].replace(b.group(0), f"address = {a.group(1)}")
    return "\n".join(lines)


def _core_body(lines) -> tuple[int, int]:
    """(first, last) line index of the first compute tile's core body."""
    tile = _core_tile(lines)
    start = next(i for i, ln in enumerate(lines) if f'"aie.core"({tile})' in ln)
    end = next(i for i in range(start, len(lines)) if lines[i].strip().startswith("})"))
    return start + 1, end


def _core_lock_lines(lines, action: int) -> list[int]:
    first, last = _core_body(lines)
    return [
        i
        for i in range(first, last)
        if '"aie.use_lock"' in lines[i] and f"action = {action} : i32" in lines[i]
    ]


def core_acquires(text) -> int:
    """How many AcquireGreaterEqual the first compute tile's core body holds."""
    return len(_core_lock_lines(_lines(text), 2))


def drop_core_acquire(k: int):
    """The k-th AcquireGreaterEqual of the first compute tile's core body removed."""

    def mutate(text):
        lines = _lines(text)
        del lines[_core_lock_lines(lines, 2)[k]]
        return "\n".join(lines)

    return mutate


def release_twice(text):
    """The core body's first release written twice."""
    lines = _lines(text)
    i = _core_lock_lines(lines, 1)[0]
    lines.insert(i + 1, lines[i])
    return "\n".join(lines)


def call_after_release(text):
    """The core body's last kernel call (the drain) moved after the release that follows it."""
    lines = _lines(text)
    first, last = _core_body(lines)
    i = max(j for j in range(first, last) if '"func.call"' in lines[j])
    assert '"aie.use_lock"' in lines[i + 1] and "action = 1 : i32" in lines[i + 1]
    lines[i], lines[i + 1] = lines[i + 1], lines[i]
    return "\n".join(lines)


def _blocks(lines, first: int, last: int) -> list[tuple[str, int, int]]:
    """(label, first line, end line) of each block of the core body between first and last (the entry
    block has the label "")."""
    out, label, start = [], "", first
    for i in range(first, last):
        m = re.match(r"\s*(\^bb\d+)", lines[i])
        if m:
            out.append((label, start, i))
            label, start = m.group(1), i
    out.append((label, start, last))
    return out


def zero_once(text):
    """The accumulator's zeroing done once, when the core starts, not on every trip of its loop: the loop's
    back edge goes to a copy of its head block without the zero call (the core's first kernel call). On
    the first dispatch the accumulator is zeroed; on the next it still holds the last drained C.
    """
    lines = _lines(text)
    first, last = _core_body(lines)
    call = next(j for j in range(first, last) if '"func.call"' in lines[j])
    label, b0, b1 = next(b for b in _blocks(lines, first, last) if b[1] <= call < b[2])
    back = max(
        j
        for j in range(first, last)
        if re.search(rf'"cf\.br"\(\)\[\{label}\]', lines[j])
    )
    used = re.findall(r"\^bb(\d+)", "\n".join(lines[first:last]))
    fresh = f"^bb{1 + max(int(x) for x in used)}"
    head = [f"    {fresh}:  // the loop's head without the zero call"] + [
        lines[j] for j in range(b0 + 1, b1) if j != call
    ]
    lines[back] = lines[back].replace(f"[{label}]", f"[{fresh}]")
    lines[last:last] = head
    return "\n".join(lines)


def acquire_next_dispatch(text):
    """The core, before it gives the drained C to its send DMA (the release after the drain call), acquires
    the full lock of the next W chunk (a copy of its loop's first AcquireGreaterEqual): a chunk that comes
    only when the next dispatch streams W, so the release of that lock comes only on the next dispatch.
    """
    lines = _lines(text)
    first, last = _core_body(lines)
    i = max(j for j in range(first, last) if '"func.call"' in lines[j])
    assert '"aie.use_lock"' in lines[i + 1] and "action = 1 : i32" in lines[i + 1]
    inner = _core_lock_lines(lines, 2)[
        1
    ]  # the first acquire inside the K loop (W's full lock)
    lines.insert(i + 1, lines[inner])
    return "\n".join(lines)


def drop_bd_acquire(text):
    """The first input ring's first BD (in the compute tile's DMA) loses its acquire."""
    lines = _lines(text)
    i, _ = _mem_bds(lines)[1]
    assert '"aie.use_lock"' in lines[i - 1] and "action = 2 : i32" in lines[i - 1]
    del lines[i - 1]
    return "\n".join(lines)


def start_twice(text):
    """The runtime sequence starts the task that sends its first argument (A) twice: the second copy
    goes where the first went and nothing consumes all of it before the sequence ends.
    """
    lines = _lines(text)
    task = None
    for i, ln in enumerate(lines):
        m = re.match(r'\s*(%\w+) = "aiex.dma_configure_task_for"', ln)
        if m and '"aie.dma_bd"(%arg0)' in lines[i + 1]:
            task = m.group(1)
        if task and f'"aiex.dma_start_task"({task})' in ln:
            lines.insert(i + 1, ln)
            return "\n".join(lines)
    raise ValueError("no task sending %arg0")


def start_twice_insts(data: bytes) -> bytes:
    """The same in an instruction stream: the task-queue write of shim MM2S 0 (A's channel in run1x1)
    written twice."""
    from aiesim import insts

    stream = insts.decode(data)
    for i, ins in enumerate(stream.instrs):
        if ins.name == "write32":
            col, row, off = insts.split(ins.address)
            name = insts.register_name(col, row, off) or ""
            if re.fullmatch(r"DMA_MM2S_0_\w*Queue", name):
                stream.instrs.insert(i + 1, ins)
                return insts.encode(stream.header, stream.instrs)
    raise ValueError("no start-queue write of MM2S 0")


# -- mutations of the instruction stream (emulator/aiesim/insts.py: the register model, the 4-deep task
# queues, the syncs) ----------------------------------------------------------------------------------------


def _stream_parts(data: bytes):
    """(stream, the ops that set up and start the task the sync waits for, the index of the sync): the
    awaited task is the one whose start-queue write sets Enable_Token_Issue; its ops are the blockwrite of
    its BD, that BD's address patch, its channel's controller maskwrite (if any) and the start-queue write.
    """
    from aiesim import insts

    stream = insts.decode(data)
    ops = stream.instrs
    syncs = [i for i, x in enumerate(ops) if x.op == insts.TCT]
    if len(syncs) != 1:
        raise ValueError(f"{len(syncs)} syncs: the mutations take a stream with one")
    push = next(
        i
        for i, x in enumerate(ops)
        if x.op == insts.WRITE
        and "Queue" in (insts.register_name(*insts.split(x.address)) or "")
        and insts.field(x.words[4], 31, 31)
    )
    bd = insts.field(ops[push].words[4], 3, 0)
    col, row, _ = insts.split(ops[push].address)
    base = (
        col << insts.COL_SHIFT | row << insts.ROW_SHIFT | insts.SHIM_BD_BASE + 0x20 * bd
    )
    write = next(
        i for i, x in enumerate(ops) if x.op == insts.BLOCKWRITE and x.address == base
    )
    patch = next(
        i
        for i, x in enumerate(ops)
        if x.op == insts.DDR_PATCH and x.address == base + 4
    )
    return stream, (write, patch, push), syncs[0]


def _op(words):
    from aiesim import insts

    return insts.Instr(0, words[0] & 0xFF, tuple(words))


def _pieces(data: bytes, count: int, ids) -> list:
    """The awaited task's BD (linear, one dimension) cut into `count` consecutive pieces on the BD ids
    `ids`, each piece's (blockwrite, address patch) ops and its start-queue word (the last piece's issuing
    the token)."""
    from aiesim import insts

    stream, (write, patch, push), _ = _stream_parts(data)
    ops = stream.instrs
    words = list(ops[write].words[4:])
    if insts.field(words[3], 29, 20):
        raise ValueError("the awaited task's BD is not linear")
    length, arg, plus = words[0], ops[patch].words[8], ops[patch].words[10]
    sizes = [length // count + (k < length % count) for k in range(count)]
    col, row, _ = insts.split(ops[push].address)
    tile = col << insts.COL_SHIFT | row << insts.ROW_SHIFT
    out, start = [], 0
    for k, (n, bd) in enumerate(zip(sizes, ids)):
        address = tile | insts.SHIM_BD_BASE + 0x20 * bd
        w = list(words)
        w[0] = n
        # an address patch: host argument `arg`, this piece's bytes further on
        patch_words = [insts.DDR_PATCH, 48, 0, 0, 0, 0, address + 4, 0, arg, 0]
        setup = [
            _op([insts.BLOCKWRITE, 0, address, 16 + 4 * len(w), *w]),
            _op([*patch_words, plus + 4 * start, 0]),
        ]
        token = 1 << 31 if k == count - 1 else 0
        queue = ops[push].words[4] & ~((1 << 31) | 0xF) | token | bd
        out.append((setup, _op([insts.WRITE, 0, ops[push].address, 0, queue, 24])))
        start += n
    return out


def _free_bd_ids(data: bytes, count: int) -> list[int]:
    """The awaited task's own BD id, then the ids of its tile no op of the stream writes."""
    from aiesim import insts

    stream, (write, _, push), _ = _stream_parts(data)
    col, row, _ = insts.split(stream.instrs[push].address)
    own = insts.field(stream.instrs[push].words[4], 3, 0)
    used = {
        (off - insts.SHIM_BD_BASE) // 0x20
        for x in stream.instrs
        if x.op != insts.TCT
        for c, r, off in [insts.split(x.address)]
        if (c, r) == (col, row)
        and insts.SHIM_BD_BASE <= off < insts.SHIM_BD_BASE + 0x200
    }
    free = [b for b in range(insts.SHIM_BD_COUNT) if b not in used]
    return [own, *free[: count - 1]]


def tasks_before_sync(count: int):
    """The awaited task (run1x1: C's, shim S2MM 0) cut into `count` tasks on as many BD ids, all pushed
    onto its channel before the sync, the last issuing the token the sync waits for: five is one more
    than the channel's task queue holds, four its depth."""

    def mutate(data: bytes) -> bytes:
        from aiesim import insts

        stream, (write, patch, push), _ = _stream_parts(data)
        ops = stream.instrs
        pieces = _pieces(data, count, _free_bd_ids(data, count))
        setup = [x for s, _ in pieces for x in s]
        pushes = [p for _, p in pieces]
        keep = [
            x for i, x in enumerate(ops[write:push]) if write + i not in (write, patch)
        ]
        new = ops[:write] + setup + keep + pushes + ops[push + 1 :]
        return insts.encode(stream.header, new)

    return mutate


def bd_reused_insts(data: bytes) -> bytes:
    """The awaited task cut in two tasks on the same BD id, the second written into the BD (and patched)
    right after the first was pushed, while the first still runs on it: what a runtime sequence that
    freed a BD with `dma_free_task` and configured the next task on the same id would give.
    """
    from aiesim import insts

    stream, (write, patch, push), _ = _stream_parts(data)
    ops = stream.instrs
    own = insts.field(ops[push].words[4], 3, 0)
    (setup1, push1), (setup2, push2) = _pieces(data, 2, [own, own])
    keep = [x for i, x in enumerate(ops[write:push]) if write + i not in (write, patch)]
    new = ops[:write] + setup1 + keep + [push1] + setup2 + [push2] + ops[push + 1 :]
    return insts.encode(stream.header, new)


def _other_channel_push(stream, push: int) -> int:
    """The first start-queue write, on the awaited task's tile, of a channel other than its own."""
    from aiesim import insts

    col, row, off = insts.split(stream.instrs[push].address)
    return next(
        i
        for i, x in enumerate(stream.instrs)
        if x.op == insts.WRITE
        and insts.split(x.address)[:2] == (col, row)
        and insts.split(x.address)[2] != off
        and "Queue" in (insts.register_name(*insts.split(x.address)) or "")
    )


def _sync_on(stream, sync: int, other) -> object:
    """The sync moved onto the channel of the start-queue write `other`."""
    from aiesim import insts

    col, row, off = insts.split(other.address)
    _, _, direction, channel = insts.SHIM_CHANNEL_REGS[off]
    w = list(stream.instrs[sync].words)
    w[2] = direction | row << 8 | col << 16
    w[3] = w[3] & 0x00FFFFFF | channel << 24
    return insts.Instr(stream.instrs[sync].offset, insts.TCT, tuple(w))


def sync_wrong_channel_insts(data: bytes) -> bytes:
    """The sync moved from the awaited task's channel onto another channel of the same shim (run1x1: from
    S2MM 0, C's, onto MM2S 0, A's), whose tasks issue no token."""
    from aiesim import insts

    stream, (_, _, push), sync = _stream_parts(data)
    ops = list(stream.instrs)
    ops[sync] = _sync_on(stream, sync, ops[_other_channel_push(stream, push)])
    return insts.encode(stream.header, ops)


def await_wrong_task_insts(data: bytes) -> bytes:
    """The runtime sequence awaits the wrong task: the other channel's task (run1x1: A's, MM2S 0) issues a
    token and the sync waits on that channel (as `dma_await_task` of A's task lowers), not on C's.
    """
    from aiesim import insts

    stream, (_, _, push), sync = _stream_parts(data)
    ops = list(stream.instrs)
    k = _other_channel_push(stream, push)
    w = list(ops[k].words)
    w[4] |= 1 << 31
    ops[k] = insts.Instr(ops[k].offset, insts.WRITE, tuple(w))
    ops[sync] = _sync_on(stream, sync, ops[k])
    return insts.encode(stream.header, ops)


def mutated_folder(outdir: str, dest: str, text: str, mutate, mutate_insts) -> str:
    """A copy of a compiler output folder with its design mutated at both levels the simulator reads:
    input_physical.mlir (generic form) and each runtime sequence's instruction stream.
    """
    os.makedirs(dest, exist_ok=True)
    with open(os.path.join(dest, "input_physical.mlir"), "w") as f:
        f.write(mutate(text))
    for name in os.listdir(outdir):
        if name.startswith("insts") and name.endswith(".bin"):
            with open(os.path.join(outdir, name), "rb") as f:
                data = f.read()
            with open(os.path.join(dest, name), "wb") as f:
                f.write(mutate_insts(data))
    return dest


MUTATIONS = [
    Mutation(
        "a lock's initial value +1 (2 -> 3: an input ring's free slots)",
        lock_init(+1, 2),
        "wrong C",
    ),
    Mutation(
        "a lock's initial value -1 (2 -> 1: an input ring's free slots)",
        lock_init(-1, 2),
        "harmless: the ping-pong pair runs one buffer at a time (the DMA waits for the core's release "
        "before each fill); the same data arrive in the same order, later",
    ),
    Mutation(
        "a lock's initial value -1 (1 -> 0: the accumulator's)",
        lock_init(-1, 1),
        "hang",
    ),
    Mutation(
        "a BD's length -1 (the first input's)",
        bd_length(-1),
        "wrong C: the A blocks land two bytes further on each pair, and the channel ends the run "
        "holding part of a BD",
    ),
    Mutation(
        "a BD's length +1 (the first input's)",
        bd_length(+1),
        "race: the BD's last element lies in the next buffer (buf1), which the other input's lock pair "
        "guards (the lock-ownership rule; without it, refused: the BD writes past its buffer)",
    ),
    Mutation(
        "a next_bd cut (the input ring ends after one pass)", next_bd_to("end"), "hang"
    ),
    Mutation(
        "a next_bd pointed elsewhere (the pong BD chains to itself)",
        next_bd_to("self"),
        "wrong C",
    ),
    Mutation(
        "two BD ids swapped (the input ring's ping and pong)", swap_bd_ids, "wrong C"
    ),
    Mutation(
        "a switchbox connection removed (into the core's input DMA)",
        drop_connect,
        "hang",
    ),
    Mutation(
        "a buffer's address moved onto another's (the input's pong onto its ping)",
        overlap_buffers,
        "wrong C",
    ),
    *[
        Mutation(
            f"the core's AcquireGreaterEqual number {k + 1} removed",
            drop_core_acquire(k),
            "race: the core touches a buffer whose lock it does not hold (the lock-ownership rule)",
        )
        for k in range(5)  # run1x1's core body holds five (checked by the test)
    ],
    Mutation(
        "a lock released twice (the core's first release)",
        release_twice,
        "race: the second release gives back a lock the core no longer holds (the ownership rule; the "
        "lock's value stays far below 63)",
    ),
    Mutation(
        "a core access moved outside its acquire/release pair (the drain after its release)",
        call_after_release,
        "race: the drain call touches the accumulator after the core gave its lock to the C DMA",
    ),
    Mutation(
        "a BD's acquire removed (the first input ring's ping)",
        drop_bd_acquire,
        "race: the S2MM BD writes its buffer holding no lock that guards it",
    ),
    Mutation(
        "an acquire whose release comes only on the next dispatch (the core acquires the next W "
        "chunk's full lock, lock 2, before it releases the drained C)",
        acquire_next_dispatch,
        "hang: on the first dispatch the core waits at that acquire for a chunk only the next dispatch "
        "streams, the C send waits for the core's release, and the host's wait for C never returns",
    ),
    Mutation(
        "the accumulator's zeroing done once, when the core starts, not on every trip of its loop",
        zero_once,
        "wrong C on dispatch 2: the first dispatch is right; the second accumulates onto the C the first "
        "drained (the state a dispatch leaves behind, caught only by running a second)",
    ),
    Mutation(
        "the runtime sequence starts A's task twice",
        start_twice,
        "left behind: the same C, but the second copy of A is still on its way (its task unfinished) "
        "when the sequence ends: on hardware it would meet the next dispatch",
        start_twice_insts,
    ),
    # the instruction stream (insts_*.bin), the design as compiled
    Mutation(
        "four tasks pushed onto one channel before a sync (C's task cut into four on four BD ids, all "
        "pushed onto shim S2MM 0, the fourth issuing the token)",
        _same,
        "harmless: four tasks are the task queue's depth; the same C arrives in four pieces",
        tasks_before_sync(4),
    ),
    Mutation(
        "five tasks pushed onto one channel before a sync (C's task cut into five on five BD ids, all "
        "pushed onto shim S2MM 0, the fifth issuing the token)",
        _same,
        "dropped: the fifth push finds the 4-deep task queue full and is dropped, named with its byte "
        "offset; the sync then waits for the token only the dropped task would have issued (a hang whose "
        "report carries the drop)",
        tasks_before_sync(5),
    ),
    Mutation(
        "a sync on the wrong channel (moved from C's S2MM 0 onto A's MM2S 0, whose tasks issue no token)",
        _same,
        "hang: the host waits for ever: the sync, named by its byte offset, waits for a token no task "
        "queued there issues",
        sync_wrong_channel_insts,
    ),
    Mutation(
        "the wrong task awaited (A's task issues a token and the sync waits on A's MM2S 0, not C's S2MM 0)",
        _same,
        "early return: the token comes once A is sent and the stream ends while C's task still writes "
        "host memory: the host would read C too soon",
        await_wrong_task_insts,
    ),
    Mutation(
        "a BD id reused while a task using it is in flight (C's task cut in two on BD 0, the second "
        "written into BD 0 right after the first was pushed)",
        _same,
        "BD in flight: the blockwrite into the BD, named by its byte offset, while the task pushed before "
        "it still runs on that BD",
        bd_reused_insts,
    ),
]


# the dispatches each mutation runs on one array (aiesim.simulate): a design right on its first dispatch
# and wrong on its second must not pass
DISPATCHES = 2


# the instruction stream's rules (emulator/aiesim/insts.py) as an outcome names them: (words of the
# simulator's message, the outcome's first word)
STREAM_RULES = [
    ("the hardware drops it", "dropped"),
    ("is still in flight", "BD in flight"),
    ("would read its output too soon", "early return"),
]


def _stream_rule(message: str) -> str | None:
    for words, name in STREAM_RULES:
        if words in message:
            return name
    return None


def outcome(
    text: str,
    arrays,
    output: int,
    baseline,
    seed=None,
    dispatches: int = DISPATCHES,
    insts: str | None = None,
) -> str:
    """What the simulator makes of a (mutated) design run `dispatches` times on one array: "hang: <first
    lines>" (naming the dispatch), "race: <who, where>" (the lock-ownership rule), "wrong C: ..." (or
    "wrong C on dispatch k of n (the first right): ..."), "left behind: <what>" (the same C, but words in a
    stream or a BD half received at the end: a failure), "same C", "refused: <why>", or, for a rule of the
    instruction stream, "dropped: <the push>" (a push onto a full task queue; the hang that follows, if
    any, after it), "BD in flight: <the write>" or "early return: <the task still writing>".

    insts: a folder of instruction streams (`insts_<device>_<sequence>.bin`) to run the runtime sequence
    from, as the device runs it; None, its dialect-level ops in `text`.
    """
    import aiesim
    import numpy as np

    try:
        _, sim = aiesim.simulate(
            text,
            [a.copy() for a in arrays],
            seed=seed,
            dispatches=dispatches,
            insts=insts,
        )
    except aiesim.Hang as h:
        named = h.report[0].startswith("on dispatch")  # a dispatch after the first
        lines = [x.split(" [dropped: ")[0] for x in h.report[: 4 if named else 3]]
        hang = "hang: " + " | ".join(lines)
        dropped = [x for x in h.report if " [dropped: " in x]
        if dropped:  # the push the hardware dropped, the cause of the hang
            drop = dropped[0].split(" [dropped: ", 1)[1]
            return f"dropped: {drop[:-1]}; then {hang}"
        return hang
    except aiesim.Race as e:
        return str(e)
    except (aiesim.SimError, aiesim.DesignError) as e:
        rule = _stream_rule(str(e))
        return f"{rule}: {e}" if rule else f"refused: {e}"
    want = np.asarray(baseline).view(np.uint8).reshape(-1)
    left = aiesim.leftovers(sim)
    more = f"; {left[0]}" if left else ""
    for k, outs in enumerate(sim.dispatch_outputs, 1):
        got = np.asarray(outs[output]).view(np.uint8).reshape(-1)
        if not np.array_equal(got, want):
            where = (
                f" on dispatch {k} of {dispatches} (the first right)" if k > 1 else ""
            )
            return f"wrong C{where}: {int((got != want).sum())} of {want.size} bytes differ{more}"
    return f"left behind: {left[0]}" if left else "same C"


def run1x1_case(folder: bool = False):
    """(generic text, inputs, output index) of `make run1x1` as aircc + aiecc compile it (and the
    compiler's output folder, with folder=True)."""
    import matmul_int4_packed as builder
    from host import aircc_check
    from host.run import build_host_kernel
    from int4awq.design import compiler
    from int4awq.formats.quant import random_activations, random_weights
    from int4awq.kernel import record

    cfg = aircc_check.make_target_config("run1x1")
    os.environ["AIR_EMU_LIB_PATH"] = build_host_kernel(cfg)
    _, outdir = compiler.compile_first(
        cfg.name,
        str(builder.build_module(**cfg.builder_args())),
        builder.backend_options(cfg),
        os.path.join(REPO, "build", "aircc-runs"),
    )
    text = compiler.generic_form(os.path.join(outdir, "input_physical.mlir"))
    w = random_weights(cfg.k, cfg.n, cfg.gs, seed=1)
    a_p, w_p = record.padded_operands(cfg, random_activations(cfg.m, cfg.k, 2), w)
    case = text, cfg.call_buffers(a_p, w_p), 2
    return (*case, outdir) if folder else case


def gemv_case(folder: bool = False):
    """(generic text, inputs, output index) of `make run_llama_decode`'s design (the GEMV's default
    configuration, as host/sim_check.py compiles it) at a small size, M 1, K 1024, N 512: 32 cores of 16
    columns each, two K chunks ping-ponged (and the compiler's output folder, with folder=True).
    """
    import matvec_int4_packed as builder
    from host.run import build_host_kernel
    from int4awq.design import compiler, gemv
    from int4awq.formats.quant import random_activations
    from int4awq.formats.weights_file import random_format_weights
    from int4awq.kernel import record

    cfg = gemv.default_config(1, GEMV_K, GEMV_N, 128, "awq")
    os.environ["AIR_EMU_LIB_PATH"] = build_host_kernel(cfg)
    _, outdir = compiler.compile_first(
        f"make run_llama_decode at K {GEMV_K}, N {GEMV_N}",
        str(builder.build_module(**cfg.builder_args())),
        builder.backend_options(cfg),
        os.path.join(REPO, "build", "aircc-runs"),
    )
    text = compiler.generic_form(os.path.join(outdir, "input_physical.mlir"))
    w = random_format_weights(cfg.format, cfg.k, cfg.n, cfg.gs, seed=1)
    a_p, w_p = record.padded_operands(cfg, random_activations(cfg.m, cfg.k, 2), w)
    case = text, cfg.call_buffers(a_p, w_p), 2
    return (*case, outdir) if folder else case


GEMV_K, GEMV_N = 1024, 512
# the GEMV's first core body holds this many AcquireGreaterEqual (the output chunk's free lock, then the
# activation chunk's and the weight chunk's full locks, ping and pong; checked by the test)
GEMV_CORE_ACQUIRES = 5

GEMV_MUTATIONS = [
    Mutation(
        f"the GEMV core's AcquireGreaterEqual number {k + 1} removed",
        drop_core_acquire(k),
        "race: the core touches a buffer whose lock it does not hold (the lock-ownership rule)",
    )
    for k in range(GEMV_CORE_ACQUIRES)
]

CASES = {"run1x1": (run1x1_case, MUTATIONS), "gemv": (gemv_case, GEMV_MUTATIONS)}


def table(case: str = "run1x1", only=None) -> list[tuple[str, str, str]]:
    """(mutation, what it should give, what the simulator gives) of each mutation of `case`'s compiled
    design ("run1x1" or "gemv"), each run from its instruction stream (mutated or as the compiler wrote
    it) in a copy of the compiler's output folder; only: the rows whose name starts with one of these.
    """
    import tempfile

    import aiesim

    build, mutations = CASES[case]
    text, arrays, out, outdir = build(folder=True)
    baseline = aiesim.simulate(text, [a.copy() for a in arrays], insts=outdir)[0][out]
    rows = []
    with tempfile.TemporaryDirectory(prefix="sim-mutation-") as tmp:
        for k, m in enumerate(mutations):
            if only is not None and not m.name.startswith(tuple(only)):
                continue
            folder = mutated_folder(
                outdir,
                os.path.join(tmp, str(k)),
                text,
                m.mutate,
                m.mutate_insts or (lambda data: data),
            )
            with open(os.path.join(folder, "input_physical.mlir")) as f:
                mutated = f.read()
            rows.append(
                (
                    m.name,
                    m.expect,
                    outcome(mutated, arrays, out, baseline, insts=folder),
                )
            )
    return rows


if __name__ == "__main__":
    cases = sys.argv[1:] or list(CASES)
    bad = [c for c in cases if c not in CASES]
    if bad:  # bad input: one line, exit 2
        print(
            f"sim_mutations: {bad[0]!r}: give the designs to mutate, of {', '.join(CASES)}",
            file=sys.stderr,
        )
        sys.exit(2)
    for which in cases:
        for name, expect, got in table(which):
            print(f"| {name} | {got} | {expect} |")
