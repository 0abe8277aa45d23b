# SPDX-License-Identifier: MIT
"""host/run.py as a user meets it: bad input is one line on stderr and exit 2 (never a traceback),
numerical failures exit 1 with their figures and causes, Ctrl-C exits 130, --report comes after the
result within 100 columns. In-process calls of main(argv) unless the case is about the process.
"""

import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest
from ml_dtypes import bfloat16

from host import run as host_run
from int4awq.formats.quant import AwqWeights, random_weights
from int4awq.run.reference import bfp16_blocks, bfp16_loss, check, explain_failure

import compiler_tools
import host_args
from host_args import REPO, RUN, SMALL

GS_RULE = "must be a multiple of 16 (the kernel's dequantisation converts two 8-deep K blocks per step)"


def main(capsys, *argv):
    code = host_run.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_bad_input(code, out, err, message):
    assert code == 2, out + err
    assert message in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.fixture
def no_run(monkeypatch):
    """Fail the test if the GEMM would run: the error must come before it."""

    def ran(*args, **kwargs):
        raise AssertionError("the run started before the input was checked")

    monkeypatch.setattr(host_run, "run_emulator", ran)
    monkeypatch.setattr(host_run, "run_npu", ran)


def npy(tmp_path, name, arr):
    path = tmp_path / name
    np.save(path, arr)
    return str(path)


# ------------------------------------------------------------------------------------------ options
@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--m", "4", *SMALL, "--seed", "-1"],
            "--seed -1: must be a non-negative integer",
        ),
        (["--m", "1e9", *SMALL], "argument --m: invalid int value: '1e9' (see --help)"),
        (
            ["--m", "4", *SMALL, "--backend", "gpu"],
            "argument --backend: invalid choice",
        ),
        (["--m", "1000000000", *SMALL], "GiB of host memory"),
        (["--m", "4", "--k", "1000000000000000000", "--n", "64"], "GiB of host memory"),
        (
            ["--m", "1000000000000000000", "--k", "256", "--n", "64"],
            "GiB of host memory",
        ),
        (["--m", "4", *SMALL, "--gs", "100"], "GS = 100: " + GS_RULE),
        (["--m", "4", *SMALL, "--gs", "24"], "GS = 24: " + GS_RULE),
        (["--m", "4", "--k", "256", "--n", "64", "--gs", "8"], "GS = 8: " + GS_RULE),
        (["--awq", "", "--layer", "x", "--m", "4"], "--weights: the path is empty"),
        (
            ["--awq", "/dev/null", "--layer", "x", "--m", "4"],
            "/dev/null: not a regular file or a directory",
        ),
        (
            ["--awq", "/dev/null", "--list-layers"],
            "/dev/null: not a regular file or a directory",
        ),
        (
            ["--awq", "ck", "--list-layers", "--layer", "x"],
            "cannot be combined with --layer",
        ),
        (
            ["--awq", "ck", "--list-layers", "--decoder-layer", "0"],
            "cannot be combined with --decoder-layer",
        ),
        (
            ["--awq", "ck", "--decoder-layer", "0", "--layer", "x", "--m", "4"],
            "cannot be combined with --layer",
        ),
        (
            ["--awq", "ck", "--decoder-layer", "0", "--exact", "--m", "4"],
            "cannot be combined with --exact",
        ),
        (
            ["--awq", "ck", "--decoder-layer", "0", "--k", "64", "--m", "4"],
            "cannot be combined with --k",
        ),
        (
            ["--awq", "ck", "--decoder-layer", "-1", "--m", "4"],
            "--decoder-layer -1: must be a non-negative",
        ),
    ],
    ids=lambda v: " ".join(v)[:60] if isinstance(v, list) else None,
)
def test_bad_options_are_one_line_and_exit_2(capsys, no_run, args, message):
    assert_bad_input(*main(capsys, *args), message)


