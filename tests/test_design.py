# SPDX-License-Identifier: MIT
"""Design configurations: validation, budgets, DDR traffic, the sweep and the default table."""

import argparse

import pytest

from int4awq import record
from int4awq.design import DESIGN_OPTIONS, TILE_OPTIONS, DesignConfig
from int4awq.errors import ConfigError
from int4awq.sweep import (
    config_from_args,
    accepted,
    LLAMA_PROJECTIONS,
    TABLE_M,
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
    tile_k_l2=2048,
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
        (dict(k=2000), "K = 2000 is not a multiple of GS = 128"),
        (dict(gs=0), "GS = 0: must be a positive integer"),
        (dict(m=0), "M = 0: must be a positive integer"),
        (dict(tile_m=24, m=24 * 8), "tile_m = 24: must be a multiple of 16"),
        (
            dict(tile_k_l1=48, tile_k_l2=2016, k=2016, gs=32),
            "one must divide the other",
        ),
        (dict(tile_m=128, tile_n=128, m=1024, n=512), "needs .* bytes of L1"),
        (dict(tile_k_l2=8192, k=8192), r"segment L2 needs \d+ bytes > 8 memtiles"),
        (
            dict(stack_size=1000),
            "stack_size = 1000: must be a multiple of 16 and at least 1024 bytes",
        ),
        (dict(stack_size=16384), r"needs 68352 bytes of L1 .*stack 16384"),
        (
            dict(n_per_segment=3),
            r"N = 2048 is not a multiple of 768 \(tile_n \* herd_n \* n_per_segment\)",
        ),
        (dict(n_per_segment=64, n=64 * 256), "n_per_segment = 64: must be 1 to 63"),
        (
            dict(n_per_segment=8, k=8192),
            r"segment L2 needs \d+ bytes > 8 memtiles .*A block bf16 \(all of K, resident\)",
        ),
    ],
)
def test_invalid_configurations_name_the_rule(change, message):
    with pytest.raises(ConfigError, match=message):
        DesignConfig(**{**QPROJ, **change})


def test_qproj_budget_and_traffic():
    cfg = DesignConfig(**QPROJ)
    # accumulator 16384 + drain 8192 + A chunk x2 16384 + record x2 4992 (2496 each: Q 2304, S 128, Z 64)
    # + scratch 6016 (five 1152-byte pair lines + 256 staging) + stack 4096
    assert cfg.l1_total() == 56064 <= record.L1_BYTES
    rec = record.record_bytes(64, 64, 128)
    # A once per N block of 4 x 64 columns (8 of them), W once per 512-row block (4), C written once.
    assert cfg.ddr_bytes() == 8 * 2048 * 2048 * 2 + 32 * 32 * rec * 4 + 2048 * 2048 * 2
    streamed = DesignConfig(**{**QPROJ, "tile_k_l2": 256})
    assert (
        streamed.ddr_bytes() == cfg.ddr_bytes()
    )  # the K refill size does not change the traffic
    assert dict(streamed.l2_budget())["A block bf16 x2"] == 2 * 2 * 512 * 256


def namespace(**tiles):
    return argparse.Namespace(**{opt: tiles.get(opt) for opt in DESIGN_OPTIONS})


def test_config_from_args_pads_and_overrides():
    cfg, source = config_from_args(
        namespace(**{k: QPROJ[k] for k in TILE_OPTIONS}), 33, 2048, 2000, 128
    )
    assert (
        source == "command line"
        and (cfg.m, cfg.n) == (512, 2048)
        and cfg.n_per_segment == 1
    )
    cfg, _ = config_from_args(
        namespace(**{k: QPROJ[k] for k in TILE_OPTIONS}, n_per_segment=3),
        33,
        2048,
        2000,
        128,
    )
    assert (
        cfg.a_resident and cfg.n == 2304
    )  # padded to whole sweeps of 3 N blocks of 256
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


def test_every_table_row_is_legal_and_covers_llama():
    rows = load_table()
    assert {(r["projection"], r["m"]) for r in rows} == {
        (p, m) for p in LLAMA_PROJECTIONS for m in TABLE_M
    }
    for r in rows:
        cfg, source = default_config(r["m"], r["k"], r["n"], r["gs"])
        assert source == "configs.json"
        assert cfg.herd_m * cfg.herd_n >= 8
        est = modelled(cfg, r["m"], r["n"])
        assert est.seconds * 1e6 == pytest.approx(r["modelled_us"], abs=0.1)
        assert cfg.resource_problem() is None, (
            r["projection"],
            r["m"],
        )  # nothing refused by default
    big = [r for r in rows if (r["m"], r["k"], r["n"]) == (2048, 2048, 2048)][0]
    assert big["herd_m"] * big["herd_n"] == 32


@pytest.mark.parametrize("m, k, n", [(2048, 2048, 2048), (32, 2048, 512)])
def test_table_holds_the_models_best(m, k, n):
    best = accepted(m, k, n, 128)[0]
    cfg, _ = default_config(m, k, n, 128)
    assert modelled(cfg, m, n).seconds == pytest.approx(best.est.seconds)


def test_the_sweep_skips_what_the_resource_model_refuses():
    # 32 x 128 tiles with K refills of 2048 at K = 8192: the segment's L2 total fits the 8 memtiles, but
    # no memtile can take a weight piece (32 records of 128 columns, ping-ponged) beside the others.
    cfg = DesignConfig(
        m=2048,
        k=8192,
        n=2048,
        gs=128,
        tile_m=32,
        tile_n=128,
        tile_k_l1=64,
        tile_k_l2=2048,
        herd_m=8,
        herd_n=4,
    )
    assert cfg.l2_total() <= 8 * 512 * 1024
    assert (
        cfg.resource_problem().startswith("resources: memtile")
        and "L2 bytes" in cfg.resource_problem()
    )
    for r in accepted(2048, 8192, 2048, 128, top=3):
        assert r.cfg.resource_problem() is None


def test_unknown_shape_gets_a_legal_configuration():
    cfg, source = default_config(77, 256, 200, 64)
    assert source == "best modelled legal configuration"
    assert cfg.m >= 77 and cfg.n >= 200 and cfg.k == 256
