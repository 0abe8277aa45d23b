# SPDX-License-Identifier: MIT
"""The compiled schedule's refill pipeline in the model (int4awq/design/model.py refill_pipeline_s,
sweep.refill_pipeline) and the sweep's as-compiled re-ranking of the default table (issue 52).
"""

import json

import pytest

from int4awq.design import compiler, sweep
from int4awq.design.design import DesignConfig
from int4awq.design.model import FIXED_S, refill_pipeline_s
from int4awq.design.sweep import accepted, modelled, refill_pipeline, table_row

GATE = dict(tile_m=16, tile_n=128, tile_k_l1=128, herd_n=4)


def gate(m, tile_k_l2, herd_m):
    return DesignConfig.padded(
        m, 2048, 8192, 128, tile_k_l2=tile_k_l2, herd_m=herd_m, **GATE
    )


def test_pipeline_overlaps_all_but_the_first_fill_and_the_last_compute():
    # two or more refills are ping-ponged in L2: fill, then max(fill, compute) per further refill, then compute
    assert refill_pipeline_s(3, 4, 2.0, 1.0) == 3 * (2.0 + 3 * 2.0 + 1.0)
    assert refill_pipeline_s(3, 4, 1.0, 2.0) == 3 * (1.0 + 3 * 2.0 + 2.0)
    # one refill (tile_k_l2 = K) has one L2 buffer: its fill, then its compute, nothing overlapped
    assert refill_pipeline_s(16, 1, 2.0, 1.5) == 16 * 3.5


def test_a_single_refill_is_charged_its_fill_and_its_compute_in_series():
    # gate_proj at M = 32 on a 2 x 4 herd: 16 launch iterations along N; with tile_k_l2 = K each fills
    # all of its A and W before its first call (the trace: the memtile's W fill, then 16 calls, per
    # launch iteration)
    one = refill_pipeline(gate(32, 2048, 2))
    assert (one.iterations, one.refills) == (16, 1)
    assert one.seconds == pytest.approx(16 * (one.fill_s + one.compute_s))
    eight = refill_pipeline(gate(32, 256, 2))
    assert (eight.iterations, eight.refills) == (16, 8)
    assert eight.seconds < 0.7 * one.seconds
    # the single refill is what the model now charges: K-wide refills rank last of the three
    est = [modelled(gate(32, tk2, 2), 32, 8192) for tk2 in (256, 512, 2048)]
    assert est[0].seconds < est[1].seconds < est[2].seconds
    assert est[2].bound == "refill"
    assert est[2].seconds == pytest.approx(one.seconds + FIXED_S)


def test_fill_is_capped_by_its_busiest_shim_channel():
    # one refill's W of one N tile (tile_k_l2 / tile_k_l1 records) rides one shim channel at 8 B/cycle
    cfg = gate(32, 2048, 2)
    p = refill_pipeline(cfg)
    w_channel = 16 * cfg.record_bytes
    a_channel = 16 * 2048 * 2
    total = 4 * w_channel + 2 * a_channel
    assert p.fill_s == pytest.approx(max(total / 42.5e9, w_channel / 8 / 1.8e9))


def test_large_m_keeps_its_roofline():
    # at M = 128 with eight refills the pipeline hides under DDR: the figure is the roofline's
    est = modelled(gate(128, 256, 8), 128, 8192)
    assert est.bound == "DDR"
    assert est.seconds == pytest.approx(
        gate(128, 256, 8).ddr_bytes() / 42.5e9 + FIXED_S
    )


@pytest.mark.slow
def test_table_row_takes_the_fastest_as_compiled_of_the_models_best():
    shape = (32, "k_proj", 2048, 512, "awq", 128)
    models = accepted(32, 2048, 512, 128, top=sweep.AS_COMPILED_CANDIDATES)
    assert len(models) >= 2
    slow = models[0].cfg.name
    timed = []

    def timer(cfg):
        timed.append(cfg.name)
        if cfg.name == models[-1].cfg.name:
            raise RuntimeError("refused")  # passed over, not fatal
        return 200.0 if cfg.name == slow else 100.0

    row = table_row(*shape, timer=timer)
    assert timed == [r.cfg.name for r in models]
    assert row["as_compiled_us"] == 100.0
    assert row["as_compiled_of"] == len(models) - 1
    picked = DesignConfig.padded(
        32, 2048, 512, 128, **{k: row[k] for k in sweep.TILE_OPTIONS}
    )
    assert picked.name == models[1].cfg.name
    assert row["modelled_us"] == pytest.approx(models[1].est.seconds * 1e6, abs=0.1)
    # no timer, another format or M past AS_COMPILED_MAX_M: the model's best, no as-compiled figure
    plain = table_row(*shape)
    assert "as_compiled_us" not in plain
    assert plain["modelled_us"] == pytest.approx(models[0].est.seconds * 1e6, abs=0.1)


def test_as_compiled_without_the_compiler_leaves_the_table(monkeypatch, capsys):
    monkeypatch.setenv(compiler.HIDDEN, "1")
    before = open(sweep.TABLE).read()
    assert sweep.main(["--write-table", "--as-compiled"]) == 2
    assert "the committed table stands" in capsys.readouterr().err
    assert open(sweep.TABLE).read() == before
    assert sweep.main(["--as-compiled"]) == 2


def test_the_committed_as_compiled_rows_are_among_the_models_best():
    for r in json.load(open(sweep.TABLE))["configs"]:
        if "as_compiled_us" not in r:
            continue
        assert r["format"] == "awq" and r["m"] <= sweep.AS_COMPILED_MAX_M
        assert 1 <= r["as_compiled_of"] <= sweep.AS_COMPILED_CANDIDATES
