# SPDX-License-Identifier: MIT
"""Each core keeps its own rounding and saturation registers (aie::set_rounding / set_saturation), from
their reset value (floor) on a fresh array; a kernel's setting carries into that core's later calls and
dispatches, and into no other core's. The host runs every core through one loaded library, whose mode is
one variable, so both engines save a core's registers after each of its calls and restore them before the
next (aie_host_control_registers). Found on mlir-air's bfp16 GEMM with bf16 output, whose converter sets
conv_even and never restores it (docs/sim_shows.md, section 4).

The design: a herd of two cores calls, twice, a probe that reports the core's mode and then sets conv_even.
Shared state would show PE 1's first call under conv_even, PE 0 having set it."""

import os
import sys

import numpy as np
import pytest

from int4awq.errors import REPO

import compiler_tools
from host_args import host_aie_api_library

if os.path.join(REPO, "emulator") not in sys.path:
    sys.path.insert(0, os.path.join(REPO, "emulator"))

PROBE = r"""
#include <aie_api/aie.hpp>
extern "C" void rounding_probe(int32_t *out) {
  const int32_t was = int32_t(aie::get_rounding());
  for (int i = 0; i < 16; ++i)
    out[i] = was;
  aie::set_rounding(aie::rounding_mode::conv_even);
}
"""
FLOOR = 0  # aie_api: rounding_mode::floor, the documented reset value
TRIPS, PES, N = 2, 2, 16


@pytest.fixture(scope="module")
def probe_library(tmp_path_factory):
    d = tmp_path_factory.mktemp("probe")
    host_aie_api_library(str(d), "probe", PROBE)
    return str(d)


def build_module():
    from air.dialects.air import MemorySpace, T, dma_memcpy_nd, herd, launch
    from air.dialects.air import module_builder, segment
    from air.dialects.func import CallOp, FuncOp
    from air.dialects.memref import AllocOp, DeallocOp
    from air.ir import IntegerAttr, MemRefType, StringAttr

    l1 = IntegerAttr.get(T.i32(), MemorySpace.L1)
    l2 = IntegerAttr.get(T.i32(), MemorySpace.L2)

    @module_builder
    def build():
        l1_ty = MemRefType.get([N], T.i32(), memory_space=l1)
        l2_ty = MemRefType.get([TRIPS, PES, N], T.i32(), memory_space=l2)
        probe = FuncOp("rounding_probe", ([l1_ty], []), visibility="private")
        probe.attributes["link_with"] = StringAttr.get("probe.o")

        io = MemRefType.get([TRIPS, PES, N], T.i32())

        @FuncOp.from_py_func(io, io)
        def control_registers(inp, out):
            @launch(operands=[inp, out])
            def launch_body(li, lo):
                @segment(name="seg", operands=[li, lo])
                def segment_body(si, so):
                    l2i, l2o = AllocOp(l2_ty, [], []), AllocOp(l2_ty, [], [])
                    dma_memcpy_nd(l2i, si)

                    # each call waits for an input (a core without one would run on into the next
                    # dispatch's output)
                    @herd(name="probe", sizes=[PES, 1], operands=[l2i, l2o])
                    def herd_body(tx, _ty, _sx, _sy, hi, ho):
                        for trip in range(TRIPS):
                            b = AllocOp(l1_ty, [], [])
                            where = dict(
                                offsets=[trip, tx, 0],
                                sizes=[1, 1, N],
                                strides=[PES * N, N, 1],
                            )
                            dma_memcpy_nd(
                                b, hi, **{f"src_{k}": v for k, v in where.items()}
                            )
                            CallOp(probe, [b])
                            dma_memcpy_nd(
                                ho, b, **{f"dst_{k}": v for k, v in where.items()}
                            )
                            DeallocOp(b)

                    dma_memcpy_nd(so, l2o)
                    DeallocOp(l2i)
                    DeallocOp(l2o)

    return build()


def inputs():
    return np.ones((TRIPS, PES, N), np.int32), np.zeros((TRIPS, PES, N), np.int32)


def modes(out):
    """[trip, PE] -> the mode the core reported."""
    out = np.asarray(out).reshape(TRIPS, PES, N)
    assert (out == out[:, :, :1]).all()
    return out[:, :, 0]


def check_per_core(got):
    assert (got[0] == FLOOR).all(), got  # each core's first call: the reset value
    assert (got[1] != FLOOR).all() and got[1, 0] == got[1, 1], got  # then what it set


def test_the_emulator_keeps_a_mode_per_core_from_reset(probe_library, monkeypatch):
    from air.backend.xrt import XRTBackend

    monkeypatch.setenv("AIR_EMU_LIB_PATH", probe_library)
    run = XRTBackend().compile_and_load(build_module())
    for _ in range(2):  # each run is a fresh array: the cores start from reset again
        _, out = run(*inputs())
        check_per_core(modes(out))


@pytest.mark.usefixtures("compiler_required")
def test_the_simulator_keeps_a_mode_per_core_across_dispatches(
    probe_library, monkeypatch, tmp_path
):
    compiler_tools.require()
    from int4awq.design import compiler
    from int4awq.run import sim_costs

    import aiesim

    monkeypatch.setenv("AIR_EMU_LIB_PATH", probe_library)
    _, outdir = compiler.compile_first(
        "control registers", str(build_module()), {}, str(tmp_path)
    )
    for seed in (None, 0, 1, 2):
        _, sim = sim_costs.simulate_compiled(
            outdir,
            list(inputs()),
            aiesim.Costs(),
            seed=seed,
            dispatches=2,
        )
        first, second = (modes(d[1]) for d in sim.dispatch_outputs)
        check_per_core(first)
        # the cores keep their registers into the next dispatch, as on the device
        assert (second == first[1, 0]).all(), (seed, second)