# the option as --help presents it, whichever of its names was typed
@pytest.mark.parametrize(
    "args, message",
    [
        (["--layer", "x", "--m", "4"], "error: --layer needs --weights PATH"),
        (
            ["--list-layers"],
            "error: --list-layers and --decoder-layer need --weights PATH",
        ),
        (
            ["--decoder-layer", "0", "--m", "4"],
            "error: --list-layers and --decoder-layer need --weights PATH",
        ),
        (["--m", "4"], "error: give --k and --n (or --weights PATH --layer NAME)"),
        (
            ["--awq", "", "--list-layers"],
            "error: --weights: the path is empty (give a checkpoint directory, a .safetensors file or a "
            ".gguf file)",
        ),
    ],
)
def test_messages_name_the_weights_option_as_help_shows_it(
    capsys, no_run, args, message
):
    code, out, err = main(capsys, *args)
    assert code == 2 and err.strip() == message, out + err
    assert "--awq" not in err


def test_every_option_has_a_help_line_with_its_default():
    import argparse

    import example_main

    builder = argparse.ArgumentParser()
    example_main.add_arguments(builder)
    for parser in (host_run.build_parser(), builder):
        bare = [
            a.option_strings[0]
            for a in parser._actions
            if not (a.help or "").strip() or a.help == argparse.SUPPRESS
        ]
        assert bare == [], f"options without help: {bare}"
    helps = {
        a.option_strings[0]: a.help
        for a in host_run.build_parser()._actions
        if a.option_strings
    }
    assert "(default)" in helps["--backend"] and "emu" in helps["--backend"]
    assert "(default 0)" in helps["--seed"]
    assert "(default 3;" in helps["--warmup"] and "(default 10;" in helps["--iters"]
    usage = host_run.build_parser().format_help()
    assert "untimed NPU iterations before the timed ones" in usage


def test_decoder_layer_refuses_options_it_would_ignore(capsys, no_run, tmp_path):
    a = npy(tmp_path, "a.npy", np.ones((4, 64), np.float32))
    for extra, name in (
        (["--activations", a], "--activations"),
        (["--save", str(tmp_path / "o")], "--save"),
        (["--report"], "--report"),
    ):
        assert_bad_input(
            *main(capsys, "--awq", "ck", "--decoder-layer", "0", "--m", "4", *extra),
            f"cannot be combined with {name}",
        )


# ------------------------------------------------------------------------------------------ --save
def test_save_onto_a_file_or_below_one_is_refused_before_the_run(
    capsys, no_run, tmp_path
):
    f = tmp_path / "file"
    f.write_text("x")
    assert_bad_input(
        *main(capsys, "--m", "4", *SMALL, "--save", str(f)),
        "exists and is not a directory",
    )
    assert_bad_input(
        *main(capsys, "--m", "4", *SMALL, "--save", str(f / "sub")),
        "a parent of it is a file",
    )
    (tmp_path / "out" / "c.npy").mkdir(parents=True)
    assert_bad_input(
        *main(capsys, "--m", "4", *SMALL, "--save", str(tmp_path / "out")),
        "c.npy there is a directory",
    )


@pytest.mark.skipif(
    not os.path.isdir("/sys/kernel"), reason="needs a read-only /sys (Linux)"
)
def test_save_into_a_read_only_place_is_refused_before_the_run(capsys, no_run):
    # /sys refuses new directories even to root (a chmod'ed directory does not stop root)
    assert_bad_input(
        *main(capsys, "--m", "4", *SMALL, "--save", "/sys/int4awq-save"),
        "cannot create the directory",
    )


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_save_into_a_read_only_directory_is_refused_before_the_run(
    capsys, no_run, tmp_path
):
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o555)
    try:
        assert_bad_input(
            *main(capsys, "--m", "4", *SMALL, "--save", str(d)), "cannot write there"
        )
    finally:
        d.chmod(0o755)


