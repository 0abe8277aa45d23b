# SPDX-License-Identifier: MIT
"""The Makefile's argument passing and interpreter choice, from `make -n` (nothing is run)."""

import os
import shutil
import subprocess
import sys

import pytest

from host_args import MAKE_TARGETS, target_config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def dry(*args, cwd=REPO, env=None):
    res = subprocess.run(
        ["make", "-n", "-C", cwd, *args], capture_output=True, text=True, env=env
    )
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


def host_line(out):
    [line] = [ln for ln in out.splitlines() if "host/run.py" in ln]
    return line


def test_a_checkpoint_gives_k_n_gs_and_the_tiles():
    # run_llama_qproj's own K = N = 2048 and tiles would contradict a checkpoint of another shape
    line = host_line(dry("run_llama_qproj", "AWQ=/ck", "BACKEND=emu"))
    assert (
        "--awq /ck --layer model.layers.0.self_attn.q_proj" in line
        and "--m 2048" in line
    )
    for opt in (
        "--k",
        "--n",
        "--gs",
        "--tile-m",
        "--tile-n",
        "--tile-k-l1",
        "--tile-k-l2",
        "--herd-m",
        "--herd-n",
    ):
        assert f"{opt} " not in line, line
    line = host_line(
        dry("run_llama_qproj", "AWQ=/ck", "TILE_M=32", "K=2048")
    )  # what the user sets is passed
    assert "--tile-m 32" in line and "--k 2048" in line and "--n " not in line
    line = host_line(
        dry("run_llama_qproj")
    )  # without a checkpoint: the target's whole shape
    assert (
        "--m 2048 --k 2048 --n 2048 --gs 128 --tile-m 64 --tile-n 128 --tile-k-l1 32 --tile-k-l2 256"
        in line
    )


def test_run_targets_tell_the_host_program_their_goal():
    line = host_line(dry("run_llama_qproj", "BACKEND=npu"))
    assert line.startswith("INT4AWQ_MAKE_TARGET='run_llama_qproj' ")
    assert host_line(dry()).startswith("INT4AWQ_MAKE_TARGET='run' ")


def _bare_tree(tmp_path):
    """Makefile and requirements.txt alone, so `make -n deps` shows the interpreter it would use."""
    tree = tmp_path / "tree"
    tree.mkdir()
    for name in ("Makefile", "requirements.txt", "requirements-dev.txt"):
        shutil.copy(os.path.join(REPO, name), tree / name)
    return tree


def _env_with_python3(bin_dir, python=None):
    """The environment with bin_dir first on PATH; python, when given, linked there as python3."""
    bin_dir.mkdir(exist_ok=True)
    if python:
        (bin_dir / "python3").symlink_to(python)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "CONDA_PREFIX", "PYTHON")
    }
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    return env


def test_outside_a_virtualenv_deps_makes_and_uses_dot_venv(tmp_path):
    base = os.path.join(
        sys.base_prefix, "bin", "python3"
    )  # the interpreter no virtualenv wraps
    tree = _bare_tree(tmp_path)
    out = dry("deps", cwd=str(tree), env=_env_with_python3(tmp_path / "bin", base))
    assert f"python3 -m venv --system-site-packages {tree}/.venv" in out
    assert (
        f"{tree}/.venv/bin/python -m pip install --disable-pip-version-check -r {tree}/requirements.txt"
        in out
    )
    assert "PIP_ROOT_USER_ACTION" not in out  # pip's warning about root is not hidden


def test_inside_a_virtualenv_deps_uses_it(tmp_path):
    venv = tmp_path / "v"
    subprocess.run(
        [
            os.path.join(sys.base_prefix, "bin", "python3"),
            "-m",
            "venv",
            "--without-pip",
            str(venv),
        ],
        check=True,
    )
    tree = _bare_tree(tmp_path)
    out = dry(
        "deps", cwd=str(tree), env=_env_with_python3(venv / "bin")
    )  # as `source v/bin/activate` does
    assert "-m venv" not in out and ".venv" not in out
    assert (
        f"python3 -m pip install --disable-pip-version-check -r {tree}/requirements.txt"
        in out
    )


