# SPDX-License-Identifier: MIT
"""The compiler judges the emulator on designs nobody wrote by hand (host/aircc_fuzz.py, issue 40).

* Each disagreement a generated run found, fixed, as a regression: the design, what aircc or aiecc says
  of it (recorded here from the compiler, with the line of mlir-air or mlir-aie that decides), and that
  the emulator now says the same. With the compiler installed the recorded verdict is checked against it
  too, so a record cannot drift from the compiler it stands for.
* A sample of generated designs, all of which must agree (`make fuzz-aircc N=...` runs many more).
"""

import os

import pytest

import compiler_tools
from host import aircc_fuzz as fuzz
from host import generated_designs as gen
from host.generated_designs import Buffer, Spec

L1_OVER = "allocated buffers exceeded available memory"

# (spec, the compiler's verdict: None = compiles, else a fragment of its first error,
#  the emulator's: "run" = runs to the right output, "hazard", "not modelled", or its refusal's fragment,
#  aircc's ping-pong doubling {type: count} or None to skip)
CASES = {
    # isPingPongCandidate (AIRDependencyScheduleOpt.cpp ~1755-1790) counts channel gets only; a store
    # is a definite first write (isDefiniteWrite ~1645-1654): both buffers doubled, 2 x 2 x 20 KiB over
    "store first, 2 trips, two 20 KiB buffers: doubled, over": (
        Spec((1, 1), (2,), (Buffer(5120, 0, "store", 1), Buffer(5120, 0, "dma"))),
        L1_OVER,
        "per PE",
        {"memref<5120xi32, 2 : i32>": 2},
    ),
    "store first, 2 trips, 10 + 20 KiB: doubled, fits": (
        Spec((1, 1), (2,), (Buffer(2560, 0, "store", 1), Buffer(5120, 0, "dma"))),
        None,
        "run",
        {"memref<2560xi32, 2 : i32>": 1, "memref<5120xi32, 2 : i32>": 1},
    ),
    # two DMAs into one buffer in an iteration: two gets, not a candidate; the buffer, filled in pieces
    # and sent in the same loop of 2 trips with one slot, is an aircc lock race (test_lock_races.py)
    "two fills per iteration: not doubled": (
        Spec((1, 1), (2,), (Buffer(3072, 0, "dma", 2),)),
        None,
        "hazard",
        {},
    ),
    # runLoopUnroll (~3739-3765) keeps an odd count's one-trip epilogue with its own alloc: three copies
    "3 trips, two 12 KiB buffers: three copies each, over": (
        Spec((1, 1), (3,), (Buffer(3072, 0, "dma"), Buffer(3072, 0, "dma"))),
        L1_OVER,
        "per PE",
        {"memref<3072xi32, 2 : i32>": 2},
    ),
    "3 trips, two 10 KiB buffers: three copies each, fits (the odd count is a hazard)": (
        Spec((1, 1), (3,), (Buffer(2560, 0, "dma"), Buffer(2560, 0, "dma"))),
        None,
        "hazard",
        {"memref<2560xi32, 2 : i32>": 2},
    ),
    # AIRHerdPlacementPass.cpp ~228-245: every unplaced segment gets the whole device from column 0
    "two segments in one launch": (
        Spec((1, 1), (1,), (Buffer(513, 0, "store"),), segments=2),
        "tile for L3 allocation",
        "segments in one launch",
        None,
    ),
    # two gets of one buffer in one round, sent back by DMA in the same round: the send's BD acquires 2
    # tokens, the core releases 1 (docs/emulator.md#aircc-lock-races)
    "two gets a round, one send": (
        Spec((1, 1), (1,), (Buffer(64, 0, "get", 2),)),
        None,
        "hazard",
        None,
    ),
    # AIRRtToNpuPass.cpp DmaToNpuPattern (~554-590): a runtime DMA lowers only through the shim
    # allocation air-to-aie makes for a herd's flows
    "a segment with no herd": (
        Spec((1, 1), (1,), (Buffer(64, 0, "dma"),), herdless=True),
        "failed to legalize operation 'airrt.dma_memcpy_nd'",
        "no herd",
        None,
    ),
    "two launches of one segment each": (
        Spec((1, 1), (1,), (Buffer(513, 0, "store"),), launches=2),
        None,
        "run",
        None,
    ),
    # AIRDmaToChannel.cpp ~1570-1745: more herd <-> L3 channels one way than a column's 2 become packets
    "three L3 input channels: packet flows": (
        Spec(
            (2, 2),
            (2,),
            (Buffer(64, 0, "dma"), Buffer(64, 0, "get"), Buffer(64, 0, "dma")),
        ),
        None,
        "not modelled",
        None,
    ),
    "two L3 input channels: streams": (
        Spec((2, 2), (2,), (Buffer(64, 0, "dma"), Buffer(64, 0, "get"))),
        None,
        "run",
        None,
    ),
    # aie.dma_bd's verifier: dimension sizes <= 512 at mlir-aie 7e00b57 ("Size may not exceed 1023"),
    # after AIR splits a size over 1023 by its smallest factor; the memtile read folds the loop in
    "memtile BD [10 x 1024]: AIR splits 1024 into 2 x 512": (
        Spec((1, 1), (5, 2), (Buffer(1024, 1, "dma", 2, via_l2="rows"),)),
        None,
        "hazard",  # ten rounds of two pieces in one slot: a lock race
        None,
    ),
    "memtile BD [10 x 4096]: 2048 into 4 x 512": (
        Spec((1, 1), (5, 2), (Buffer(4096, 1, "dma", 2, via_l2="rows"),)),
        None,
        "hazard",  # ten rounds of two pieces in one slot: a lock race
        None,
    ),
    "memtile BD [10 x 1026]: 513": (
        Spec((1, 1), (5, 2), (Buffer(1026, 1, "dma", 2, via_l2="rows"),)),
        "Size may not exceed 1023",
        "Size may not exceed",
        None,
    ),
    "memtile BD [10 x 3072]: 1536 into 2 x 768": (
        Spec((1, 1), (5, 2), (Buffer(3072, 1, "dma", 2, via_l2="rows"),)),
        "Size may not exceed 1023",
        "Size may not exceed",
        None,
    ),
    # the compute tile's BD length field: 14 bits of 32-bit words
    "an L1 transfer of 16384 words": (
        Spec((1, 1), (1,), (Buffer(16384, 0, "dma"),)),
        "exceeds the maximum of 16383 words",
        "BD length",
        None,
    ),
    # aiecc keeps the stack at 0 and buffers from 0x4000: a stack over one bank overlaps them
    "stack 16384": (
        Spec((1, 1), (2,), (Buffer(64, 0, "dma"),), stack=16384),
        None,
        "run",
        None,
    ),
    "stack 16400, small buffers: the bank-aware placement puts them at 0x4000": (
        Spec((1, 1), (2,), (Buffer(64, 0, "dma"),), stack=16400),
        "overlaps with stack",
        "overlaps with stack",
        None,
    ),
    "stack 16400, a 20 KiB buffer: no bank holds it, placed after the stack": (
        Spec((2, 1), (1,), (Buffer(5120, 0, "store"),), stack=16400),
        None,
        "run",
        None,
    ),
    # air-split-l2-memref rebases a flat L2 buffer's herd-side offsets (AIRMiscPasses.cpp ~1999-2006)
    "a split flat L2 buffer read at an offset mixing the herd id and a loop": (
        Spec((4, 4), (5,), (Buffer(511, 0, "dma", via_l2="flat"),)),
        "found constant operands to affine map",
        "found constant operands",
        None,
    ),
    "the same buffer laid out [x, y, data]: split cleanly": (
        Spec((4, 4), (2,), (Buffer(512, 0, "dma", via_l2="rows"),)),
        None,
        "run",
        None,
    ),
}


