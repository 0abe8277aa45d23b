"""Helpers for the emulator's tests: put the emulated `air` first on sys.path,
build the tiny test kernels (emu_kernels.cc) with g++, and small design builders."""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
EMULATOR = os.path.join(REPO, "emulator")
if EMULATOR not in sys.path:
    sys.path.insert(0, EMULATOR)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

BUILD = os.path.join(REPO, "build", "emu_tests")
SOURCE = os.path.join(HERE, "emu_kernels.cc")
LIBRARY = os.path.join(BUILD, "emu_kernels.so")


def build_kernels():
    """Build build/emu_tests/emu_kernels.so when missing or older than its source; return its dir."""
    if not os.path.exists(LIBRARY) or os.path.getmtime(LIBRARY) < os.path.getmtime(SOURCE):
        os.makedirs(BUILD, exist_ok=True)
        tmp = LIBRARY + f".{os.getpid()}.tmp"
        subprocess.run(["g++", "-O2", "-std=c++17", "-shared", "-fPIC", "-o", tmp, SOURCE], check=True)
        os.replace(tmp, LIBRARY)
    return BUILD
