# SPDX-License-Identifier: MIT
"""The runtime sequence as the device runs it: the NPU instruction binary aiecc writes for each runtime
sequence (`insts_<device>_<sequence>.bin`), decoded word by word and executed against a register model of
the shim tiles' DMAs.

Where each part comes from:

* **The encoding** (what words an instruction is made of) is mlir-aie's `lib/Targets/AIETargetNPU.cpp`
  (the functions that append a sync, a write32, a maskwrite, an address patch and a blockwrite, and
  `AIETranslateNpuToBinary` for the header), read through the search index, and cross-checked here by
  decoding every `insts_*.bin` the compiler of this checkout wrote (the words decode completely: each op's
  own size field matches its opcode's layout, the op count and the byte count of the header match):

  - header, 4 words: major | minor << 8 | device generation << 16 | rows << 24 (0, 1, 4 for NPU2, 6);
    columns | memtile rows << 8 (8, 1); the number of ops; the stream's size in bytes.
  - write32 (opcode 0), 6 words: opcode, 0, absolute address, 0, value, 24.
  - blockwrite (1), 4 + n words: opcode, column | row << 8 (or 0), absolute address of the first word,
    size in bytes (16 + 4n), then the n words written to consecutive registers.
  - maskwrite (3), 7 words: opcode, 0, address, 0, value, mask, 28 (the register becomes
    (old & ~mask) | (value & mask)).
  - sync, the task-completion-token wait (XAIE_IO_CUSTOM_OP_TCT, 0x80), 4 words: opcode, 16,
    direction | row << 8 | column << 16, row count << 8 | column count << 16 | channel << 24.
  - address patch (XAIE_IO_CUSTOM_OP_DDR_PATCH, 0x81), 12 words: opcode, 48, 0, 0, 0, action 0, the
    register's address, 0, the host argument's index, 0, the byte offset added to its address, 0. For
    a host argument past the first 5 the offset carries the AIE's DDR aperture, 0x80000000: the firmware
    translates only the first 5 arguments' addresses (aie-translate `--aie-npu-fold-ddr-addr-offset`,
    default on; mlir-aie's test `npu_address_patch_ddr_offset.mlir`). A patch of such an argument
    without it is an error.
  - load_pdi (8), 4 words: opcode | pdi id << 16, size, address low, high: in the main stream of a module
    of several launches, before each launch's own ops.

  Absolute addresses are column << 25 | row << 20 | the register's offset in its tile (mlir-aie's NPU2
  target model: getColumnShift 25, getRowShift 20).
* **The registers** are the register database that ships with the compiler here
  (`lib/regdb/aie_registers_aie2.json` beside the unpacked aiecc; its header says AM025 2024-11-13, the
  AIE-ML register reference; mlir-aie's AIETargetNPU.cpp names the registers of an NPU2 stream from this
  same database, `RegisterDatabase::loadAIE2`). The offsets and bit fields used are copied into
  `SHIM_BD_FIELDS` / `MEMTILE_BD_FIELDS` / `QUEUE_FIELDS` below (a test compares them with the JSON when
  the compiler is installed). That the AIE2P shim DMA has this layout is confirmed by the streams aiecc
  writes for NPU2: every shim BD decodes to the lengths, strides and iteration of the dialect-level BD it
  was lowered from (tests/run/test_sim_insts.py runs both and compares the outputs bit for bit).
* **The task queue** per channel holds 4 tasks: a start-queue write onto a full queue is dropped by the
  hardware (mlir-aie `include/aie/Dialect/AIEX/Utils/DmaQueueModel.h`, the overflow warning; the depth
  from the same header's queue-space poll, "for depth 4, bit 22 of Task_Queue_Size", and the regdb's
  3-bit Task_Queue_Size field). Every push occupies a slot until its task completes, whatever its repeat
  count (DmaQueueModel::push). The task that is running counts: DmaQueueModel retires a push only once a
  token proves it drained (how the simulator decided where the source is silent: the conservative reading).
* **A sync** waits for one task-completion token of its (column, row, direction, channel), whichever
  task issued it, not a named task (DmaQueueModel::awaitToken: "pops whichever token the channel produces
  first"; mlir-aie lowers `dma_await_task` to `npu.sync` on the task's channel). A task issues a token
  when its start-queue write set Enable_Token_Issue. A sync over several tiles (row or column count not
  1) is refused: DmaQueueModel notes nothing in mlir-aie settles its meaning.
* **A BD id is a register**: a task reads the BD's registers when it runs, so a write into a BD that a
  queued or running task uses is reported (the simulator's rule, decided from what a BD is: no instruction
  of the runtime sequence reserves or frees a BD id, so nothing on the device stops a later write).
* **Ordering.** The simulator runs agents in time order and orders equal times arbitrarily; before it
  decides that a queue is full, a BD is in flight or the stream ended early, it lets every other agent due
  at or before the sequence's time act first, and a task counts as finished only if it finished by the
  sequence's time (its last sync's).
"""

