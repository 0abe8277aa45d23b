# SPDX-License-Identifier: MIT
"""affine: apply (AffineApplyOp), evaluated with a compiled Python expression."""

from ..ir import AffineMap, AffineMapAttr, IndexType, Operation, _as_value
from ..emu.errors import TraceError


class AffineApplyOp(Operation):
    OPERATION_NAME = "affine.apply"
    _PROPERTIES = ("map",)

    def __init__(self, map, mapOperands, *, loc=None, ip=None):
        if isinstance(map, AffineMapAttr):
            map = map.value
        if not isinstance(map, AffineMap):
            raise TraceError(f"affine.apply needs an AffineMap, got {map!r}")
        if len(map.results) != 1:
            raise TraceError(
                f"affine.apply: the map must have exactly one result, has {len(map.results)}"
            )
        vals = [_as_value(v, "affine.apply operand") for v in mapOperands]
        if len(vals) != map.n_inputs:
            raise TraceError(
                f"affine.apply: map {map} takes {map.n_inputs} operands, got {len(vals)}"
            )
        for v in vals:
            if not isinstance(v.type, IndexType):
                raise TraceError(
                    f"affine.apply: operand of type {v.type} (must be index)"
                )
        self._init_op(vals, [IndexType.get()], loc=loc, ip=ip)
        self.attributes["map"] = AffineMapAttr.get(map)
        self.map = map
        self._fn = map.evaluator()

    def _print_custom(self, p, indent):
        nd = self.map.n_dims
        dims = p.names(self.operands[:nd])
        syms = p.names(self.operands[nd:])
        text = f"affine.apply affine_map<{self.map}>({dims})"
        if self.map.n_symbols:
            text += f"[{syms}]"
        return [" " * indent + p.results_prefix(self) + text]


def apply(map, map_operands, *, loc=None, ip=None):
    return AffineApplyOp(map, map_operands, loc=loc, ip=ip).result