def test_an_explicit_python_is_used_as_given(tmp_path):
    tree = _bare_tree(tmp_path)
    out = dry("deps", f"PYTHON={sys.executable}", cwd=str(tree))
    assert (
        f"{sys.executable} -m pip install --disable-pip-version-check -r {tree}/requirements.txt"
        in out
        and "-m venv" not in out
    )


def test_only_the_tests_formatters_and_bench_install_the_dev_tools(tmp_path):
    """requirements-dev.txt (pytest, lit, black, clang-format, matplotlib, ...) for test, format,
    format-check and bench; a run installs requirements.txt alone."""
    tree = _bare_tree(tmp_path)
    py = f"PYTHON={sys.executable}"
    dev = f"-r {tree}/requirements-dev.txt"
    for goal in ("deps", "run8x4", "run_llama_decode"):
        out = dry(goal, py, cwd=str(tree))
        assert f"-r {tree}/requirements.txt" in out and dev not in out, goal
    for goal in ("test", "format", "format-check", "bench", "dev-deps"):
        assert dev in dry(goal, py, cwd=str(tree)), goal


@pytest.mark.parametrize(
    "target, variables",
    [(t, ()) for t in MAKE_TARGETS] + [("run1x1", ("M=128",))],
)
def test_every_make_target_builds_what_upstream_runs(target, variables):
    # The design of each target passes the emulator's reading of aircc's passes (no re-laying fill on a
    # split L2 buffer, no refeed past 63 or split refeed carrier, no odd ping-pong trip count) and takes
    # the runtime loop tiling mlir-air's bfp16 GEMM would: [1, 1] on a small herd with several launches.
    cfg = target_config(target, *variables)
    assert cfg.resource_problem() is None
    lm, ln = cfg.launch_grid
    small = cfg.herd_m * cfg.herd_n < 8 and lm * ln > 1
    assert cfg.runtime_loop_tiling == ((1, 1) if small else (2, 2))
    if (
        variables
    ):  # run1x1 M=128: a 1x1 herd over a [2, 1] launch grid, unrolled by [1, 1]
        assert (lm, ln) == (2, 1) and cfg.runtime_loop_tiling == (1, 1)


def test_format_mxfp4_reaches_the_host_program_and_the_kernel_build():
    line = host_line(dry("run8x4", "FORMAT=mxfp4"))
    assert "--format mxfp4 --m 512 --k 1024 --n 256 --gs 32" in line
    out = dry("compile", "FORMAT=mxfp4")
    assert "peano FORMAT=mxfp4 DIM_M=64 DIM_N=64 DIM_K_CHUNK=64 DIM_GS=32" in out
    assert "--format awq" in host_line(dry("run8x4")) and "--gs 128" in host_line(
        dry("run8x4")
    )
    decode = host_line(dry("run_llama_decode", "FORMAT=mxfp4"))
    assert "--design gemv --format mxfp4" in decode and "--gs 32" in decode


def test_make_help_lists_targets_that_exist():
    out = subprocess.run(
        ["make", "-s", "-C", REPO, "help"], capture_output=True, text=True, check=True
    ).stdout
    listed = [line.split()[1] for line in out.splitlines() if line.startswith("make ")]
    assert {"run8x4", "test", "bench", "aircc-check", "help"} <= set(listed)
    with open(os.path.join(REPO, "Makefile")) as f:
        declared = {
            word
            for line in f
            if line.startswith(".PHONY:")
            for word in line.split()[1:]
        }
    assert set(listed) <= declared


def test_the_makefile_runs_from_any_directory(tmp_path):
    """`make -f <checkout>/Makefile run2x4` from elsewhere: every path the recipes name is the checkout's,
    and the build directory of the recipes is not the caller's."""
    res = subprocess.run(
        ["make", "-n", "-f", os.path.join(REPO, "Makefile"), "run2x4", "test"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"{REPO}/host/run.py --format awq --m 128 --k 512 --n 256" in res.stdout
    assert (
        f'--dist loadfile -m "not slow" {REPO}/tests {REPO}/emulator/tests'
        in res.stdout
    )
    assert not list(tmp_path.iterdir())  # nothing written where make was called
