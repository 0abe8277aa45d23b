# SPDX-License-Identifier: MIT
"""air dialect for the emulator: launch / segment / herd, dma_memcpy_nd,
channels, MemorySpace, module_builder -- the classic mlir-air Python API with
its names, signatures and keywords (python/air/dialects/_air_ops_ext.py)."""

import enum
import functools

from ..ir import *  # noqa: F401,F403  (mlir-air's module re-exports air.ir)
from ..ir import (
    ArrayAttr,
    AsyncTokenType,
    Context,
    DenseI32ArrayAttr,
    DenseI64ArrayAttr,
    IndexType,
    InsertionPoint,
    IntegerAttr,
    IntegerType,
    Location,
    MemRefType,
    Module,
    Operation,
    ShapedType,
    StringAttr,
    Value,
    _as_value,
)
from ..emu.errors import TraceError, UnsupportedError
from ..extras import types as T
from ..extras.meta import region_op
from . import arith  # noqa: F401  (re-exported like the real module)
from .func import CallOp, FuncOp
from ..ir import FunctionType, FlatSymbolRefAttr


class MemorySpace(enum.IntEnum):
    L1 = 2
    L2 = 1
    L3 = 0

    def __str__(self):
        return self.name


def pyint_to_index(i):
    """A Python int becomes an index constant; a Value stays as it is."""
    if isinstance(i, bool):
        raise TraceError(f"expected an int or an index Value, got {i!r}")
    return arith.ConstantOp.create_index(i) if isinstance(i, int) else i


def split_static_dynamic(entries):
    """(dynamic Values, static list with the dynamic-size marker where a Value stands)."""
    dynamic = [e for e in entries if not isinstance(e, int)]
    static = [
        e if isinstance(e, int) else ShapedType.get_dynamic_size() for e in entries
    ]
    return dynamic, static


def get_region_operand_types(operands):
    """The types of a region op's operands (Values, or single-result Operations)."""

    def type_of(o):
        if isinstance(o, Value):
            return o.type
        if isinstance(o, Operation) and len(o.results) == 1:
            return o.results[0].type
        raise AttributeError(
            f"region operand {o!r}: expected a Value or a single-result Operation"
        )

    return [type_of(o) for o in operands]


class _HierarchyOp(Operation):
    """launch / segment / herd: sizes, then operands; body args = ids, sizes, operands."""

    _kind = "?"
    _terminator = None

    def _init_hier(
        self,
        name,
        sizes,
        async_token,
        async_dependencies,
        operands,
        attributes,
        loc,
        ip,
    ):
        sizes = [pyint_to_index(s) for s in sizes]
        size_vals = [_as_value(s, f"{self.OPERATION_NAME} size") for s in sizes]
        for s in size_vals:
            if not isinstance(s.type, IndexType):
                raise TraceError(
                    f"{self.OPERATION_NAME} size of type {s.type} (must be index)"
                )
        op_vals = [_as_value(o, f"{self.OPERATION_NAME} operand") for o in operands]
        deps = [_as_value(d, "async dependency") for d in (async_dependencies or [])]
        results = [AsyncTokenType.get()] if async_token is not None else []
        self._init_op(
            deps + size_vals + op_vals, results, num_regions=1, loc=loc, ip=ip
        )
        self.async_dependencies = deps
        self.size_operands = size_vals
        self.kernel_operands = op_vals
        if name is not None:
            self.attributes["sym_name"] = StringAttr.get(str(name))
        for k, v in (attributes or {}).items():
            self.attributes[k] = v
        operand_types = [s.type for s in size_vals] * 2 + get_region_operand_types(
            op_vals
        )
        self.regions[0].blocks.append(*operand_types)

    @property
    def body(self):
        return self.regions[0]

    @property
    def sym_name(self):
        a = self.attributes.get("sym_name")
        return a.value if a is not None else None

    @property
    def num_dims(self):
        return len(self.size_operands)

    @property
    def ids(self):
        return self.regions[0].blocks[0].arguments[: self.num_dims]

    @property
    def size_args(self):
        n = self.num_dims
        return self.regions[0].blocks[0].arguments[n : 2 * n]

    @property
    def kernel_arguments(self):
        return self.regions[0].blocks[0].arguments[2 * self.num_dims :]

    def _print_custom(self, p, indent):
        pad = " " * indent
        head = f"{pad}{p.results_prefix(self)}{self.OPERATION_NAME}"
        # As mlir-air's printers (AIRDialect.cpp, LaunchOp / SegmentOp / HerdOp::print at e972f29): the
        # name, then the async dependencies, then the iteration space: a launch and a herd always print
        # theirs (`() in ()` when empty), a segment only when it has one, as `unroll(...) in (...)`.
        if self.sym_name is not None:
            head += f" @{self.sym_name}"
        if self.async_dependencies:
            head += " async [" + p.names(self.async_dependencies) + "]"
        if self.size_operands or self._kind != "segment":
            kw = {"herd": " tile", "segment": " unroll", "launch": ""}[self._kind]
            head += (
                f"{kw} ({p.names(self.ids)}) in ("
                + ", ".join(
                    f"{p.name(a)}={p.name(s)}"
                    for a, s in zip(self.size_args, self.size_operands)
                )
                + ")"
            )
        if self.kernel_operands:
            head += (
                " args("
                + ", ".join(
                    f"{p.name(a)}={p.name(o)}"
                    for a, o in zip(self.kernel_arguments, self.kernel_operands)
                )
                + ")"
            )
            head += " : " + ", ".join(str(o.type) for o in self.kernel_operands)
        attrs = p.attr_dict(self, skip=("sym_name",))
        if attrs:
            head += " attributes" + attrs
        lines = [head + " {"]
        lines += [
            ln
            for ln in p.region_lines(self.regions[0], indent + 2)
            if not ln.strip().startswith(self.OPERATION_NAME + "_terminator")
        ]
        lines.append(pad + "}")
        return lines