@pytest.fixture(scope="module")
def kernels():
    import emu_testlib

    os.environ["AIR_EMU_LIB_PATH"] = emu_testlib.build_kernels()


def _emulator_says(o: fuzz.Outcome) -> str:
    if o.not_modelled:
        return "not modelled"
    if o.emu_refusals:
        return " | ".join(o.emu_refusals)
    if o.hazards:
        return "hazard"
    return "run" if o.run == "PASS" else o.run


@pytest.mark.parametrize("name", list(CASES))
def test_the_emulator_says_what_the_compiler_says(
    name, kernels, tmp_path, record_property
):
    spec, compiler_says, emulator_says, doubled = CASES[name]
    from air.emu.engine import Options, Program

    module = gen.build(spec)
    decisions, refusals, hazards, not_modelled = fuzz.emulator_refusals(
        module, spec.stack
    )
    o = fuzz.Outcome(spec, refusals, hazards, not_modelled, decisions)
    if not (refusals or hazards or not_modelled):
        inp, want = gen.io(spec)
        _, got = Program(module, Options(stack_size=spec.stack)).run(inp, inp * 0)
        o.run = "PASS" if (got == want).all() else "wrong output"
    assert emulator_says in _emulator_says(o), _emulator_says(o)
    if doubled is not None:
        assert {k[len("L1 ") :]: n for k, n in decisions["doubled"].items()} == doubled
    if compiler_tools.MISSING is None or compiler_tools.IN_CI:
        compiler_tools.require()
        judged = fuzz.judge(spec, str(tmp_path))
        record_property("aircc_generated", 1)
        if compiler_says is None:
            assert judged.compiler_refused is None, judged.compiler_refused
        else:
            assert compiler_says in (judged.compiler_refused or ""), judged
        if doubled is not None:
            assert {
                t: n for (_, t), n in judged.aircc_decisions.doubled.items()
            } == doubled
        assert judged.disagreements == []


@pytest.mark.slow
def test_a_sample_of_generated_designs_agrees_with_the_compiler(
    kernels, record_property
):
    compiler_tools.require()
    outcomes = fuzz.run(gen.specs(40, seed=12), jobs=1, show=lambda *a: None)
    tally = fuzz.tally(outcomes)
    record_property("aircc_generated", len(outcomes))
    assert all(o.verdict != "disagree" for o in outcomes), tally
    # the sample reaches both sides of the verdict and both ways of agreeing
    verdicts = {o.verdict for o in outcomes}
    assert {"both run", "both refuse"} <= verdicts, tally
