# SPDX-License-Identifier: MIT
"""Design configurations: validation, budgets, DDR traffic, the sweep and the default table."""

import argparse

import pytest

from int4awq.kernel import record
from int4awq.design.design import TILE_OPTIONS, DesignConfig
from int4awq.errors import ConfigError
from int4awq.design.sweep import (
    grid_note,
    config_from_args,
    accepted,
    TABLE_M,
    TABLE_SHAPES,
    default_config,
    load_table,
    modelled,
    ranked,
)

QPROJ = dict(
    m=2048,
    k=2048,
    n=2048,
    gs=128,
    tile_m=64,
    tile_n=64,
    tile_k_l1=64,
    tile_k_l2=512,
    herd_m=8,
    herd_n=4,
)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(herd_m=9), "herd 9x4 does not fit the NPU2 array"),
        (dict(herd_n=5), "herd 8x5 does not fit"),
        (dict(m=2000), r"M = 2000 is not a multiple of 512 \(tile_m \* herd_m\)"),
        (dict(n=2000), r"N = 2000 is not a multiple of 256 \(tile_n \* herd_n\)"),
        (dict(tile_k_l2=768), r"K = 2048 is not a multiple of 768 \(tile_k_l2\)"),
        # the limits of what mlir-air's hardware-tested GEMMs run (docs/design.md#provenance): one step
        # over each; test_proven_limits_sit_at_their_edge has each edge
        # (the launch grid's: what llama32_1b_int4's prefill runs, [16, 128] and [64, 32])
        (
            dict(tile_m=16, m=65 * 128),
            r"launch grid \[65, 8\].*at most 64 launch iterations along M",
        ),
        (dict(herd_n=1, n=129 * 64, m=512), r"launch grid \[1, 129\]"),
        (
            dict(tile_m=16, m=64 * 128, n=33 * 256),
            r"launch grid \[64, 33\].*2048 in all",
        ),
        (
            dict(tile_k_l2=1024),
            r"tile_k_l2 / tile_k_l1 = 16 \(x2: the L2 block is ping-ponged\) = 32 memtile BDs",
        ),
        (dict(tile_k_l2=2048), r"tile_k_l2 / tile_k_l1 = 32 = 32 memtile BDs"),
        (
            dict(k=1536, tile_k_l2=512),
            r"K / tile_k_l2 = 3: aircc ping-pongs that loop and an odd trip count",
        ),
        (
            dict(k=192 * 2, tile_k_l2=192, tile_k_l1=64, gs=64),
            r"tile_k_l2 / tile_k_l1 = 3: aircc ping-pongs",
        ),
        (dict(k=2000), "K = 2000 is not a multiple of GS = 128"),
        (dict(gs=0), "GS = 0: must be a positive integer"),
        (dict(m=0), "M = 0: must be a positive integer"),
        (dict(tile_m=24, m=24 * 8), "tile_m = 24: must be a multiple of 16"),
        (
            dict(tile_k_l1=48, tile_k_l2=2016, k=2016, gs=32),
            "one must divide the other",
        ),
        (dict(tile_m=128, tile_n=128, m=1024, n=512), "needs .* bytes of L1"),
        (
            dict(stack_size=1000),
            "stack_size = 1000: must be a multiple of 16, at least 1024 bytes and at most 16384",
        ),
        (
            dict(tile_n=128, tile_k_l1=32, tile_k_l2=256, stack_size=16384),
            r"needs 68480 bytes of L1 .*stack 16384",
        ),
    ],
)
def test_invalid_configurations_name_the_rule(change, message):
    with pytest.raises(ConfigError, match=message):
        DesignConfig(**{**QPROJ, **change})


@pytest.mark.parametrize(
    "change",
    [
        dict(tile_m=16, m=64 * 128),  # launch [64, 8]: 64 along M
        dict(herd_n=1, n=128 * 64, m=512),  # launch [1, 128]: 128 along N
        dict(tile_m=16, m=64 * 128, n=32 * 256),  # launch [64, 32]: 2048 in all
        dict(tile_k_l2=1024, k=1024),  # 16 chunks, one refill: 16 BDs
        dict(tile_k_l2=512),  # 8 chunks x 2 (ping-ponged): 16 BDs
    ],
)
def test_proven_limits_sit_at_their_edge(change):
    cfg = DesignConfig(**{**QPROJ, **change})
    lm, ln = cfg.launch_grid
    assert lm <= 64 and ln <= 128 and lm * ln <= 2048 and cfg.a_chain_bds <= 16


