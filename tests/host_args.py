# SPDX-License-Identifier: MIT
"""What the host-program tests share: the repository, host/run.py and a small legal design to run."""

import os
import shlex
import subprocess

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


# The GEMM's make targets, and the host/run.py option -> DesignConfig field of the line each runs.
MAKE_TARGETS = [
    "run1x1",
    "run2x4",
    "run8x4",
    "run_llama_qproj",
    "run_llama_qproj_seq32",
    "run_llama_down",
]
_OPTION_FIELDS = {
    "--m": "m",
    "--k": "k",
    "--n": "n",
    "--gs": "gs",
    "--tile-m": "tile_m",
    "--tile-n": "tile_n",
    "--tile-k-l1": "tile_k_l1",
    "--tile-k-l2": "tile_k_l2",
    "--herd-m": "herd_m",
    "--herd-n": "herd_n",
}


def target_config(target, *variables):
    """The DesignConfig a make target runs, from the host/run.py line of `make -n` (nothing is run)."""
    from int4awq.design import DesignConfig

    res = subprocess.run(
        ["make", "-n", "-C", REPO, target, "BACKEND=emu", *variables],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    [line] = [ln for ln in res.stdout.splitlines() if "host/run.py" in ln]
    words = shlex.split(line)
    fields = {
        _OPTION_FIELDS[w]: int(v)
        for w, v in zip(words, words[1:])
        if w in _OPTION_FIELDS
    }
    assert set(fields) == set(_OPTION_FIELDS.values()), line
    return DesignConfig(**fields)
