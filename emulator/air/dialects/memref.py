# SPDX-License-Identifier: MIT
"""memref: alloc / dealloc, subview, cast, load / store."""

from ..ir import (
    DenseI32ArrayAttr,
    DenseI64ArrayAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    Operation,
    ShapedType,
    StridedLayoutAttr,
    Value,
    _as_value,
    _row_major_strides,
)
from ..emu.errors import TraceError, UnsupportedError


class AllocOp(Operation):
    OPERATION_NAME = "memref.alloc"
    _PROPERTIES = ("alignment",)

    def __init__(
        self,
        memref,
        dynamicSizes=(),
        symbolOperands=(),
        *,
        alignment=None,
        loc=None,
        ip=None,
    ):
        if not isinstance(memref, MemRefType):
            raise TraceError(f"memref.alloc needs a MemRefType, got {memref!r}")
        if list(dynamicSizes) or list(symbolOperands):
            raise UnsupportedError(
                "memref.alloc: dynamic sizes / symbol operands are not supported"
            )
        self._init_op([], [memref], loc=loc, ip=ip)
        if alignment is not None:
            self.attributes["alignment"] = (
                alignment
                if isinstance(alignment, IntegerAttr)
                else IntegerAttr.get(IntegerType.get_signless(64), int(alignment))
            )

    def _generic_extras(self):
        return {"operandSegmentSizes": DenseI32ArrayAttr.get([0, 0])}, {}

    @property
    def memref(self):
        return self.results[0]

    def _print_custom(self, p, indent):
        return [
            " " * indent
            + f"{p.results_prefix(self)}memref.alloc(){p.attr_dict(self)} : "
            f"{self.results[0].type}"
        ]


def alloc(
    memref, dynamicSizes=(), symbolOperands=(), *, alignment=None, loc=None, ip=None
):
    return AllocOp(memref, dynamicSizes, symbolOperands, loc=loc, ip=ip).result


class DeallocOp(Operation):
    OPERATION_NAME = "memref.dealloc"

    def __init__(self, memref, *, loc=None, ip=None):
        v = _as_value(memref, "memref.dealloc operand")
        if not isinstance(v.type, MemRefType):
            raise TraceError(f"memref.dealloc of a non-memref value ({v.type})")
        self._init_op([v], [], loc=loc, ip=ip)

    def _print_custom(self, p, indent):
        return [
            " " * indent
            + f"memref.dealloc {p.name(self.operands[0])} : {self.operands[0].type}"
        ]


def dealloc(memref, *, loc=None, ip=None):
    return DeallocOp(memref, loc=loc, ip=ip)


def _const_or_value(x, what):
    """A Python int, or the int of an arith.constant, or the Value itself."""
    if isinstance(x, Value):
        owner = x.owner
        if isinstance(owner, Operation) and owner.OPERATION_NAME == "arith.constant":
            return int(owner.literal_value)
        if not isinstance(x.type, IndexType):
            raise TraceError(f"memref.subview: {what} of type {x.type} (must be index)")
        return x
    if isinstance(x, Operation):
        return _const_or_value(_as_value(x, what), what)
    return int(x)


def _static(x, what):
    v = _const_or_value(x, what)
    if isinstance(v, Value):
        raise UnsupportedError(f"memref.subview: {what} must be static in the emulator")
    return v


