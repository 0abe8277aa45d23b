# SPDX-License-Identifier: MIT
"""The host program on the emulator: padding, exact mode, saving, counters vs the design, exit codes."""

import os
import sys

import numpy as np
import pytest
from ml_dtypes import bfloat16

from int4awq.design.sweep import load_table

from host_args import REPO, SMALL, run


@pytest.mark.parametrize("m", [1, 7, 20])
def test_any_m_is_padded_and_exact(m):
    code, out, err = run("--m", str(m), *SMALL, "--exact")
    assert code == 0, out + err
    assert f"M padded from {m}" in out and out.rstrip().endswith("PASS!")


def test_a_small_herd_past_two_launch_iterations_is_refused():
    # M = 33 pads to two M blocks of the 2x2 herd, times two N blocks: 4 launch iterations
    code, out, err = run("--m", "33", *SMALL, "--exact")
    assert code == 2 and "Traceback" not in err
    assert "a herd of 4 cores with 4 launch iterations" in err and "PR #1639" in err


def test_n_is_padded_and_dropped(tmp_path):
    args = list(SMALL)
    args[args.index("--n") + 1] = (
        "72"  # N = 72 -> 128: two 32-column tiles on each of 2 herd rows
    )
    code, out, err = run("--m", "20", *args, "--save", str(tmp_path))
    assert code == 0, out + err
    assert "N padded from 72" in out
    c = np.load(tmp_path / "c.npy", allow_pickle=False)
    a = np.load(tmp_path / "a.npy", allow_pickle=False)
    w = np.load(tmp_path / "w_dequant.npy", allow_pickle=False)
    assert (
        c.shape == (20, 72)
        and a.shape == (20, 256)
        and w.shape == (256, 72)
        and w.dtype == np.float32
    )
    ref = a.astype(np.float64) @ w.astype(np.float64)
    assert np.corrcoef(c.astype(np.float64).ravel(), ref.ravel())[0, 1] > 0.999


def test_activations_file_and_default_configuration(tmp_path):
    a = (np.random.default_rng(3).standard_normal((5, 256))).astype(np.float32)
    path = tmp_path / "a.npy"
    np.save(path, a)
    # five rows go to the decode GEMV by default; the GEMM pads them to a whole herd block
    code, out, err = run(
        "--activations", str(path), "--k", "256", "--n", "64", "--backend", "emu"
    )
    assert code == 0, out + err
    assert out.startswith("GEMV M=5") and "pes=" in out
    code, out, err = run(
        "--activations",
        str(path),
        "--k",
        "256",
        "--n",
        "64",
        "--backend",
        "emu",
        "--design",
        "gemm",
    )
    assert code == 0, out + err
    assert "best modelled legal configuration" in out and "M padded from 5" in out


