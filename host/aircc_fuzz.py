# SPDX-License-Identifier: MIT
"""`make fuzz-aircc N=...`: the compiler judges the emulator on designs nobody wrote by hand.

Each design of host/generated_designs.py goes three ways:

1. the emulator's static compile (air/emu: budgets, the NPU2 resource model, the DMA limits, the split
   and ping-pong decisions), and, when it accepts the design, a run checked against the output the
   design must compute;
2. aircc's AIR pipeline in air-opt: the L2 splits and the ping-pong labels (int4awq/design/compiled.py);
3. aircc + aiecc down to the NPU instructions: the design compiles, or the first error.

The compiler is the ground truth: the emulator must refuse exactly what aircc or aiecc refuses, for the
same reason (REASONS pairs each compiler message with the emulator's error), make the same split and
ping-pong decisions, and run everything else to the right output. Two kinds of refusal are counted apart,
not as disagreements: hazards (NPU2 failures mlir-air documents, which no pass refuses, and flows aircc
chains on one DMA channel) and what the emulator does not model and says so (packet flows).

Exit status: 0 when every design agrees, 1 when one does not, 2 when the compiler is missing.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import os
import sys
import tempfile
import time
from collections import Counter

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMULATOR_DIR = os.path.join(REPO, "emulator")
DESIGNS_DIR = os.path.join(EMULATOR_DIR, "tests", "designs")
for _p in (REPO, EMULATOR_DIR, DESIGNS_DIR):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import numpy as np  # noqa: E402

import emu_testlib  # noqa: E402  (the emulator's air package first, and its test kernels)
from host import generated_designs as gen  # noqa: E402
from int4awq.design import compiled, compiler  # noqa: E402

# What each compiler refusal is called in the emulator: (a fragment of the compiler's first error, the
# emulator's error class, a fragment of the emulator's message). A refusal on both sides agrees when a
# row matches the compiler's first error and one of the emulator's refusals: a design with several faults
# may meet them in another order in each tool.
REASONS = (
    ("allocated buffers exceeded available memory", "BudgetError", "L1"),
    ("overlaps with stack", "BudgetError", "overlaps with stack"),
    ("No valid placement found", "HerdShapeError", "compute array"),
    ("no ShimNOCTile has sufficient DMA capacity", "ResourceError", "shim tiles"),
    ("targets same dst as another connect op", "ResourceError", "S2MM channels"),
    ("Size may not exceed", "DmaLimitError", "size"),
    ("Size may not exceed", "ResourceError", "Size may not exceed"),
    ("Stride may not exceed", "DmaLimitError", "stride"),
    ("buffer descriptor length", "DmaLimitError", "BD length"),
    ("buffer descriptor length", "ResourceError", "BD length"),
    ("has more than 48 blocks", "ResourceError", "BDs"),
    ("has more than 16 blocks", "ResourceError", "BDs"),
    (
        "found constant operands to affine map",
        "ResourceError",
        "found constant operands",
    ),
    ("tile for L3 allocation", "ResourceError", "segments in one launch"),
    ("failed to legalize operation 'airrt.dma_memcpy_nd'", "ResourceError", "no herd"),
    (
        "failed to link to any shim dma allocation",
        "ResourceError",
        "segments in one launch",
    ),
)
# NPU2 failures mlir-air documents that no compiler pass refuses (air/emu/resources.py), and flows
# chained on one DMA channel (below): the emulator refuses them, the compiler compiles them; counted
# apart, not as disagreements.
HAZARDS = ("odd trip count", "runtime_loop_tiling_sizes", "aircc lock race")
NOT_MODELLED = "not modelled"


@dataclasses.dataclass
class Outcome:
    spec: gen.Spec
    emu_refusals: list[str] = dataclasses.field(
        default_factory=list
    )  # "ErrorClass: message"
    hazards: list[str] = dataclasses.field(default_factory=list)
    not_modelled: list[str] = dataclasses.field(default_factory=list)
    emu_decisions: dict | None = None
    aircc_decisions: compiled.AirDecisions | None = None
    compiler_refused: str | None = None
    run: str = ""  # "PASS", or what went wrong
    # the compiled design in the simulator of the compiled design: "PASS", what went wrong, or "" (not run)
    sim: str = ""
    seconds: float = 0.0

    @property
    def disagreements(self) -> list[str]:
        out = []
        if self.aircc_decisions is not None and self.emu_decisions is not None:
            out += compiled.disagreements(self.aircc_decisions, self.emu_decisions)
        c, e, h = self.compiler_refused, self.emu_refusals, self.hazards
        if self.not_modelled:
            return out
        if c:
            if not (e or h):
                out.append(f"the compiler refuses ({c}); the emulator accepts")
            elif not any(same_reason(c, r) for r in e + h):
                out.append(
                    f"both refuse, for other reasons: compiler {c}; emulator {(e + h)[0]}"
                )
        elif e:
            out.append(f"the emulator refuses ({e[0]}); the compiler accepts")
        elif not h and self.run != "PASS":
            out.append(f"compiles, but the emulator's run: {self.run}")
        elif (
            not h
            and self.sim not in ("", "PASS")
            and not self.sim.startswith(SIM_REFUSES)
        ):
            out.append(
                f"the emulator runs it right, the compiled design as simulated does not: {self.sim}"
            )
        return out

    @property
    def verdict(self) -> str:
        if self.disagreements:
            return "disagree"
        if self.not_modelled:
            return "not modelled"
        if self.compiler_refused:
            return "both refuse"
        if self.hazards:
            return "hazard"
        return "both run"


CRASH = ("PLEASE submit a bug report", "(no message)", compiler.CRASHED)
# what the simulator of the compiled design refuses to run, naming it (docs/simulator.md)
SIM_REFUSES = "not simulated"


# each compiled design runs twice on one array, as XRT runs a design again (docs/simulator.md)
DISPATCHES = 2


def simulate(spec: gen.Spec, outdir: str) -> str:
    """The compiled design in outdir run by the simulator of the compiled design on the spec's input, from
    the instruction stream aiecc wrote, DISPATCHES times on one array: "PASS", how many output words are
    wrong (and on which dispatch), that it hangs, races or leaves data behind, or "not simulated: ..." for
    what the simulator refuses by name."""
    import aiesim

    inp, want = gen.io(spec)
    text = compiler.generic_form(os.path.join(outdir, "input_physical.mlir"))
    try:
        _, sim = aiesim.simulate(
            text, [inp, np.zeros_like(inp)], insts=outdir, dispatches=DISPATCHES
        )
    except aiesim.Hang:
        return "hangs"
    except aiesim.DesignError as e:
        return f"{SIM_REFUSES}: {str(e).splitlines()[0]}"
    except (aiesim.SimError, aiesim.InstsError) as e:
        return f"stops: {str(e).splitlines()[0]}"
    left = aiesim.leftovers(sim)
    if left:
        return f"leaves data behind: {left[0]}"
    for k, outs in enumerate(sim.dispatch_outputs, 1):
        bad = np.flatnonzero(outs[-1] != want)
        if bad.size:
            on = f" on dispatch {k} of {DISPATCHES}" if k > 1 else ""
            return f"{bad.size} of {want.size} output words wrong{on}"
    return "PASS"


def same_reason(compiler_error: str, emulator_error: str) -> bool:
    """Whether a refusal on both sides is for one reason (a compiler crash gives none: any refusal
    of the emulator's agrees with it)."""
    if any(c in compiler_error for c in CRASH):
        return True
    cls, _, msg = emulator_error.partition(": ")
    return any(
        c in compiler_error and cls == e_cls and e_frag.lower() in msg.lower()
        for c, e_cls, e_frag in REASONS
    )


def emulator_refusals(module, stack: int):
    """(decisions or None, refusals, hazards, not modelled): everything the emulator's static compile refuses in a
    design, each as "ErrorClass: first line", not only the first it would raise."""
    from air.emu.decisions import decisions
    from air.emu.engine import Options, Program
    from air.emu.errors import DesignError

    try:
        p = Program(
            module, Options(stack_size=stack, link=False, collect=True), check=False
        )
    except DesignError as e:
        return None, [f"{type(e).__name__}: {str(e).splitlines()[0]}"], [], []
    refusals = [
        f"{type(e).__name__}: {str(e).splitlines()[0]}" for e in p.compiler.collected
    ]
    hazards, not_modelled = [], []
    if p.budget.stack_problem:
        refusals.append(f"BudgetError: {p.budget.stack_problem}")
    for b in p.budget.herds + p.budget.segments:
        if not b.ok:
            level = "L1 per PE" if b.kind == "herd" else "L2 per segment"
            refusals.append(
                f"BudgetError: {level} of @{b.name}: {b.used} > {b.limit} bytes"
            )
    for short, detail in p.resources.problems:
        line = f"ResourceError: {detail.splitlines()[0]}"
        if short.startswith(NOT_MODELLED):
            not_modelled.append(line)
        else:
            (hazards if short.startswith(HAZARDS) else refusals).append(line)
    for t in p.resources.tiles:
        for what, used, limit in t.usage():
            if used > limit:
                line = f"ResourceError: {t.name}: needs {used} {what}, NPU2 has {limit}"
                # aircc does not refuse more flows than channels: it chains two on one channel
                # (TileDMAAllocator / MemTileDMAAllocator, AIRToAIESchedulingUtils.cpp ~1405-1410),
                # which the model refuses as a deadlock risk: a hazard, not a compile error
                (hazards if what.endswith("channels") else refusals).append(line)
    return decisions(p), refusals, hazards, not_modelled


def judge(spec: gen.Spec, outdir: str | None = None) -> Outcome:
    """One design through the emulator, air-opt and aircc + aiecc."""
    from air.emu.engine import Options, Program
    from air.emu.errors import EmulatorError

    t0 = time.perf_counter()
    res = Outcome(spec)
    module = gen.build(spec)
    text = str(module)
    (
        res.emu_decisions,
        res.emu_refusals,
        res.hazards,
        res.not_modelled,
    ) = emulator_refusals(module, spec.stack)
    try:
        res.aircc_decisions = compiled.air_decisions(text)
        with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
            compiler.compile_module(text, dict(stack_size=spec.stack), outdir or tmp)
            if not res.not_modelled:
                res.sim = simulate(spec, outdir or tmp)
    except compiler.CompileError as e:
        res.compiler_refused = str(e)
    if not (
        res.emu_refusals or res.hazards or res.not_modelled or res.compiler_refused
    ):
        inp, want = gen.io(spec)
        try:
            program = Program(module, Options(stack_size=spec.stack))
            _, got = program.run(inp, np.zeros_like(inp))
            bad = np.flatnonzero(got != want)
            res.run = (
                "PASS"
                if not bad.size
                else f"{bad.size} of {want.size} output words wrong, first at {bad[0]}"
            )
        except EmulatorError as e:
            res.run = str(e).splitlines()[0]
    res.seconds = time.perf_counter() - t0
    return res


def _judge_indexed(args):
    i, spec = args
    return i, judge(spec)


def run(specs: list[gen.Spec], jobs: int = 1, show=print) -> list[Outcome]:
    """Judge every spec (in `jobs` processes), printing each disagreement as it is found."""
    emu_testlib.build_kernels()
    os.environ["AIR_EMU_LIB_PATH"] = emu_testlib.BUILD
    out = [None] * len(specs)
    todo = list(enumerate(specs))
    if jobs > 1:
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            done = pool.imap_unordered(_judge_indexed, todo)
            for i, o in done:
                out[i] = o
                _show(i, o, show)
    else:
        for i, s in todo:
            out[i] = judge(s)
            _show(i, out[i], show)
    return out


def _show(i, o: Outcome, show):
    for d in o.disagreements:
        show(f"[{i}] DISAGREES: {d}\n      design: {o.spec.describe()}")


def tally(outcomes: list[Outcome]) -> str:
    c = Counter(o.verdict for o in outcomes)
    agree = len(outcomes) - c["disagree"]
    lines = [
        f"{len(outcomes)} designs: {agree} agree with the compiler, {c['disagree']} disagree",
        f"  both run (and the emulator's output is right): {c['both run']}",
        f"  both refuse, for the same reason: {c['both refuse']}",
        f"  compile; the emulator refuses a hazard (an NPU2 failure mlir-air documents, or two flows "
        f"chained on one DMA channel): {c['hazard']}",
        f"  not modelled (the emulator refuses, naming aircc's lowering it does not model): "
        f"{c['not modelled']}",
    ]
    reasons = Counter(
        o.compiler_refused.split(": ", 2)[-1][:70]
        for o in outcomes
        if o.compiler_refused and o.verdict == "both refuse"
    )
    for r, n in reasons.most_common():
        lines.append(f"    {n} x {r}")
    crashes = sum(
        1
        for o in outcomes
        if o.compiler_refused and any(c in o.compiler_refused for c in CRASH)
    )
    if crashes:
        lines.append(
            f"    (of which the compiler crashed on {crashes}: air-opt's crash, no reason)"
        )
    sims = Counter(
        (
            "right"
            if o.sim == "PASS"
            else "refused" if o.sim.startswith(SIM_REFUSES) else "wrong"
        )
        for o in outcomes
        if o.sim
    )
    lines.append(
        f"  compiled designs simulated: {sum(sims.values())}, output right {sims['right']}, "
        f"wrong / hang / race {sims['wrong']}, refused by the simulator {sims['refused']}"
    )
    unseen = sum(1 for o in outcomes if o.verdict == "hazard" and o.sim == "PASS")
    if unseen:
        lines.append(
            f"    hazards whose compiled form the simulator runs right (its one schedule does not "
            f"show them): {unseen}"
        )
    labelled = sum(
        1 for o in outcomes if o.aircc_decisions and o.aircc_decisions.labelled_loops
    )
    lines.append(f"  designs with a loop aircc labels for ping-pong: {labelled}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=200, help="how many designs (default 200)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--show", type=int, help="print design N's module and outcome")
    args = ap.parse_args(argv)
    missing = compiler.tools_missing()
    if missing:
        print(f"fuzz-aircc: {missing}", file=sys.stderr)
        return 2
    specs = gen.specs(args.n, args.seed)
    if args.show is not None:
        spec = specs[args.show]
        print(gen.build(spec))
        emu_testlib.build_kernels()
        os.environ["AIR_EMU_LIB_PATH"] = emu_testlib.BUILD
        o = judge(spec)
        print(spec, o, o.disagreements, sep="\n")
        return 0
    t0 = time.perf_counter()
    outcomes = run(specs, args.jobs)
    print(tally(outcomes))
    print(f"({time.perf_counter() - t0:.0f} s, seed {args.seed})")
    return 1 if any(o.disagreements for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
