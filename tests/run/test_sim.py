# SPDX-License-Identifier: MIT
"""The simulator of the compiled design (emulator/aiesim, issue 42).

Without the compiler: a small physical design written here in MLIR's generic form (one core writing a
buffer that its DMA sends to DDR through three switchboxes and a shim mux), run as it is and broken:
the output it must give, a hang reported agent by agent with the lock and the BD, a length disagreement
named, a lock past 63 refused, the time-out, and the reader's errors; an equal-acquire that leaves its
lock's value; a store without its lock and a release twice as races (lock ownership); words left in a
stream; seeded schedules giving the same output.

With the compiler: the project's small designs, compiled by aircc + aiecc and simulated, equal the
emulator's output bit for bit under three seeded schedules (host/sim_check.py; `make sim-all` runs every
default design), with one latent race (the GEMM drain probe's) and no other; every mutation of
host/sim_mutations.py is caught as its table says; and words left behind fail host/run.py --backend
sim, sim_costs.simulate_compiled and host/sim_check.py.
"""

import os
import re
import sys

import numpy as np
import pytest

import compiler_tools

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "emulator"))
import aiesim  # noqa: E402

# A core at (0, 2) waits for lock 0 (its buffer free), writes 7 into each of 4 i32 words, releases lock
# 1 (full) and ends; its DMA's MM2S 0 waits for lock 1, sends the buffer South through (0, 1) into the
# shim at (0, 0), whose S2MM 0 writes DDR; the runtime sequence starts that task and awaits it.
DESIGN = """
"builtin.module"() ({
  "aie.device"() <{device = 8 : i32, sym_name = "tiny"}> ({
    %0 = "aie.tile"() <{col = 0 : i32, row = 0 : i32}> : () -> index
    %1 = "aie.tile"() <{col = 0 : i32, row = 1 : i32}> : () -> index
    %2 = "aie.tile"() <{col = 0 : i32, row = 2 : i32}> : () -> index
    %3 = "aie.lock"(%2) <{init = FREE : i32, lockID = 0 : i32}> : (index) -> index
    %4 = "aie.lock"(%2) <{init = 0 : i32, lockID = 1 : i32}> : (index) -> index
    %5 = "aie.buffer"(%2) <{address = 1024 : i32, sym_name = "buf"}> : (index) -> memref<4xi32, 2 : i32>
    %6 = "aie.mem"(%2) ({
      %20 = "arith.constant"() <{value = 1 : i32}> : () -> i32
      %21 = "aie.dma_start"()[^bb1, ^bb2] <{channel_dir = 1 : i32, channel_index = 0 : i32, repeat_count = 0 : i32}> : () -> i1
    ^bb1:
      "aie.use_lock"(%4, %20) <{action = 2 : i32}> : (index, i32) -> ()
      "aie.dma_bd"(%5) <{bd_id = 0 : i32, static_len = 4 : i32, static_offset = 0 : i32}> : (memref<4xi32, 2 : i32>) -> ()
      "aie.use_lock"(%3, %20) <{action = 1 : i32}> : (index, i32) -> ()
      "aie.end"() : () -> ()
    ^bb2:
      "aie.end"() : () -> ()
    }) : (index) -> index
    %7 = "aie.core"(%2) ({
      %30 = "arith.constant"() <{value = 0 : index}> : () -> index
      %31 = "arith.constant"() <{value = 1 : index}> : () -> index
      %32 = "arith.constant"() <{value = 4 : index}> : () -> index
      %33 = "arith.constant"() <{value = 7 : i32}> : () -> i32
      %34 = "arith.constant"() <{value = RELEASE : i32}> : () -> i32
      %35 = "arith.constant"() <{value = 1 : i32}> : () -> i32
      "aie.use_lock"(%3, %35) <{action = 2 : i32}> : (index, i32) -> ()
      "cf.br"(%30)[^bb1] : (index) -> ()
    ^bb1(%36: index):
      %37 = "arith.cmpi"(%36, %32) <{predicate = 2 : i64}> : (index, index) -> i1
      "cf.cond_br"(%37)[^bb2, ^bb3] <{operandSegmentSizes = array<i32: 1, 0, 0>}> : (i1) -> ()
    ^bb2:
      "memref.store"(%33, %5, %36) : (i32, memref<4xi32, 2 : i32>, index) -> ()
      %38 = "arith.addi"(%36, %31) : (index, index) -> index
      "cf.br"(%38)[^bb1] : (index) -> ()
    ^bb3:
      "aie.use_lock"(%4, %34) <{action = 1 : i32}> : (index, i32) -> ()
      "aie.end"() : () -> ()
    }) {stack_size = 1024 : i32} : (index) -> index
    %8 = "aie.switchbox"(%2) ({
      "aie.connect"() <{dest_bundle = 3 : i32, dest_channel = 0 : i32, source_bundle = 1 : i32, source_channel = 0 : i32}> : () -> ()
      "aie.end"() : () -> ()
    }) : (index) -> index
    %9 = "aie.switchbox"(%1) ({
      "aie.connect"() <{dest_bundle = 3 : i32, dest_channel = 0 : i32, source_bundle = 5 : i32, source_channel = 0 : i32}> : () -> ()
      "aie.end"() : () -> ()
    }) : (index) -> index
    %10 = "aie.switchbox"(%0) ({
      "aie.connect"() <{dest_bundle = 3 : i32, dest_channel = 2 : i32, source_bundle = 5 : i32, source_channel = 0 : i32}> : () -> ()
      "aie.end"() : () -> ()
    }) : (index) -> index
    %11 = "aie.shim_mux"(%0) ({
      "aie.connect"() <{dest_bundle = 1 : i32, dest_channel = 0 : i32, source_bundle = 5 : i32, source_channel = 2 : i32}> : () -> ()
      "aie.end"() : () -> ()
    }) : (index) -> index
    "aie.shim_dma_allocation"(%0) <{channel_dir = 0 : i32, channel_index = 0 : i64, plio = false, sym_name = "out"}> : (index) -> ()
    "aie.runtime_sequence"() <{sym_name = "seq"}> ({
    ^bb0(%arg0: memref<8xi32>):
      %50 = "aiex.dma_configure_task_for"() <{alloc = @out, issue_token = true}> ({
        "aie.dma_bd"(%arg0) <{static_len = LEN : i32, static_offset = 0 : i32}> : (memref<8xi32>) -> ()
        "aie.end"() : () -> ()
      }) : () -> index
      "aiex.dma_start_task"(%50) : (index) -> ()
      "aiex.dma_await_task"(%50) : (index) -> ()
    }) : () -> ()
  }) : () -> ()
}) : () -> ()
"""


