# SPDX-License-Identifier: MIT
"""Broken copies of a compiled design, run by the simulator of the compiled design (emulator/aiesim):
each mutation changes one thing aiecc decided (a lock's initial value, a BD's length, a BD chain, BD ids,
a switchbox connection, a buffer's address) in the generic-form text of input_physical.mlir, and the
simulator must not pass it silently: it hangs with its report, gives another C, or the mutation is
harmless for a reason the table states.

`python3 host/sim_mutations.py` prints the table for `make run1x1`'s compiled design (docs/verification.md
has it); tests/run/test_sim.py checks every row.
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
    expect: str  # "hang", "wrong C", or "harmless: <why>"


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
        "refused: the BD writes one element past its buffer (on hardware, into the next buffer)",
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
]


def outcome(text: str, arrays, output: int, baseline) -> str:
    """What the simulator makes of a (mutated) design: "hang: <first lines>", "wrong C: ...",
    "same C", or "refused: <why>"."""
    import aiesim
    import numpy as np

    try:
        outs, sim = aiesim.simulate(text, [a.copy() for a in arrays])
    except aiesim.Hang as h:
        return "hang: " + " | ".join(h.report[:3])
    except (aiesim.SimError, aiesim.DesignError) as e:
        return f"refused: {e}"
    got = np.asarray(outs[output]).view(np.uint8).reshape(-1)
    want = np.asarray(baseline).view(np.uint8).reshape(-1)
    left = f"; {sim.leftovers()[0]}" if sim.leftovers() else ""
    if np.array_equal(got, want):
        return "same C" + left
    return f"wrong C: {int((got != want).sum())} of {want.size} bytes differ{left}"


def run1x1_case():
    """(generic text, inputs, output index) of `make run1x1` as aircc + aiecc compile it."""
    import numpy as np
    from ml_dtypes import bfloat16

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
    return text, [a_p, w_p, np.zeros((cfg.m, cfg.n), bfloat16)], 2


def table() -> list[tuple[str, str, str]]:
    import aiesim

    text, arrays, out = run1x1_case()
    baseline = aiesim.simulate(text, [a.copy() for a in arrays])[0][out]
    return [
        (m.name, m.expect, outcome(m.mutate(text), arrays, out, baseline))
        for m in MUTATIONS
    ]


if __name__ == "__main__":
    for name, expect, got in table():
        print(f"| {name} | {got} | {expect} |")