def test_runtime_loop_tiling_as_upstream_chooses_it():
    # [1, 1] only on a herd of fewer than 8 cores with several launch iterations
    small = dict(herd_m=1, herd_n=1, m=64, n=128, k=512, tile_k_l2=512)
    assert DesignConfig(**{**QPROJ, **small}).runtime_loop_tiling == (1, 1)
    one_launch = dict(herd_m=1, herd_n=1, m=64, n=64, k=512, tile_k_l2=512)
    assert DesignConfig(**{**QPROJ, **one_launch}).runtime_loop_tiling == (2, 2)
    eight_cores = dict(herd_m=2, herd_n=4, m=256, n=512, k=512, tile_k_l2=512)
    assert DesignConfig(**{**QPROJ, **eight_cores}).runtime_loop_tiling == (2, 2)
    seven = dict(herd_m=7, herd_n=1, m=32 * 14, n=128, k=512, tile_k_l2=512)
    assert DesignConfig(**{**QPROJ, **seven}).runtime_loop_tiling == (1, 1)


def test_a_small_herd_takes_at_most_two_launch_iterations():
    # [1, 1] unrolls each launch iteration into shim tasks: 2 is the limit, 3 and more are refused
    at_limit = dict(herd_m=1, herd_n=1, m=64, n=128, k=512, tile_k_l2=512)
    assert DesignConfig(**{**QPROJ, **at_limit}).launch_grid == (1, 2)
    for m in (128, 256):
        with pytest.raises(ConfigError, match="launch iterations: under .* PR #1639"):
            DesignConfig(**{**QPROJ, **at_limit, "m": m})
    # 8 cores take [2, 2] and any launch grid up to the proven limits
    big = dict(herd_m=2, herd_n=4, m=512, n=1024, k=512, tile_k_l2=512)
    assert DesignConfig(**{**QPROJ, **big}).launch_grid == (4, 4)


def test_qproj_budget_and_traffic():
    cfg = DesignConfig(**QPROJ)
    # accumulator 16384 (drained in place) + A chunk x2 16384 + record x2 4992 (2496 each: Q 2304, S 128,
    # Z 64) + scratch 6336 (five 1152-byte pair lines + 576 staging) + stack 4096
    assert cfg.l1_total() == 48192 <= record.L1_BYTES
    rec = record.record_bytes(64, 64, 128)
    # A once per N block of 4 x 64 columns (8 of them), W once per 512-row block (4), C written once.
    assert cfg.ddr_bytes() == 8 * 2048 * 2048 * 2 + 32 * 32 * rec * 4 + 2048 * 2048 * 2
    streamed = DesignConfig(**{**QPROJ, "tile_k_l2": 256})
    assert (
        streamed.ddr_bytes() == cfg.ddr_bytes()
    )  # the K refill size does not change the traffic
    assert dict(streamed.l2_budget())["A block bf16 x2"] == 2 * 2 * 512 * 256


def namespace(**tiles):
    return argparse.Namespace(**{opt: tiles.get(opt) for opt in TILE_OPTIONS})


def test_config_from_args_pads_and_overrides():
    cfg, source = config_from_args(
        namespace(**{k: QPROJ[k] for k in TILE_OPTIONS}), 33, 2048, 2000, 128
    )
    assert source == "command line" and (cfg.m, cfg.n) == (512, 2048)
    args = namespace()
    args.stack_size = 3072
    cfg, source = config_from_args(args, 2048, 2048, 2048, 128)
    assert (
        source == "configs.json"
        and cfg.stack_bytes == 3072
        and dict(cfg.l1_budget())["stack"] == 3072
    )
    cfg, source = config_from_args(namespace(), 2048, 2048, 2048, 128)
    assert source == "configs.json"
    over, source = config_from_args(namespace(tile_k_l2=256), 2048, 2048, 2048, 128)
    assert source == "command line over configs.json"
    assert (
        over.tile_k_l2 == 256
        and over.tile_m == cfg.tile_m
        and over.herd_n == cfg.herd_n
    )
    with pytest.raises(ConfigError, match="herd_m = 0"):
        config_from_args(
            namespace(**{**{k: QPROJ[k] for k in TILE_OPTIONS}, "herd_m": 0}),
            64,
            2048,
            2048,
            128,
        )


@pytest.mark.parametrize(
    "m, n, grid, beyond",
    [
        (4096, 2048, (8, 8), False),  # 8 along M, 64 in all: the lit-tested edges
        (512, 16384, (1, 64), False),  # 64 along N: the edge
        (1024, 16384, (2, 64), True),  # 128 in all
        (4608, 256, (9, 1), True),  # 9 along M
    ],
)
def test_a_launch_grid_beyond_the_lit_tests_is_named(m, n, grid, beyond):
    cfg = DesignConfig(
        m=m,
        k=256,
        n=n,
        gs=128,
        tile_m=64,
        tile_n=64,
        tile_k_l1=64,
        tile_k_l2=256,
        herd_m=8,
        herd_n=4,
    )
    assert cfg.launch_grid == grid
    note = grid_note(cfg)
    assert bool(note) == beyond
    if beyond:
        assert note == (
            f"launch grid [{grid[0]}, {grid[1]}]: llama32_1b_int4 prefill's, not lit-tested"
        )