class _Terminator(Operation):
    _is_terminator = True

    def __init__(self, *args, loc=None, ip=None):
        self._init_op([], [], loc=loc, ip=ip)

    def _print_custom(self, p, indent):
        return []


class LaunchTerminatorOp(_Terminator):
    OPERATION_NAME = "air.launch_terminator"


class SegmentTerminatorOp(_Terminator):
    OPERATION_NAME = "air.segment_terminator"


class HerdTerminatorOp(_Terminator):
    OPERATION_NAME = "air.herd_terminator"


class LaunchOp(_HierarchyOp):
    OPERATION_NAME = "air.launch"
    _kind = "launch"


class SegmentOp(_HierarchyOp):
    OPERATION_NAME = "air.segment"
    _kind = "segment"


class HerdOp(_HierarchyOp):
    OPERATION_NAME = "air.herd"
    _kind = "herd"


class _ClassicLaunchOrSegment:
    """The classic API's constructor of air.launch and air.segment (mlir-air python/air/dialects/air.py)."""

    def __init__(
        self,
        name=None,
        sizes=[],
        async_token=None,
        async_dependencies=[],
        operands=[],
        attributes={},
        loc=None,
        ip=None,
    ):
        self._init_hier(
            name, sizes, async_token, async_dependencies, operands, attributes, loc, ip
        )


class Launch(_ClassicLaunchOrSegment, LaunchOp):
    pass


class Segment(_ClassicLaunchOrSegment, SegmentOp):
    pass


class Herd(HerdOp):
    def __init__(
        self,
        name=None,
        sizes=[1, 1],
        async_token=None,
        async_dependencies=[],
        operands=[],
        link_with=None,
        attributes={},
        loc=None,
        ip=None,
    ):
        self._init_hier(
            name, sizes, async_token, async_dependencies, operands, attributes, loc, ip
        )
        if link_with is not None:
            self.attributes["link_with"] = (
                StringAttr.get(str(link_with))
                if isinstance(link_with, str)
                else link_with
            )


# The decorators the classic API uses; each body ends in its region's terminator.
launch = region_op(Launch, terminator=lambda _values: LaunchTerminatorOp())
segment = region_op(Segment, terminator=lambda _values: SegmentTerminatorOp())
herd = region_op(Herd, terminator=lambda _values: HerdTerminatorOp())


# --------------------------------------------------------------------------
# Data movement
# --------------------------------------------------------------------------


def _pattern_entries(entries, what):
    out = []
    for e in entries or []:
        if isinstance(e, bool):
            raise TraceError(f"{what}: {e!r} is not an int or index value")
        if isinstance(e, int):
            out.append(int(e))
            continue
        try:
            import numpy as _np

            if isinstance(e, _np.integer):
                out.append(int(e))
                continue
        except ImportError:  # pragma: no cover
            pass
        v = _as_value(e, what)
        if not isinstance(v.type, IndexType):
            raise TraceError(
                f"{what}: value of type {v.type} (offsets, sizes and strides must be index)"
            )
        out.append(v)
    return out


