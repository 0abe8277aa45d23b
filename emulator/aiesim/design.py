# SPDX-License-Identifier: MIT
"""The physical design aiecc writes (input_physical.mlir, read by generic.py), as the simulator runs it:
tiles with their memory, locks with their initial values, buffers at their addresses, each DMA channel's
BD chain (locks acquired and released, offset, length, sizes and strides, the next BD), the cores'
bodies, the stream routes traced through the switchboxes, the shim DMA allocations and the runtime
sequences.

Enumerations as mlir-aie defines them (include/aie/Dialect/AIE/IR/AIEAttrs.td at 7e00b57): WireBundle
Core 0, DMA 1, FIFO 2, South 3, West 4, North 5, East 6, PLIO 7, NOC 8, Trace 9, TileControl 10;
DMAChannelDir S2MM 0, MM2S 1; LockAction Acquire 0, Release 1, AcquireGreaterEqual 2. (Checked here
against the custom form aiecc prints beside the generic one.)
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .generic import Op, ParseError, memref_shape

CORE, DMA, SOUTH, WEST, NORTH, EAST = 0, 1, 3, 4, 5, 6
BUNDLES = {0: "Core", 1: "DMA", 2: "FIFO", 3: "South", 4: "West", 5: "North", 6: "East"}
S2MM, MM2S = 0, 1
ACQUIRE, RELEASE, ACQUIRE_GE = 0, 1, 2
# NPU2 (AIE2P) data memory: 64 KiB per compute tile, 512 KiB per memtile (mlir-aie AIETargetModel,
# NPU2TargetModel getLocalMemorySize / getMemTileSize).
MEMORY_BYTES = {"compute": 64 * 1024, "memtile": 512 * 1024, "shim": 0}
# NaN bit patterns of the float element types, as the element type's own word.
FLOAT_NAN = {
    "bf16": 0x7FC0,
    "f16": 0x7E00,
    "f32": np.float32(np.nan),
    "f64": np.float64(np.nan),
}
DTYPES = {
    "bf16": np.uint16,  # moved as bits: the simulator never computes on them
    "f16": np.uint16,
    "f32": np.float32,
    "i8": np.int8,
    "i16": np.int16,
    "i32": np.int32,
    "i64": np.int64,
    "f64": np.float64,
}


class DesignError(Exception):
    """The compiled design holds something the simulator does not run: it says what."""


@dataclasses.dataclass(eq=False)
class Tile:
    col: int
    row: int
    memory: (
        np.ndarray
    )  # the tile's data memory, one byte array (overlapping buffers overlap)

    @property
    def kind(self) -> str:
        return {0: "shim", 1: "memtile"}.get(self.row, "compute")

    @property
    def name(self) -> str:
        return f"tile ({self.col}, {self.row})"


@dataclasses.dataclass(eq=False)
class Lock:
    tile: Tile
    lock_id: int
    init: int
    name: str
    value: int = 0

    def describe(self) -> str:
        return f"lock {self.lock_id} of {self.tile.name} ({self.name})"


@dataclasses.dataclass(eq=False)
class Buffer:
    """A buffer placed in a tile's memory, or (tile None) a runtime sequence argument in DDR."""

    name: str
    tile: Tile | None
    address: int
    shape: tuple[int, ...]
    dtype: np.dtype
    elem: str = ""  # the MLIR element type (bf16 is moved as 16-bit words)
    layout: tuple | None = (
        None  # a view's element strides (memref.subview); None: row-major
    )

    def strides(self) -> tuple[int, ...]:
        if self.layout is not None:
            return self.layout
        out, step = [], 1
        for d in reversed(self.shape):
            out.append(step)
            step *= d
        return tuple(reversed(out))

    def poison(self) -> None:
        """Fill the buffer as the emulator fills a fresh one (NaN for floats, 0xA5 bytes otherwise), so
        that a byte nothing writes shows, and a run compares with the emulator's bit for bit.
        """
        v = self.view()
        if self.elem in FLOAT_NAN:
            v[...] = FLOAT_NAN[self.elem]
        else:
            v.view(np.uint8)[...] = 0xA5

    @property
    def elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def view(self, host=None) -> np.ndarray:
        """The buffer's elements, flat, as a view of its memory (or of the host array for DDR)."""
        if self.tile is None:
            return host.view(self.dtype).reshape(-1)
        span = 1 + sum((d - 1) * st for d, st in zip(self.shape, self.strides()))
        nbytes = span * self.dtype.itemsize
        return self.tile.memory[self.address : self.address + nbytes].view(self.dtype)


