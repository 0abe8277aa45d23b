# SPDX-License-Identifier: MIT
"""matmul_int4_packed.py as mlir-air's examples are used: build_module with plain integers, and the
upstream CLI conventions (-p / --print-module-only, --compile-mode, -v), here on the emulator.
"""

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "emulator"))

import matmul_int4_packed as builder  # noqa: E402
from int4awq.design.design import DesignConfig  # noqa: E402

SMALL = [
    "--m",
    "64",
    "--k",
    "256",
    "--n",
    "64",
    "--tile-m",
    "32",
    "--tile-n",
    "32",
    "--tile-k-l1",
    "64",
    "--tile-k-l2",
    "256",
    "--herd-m",
    "2",
    "--herd-n",
    "2",
]


def test_build_module_takes_upstreams_integers():
    # mlir-air's order: m, k, n, gs, tile_m, tile_k_l2, tile_k_l1, tile_n, herd_m, herd_n
    by_ints = str(builder.build_module(64, 256, 64, 128, 32, 256, 64, 32, 2, 2))
    cfg = DesignConfig(
        m=64,
        k=256,
        n=64,
        gs=128,
        tile_m=32,
        tile_n=32,
        tile_k_l1=64,
        tile_k_l2=256,
        herd_m=2,
        herd_n=2,
    )
    assert by_ints == str(builder.build_module(cfg))
    assert "memref<64x256xbf16>" in by_ints and "air.herd @herd_0" in by_ints


def test_print_module_only(capsys):
    assert builder.main(SMALL + ["-p"]) == 0
    assert capsys.readouterr().out.startswith("module {")


def test_compile_and_run_is_the_default_and_checks_the_result(capsys):
    assert builder.main(SMALL) == 0
    out = capsys.readouterr().out
    assert "correlation" in out and out.rstrip().endswith("PASS!")


def test_a_bad_configuration_is_one_line_and_exit_2(capsys):
    assert builder.main(SMALL[:-2] + ["--herd-n", "5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not fit the NPU2 array" in err


def test_each_builder_run_as_a_script_prints_its_module_without_mlir_air():
    """Where mlir-air is not installed, the script builds with the emulator's air package beside it and
    says so in one line (the module is the one air-opt reads: tests/design/test_aircc.py).
    """
    import subprocess

    import pytest

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = [
        sys.executable,
        "-c",
        "import importlib.util; print(importlib.util.find_spec('air'))",
    ]
    if (
        subprocess.run(probe, capture_output=True, text=True, env=env).stdout.strip()
        != "None"
    ):
        pytest.skip("mlir-air is installed: the scripts build with it")
    for script, shape in (
        ("matmul_int4_packed.py", ["--m", "512", "--k", "1024", "--n", "256"]),
        ("matvec_int4_packed.py", ["--m", "1", "--k", "2048", "--n", "2048"]),
    ):
        res = subprocess.run(
            [sys.executable, os.path.join(REPO, script), *shape, "-p"],
            capture_output=True,
            text=True,
            cwd=REPO,
            env=env,
        )
        assert res.returncode == 0, res.stderr
        assert res.stdout.startswith("module {") and "air.herd" in res.stdout
        assert res.stderr.splitlines() == [
            "note: mlir-air is not installed: building with the emulator's air package (emulator/air)"
        ]
        # an interpreter without the project's dependencies is told how to get them, in one line
        argv = [os.path.join(REPO, script), *shape, "-p"]
        bare = (
            "import runpy, sys; sys.modules['ml_dtypes'] = None; "
            f"sys.argv = {argv!r}; runpy.run_path(sys.argv[0], run_name='__main__')"
        )
        res = subprocess.run(
            [sys.executable, "-c", bare],
            capture_output=True,
            text=True,
            cwd=REPO,
            env=env,
        )
        assert res.returncode == 2 and res.stdout == "", res.stderr
        assert res.stderr.splitlines()[1:] == [
            "error: import of ml_dtypes halted; None in sys.modules: the emulator's air package needs the "
            "project's Python dependencies: run `make deps` and the script with .venv/bin/python (README, "
            "'Prerequisites')"
        ]