from __future__ import annotations

import dataclasses
import os
import struct

import numpy as np

from .design import BD, MM2S, S2MM, Buffer, DesignError, Task
from .engine import Agent, SimError

# opcodes (aie-rt's XAie_TxnOpcode, as AIETargetNPU.cpp copies it)
WRITE, BLOCKWRITE, MASKWRITE, LOAD_PDI, TCT, DDR_PATCH = 0, 1, 3, 8, 0x80, 0x81
# known opcodes the compiler can emit but this simulator does not run
OTHER_OPCODES = {
    2: "blockset",
    4: "maskpoll",
    5: "noop",
    6: "preempt",
    7: "maskpoll_busy",
    9: "load_pm_start",
    10: "create_scratchpad",
    11: "update_state_table",
    12: "update_reg",
    13: "update_scratch",
    0x82: "read_regs",
    0x83: "record_timer",
    0x84: "merge_sync",
}
FIXED_WORDS = {WRITE: 6, MASKWRITE: 7, TCT: 4, DDR_PATCH: 12, LOAD_PDI: 4}
COL_SHIFT, ROW_SHIFT = 25, 20  # NPU2 target model
NPU2 = {
    "major": 0,
    "minor": 1,
    "generation": 4,
    "rows": 6,
    "columns": 8,
    "memtile_rows": 1,
}
QUEUE_DEPTH = 4
# host arguments whose addresses the NPU firmware translates itself; a patch of a later one carries the
# AIE's DDR aperture offset in arg_plus (mlir-aie test/Targets/NPU npu_address_patch_ddr_offset.mlir and
# aie-translate's --aie-npu-fold-ddr-addr-offset, default true)
FIRMWARE_TRANSLATED_ARGS, DDR_APERTURE = 5, 0x80000000

# -- the registers (lib/regdb/aie_registers_aie2.json, modules "shim" and "memory_tile") ----------------

SHIM_BD_BASE, SHIM_BD_COUNT, SHIM_BD_WORDS = 0x1D000, 16, 8
MEMTILE_BD_BASE, MEMTILE_BD_COUNT, MEMTILE_BD_WORDS = 0xA0000, 48, 8
# (word, field, high bit, low bit)
SHIM_BD_FIELDS = [
    (0, "Buffer_Length", 31, 0),
    (1, "Base_Address_Low", 31, 2),
    (2, "Enable_Packet", 30, 30),
    (2, "Out_Of_Order_BD_ID", 29, 24),
    (2, "Packet_ID", 23, 19),
    (2, "Packet_Type", 18, 16),
    (2, "Base_Address_High", 15, 0),
    (3, "Secure_Access", 30, 30),
    (3, "D0_Wrap", 29, 20),
    (3, "D0_Stepsize", 19, 0),
    (4, "Burst_Length", 31, 30),
    (4, "D1_Wrap", 29, 20),
    (4, "D1_Stepsize", 19, 0),
    (5, "SMID", 31, 28),
    (5, "AxCache", 27, 24),
    (5, "AxQoS", 23, 20),
    (5, "D2_Stepsize", 19, 0),
    (6, "Iteration_Current", 31, 26),
    (6, "Iteration_Wrap", 25, 20),
    (6, "Iteration_Stepsize", 19, 0),
    (7, "TLAST_Suppress", 31, 31),
    (7, "Next_BD", 30, 27),
    (7, "Use_Next_BD", 26, 26),
    (7, "Valid_BD", 25, 25),
    (7, "Lock_Rel_Value", 24, 18),
    (7, "Lock_Rel_ID", 16, 13),
    (7, "Lock_Acq_Enable", 12, 12),
    (7, "Lock_Acq_Value", 11, 5),
    (7, "Lock_Acq_ID", 3, 0),
]
MEMTILE_BD_FIELDS = [
    (0, "Buffer_Length", 16, 0),
    (1, "Next_BD", 25, 20),
    (1, "Use_Next_BD", 19, 19),
    (1, "Base_Address", 18, 0),
    (7, "Valid_BD", 31, 31),
]
# the start queue of a channel (shim: DMA_<dir>_<ch>_Task_Queue; memtile: DMA_<dir>_<ch>_Start_Queue)
QUEUE_FIELDS = [
    ("Enable_Token_Issue", 31, 31),
    ("Repeat_Count", 23, 16),
    ("Start_BD_ID", 3, 0),
]
# (offset) -> (register name, kind, direction, channel)
SHIM_CHANNEL_REGS = {
    0x1D200: ("DMA_S2MM_0_Ctrl", "ctrl", S2MM, 0),
    0x1D204: ("DMA_S2MM_0_Task_Queue", "queue", S2MM, 0),
    0x1D208: ("DMA_S2MM_1_Ctrl", "ctrl", S2MM, 1),
    0x1D20C: ("DMA_S2MM_1_Task_Queue", "queue", S2MM, 1),
    0x1D210: ("DMA_MM2S_0_Ctrl", "ctrl", MM2S, 0),
    0x1D214: ("DMA_MM2S_0_Task_Queue", "queue", MM2S, 0),
    0x1D218: ("DMA_MM2S_1_Ctrl", "ctrl", MM2S, 1),
    0x1D21C: ("DMA_MM2S_1_Task_Queue", "queue", MM2S, 1),
}
MEMTILE_CHANNEL_REGS = {
    0xA0600
    + 8 * c
    + 0x30 * d
    + q
    * 4: (
        f"DMA_{'MM2S' if d else 'S2MM'}_{c}_{'Start_Queue' if q else 'Ctrl'}",
        "queue" if q else "ctrl",
        MM2S if d else S2MM,
        c,
    )
    for d in (0, 1)
    for c in range(6)
    for q in (0, 1)
}