@dataclasses.dataclass(eq=False)
class BD:
    """One buffer descriptor: what it moves, the locks it takes and gives, what follows it."""

    bd_id: int | None
    buffer: Buffer
    offset: int
    length: int
    sizes: list[int]
    strides: list[int]
    acquires: list[tuple[Lock, int, int]]  # (lock, value, action)
    releases: list[tuple[Lock, int]]
    next: "BD | None" = None
    iteration: tuple[int, int] = (
        1,
        0,
    )  # shim BDs: (size, stride) of the execution dimension
    line: int = 0

    def indices(self, execution: int = 0) -> np.ndarray:
        """The element indices of one execution, in the order the DMA walks them."""
        base = self.offset + (execution % self.iteration[0]) * self.iteration[1]
        if not self.sizes:
            return np.arange(base, base + self.length, dtype=np.int64)
        idx = np.full(1, base, dtype=np.int64)
        for size, stride in zip(self.sizes, self.strides):
            idx = (
                idx[:, None] + np.arange(size, dtype=np.int64)[None, :] * stride
            ).ravel()
        if idx.size != self.length:
            raise DesignError(
                f"BD {self.bd_id} (line {self.line}) walks {idx.size} elements with sizes {self.sizes}, "
                f"its length is {self.length}"
            )
        return idx

    def describe(self) -> str:
        what = f"BD {self.bd_id}" if self.bd_id is not None else "a BD"
        return f"{what} on {self.buffer.name} (offset {self.offset}, len {self.length})"


@dataclasses.dataclass(eq=False)
class Channel:
    tile: Tile
    direction: int  # S2MM / MM2S
    index: int
    first: BD | None = (
        None  # the chain a tile DMA starts (None: a shim channel fed by tasks)
    )
    repeat: int = 1

    @property
    def name(self) -> str:
        return f"{self.tile.name} {'MM2S' if self.direction == MM2S else 'S2MM'} {self.index}"


@dataclasses.dataclass
class Func:
    name: str
    library: (
        str | None
    )  # link_with (an object name; the host library is found as the emulator finds it)
    arg_types: list[str]


@dataclasses.dataclass
class Core:
    tile: Tile
    op: Op  # aie.core, its region the body
    stack: int


@dataclasses.dataclass
class Task:
    """A shim DMA task of a runtime sequence: BDs on one allocation, run repeat + 1 times."""

    channel: Channel
    bds: list[BD]
    repeat: int
    issue_token: bool
    name: str


@dataclasses.dataclass
class Sequence:
    name: str
    args: list[tuple[str, tuple[int, ...], np.dtype]]
    op: Op


@dataclasses.dataclass
class Design:
    name: str
    tiles: dict[tuple[int, int], Tile]
    locks: list[Lock]
    buffers: list[Buffer]
    channels: dict[tuple[int, int, int, int], Channel]  # (col, row, direction, index)
    routes: dict[
        tuple[int, int, int], list[tuple[int, int, int]]
    ]  # MM2S (col,row,ch) -> S2MM ports
    cores: list[Core]
    funcs: dict[str, Func]
    allocations: dict[str, Channel]  # shim_dma_allocation symbol -> its channel
    sequences: list[Sequence]
    values: dict[str, object]  # SSA name -> Tile / Lock / Buffer (device level)
    cascade_out: dict = dataclasses.field(default_factory=dict)
    # MM2S (col, row, ch) -> for each S2MM port of routes[...], in the same order, the FIFO stages its
    # words pass on the way (engine.stage_bytes prices each): what bounds how far the sender runs ahead
    paths: dict = dataclasses.field(default_factory=dict)