def test_emulator_counters_agree_with_the_design():
    sys.path.insert(0, os.path.join(REPO, "emulator"))
    from air.backend.xrt import XRTBackend

    from int4awq.design.design import build_host_kernel
    from int4awq.kernel import record
    from int4awq.design.design import DesignConfig
    from int4awq.formats.quant import random_activations, random_weights
    from int4awq.run.reference import check, reference_gemm
    from matmul_int4_packed import backend_options, build_module

    # one K refill of 8 chunks, and 4 refills of 2 chunks (L2 ping-ponged), over a 2x1 launch grid
    for tk2 in (512, 128):
        cfg = DesignConfig(
            m=128,
            k=512,
            n=64,
            gs=128,
            tile_m=32,
            tile_n=32,
            tile_k_l1=64,
            tile_k_l2=tk2,
            herd_m=2,
            herd_n=2,
        )
        assert cfg.launch_grid == (2, 1) and cfg.runtime_loop_tiling == (1, 1)
        build_host_kernel(cfg)
        os.environ["AIR_EMU_LIB_PATH"] = os.path.join(REPO, "kernels", "build")
        backend = XRTBackend(**backend_options(cfg))
        invoke = backend.compile_and_load(build_module(**cfg.builder_args()))
        w = random_weights(cfg.k, cfg.n, cfg.gs, seed=1)
        a = random_activations(cfg.m, cfg.k, seed=2)
        _, _, c = invoke(
            a,
            record.pack_weights(w, cfg.tile_n, cfg.tile_k_l1, dense=cfg.kernel.dense),
            np.zeros((cfg.m, cfg.n), bfloat16),
        )
        assert check(c.reshape(cfg.m, cfg.n), reference_gemm(a, w)[0]).passed
        stats = backend.emu_stats
        ddr = stats.bytes[("L3", "L2")] + stats.bytes[("L2", "L3")]
        assert ddr == cfg.ddr_bytes()
        calls = (cfg.m // cfg.tile_m) * (cfg.n // cfg.tile_n) * (cfg.k // cfg.tile_k_l1)
        assert stats.kernel_calls["matmul_int4_bf16_packed_f32"] == calls
        [herd] = (
            backend.emu_budget.herds
        )  # zero, compute and drain merge into one physical herd
        assert herd.used == cfg.l1_total()


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--m", "64", "--k", "200", "--n", "64"],
            "K = 200 is not a multiple of GS = 128",
        ),
        (
            ["--m", "64", "--k", "256", "--n", "64", "--gs", "0"],
            "GS = 0: must be a positive integer",
        ),
        (["--m", "0", "--k", "256", "--n", "64"], "M = 0: must be a positive integer"),
        (
            ["--m", "64", "--k", "256", "--n", "64", "--tile-m", "24"],
            "tile_m = 24: must be a multiple of 16",
        ),
        (["--m", "64", "--k", "256", "--n", "64", "--herd-m", "9"], "herd 9x"),
        (
            [
                "--m",
                "64",
                "--k",
                "256",
                "--n",
                "64",
                "--tile-m",
                "128",
                "--tile-n",
                "128",
            ],
            "bytes of L1",
        ),
        (["--m", "64"], "give --k and --n"),
        (["--layer", "x", "--m", "4"], "--layer needs --weights PATH"),
        (["--decoder-layer", "0", "--m", "4"], "--decoder-layer need --weights PATH"),
        (["--m", "4", "--k", "256", "--n", "64", "--iters", "0"], "need iters >= 1"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message):
    code, out, err = run(*args, "--backend", "emu")
    assert code == 2, out + err
    assert (
        message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    )


def test_numerical_failure_is_exit_1_with_figures(monkeypatch, capsys):
    from host import run as host_run

    real = host_run.run_emulator

    def corrupted(*args, **kwargs):
        c = real(*args, **kwargs).copy()
        c[0, :] = bfloat16(0)
        return c

    monkeypatch.setattr(host_run, "run_emulator", corrupted)
    code = host_run.main(["--m", "16", *SMALL])
    out = capsys.readouterr().out
    assert code == 1
    assert "failed: mismatch" in out and out.rstrip().endswith("FAIL!")


def test_awq_checkpoint_layer_runs_and_saves_the_formats_dequantisation(tmp_path):
    from formats.test_checkpoints import (
        LAYER,
        awq_tensors,
        expected_dequant,
        logical,
        write_dir,
    )

    q, z, s = logical(256, 96, 64, seed=5)
    ckpt = write_dir(
        tmp_path / "ckpt",
        awq_tensors(q, z, s),
        {"quant_method": "awq", "bits": 4, "group_size": 64, "version": "gemm"},
    )
    code, out, err = run("--awq", str(ckpt), "--list-layers")
    assert code == 0 and f"{LAYER}  awq-gemm  K=256 N=96 GS=64" in out, out + err
    code, out, err = run(
        "--awq",
        str(ckpt),
        "--layer",
        LAYER,
        "--m",
        "9",
        "--backend",
        "emu",
        "--save",
        str(tmp_path / "out"),
    )
    assert code == 0, out + err
    assert "scales float16 -> bfloat16" in out and out.rstrip().endswith("PASS!")
    w = np.load(tmp_path / "out" / "w_dequant.npy", allow_pickle=False)
    np.testing.assert_array_equal(w, expected_dequant(q, z, s, 64))
    code, out, err = run(
        "--awq", str(ckpt), "--layer", "nope", "--m", "9", "--backend", "emu"
    )
    assert code == 2 and "layer 'nope' not found" in err