def field(word: int, hi: int, lo: int) -> int:
    return (word >> lo) & ((1 << (hi - lo + 1)) - 1)


_SHIM_FIELD = {name: (w, hi, lo) for w, name, hi, lo in SHIM_BD_FIELDS}


class InstsError(SimError):
    """An instruction stream the simulator cannot run as given: truncated, an unknown opcode, a write
    outside the registers it knows, a stream for another device. The message names the byte offset of
    the word."""


@dataclasses.dataclass
class Instr:
    offset: int  # byte offset of its first word in the stream
    op: int
    words: tuple  # all its words

    @property
    def name(self) -> str:
        return {
            WRITE: "write32",
            BLOCKWRITE: "blockwrite",
            MASKWRITE: "maskwrite",
            TCT: "sync",
            DDR_PATCH: "address_patch",
            LOAD_PDI: "load_pdi",
        }.get(self.op, OTHER_OPCODES.get(self.op, f"opcode {self.op}"))

    @property
    def address(self) -> int:
        return self.words[6] if self.op == DDR_PATCH else self.words[2]


@dataclasses.dataclass
class Stream:
    path: str
    header: dict
    instrs: list


def decode(data: bytes, path: str = "the instruction stream") -> Stream:
    """The instructions of a stream, each with its byte offset. InstsError, naming the offset, on a
    stream that is truncated, whose header does not add up, or that holds an unknown opcode.
    """
    if len(data) < 16:
        raise InstsError(
            f"{path}: truncated at byte {len(data)}: a stream starts with a 16-byte header"
        )
    if len(data) % 4:
        raise InstsError(
            f"{path}: truncated word at byte offset {len(data) - len(data) % 4}: the stream is "
            f"{len(data)} bytes, not whole 32-bit words"
        )
    w = struct.unpack(f"<{len(data) // 4}I", data)
    header = {
        "major": w[0] & 0xFF,
        "minor": (w[0] >> 8) & 0xFF,
        "generation": (w[0] >> 16) & 0xFF,
        "rows": w[0] >> 24,
        "columns": w[1] & 0xFF,
        "memtile_rows": (w[1] >> 8) & 0xFF,
        "count": w[2],
        "size": w[3],
    }
    if header["size"] != len(data):
        raise InstsError(
            f"{path}: the header (byte offset 12) gives {header['size']} bytes, the stream has "
            f"{len(data)}: truncated or padded"
        )
    instrs, i, n = [], 4, len(w)
    while i < n:
        at = 4 * i
        op = w[i] & 0xFF
        if op == BLOCKWRITE:
            if i + 4 > n:
                raise InstsError(
                    f"{path}: blockwrite at byte offset {at} truncated: its header needs 4 words"
                )
            size = w[i + 3]
            if size < 16 or size % 4:
                raise InstsError(
                    f"{path}: blockwrite at byte offset {at} gives a size of {size} bytes (byte offset "
                    f"{at + 12}): not 16 plus whole words"
                )
            count = size // 4
        elif op == LOAD_PDI:
            count = 4
        elif op in FIXED_WORDS:
            count = FIXED_WORDS[op]
        elif op in OTHER_OPCODES:
            raise InstsError(
                f"{path}: {OTHER_OPCODES[op]} (opcode {op}) at byte offset {at}: not simulated"
            )
        else:
            raise InstsError(
                f"{path}: unknown opcode {op} (word 0x{w[i]:08x}) at byte offset {at}"
            )
        if i + count > n:
            raise InstsError(
                f"{path}: {Instr(at, op, ()).name} at byte offset {at} truncated: it needs {count} "
                f"words, the stream ends after {n - i}"
            )
        words = w[i : i + count]
        # the size field each op carries must match its layout
        size_at = {WRITE: 5, MASKWRITE: 6, TCT: 1, DDR_PATCH: 1}.get(op)
        if size_at is not None and words[size_at] != 4 * count:
            raise InstsError(
                f"{path}: {Instr(at, op, ()).name} at byte offset {at} gives a size of "
                f"{words[size_at]} bytes (byte offset {at + 4 * size_at}), its layout is {4 * count}"
            )
        if op != LOAD_PDI and op != BLOCKWRITE and op != TCT and w[i] != op:
            raise InstsError(
                f"{path}: unknown opcode word 0x{w[i]:08x} at byte offset {at}"
            )
        instrs.append(Instr(at, op, tuple(words)))
        i += count
    if len(instrs) != header["count"]:
        raise InstsError(
            f"{path}: the header (byte offset 8) counts {header['count']} ops, the stream holds "
            f"{len(instrs)}"
        )
    return Stream(path, header, instrs)