@pytest.mark.slow
def test_every_table_row_is_legal_and_covers_llama():
    rows = load_table()
    for fmt in ("awq", "mxfp4"):
        assert {(r["projection"], r["m"]) for r in rows if r["format"] == fmt} == {
            (p, m) for p in TABLE_SHAPES for m in TABLE_M
        }
    # every projection at every M has a legal configuration in every format (MXFP4's gate / up at
    # M = 2048 had none before the in-place drain freed L1 for 64 x 128 tiles; the fused gate and up at
    # M = 2048, N = 16384, none within the lit-tested launch grids, takes llama32_1b_int4 prefill's)
    assert not [r for r in rows if "none" in r]
    beyond = set()
    for r in rows:
        cfg, source = default_config(r["m"], r["k"], r["n"], r["gs"], r["format"])
        assert cfg.format == r["format"]
        assert source == "configs.json"
        lm, ln = cfg.launch_grid
        if lm > 8 or ln > 64 or lm * ln > 64:
            beyond.add((r["projection"], r["m"], lm, ln))
        assert cfg.herd_m * cfg.herd_n >= 8
        est = modelled(cfg, r["m"], r["n"])
        assert est.seconds * 1e6 == pytest.approx(r["modelled_us"], abs=0.1)
        assert cfg.resource_problem() is None, (
            r["projection"],
            r["m"],
        )  # nothing refused by default
        # and 2 KiB of L1 free for an estimated stack (record.DEFAULT_L1_SPARE)
        assert sum(b for _, b in cfg.l1_budget()) <= 65536 - 2048, r
    big = [
        r
        for r in rows
        if (r["m"], r["k"], r["n"], r["format"]) == (2048, 2048, 2048, "awq")
    ][0]
    assert big["herd_m"] * big["herd_n"] == 32
    assert beyond == {("gate_up_proj", 2048, 4, 32)}


@pytest.mark.parametrize("m, k, n", [(2048, 2048, 2048), (32, 2048, 512)])
def test_table_holds_the_models_best(m, k, n):
    # or, for a row re-ranked as compiled (sweep --write-table --as-compiled), one of the model's few best
    cfg, _ = default_config(m, k, n, 128)
    row = next(
        r
        for r in load_table()
        if (r["m"], r["k"], r["n"], r["gs"], r["format"]) == (m, k, n, 128, "awq")
    )
    from int4awq.design.sweep import AS_COMPILED_CANDIDATES

    best = accepted(
        m, k, n, 128, top=AS_COMPILED_CANDIDATES if "as_compiled_us" in row else 1
    )
    assert cfg.name in {r.cfg.name for r in best}
    if "as_compiled_us" not in row:
        assert modelled(cfg, m, n).seconds == pytest.approx(best[0].est.seconds)


def test_the_sweep_skips_what_the_resource_model_refuses():
    # A herd of one row (herd_n = 1): air-split-l2-memref cuts the C block [8, 1, 64, 128] into 8
    # pieces, but brings the C drain's DDR side to the L2 side's rank around the size-1 herd_n
    # dimension wrongly, so the two sides of the drain disagree: refused, though every budget fits.
    cfg = DesignConfig(
        m=2048,
        k=8192,
        n=2048,
        gs=128,
        tile_m=64,
        tile_n=128,
        tile_k_l1=16,
        tile_k_l2=32,
        herd_m=8,
        herd_n=1,
    )
    assert cfg.l2_total() <= 8 * 512 * 1024 and cfg.l1_total() <= record.L1_BYTES
    problem = cfg.resource_problem()
    assert problem.startswith("resources: split of L2 buffer memref<8x1x64x128xbf16")
    assert "disagree (65536 vs 8192 elements per piece)" in problem
    for r in accepted(2048, 8192, 2048, 128, top=3):
        assert r.cfg.resource_problem() is None


def test_unknown_shape_gets_a_legal_configuration():
    cfg, source = default_config(77, 256, 200, 64)
    assert source == "best modelled legal configuration"
    assert cfg.m >= 77 and cfg.n >= 200 and cfg.k == 256


def test_rows_beyond_what_upstream_launches_are_refused_with_the_reason():
    # the lit-tested 8 launch iterations along M of at most 8 x 128 rows: M = 8192 stays within them;
    # 8193 goes on to llama32_1b_int4 prefill's grids (64 along M), named; past 64 x 8 x 128, none
    assert not grid_note(ranked(8192, 512, 256, 128)[0].cfg)
    assert grid_note(ranked(8193, 512, 256, 128)[0].cfg).startswith("launch grid [")
    with pytest.raises(
        ConfigError, match=r"M=65537 .*take M <= 65536; run the rows in blocks"
    ):
        ranked(65537, 512, 256, 128)