class SubViewOp(Operation):
    """memref.subview with static sizes / strides and static or dynamic offsets.

    The result type is inferred as MLIR does: strides = source strides x subview
    strides, offset = source offset + sum(offset_d x source stride_d), or dynamic
    ('?') when an offset is a run-time value; identity layout only for default
    strides at offset 0."""

    OPERATION_NAME = "memref.subview"

    def __init__(
        self, source, offsets, sizes, strides, result_type=None, *, loc=None, ip=None
    ):
        src = _as_value(source, "memref.subview source")
        st = src.type
        if not isinstance(st, MemRefType):
            raise TraceError("memref.subview of a non-memref value")
        offsets = [_const_or_value(o, "offsets") for o in (offsets or [])]
        sizes = [_static(s, "sizes") for s in (sizes or [])]
        strides = [_static(s, "strides") for s in (strides or [])]
        if not (len(offsets) == len(sizes) == len(strides) == st.rank):
            raise TraceError(
                f"memref.subview: offsets/sizes/strides must each have rank {st.rank} entries"
            )
        src_strides, src_off = st.get_strides_and_offset()
        for d in range(st.rank):
            if sizes[d] < 1 or strides[d] < 1:
                raise TraceError(
                    f"memref.subview: dimension {d}: size {sizes[d]} and stride {strides[d]} "
                    f"must be >= 1"
                )
            if isinstance(offsets[d], int) and (
                offsets[d] < 0
                or offsets[d] + (sizes[d] - 1) * strides[d] >= st.shape[d]
            ):
                raise TraceError(
                    f"memref.subview: dimension {d} (offset {offsets[d]}, size {sizes[d]}, "
                    f"stride {strides[d]}) exceeds the source size {st.shape[d]}"
                )
        tgt_strides = [a * b for a, b in zip(src_strides, strides)]
        dyn = [o for o in offsets if isinstance(o, Value)]
        if dyn or ShapedType.is_dynamic_size(src_off):
            tgt_off = ShapedType.get_dynamic_size()
        else:
            tgt_off = src_off + sum(o * s for o, s in zip(offsets, src_strides))
        if result_type is None:
            layout = None
            if tgt_strides != _row_major_strides(sizes) or tgt_off != 0:
                layout = StridedLayoutAttr.get(tgt_off, tgt_strides)
            result_type = MemRefType.get(
                sizes, st.element_type, layout, st.memory_space
            )
        elif not isinstance(result_type, MemRefType) or result_type.shape != sizes:
            raise TraceError(
                f"memref.subview: result type {result_type} does not have shape {sizes}"
            )
        self._init_op([src] + dyn, [result_type], loc=loc, ip=ip)
        self.static_offsets, self.static_sizes, self.static_strides = (
            offsets,
            sizes,
            strides,
        )
        self.src_strides = src_strides
        self.elem_strides = tgt_strides

    def _generic_extras(self):
        dyn = ShapedType.get_dynamic_size()
        return {
            "operandSegmentSizes": DenseI32ArrayAttr.get(
                [1, len(self.operands) - 1, 0, 0]
            ),
            "static_offsets": DenseI64ArrayAttr.get(
                [dyn if isinstance(o, Value) else o for o in self.static_offsets]
            ),
            "static_sizes": DenseI64ArrayAttr.get(self.static_sizes),
            "static_strides": DenseI64ArrayAttr.get(self.static_strides),
        }, {}

    def _print_custom(self, p, indent):
        return [
            " " * indent
            + f"{p.results_prefix(self)}memref.subview {p.name(self.operands[0])}"
            f"{p.mixed(self.static_offsets)} {self.static_sizes} {self.static_strides} : "
            f"{self.operands[0].type} to {self.results[0].type}"
        ]


def subview(source, offsets, sizes, strides, *, result_type=None, loc=None, ip=None):
    return SubViewOp(
        source, offsets, sizes, strides, result_type, loc=loc, ip=ip
    ).result


class CastOp(Operation):
    OPERATION_NAME = "memref.cast"

    def __init__(self, dest, source, *, loc=None, ip=None):
        src = _as_value(source, "memref.cast source")
        if not isinstance(dest, MemRefType) or not isinstance(src.type, MemRefType):
            raise TraceError("memref.cast between non-memref types")
        if (
            dest.shape != src.type.shape
            or dest.element_type != src.type.element_type
            or dest.memory_space_value != src.type.memory_space_value
        ):
            raise TraceError(f"memref.cast: incompatible types {src.type} -> {dest}")
        s_str, s_off = src.type.get_strides_and_offset()
        d_str, d_off = dest.get_strides_and_offset()
        if dest.layout is not None and (s_str != d_str or s_off != d_off):
            raise TraceError(f"memref.cast: layouts differ {src.type} -> {dest}")
        if (
            dest.layout is None
            and src.type.layout is not None
            and s_str != _row_major_strides(dest.shape)
        ):
            raise TraceError(
                f"memref.cast: {src.type} is not contiguous, cannot cast to {dest}"
            )
        self._init_op([src], [dest], loc=loc, ip=ip)

    def _print_custom(self, p, indent):
        return [
            " " * indent
            + f"{p.results_prefix(self)}memref.cast {p.name(self.operands[0])} : "
            f"{self.operands[0].type} to {self.results[0].type}"
        ]