def test_decoder_layer_runs_seven_projections_a_line_each(tmp_path):
    from formats.test_checkpoints import awq_tensors, logical, write_dir

    tensors = {}
    shapes = {
        "q_proj": (128, 128),
        "k_proj": (128, 32),
        "v_proj": (128, 32),
        "o_proj": (128, 128),
        "gate_proj": (128, 256),
        "up_proj": (128, 256),
        "down_proj": (256, 128),
    }
    for i, (proj, (k, n)) in enumerate(shapes.items()):
        part = "mlp" if proj in ("gate_proj", "up_proj", "down_proj") else "self_attn"
        tensors.update(
            awq_tensors(
                *logical(k, n, 32, seed=i), prefix=f"model.layers.3.{part}.{proj}"
            )
        )
    ckpt = write_dir(
        tmp_path / "ckpt",
        tensors,
        {"quant_method": "awq", "bits": 4, "group_size": 32, "version": "gemm"},
    )
    code, out, err = run(
        "--awq", str(ckpt), "--decoder-layer", "3", "--m", "5", "--backend", "emu"
    )
    assert code == 0, out + err
    lines = out.strip().splitlines()
    assert len(lines) == 8 and lines[-1] == "PASS!"
    assert all(
        line.startswith("model.layers.3.") and line.endswith("PASS")
        for line in lines[:7]
    )


# AWQ's default configurations up to M = 128, and MXFP4's at M = 32: one row per distinct configuration
# (q / o, k / v and gate / up share theirs)
DEFAULT_ROWS = list(
    {
        (r["format"], r["m"], r["k"], r["n"]): r
        for r in load_table()
        if (r["format"] == "awq" and r["m"] <= 128)
        or (r["format"] == "mxfp4" and r["m"] == 32)
    }.values()
)


@pytest.mark.parametrize(
    "row",
    [
        # `make test` runs the rows under 2 s (about half of them, both formats, both M); `slow` the rest
        pytest.param(
            r,
            id=f"{r['projection']}-m{r['m']}-{r.get('format', 'awq')}",
            marks=(
                [pytest.mark.slow]
                if r["projection"] in ("gate_up_proj", "up_proj", "down_proj")
                else []
            ),
        )
        for r in DEFAULT_ROWS
    ],
)
def test_default_configurations_pass_on_the_emulator(row):
    from host.bench import emulate
    from int4awq.design.sweep import default_config

    cfg, _ = default_config(
        row["m"], row["k"], row["n"], row["gs"], row.get("format", "awq")
    )
    assert cfg.format == row.get("format", "awq")
    corr, passed = emulate(cfg, row["m"], row["k"], row["n"])
    assert passed and corr > 0.9999


