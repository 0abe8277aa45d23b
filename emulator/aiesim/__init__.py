# SPDX-License-Identifier: MIT
"""A simulator of the design aiecc compiles for NPU2: it runs input_physical.mlir (every tile, buffer at
its address, lock, DMA BD chain, stream route and core body, and the runtime sequence) with the kernel
built on the host from the same source on its cores. generic.py reads the MLIR, design.py builds the
physical design, engine.py runs it; `simulate` puts them together."""

from __future__ import annotations

import ctypes

import numpy as np

from .design import Design, DesignError, load
from . import insts as _insts
from .engine import Costs, Hang, Race, SimError, Simulator
from .insts import InstsError
from .generic import ParseError, parse

__all__ = [
    "Costs",
    "Design",
    "DesignError",
    "Hang",
    "InstsError",
    "ParseError",
    "Race",
    "SimError",
    "Simulator",
    "hazards",
    "host_kernels",
    "leftovers",
    "load",
    "parse",
    "simulate",
]


def _ctype(type_text: str):
    t = type_text.strip()
    if t.startswith("memref<"):
        return ctypes.c_void_p
    return {
        "index": ctypes.c_int64,
        "i64": ctypes.c_int64,
        "i32": ctypes.c_int32,
        "i16": ctypes.c_int16,
        "i8": ctypes.c_int8,
        "f32": ctypes.c_float,
    }[t]


def host_kernels(callee: str, func):
    """The host build of a core's kernel: the library its link_with names (found as the emulator finds
    it: the working directory, then AIR_EMU_LIB_PATH), the symbol `callee`."""
    from air.emu.kernels import control_registers, load_function, resolve_library

    if not func.library:
        raise DesignError(f"@{callee} has no link_with: no kernel library to load")
    path = resolve_library(func.library, f"func.call @{callee}")
    fn = load_function(path, callee, [], f"func.call @{callee}")
    fn.argtypes = [_ctype(t) for t in func.arg_types]
    # the library's one rounding / saturation state, which the engine saves and restores per core
    fn.control_registers = control_registers(path)
    return fn


def simulate(
    generic_text: str,
    arrays,
    costs: Costs | None = None,
    trace=False,
    device: int = 0,
    run_kernels=True,
    insts: str | None = None,
    dialect: bool = False,
    seed: int | None = None,
    dispatches: int = 1,
):
    """Run a compiled module (generic MLIR text) on host arrays: (outputs, the Simulator).
    run_kernels=False: a timing run, the cores' calls charged but not computed.

    insts: the compiler's output folder; each runtime sequence then runs from the instruction stream aiecc
    wrote for it there (`insts_<device>_<sequence>.bin`, insts.py), unless dialect=True, which runs the
    dialect-level ops of input_physical.mlir instead (the cross-check). Without insts, the dialect level.
    seed: a seeded schedule (engine.Simulator): the order of ready agents and the pieces each BD's
    transfer moves in drawn from it; None, the one deterministic order.

    dispatches: how many times the runtime sequence runs on the same array (Simulator.run called again:
    the cores go on in their loops, locks, buffers, BD chains and shim BD registers carry over), the host
    arrays written again from `arrays` before each, as mlir-air's XRTBackend writes every buffer before a
    run. The outputs returned are the last dispatch's; sim.dispatch_outputs holds each dispatch's (copies),
    sim.dispatch_cycles each dispatch's time. A hang or an error on a dispatch after the first names it;
    a dispatch that leaves anything behind (`leftovers`; a line names the dispatch after the first) ends
    the run there: the next would meet it.

    A module of several launches (one aie.device each, and a main device whose runtime sequence
    configures each device and runs its sequence in turn, `aiex.configure` / `aiex.run`) runs its launches
    in that order, each on a fresh array of its own device, the host arrays carried from one to the next
    (DDR outlives a reconfiguration), on every dispatch (the main stream loads each launch's PDI again);
    the Simulator returned is the last launch's, and its launch_cycles lists (device, cycles) of every
    launch on the first dispatch, and launch_leftovers (device, what it left behind) of every launch
    (`leftovers` reads them)."""
    if dispatches < 1:
        raise ValueError(f"dispatches {dispatches}: need at least 1")
    module = parse(generic_text)
    designs = load(module)
    runs = _main_runs(designs)

    def tag(k, lines):
        return (
            [f"after dispatch {k} of {dispatches}: {x}" for x in lines]
            if k > 1
            else lines
        )

    if not runs:
        design = designs[device]
        stream = None
        if insts is not None and not dialect:
            stream = _insts.for_sequence(insts, design, design.sequences[0])
        sim = Simulator(design, host_kernels, costs, trace, run_kernels, seed=seed)
        per, left = [], []
        for k in range(1, dispatches + 1):
            with _on_dispatch(k, dispatches):
                outs = sim.run(arrays, insts=stream)
            per.append([np.array(o) for o in outs])
            left = tag(k, _left(sim))
            if left:
                break
        ends = [0.0, *sim.dispatch_ends]
        sim.launch_cycles = [(design.name, ends[1])]
        sim.dispatch_cycles = [b - a for a, b in zip(ends, ends[1:])]
        sim.launch_leftovers = [(design.name, left)]
        sim.launch_hazards = [(design.name, sim.hazards())]
        sim.dispatch_outputs = per
        sim.stream_file = None if stream is None else stream.path
        return per[-1], sim
    by_name = {d.name: d for d in designs}
    streams = [None] * len(runs)
    if insts is not None and not dialect:
        streams = [
            _insts.for_sequence(insts, by_name[dev], _sequence(by_name[dev], seq))
            for dev, seq, _ in runs
        ]
        _insts.check_main(insts, *_insts.main_of(designs), streams)
    given = arrays
    sim, per, dispatch_cycles = None, [], []
    for k in range(1, dispatches + 1):
        arrays = given
        if (
            k > 1
        ):  # each launch's PDI loaded again: every device as the compiler configured it
            by_name = {d.name: d for d in load(module)}
        launch_cycles, launch_leftovers, launch_hazards = [], [], []
        for (dev, seq, argmap), stream in zip(runs, streams):
            design = by_name[dev]
            index = next(i for i, q in enumerate(design.sequences) if q.name == seq)
            sim = Simulator(design, host_kernels, costs, trace, run_kernels, seed=seed)
            launch_args = None if arrays is None else [arrays[a] for a in argmap]
            with _on_dispatch(k, dispatches):
                outs = sim.run(launch_args, sequence=index, insts=stream)
            launch_cycles.append((dev, sim.end_t))
            launch_leftovers.append((dev, tag(k, _left(sim))))
            launch_hazards.append((dev, sim.hazards()))
            if arrays is not None:
                arrays = list(arrays)
                for a, out in zip(argmap, outs):
                    arrays[a] = np.array(out)
        if k == 1:
            first_cycles, hazards = launch_cycles, launch_hazards
        else:
            for (dev, hs), (_, seen) in zip(launch_hazards, hazards):
                seen += [h for h in hs if h not in seen]
        dispatch_cycles.append(sum(c for _, c in launch_cycles))
        per.append(arrays)
        if any(lines for _, lines in launch_leftovers):
            break
    # each launch's own time, in order: one after the other, a reconfiguration between them not charged
    sim.launch_cycles = first_cycles
    sim.launch_leftovers = launch_leftovers
    sim.launch_hazards = hazards
    sim.dispatch_cycles = dispatch_cycles
    sim.dispatch_outputs = per
    sim.stream_file = (
        None
        if streams[0] is None
        else _insts.stream_path(insts, *_insts.main_of(designs))
    )
    return per[-1], sim