def _const_values(ops) -> dict[str, int]:
    return {
        op.results[0]: op.attr("value")
        for op in ops
        if op.name == "arith.constant" and isinstance(op.attr("value"), int)
    }


def load(module: Op) -> list[Design]:
    """Every aie.device of a module, as a Design."""
    devices = [op for op in module.body if op.name == "aie.device"]
    if not devices:
        raise DesignError("no aie.device in the module")
    return [_device(d) for d in devices]


def _device(dev: Op) -> Design:
    values: dict[str, object] = {}
    tiles: dict[tuple[int, int], Tile] = {}
    locks, buffers, cores = [], [], []
    funcs, allocations, sequences = {}, {}, []
    channels: dict[tuple[int, int, int, int], Channel] = {}
    switchboxes, muxes = {}, {}
    dma_ops = []
    cascade_out = (
        {}
    )  # (col, row) -> the direction its cascade output goes (WireBundle numbering)
    for op in dev.body:
        n = op.name
        if n == "aie.tile":
            col, row = op.attr("col"), op.attr("row")
            kind = {0: "shim", 1: "memtile"}.get(row, "compute")
            t = Tile(col, row, _aligned(MEMORY_BYTES[kind]))
            tiles[(col, row)] = t
            values[op.results[0]] = t
        elif n == "aie.lock":
            t = values[op.operands[0]]
            lk = Lock(t, op.attr("lockID"), op.attr("init", 0) or 0, op.results[0])
            lk.value = lk.init
            locks.append(lk)
            values[op.results[0]] = lk
        elif n == "aie.buffer":
            t = values[op.operands[0]]
            shape, elem, _ = memref_shape(op.result_types[0])
            if op.attr("address") is None:
                raise DesignError(
                    f"buffer {op.attr('sym_name')} has no address: not a placed design"
                )
            b = Buffer(
                op.attr("sym_name"),
                t,
                op.attr("address"),
                shape,
                np.dtype(DTYPES[elem]),
                elem,
            )
            b.poison()
            buffers.append(b)
            values[op.results[0]] = b
        elif n in ("aie.mem", "aie.memtile_dma", "aie.shim_dma"):
            dma_ops.append(op)
        elif n == "aie.core":
            cores.append(Core(values[op.operands[0]], op, op.attr("stack_size", 1024)))
        elif n == "func.func":
            sym = op.attr("sym_name")
            ftype = op.attrs.get("function_type", "")
            funcs[sym] = Func(sym, op.attr("link_with"), _split_args(ftype))
        elif n == "aie.shim_dma_allocation":
            t = values[op.operands[0]]
            key = (t.col, t.row, op.attr("channel_dir"), op.attr("channel_index"))
            ch = channels.setdefault(key, Channel(t, key[2], key[3]))
            allocations[op.attr("sym_name")] = ch
        elif n == "aie.runtime_sequence":
            [block] = op.regions[0]
            args = []
            for name, ty in block.args:
                shape, elem, _ = memref_shape(ty)
                args.append((name, shape, np.dtype(DTYPES[elem])))
            sequences.append(Sequence(op.attr("sym_name") or "sequence", args, op))
        elif n == "aie.switchbox":
            switchboxes[values[op.operands[0]]] = _connects(op)
        elif n == "aie.shim_mux":
            muxes[values[op.operands[0]]] = _connects(op)
        elif n == "aie.configure_cascade":
            t = values[op.operands[0]]
            cascade_out[(t.col, t.row)] = op.attr("outputDir")
        elif n == "aie.packet_flow":
            src = next(o for o in op.body if o.name == "aie.packet_source")
            if src.attr("bundle") == DMA:
                raise DesignError(
                    f"a packet flow from a DMA (line {op.line}): the simulator routes circuit flows only"
                )
    for op in dma_ops:
        tile = values[op.operands[0]]
        for ch in _dma_channels(op, tile, values):
            channels[(tile.col, tile.row, ch.direction, ch.index)] = ch
    paths: dict = {}
    routes = _routes(channels, switchboxes, muxes, paths)
    return Design(
        dev.attr("sym_name") or "device",
        tiles,
        locks,
        buffers,
        channels,
        routes,
        cores,
        funcs,
        allocations,
        sequences,
        values,
        cascade_out,
        paths,
    )


