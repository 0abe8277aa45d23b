# SPDX-License-Identifier: MIT
"""Issue 51, "What it shows" (docs/sim_shows.md): two failures mlir-air documents on NPU2, each compiled by
aircc + aiecc and run by the simulator from the instruction stream aiecc wrote (host/sim_shows.py).

* The small-herd [2, 2] fold (mlir-air bfp16/run.py): NOT shown. The device aiecc places is the same under
  [2, 2] and [1, 1]; only the instruction stream differs (one S2MM task for C of every launch iteration of
  a tile, one sync), and the simulator runs it to the output [1, 1] gives, every launch iteration written.
* An odd trip count of a ping-ponged loop (EltwiseAdd_bf16, fused_decode_qwen.py): SHOWN. aircc gives each
  buffer three slots and each DMA a ring of three BDs walked in order, while the core's unrolled body uses
  the slots 0, 1, 0, 1, ..., 2: past three trips the core and the DMAs disagree on the slot, and the
  simulator gives wrong rows (deterministic order, ownership check off) or names the race.

Needs the compiler: skipped without it (tests/compiler_tools.py), failed in CI.
"""

import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for _p in (
    REPO,
    os.path.join(REPO, "emulator"),
    os.path.join(REPO, "emulator", "tests", "designs"),
):
    if _p not in sys.path:
        sys.path.insert(0, _p)

needs_compiler = pytest.mark.usefixtures("compiler_required")


@needs_compiler
def test_the_small_herd_fold_runs_right_from_its_instruction_stream():
    from host import sim_shows

    # herd 1x2 over a [2, 1] launch grid: under [2, 2] one 8192-word S2MM task writes C of both launch
    # iterations, one sync waits for it; under [1, 1] a 4096-word task and a sync per launch iteration
    r = sim_shows.small_herd(128, 128, 1, 2, seeds=(None, 0), kernels=False)
    assert r[
        "same_device"
    ], "aiecc placed a different device under [2, 2] than under [1, 1]"
    folded, unrolled = r["tiling"][(2, 2)], r["tiling"][(1, 1)]
    c_pushes = [x for x in folded["streams"] if "push (0, 0) S2MM 0" in x]
    assert len(c_pushes) == 1 and "8192 words" in c_pushes[0], folded["streams"]
    assert sum(" sync " in x for x in folded["streams"]) == 1
    assert sum(" sync " in x for x in unrolled["streams"]) == 2
    for t in (folded, unrolled):
        for seed, res in t["runs"].items():
            assert "error" not in res, res
            assert res["unwritten"] == [[0], [0]], (seed, res)
            assert not res["leftovers"], res
    assert all(r["equal"].values())


@needs_compiler
def test_the_herd_2x2_fold_repeats_one_s2mm_task_over_the_iteration_dimension():
    from host import sim_shows

    # herd 2x2 over [2, 2] (bfp16/run.py's documented shape): one S2MM task, repeat 1, BD iteration wrap
    # 2 and step 16384 words (a launch row of C), and the simulator writes all four launch iterations
    r = sim_shows.small_herd(256, 256, 2, 2, seeds=(None,), kernels=False)
    folded = r["tiling"][(2, 2)]
    [push] = [x for x in folded["streams"] if "push (0, 0) S2MM 0" in x]
    assert "iteration 2/16384" in push and "repeat 1, token 1" in push, push
    assert folded["runs"][None]["unwritten"] == [[0, 0], [0, 0]]


@needs_compiler
@pytest.mark.parametrize("trips", [5, 11])
def test_an_odd_trip_count_of_a_ping_ponged_loop_is_shown(trips):
    from host import sim_shows

    r = sim_shows.odd_trips(trips, seeds=(None, 0))
    ring = r["ring"]
    # three slots: every free lock starts at 3, every DMA walks a ring of three BDs
    assert sorted(ring["locks"].values()) == [0, 0, 0, 3, 3, 3], ring["locks"]
    assert all(len(bds) == 3 for bds in ring["chains"].values()), ring["chains"]
    # the core's unrolled body takes slots 0 and 1, the epilogue slot 2: S2MM 0's ring is slot 0, 1, 2
    s2mm0 = [buf for _, buf, _ in ring["chains"]["S2MM 0"]]
    loads = [x.split()[1] for x in ring["core"] if x.startswith("load")]
    assert loads[0::2] == s2mm0, (loads, s2mm0)
    # every schedule: a wrong row or the race named
    for seed, res in r["runs"].items():
        assert "error" in res and "race" in res["error"] or res["wrong_rows"], (
            seed,
            res,
        )
    # what the compiled protocol computes: row 2 (the third trip) never gets its sum
    assert 2 in r["unchecked"]["wrong_rows"], r["unchecked"]


@needs_compiler
@pytest.mark.parametrize("trips", [3, 4, 12])
def test_three_trips_and_even_counts_come_back_right(trips):
    from host import sim_shows

    r = sim_shows.odd_trips(trips, seeds=(None, 0))
    for seed, res in r["runs"].items():
        assert res == {"wrong_rows": [], "hazards": 0}, (seed, res)
    assert r["unchecked"]["wrong_rows"] == []
