# SPDX-License-Identifier: MIT
"""The kernel cost model (int4awq/design/kernel_cost.py): its terms, its fit, its calibration data and the table
of our kernel's profiles."""

import json
import re

import numpy as np
import pytest

from int4awq.design import kernel_cost as kc
from int4awq.design import model


def loop(line, entries, peak_in=0, peak_out=0, **ops):
    full = {s: 0 for s in kc.VECTOR + ("SCALAR",)}
    full.update(ops)
    return {
        "line": line,
        "entries": entries,
        "ops": full,
        "peak_in": peak_in,
        "peak_out": peak_out,
    }


def test_a_loop_runs_at_its_busiest_slot_with_two_load_units():
    assert kc.loop_bound(loop(1, 1, MAC=100, LOAD=150, STORE=20)) == 100
    assert kc.loop_bound(loop(1, 1, MAC=100, LOAD=260)) == 130


def test_streams_beyond_the_fifo_registers_are_counted_as_spilled_accesses():
    # 2 input and 1 output stream fit: nothing spills
    assert kc.spilled_accesses(loop(1, 1, 2, 1, LOAD=90, STORE=30)) == 0
    # 4 inputs on 2 FIFOs: half the loads; 2 outputs on 1 FIFO: half the stores
    assert kc.spilled_accesses(loop(1, 1, 4, 2, LOAD=80, STORE=30)) == 40 + 15


def test_accumulator_bits_beyond_the_registers_cost_a_store_and_a_reload_per_512():
    spilling = dict(loop(1, 1, LOAD=10), acc_spill_bits=2048)
    assert kc.spilled_accesses(spilling) == 2 * 4


@pytest.mark.parametrize(
    "iterations, mac, hazards, why, cycles",
    [
        # at the largest II: 4 iterations of II 60 and one more to fill and drain two stages
        (4, 4 * 60, [], None, 5 * 60),
        (
            4,
            4 * 61,
            [],
            "II 61 > 60",
            4 * 2 * 61,
        ),  # one past it: each iteration spans two stages
        (1, 61, [], None, 61),  # one iteration per entry: nothing to overlap
        (
            0,
            4 * 61,
            [],
            None,
            4 * 61,
        ),  # iterations not seen (an upstream kernel's loop)
        (4, 8, ["a remainder (%)"], "a remainder (%)", 4 * 2 * 2),
    ],
    ids=["at-max-ii", "past-max-ii", "one-iteration", "unseen", "remainder"],
)
def test_a_loop_past_the_pipeliners_ii_or_with_a_hazard_is_priced_unpipelined(
    iterations, mac, hazards, why, cycles
):
    lp = dict(loop(1, 1, MAC=mac), iterations=iterations, hazards=hazards)
    assert kc.unpipelined(lp) == why
    assert kc.loop_cycles(lp) == cycles


def test_features_split_loops_spills_outside_work_and_scalar_moves():
    prof = {
        "loops": [loop(1, 2, 3, 1, MAC=64, LOAD=96, SCALAR=5)],
        "outside": {
            "MAC": 1,
            "LOAD": 2,
            "STORE": 3,
            "SHUFFLE": 4,
            "CONVERT": 5,
            "ALU": 6,
            "SCALAR": 7,
        },
        "peak_in": 3,
        "peak_out": 1,
    }
    assert list(kc.features(prof)) == [64, 32, 21, 12]


def point(name, x, cycles, calls=1000, ddr_s=0.0):
    t = calls * cycles / kc.CLOCK_HZ + model.FIXED_S
    return kc.Point(name, "t", calls, t, ddr_s, np.array(x, float))


def test_the_fit_recovers_the_constants_of_exact_data():
    truth = np.array([1.5, 4.0, 2.0, 10.0])
    xs = (
        [1000, 0, 200, 0],
        [500, 300, 0, 0],
        [0, 0, 900, 100],
        [800, 0, 0, 400],
        [200, 50, 50, 50],
    )
    pts = [point(f"p{i}", x, float(np.dot(x, truth))) for i, x in enumerate(xs)]
    assert np.allclose(kc.fit(pts), truth)