def _aligned(nbytes: int) -> np.ndarray:
    """A zeroed byte array whose first byte is 64-byte aligned (kernels assume aligned buffers)."""
    raw = np.zeros(nbytes + 64, dtype=np.uint8)
    off = (-raw.ctypes.data) % 64
    return raw[off : off + nbytes]


def _split_args(ftype: str) -> list[str]:
    from .generic import _split_top

    if not ftype.startswith("("):
        return []
    depth, end = 0, 0
    for i, c in enumerate(ftype):
        depth += c in "(<[{"
        depth -= c in ")>]}" and not (c == ">" and ftype[i - 1] == "-")
        if depth == 0:
            end = i
            break
    return _split_top(ftype[1:end])


def _connects(op: Op) -> dict[tuple[int, int], list[tuple[int, int]]]:
    out = {}
    for c in op.body:
        if c.name == "aie.connect":
            key = (c.attr("source_bundle"), c.attr("source_channel"))
            out.setdefault(key, []).append(
                (c.attr("dest_bundle"), c.attr("dest_channel"))
            )
    return out


def make_bd(op: Op, buffer: Buffer, acquires, releases, shim: bool = False) -> BD:
    sizes = op.attr("static_sizes") or []
    strides = op.attr("static_strides") or []
    if op.attr("iteration_size") or op.attr("iteration_stride"):
        it = (op.attr("iteration_size") or 1, op.attr("iteration_stride") or 0)
    else:
        it = (1, 0)
    length = op.attr("static_len")
    if length is None:
        length = op.attr("len")
    if shim and len(sizes) == 4:
        # the outermost of four is the BD's execution dimension (runtime sequences: each execution
        # starts stride further, modulo its size)
        it = (sizes[0], strides[0])
        sizes, strides = sizes[1:], strides[1:]
    if any(isinstance(x, str) for x in (sizes, strides)) or not isinstance(length, int):
        raise DesignError(f"dma_bd at line {op.line}: dynamic sizes are not simulated")
    return BD(
        op.attr("bd_id"),
        buffer,
        op.attr("static_offset", 0) or 0,
        length,
        list(sizes),
        list(strides),
        acquires,
        releases,
        iteration=it,
        line=op.line,
    )


def _dma_channels(op: Op, tile: Tile, values) -> list[Channel]:
    """The channels an aie.mem / aie.memtile_dma starts, each with its BD chain."""
    blocks = {b.label: b for b in op.regions[0]}
    consts = {}
    for b in op.regions[0]:
        consts.update(_const_values(b.ops))
    bd_of_block: dict[str, BD] = {}
    next_of: dict[int, str | None] = {}

    def bd_block(label: str) -> BD | None:
        if label in bd_of_block:
            return bd_of_block[label]
        b = blocks[label]
        acquires, releases, bd_op, nxt = [], [], None, None
        for o in b.ops:
            if o.name == "aie.use_lock":
                lk = values[o.operands[0]]
                v = (
                    consts.get(o.operands[1], 1)
                    if len(o.operands) > 1
                    else (o.attr("value") or 1)
                )
                if o.attr("action") == RELEASE:
                    releases.append((lk, v))
                else:
                    acquires.append((lk, v, o.attr("action")))
            elif o.name == "aie.dma_bd":
                bd_op = o
            elif o.name == "aie.next_bd":
                nxt = o.successors[0]
            elif o.name == "aie.end":
                nxt = None
        if bd_op is None:
            return None
        bd = make_bd(bd_op, values[bd_op.operands[0]], acquires, releases)
        bd_of_block[label] = bd
        next_of[id(bd)] = (nxt, bd_op.attr("next_bd_id"))
        return bd

    # every BD of the tile's DMA, by its id: the hardware chains BDs by next_bd_id (the BD's register),
    # which the lowering writes from the next_bd successor; where they disagree the id is what runs
    by_id = {}
    for b in op.regions[0]:
        bd = bd_block(b.label)
        if bd is not None and bd.bd_id is not None:
            if bd.bd_id in by_id:
                raise DesignError(
                    f"{tile.name}: BD id {bd.bd_id} is used twice (lines {by_id[bd.bd_id].line} and "
                    f"{bd.line})"
                )
            by_id[bd.bd_id] = bd
    for bd in bd_of_block.values():
        label, nid = next_of[id(bd)]
        if nid is not None:
            if nid not in by_id:
                raise DesignError(
                    f"{tile.name}: BD {bd.bd_id} (line {bd.line}) chains to BD id {nid}, which no BD of "
                    f"the tile has"
                )
            bd.next = by_id[nid]
        else:
            bd.next = bd_block(label) if label is not None else None

    out = []
    label = op.regions[0][0].label
    while label is not None:
        start = next((o for o in blocks[label].ops if o.name == "aie.dma_start"), None)
        if start is None:
            break
        first_label, then = start.successors
        ch = Channel(
            tile,
            start.attr("channel_dir"),
            start.attr("channel_index"),
            repeat=(start.attr("repeat_count", 0) or 0) + 1,
        )
        ch.first = bd_block(first_label)
        out.append(ch)
        label = then
    return out