def cast(dest, source, *, loc=None, ip=None):
    return CastOp(dest, source, loc=loc, ip=ip).result


def _indices(indices, mt, what):
    vals = [_as_value(i, f"{what} index") for i in indices]
    if len(vals) != mt.rank:
        raise TraceError(f"{what}: {len(vals)} indices for a rank-{mt.rank} memref")
    for v in vals:
        if not isinstance(v.type, IndexType):
            raise TraceError(f"{what}: index of type {v.type} (must be index)")
    return vals


class LoadOp(Operation):
    OPERATION_NAME = "memref.load"

    def __init__(self, memref, indices, *, nontemporal=None, loc=None, ip=None):
        m = _as_value(memref, "memref.load memref")
        idx = _indices(indices, m.type, "memref.load")
        self._init_op([m] + idx, [m.type.element_type], loc=loc, ip=ip)

    def _print_custom(self, p, indent):
        return [
            " " * indent
            + f"{p.results_prefix(self)}memref.load {p.name(self.operands[0])}"
            f"[{p.names(self.operands[1:])}] : {self.operands[0].type}"
        ]


def load(memref, indices, *, nontemporal=None, loc=None, ip=None):
    return LoadOp(memref, indices, loc=loc, ip=ip).result


class StoreOp(Operation):
    OPERATION_NAME = "memref.store"

    def __init__(self, value, memref, indices, *, nontemporal=None, loc=None, ip=None):
        v = _as_value(value, "memref.store value")
        m = _as_value(memref, "memref.store memref")
        if v.type != m.type.element_type:
            raise TraceError(f"memref.store: value of type {v.type} into {m.type}")
        idx = _indices(indices, m.type, "memref.store")
        self._init_op([v, m] + idx, [], loc=loc, ip=ip)

    def _print_custom(self, p, indent):
        return [
            " " * indent
            + f"memref.store {p.name(self.operands[0])}, {p.name(self.operands[1])}"
            f"[{p.names(self.operands[2:])}] : {self.operands[1].type}"
        ]


def store(value, memref, indices, *, nontemporal=None, loc=None, ip=None):
    return StoreOp(value, memref, indices, loc=loc, ip=ip)


_ = ShapedType


class ViewOp(Operation):
    """memref.view: a memref of another element type over a contiguous i8 buffer, from a byte shift.
    The emulator gives the view no written-element tracking of its own (reads through it are not
    checked for never-written bytes)."""

    OPERATION_NAME = "memref.view"

    def __init__(self, result_type, source, byte_shift, sizes=(), *, loc=None, ip=None):
        src = _as_value(source, "memref.view source")
        st = src.type
        if (
            not isinstance(st, MemRefType)
            or st.rank != 1
            or str(st.element_type) != "i8"
            or not st.is_identity_layout
        ):
            raise TraceError(
                f"memref.view: the source must be a contiguous 1-D i8 memref, got {st}"
            )
        if (
            not isinstance(result_type, MemRefType)
            or not result_type.is_identity_layout
        ):
            raise TraceError(
                f"memref.view: the result must be an identity-layout memref, got {result_type}"
            )
        if list(sizes):
            raise UnsupportedError("memref.view: dynamic sizes are not supported")
        if result_type.memory_space_value != st.memory_space_value:
            raise TraceError(
                f"memref.view: {result_type} and {st} are in different memory spaces"
            )
        shift = _as_value(byte_shift, "memref.view byte_shift")
        if not isinstance(shift.type, IndexType):
            raise TraceError(
                f"memref.view: byte_shift of type {shift.type} (must be index)"
            )
        self._init_op([src, shift], [result_type], loc=loc, ip=ip)

    def _print_custom(self, p, indent):
        src, shift = self.operands
        return [
            " " * indent
            + f"{p.results_prefix(self)}memref.view {p.name(src)}[{p.name(shift)}][] : "
            f"{src.type} to {self.results[0].type}"
        ]


def view(result_type, source, byte_shift, sizes=(), *, loc=None, ip=None):
    return ViewOp(result_type, source, byte_shift, sizes, loc=loc, ip=ip).result