def test_a_ddr_bound_point_only_bounds_the_kernel():
    truth = np.array([2.0, 0.0, 3.0, 0.0])
    pts = [point("a", [1000, 0, 0, 0], 2000), point("b", [0, 0, 1000, 0], 3000)]
    # a point DDR-bound at 90 % of its time: left out while the fit stays below its kernel bound...
    loose = point("c", [100, 0, 0, 0], 1000, calls=1000, ddr_s=1.0)
    assert not loose.fitted
    assert np.allclose(kc.fit(pts + [loose]), truth)
    # ...and joined as soon as the fit would exceed it (implied 150 cycles < 2.0 * 100)
    calls = 12 * 10**6
    tight = kc.Point("d", "t", calls, 1.0, 0.95, np.array([100.0, 0, 0, 0]))
    assert tight.implied_cycles < 200
    c = kc.fit(pts + [tight])
    assert c[0] < 2.0 and float(tight.x @ c) <= 200


def test_implied_cycles_are_the_measurement_at_the_clock_over_the_calls():
    p = kc.Point("x", "t", 8192, 0.0395, 0.0, np.zeros(4))
    assert p.implied_cycles == pytest.approx((0.0395 - 0.08e-3) * 1.8e9 / 8192)


def test_the_calibration_table_cites_every_measurement():
    with open(kc.CALIBRATION) as f:
        rows = json.load(f)["kernels"]
    assert len(rows) >= 4
    for r in rows:
        assert re.fullmatch(r"[0-9a-f]{40}", r["commit"])
        assert r["sources"] and r["figure"] and r["measured_s"] > 0
        assert r["profile"]["loops"] or any(r["profile"]["outside"].values())
    # the first two published int4 figures (mlir-air #1639): 117 ms and 39.5 ms at 2048^3
    assert {r["measured_s"] for r in rows} >= {0.117, 0.0395}


def test_the_calibration_reports_its_leave_one_out_error():
    cal = kc.calibration()
    assert set(cal.loo) == {p.name for p in cal.points if p.compiler == "Peano"}
    assert re.fullmatch(
        r"kernel model: \d+ published Peano NPU2 measurements, leave-one-out error \d+ %"
        r"(, loop II [+-]\d+ %)+",
        cal.summary(),
    )
    assert (cal.constants >= 0).all()


def schedule(mac_per_iteration, ii, trips=12):
    loop_ = dict(loop(1, 1, MAC=mac_per_iteration * trips), iterations=trips)
    return kc.PublishedSchedule("s", "f", mac_per_iteration, ii, 2, loop_)


def test_a_published_schedule_alone_fixes_loop_as_its_ii_over_the_busiest_slot():
    assert kc.fit([], [schedule(64, 77)]) == pytest.approx([77 / 64, 0, 0, 0])
    # beside a point that wants LOOP 2.0, the fit settles between the two
    c = kc.fit([point("a", [1000, 0, 0, 0], 2000)], [schedule(64, 77)])
    assert 77 / 64 < c[0] < 2.0


def test_the_published_loop_is_profiled_as_its_source_reads():
    """mm_bfp_mixed.cc's loop: 12 blocks per call, each 16 k-steps of 4 bfp16 mmuls (its source), so the
    busiest slot is the MAC slot at 64 per iteration; Peano's ResMII is 68."""
    (s,) = kc.load_schedules()
    assert (s.res_mii, s.ii, s.stages) == (68, 77, 2)
    assert s.loop["iterations"] == 12 and s.loop["ops"]["MAC"] == 12 * 16 * 4
    assert kc.loop_schedule(s.loop, kc.KERNEL_MAX_II).res_mii == 64
    assert s.loop["ops"]["LOAD"] / 2 < s.loop["ops"]["MAC"]


def test_a_point_of_another_compiler_is_predicted_not_fitted():
    cal = kc.calibration()
    chess = [p for p in cal.points if p.compiler != "Peano"]
    assert chess, "the calibration holds mlir-aie's chess-built bfp16 GEMM"
    peano = [p for p in cal.points if p.compiler == "Peano"]
    np.testing.assert_allclose(cal.constants, kc.fit(peano, cal.schedules))
    table = kc.calibration_table(cal)
    for p in chess:
        line = next(ln for ln in table.splitlines() if ln.startswith(p.name[:65]))
        assert f"built with {p.compiler}: predicted, not fitted" in line


def test_the_calibration_reports_its_error_per_family_and_per_published_ii():
    cal = kc.calibration()
    fams = cal.family_errors()
    assert set(fams) == {
        "int4 dequantising GEMM",
        "bfp16 block mmul GEMM",
        "bf16 GEMV",
    }
    assert sum(n for n, _, _ in fams.values()) == len(cal.points)
    ((name, err),) = cal.ii_errors().items()
    assert "PR #3650" in name
    assert err == pytest.approx(cal.constants[0] * 64 / 77 - 1)
    table = kc.calibration_table(cal)
    for fam in fams:
        assert fam in table