def _routes(channels, switchboxes, muxes, paths=None):
    """Each MM2S port (col, row, channel) -> the S2MM ports its circuit reaches, traced through the
    switchboxes' connects and the shim muxes, hop by hop across the mesh. paths (a dict, filled when
    given): the same key -> for each of those ports, in order, the FIFO stages on its way
    (engine.Stream bounds a stream by them)."""
    by_pos = {(t.col, t.row): sb for t, sb in switchboxes.items()}
    mux_pos = {(t.col, t.row): m for t, m in muxes.items()}
    out = {}
    for col, row, d, idx in channels:
        if d != MM2S:
            continue
        dests, ways = [], []
        start = (("mm2s", col, row, idx),)
        if row == 0:
            for b, c in mux_pos.get((col, row), {}).get((DMA, idx), []):
                if b == NORTH:  # into the shim tile's switchbox from its South side
                    _follow(
                        by_pos, mux_pos, col, row, SOUTH, c, dests, set(), start, ways
                    )
        else:
            _follow(by_pos, mux_pos, col, row, DMA, idx, dests, set(), start, ways)
        out[(col, row, idx)] = dests
        if paths is not None:
            paths[(col, row, idx)] = ways
    return out


_STEP = {
    NORTH: (0, 1, SOUTH),
    SOUTH: (0, -1, NORTH),
    EAST: (1, 0, WEST),
    WEST: (-1, 0, EAST),
}


def _follow(by_pos, mux_pos, col, row, bundle, ch, dests, seen, path=(), ways=None):
    """path: the FIFO stages so far (the sender's channel, then each switchbox's slave port and master
    port passed); ways: the full path of each destination appended to dests, in the same order.
    """
    key = (col, row, bundle, ch)
    if key in seen:
        raise DesignError(f"a routing loop through switchbox ({col}, {row})")
    seen.add(key)
    here = path + (("slave", col, row, bundle, ch),)
    ways = [] if ways is None else ways
    for db, dc in by_pos.get((col, row), {}).get((bundle, ch), []):
        out = here + (("master", col, row, db, dc),)
        if db == DMA:
            dests.append((col, row, dc))
            ways.append(out + (("s2mm", col, row, dc),))
        elif db == SOUTH and row == 0:  # down into the shim mux
            for mb, mc in mux_pos.get((col, row), {}).get((NORTH, dc), []):
                if mb == DMA:
                    dests.append((col, row, mc))
                    ways.append(out + (("s2mm", col, row, mc),))
        elif db in _STEP:
            dx, dy, enter = _STEP[db]
            _follow(
                by_pos, mux_pos, col + dx, row + dy, enter, dc, dests, seen, out, ways
            )
        elif db == CORE:
            raise DesignError(
                f"a stream into the core of ({col}, {row}): not simulated"
            )