def load(path: str) -> Stream:
    with open(path, "rb") as f:
        return decode(f.read(), path)


def encode(header: dict, instrs) -> bytes:
    """A stream of these instructions (a test's mutation of a decoded one): the header's count and size
    recomputed."""
    body = [x for ins in instrs for x in ins.words]
    h0 = (
        header["major"]
        | header["minor"] << 8
        | header["generation"] << 16
        | header["rows"] << 24
    )
    h1 = header["columns"] | header["memtile_rows"] << 8
    words = [h0, h1, len(instrs), 4 * (4 + len(body)), *body]
    return struct.pack(f"<{len(words)}I", *words)


# -- addresses and registers -----------------------------------------------------------------------------


def split(address: int) -> tuple[int, int, int]:
    """(column, row, offset in the tile) of an absolute address."""
    return address >> COL_SHIFT, (address >> ROW_SHIFT) & 0x1F, address & 0xFFFFF


def register_name(col: int, row: int, offset: int) -> str | None:
    """The name of the register at this offset of a tile in row `row`, or None when the simulator knows
    none there."""
    if row == 0:
        if SHIM_BD_BASE <= offset < SHIM_BD_BASE + SHIM_BD_COUNT * 0x20:
            bd, word = divmod(offset - SHIM_BD_BASE, 0x20)
            return f"DMA_BD{bd}_{word // 4}" if word % 4 == 0 else None
        reg = SHIM_CHANNEL_REGS.get(offset)
        return reg[0] if reg else None
    if row == 1:
        if MEMTILE_BD_BASE <= offset < MEMTILE_BD_BASE + MEMTILE_BD_COUNT * 0x20:
            bd, word = divmod(offset - MEMTILE_BD_BASE, 0x20)
            return f"DMA_BD{bd}_{word // 4}" if word % 4 == 0 else None
        reg = MEMTILE_CHANNEL_REGS.get(offset)
        return reg[0] if reg else None
    return None


def _regdb_name(row: int, offset: int) -> str | None:
    """The register the compiler's register database has at this offset (for a clearer message about a
    register the simulator does not model), or None."""
    import json

    path = regdb_path()
    if path is None:
        return None
    try:
        with open(path) as f:
            db = json.load(f)
    except (OSError, ValueError):  # optional: the message goes without the name
        return None
    module = {0: ["shim"], 1: ["memory_tile"]}.get(row, ["core", "memory"])
    for m in module:
        for r in db["modules"][m]["registers"]:
            if int(r["offset"], 16) == offset:
                return f"{m} {r['name']}"
    return None


def regdb_path(aie_opt: str | None = None) -> str | None:
    """lib/regdb/aie_registers_aie2.json beside the compiler's aie-opt (the one given, else the one on
    PATH: the simulator imports nothing of the project's tools), or None."""
    import shutil

    tool = aie_opt or shutil.which("aie-opt")
    if tool is None:
        return None
    path = os.path.join(
        os.path.dirname(os.path.dirname(os.path.realpath(tool))),
        "lib",
        "regdb",
        "aie_registers_aie2.json",
    )
    return path if os.path.exists(path) else None


@dataclasses.dataclass
class Patch:
    arg: int  # the host argument's index
    plus: int  # bytes added to its address
    offset: int  # the patch's byte offset in the stream