def tiny(free=1, release=1, length=4):
    return (
        DESIGN.replace("FREE", str(free))
        .replace("RELEASE", str(release))
        .replace("LEN", str(length))
    )


def run(text, **kw):
    out, sim = aiesim.simulate(text, [np.zeros(8, np.int32)], **kw)
    return out[0], sim


def test_a_design_runs_to_its_output():
    out, sim = run(tiny())
    assert out.tolist() == [7, 7, 7, 7, 0, 0, 0, 0]
    design = sim.design
    # the circuit traced through the switchboxes: the core's MM2S 0 reaches the shim's S2MM 0
    assert design.routes == {(0, 2, 0): [(0, 0, 0)]}
    assert [lk.value for lk in design.locks] == [1, 0]  # the DMA gave the buffer back


def test_a_lock_that_never_comes_is_a_hang_naming_the_lock():
    with pytest.raises(aiesim.Hang) as e:
        run(tiny(free=0))
    report = e.value.report
    assert report[0] == "runtime sequence @seq: awaits task %50 on tile (0, 0) S2MM 0"
    assert any(
        ln.startswith("core tile (0, 2): at line")
        and "acquire lock 0 of tile (0, 2) (%3) >= 1, it holds 0" in ln
        for ln in report
    )
    assert any(
        "tile (0, 2) MM2S 0: on BD 0 on buf" in ln and "lock 1 of tile (0, 2)" in ln
        for ln in report
    )


def equal_first(text):
    """The tiny design with an acquire-equal of 1 on the core's lock 0 before its AcquireGreaterEqual."""
    ge = '"aie.use_lock"(%3, %35) <{action = 2 : i32}> : (index, i32) -> ()'
    assert text.count(ge) == 1
    eq = '"aie.use_lock"(%3, %35) <{action = 0 : i32}> : (index, i32) -> ()'
    return text.replace(ge, eq + "\n      " + ge)


