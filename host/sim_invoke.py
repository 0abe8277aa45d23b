# SPDX-License-Identifier: MIT
"""An executor for the emulator's XRTBackend (AIR_EMU_RUN_WITH=host.sim_invoke:run): the module is
compiled by aircc + aiecc with the backend's options and run by the simulator of the compiled design
(emulator/aiesim). Any script written against mlir-air's XRTBackend / XRTRunner then runs its design as the
compiler placed and routed it, unchanged: `make upstream-check ... RUN_ARGS=--sim` runs mlir-air's own
examples this way. The kernels are the host libraries the emulator would load (link_with, found in the
working directory or on AIR_EMU_LIB_PATH).

Each run dispatches the module DISPATCHES times (2; AIR_SIM_DISPATCHES=N for another count) on one array, as
XRT runs a design again and again on one loaded array (aiesim.simulate(..., dispatches=N): the cores keep
their loops, locks, buffers and BD registers carry over, every host buffer is written again before each
dispatch, as the invoker does): every dispatch must give the first one's outputs bit for bit, else the run
fails naming the dispatch and the argument."""

from __future__ import annotations

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _p in (REPO, os.path.join(REPO, "emulator")):
    if _p not in sys.path:
        sys.path.insert(0, _p)


DISPATCHES = 2


def dispatches() -> int:
    """How many dispatches a run makes: AIR_SIM_DISPATCHES, else DISPATCHES."""
    from air.backend.abc import AirBackendError

    text = os.environ.get("AIR_SIM_DISPATCHES", str(DISPATCHES))
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise AirBackendError(
            f"AIR_SIM_DISPATCHES={text}: a number of dispatches (>= 1)"
        )
    return n


def run(module_text: str, options: dict, arrays) -> tuple:
    """Compile and simulate; one flat array per argument, in its dtype (the invoker's contract)."""
    import numpy as np

    import aiesim
    from air.backend.abc import AirBackendError
    from int4awq.design import compiler

    where = os.environ.get("AIR_SIM_BUILD", os.path.join(REPO, "build", "aircc-runs"))
    try:
        line, outdir = compiler.compile_first("the module", module_text, options, where)
        if outdir is None:
            raise AirBackendError(f"the simulator needs aircc + aiecc: {line}")
        text = compiler.generic_form(os.path.join(outdir, "input_physical.mlir"))
        # AIR_SIM_SEQUENCE=dialect runs the runtime sequence at the dialect level (the cross-check)
        count = dispatches()
        outs, sim = aiesim.simulate(
            text,
            [np.asarray(a) for a in arrays],
            insts=outdir,
            dialect=os.environ.get("AIR_SIM_SEQUENCE") == "dialect",
            dispatches=count,
        )
    except compiler.CompileError as e:
        raise AirBackendError(str(e)) from None
    except aiesim.Hang as h:
        raise AirBackendError(
            "the compiled design hangs:\n  " + "\n  ".join(h.report)
        ) from None
    left = aiesim.leftovers(sim)
    if left:  # a failure on every sim path (docs/simulator.md, "The end")
        raise AirBackendError(
            "the compiled design leaves data behind when its runtime sequence ends (on hardware it "
            "would meet the next dispatch)\n  " + "\n  ".join(left)
        )
    # every dispatch gives the first one's outputs (the same inputs written again before each)
    first = sim.dispatch_outputs[0]
    for k, later in enumerate(sim.dispatch_outputs[1:], 2):
        for i, (a, b) in enumerate(zip(first, later)):
            a, b = (np.asarray(x).view(np.uint8).reshape(-1) for x in (a, b))
            if not np.array_equal(a, b):
                raise AirBackendError(
                    f"the compiled design's argument {i} differs on dispatch {k} of {count}: "
                    f"{int((a != b).sum())} of {a.size} bytes other than the first dispatch's "
                    "(state a dispatch left behind)"
                )
    return tuple(
        np.asarray(o).view(np.asarray(a).dtype).reshape(-1)
        for o, a in zip(outs, arrays)
    )
