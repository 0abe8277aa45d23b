# SPDX-License-Identifier: MIT
"""A simulator of the design aiecc compiles for NPU2: it runs input_physical.mlir (every tile, buffer at
its address, lock, DMA BD chain, stream route and core body, and the runtime sequence) with the kernel
built on the host from the same source on its cores. generic.py reads the MLIR, design.py builds the
physical design, engine.py runs it; `simulate` puts them together."""

from __future__ import annotations

import ctypes

from .design import Design, DesignError, load
from .engine import Costs, Hang, SimError, Simulator
from .generic import ParseError, parse

__all__ = [
    "Costs",
    "Design",
    "DesignError",
    "Hang",
    "ParseError",
    "SimError",
    "Simulator",
    "host_kernels",
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
):
    """Run a compiled module (generic MLIR text) on host arrays: (outputs, the Simulator).
    run_kernels=False: a timing run, the cores' calls charged but not computed.

    A module of several launches (one aie.device each, and a main device whose runtime sequence
    configures each device and runs its sequence in turn, `aiex.configure` / `aiex.run`) runs its launches
    in that order, each on a fresh array of its own device, the host arrays carried from one to the next
    (DDR outlives a reconfiguration); the Simulator returned is the last launch's, and its launch_cycles
    lists (device, cycles) of every launch."""
    designs = load(parse(generic_text))
    runs = _main_runs(designs)
    if not runs:
        design = designs[device]
        sim = Simulator(design, host_kernels, costs, trace, run_kernels)
        outs = sim.run(arrays)
        sim.launch_cycles = [(design.name, sim.end_t)]
        return outs, sim
    by_name = {d.name: d for d in designs}
    sim, launch_cycles = None, []
    for dev, seq, argmap in runs:
        design = by_name[dev]
        index = next(i for i, q in enumerate(design.sequences) if q.name == seq)
        sim = Simulator(design, host_kernels, costs, trace, run_kernels)
        given = None if arrays is None else [arrays[a] for a in argmap]
        outs = sim.run(given, sequence=index)
        launch_cycles.append((dev, sim.end_t))
        if arrays is not None:
            arrays = list(arrays)
            for a, out in zip(argmap, outs):
                arrays[a] = out
    # each launch's own time, in order: one after the other, a reconfiguration between them not charged
    sim.launch_cycles = launch_cycles
    return arrays, sim


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
