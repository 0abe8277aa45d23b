# SPDX-License-Identifier: MIT
"""A simulator of the design aiecc compiles for NPU2: it runs input_physical.mlir (every tile, buffer at
its address, lock, DMA BD chain, stream route and core body, and the runtime sequence) with the kernel
built on the host from the same source on its cores. generic.py reads the MLIR, design.py builds the
physical design, engine.py runs it; `simulate` puts them together."""

from __future__ import annotations

import ctypes

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
    from air.emu.kernels import resolve_library

    if not func.library:
        raise DesignError(f"@{callee} has no link_with: no kernel library to load")
    lib = ctypes.CDLL(resolve_library(func.library, f"func.call @{callee}"))
    fn = getattr(lib, callee)
    fn.argtypes = [_ctype(t) for t in func.arg_types]
    fn.restype = None
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
):
    """Run a compiled module (generic MLIR text) on host arrays: (outputs, the Simulator).
    run_kernels=False: a timing run, the cores' calls charged but not computed.

    insts: the compiler's output folder; each runtime sequence then runs from the instruction stream aiecc
    wrote for it there (`insts_<device>_<sequence>.bin`, insts.py), unless dialect=True, which runs the
    dialect-level ops of input_physical.mlir instead (the cross-check). Without insts, the dialect level.
    seed: a seeded schedule (engine.Simulator): the order of ready agents and the pieces each BD's
    transfer moves in drawn from it; None, the one deterministic order.

    A module of several launches (one aie.device each, and a main device whose runtime sequence
    configures each device and runs its sequence in turn, `aiex.configure` / `aiex.run`) runs its launches
    in that order, each on a fresh array of its own device, the host arrays carried from one to the next
    (DDR outlives a reconfiguration); the Simulator returned is the last launch's, and its launch_cycles
    lists (device, cycles) of every launch, and launch_leftovers (device, what it left behind) of every
    launch (`leftovers` reads them)."""
    designs = load(parse(generic_text))
    runs = _main_runs(designs)
    if not runs:
        design = designs[device]
        stream = None
        if insts is not None and not dialect:
            stream = _insts.for_sequence(insts, design, design.sequences[0])
        sim = Simulator(design, host_kernels, costs, trace, run_kernels, seed=seed)
        outs = sim.run(arrays, insts=stream)
        sim.launch_cycles = [(design.name, sim.end_t)]
        sim.launch_leftovers = [(design.name, _left(sim))]
        sim.launch_hazards = [(design.name, sim.hazards())]
        return outs, sim
    by_name = {d.name: d for d in designs}
    sim, launch_cycles, launch_leftovers, launch_hazards = None, [], [], []
    streams = [None] * len(runs)
    if insts is not None and not dialect:
        streams = [
            _insts.for_sequence(insts, by_name[dev], _sequence(by_name[dev], seq))
            for dev, seq, _ in runs
        ]
        _insts.check_main(insts, *_insts.main_of(designs), streams)
    for (dev, seq, argmap), stream in zip(runs, streams):
        design = by_name[dev]
        index = next(i for i, q in enumerate(design.sequences) if q.name == seq)
        sim = Simulator(design, host_kernels, costs, trace, run_kernels, seed=seed)
        given = None if arrays is None else [arrays[a] for a in argmap]
        outs = sim.run(given, sequence=index, insts=stream)
        launch_cycles.append((dev, sim.end_t))
        launch_leftovers.append((dev, _left(sim)))
        launch_hazards.append((dev, sim.hazards()))
        if arrays is not None:
            arrays = list(arrays)
            for a, out in zip(argmap, outs):
                arrays[a] = out
    # each launch's own time, in order: one after the other, a reconfiguration between them not charged
    sim.launch_cycles = launch_cycles
    sim.launch_leftovers = launch_leftovers
    sim.launch_hazards = launch_hazards
    return arrays, sim


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