class RegBD(BD):
    """A shim BD as its registers give it: moves 32-bit words of a host array (the buffer is a word view
    of it), d0 / d1 wrapping, d2 unbounded, the iteration offset per execution."""

    def __init__(self, bd_id, buffer, offset, length, dims, iteration, current, line):
        super().__init__(bd_id, buffer, offset, length, [], [], [], [], line=line)
        self.dims = dims  # [(wrap, step)] d0, d1 (wrap 0: that dimension and those outside it unused)
        self.d2_step = dims[2][1]
        self.iteration = iteration  # (wrap + 1, step)
        self.current = current

    def indices(self, execution: int = 0) -> np.ndarray:
        size, step = self.iteration
        base = self.offset + ((self.current + execution) % size) * step
        k = np.arange(self.length, dtype=np.int64)
        (w0, s0), (w1, s1), (_, s2) = self.dims
        if w0 == 0:
            return base + k * s0
        i0, r = k % w0, k // w0
        if w1 == 0:
            return base + i0 * s0 + r * s1
        return base + i0 * s0 + (r % w1) * s1 + (r // w1) * s2

    def describe(self) -> str:
        return (
            f"BD {self.bd_id} on {self.buffer.name} (word offset {self.offset}, {self.length} words, "
            f"set at byte offset {self.line} of the stream)"
        )


# -- the agent --------------------------------------------------------------------------------------------


class InstsAgent(Agent):
    """The runtime sequence run from its instruction stream: register writes into a model of each shim
    tile's BDs and task queues, address patches, and syncs on task-completion tokens."""

    def __init__(self, sim, seq, stream: Stream, prior: "InstsAgent | None" = None):
        """prior: the stream of the previous dispatch on the same array, whose registers carry over:
        the shim BDs' words (Iteration_Current as its tasks advanced it), the address patches (the
        patched words hold the same host buffers' addresses), the task queues and their tokens.
        """
        super().__init__(sim)
        self.seq = seq
        self.stream = stream
        self.name = f"runtime sequence @{seq.name} ({os.path.basename(stream.path)})"
        self.pc = 0
        # (col, row) -> offset -> word
        self.regs: dict[tuple[int, int], dict[int, int]] = {}
        # (col, row, bd) -> its address patch
        self.patches: dict[tuple[int, int, int], Patch] = {}
        # (col, row, direction, channel) -> the tasks pushed there, in order; those that issue a
        # token, in order; how many tokens the syncs took
        self.queues: dict[tuple, list] = {}
        self.tokens: dict[tuple, list] = {}
        self.synced: dict[tuple, int] = {}
        self.dropped: list[str] = []
        if prior is not None:
            self.regs, self.patches = prior.regs, prior.patches
            self.queues, self.tokens, self.synced = (
                prior.queues,
                prior.tokens,
                prior.synced,
            )
        self.args = [name for name, _, _ in seq.args]
        check_device(stream, sim.design)

    # where
    def at(self, ins: Instr, word: int = 0) -> str:
        return (
            f"{os.path.basename(self.stream.path)} byte offset {ins.offset + 4 * word}"
        )

    def _due_others(self) -> bool:
        """Whether another agent is ready to act at or before the sequence's time."""
        return any(e[0] <= self.t and e[-1] is not self for e in self.sim._heap)

    def _finished(self, task) -> bool:
        """Whether a task has completed by the sequence's time (not merely by the simulator's order)."""
        return getattr(task, "done", False) and task.done_t <= self.t

    def _defer(self) -> bool:
        if self._due_others():
            self.waiting = "lets the agents due at its time act first"
            self.sim.ready(self)
            return True
        return False

    def step(self) -> bool:
        instrs = self.stream.instrs
        while self.pc < len(instrs):
            ins = instrs[self.pc]
            if ins.op == TCT:
                if not self.sync(ins):
                    return False
            elif ins.op == DDR_PATCH:
                if not self.patch(ins):
                    return False
            elif ins.op in (WRITE, MASKWRITE, BLOCKWRITE):
                if not self.writes(ins):
                    return False
            else:
                raise InstsError(
                    f"{self.at(ins)}: {ins.name} in the stream of one launch (a main stream's op)"
                )
            self.pc += 1
        return self.finish()

    def finish(self) -> bool:
        """The end of the stream: the host reads the outputs now. A task still writing host memory means
        the sequence returned early; a dropped push means a transfer never ran."""
        if self.dropped:
            raise SimError("; ".join(self.dropped))
        late = [
            (key, t)
            for key, tasks in self.queues.items()
            if key[2] == S2MM
            for t in tasks
            if not self._finished(t)
        ]
        if late:
            if self._defer():
                return False
            key, t = late[0]
            raise SimError(
                f"{os.path.basename(self.stream.path)}: the stream ends (byte offset "
                f"{self.stream.header['size']}) while {t.name} on {t.channel.name} still writes host "
                f"memory: the host would read its output too soon (no sync waited for that task's token)"
            )
        self.done = True
        self.waiting = "finished"
        return False

    # register writes
    def writes(self, ins: Instr) -> bool:
        if ins.op == BLOCKWRITE:
            targets = [
                (ins.words[2] + 4 * k, v, None, 4 + k)
                for k, v in enumerate(ins.words[4:])
            ]
        elif ins.op == WRITE:
            targets = [(ins.words[2], ins.words[4], None, 0)]
        else:
            targets = [(ins.words[2], ins.words[4], ins.words[5], 0)]
        # resolve every word first: an in-flight BD defers the whole op
        resolved = []
        for address, value, mask, word in targets:
            col, row, off = split(address)
            self._check_tile(ins, col, row, address)
            name = register_name(col, row, off)
            if name is None:
                known = _regdb_name(row, off)
                what = (
                    f"the register {known}, which the simulator does not model"
                    if known
                    else "no register the simulator knows"
                )
                raise InstsError(
                    f"{self.at(ins, word)}: {ins.name} to address 0x{address:08x} (tile ({col}, {row}), "
                    f"offset 0x{off:05x}): {what}"
                )
            if row != 0:
                raise InstsError(
                    f"{self.at(ins, word)}: {ins.name} to {name} of memtile ({col}, {row}): the "
                    f"simulator runs memtile DMAs from their BD chains, not from the instruction stream"
                )
            resolved.append((col, row, off, value, mask, name))
        for col, row, off, value, mask, name in resolved:
            if SHIM_BD_BASE <= off < SHIM_BD_BASE + SHIM_BD_COUNT * 0x20:
                bd = (off - SHIM_BD_BASE) // 0x20
                busy = self._in_flight(col, row, bd)
                if busy is not None:
                    if self._defer():
                        return False
                    raise SimError(
                        f"{self.at(ins)}: {ins.name} rewrites {name} of tile ({col}, {row}) while "
                        f"{busy.name} on {busy.channel.name}, which uses BD {bd}, is still in flight"
                    )
        for col, row, off, value, mask, name in resolved:
            regs = self.regs.setdefault((col, row), {})
            if mask is not None:
                value = (regs.get(off, 0) & ~mask | value & mask) & 0xFFFFFFFF
            regs[off] = value
            if SHIM_BD_BASE <= off < SHIM_BD_BASE + SHIM_BD_COUNT * 0x20:
                bd, word = divmod(off - SHIM_BD_BASE, 0x20)
                if word in (
                    4,
                    8,
                ):  # the address words: a patch before them no longer holds
                    self.patches.pop((col, row, bd), None)
            elif SHIM_CHANNEL_REGS[off][1] == "queue":
                _, _, d, ch = SHIM_CHANNEL_REGS[off]
                if not self.push(ins, col, row, d, ch, value, name):
                    return False
        return True

    def _check_tile(self, ins, col, row, address):
        if (col, row) not in self.sim.design.tiles:
            raise InstsError(
                f"{self.at(ins)}: {ins.name} to address 0x{address:08x}, in tile ({col}, {row}), which "
                f"device @{self.sim.design.name} does not use: the stream does not match its device"
            )

    def _in_flight(self, col, row, bd):
        for key, tasks in self.queues.items():
            if key[:2] != (col, row):
                continue
            for t in tasks:
                if not self._finished(t) and bd in t.bd_ids:
                    return t
        return None

    def patch(self, ins: Instr) -> bool:
        address, arg, plus = ins.words[6], ins.words[8], ins.words[10]
        col, row, off = split(address)
        self._check_tile(ins, col, row, address)
        bd, word = divmod(off - SHIM_BD_BASE, 0x20)
        if row != 0 or not 0 <= bd < SHIM_BD_COUNT or word != 4:
            raise InstsError(
                f"{self.at(ins, 6)}: address patch into 0x{address:08x}: not the address word "
                f"(DMA_BD<n>_1) of a shim BD"
            )
        if arg >= len(self.args):
            raise InstsError(
                f"{self.at(ins, 8)}: address patch with host argument {arg}; @{self.seq.name} takes "
                f"{len(self.args)}: the stream does not match its sequence"
            )
        if arg >= FIRMWARE_TRANSLATED_ARGS:
            # the firmware translates the host addresses of the first 5 arguments only; for a later one
            # the compiler folds the AIE's DDR aperture offset into arg_plus (aie-translate
            # --aie-npu-fold-ddr-addr-offset, on by default: the xclbin + instruction-buffer runtime)
            if plus < DDR_APERTURE:
                raise SimError(
                    f"{self.at(ins, 10)}: address patch of host argument {arg} adds {plus} bytes without "
                    f"the DDR aperture offset 0x{DDR_APERTURE:08x}: the firmware translates only the "
                    f"first {FIRMWARE_TRANSLATED_ARGS} arguments' addresses, so the BD would point "
                    f"outside the host buffer (a stream for the full-ELF runtime?)"
                )
            plus -= DDR_APERTURE
        busy = self._in_flight(col, row, bd)
        if busy is not None:
            if self._defer():
                return False
            raise SimError(
                f"{self.at(ins)}: address patch rewrites BD {bd} of tile ({col}, {row}) while "
                f"{busy.name} on {busy.channel.name}, which uses it, is still in flight"
            )
        self.patches[(col, row, bd)] = Patch(arg, plus, ins.offset)
        return True

    # task queues
    def push(self, ins, col, row, d, ch, value, name) -> bool:
        key = (col, row, d, ch)
        channel = self.sim.design.channels.get(key)
        if channel is None or channel.first is not None:
            raise InstsError(
                f"{self.at(ins)}: a task pushed onto {name} of tile ({col}, {row}), a channel device "
                f"@{self.sim.design.name} does not allocate to the runtime sequence: the stream does "
                f"not match its device"
            )
        tasks = self.queues.setdefault(key, [])
        pending = [t for t in tasks if not self._finished(t)]
        if len(pending) >= QUEUE_DEPTH:
            if self._defer():
                return False
            self.dropped.append(
                f"{self.at(ins)}: the push onto {channel.name} ({name}) finds its task queue full "
                f"({QUEUE_DEPTH} tasks not completed: {', '.join(t.name for t in pending)}): the "
                f"hardware drops it and its transfer never runs"
            )
            return True
        token = bool(field(value, 31, 31))
        repeat = field(value, 23, 16)
        first = field(value, 3, 0)
        bds = self.chain(ins, col, row, first)
        task = Task(
            channel, bds, repeat, token, f"the task pushed at byte offset {ins.offset}"
        )
        task.bd_ids = {b.bd_id for b in bds}
        task.started_t = self.t
        tasks.append(task)
        if token:
            self.tokens.setdefault(key, []).append(task)
        # the hardware advances each BD's Iteration_Current as it runs; the next task on the same BD
        # (not rewritten) starts where this one leaves it
        for b in bds:
            size, _ = b.iteration
            regs = self.regs[(col, row)]
            off = SHIM_BD_BASE + 0x20 * b.bd_id + 24
            cur = (b.current + repeat + 1) % size
            regs[off] = regs.get(off, 0) & ~(0x3F << 26) | cur << 26
        agent = self.sim.dma[id(channel)]
        agent.tasks.append(task)
        agent.t = max(agent.t, self.t)
        self.sim.ready(agent)
        return True

    def chain(self, ins, col, row, first) -> list:
        out, seen, bd = [], set(), first
        while True:
            if bd in seen:
                raise InstsError(
                    f"{self.at(ins)}: the task's BD chain loops back to BD {bd} of tile ({col}, {row}): "
                    f"a task that never ends is not simulated"
                )
            seen.add(bd)
            b = self.bd(ins, col, row, bd)
            out.append(b)
            w7 = self.regs[(col, row)].get(SHIM_BD_BASE + 0x20 * bd + 28, 0)
            if not field(w7, 26, 26):
                return out
            bd = field(w7, 30, 27)

    def bd(self, ins, col, row, bd) -> RegBD:
        regs = self.regs.get((col, row), {})
        base = SHIM_BD_BASE + 0x20 * bd
        w = [regs.get(base + 4 * k) for k in range(SHIM_BD_WORDS)]
        where = f"{self.at(ins)}: the task starts BD {bd} of tile ({col}, {row})"
        if w[7] is None or not field(w[7], 25, 25):
            raise SimError(f"{where}, which is not valid (Valid_BD not set)")
        w = [x or 0 for x in w]
        if field(w[7], 12, 12) or field(w[7], 24, 18):
            raise InstsError(f"{where}: shim BD locks are not simulated")
        if field(w[2], 30, 30):
            raise InstsError(f"{where}: packet-switched shim BDs are not simulated")
        p = self.patches.get((col, row, bd))
        if p is None:
            raise SimError(
                f"{where}, whose address no address patch has set since it was written: it would "
                f"move a raw device address"
            )
        if p.plus % 4:
            raise SimError(
                f"{where}: its address, host argument {p.arg} plus {p.plus} bytes, is not 32-bit aligned"
            )
        name = self.args[p.arg]
        key = f"{name} (32-bit words)"
        host = self.sim.host
        if key not in host:
            raw = host[name]
            if raw.nbytes % 4:
                raise SimError(
                    f"{where}: host argument {name} is {raw.nbytes} bytes, not whole 32-bit words"
                )
            host[key] = raw.view(np.uint32)
        buffer = Buffer(key, None, 0, (host[key].size,), np.dtype(np.uint32))
        dims = [
            (field(w[3], 29, 20), field(w[3], 19, 0) + 1),
            (field(w[4], 29, 20), field(w[4], 19, 0) + 1),
            (0, field(w[5], 19, 0) + 1),
        ]
        iteration = (field(w[6], 25, 20) + 1, field(w[6], 19, 0) + 1)
        return RegBD(
            bd,
            buffer,
            p.plus // 4,
            w[0],
            dims,
            iteration,
            field(w[6], 31, 26),
            ins.offset,
        )

    # syncs
    def sync(self, ins: Instr) -> bool:
        d, row, col = (
            ins.words[2] & 0xFF,
            (ins.words[2] >> 8) & 0xFF,
            (ins.words[2] >> 16) & 0xFF,
        )
        nrow, ncol, ch = (
            (ins.words[3] >> 8) & 0xFF,
            (ins.words[3] >> 16) & 0xFF,
            ins.words[3] >> 24,
        )
        if (nrow, ncol) != (1, 1):
            raise InstsError(
                f"{self.at(ins)}: a sync over {ncol} columns and {nrow} rows: not simulated"
            )
        if d not in (S2MM, MM2S):
            raise InstsError(f"{self.at(ins, 2)}: a sync with direction {d}")
        self._check_tile(ins, col, row, col << COL_SHIFT | row << ROW_SHIFT)
        key = (col, row, d, ch)
        issued = self.tokens.get(key, [])
        taken = self.synced.get(key, 0)
        chan = f"tile ({col}, {row}) {'MM2S' if d == MM2S else 'S2MM'} {ch}"
        if taken >= len(issued):
            self.waiting = (
                f"at {self.at(ins)}: sync waits for a task-completion token of {chan}; no task that "
                f"issues one is queued there"
            )
            self.waiting += self._dropped_note()
            return False  # nothing will come: a hang, reported with this line
        task = issued[taken]
        if not getattr(task, "done", False):
            self.waiting = (
                f"at {self.at(ins)}: sync waits for a task-completion token of {chan} "
                f"(the next from {task.name})"
            ) + self._dropped_note()
            self.sim.wait_task(self, task)
            return False
        self.synced[key] = taken + 1
        self.t = max(self.t, task.done_t)
        return True

    def _dropped_note(self) -> str:
        return f" [dropped: {'; '.join(self.dropped)}]" if self.dropped else ""

    def leftovers(self) -> list[str]:
        """Tokens no sync took (on hardware the next dispatch's first sync on that channel would take
        them and return early)."""
        out = []
        for key, issued in self.tokens.items():
            extra = len(issued) - self.synced.get(key, 0)
            if extra:
                out.append(
                    f"{extra} task-completion token(s) of {issued[-1].channel.name} no sync took"
                )
        return out


def check_device(stream: Stream, design) -> None:
    """InstsError when the stream's header is not NPU2's (the only device simulated: version 0.1,
    generation 4, 6 rows of which 1 memtile row) or has fewer columns than the design uses.
    """
    h = stream.header
    for k, want in NPU2.items():
        if k != "columns" and h[k] != want:
            offset = 4 if k == "memtile_rows" else 0
            raise InstsError(
                f"{stream.path}: the header (byte offset {offset}) gives {k} {h[k]}, NPU2's is {want}: "
                f"the stream does not match device @{design.name}"
            )
    used = 1 + max(col for col, _ in design.tiles)
    if not used <= h["columns"] <= NPU2["columns"]:
        raise InstsError(
            f"{stream.path}: the header (byte offset 4) gives {h['columns']} columns; device "
            f"@{design.name} uses {used} of NPU2's {NPU2['columns']}: the stream does not match it"
        )


def stream_path(folder: str, device: str, sequence: str) -> str:
    """The file aiecc writes a runtime sequence's stream to."""
    return os.path.join(folder, f"insts_{device}_{sequence}.bin")


def for_sequence(folder: str, design, seq) -> Stream:
    path = stream_path(folder, design.name, seq.name)
    if not os.path.exists(path):
        raise InstsError(
            f"{path}: no instruction stream for @{seq.name} of device @{design.name} in {folder}"
        )
    return load(path)


def main_segments(stream: Stream) -> list[list]:
    """The ops of each launch in a main stream, split at its load_pdi ops."""
    out = []
    for ins in stream.instrs:
        if ins.op == LOAD_PDI:
            out.append([])
        elif not out:
            raise InstsError(
                f"{stream.path}: {ins.name} at byte offset {ins.offset} before the first load_pdi"
            )
        else:
            out[-1].append(ins)
    return out


def check_main(folder: str, main_device: str, main_seq: str, launches) -> None:
    """The main stream of a module of several launches must be, launch by launch, a load_pdi followed by
    that launch's own stream: InstsError naming the first word that differs."""
    path = stream_path(folder, main_device, main_seq)
    if not os.path.exists(path):
        return
    main = load(path)
    segs = main_segments(main)
    if len(segs) != len(launches):
        raise InstsError(
            f"{path}: {len(segs)} load_pdi ops, the main sequence runs {len(launches)} launches"
        )
    for seg, own in zip(segs, launches):
        a = [(i.op, i.words) for i in seg]
        b = [(i.op, i.words) for i in own.instrs]
        if a != b:
            k = next(
                (j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b))
            )
            at = seg[k].offset if k < len(seg) else (seg[-1].offset if seg else 0)
            raise InstsError(
                f"{path}: byte offset {at} differs from {os.path.basename(own.path)}, op {k}"
            )


__all__ = [
    "InstsAgent",
    "InstsError",
    "Instr",
    "Stream",
    "decode",
    "encode",
    "load",
    "DesignError",
]


def main_of(designs) -> tuple[str, str]:
    """(device, sequence) of the main sequence of a module of several launches (the one holding
    aiex.configure ops)."""
    for d in designs:
        for q in d.sequences:
            if any(op.name == "aiex.configure" for op in q.op.regions[0][0].ops):
                return d.name, q.name
    raise DesignError(
        "no main sequence (aiex.configure) in a module of several launches"
    )
