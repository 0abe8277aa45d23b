# SPDX-License-Identifier: MIT
"""What the simulator of the compiled design (emulator/aiesim) charges in its timed mode, for this
project's designs, and how its timeline is shown. Every figure it produces is MODELLED.

* A kernel call costs the kernel cost model's cycles (int4awq/design/kernel_cost.py): the accumulate
  entries their profiled and calibrated figure; the zero and drain entries, which the model does not
  profile, one 64-byte store a cycle over the accumulator (zero) and one 64-byte load and 32-byte store a
  cycle (drain): a floor, labelled so.
* A stream moves 8 bytes a cycle (the simulator's STREAM_BYTES_PER_CYCLE: AM027's 64-bit AIE-ML v2
  streams).
* DDR: all shim channels share DDR_BYTES_PER_S (int4awq/design/model.py, fitted to mlir-air's measured
  GEMMs), at the clock the kernel model uses (CLOCK_HZ).
* BD setup and lock operations: the figures below, estimates (AM020 gives no cycle counts for them).
* The instruction stream of a dispatch (the runtime sequence's `insts_*.bin`: register writes, address
  patches, syncs), which the NPU's command processor reads and executes word by word over its control path:
  CONTROL_NS_PER_WORD a 32-bit word, printed beside the schedule's time and not added to it (the simulator
  issues the words at no cost; the per-dispatch FIXED_S, fitted to measured runs, already holds what a
  measured design's stream cost). No AMD document or mlir-aie source gives the command processor's rate;
  the figure is a least-squares fit to the one public measurement found that varies the stream's length on
  NPU2: nod-ai/iree-amd-aie issue #1187 (2025-04-01, Strix, turbo off), a whole-array reconfiguration
  timed over 5,000 runs with control code of 38, 118, 582 and 662 words (and 2 to 7,663 words of control
  packets moved by DMA) taking 79, 101, 111 and 106 us. Fitting time = a + b * control words + c * DMA
  words gives b = 25 ns (27 ns on the 1,000-run column; 36 to 43 ns with control words alone), with
  residuals of +-7 us: 30 ns is an estimate good to a factor of about 2, not a published figure.
"""

from __future__ import annotations

import json
import os

from int4_packed_record import (
    GEMM_ENTRIES,
)  # the GEMM entries' names, beside its builder

from ..design import compiler, model
from ..errors import ConfigError, RunFailure
from ..design.kernel_cost import CLOCK_HZ, gemv_cycles, kernel_cycles

BD_SETUP_CYCLES = 8  # estimate: a BD's fetch and start (not published)
LOCK_CYCLES = 1  # estimate: one lock request (not published)
# estimate: one 32-bit word of an instruction stream through the command processor (fitted to
# nod-ai/iree-amd-aie #1187's NPU2 reconfiguration timings; see the module's docstring)
CONTROL_NS_PER_WORD = 30