def test_mxfp4_weights_run_exact_through_both_designs():
    """Random MXFP4 weights on the emulator: the GEMM (herd 2x4) and the decode GEMV, exact mode (only C's
    bf16 rounding is left, at most 2^-8 relative)."""
    shape = [
        "--k",
        "256",
        "--n",
        "256",
        "--backend",
        "emu",
        "--format",
        "mxfp4",
        "--exact",
    ]
    # the kernel objects of tests/kernel/test_mxfp4.py (16 x 32 x 256; the GEMV's 64 x 64): no new builds
    gemm = [
        "--m",
        "32",
        "--tile-m",
        "16",
        "--tile-n",
        "32",
        "--tile-k-l1",
        "256",
        "--tile-k-l2",
        "256",
    ]
    code, out, err = run(*gemm, "--herd-m", "2", "--herd-n", "4", *shape)
    assert code == 0, out + err
    assert out.splitlines()[0].startswith(
        "MXFP4 M=32 K=256 N=256 GS=32 "
    ) and out.rstrip().endswith("PASS!")
    gemv = ["--tile-n", "64", "--tile-k-l1", "64", "--tile-k-l2", "256"]
    code, out, err = run("--m", "3", "--design", "gemv", *gemv, *shape)
    assert code == 0, out + err
    assert out.splitlines()[0].startswith("MXFP4 GEMV M=3") and out.rstrip().endswith(
        "PASS!"
    )


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            ["--gs", "128"],
            "--format mxfp4: its scales cover 32 values along K, not --gs 128",
        ),
        (
            ["--tile-k-l1", "48", "--tile-k-l2", "96"],
            "MXFP4: tile_k_l1 = 48 must be a multiple of 32",
        ),
    ],
)
def test_mxfp4_refusals_are_one_line_exit_2(extra, message):
    code, out, err = run(
        "--m",
        "64",
        "--k",
        "192",
        "--n",
        "64",
        "--format",
        "mxfp4",
        "--backend",
        "emu",
        *extra,
    )
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, (
        out + err
    )


@pytest.mark.parametrize(
    "shape, tiles",
    [
        (
            (128, 512, 256),
            (16, 16, 128, 256),
        ),  # 4 N blocks of 64 columns, 2 slices of K
        ((512, 2048, 1024), (64, 128, 32, 256)),  # q_proj's tiles: 2 N blocks, 8 slices
    ],
)
def test_a_resident_across_n_blocks_is_the_kernel_bit_for_bit(shape, tiles):
    """n_per_segment = 2 (A filled once per M block and re-sent by the refeed primitive, which the
    emulator sends in aircc's BD ring order): C bit for bit the kernel model's and the default
    design's, and A crosses DDR once per M block, as DesignConfig.ddr_bytes counts it.
    """
    import dataclasses

    sys.path.insert(0, os.path.join(REPO, "emulator"))
    from air.backend.xrt import XRTBackend

    from int4awq.design.design import DesignConfig, build_host_kernel
    from int4awq.formats.quant import random_activations, random_weights
    from int4awq.kernel import record
    from int4awq.kernel.kernel_model import kernel_gemm_model
    from matmul_int4_packed import backend_options, build_module

    (m, k, n), (tm, tn, tk1, tk2) = shape, tiles
    one = DesignConfig(
        m=m, k=k, n=n, gs=128, tile_m=tm, tile_n=tn, tile_k_l1=tk1, tile_k_l2=tk2,
        herd_m=8, herd_n=4,
    )  # fmt: skip
    two = dataclasses.replace(one, n_per_segment=2)
    build_host_kernel(one)
    os.environ["AIR_EMU_LIB_PATH"] = os.path.join(REPO, "kernels", "build")
    w = random_weights(k, n, 128, seed=1)
    a = random_activations(m, k, seed=2)
    packed = record.pack_weights(w, tn, tk1, dense=one.kernel.dense)
    out = {}
    for cfg in (one, two):
        backend = XRTBackend(**backend_options(cfg))
        invoke = backend.compile_and_load(build_module(**cfg.builder_args()))
        c = invoke(a, packed, np.zeros((m, n), bfloat16))[2]
        out[cfg.n_per_segment] = np.asarray(c).reshape(m, n).view(np.uint16)
        stats = backend.emu_stats
        assert stats.bytes[("L3", "L2")] + stats.bytes[("L2", "L3")] == cfg.ddr_bytes()
    model = np.asarray(kernel_gemm_model(a, w, tk1)).view(np.uint16)
    np.testing.assert_array_equal(out[2], model)
    np.testing.assert_array_equal(out[2], out[1])
    assert two.ddr_bytes() == one.ddr_bytes() - m * k * 2 * (n // (tn * 4) // 2)