def test_the_committed_table_is_of_this_kernel_and_reproduces():
    with open(kc.TABLE) as f:
        table = json.load(f)
    assert (
        table["kernel"] == kc.kernel_hash()
    ), "the kernel's code changed: run `python3 -m int4awq.design.kernel_cost --write-table`"
    assert table["calls"]["64x64x64/gs128"] == kc.measure(64, 64, 64, 128)
    assert table["calls"]["gemv/128x128/gs128/m1"] == kc.measure(None, 128, 128, 128, 1)


def test_calibration_sources_are_taken_only_at_the_measured_version(tmp_path):
    import subprocess
    import sys

    from host.calibrate_kernels import TABLE, KERNELS, git_blob_id, source_bytes

    assert (
        TABLE == kc.CALIBRATION
    )  # the calibration writes the file the cost model reads
    data = b"int x;\n"
    # git's blob id of a file: sha1 of "blob <size>\0" + content (`git hash-object`)
    assert git_blob_id(data) == "6d1a0d47b7f73eacb962f3711df06b21ed11f7ca"
    path, blob = KERNELS[0].files[0]
    (tmp_path / path).parent.mkdir(parents=True)
    (tmp_path / path).write_bytes(data)
    with pytest.raises(LookupError, match="not the measured version"):
        source_bytes(str(tmp_path), path, blob, KERNELS[0].commit)
    res = subprocess.run(
        [sys.executable, "host/calibrate_kernels.py", "--air-src", str(tmp_path)]
        + ["--aie-src", str(tmp_path), "--out", str(tmp_path / "out.json")],
        cwd=kc.REPO,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "not the measured version" in res.stderr
    assert not (tmp_path / "out.json").exists()
    # the published schedules alone need only the clone that holds them
    res = subprocess.run(
        [sys.executable, "host/calibrate_kernels.py", "--schedules-only"]
        + ["--out", str(tmp_path / "out.json")],
        cwd=kc.REPO,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == ["calibrate: give the clone of mlir-aie"]


def test_the_command_refuses_an_illegal_tile_in_one_line():
    import subprocess
    import sys

    res = subprocess.run(
        [sys.executable, "-m", "int4awq.design.kernel_cost", "--tile-m", "24"],
        cwd=kc.REPO,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        "error: tile_m = 24: must be a multiple of 16 (the kernel computes 2x2 blocks of 8x8 mmul tiles)"
    ]


def test_the_command_prints_a_calls_loops_streams_and_modelled_cycles():
    import subprocess
    import sys

    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "int4awq.design.kernel_cost",
            "--tile-m",
            "32",
            "--tile-n",
            "32",
        ],
        cwd=kc.REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "live block streams in/out: 2/1" in out
    # 32 x 32 x 64, GS 128: per row pair (2), each of the 2 column pairs pops 16 A and 16 W blocks (4
    # fills), all in unrolled spans
    assert "load-FIFO fills: 16 static, 0 dynamic" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("kernel: "))
    assert re.fullmatch(
        r"kernel: \d+ cycles per call, \d+\.\d\d per 8x8x8 mmul step \(MODELLED\), live streams in/out: 2/1, "
        r"FIFO fills static/dynamic: 16/0, accumulators: 5 of 5 \(estimate\)",
        line,
    )
    assert kc.calibration().summary() in out


def test_every_profiled_call_keeps_five_accumulators_and_prices_long_spans_unpipelined():
    with open(kc.TABLE) as f:
        calls = json.load(f)["calls"]
    assert max(e["acc_registers"] for e in calls.values()) <= 5
    # per column pair and span: 4 block macs per K block and 4 folds of 2 macs each (2 instructions):
    # 8 K blocks (64 x 64 x 64, GS 128) issue 32 + 16 = 48 MACs; a 16-block span (tile_k 128, GS 128)
    # 64 + 16 = 80, past the default limit of 60 but within the 120 this kernel is built with
    # (kernels/Makefile, KERNEL_MAX_II); the GEMV's column pair over four 16-block spans (64 x 512, GS 128)
    # 4 x (2 x 16 + 8) = 160, past it
    assert calls["64x64x64/gs128"]["unpipelined"] == []
    assert calls["16x128x128/gs128"]["unpipelined"] == []
    assert calls["gemv/64x512/gs128/m1"]["unpipelined"] == ["II 160 > 120"]
    loop = {
        "ops": dict.fromkeys(kc.VECTOR, 0) | {"MAC": 80},
        "iterations": 2,
        "entries": 1,
    }
    assert kc.unpipelined(loop) is None  # 40 an iteration
    loop["iterations"] = 1
    loop["entries"] = 0
    assert (
        kc.unpipelined(loop) == "II 80 > 60"
    )  # the calibration kernels' default limit
    assert kc.unpipelined(loop, kc.KERNEL_MAX_II) is None