def costs(cfg):
    """The simulator's Costs for one design configuration."""
    import aiesim

    gemv = type(cfg).__name__ == "GemvConfig"
    if gemv:
        acc_bytes = 8 * cfg.tile_n * 4 * -(-cfg.m // 8)
        accumulate = gemv_cycles(cfg.tile_n, cfg.tile_k_l1, cfg.gs, cfg.m, cfg.format)
    else:
        acc_bytes = cfg.tile_m * cfg.tile_n * 4
        accumulate = kernel_cycles(
            cfg.tile_m, cfg.tile_n, cfg.tile_k_l1, cfg.gs, cfg.format
        )
    # the GEMM's entries carry mlir-air's names (GEMM_ENTRIES), the GEMV's end in their stage
    entries = (
        {stage: f"gemv_int4_{stage}" for stage in GEMM_ENTRIES}
        if gemv
        else GEMM_ENTRIES
    )
    per_call = {
        entries["zero"]: acc_bytes / 64,
        entries["accumulate"]: accumulate,
        entries["drain"]: acc_bytes / 64,
    }

    def call(name: str) -> float:
        return next((c for k, c in per_call.items() if name.endswith(k)), 0.0)

    return aiesim.Costs(
        bd_setup=BD_SETUP_CYCLES,
        lock=LOCK_CYCLES,
        call=call,
        ddr_bytes_per_cycle=model.DDR_BYTES_PER_S / CLOCK_HZ,
    )


def layer_costs(cfg):
    """The simulator's Costs for the decode layer module (o_gemv_ffn_int4.py, a LayerConfig): each GEMV
    object's entries under their own (prefixed) names as costs() prices them, and the element-wise entries
    at int4awq.design.layer's estimate (ELTWISE_OPS_PER_VECTOR per 16 lanes: not profiled).
    """
    import aiesim

    from ..design.layer import ELTWISE_OPS_PER_VECTOR, eltwise_launches

    per_call = {}
    for g in cfg.launch_gemvs:
        acc_bytes = 8 * g.tile_n * 4 * -(-g.m // 8)
        per_call[g.kernel.symbol("gemv_int4_zero")] = acc_bytes / 64
        per_call[g.kernel.symbol("gemv_int4_accumulate")] = gemv_cycles(
            g.tile_n, g.tile_k_l1, g.gs, g.m, g.format
        )
        per_call[g.kernel.symbol("gemv_int4_drain")] = acc_bytes / 64
    entries = {
        "residual": "eltwise_add_bf16",
        "rms_norm": "rms_norm_bf16",
        "swiglu": "silu_mul_bf16",
    }
    for name, _, per_pe in eltwise_launches(cfg):
        entry = "rope_bf16" if name.startswith("rope_") else entries.get(name)
        if entry:
            per_call[entry] = per_pe / 16 * ELTWISE_OPS_PER_VECTOR
    return aiesim.Costs(
        bd_setup=BD_SETUP_CYCLES,
        lock=LOCK_CYCLES,
        call=lambda name: per_call.get(name, 0.0),
        ddr_bytes_per_cycle=model.DDR_BYTES_PER_S / CLOCK_HZ,
    )


def simulate_compiled(
    outdir: str | None,
    arrays,
    costs,
    trace: bool = False,
    seed: int | None = None,
    dispatches: int = 1,
):
    """(outputs, Simulator) of the design aircc + aiecc compiled into outdir, run by the simulator of the
    compiled design: ConfigError without the compiler (outdir None), RunFailure (with the simulator's
    report) when it hangs, the simulator stops (a race among them), or the run leaves words in a stream or
    a BD half received (on hardware they would meet the next dispatch). seed: a seeded schedule
    (aiesim.Simulator). dispatches: the runtime sequence run that many times on the same array
    (aiesim.simulate); the outputs are the last dispatch's, sim.dispatch_outputs each one's.
    """
    import aiesim

    if outdir is None:
        raise ConfigError(
            "--backend sim runs the design aircc + aiecc compile, and they are not installed here "
            f"({compiler.tools_missing()})"
        )
    text = compiler.generic_form(os.path.join(outdir, "input_physical.mlir"))
    try:
        outs, sim = aiesim.simulate(
            text,
            arrays,
            costs=costs,
            trace=trace,
            insts=outdir,
            seed=seed,
            dispatches=dispatches,
        )
    except (
        aiesim.InstsError
    ) as e:  # the instruction stream itself is bad input: one line, exit 2
        raise ConfigError(f"simulator: {e}") from None
    except aiesim.Hang as h:
        raise RunFailure(
            "the compiled design hangs: nothing can move and the runtime sequence has not ended\n  "
            + "\n  ".join(h.report)
        ) from None
    except (aiesim.SimError, aiesim.DesignError) as e:
        raise RunFailure(f"simulator: {e}") from None
    left = aiesim.leftovers(sim)
    if left:
        raise RunFailure(
            "the compiled design leaves data behind when its runtime sequence ends (on hardware it "
            "would meet the next dispatch)\n  " + "\n  ".join(left)
        )
    return outs, sim


def seconds(sim) -> float:
    """The simulated time of the whole module: its launches one after the other."""
    return sum(c for _, c in sim.launch_cycles) / CLOCK_HZ


def stream_cost(sim) -> tuple[int, float] | None:
    """(words, seconds) of one dispatch's instruction stream over the control path (MODELLED:
    CONTROL_NS_PER_WORD a word, the header's 4 words included), for a run from an instruction stream (a
    module of several launches: its main stream, every launch's ops and load_pdi); None for a run of the
    dialect-level sequence."""
    path = getattr(sim, "stream_file", None)
    if not path:
        return None
    words = os.path.getsize(path) // 4
    return words, words * CONTROL_NS_PER_WORD * 1e-9


def timed_line(cfg, sim) -> str:
    us = seconds(sim) * 1e6
    later = [c / CLOCK_HZ * 1e6 for c in getattr(sim, "dispatch_cycles", [])[1:]]
    more = (
        f"; the later dispatches {', '.join(f'{x:.1f}' for x in later)} us"
        if later
        else ""
    )
    control = stream_cost(sim)
    stream = (
        f"; its instruction stream {control[0]} words, {control[1] * 1e6:.2f} us a dispatch over "
        f"the control path (MODELLED, {CONTROL_NS_PER_WORD} ns a word: an estimate fitted to "
        f"iree-amd-aie #1187)"
        if control
        else ""
    )
    return (
        f"{sim.steps} steps; MODELLED NPU2 time {us:.1f} us for the compiled schedule "
        f"(+ {model.FIXED_S * 1e6:.0f} us per dispatch: {us + model.FIXED_S * 1e6:.1f} us{more})"
        f"{stream}"
    )


def write_trace(sim, path: str) -> None:
    """The simulated timeline as Chrome / Perfetto trace JSON (chrome://tracing, ui.perfetto.dev): one
    track per core and DMA channel, a slice per kernel call and per BD, in microseconds (MODELLED).
    """
    tracks = {}
    events = []
    for name, kind, t0, t1, what in sim.trace:
        tid = tracks.setdefault(name, len(tracks) + 1)
        events.append(
            {
                "name": what,
                "cat": kind,
                "ph": "X",
                "ts": t0 / CLOCK_HZ * 1e6,
                "dur": max(t1 - t0, 0) / CLOCK_HZ * 1e6,
                "pid": 1,
                "tid": tid,
            }
        )
    for name, tid in tracks.items():
        events.append(
            {
                "name": "thread_name",
                "ph": "M",
                "pid": 1,
                "tid": tid,
                "args": {"name": name},
            }
        )
    events.append(
        {
            "name": "process_name",
            "ph": "M",
            "pid": 1,
            "args": {"name": "compiled design, simulated (MODELLED times)"},
        }
    )
    with open(path, "w") as f:
        json.dump({"traceEvents": events, "displayTimeUnit": "ns"}, f)
