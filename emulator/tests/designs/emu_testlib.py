# SPDX-License-Identifier: MIT
"""Helpers for the emulator's tests: put the emulated `air` first on sys.path,
build the tiny test kernels (emu_kernels.cc) with g++, and small design builders."""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
EMULATOR = os.path.dirname(
    os.path.dirname(HERE)
)  # emulator/, holding the emulated `air` package
REPO = os.path.dirname(EMULATOR)
if EMULATOR not in sys.path:
    sys.path.insert(0, EMULATOR)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

BUILD = os.path.join(REPO, "build", "emu_tests")
SOURCE = os.path.join(HERE, "emu_kernels.cc")
LIBRARY = os.path.join(BUILD, "emu_kernels.so")


def build_kernels():
    """Build build/emu_tests/emu_kernels.so when missing or older than its source; return its dir."""
    if not os.path.exists(LIBRARY) or os.path.getmtime(LIBRARY) < os.path.getmtime(
        SOURCE
    ):
        os.makedirs(BUILD, exist_ok=True)
        tmp = LIBRARY + f".{os.getpid()}.tmp"
        subprocess.run(
            ["g++", "-O2", "-std=c++17", "-shared", "-fPIC", "-o", tmp, SOURCE],
            check=True,
        )
        os.replace(tmp, LIBRARY)
    return BUILD


# Small design builders (import after the sys.path set-up above: they need the emulated air).
from air.backend.xrt import XRTBackend  # noqa: E402
from air.dialects.air import herd, launch, module_builder, segment  # noqa: E402
from air.ir import InsertionPoint  # noqa: E402
from air.dialects.func import FuncOp  # noqa: E402
from air.ir import MemRefType  # noqa: E402
from air.dialects.air import T  # noqa: E402


def memref(shape, elt=None, space=None):
    return MemRefType.get(list(shape), elt or T.i32(), memory_space=space)


def design(arg_types, body, channels=None):
    """A module whose entry function has `arg_types` and whose body is `body(*args)`; `channels()`
    declares the module's channels first."""

    @module_builder
    def build():
        if channels:
            channels()

        @FuncOp.from_py_func(*arg_types)
        def entry(*args):
            body(*args)

    return build()


def run(module, *arrays, **backend_kw):
    backend = XRTBackend(**backend_kw)
    outs = backend.compile_and_load(module)(*arrays)
    return outs, backend


def in_segment(arg_types, seg_body, seg_operands=None, channels=None):
    """launch { segment(operands = all args) { seg_body(*segment args) } }, with an idle 1x1 herd when
    seg_body makes none: aircc refuses a segment without a herd (resources.py
    _check_segments_have_herds), and these designs test the segment's own transfers."""

    def body(*args):
        @launch(operands=list(args))
        def lb(*largs):
            @segment(name="seg", operands=list(largs))
            def sb(*sargs):
                seg_body(*sargs)
                block = InsertionPoint._current_or_none().block
                if not any(_herds(block)):

                    @herd(name="idle", sizes=[1, 1])
                    def idle(_tx, _ty, _sx, _sy):
                        pass

    return design(arg_types, body, channels)


def _herds(block):
    """The herds among a block's ops, at any depth."""
    for op in block.operations:
        if op.OPERATION_NAME == "air.herd":
            yield op
        for r in op.regions:
            for b in r.blocks:
                yield from _herds(b)
