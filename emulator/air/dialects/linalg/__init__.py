# SPDX-License-Identifier: MIT
"""linalg: `fill` on memrefs, and the opdsl language for defining structured ops.

The emulator runs `linalg.fill` (every element of the output memref set to the value). Structured ops
defined with `linalg.opdsl.lang` (`@linalg_structured_op`) can be defined, so designs that declare them
import and trace, but calling one is an UnsupportedError: the emulator runs external kernels, not
linalg codegen (mlir-air's examples select that path with `--codegen external`).
"""

from ...ir import MemRefType, Operation, _as_value
from ...emu.errors import TraceError, UnsupportedError


class FillOp(Operation):
    OPERATION_NAME = "linalg.fill"

    def __init__(self, value, out, *, loc=None, ip=None):
        v = _as_value(value, "linalg.fill value")
        o = _as_value(out, "linalg.fill output")
        if not isinstance(o.type, MemRefType):
            raise UnsupportedError(
                f"linalg.fill on {o.type}: the emulator fills memrefs only (no tensors)"
            )
        if v.type != o.type.element_type:
            raise TraceError(f"linalg.fill: value of type {v.type} into {o.type}")
        self._init_op([v, o], [], loc=loc, ip=ip)

    def _print_custom(self, p, indent):
        v, o = self.operands
        return [
            " " * indent
            + f"linalg.fill ins({p.name(v)} : {v.type}) outs({p.name(o)} : {o.type})"
        ]


def fill(value, *, outs, loc=None, ip=None):
    """linalg.fill(value, outs=[memref]): as mlir's builder; with a memref output it has no result."""
    if len(outs) != 1:
        raise TraceError(f"linalg.fill takes one output, got {len(outs)}")
    return FillOp(value, outs[0], loc=loc, ip=ip)
