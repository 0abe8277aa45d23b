# SPDX-License-Identifier: MIT
"""What the emulator decided for a design, in the terms aircc's own passes print them, so the two can be
compared allocation by allocation (the project's host/aircc_check.py and host/upstream_check.py do):

* `l2`: the L2 alloc types after `air-split-l2-memref` ({type: count}); a split buffer is its pieces
  (also a split the model refuses as moving the wrong data: aircc makes it all the same);
* `doubled`: the allocs `air-label-scf-for-to-ping-pong` doubles ({"L1 type" / "L2 type": count}); a
  ping-ponged L2 buffer counts each of its pieces.

`AIR_EMU_AIRCC_DIR=<dir>`: XRTBackend.compile writes the module it compiled (`air.mlir`, as mlir-air's
XRTBackend writes it for aircc) and these decisions (`emu-decisions.json`) there.
"""

from __future__ import annotations

import json
import os
from collections import Counter

ENV = "AIR_EMU_AIRCC_DIR"


def _type_text(shape, elem, space: int) -> str:
    return "memref<" + "".join(f"{d}x" for d in shape) + f"{elem}, {space} : i32>"


def decisions(program) -> dict:
    pieces, l2 = {}, Counter()
    for root, dec in program.resources.splits:
        shape, factor = list(root.type.shape), 1
        if (
            dec.pieces is not None
        ):  # as aircc cuts it (also where the model refuses the cut)
            shape, factor = dec.pieces
        t = _type_text(shape, root.type.element_type, 1)
        pieces[str(root.type)] = (t, factor)
        l2[t] += factor
    doubled = Counter()
    for budget in program.budget.herds:
        for e in budget.entries:
            if e.pingpong:
                doubled[f"L1 {e.type}"] += 1
    for budget in program.budget.segments:
        for e in budget.entries:
            if e.pingpong and e.type in pieces:
                t, n = pieces[e.type]
                doubled[f"L2 {t}"] += n
    return {"l2": dict(l2), "doubled": dict(doubled)}


def write(module, program) -> None:
    """With AIR_EMU_AIRCC_DIR set, leave the module and the decisions there for a comparison with aircc."""
    where = os.environ.get(ENV)
    if not where:
        return
    os.makedirs(where, exist_ok=True)
    with open(os.path.join(where, "air.mlir"), "w") as f:
        f.write(str(module))
    with open(os.path.join(where, "emu-decisions.json"), "w") as f:
        json.dump(decisions(program), f, indent=1, sort_keys=True)