class _on_dispatch:
    """Name the dispatch in a hang report or an error raised on a dispatch after the first (one on the
    first dispatch reads as it did before dispatches were counted)."""

    def __init__(self, k: int, n: int):
        self.k, self.n = k, n

    def __enter__(self):
        return self

    def __exit__(self, kind, e, tb):
        if e is None or self.k == 1:
            return False
        where = f"on dispatch {self.k} of {self.n}"
        if isinstance(e, Hang):
            e.report.insert(
                0, f"{where} (the array as the dispatches before it left it):"
            )
            e.args = ("\n".join(e.report),)
        elif isinstance(e, (SimError, DesignError)) and e.args:
            e.args = (f"{where}: {e.args[0]}", *e.args[1:])
        return False


def _sequence(design, name):
    return next(q for q in design.sequences if q.name == name)


def _left(sim) -> list[str]:
    """The engine's leftovers, and the instruction stream's (tokens no sync took)."""
    extra = getattr(getattr(sim, "main", None), "leftovers", None)
    return sim.leftovers() + (extra() if extra else [])


def leftovers(sim) -> list[str]:
    """What a run `simulate` returned left behind, launch by launch: words in a stream or down a cascade,
    a BD half received. Each is a failure: on hardware it would meet the next dispatch.
    """
    runs = getattr(sim, "launch_leftovers", None)
    if runs is None:
        runs = [(sim.design.name, sim.leftovers())]
    many = len(runs) > 1
    return [f"{dev}: {line}" if many else line for dev, lines in runs for line in lines]


def hazards(sim) -> list[str]:
    """The latent races a run `simulate` returned met, launch by launch (engine.Ownership): a DMA or a
    core touching bytes that an S2MM BD of another lock pair holds its lock for and may write as soon
    as words arrive. Not a failure by itself (no byte was written under the other's feet in this run);
    it is the hazard of one buffer guarded by two unrelated lock pairs."""
    runs = getattr(sim, "launch_hazards", None)
    if runs is None:
        runs = [(sim.design.name, sim.hazards())]
    many = len(runs) > 1
    return [f"{dev}: {line}" if many else line for dev, lines in runs for line in lines]


def _main_runs(designs) -> list[tuple[str, str, list[int]]]:
    """The (device, runtime sequence, main argument index per parameter) a main sequence runs, in order;
    [] for a module of one launch."""
    for d in designs:
        for q in d.sequences:
            [block] = q.op.regions[0]
            index = {name: i for i, (name, _) in enumerate(block.args)}
            runs = [
                (
                    cfg.attr("symbol"),
                    run.attr("runtime_sequence_symbol"),
                    [index[o] for o in run.operands],
                )
                for cfg in block.ops
                if cfg.name == "aiex.configure"
                for run in cfg.body
                if run.name == "aiex.run"
            ]
            if runs:
                return runs
    return []
