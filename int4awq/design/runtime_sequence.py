# SPDX-License-Identifier: MIT
"""The runtime sequence aircc wrote (npu.air.mlir), run against DDR: which elements of each host buffer
one dispatch reads and writes, and how often.

The sequence is what XRT replays per dispatch: shim DMA tasks (`aiex.dma_configure_task_for @alloc`),
each one buffer descriptor on a host argument, started (`aiex.dma_start_task`) and awaited. The rules,
from mlir-aie at 7e00b57 (the commit mlir-air e972f29 pins) and the AIE2 register database it ships:

* a task runs repeat_count + 1 times (the task queue's Repeat_Count field is "actual - 1"; mlir-air's
  AIRRtToNpuPass.cpp ~735-738 writes sizes[0] - 1 there);
* `offset`, `len`, `sizes` and `strides` count elements of the argument's memref (AIEDMATasksToNPU.cpp
  rewriteSingleBD turns them into bytes and 32-bit words);
* the three innermost dimensions walk one execution of `len` elements (len must be their product); a
  fourth, outermost dimension is the BD's iteration dimension: execution k starts at
  offset + (k mod size) x stride (iteration_size / iteration_stride, "offset each execution of this BD");
* the direction is the shim DMA allocation's: MM2S reads the host buffer, S2MM writes it;
* a module of several air.launch ops compiles to one aie.device per launch, each with its own sequence,
  and a main sequence that configures each device and runs its sequence in turn (`aiex.configure @dev {
  aiex.run @seq(args) }`, mlir-air's air_multi_launch_npu.mlir test): the main sequence's traffic is its
  runs' in order, and an element one launch reads must have been written by an earlier one when the module
  itself produces that buffer (order_problems).

The walk is modelled per element; the hardware walks 32-bit words, which is the same for every pattern
whose innermost stride is 1 (all of this project's). A sub-word pattern with another innermost stride is
refused as not modelled rather than guessed.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from .compiled import ELEM_BYTES, memref_type

_SEQ = re.compile(r"aie\.runtime_sequence @(\w+)\(([^)]*)\)")
_ARG = re.compile(r"(%\w+): (memref<[^>]*>)")
_ALLOC = re.compile(r"aie\.shim_dma_allocation @(\w+)\(([^,]*), (MM2S|S2MM), (\d+)\)")
_TASK = re.compile(r"(%\w+) = aiex\.dma_configure_task_for @(\w+) \{")
_BD = re.compile(
    r"aie\.dma_bd\((%\w+) : memref<[^>]*> offset = (\d+) len = (\d+)"
    r"(?: sizes = \[([\d, ]*)\] strides = \[([\d, ]*)\])?"
)
_START = re.compile(r"aiex\.dma_start_task\((%\w+)\)")
_REPEAT = re.compile(r"repeat_count = (\d+)")
_CONFIGURE = re.compile(r"aiex\.configure @(\w+) \{$")
_RUN = re.compile(r"aiex\.run @(\w+)\(([^)]*)\)")


class NotInterpreted(Exception):
    """The sequence holds something this interpreter does not model: it says what."""


@dataclasses.dataclass
class Traffic:
    """Per host argument of one runtime sequence: how many times each element is read and written."""

    name: str
    args: list[tuple[str, tuple[int, ...], str]]  # (name, shape, element type)
    reads: list[np.ndarray]
    writes: list[np.ndarray]
    # argument -> the shim channels (tile, direction, channel) that move it, and its started tasks
    channels: dict = dataclasses.field(default_factory=dict)
    started: dict = dataclasses.field(default_factory=dict)
    # a main sequence: the device sequences it runs, in order, each with the main's argument index per
    # parameter; inner: a device sequence some main sequence runs (its traffic is counted there)
    runs: list = dataclasses.field(default_factory=list)
    inner: bool = False

    def bytes_read(self, i: int) -> int:
        return int(self.reads[i].sum()) * ELEM_BYTES[self.args[i][2]]

    def bytes_written(self, i: int) -> int:
        return int(self.writes[i].sum()) * ELEM_BYTES[self.args[i][2]]


def _ints(text: str | None) -> list[int]:
    return [int(x) for x in text.split(",")] if text and text.strip() else []


def walk(
    offset: int, length: int, sizes: list[int], strides: list[int], execution: int
):
    """The element indices one execution of a shim BD touches, in order."""
    if not sizes:
        sizes, strides = [length], [1]
    if len(sizes) > 4:
        raise NotInterpreted(f"a shim BD of {len(sizes)} dimensions")
    base = offset
    if len(sizes) == 4:
        base += (execution % sizes[0]) * strides[0]
        sizes, strides = sizes[1:], strides[1:]
    if int(np.prod(sizes)) != length:
        raise NotInterpreted(f"len {length} is not the product of sizes {sizes}")
    idx = np.array([base], dtype=np.int64)
    for size, stride in zip(sizes, strides):
        idx = (
            idx[:, None] + np.arange(size, dtype=np.int64)[None, :] * stride
        ).reshape(-1)
    return idx


def interpret(npu_text: str) -> list[Traffic]:
    """Every runtime sequence of aircc's npu.air.mlir, run once: element read and write counts."""
    channel = {
        m.group(1): (m.group(2), m.group(3), m.group(4))
        for m in _ALLOC.finditer(npu_text)
    }
    out = []
    lines = npu_text.splitlines()
    i = 0
    while i < len(lines):
        m = _SEQ.search(lines[i])
        if not m:
            i += 1
            continue
        args = []
        for name, ty in _ARG.findall(m.group(2)):
            shape, elem, _ = memref_type(ty)
            args.append((name, shape, elem))
        index = {name: k for k, (name, _, _) in enumerate(args)}
        size = [int(np.prod(s)) for _, s, _ in args]
        traffic = Traffic(
            m.group(1),
            args,
            [np.zeros(n, np.int64) for n in size],
            [np.zeros(n, np.int64) for n in size],
        )
        tasks, depth = {}, 1
        i += 1
        while i < len(lines) and depth > 0:
            line = lines[i].strip()
            t = _TASK.search(line)
            if t:
                bd, repeat = None, 0
                i += 1
                while not lines[i].strip().startswith("}"):
                    b = _BD.search(lines[i])
                    if b:
                        if bd is not None:
                            raise NotInterpreted(
                                f"task {t.group(1)} chains several BDs"
                            )
                        bd = b
                    elif "aie.end" not in lines[i]:
                        raise NotInterpreted(f"in a task: {lines[i].strip()}")
                    i += 1
                r = _REPEAT.search(lines[i])
                repeat = int(r.group(1)) if r else 0
                if t.group(2) not in channel:
                    raise NotInterpreted(f"no shim DMA allocation @{t.group(2)}")
                tasks[t.group(1)] = (bd, repeat, channel[t.group(2)])
                i += 1
                continue
            c = _CONFIGURE.search(line)
            if c:
                depth += 1  # the configure block of one device; its runs belong to this sequence
                i += 1
                continue
            run = _RUN.search(line)
            if run:
                names = [a.strip() for a in run.group(2).split(",") if a.strip()]
                if any(n not in index for n in names):
                    raise NotInterpreted(
                        f"aiex.run of {run.group(1)} with unknown arguments"
                    )
                traffic.runs.append((run.group(1), [index[n] for n in names]))
                i += 1
                continue
            s = _START.search(line)
            if s:
                bd, repeat, chan = tasks[s.group(1)]
                way = chan[1]
                arg = index[bd.group(1)]
                traffic.channels.setdefault(bd.group(1), set()).add(chan)
                traffic.started[bd.group(1)] = traffic.started.get(bd.group(1), 0) + 1
                sizes, strides = _ints(bd.group(4)), _ints(bd.group(5))
                elem = args[arg][2]
                if ELEM_BYTES[elem] < 4 and strides and strides[-1] != 1:
                    raise NotInterpreted(
                        f"a {elem} pattern with innermost stride {strides[-1]} (the DMA walks words)"
                    )
                counts = traffic.reads[arg] if way == "MM2S" else traffic.writes[arg]
                for k in range(repeat + 1):
                    idx = walk(int(bd.group(2)), int(bd.group(3)), sizes, strides, k)
                    if idx.min() < 0 or idx.max() >= counts.size:
                        raise NotInterpreted(
                            f"task {s.group(1)} reaches element {idx.max()} of {args[arg][0]} "
                            f"({counts.size} elements)"
                        )
                    np.add.at(counts, idx, 1)
            elif line.startswith("}"):
                depth -= 1
            elif line.endswith("{"):
                raise NotInterpreted(f"control flow in the runtime sequence: {line}")
            elif not re.match(r"aiex\.dma_(await|free)_task\(", line) and line:
                raise NotInterpreted(f"runtime sequence op: {line}")
            i += 1
        out.append(traffic)
    by_name = {t.name: t for t in out}
    for t in out:  # a main sequence: its runs' traffic, mapped onto its arguments
        for seq, argmap in t.runs:
            if seq not in by_name:
                raise NotInterpreted(f"aiex.run of {seq}: no such runtime sequence")
            inner = by_name[seq]
            inner.inner = True
            for p, a in enumerate(argmap):
                t.reads[a] += inner.reads[p]
                t.writes[a] += inner.writes[p]
                for chan in inner.channels.get(inner.args[p][0], ()):
                    t.channels.setdefault(t.args[a][0], set()).add(chan)
                t.started[t.args[a][0]] = t.started.get(
                    t.args[a][0], 0
                ) + inner.started.get(inner.args[p][0], 0)
    return out


def order_problems(main: Traffic, sequences: list[Traffic]) -> list[str]:
    """For a main sequence: each element a launch reads that some launch of the module writes must have
    been written by an earlier launch (an intermediate through DDR); an element no launch writes is the
    host's (an input, or the host's part of a buffer the module also writes). One line per argument that
    breaks it.
    """
    by_name = {t.name: t for t in sequences}
    out = []
    for a, (name, shape, _) in enumerate(main.args):
        if not main.writes[a].any():
            continue  # a host input
        produced = main.writes[a] > 0
        written = np.zeros_like(main.writes[a])
        for k, (seq, argmap) in enumerate(main.runs):
            inner = by_name[seq]
            params = [p for p, x in enumerate(argmap) if x == a]
            reads = sum((inner.reads[p] for p in params), np.zeros_like(written))
            early = (reads > 0) & (written == 0) & produced
            if early.any():
                out.append(
                    f"{main.name}: launch {k} ({seq}) reads {int(early.sum())} elements of {name} "
                    f"{list(shape)} no earlier launch wrote"
                )
            for p in params:
                written += inner.writes[p]
    return out