# ------------------------------------------------------------------------------------------ --activations
def test_activation_files_that_are_not_one_numeric_array(capsys, no_run, tmp_path):
    np.savez(tmp_path / "a.npz", a=np.ones((4, 256), np.float32))
    (tmp_path / "a.txt").write_text("1 2 3\n")
    cases = [
        (str(tmp_path / "a.npz"), "an .npz archive; give one array"),
        (str(tmp_path / "a.txt"), "not a .npy file"),
        (
            npy(tmp_path, "obj.npy", np.array([{"a": 1}], dtype=object)),
            "holds Python objects",
        ),
        (
            npy(tmp_path, "i32.npy", np.ones((4, 256), np.int32)),
            "dtype int32, expected bfloat16 (ml_dtypes, stored by np.save as |V2), float16, float32 or float64",
        ),
        (
            npy(tmp_path, "3d.npy", np.ones((2, 4, 256), np.float32)),
            "shape (2, 4, 256), expected 2 dimensions",
        ),
        (
            npy(tmp_path, "nan.npy", np.full((4, 256), np.nan, np.float32)),
            "A[0, 0] = nan: contains NaN or Inf",
        ),
        (
            npy(tmp_path, "f64.npy", np.full((4, 256), 1e300)),
            "values up to 1e+300 exceed bfloat16's range",
        ),
        (str(tmp_path / "absent.npy"), "cannot read (No such file or directory)"),
        (str(tmp_path), "cannot read (Is a directory)"),
    ]
    for path, message in cases:
        assert_bad_input(*main(capsys, *SMALL, "--activations", path), message)
    assert "allow_pickle" not in capsys.readouterr().err


@pytest.mark.parametrize(
    "arr",
    [
        np.random.default_rng(0)
        .standard_normal((4, 256))
        .astype(bfloat16),  # np.save writes |V2
        np.random.default_rng(0)
        .standard_normal((4, 256))
        .astype(">f4"),  # big-endian float32
        np.random.default_rng(0).standard_normal((4, 256)).astype(np.float16),
    ],
    ids=["ml_dtypes-bfloat16", "big-endian-float32", "float16"],
)
def test_activation_dtypes_that_are_accepted(capsys, tmp_path, arr):
    code, out, err = main(capsys, *SMALL, "--activations", npy(tmp_path, "a.npy", arr))
    assert code == 0 and out.rstrip().endswith("PASS!"), out + err


def test_a_product_beyond_bf16_or_f32_is_bad_input_before_the_run(
    capsys, no_run, tmp_path
):
    # the reference reaches past bf16's range: no warnings, no `atol inf`, exit 2
    path = npy(tmp_path, "big.npy", np.full((4, 256), 3e38, np.float32))
    code, out, err = main(capsys, *SMALL, "--activations", path)
    assert_bad_input(code, out, err, "beyond bfloat16's range")
    assert "atol inf" not in out and "Warning" not in err
    # C fits, but the kernel's f32 group sum before the scale would not
    path = npy(tmp_path, "acc.npy", np.full((4, 256), 2e37, np.float32))
    assert_bad_input(
        *main(capsys, *SMALL, "--activations", path),
        "f32 accumulator before the scale is applied",
    )


# ------------------------------------------------------------------------------------------ bfp16 causes
def test_subnormal_activations_fail_with_the_reason(capsys, tmp_path):
    path = npy(
        tmp_path, "sub.npy", np.full((4, 256), 1e-39, np.float32)
    )  # bf16 subnormals
    code, out, err = main(capsys, *SMALL, "--activations", path)
    assert code == 1, out + err
    assert "cause: A holds 1024 of 1024 values that are bf16 subnormals" in out
    assert (
        "C matches the reference computed from A as the bfp16 blocks hold it"
        in " ".join(out.split())
    )
    assert out.rstrip().endswith("FAIL!") and all(
        len(line) <= 100 for line in out.splitlines()[-4:]
    )


def test_bfp16_blocks_follow_the_kernels_rule():
    # independent spelling of host::to_bfp16_block: per block of 8, step 2^(e - 6), e = exponent of the max
    rng = np.random.default_rng(4)
    a = (rng.standard_normal((6, 64)) * np.exp2(rng.integers(-30, 30, (6, 64)))).astype(
        np.float32
    )
    a[0, :8] = [2.0**40, 1.0, -3.0, 0.0, 2.0**33, 3 * 2.0**33, -(2.0**32), 1e-39]
    a = a.astype(bfloat16)
    x = a.astype(np.float64)
    want = np.zeros_like(x)
    for r in range(x.shape[0]):
        for b in range(0, x.shape[1], 8):
            blk = [v if abs(v) >= 2.0**-126 else 0.0 for v in x[r, b : b + 8]]
            big = max(abs(v) for v in blk)
            if big == 0:
                continue
            e = int(np.floor(np.log2(big)))
            for i, v in enumerate(blk):
                want[r, b + i] = min(
                    max(round(v / 2.0 ** (e - 6)), -128), 127
                ) * 2.0 ** (e - 6)
    np.testing.assert_array_equal(bfp16_blocks(a), want)
    # step 2^34: 2^33 is half a step (a tie: to even, 0), 3 * 2^33 is 1.5 steps (to 2 steps)
    np.testing.assert_array_equal(want[0, :8], [2.0**40, 0, 0, 0, 0, 2.0**35, 0, 0])
    loss = bfp16_loss(a)
    assert loss.subnormal == 1 and loss.flushed >= 4 and loss.example[:2] == (0, 1)