def test_a_group_spanning_whole_chunks_makes_one_call_whatever_its_size():
    """call_gs: at gs >= tile_k every group size gives the same call (one fold span per chunk), so the
    table's profiles of such pairs are equal term for term, and one stands for all."""
    with open(kc.TABLE) as f:
        calls = json.load(f)["calls"]
    by_call = {}
    for key, e in calls.items():
        tm, tn, tk, gs, m, fmt = kc._parse_key(key)
        by_call.setdefault((tm, tn, tk, kc.call_gs(tk, gs, fmt), m, fmt), []).append(
            e["x"]
        )
    shared = [xs for xs in by_call.values() if len(xs) > 1]
    assert len(shared) > 100
    assert all(xs[0] == x for xs in shared for x in xs)
    # so a group size the table never profiled is at hand through its call
    assert kc.known(64, 128, 32, 4096) and kc.known(None, 64, 128, 1024, 3)
    assert not kc.known(64, 128, 32, 16)  # several groups per chunk: another call


def test_the_sweep_profiles_only_the_leaders_it_lacks(monkeypatch, tmp_path):
    """A format and group size the table does not cover: every legal configuration is ranked on an estimate,
    and only the leaders' calls are profiled (the profile here is the AWQ entry of the same tile, counted).
    """
    from int4awq.design import sweep

    monkeypatch.setattr(kc, "CACHE", str(tmp_path / "cache.json"))
    monkeypatch.setattr(kc, "_ENTRIES", None)
    profiled = []

    def fake_measure(tm, tn, tk, gs, m=None, fmt="awq"):
        profiled.append((tm, tn, tk, gs, fmt))
        return kc.entry(tm, tn, tk, 128, m, "awq")

    monkeypatch.setattr(kc, "measure", fake_measure)
    rows = sweep.ranked(32, 2048, 512, 256, "awq_f16")
    assert 1 <= len(profiled) <= 2 * sweep.PROFILE_LEADERS
    assert all(sweep._profiled(r) for r in rows[: sweep.PROFILE_LEADERS])
    assert sum(not sweep._profiled(r) for r in rows) > len(profiled)


def test_a_comment_or_whitespace_edit_keeps_the_table_a_code_edit_does_not(
    tmp_path, monkeypatch
):
    src = open(kc.KERNEL_SOURCES[1]).read()
    before = kc.kernel_hash()
    edited = tmp_path / "kernel.cc"
    monkeypatch.setattr(
        kc,
        "KERNEL_SOURCES",
        [kc.KERNEL_SOURCES[0], str(edited), *kc.KERNEL_SOURCES[2:]],
    )
    edited.write_text(
        "// a new comment line\n"
        + src.replace("\n", "  \n", 3)
        + "\n/* and a block */\n"
    )
    assert kc.kernel_hash() == before
    edited.write_text(src + "\nstatic int added_code = 1;\n")
    assert kc.kernel_hash() != before
    # a "//" inside a string literal is code
    assert kc.code_tokens('f("a//b"); // c') == 'f("a//b");'


def test_the_zero_and_drain_of_a_tile_are_priced_per_tile():
    """The calls made once per C tile: the zero stores 64 bytes at a time (tm * tn / 16 iterations), the
    drain converts one 8x8 block an iteration (tm * tn / 64); each K-chunk's call carries tile_k / K of
    them, so a short K pays a larger share."""
    from int4awq.design.kernel_profile import profile_tile_ends

    p = profile_tile_ends(64, 64)
    assert sorted(lp.iterations for lp in p.loops) == [64, 256]
    with open(kc.TABLE) as f:
        ends = json.load(f)["tile_ends"]
    assert {tuple(map(int, t.split("x"))) for t in ends} == set(kc.tile_end_tiles())
    assert kc.tile_end_cycles(64, 128) > kc.tile_end_cycles(16, 128) > 0
    bare = kc.int4_kernel_flops(64, 64, 64, 128)
    long_k = kc.int4_kernel_flops(64, 64, 64, 128, k=8192)
    short_k = kc.int4_kernel_flops(64, 64, 64, 128, k=512)
    assert bare > long_k > short_k
