# SPDX-License-Identifier: MIT
"""What the host-program tests share: the repository, host/run.py, a small legal design to run, and the
build of a probe against the host aie_api."""

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(REPO, "host", "run.py")
# K 256, N 128 on a 2x2 herd of 16x32 tiles, tile_k 64 / 128, on the emulator: seconds per run.
SMALL = [
    "--k",
    "256",
    "--n",
    "128",
    "--tile-m",
    "16",
    "--tile-n",
    "32",
    "--tile-k-l1",
    "64",
    "--tile-k-l2",
    "128",
    "--herd-m",
    "2",
    "--herd-n",
    "2",
    "--backend",
    "emu",
]


# The GEMM's make targets, and the DesignConfig each runs (read from `make -n`): host/aircc_check.py's.
from host.aircc_check import MAKE_TARGETS  # noqa: E402,F401
from host.aircc_check import make_target_config as target_config  # noqa: E402,F401


def host_aie_api_library(directory, name: str, source: str, *flags: str) -> str:
    """source built with g++ against the host aie_api (emulator/include) into directory/name.so; its path."""
    src, lib = os.path.join(directory, name + ".cc"), os.path.join(
        directory, name + ".so"
    )
    with open(src, "w") as f:
        f.write(source)
    subprocess.run(
        ["g++", "-std=c++20", "-O1", "-fPIC", "-shared", *flags]
        + ["-I", os.path.join(REPO, "emulator", "include"), src, "-o", lib],
        check=True,
    )
    return lib


def run(*args: str) -> tuple[int, str, str]:
    """host/run.py with these arguments, as a user runs it: (exit code, stdout, stderr)."""
    res = subprocess.run(
        [sys.executable, RUN, *args], capture_output=True, text=True, cwd=REPO
    )
    return res.returncode, res.stdout, res.stderr