def test_block_flushes_are_named_as_the_cause_of_a_failure():
    # a huge value in each block of 8 whose contribution cancels: what is left is what bfp16 drops
    k, n = 64, 16
    w = random_weights(k, n, 32, seed=3)
    a = np.random.default_rng(5).standard_normal((8, k)).astype(np.float32)
    a[:, 0], a[:, 8] = 2.0**40, -(2.0**40)
    q = w.q.copy()  # a validated weight is read-only: a changed one is a new value
    q[8] = q[0]  # rows 0 and 8 dequantise alike (same group), so 2^40 cancels
    w = AwqWeights(q, w.z, w.s, w.gs).validate()
    a = a.astype(bfloat16)
    from int4awq.formats.quant import dequantize

    c_kernel = (bfp16_blocks(a) @ dequantize(w).astype(np.float64)).astype(np.float32)
    ref = (a.astype(np.float64) @ dequantize(w).astype(np.float64)).astype(np.float32)
    res = explain_failure(check(c_kernel, ref), c_kernel, a, w)
    assert not res.passed
    text = " ".join(res.report().split())
    assert "nonzero values that bfp16 blocks round to 0" in text and "A[0, 1]" in text
    assert "beside A[0, 0] = 1.1e+12" in text
    assert "C matches the reference computed from A as the bfp16 blocks hold it" in text
    assert all(len(line) <= 100 for line in res.report().splitlines())


# ------------------------------------------------------------------------------------------ --report
def test_report_comes_after_the_result_within_100_columns(capsys):
    code, out, err = main(capsys, "--m", "16", *SMALL, "--report")
    assert code == 0, out + err
    lines = out.splitlines()
    verdict = lines.index("PASS!")
    after = "\n".join(lines[verdict + 1 :])
    assert "Memory budget (emulator, static)" in after and "L1 per PE of herd" in after
    assert "Emulator counters" in after and "matmul_int4_bf16_packed_f32" in after
    assert (
        "NPU2 resources" in after and "resources: within limits" in lines[verdict + 1 :]
    )
    assert "modelled NPU2: DDR" in "\n".join(
        lines[:verdict]
    )  # a figure of the result, before the verdict
    assert max(len(line) for line in lines) <= 100, max(lines, key=len)


def test_no_tables_without_report(capsys):
    code, out, err = main(capsys, "--m", "16", *SMALL)
    assert code == 0, out + err
    assert out.rstrip().endswith("PASS!")
    assert (
        "alloc" not in out
        and "budget" not in out.lower()
        and "Emulator counters" not in out
    )
    assert len(out.splitlines()) <= 10


def test_report_tables_fit_for_the_largest_configuration(monkeypatch):
    # Llama down_proj at M = 2048: long notes (an L2 buffer larger than a memtile) and long locations
    sys.path.insert(0, os.path.join(REPO, "emulator"))
    from air.backend.xrt import XRTBackend

    from int4awq.design.design import DesignConfig
    from matmul_int4_packed import backend_options, build_module

    cfg = DesignConfig(
        m=2048,
        k=8192,
        n=2048,
        gs=128,
        tile_m=64,
        tile_n=64,
        tile_k_l1=64,
        tile_k_l2=512,
        herd_m=8,
        herd_n=4,
    )
    host_run.build_host_kernel(cfg)  # int4awq.design.design, as host.run uses it
    monkeypatch.setenv("AIR_EMU_LIB_PATH", host_run.KERNEL_BUILD)
    backend = XRTBackend(**backend_options(cfg))
    backend.compile(build_module(**cfg.builder_args()))
    lines = host_run.budget_lines(backend.emu_budget)
    assert max(len(line) for line in lines) <= 100 and len(lines) > 5


