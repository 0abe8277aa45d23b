# SPDX-License-Identifier: MIT
# lit configuration: emulator tests run everywhere; NPU2 tests need the features detected below.
import os
import re
import subprocess
import sys

import lit.formats

config.name = "int4-awq-gemm"
config.test_format = lit.formats.ShTest()
config.suffixes = [".lit"]
config.test_source_root = os.path.dirname(__file__)
repo_root = os.path.dirname(config.test_source_root)
config.test_exec_root = os.path.join(repo_root, "build", "lit")

# Each test makes a directory of its own, enters it and runs `make -f %S/../Makefile ...` there, as
# mlir-air's lit tests do; pass through what the toolchain and XRT need.
for var in (
    "PATH",
    "HOME",
    "PEANO_INSTALL_DIR",
    "MLIR_AIE_INSTALL_DIR",
    "XILINX_XRT",
    "LD_LIBRARY_PATH",
    "PYTHONPATH",
    "AIR_TARGET_DEVICE",
    "TERM",
):
    if var in os.environ:
        config.environment[var] = os.environ[var]

config.substitutions.append(("%PYTHON", sys.executable))
# The Python FileCheck (PyPI `filecheck`), run through this interpreter: no console-script shim needed.
config.substitutions.append(("FileCheck", f"{sys.executable} -m filecheck"))


def probe(cmd):
    """stdout+stderr of cmd, lower-cased; '' when it cannot run (absent tool, driver error, hang)."""
    try:
        res = subprocess.run(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30
        )
        return res.stdout.decode("utf-8", "replace").lower()
    except (OSError, subprocess.TimeoutExpired):
        return ""


# ryzen_ai_npu2: `xrt-smi examine` names an XDNA2 part (the host program's own probe).
sys.path.insert(0, repo_root)
from int4awq.run.npu import npu2_present  # noqa: E402

if npu2_present()[0]:
    config.available_features.add("ryzen_ai_npu2")
    # A failed device probe inside aircc silently builds for npu1: pin the target.
    config.environment["AIR_TARGET_DEVICE"] = "npu2"

# peano: Peano's llc knows the AI Engine target.
peano_dir = os.environ.get("PEANO_INSTALL_DIR", "")
if peano_dir and re.search(
    r"ai engine",
    probe([os.path.join(peano_dir, "bin", "llc"), "-mtriple=aie", "--version"]),
):
    config.available_features.add("peano")
config.substitutions.append(("%PEANO_INSTALL_DIR", peano_dir))

# air_emulator: this repository's CPU emulator (emulator/air) is beside the tests. Its lits say
# `REQUIRES: air_emulator`, so a runner that has only the NPU2 and Peano features (mlir-air's) skips them.
if os.path.isdir(os.path.join(repo_root, "emulator", "air")):
    config.available_features.add("air_emulator")

print(
    f"lit features: {sorted(f for f in config.available_features if f in ('ryzen_ai_npu2', 'peano', 'air_emulator')) or 'none'}"
)