class _Side:
    """One side of a transfer: a memref and its offsets / sizes / strides."""

    def __init__(self, memref, offsets, sizes, strides, what):
        self.memref = _as_value(memref, f"{what} memref")
        if not isinstance(self.memref.type, MemRefType):
            raise TraceError(f"{what}: {self.memref.type} is not a memref")
        self.offsets = _pattern_entries(offsets, f"{what} offsets")
        self.sizes = _pattern_entries(sizes, f"{what} sizes")
        self.strides = _pattern_entries(strides, f"{what} strides")
        if len(self.sizes) != len(self.strides):
            raise TraceError(
                f"{what}: {len(self.sizes)} sizes but {len(self.strides)} strides "
                f"(each side needs one stride per size)"
            )
        if len(self.offsets) > len(self.sizes):
            raise TraceError(
                f"{what}: {len(self.offsets)} offsets for {len(self.sizes)} sizes"
            )
        if not self.sizes and self.offsets:
            raise TraceError(f"{what}: offsets without sizes and strides")

    @property
    def implicit(self):
        return not self.sizes

    def dynamic(self):
        return [
            e for e in self.offsets + self.sizes + self.strides if isinstance(e, Value)
        ]

    def text(self, p):
        return f"{p.name(self.memref)}{p.mixed(self.offsets)} {p.mixed(self.sizes)} {p.mixed(self.strides)}"

    def static_attrs(self, prefix):
        """The pattern in MLIR's static/dynamic convention (memref.subview's static_offsets): the
        Python ints, the dynamic-size marker where an SSA operand (in the op's operand list) stands.
        """
        dyn = ShapedType.get_dynamic_size()
        return {
            f"static_{prefix}{what}": DenseI64ArrayAttr.get(
                [dyn if isinstance(e, Value) else e for e in entries]
            )
            for what, entries in (
                ("offsets", self.offsets),
                ("sizes", self.sizes),
                ("strides", self.strides),
            )
        }


class DmaMemcpyNdOp(Operation):
    OPERATION_NAME = "air.dma_memcpy_nd"


class DmaMemcpyNd(DmaMemcpyNdOp):
    """dma_memcpy_nd(dst, src, dst_offsets=, dst_sizes=, dst_strides=, src_offsets=, ...)."""

    def __init__(
        self,
        dst,
        src,
        async_dependencies=[],
        async_token=None,
        dst_offsets=[],
        dst_sizes=[],
        dst_strides=[],
        src_offsets=[],
        src_sizes=[],
        src_strides=[],
        pad_before=None,
        pad_after=None,
    ):
        if (pad_before is None) != (pad_after is None):
            raise ValueError("give pad_before and pad_after together, or neither")
        self.dst = _Side(
            dst, dst_offsets, dst_sizes, dst_strides, "air.dma_memcpy_nd dst"
        )
        self.src = _Side(
            src, src_offsets, src_sizes, src_strides, "air.dma_memcpy_nd src"
        )
        deps = [_as_value(d, "async dependency") for d in (async_dependencies or [])]
        results = [AsyncTokenType.get()] if async_token is not None else []
        self._init_op(
            deps
            + [self.dst.memref, self.src.memref]
            + self.dst.dynamic()
            + self.src.dynamic(),
            results,
        )
        if pad_before is not None:
            raise UnsupportedError(
                "air.dma_memcpy_nd: pad_before / pad_after are not emulated"
            )

    def _generic_extras(self):
        # AIR stays unregistered in the generic form: the static pattern the emulator keeps in
        # Python (mlir-air's builder makes index constants of it) shows as discardable attributes.
        return {}, {**self.dst.static_attrs("dst_"), **self.src.static_attrs("src_")}

    def _print_custom(self, p, indent):
        return [
            " " * indent
            + f"{p.results_prefix(self)}air.dma_memcpy_nd ({self.dst.text(p)}, "
            f"{self.src.text(p)}){p.attr_dict(self)} : ({self.dst.memref.type}, {self.src.memref.type})"
        ]


dma_memcpy_nd = DmaMemcpyNd