# ------------------------------------------------------------------------------------------ process
def test_interrupt_exits_130_quietly_in_process(capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(host_run, "run_emulator", interrupted)
    code, out, err = main(capsys, "--m", "16", *SMALL)
    assert code == 130 and err == ""


def test_ctrl_c_during_a_run_exits_130_without_a_traceback(tmp_path):
    proc = subprocess.Popen(
        [
            sys.executable,
            RUN,
            "--m",
            "2048",
            "--k",
            "2048",
            "--n",
            "2048",
            "--backend",
            "emu",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        # Ctrl-C's default action in the child: a shell starting pytest in the background ignores SIGINT,
        # the child would inherit that, and Python keeps an ignored SIGINT ignored (the run then passes)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    time.sleep(3)  # imports done, inside the run
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err


def test_missing_dependencies_are_one_line_with_the_fix():
    # -S: no site-packages, so numpy and ml_dtypes are not importable
    res = subprocess.run(
        [sys.executable, "-S", RUN, "--m", "4", "--k", "256", "--n", "64"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert res.returncode == 2, res.stdout + res.stderr
    err = res.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert (
        "the Python package 'numpy' is not installed" in err
        and "requirements.txt" in err
    )


def test_a_missing_package_at_run_time_is_one_line(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(
        sys.modules, "safetensors", None
    )  # imported only when a checkpoint is read
    (tmp_path / "x.safetensors").write_bytes(b"\0" * 16)
    assert_bad_input(
        *main(capsys, "--awq", str(tmp_path / "x.safetensors"), "--list-layers"),
        "the Python package 'safetensors' is not installed",
    )


def test_off_a_terminal_long_runs_print_a_line_now_and_then(capsys, monkeypatch):
    monkeypatch.setattr(host_run, "HEARTBEAT_SECONDS", 0.02)
    with host_run._Heartbeat("emulating"):
        time.sleep(0.2)
    err = capsys.readouterr().err
    assert err.count("[host/run.py] still emulating:") >= 3
    monkeypatch.setattr(
        sys.stderr, "isatty", lambda: True
    )  # a terminal has the emulator's own line
    with host_run._Heartbeat("emulating"):
        time.sleep(0.1)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    "target, advice",
    [
        (None, "or use --backend emu"),
        ("run_llama_qproj", "or use `make run_llama_qproj BACKEND=emu`"),
    ],
)
def test_npu_advice_names_the_make_variable_under_make(
    capsys, monkeypatch, target, advice
):
    monkeypatch.setitem(sys.modules, "pyxrt", None)  # no XRT here
    if target:
        monkeypatch.setenv(
            "INT4AWQ_MAKE_TARGET", target
        )  # as the Makefile's run targets set it
    else:
        monkeypatch.delenv("INT4AWQ_MAKE_TARGET", raising=False)
    assert_bad_input(*main(capsys, "--m", "16", *SMALL[:-1], "npu"), advice)


def test_the_kernel_models_calibration_is_printed_once_per_run():
    from int4awq.design.kernel_cost import calibration
    from int4awq.design.sweep import default_config

    cfg, _ = default_config(64, 256, 128, 128)
    host_run._SHOWN["calibration"] = False
    first, second = (host_run.modelled_line(cfg, 64, 128) for _ in range(2))
    assert first.splitlines()[-1] == calibration().summary()
    assert calibration().summary() not in second and second.startswith("modelled NPU2:")


# ------------------------------------------------------------------------------------------ --format
def test_a_format_the_weights_file_cannot_give_is_refused(capsys, no_run, tmp_path):
    from formats.test_checkpoints import AWQ_CFG, LAYER, awq_tensors, logical, write_dir

    from int4awq.formats.weights_file import load

    q, z, s = logical(64, 16, 32, seed=3)
    ckpt = str(write_dir(tmp_path, awq_tensors(q, z, s), {**AWQ_CFG, "group_size": 32}))
    assert_bad_input(
        *main(capsys, "--weights", ckpt, "--layer", LAYER, "--m", "4", "--format", "mxfp4"),
        f"error: --format mxfp4 does not match --weights {ckpt}: {LAYER} is an int4 checkpoint's "
        "layer, which runs as --format awq or --format awq_f16; leave --format out (the file decides)",
    )  # fmt: skip
    assert_bad_input(
        *main(capsys, "--weights", ckpt, "--decoder-layer", "0", "--m", "4", "--format", "mxfp4"),
        "error: --format mxfp4 does not match --weights",
    )  # fmt: skip
    assert_bad_input(
        *main(capsys, "--weights", ckpt, "--list-layers", "--format", "awq_f16"),
        "--list-layers lists the layers and exits; it cannot be combined with --format awq_f16",
    )  # fmt: skip
    # the records an int4 checkpoint gives are still the format's to choose
    assert load(ckpt, LAYER, fmt="awq_f16")[0].format == "awq_f16"
    assert load(ckpt, LAYER, fmt="awq")[0].format == "awq"
    assert load(ckpt, LAYER)[0].format == "awq"


@pytest.mark.parametrize(
    "fmt, cls",
    [("awq", "AwqWeights"), ("mxfp4", "Mxfp4Weights"), ("int4_min", "BlockIntWeights")],
)
def test_a_weight_is_validated_once_per_run(capsys, monkeypatch, fmt, cls):
    """The weight is validated where it is made (here the seeded generator) and trusted from there on: the
    reference, the padding, the packing and the tiling checks take it as it is."""
    from int4awq.formats.gguf_quants import BlockIntWeights
    from int4awq.formats.mxfp4 import Mxfp4Weights

    calls = []
    for kind in (AwqWeights, Mxfp4Weights, BlockIntWeights):
        real = kind.validate

        def counted(self, real=real):
            calls.append(type(self).__name__)
            return real(self)

        monkeypatch.setattr(kind, "validate", counted)
    tiles = (
        "--tile-m 16 --tile-n 16 --tile-k-l1 32 --tile-k-l2 64 --herd-m 1 --herd-n 2"
    )
    code, out, err = main(
        capsys, "--format", fmt, "--m", "16", "--k", "128", "--n", "64", "--backend", "emu",
        *tiles.split(),
    )  # fmt: skip
    assert code == 0, out + err
    assert calls == [cls]
    # and it is a value: its arrays cannot be changed behind the checks
    with pytest.raises(ValueError, match="read-only"):
        random_weights(64, 16, 32, seed=1).q[0, 0] = 1


# -- runs compile first (issue 40) ---------------------------------------------------------------------
RUN1X1 = ["--m", "64", "--k", "512", "--n", "64", "--tile-m", "64", "--tile-n", "64"]
RUN1X1 += ["--tile-k-l1", "64", "--tile-k-l2", "512", "--herd-m", "1", "--herd-n", "1"]
RUN1X1 += ["--backend", "emu"]


def test_a_run_compiles_first_and_says_so():
    compiler_tools.require()
    code, out, err = host_args.run(*RUN1X1)
    assert code == 0, out + err
    assert re.search(
        r"^compiled with aircc \+ aiecc (in [\d.]+ s|\(earlier)", out, re.M
    )
    assert out.rstrip().endswith("PASS!")


def test_a_design_the_compiler_refuses_exits_2_with_its_error_and_the_design():
    # a 16400-byte stack: within the L1 budget, but aiecc keeps the stack at 0 and buffers from 0x4000
    compiler_tools.require()
    # the host rule refuses it first (record.check_stack_size, which follows aiecc); a design that
    # slipped past the host rules meets the compile-first step itself
    code, out, err = host_args.run(*RUN1X1, "--stack-size", "16400")
    assert code == 2 and "at most 16384" in err
    from int4awq.design import compiler

    good = host_args.target_config("run1x1")
    import matmul_int4_packed as builder

    with pytest.raises(
        compiler.CompileError, match=r"m64_k512.*refuses it: .*overlaps with stack"
    ):
        compiler.compile_first(
            good.name,
            str(builder.build_module(**good.builder_args())),
            dict(builder.backend_options(good), stack_size=16400),
            tempfile.mkdtemp(),
        )


def test_no_compile_skips_the_compiler_and_without_it_one_line_says_so(monkeypatch):
    code, out, err = host_args.run(*RUN1X1, "--no-compile")
    assert code == 0 and "compiled" not in out
    from int4awq.design import compiler

    monkeypatch.setenv(compiler.HIDDEN, "1")
    line, outdir = compiler.compile_first("x", "module {}", {}, tempfile.mkdtemp())
    assert outdir is None
    assert (
        line
        == "not compiled with aircc + aiecc: air-opt hidden by INT4AWQ_NO_COMPILER=1"
    )


@pytest.mark.parametrize(
    "script, reason",
    [
        # what a clone on a machine without Debian's MLIR 22 runtime meets (the prebuilt binaries load it)
        (
            "echo '/root/.cache/npu2-aircc/753939021/bin/air-opt: error while loading shared libraries: "
            "libLLVM.so.22.1: cannot open shared object file: No such file or directory' >&2; exit 127",
            "air-opt cannot load its libraries (apt-get install mlir-22-tools)",
        ),
        (
            "echo 'Segmentation fault in a very long message "
            + "x" * 200
            + "' >&2; exit 139",
            "air-opt does not run (exit 139: Segmentation fault in a very lon)",
        ),
        (None, "air-opt not found ($AIRCC_BIN, PATH, ../shared/tools/aircc)"),
    ],
)
def test_the_not_compiled_line_names_the_reason_within_100_columns(
    monkeypatch, tmp_path, script, reason
):
    from int4awq.design import compiler

    if script is not None:
        tool = tmp_path / "air-opt"
        tool.write_text("#!/bin/sh\n" + script + "\n")
        tool.chmod(0o755)
    monkeypatch.setenv("AIRCC_BIN", str(tmp_path))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("AIR_OPT", raising=False)
    monkeypatch.delenv(compiler.HIDDEN, raising=False)
    monkeypatch.setattr(compiler, "_prebuilt", lambda: None)
    line, outdir = compiler.compile_first("x", "module {}", {}, str(tmp_path))
    assert outdir is None
    assert line == f"not compiled with aircc + aiecc: {reason}"
    assert len(line) <= 100


def test_print_module_and_resources_of_the_runs_configuration(capsys):
    """-p prints the module a run of these options would build (the GEMV's is mlir-air's function, its
    record tile the configuration's); --print-resources its NPU2 resource table; neither runs.
    """
    code, out, err = main(capsys, "--m", "1", "--k", "2048", "--n", "2048", "-p")
    assert code == 0, err
    assert (
        out.startswith("module {")
        and "func.func @matvec_int4_packed(%arg0: memref<" in out
    )
    assert "xi8>, %arg1: memref<2048xbf16>, %arg2: memref<2048xbf16>)" in out
    code, out, err = main(
        capsys, "--m", "1", "--k", "2048", "--n", "2048", "--print-resources"
    )
    assert code == 0 and "resources: within limits" in out, out + err
    assert "PASS" not in out


def test_the_builders_command_lines_import_no_tool(tmp_path):
    """matmul_int4_packed.py and matvec_int4_packed.py run as mlir-air's examples run (pack_inputs,
    cpu_reference, XRTRunner; here on the emulator's air package), o_gemv_ffn_int4.py prints its module, and
    none imports anything of int4awq or host/: the tools import the example, never the other way (issue 49).
    """
    probe = (
        "import runpy, sys; sys.path.insert(0, {repo!r}); sys.argv = [{script!r}, *{args!r}]\n"
        "try:\n    runpy.run_path(sys.argv[0], run_name='__main__')\n"
        "except SystemExit as e:\n    code = e.code\n"
        "print('tools:', sorted(m for m in sys.modules if m.split('.')[0] in ('int4awq', 'host')))\n"
        "print('exit:', code)\n"
    )
    for script, args, shows in (
        ("matmul_int4_packed.py", ["--m", "64", "--k", "256", "--n", "128"], "PASS!"),
        (
            "matvec_int4_packed.py",
            ["--m", "512", "--k", "256", "--m-tile", "16"],
            "PASS!",
        ),
        # the layer module's builder prints Llama-3.2-1B's module (runs read a checkpoint: host/run.py)
        ("o_gemv_ffn_int4.py", ["-p", "--next-qkv"], "air.launch"),
    ):
        path = os.path.join(REPO, script)
        res = subprocess.run(
            [sys.executable, "-c", probe.format(repo=REPO, script=path, args=args)],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        )
        lines = res.stdout.splitlines()
        assert lines[-2:] == ["tools: []", "exit: 0"], res.stdout + res.stderr
        assert shows in res.stdout
