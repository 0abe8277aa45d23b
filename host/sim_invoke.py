# SPDX-License-Identifier: MIT
"""An executor for the emulator's XRTBackend (AIR_EMU_RUN_WITH=host.sim_invoke:run): the module is
compiled by aircc + aiecc with the backend's options and run by the simulator of the compiled design
(emulator/aiesim). Any script written against mlir-air's XRTBackend / XRTRunner then runs its design as the
compiler placed and routed it, unchanged: `make upstream-check ... RUN_ARGS=--sim` runs mlir-air's own
examples this way. The kernels are the host libraries the emulator would load (link_with, found in the
working directory or on AIR_EMU_LIB_PATH)."""

from __future__ import annotations

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _p in (REPO, os.path.join(REPO, "emulator")):
    if _p not in sys.path:
        sys.path.insert(0, _p)


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
        outs, sim = aiesim.simulate(
            text,
            [np.asarray(a) for a in arrays],
            insts=outdir,
            dialect=os.environ.get("AIR_SIM_SEQUENCE") == "dialect",
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
    return tuple(
        np.asarray(o).view(np.asarray(a).dtype).reshape(-1)
        for o, a in zip(outs, arrays)
    )