def test_an_equal_acquire_waits_for_its_value_and_leaves_it():
    # lock 0 holds 1: the acquire-equal of 1 passes and leaves 1, so the AcquireGreaterEqual after it
    # passes too (subtracting on the equal acquire, as the simulator once did, hangs here)
    out, sim = run(equal_first(tiny(free=1)))
    assert out.tolist() == [7, 7, 7, 7, 0, 0, 0, 0]
    assert [lk.value for lk in sim.design.locks] == [1, 0]
    # lock 0 holds 2: the acquire-equal of 1 waits for good, and the report says == (not >=)
    with pytest.raises(aiesim.Hang) as e:
        run(equal_first(tiny(free=2)))
    assert any(
        "acquire lock 0 of tile (0, 2) (%3) == 1, it holds 2" in ln
        for ln in e.value.report
    )


def test_lengths_that_disagree_name_the_bd_that_stalls():
    # the shim expects 5 words, the core's BD sends 4: the shim's BD waits for the fifth
    with pytest.raises(aiesim.Hang) as e:
        run(tiny(length=5))
    assert any(
        "tile (0, 0) S2MM 0: on a BD on %arg0 (offset 0, len 5): 16 of 20 bytes received"
        in ln
        for ln in e.value.report
    )


def test_a_store_without_its_lock_is_a_race_naming_the_line():
    # the core's acquire of lock 0 removed: its first store touches buf, which the DMA's BD guards with
    # locks 0 and 1 (the pair the BD acquires and releases)
    ge = '      "aie.use_lock"(%3, %35) <{action = 2 : i32}> : (index, i32) -> ()\n'
    text = tiny()
    assert text.count(ge) == 1
    with pytest.raises(aiesim.Race) as e:
        run(text.replace(ge, ""))
    assert str(e.value).startswith(
        "race: core tile (0, 2) at line 33 (memref.store) touches buf"
    )
    assert "lock 0 / lock 1 of tile (0, 2)" in str(e.value)
    # the release after the stores written twice: the second gives back what the core no longer holds
    rel = '      "aie.use_lock"(%4, %34) <{action = 1 : i32}> : (index, i32) -> ()\n'
    with pytest.raises(aiesim.Race, match=r"releases lock 1 .* by 1 holding 0"):
        run(text.replace(rel, rel + rel))


def test_seeded_schedules_vary_the_order_and_split_transfers():
    # the same output under every seed; the schedule differs (more steps: each transfer moves in pieces
    # with the other agents acting between them) and differs between seeds
    _, plain = run(tiny())
    steps = set()
    for seed in range(5):
        out, sim = run(tiny(), seed=seed)
        assert out.tolist() == [7, 7, 7, 7, 0, 0, 0, 0]
        assert sim.steps > plain.steps and not aiesim.leftovers(sim)
        steps.add(sim.steps)
    assert len(steps) > 1


def test_words_left_in_a_stream_are_reported():
    # the shim takes 3 words, the core's BD sends 4: the run ends with one word in the stream
    out, sim = run(tiny(length=3))
    assert out.tolist() == [7, 7, 7, 0, 0, 0, 0, 0]
    assert aiesim.leftovers(sim) == [
        "4 bytes left in the stream into tile (0, 0) S2MM 0"
    ]


def looping(text):
    """The tiny design as aiecc writes cores and tile DMAs: the core's body a loop (its lock acquire at the
    head, its release branching back), the DMA's BD chained to itself."""
    head = '      "aie.use_lock"(%3, %35) <{action = 2 : i32}> : (index, i32) -> ()\n'
    tail = '      "aie.use_lock"(%4, %34) <{action = 1 : i32}> : (index, i32) -> ()\n'
    end = '      "aie.end"() : () -> ()\n'
    bd_tail = (
        '      "aie.use_lock"(%3, %20) <{action = 1 : i32}> : (index, i32) -> ()\n'
    )
    for x in (head, tail + end, bd_tail + end):
        assert text.count(x) == 1
    return (
        text.replace(head, '      "cf.br"()[^bb4] : () -> ()\n    ^bb4:\n' + head)
        .replace(tail + end, tail + '      "cf.br"()[^bb4] : () -> ()\n')
        .replace(bd_tail + end, bd_tail + '      "aie.next_bd"()[^bb1] : () -> ()\n')
    )


