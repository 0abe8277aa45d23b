# SPDX-License-Identifier: MIT
"""memref: alloc / dealloc, subview, cast, load / store, view, expand_shape / collapse_shape."""

from ..ir import (
    ArrayAttr,
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


# memref.expand_shape / memref.collapse_shape: views of the same buffer in another rank, regrouping
# dimensions (mlir/include/mlir/Dialect/MemRef/IR/MemRefOps.td, MemRef_ExpandShapeOp and
# MemRef_CollapseShapeOp; the verifier in mlir/lib/Dialect/MemRef/IR/MemRefOps.cpp). Builders as MLIR's
# generated Python API has them: expand_shape(result, src, reassociation, output_shape,
# static_output_shape), collapse_shape(result, src, reassociation). Static shapes and strides only.


def _reassociation(reassociation, what):
    """The reassociation as a list of lists of ints (nested Python lists, or MLIR's
    IndexListArrayAttr: an ArrayAttr of ArrayAttrs of integer attributes)."""
    groups = []
    for g in reassociation:
        items = g._items if isinstance(g, ArrayAttr) else g
        try:
            groups.append(
                [int(i.value) if isinstance(i, IntegerAttr) else int(i) for i in items]
            )
        except TypeError:
            raise TraceError(
                f"{what}: reassociation {reassociation!r} is not a list of index lists"
            ) from None
    return groups


def _check_groups(groups, expanded_rank, collapsed_rank, what):
    """MemRefOps.td: one group per dimension of the collapsed type, the groups taking the expanded
    type's dimensions in order, each contiguous and none empty (a rank-0 collapsed type: no groups).
    """
    flat = [i for g in groups for i in g]
    if (
        len(groups) != collapsed_rank
        or flat != list(range(expanded_rank))
        or any(not g for g in groups)
    ):
        raise TraceError(
            f"{what}: reassociation {groups} must split dimensions 0..{expanded_rank - 1} of the "
            f"rank-{expanded_rank} type, in order, into {collapsed_rank} non-empty contiguous groups "
            f"(MemRefOps.td, the op's verifier)"
        )


def _static_strided(t, what):
    """(strides, offset) of a memref type with static sizes and strides (the offset may be dynamic)."""
    strides, offset = t.get_strides_and_offset()
    if any(ShapedType.is_dynamic_size(s) for s in list(t.shape) + list(strides)):
        raise UnsupportedError(
            f"{what}: {t} has a dynamic size or stride; the emulator models only static shapes"
        )
    return strides, offset


def _layout_type(shape, t, strides, offset):
    """MLIR's inferred type of a reshape of t: identity layout when t has one, else strided."""
    layout = None if t.is_identity_layout else StridedLayoutAttr.get(offset, strides)
    return MemRefType.get(shape, t.element_type, layout, t.memory_space)


def _same_view_type(a, b):
    """Whether two memref types are the same (shape, element type, layout, memory space)."""
    return (
        list(a.shape) == list(b.shape)
        and a.element_type == b.element_type
        and a.memory_space_value == b.memory_space_value
        and a.is_identity_layout == b.is_identity_layout
        and a.get_strides_and_offset() == b.get_strides_and_offset()
    )


def _index_list_text(groups):
    return "[" + ", ".join("[" + ", ".join(map(str, g)) + "]" for g in groups) + "]"


class ExpandShapeOp(Operation):
    """memref.expand_shape: each source dimension split into a group of result dimensions whose sizes
    multiply to it; the result is the same buffer (row-major inside each group)."""

    OPERATION_NAME = "memref.expand_shape"

    def __init__(
        self,
        result,
        src,
        reassociation,
        output_shape,
        static_output_shape,
        *,
        loc=None,
        ip=None,
    ):
        what = "memref.expand_shape"
        s = _as_value(src, f"{what} source")
        st = s.type
        if not isinstance(st, MemRefType) or not isinstance(result, MemRefType):
            raise TraceError(f"{what}: source and result must be memrefs")
        if list(output_shape or []):
            raise UnsupportedError(
                f"{what}: dynamic output_shape operands; the emulator models only static shapes"
            )
        shape = [int(x) for x in static_output_shape]
        if any(ShapedType.is_dynamic_size(x) for x in shape):
            raise UnsupportedError(
                f"{what}: a dynamic size in static_output_shape {shape}; the emulator models only "
                f"static shapes"
            )
        strides, offset = _static_strided(st, what)
        _static_strided(result, what)
        groups = _reassociation(reassociation, what)
        if shape != list(result.shape):
            raise TraceError(
                f"{what}: static_output_shape {shape} is not the result's shape {result.shape}"
            )
        if st.rank == 0:
            if groups or any(x != 1 for x in shape):
                raise TraceError(
                    f"{what}: a rank-0 source takes no reassociation and only unit result "
                    f"dimensions (MemRefOps.td), got {groups} and {shape}"
                )
        else:
            _check_groups(groups, len(shape), st.rank, what)
        new_strides = []
        for d, g in enumerate(groups):
            sizes = [shape[i] for i in g]
            product = 1
            for x in sizes:
                product *= x
            if product != st.shape[d]:
                raise TraceError(
                    f"{what}: group {g} has sizes {sizes}, product {product}, but source dimension "
                    f"{d} is {st.shape[d]} (MemRefOps.td: the verifier rejects an expansion it can "
                    f"prove invalid)"
                )
            new_strides += [strides[d] * x for x in _row_major_strides(sizes)]
        if st.rank == 0:
            new_strides = [1] * len(shape)
        expected = _layout_type(shape, st, new_strides, offset)
        if not _same_view_type(result, expected):
            raise TraceError(
                f"{what}: expected expanded type to be {expected} but found {result} "
                f"(MemRefOps.cpp, ExpandShapeOp::verify)"
            )
        self._init_op([s], [result], loc=loc, ip=ip)
        self.reassociation = groups
        self.static_output_shape = shape

    def _generic_extras(self):
        return {
            "reassociation": _index_list_text(self.reassociation),
            "static_output_shape": DenseI64ArrayAttr.get(self.static_output_shape),
        }, {}

    def _print_custom(self, p, indent):
        return [
            " " * indent
            + f"{p.results_prefix(self)}memref.expand_shape {p.name(self.operands[0])} "
            f"{_index_list_text(self.reassociation)} output_shape {self.static_output_shape}"
            f"{p.attr_dict(self)} : {self.operands[0].type} into {self.results[0].type}"
        ]


def expand_shape(
    result, src, reassociation, output_shape, static_output_shape, *, loc=None, ip=None
):
    return ExpandShapeOp(
        result, src, reassociation, output_shape, static_output_shape, loc=loc, ip=ip
    ).result


class CollapseShapeOp(Operation):
    """memref.collapse_shape: each group of contiguous source dimensions merged into one result
    dimension; the result is the same buffer. A group whose dimensions are not contiguous in memory
    is refused, as MLIR's verifier refuses one it can prove so."""

    OPERATION_NAME = "memref.collapse_shape"

    def __init__(self, result, src, reassociation, *, loc=None, ip=None):
        what = "memref.collapse_shape"
        s = _as_value(src, f"{what} source")
        st = s.type
        if not isinstance(st, MemRefType) or not isinstance(result, MemRefType):
            raise TraceError(f"{what}: source and result must be memrefs")
        strides, offset = _static_strided(st, what)
        _static_strided(result, what)
        groups = _reassociation(reassociation, what)
        if result.rank == 0:
            if groups or any(x != 1 for x in st.shape):
                raise TraceError(
                    f"{what}: a rank-0 result takes no reassociation and a source of unit "
                    f"dimensions only (MemRefOps.td), got {groups} and {st}"
                )
        else:
            _check_groups(groups, st.rank, result.rank, what)
        shape, new_strides = [], []
        for g in groups:
            size = 1
            for i in g:
                size *= st.shape[i]
            shape.append(size)
            live = [i for i in g if st.shape[i] != 1] or [g[-1]]
            for a, b in zip(live, live[1:]):
                if strides[a] != strides[b] * st.shape[b]:
                    raise TraceError(
                        f"{what}: dimensions {g} of {st} are not contiguous (stride {strides[a]} of "
                        f"dimension {a} is not {strides[b]} x {st.shape[b]}); MemRefOps.td: collapsing "
                        f"non-contiguous dimensions is undefined behavior, and the verifier rejects a "
                        f"group it can prove non-contiguous"
                    )
            new_strides.append(strides[live[-1]])
        expected = _layout_type(shape, st, new_strides, offset)
        if not _same_view_type(result, expected):
            raise TraceError(
                f"{what}: expected collapsed type to be {expected} but found {result} "
                f"(MemRefOps.cpp, CollapseShapeOp::verify)"
            )
        self._init_op([s], [result], loc=loc, ip=ip)
        self.reassociation = groups

    def _generic_extras(self):
        return {"reassociation": _index_list_text(self.reassociation)}, {}

    def _print_custom(self, p, indent):
        return [
            " " * indent
            + f"{p.results_prefix(self)}memref.collapse_shape {p.name(self.operands[0])} "
            f"{_index_list_text(self.reassociation)}{p.attr_dict(self)} : "
            f"{self.operands[0].type} into {self.results[0].type}"
        ]


def collapse_shape(result, src, reassociation, *, loc=None, ip=None):
    return CollapseShapeOp(result, src, reassociation, loc=loc, ip=ip).result