class ChannelOp(Operation):
    OPERATION_NAME = "air.channel"

    # mlir-air's generated builder: sym_name, then keyword-only attributes (AIR.td air_ChannelOp)
    def __init__(self, sym_name, *, size=None, channel_type=None, loc=None, ip=None):
        self._init_op([], [], loc=loc, ip=ip)
        self.attributes["sym_name"] = StringAttr.get(str(sym_name))
        sizes = [] if size is None else [int(s) for s in size]
        for s in sizes:
            if s < 1:
                raise TraceError(
                    f"air.channel @{sym_name}: size entries must be >= 1, got {sizes}"
                )
        self.attributes["size"] = ArrayAttr.get(
            [IntegerAttr.get(IntegerType.get_signless(64), s) for s in sizes]
        )
        if channel_type is not None:
            self.attributes["channel_type"] = StringAttr.get(str(channel_type))

    @property
    def sym_name(self):
        return self.attributes["sym_name"].value

    @property
    def size(self):
        return [a.value for a in self.attributes["size"]] or [1]

    @property
    def broadcast_shape(self):
        a = self.attributes.get("broadcast_shape")
        if a is None:
            return None
        return [x.value for x in a]

    @property
    def channel_type(self):
        a = self.attributes.get("channel_type")
        return a.value if a is not None else "npu_dma_stream"

    def _print_custom(self, p, indent):
        sizes = [a.value for a in self.attributes["size"]]
        return [
            " " * indent + f"air.channel @{self.sym_name} {sizes}"
            f"{p.attr_dict(self, skip=('sym_name', 'size'))}"
        ]


def channel(sym_name, *, size=None, channel_type=None, loc=None, ip=None):
    return ChannelOp(sym_name, size=size, channel_type=channel_type, loc=loc, ip=ip)


class Channel(ChannelOp):
    def __init__(
        self,
        sym_name,
        broadcast_shape=None,
        size=None,
        loc=None,
        ip=None,
        *,
        buffer_resources=None,
    ):
        # mlir-air's Channel (_air_ops_ext.py) takes no channel_type: set the attribute, or use channel()
        super().__init__(sym_name, size=size, loc=loc, ip=ip)
        if buffer_resources is not None:
            self.attributes["buffer_resources"] = (
                buffer_resources
                if isinstance(buffer_resources, IntegerAttr)
                else IntegerAttr.get(
                    IntegerType.get_signless(64), int(buffer_resources)
                )
            )
        if broadcast_shape is not None:
            if isinstance(broadcast_shape, ArrayAttr):
                self.attributes["broadcast_shape"] = broadcast_shape
            else:
                items = []
                for s in broadcast_shape:
                    if not isinstance(s, int):
                        raise UnsupportedError(
                            f"air.channel @{sym_name}: dynamic broadcast_shape entries "
                            f"are not supported"
                        )
                    items.append(IntegerAttr.get(IndexType.get(), int(s)))
                self.attributes["broadcast_shape"] = ArrayAttr.get(items)


class _ChannelAccess(Operation):
    _dir = "?"

    def _init_access(
        self,
        chan_name,
        memref,
        offsets,
        sizes,
        strides,
        indices,
        async_dependencies,
        async_token,
        pad_before,
        pad_after,
        loc,
        ip,
    ):
        if (pad_before is None) != (pad_after is None):
            raise ValueError("give pad_before and pad_after together, or neither")
        if pad_before is not None:
            raise UnsupportedError(
                f"{self.OPERATION_NAME}: pad_before / pad_after are not emulated"
            )
        if isinstance(chan_name, FlatSymbolRefAttr):
            chan_name = chan_name.value
        if isinstance(chan_name, ChannelOp):
            chan_name = chan_name.sym_name
        if not isinstance(chan_name, str):
            raise TraceError(
                f"{self.OPERATION_NAME}: channel name must be a str, got {chan_name!r}"
            )
        self.chan_name = chan_name
        self.side = _Side(
            memref, offsets, sizes, strides, f"{self.OPERATION_NAME} @{chan_name}"
        )
        self.indices = [
            _as_value(pyint_to_index(i), f"{self.OPERATION_NAME} index")
            for i in indices or []
        ]
        for v in self.indices:
            if not isinstance(v.type, IndexType):
                raise TraceError(
                    f"{self.OPERATION_NAME} @{chan_name}: index of type {v.type}"
                )
        deps = [_as_value(d, "async dependency") for d in (async_dependencies or [])]
        results = [AsyncTokenType.get()] if async_token is not None else []
        self._init_op(
            deps + self.indices + [self.side.memref] + self.side.dynamic(),
            results,
            loc=loc,
            ip=ip,
        )
        self.attributes["chan_name"] = FlatSymbolRefAttr.get(chan_name)

    def _generic_extras(self):
        return {}, self.side.static_attrs("")

    def _print_custom(self, p, indent):
        # the index list always, `[]` when there is none: AIR.td's assembly format of air.channel.put /
        # get at e972f29 (~828, ~1013) has the brackets outside the optional group
        idx = f"[{p.names(self.indices)}]"
        return [
            " " * indent
            + f"{p.results_prefix(self)}{self.OPERATION_NAME} @{self.chan_name}{idx} "
            f"({self.side.text(p)}){p.attr_dict(self, skip=('chan_name',))} : ({self.side.memref.type})"
        ]