def test_several_dispatches_run_on_the_array_the_last_one_left():
    # a core whose body ends (aie.end) has halted when the second dispatch comes: nothing restarts it,
    # and the second dispatch hangs with the report naming it
    out, sim = run(tiny(), dispatches=1)
    assert out.tolist() == [7, 7, 7, 7, 0, 0, 0, 0]
    with pytest.raises(aiesim.Hang) as e:
        run(tiny(), dispatches=2)
    report = e.value.report
    assert report[0].startswith("on dispatch 2 of 2")
    assert (
        "core tile (0, 2): its body ended on an earlier dispatch, and nothing starts it again"
        in report
    )
    assert (
        "tile (0, 2) MM2S 0: its BD chain ended on an earlier dispatch, and nothing starts it again"
        in report
    )
    # a core that loops, as every compiled core does, serves every dispatch: the locks stay where they
    # were (the buffer back with its DMA), and each dispatch's output is its own copy
    for seed in (None, 0):
        out, sim = aiesim.simulate(
            looping(tiny()), [np.full(8, -1, np.int32)], seed=seed, dispatches=3
        )
        assert [o[0].tolist() for o in sim.dispatch_outputs] == [[7] * 4 + [-1] * 4] * 3
        assert len(sim.dispatch_cycles) == 3 and not aiesim.leftovers(sim)
    # a dispatch count below one is refused
    with pytest.raises(ValueError, match="dispatches 0"):
        run(tiny(), dispatches=0)


def test_a_lock_released_past_63_is_refused():
    # the core holds 1 of the lock pair that guards buf and releases 64: the ownership rule sees it first
    with pytest.raises(
        aiesim.Race, match=r"releases lock 1 .* by 64 holding 1 of its group"
    ):
        run(tiny(release=64))
    # without that rule, the 6-bit lock's limit
    sim = aiesim.Simulator(aiesim.load(aiesim.parse(tiny(release=64)))[0])
    sim.check_ownership = False
    with pytest.raises(aiesim.SimError, match="past 63"):
        sim.run([np.zeros(8, np.int32)])


def test_the_time_out_counts_steps():
    design = aiesim.load(aiesim.parse(tiny()))[0]
    with pytest.raises(aiesim.SimError, match="no end after 2 steps"):
        aiesim.Simulator(design).run([np.zeros(8, np.int32)], max_steps=2)


def test_the_timed_mode_prices_streams_and_locks():
    _, sim = run(tiny(), costs=aiesim.Costs(bd_setup=10, lock=1), trace=True)
    # 16 bytes at 8 a cycle on each of the two BDs' streams, their setups and the locks
    assert 2 + 10 <= sim.end_t <= 2 * 2 + 2 * 10 + 8
    kinds = {(name, kind) for name, kind, *_ in sim.trace}
    assert ("tile (0, 2) MM2S 0", "bd") in kinds and (
        "tile (0, 0) S2MM 0",
        "bd",
    ) in kinds


def test_text_that_is_not_the_generic_form_is_refused_with_the_line():
    with pytest.raises(
        aiesim.ParseError, match="line 2: expected an op name in quotes"
    ):
        aiesim.parse(
            '"builtin.module"() ({\n  aie.device(npu2) {\n    %0 = aie.tile(0, 2)\n'
        )


# -- the compiled designs ----------------------------------------------------------------------------


@pytest.mark.slow
def test_the_small_designs_simulate_bit_for_bit_as_the_emulator_runs_them(
    record_property,
):
    compiler_tools.require()
    from host import sim_check

    small = [c for c in sim_check.cases() if c.name.startswith(sim_check.SMALL)]
    assert len(small) == 9  # with a module of two launches, run device by device
    hazards = {}
    for case in small:
        r = sim_check.check(case)
        assert r.equal, f"{case.name}: {r.detail}"
        if r.hazards:
            hazards[case.name] = r.hazards
        record_property("aircc_compiled", case.name)
    # no race, and one latent race, a finding the lock-ownership rule makes on its own: the GEMM drain
    # probe drains in place into the buffer its S2MM fills (lock pair 3 / 2) and its MM2S sends (lock pair
    # 0 / 1); the core releases the fill's lock before the send, so the fill's next BD holds the buffer
    # while the send reads it (issue 51's first aircc class; harmless in one dispatch: no second input)
    [(name, [note])] = hazards.items()
    assert name.startswith("bring-up probe probe_drain_mv_int4_bf16_gemm"), name
    assert note.startswith("tile (0, 2) MM2S 0 on BD 0 on buf0") and (
        "while tile (0, 2) S2MM 0 on BD 1 on buf0" in note
    ), note