class ChannelPutOp(_ChannelAccess):
    OPERATION_NAME = "air.channel.put"


class ChannelGetOp(_ChannelAccess):
    OPERATION_NAME = "air.channel.get"


class ChannelGet(ChannelGetOp):
    def __init__(
        self,
        chan_name,
        dst,
        offsets=[],
        sizes=[],
        strides=[],
        indices=[],
        async_token=None,
        async_dependencies=[],
        pad_before=None,
        pad_after=None,
        loc=None,
        ip=None,
    ):
        self._init_access(
            chan_name,
            dst,
            offsets,
            sizes,
            strides,
            indices,
            async_dependencies,
            async_token,
            pad_before,
            pad_after,
            loc,
            ip,
        )


class ChannelPut(ChannelPutOp):
    def __init__(
        self,
        chan_name,
        src,
        offsets=[],
        sizes=[],
        strides=[],
        indices=[],
        dest=None,
        async_token=None,
        async_dependencies=[],
        pad_before=None,
        pad_after=None,
        loc=None,
        ip=None,
    ):
        if dest is not None:
            raise UnsupportedError(
                "air.channel.put: dest= (packet routing) is not emulated"
            )
        self._init_access(
            chan_name,
            src,
            offsets,
            sizes,
            strides,
            indices,
            async_dependencies,
            async_token,
            pad_before,
            pad_after,
            loc,
            ip,
        )


class WaitAllOp(Operation):
    """air.wait_all: ordering only; the sequential interpreter needs nothing."""

    OPERATION_NAME = "air.wait_all"

    def __init__(self, async_token, async_dependencies, *, loc=None, ip=None):
        deps = [_as_value(d, "async dependency") for d in (async_dependencies or [])]
        self._init_op(
            deps,
            [AsyncTokenType.get()] if async_token is not None else [],
            loc=loc,
            ip=ip,
        )


def wait_all(async_token, async_dependencies, *, loc=None, ip=None):
    op = WaitAllOp(async_token, async_dependencies, loc=loc, ip=ip)
    return op.results[0] if op.results else op


def module_builder(module_function):
    """Decorator: calling the function builds and returns a new Module holding what it traced."""

    @functools.wraps(module_function)
    def build(*args, **kwargs):
        with Context(), Location.unknown():
            module = Module.create()
            with InsertionPoint(module.body):
                module_function(*args, **kwargs)
        return module

    return build


def external_func(name, inputs, outputs=None, visibility="private"):
    if outputs is None:
        outputs = []
    return FuncOp(
        name=name, type=FunctionType.get(inputs, outputs), visibility=visibility
    )


class call(CallOp):
    """Call wrapper that also takes Python ints for scalar arguments."""

    def __init__(self, calleeOrResults, inputs=[], input_types=[]):
        # A Python int becomes a constant of its declared type; Values (and untyped extras) pass through.
        types = list(input_types) + [None] * (len(inputs) - len(input_types))
        args = [
            arith.constant(t, v) if isinstance(v, int) and t is not None else v
            for v, t in zip(inputs, types)
        ]
        if isinstance(calleeOrResults, FuncOp):
            super().__init__(calleeOrResults, args)
        else:
            super().__init__(input_types, FlatSymbolRefAttr.get(calleeOrResults), args)


_ = DenseI32ArrayAttr