def test_every_mutation_of_a_compiled_design_is_caught():
    compiler_tools.require()
    from host import sim_mutations

    text, arrays, out = sim_mutations.run1x1_case()
    # each of the core body's AcquireGreaterEqual has a row of its own (issue 51, item 2)
    assert sim_mutations.core_acquires(text) == 5
    rows = {name: (expect, got) for name, expect, got in sim_mutations.table()}
    for name, (expect, got) in rows.items():
        if expect.startswith("harmless"):
            assert got.startswith("same C"), (name, got)
        else:
            assert got.startswith(expect.split(":")[0]), (name, expect, got)
    # an acquire whose release comes only on the next dispatch: the first dispatch never returns, and the
    # report names the core at the acquire it added (lock 2, W's full lock, holding 0)
    [got] = [
        g for n, (_, g) in rows.items() if n.startswith("an acquire whose release")
    ]
    # (each row runs from the instruction stream: the host's wait is the stream's sync on C's channel)
    assert (
        "at insts_gemm_seg_matmul_int4_packed.bin byte offset 404: sync waits for a task-completion "
        "token of tile (0, 0) S2MM 0" in got
    )
    assert (
        "core tile (0, 2): at line 89: acquire lock 2 of tile (0, 2) (%8) >= 1, it holds 0"
        in got
    )
    # the accumulator zeroed once: right on one dispatch, wrong on the second of two
    baseline = aiesim.simulate(text, [a.copy() for a in arrays])[0][out]
    once = sim_mutations.zero_once(text)
    assert sim_mutations.outcome(once, arrays, out, baseline, dispatches=1) == "same C"
    [got] = [
        g for n, (_, g) in rows.items() if n.startswith("the accumulator's zeroing")
    ]
    assert got.startswith("wrong C on dispatch 2 of 2 (the first right): "), got
    # an interleaving the deterministic order does not take: the swapped BD ids under seed 0 fill a slot
    # while the core computes on it, which the ownership rule sees as a race (wrong C without a seed)
    got = sim_mutations.outcome(
        sim_mutations.swap_bd_ids(text), arrays, out, baseline, seed=0
    )
    assert got.startswith("race: ") and "while tile (0, 2) S2MM 0" in got, got


RUN1X1 = (
    "--m 64 --k 512 --n 64 --tile-m 64 --tile-n 64 --tile-k-l1 64 --tile-k-l2 512 --herd-m 1 "
    "--herd-n 1"
).split()


def test_words_left_behind_fail_the_run_everywhere(monkeypatch, capsys, tmp_path):
    # run1x1 compiled, its runtime sequence starting A's task twice (in the dialect-level sequence and in
    # the instruction stream): the same C, the second copy still on its way when the sequence ends.
    # host/run.py --backend sim, simulate_compiled and sim_check each fail it.
    compiler_tools.require()
    from host import run as host_run
    from host import sim_check, sim_mutations
    from int4awq.design import compiler
    from int4awq.errors import RunFailure
    from int4awq.run import sim_costs

    text, arrays, _, outdir = sim_mutations.run1x1_case(folder=True)
    folder = sim_mutations.mutated_folder(
        outdir,
        str(tmp_path / "mutated"),
        text,
        sim_mutations.start_twice,
        sim_mutations.start_twice_insts,
    )
    monkeypatch.setattr(compiler, "compile_first", lambda *a, **k: ("cached", folder))
    with pytest.raises(RunFailure, match="leaves data behind") as e:
        sim_costs.simulate_compiled(folder, arrays, aiesim.Costs())
    assert "tile (0, 0) MM2S 0 has 1 started task(s) not finished" in str(e.value)

    assert host_run.main([*RUN1X1, "--backend", "sim"]) == 1
    out = capsys.readouterr().out
    assert "leaves data behind" in out and out.rstrip().endswith("FAIL!")

    [case] = [c for c in sim_check.cases() if c.name == "make run1x1"]
    r = sim_check.check(case)
    assert not r.equal and "left behind: tile (0, 0) MM2S 0" in r.detail

    # and the XRTBackend's executor (make upstream-check RUN_ARGS=--sim)
    from air.backend.abc import AirBackendError
    from host import sim_invoke

    with pytest.raises(AirBackendError, match="leaves data behind"):
        sim_invoke.run("the module", {}, arrays)


def test_a_design_wrong_only_on_its_second_dispatch_fails(
    monkeypatch, capsys, tmp_path
):
    # run1x1 compiled, its core zeroing the accumulator once when it starts instead of on every trip of
    # its loop: the first dispatch is right, the second accumulates onto the first's drained C. The
    # references are independent of the simulator: host/run.py's numpy GEMM and the emulator's output.
    compiler_tools.require()
    from host import run as host_run
    from host import sim_check, sim_mutations
    from int4awq.design import compiler

    text, arrays, _, outdir = sim_mutations.run1x1_case(folder=True)
    folder = sim_mutations.mutated_folder(
        outdir, str(tmp_path / "mutated"), text, sim_mutations.zero_once, lambda d: d
    )
    monkeypatch.setattr(compiler, "compile_first", lambda *a, **k: ("cached", folder))
    # one dispatch: right against the reference GEMM
    assert host_run.main([*RUN1X1, "--backend", "sim", "--dispatches", "1"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("PASS!")
    # two (the default): the second dispatch's C fails the run
    assert host_run.main([*RUN1X1, "--backend", "sim", "--schedules", "1"]) == 1
    out = capsys.readouterr().out
    assert "dispatch 2 of 2 under the deterministic order gives" in out
    assert out.rstrip().endswith("FAIL!")
    # sim_check: the emulator's C equals the first dispatch's under each seed and not the second's
    [case] = [c for c in sim_check.cases() if c.name == "make run1x1"]
    r = sim_check.check(case, seeds=(0,))
    assert not r.equal and r.detail.startswith("dispatch 2: output 2: "), r.detail
    assert "dispatch 1:" not in r.detail
    # the XRTBackend's executor (make upstream-check RUN_ARGS=--sim) dispatches twice: the second
    # dispatch's C fails it; one dispatch (AIR_SIM_DISPATCHES=1) passes with the first's
    from air.backend.abc import AirBackendError
    from host import sim_invoke

    with pytest.raises(AirBackendError) as e:
        sim_invoke.run("the module", {}, [a.copy() for a in arrays])
    assert str(e.value).startswith(
        "the compiled design's argument 2 differs on dispatch 2 of 2: "
    ), str(e.value)
    monkeypatch.setenv("AIR_SIM_DISPATCHES", "1")
    outs = sim_invoke.run("the module", {}, [a.copy() for a in arrays])
    want = aiesim.simulate(text, [a.copy() for a in arrays], insts=outdir)[0][2]
    assert np.array_equal(
        outs[2].view(np.uint8), np.asarray(want).view(np.uint8).reshape(-1)
    )


def test_backend_sim_runs_a_make_target_and_writes_its_trace(tmp_path):
    compiler_tools.require()
    import json

    import host_args

    trace = tmp_path / "t.json"
    code, out, err = host_args.run(
        *"--m 64 --k 512 --n 64 --tile-m 64 --tile-n 64 --tile-k-l1 64 --tile-k-l2 512".split(),
        *"--herd-m 1 --herd-n 1 --backend sim --trace".split(),
        str(trace),
    )
    assert code == 0, out + err
    assert "simulated the compiled design" in out and "MODELLED NPU2 time" in out
    # what it ran, in one line: the instruction stream, two dispatches (the default), the seeds
    [line] = [x for x in out.splitlines() if x.startswith("simulated: ")]
    assert re.fullmatch(
        r"simulated: build/aircc-runs/\w+/insts_\w+\.bin, 2 dispatches, seeds 0, 1, 2 and "
        r"the deterministic order \(timed\)",
        line,
    ), line
    # the timed line: what that stream costs a dispatch over the control path, its words at 30 ns
    stream = os.path.join(REPO, line.split()[1].rstrip(","))
    words = os.path.getsize(stream) // 4
    [timed] = [
        x for x in out.splitlines() if x.startswith("simulated the compiled design")
    ]
    found = re.search(
        r"; its instruction stream (\d+) words, ([\d.]+) us a dispatch over the control path "
        r"\(MODELLED, 30 ns a word: an estimate fitted to iree-amd-aie #1187\)$",
        timed,
    )
    assert found and int(found.group(1)) == words, timed
    assert float(found.group(2)) == pytest.approx(words * 0.030, abs=0.006)
    # three seeded schedules by default (seeds --seed .. --seed + 2), the same C from each
    assert "and 3 seeded (seeds 0..2), the same C from each" in out
    assert out.rstrip().endswith("PASS!")
    events = json.loads(trace.read_text())["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert "core tile (0, 2)" in tracks and "tile (0, 0) S2MM 0" in tracks
    calls = [e for e in events if e.get("cat") == "call"]
    assert {e["name"] for e in calls} == {
        "zero_vectorized_f32_mn",
        "matmul_int4_bf16_packed_f32",
        "f32_to_bf16_mn",
    }


def test_schedules_without_the_simulator_is_one_line_and_exit_2():
    import host_args

    code, out, err = host_args.run("--backend", "emu", "--schedules", "2")
    assert code == 2 and "--schedules 2: a number of seeded schedules" in err


def test_a_bad_dispatch_count_is_one_line_and_exit_2(capsys):
    import host_args
    from host import run as host_run
    from host import sim_check

    code, out, err = host_args.run("--backend", "sim", "--dispatches", "0")
    assert code == 2 and err == (
        "error: --dispatches 0: a number of dispatches (>= 1) for --backend sim\n"
    )
    assert host_run.main(["--backend", "sim", "--dispatches", "-1"]) == 2
    assert sim_check.main(["--dispatches", "-1"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "error: --dispatches -1: a number of dispatches (>= 1) for --backend sim",
        "sim-all: --dispatches -1: a number of dispatches (>= 1)",
    ]


def test_trace_without_the_simulator_is_one_line_and_exit_2():
    import host_args

    code, out, err = host_args.run("--backend", "emu", "--trace", "x.json")
    assert code == 2 and "--trace writes the simulator's timeline" in err


@pytest.mark.slow
def test_the_resident_a_moves_what_ddr_bytes_counts_as_compiled(monkeypatch):
    """n_per_segment 2 (A filled once per M block, re-sent by refeed), compiled and run by the simulator
    in timed mode as host/bench.py --sim runs it: the bytes its shim channels move equal
    DesignConfig.ddr_bytes(), which counts A once per launch iteration along N."""
    compiler_tools.require()
    import dataclasses

    from host import sim_check
    from host.run import builder_of, compile_design, emulator_backend
    from int4awq.design import compiler
    from int4awq.run import sim_costs

    [case] = [c for c in sim_check.cases() if c.name == sim_check.RESIDENT_NAME]
    cfg = sim_check.RESIDENT
    emulator_backend(cfg)
    import aiesim
    from aiesim import engine

    outdir = compile_design(
        cfg, builder_of(cfg).build_module(**cfg.builder_args()), quiet=True
    )
    moved = []
    ddr = engine.Simulator.ddr

    def counted(self, t, nbytes):
        moved.append(nbytes)
        return ddr(self, t, nbytes)

    monkeypatch.setattr(engine.Simulator, "ddr", counted)
    text = compiler.generic_form(os.path.join(outdir, "input_physical.mlir"))
    aiesim.simulate(
        text, None, costs=sim_costs.costs(cfg), run_kernels=False, insts=outdir
    )
    assert sum(moved) == cfg.ddr_bytes()
    one = dataclasses.replace(cfg, n_per_segment=1)
    assert (
        one.ddr_bytes() - cfg.ddr_bytes() == cfg.m * cfg.k * 2 * 2
    )  # 4 N blocks: A 2x less
    assert case.name == sim_check.RESIDENT_NAME
