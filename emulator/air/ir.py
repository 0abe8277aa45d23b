# SPDX-License-Identifier: MIT
"""air.ir for the CPU emulator: MLIR-shaped types, attributes, affine maps and
a small operation tree that the builder's calls populate.

Values are symbolic, exactly as with the real bindings: a block argument, a loop
induction variable or an op result has a type and an owner but no Python value,
and Python arithmetic, comparison, truth value or int() on it raises
`air.emu.SymbolicValueError` (real MLIR raises TypeError for most of those and
silently answers the comparisons; the emulator is stricter on purpose).
"""

import os
import re
import sys
import operator
from itertools import accumulate

import numpy as np
from ml_dtypes import bfloat16

from .emu.errors import SymbolicValueError, TraceError, UnsupportedError

_PKG_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _user_location():
    """file:line of the first frame outside this package (the builder's line)."""
    f = sys._getframe(1)
    while f is not None:
        fn = f.f_code.co_filename
        if not fn.startswith(_PKG_DIR):
            return f"{os.path.basename(fn)}:{f.f_lineno}"
        f = f.f_back
    return "<unknown>"


# --------------------------------------------------------------------------
# Context, Location, InsertionPoint
# --------------------------------------------------------------------------

_context_stack = []
_location_stack = []
_ip_stack = []


class Context:
    """A context manager; the emulator keeps no per-context state."""

    def __init__(self):
        self.allow_unregistered_dialects = False

    def __enter__(self):
        _context_stack.append(self)
        return self

    def __exit__(self, *exc):
        _context_stack.pop()
        return False

    @classmethod
    def _current(cls):
        return _context_stack[-1] if _context_stack else None

    current = property(lambda self: Context._current())

    def load_all_available_dialects(self):
        pass

    def append_dialect_registry(self, registry):
        pass


class Location:
    def __init__(self, desc="unknown"):
        self.desc = desc

    @staticmethod
    def unknown(context=None):
        return Location("unknown")

    @staticmethod
    def file(filename, line, col, context=None):
        return Location(f"{filename}:{line}:{col}")

    @staticmethod
    def name(name, childLoc=None, context=None):
        return Location(name)

    def __enter__(self):
        _location_stack.append(self)
        return self

    def __exit__(self, *exc):
        _location_stack.pop()
        return False

    def __str__(self):
        return f"loc({self.desc})"


class InsertionPoint:
    """Where new operations go: the end of a block (or before its terminator)."""

    def __init__(self, block):
        if not isinstance(block, Block):
            raise TraceError(
                f"InsertionPoint expects a Block, got {type(block).__name__}"
            )
        self.block = block
        self._before = None

    @staticmethod
    def at_block_begin(block):
        ip = InsertionPoint(block)
        ip._before = block.operations[0] if block.operations else None
        return ip

    @staticmethod
    def at_block_terminator(block):
        ip = InsertionPoint(block)
        if not block.operations or not block.operations[-1]._is_terminator:
            raise TraceError("block has no terminator")
        ip._before = block.operations[-1]
        return ip

    def insert(self, op):
        self.block._insert(op, self._before)

    def __enter__(self):
        _ip_stack.append(self)
        return self

    def __exit__(self, *exc):
        _ip_stack.pop()
        return False

    @staticmethod
    def _current_or_none():
        return _ip_stack[-1] if _ip_stack else None

    current = property(lambda self: InsertionPoint._current_or_none())


# --------------------------------------------------------------------------
# Types
# --------------------------------------------------------------------------


class _Structural:
    """Common base of Type and Attribute: values built by a class's get(), compared by _key.

    A class that names a `noun` (class Type(_Structural, noun="type")) is a root: casts, equality
    and error messages stay within it, so a type never equals an attribute."""

    def __init_subclass__(cls, noun=None, article="a", **kwargs):
        super().__init_subclass__(**kwargs)
        if noun is not None:
            cls._root = cls
            cls._noun = noun
            cls._a_noun = f"{article} {noun}"

    def __new__(cls, *args, **kwargs):
        # `IntegerType(t)` style casts: return t when it is of that class.
        if len(args) == 1 and not kwargs and isinstance(args[0], cls._root):
            if isinstance(args[0], cls):
                return args[0]
            raise ValueError(
                f"Cannot cast {cls._noun} to {cls.__name__} (from {args[0]})"
            )
        if args or kwargs:
            raise TraceError(f"use {cls.__name__}.get(...) to build {cls._a_noun}")
        return object.__new__(cls)

    @classmethod
    def _make(cls, **fields):
        x = object.__new__(cls)
        x.__dict__.update(fields)
        return x

    def __eq__(self, other):
        return isinstance(other, self._root) and self._key == other._key

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return hash(self._key)

    def __repr__(self):
        return f"{self._root.__name__}({self})"

    @classmethod
    def isinstance(cls, x):
        return isinstance(x, cls)


class Type(_Structural, noun="type"):
    """Base of all types; types compare structurally."""

    _key = ("type",)

    @staticmethod
    def parse(text, context=None):
        text = text.strip()
        simple = {
            "index": IndexType.get,
            "bf16": BF16Type.get,
            "f16": F16Type.get,
            "f32": F32Type.get,
            "f64": F64Type.get,
        }
        if text in simple:
            return simple[text]()
        for prefix, fn in (
            ("ui", IntegerType.get_unsigned),
            ("si", IntegerType.get_signed),
            ("i", IntegerType.get_signless),
        ):
            if text.startswith(prefix) and text[len(prefix) :].isdigit():
                return fn(int(text[len(prefix) :]))
        raise UnsupportedError(
            f"Type.parse: the emulator parses only scalar types, not {text!r}"
        )

    @property
    def typeid(self):
        return type(self)


class IntegerType(Type):
    @classmethod
    def get_signless(cls, width, context=None):
        return cls._make(width=int(width), _sign="", _key=("int", int(width), ""))

    @classmethod
    def get_signed(cls, width, context=None):
        return cls._make(width=int(width), _sign="s", _key=("int", int(width), "s"))

    @classmethod
    def get_unsigned(cls, width, context=None):
        return cls._make(width=int(width), _sign="u", _key=("int", int(width), "u"))

    @property
    def is_signless(self):
        return self._sign == ""

    @property
    def is_signed(self):
        return self._sign == "s"

    @property
    def is_unsigned(self):
        return self._sign == "u"

    def __str__(self):
        return f"{self._sign}i{self.width}"


class IndexType(Type):
    @classmethod
    def get(cls, context=None):
        return cls._make(_key=("index",))

    width = 64

    def __str__(self):
        return "index"


class _FloatType(Type):
    _name = "f?"
    width = 0

    @classmethod
    def get(cls, context=None):
        return cls._make(_key=("float", cls._name))

    def __str__(self):
        return self._name


class BF16Type(_FloatType):
    _name = "bf16"
    width = 16


class F16Type(_FloatType):
    _name = "f16"
    width = 16


class F32Type(_FloatType):
    _name = "f32"
    width = 32


class F64Type(_FloatType):
    _name = "f64"
    width = 64


FloatType = _FloatType


class NoneType(Type):
    @classmethod
    def get(cls, context=None):
        return cls._make(_key=("none",))

    def __str__(self):
        return "none"


class FunctionType(Type):
    @classmethod
    def get(cls, inputs, results, context=None):
        inputs = list(inputs)
        results = list(results)
        for t in inputs + results:
            if not isinstance(t, Type):
                raise TraceError(f"FunctionType.get: {t!r} is not a type")
        return cls._make(
            inputs=inputs, results=results, _key=("fn", tuple(inputs), tuple(results))
        )

    def __str__(self):
        ins = ", ".join(str(t) for t in self.inputs)
        outs = ", ".join(str(t) for t in self.results)
        if len(self.results) == 1:
            return f"({ins}) -> {outs}"
        return f"({ins}) -> ({outs})"


class ShapedType(Type):
    _DYNAMIC = -(2**63)

    @staticmethod
    def get_dynamic_size():
        return ShapedType._DYNAMIC

    @staticmethod
    def is_dynamic_size(v):
        return v == ShapedType._DYNAMIC

    @staticmethod
    def get_dynamic_stride_or_offset():
        return ShapedType._DYNAMIC

    @staticmethod
    def is_dynamic_stride_or_offset(v):
        return v == ShapedType._DYNAMIC


def _mem_space_value(ms):
    if ms is None:
        return 0
    if isinstance(ms, IntegerAttr):
        return int(ms.value)
    if isinstance(ms, int):
        return int(ms)
    raise TraceError(f"memory space must be an IntegerAttr, got {ms!r}")


class MemRefType(ShapedType):
    @classmethod
    def get(cls, shape, element_type, layout=None, memory_space=None, loc=None):
        if not isinstance(element_type, Type):
            raise TraceError(
                f"MemRefType.get: element type {element_type!r} is not a type"
            )
        shape = [int(s) for s in shape]
        for s in shape:
            if s < 0:
                raise UnsupportedError(
                    "MemRefType.get: dynamic or negative dimensions are not supported"
                )
        if isinstance(memory_space, int) and not isinstance(memory_space, bool):
            memory_space = IntegerAttr.get(
                IntegerType.get_signless(64), int(memory_space)
            )
        if memory_space is not None and not isinstance(memory_space, IntegerAttr):
            raise TraceError(
                f"MemRefType.get: memory_space must be an IntegerAttr, got {memory_space!r}"
            )
        # MLIR drops the default memory space 0.
        if memory_space is not None and int(memory_space.value) == 0:
            memory_space = None
        if layout is not None and not isinstance(
            layout, (StridedLayoutAttr, AffineMapAttr)
        ):
            raise TraceError(f"MemRefType.get: unsupported layout {layout!r}")
        if isinstance(layout, StridedLayoutAttr):
            default = _row_major_strides(shape)
            if layout.offset == 0 and list(layout.strides) == default:
                pass  # still a distinct type in MLIR; keep it
        ms_key = (
            None
            if memory_space is None
            else (int(memory_space.value), str(memory_space.type))
        )
        lay_key = None if layout is None else str(layout)
        return cls._make(
            _shape=tuple(shape),
            element_type=element_type,
            layout=layout,
            memory_space=memory_space,
            _key=("memref", tuple(shape), element_type._key, lay_key, ms_key),
        )

    @property
    def shape(self):
        return list(self._shape)

    @property
    def rank(self):
        return len(self._shape)

    @property
    def has_static_shape(self):
        return True

    @property
    def has_rank(self):
        return True

    def get_dim_size(self, i):
        return self._shape[i]

    @property
    def memory_space_value(self):
        return _mem_space_value(self.memory_space)

    @property
    def num_elements(self):
        n = 1
        for s in self._shape:
            n *= s
        return n

    def get_strides_and_offset(self):
        if isinstance(self.layout, StridedLayoutAttr):
            return list(self.layout.strides), self.layout.offset
        return _row_major_strides(self._shape), 0

    @property
    def is_identity_layout(self):
        return self.layout is None

    def __str__(self):
        dims = "".join(f"{s}x" for s in self._shape)
        text = f"memref<{dims}{self.element_type}"
        if self.layout is not None:
            text += f", {self.layout}"
        if self.memory_space is not None:
            text += f", {self.memory_space}"
        return text + ">"


def _row_major_strides(shape):
    shape = list(shape)
    if not shape:
        return []
    return list(accumulate(shape[1:][::-1], operator.mul))[::-1] + [1]


class AsyncTokenType(Type):
    @classmethod
    def get(cls, context=None):
        return cls._make(_key=("air.async.token",))

    def __str__(self):
        return "!air.async.token"


class VectorType(ShapedType):
    @classmethod
    def get(cls, shape, element_type, **kwargs):
        return cls._make(
            _shape=tuple(shape),
            element_type=element_type,
            _key=("vector", tuple(shape), element_type._key),
        )

    @property
    def shape(self):
        return list(self._shape)

    def __str__(self):
        return (
            "vector<" + "".join(f"{s}x" for s in self._shape) + f"{self.element_type}>"
        )


# --------------------------------------------------------------------------
# Attributes
# --------------------------------------------------------------------------


class Attribute(_Structural, noun="attribute", article="an"):
    _key = ("attr",)

    @staticmethod
    def parse(text, context=None):
        text = text.strip()
        if text == "unit":
            return UnitAttr.get()
        if text in ("true", "false"):
            return BoolAttr.get(text == "true")
        if text.startswith('"') and text.endswith('"'):
            return StringAttr.get(text[1:-1])
        parts = [p.strip() for p in text.split(":")]
        try:
            value = int(parts[0])
        except ValueError:
            raise UnsupportedError(
                f"Attribute.parse: the emulator cannot parse {text!r}"
            ) from None
        ty = Type.parse(parts[1]) if len(parts) > 1 else IntegerType.get_signless(64)
        return IntegerAttr.get(ty, value)


class IntegerAttr(Attribute):
    @classmethod
    def get(cls, type, value):
        if not isinstance(type, Type):
            raise TraceError(f"IntegerAttr.get: {type!r} is not a type")
        if isinstance(value, Value):
            raise SymbolicValueError(
                "IntegerAttr.get needs a Python int, got a symbolic Value: attributes are static"
            )
        value = int(value)
        return cls._make(type=type, value=value, _key=("int", type._key, value))

    def __int__(self):
        return self.value

    def __str__(self):
        if isinstance(self.type, IntegerType) and self.type.width == 1:
            return "true" if self.value else "false"
        return f"{self.value} : {self.type}"


class BoolAttr(Attribute):
    @classmethod
    def get(cls, value, context=None):
        return cls._make(value=bool(value), _key=("bool", bool(value)))

    def __str__(self):
        return "true" if self.value else "false"


class FloatAttr(Attribute):
    @classmethod
    def get(cls, type, value, loc=None):
        # as MLIR's FloatAttr: the value is held in the type's precision (0.1 : bf16 is 0.10009765625)
        if not isinstance(type, _FloatType):
            raise TraceError(f"FloatAttr.get: {type} is not a float type")
        value = _to_float_type(value, type)
        return cls._make(type=type, value=value, _key=("float", type._key, value))

    @classmethod
    def get_f32(cls, value, context=None):
        return cls.get(F32Type.get(), value)

    @classmethod
    def get_f64(cls, value, context=None):
        return cls.get(F64Type.get(), value)

    def __float__(self):
        return self.value

    def __str__(self):
        return f"{_float_literal(self.value, self.type)} : {self.type}"


def _to_float_type(value, type):
    """A Python float rounded to float type `type` (round to nearest even), as a Python float."""
    return float(np_dtype(type).type(float(value)))


def _float_literal(value, type):
    """A float as MLIR's printer spells it: six digits in exponent form (1.500000e+00) when they read
    back to the same value of the type, else all the digits a double needs (always with a '.', which
    MLIR's float literals require); inf and nan as the type's bit pattern in hex."""
    import math

    if math.isfinite(value):
        text = f"{value:.6e}"
        if _to_float_type(float(text), type) == value:
            return text
        return f"{value:.17e}"
    dt = np_dtype(type)
    bits = np.array([value], dt).view(f"u{dt.itemsize}")[0]
    return f"0x{int(bits):0{2 * dt.itemsize}X}"


class StringAttr(Attribute):
    @classmethod
    def get(cls, value, context=None):
        if not isinstance(value, str):
            raise TraceError(f"StringAttr.get needs a str, got {value!r}")
        return cls._make(value=value, _key=("str", value))

    def __str__(self):
        return _string_literal(self.value)


def _string_literal(text):
    """A string literal as MLIR prints one: printable ASCII as it is, except \\ (doubled) and every
    other byte (the quote, newline, non-ASCII as UTF-8 bytes) as a two-digit hex escape (\\22).
    """
    out = []
    for b in text.encode("utf-8"):
        c = chr(b)
        if c == "\\":
            out.append("\\\\")
        elif 0x20 <= b < 0x7F and c != '"':
            out.append(c)
        else:
            out.append(f"\\{b:02X}")
    return '"' + "".join(out) + '"'


_BARE_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_$.]*\Z")


def _symbol_name(name):
    """@name, or @"name" when it is not a bare identifier."""
    return "@" + (name if _BARE_ID.match(name) else _string_literal(name))


def _attr_name(name):
    return name if _BARE_ID.match(name) else _string_literal(name)


class UnitAttr(Attribute):
    @classmethod
    def get(cls, context=None):
        return cls._make(_key=("unit",))

    def __str__(self):
        return "unit"


class _ItemsAttr(Attribute):
    """An attribute holding a list `_items`, read as a sequence."""

    def __iter__(self):
        return iter(self._items)

    def __len__(self):
        return len(self._items)

    def __getitem__(self, i):
        return self._items[i]


class ArrayAttr(_ItemsAttr):
    @classmethod
    def get(cls, attributes, context=None):
        items = list(attributes)
        for a in items:
            if not isinstance(a, Attribute):
                raise TraceError(f"ArrayAttr.get: element {a!r} is not an attribute")
        return cls._make(_items=items, _key=("array", tuple(a._key for a in items)))

    def __str__(self):
        return "[" + ", ".join(str(a) for a in self._items) + "]"


class _DenseArrayAttr(_ItemsAttr):
    _elt = "i64"

    @classmethod
    def get(cls, values, context=None):
        vals = [int(v) for v in values]
        return cls._make(_items=vals, _key=(cls._elt, tuple(vals)))

    def __str__(self):
        return (
            f"array<{self._elt}"
            + ("" if not self._items else ": " + ", ".join(map(str, self._items)))
            + ">"
        )


class DenseI32ArrayAttr(_DenseArrayAttr):
    _elt = "i32"


class DenseI64ArrayAttr(_DenseArrayAttr):
    _elt = "i64"


class DenseBoolArrayAttr(_DenseArrayAttr):
    _elt = "i1"


class TypeAttr(Attribute):
    @classmethod
    def get(cls, value, context=None):
        return cls._make(value=value, _key=("type", value._key))

    def __str__(self):
        return str(self.value)


class FlatSymbolRefAttr(Attribute):
    @classmethod
    def get(cls, value, context=None):
        return cls._make(value=str(value), _key=("sym", str(value)))

    def __str__(self):
        return _symbol_name(self.value)


class DictAttr(Attribute):
    @classmethod
    def get(cls, value=None, context=None):
        value = dict(value or {})
        return cls._make(
            _d=value,
            _key=("dict", tuple(sorted((k, v._key) for k, v in value.items()))),
        )

    def __getitem__(self, k):
        return self._d[k]

    def __contains__(self, k):
        return k in self._d

    def __len__(self):
        return len(self._d)

    def __str__(self):
        return "{" + ", ".join(f"{k} = {v}" for k, v in self._d.items()) + "}"


class StridedLayoutAttr(Attribute):
    @classmethod
    def get(cls, offset, strides, context=None):
        strides = [int(s) for s in strides]
        return cls._make(
            offset=int(offset),
            strides=strides,
            _key=("strided", int(offset), tuple(strides)),
        )

    @classmethod
    def get_fully_dynamic(cls, rank, context=None):
        raise UnsupportedError(
            "StridedLayoutAttr.get_fully_dynamic: dynamic layouts are not supported"
        )

    def __str__(self):
        def f(v):
            return "?" if ShapedType.is_dynamic_size(v) else str(v)

        text = "strided<[" + ", ".join(f(s) for s in self.strides) + "]"
        if self.offset != 0:
            text += f", offset: {f(self.offset)}"
        return text + ">"


class AffineMapAttr(Attribute):
    @classmethod
    def get(cls, value):
        return cls._make(value=value, _key=("affine_map", str(value)))

    def __str__(self):
        return f"affine_map<{self.value}>"


# --------------------------------------------------------------------------
# Affine expressions and maps
# --------------------------------------------------------------------------


def _as_expr(x):
    if isinstance(x, AffineExpr):
        return x
    if isinstance(x, int) and not isinstance(x, bool):
        return AffineConstantExpr.get(x)
    if isinstance(x, Value):
        raise SymbolicValueError(
            "an affine expression cannot contain an SSA value; use AffineSymbolExpr.get(i) "
            "and pass the value as a map operand"
        )
    raise TraceError(f"not an affine expression: {x!r}")


class AffineExpr:
    """Affine expressions; + - * % and get_floor_div / get_ceil_div as in MLIR."""

    def __add__(self, o):
        return AffineExpr.get_add(self, _as_expr(o))

    def __radd__(self, o):
        return AffineExpr.get_add(_as_expr(o), self)

    def __mul__(self, o):
        return AffineExpr.get_mul(self, _as_expr(o))

    def __rmul__(self, o):
        return AffineExpr.get_mul(_as_expr(o), self)

    def __sub__(self, o):
        return AffineExpr.get_add(
            self, AffineExpr.get_mul(_as_expr(o), AffineConstantExpr.get(-1))
        )

    def __rsub__(self, o):
        return AffineExpr.get_add(
            _as_expr(o), AffineExpr.get_mul(self, AffineConstantExpr.get(-1))
        )

    def __neg__(self):
        return AffineExpr.get_mul(self, AffineConstantExpr.get(-1))

    def __mod__(self, o):
        return AffineExpr.get_mod(self, _as_expr(o))

    def __floordiv__(self, o):
        return AffineExpr.get_floor_div(self, _as_expr(o))

    @staticmethod
    def get_add(a, b):
        return AffineAddExpr._bin(_as_expr(a), _as_expr(b))

    @staticmethod
    def get_mul(a, b):
        return AffineMulExpr._bin(_as_expr(a), _as_expr(b))

    @staticmethod
    def get_mod(a, b):
        return AffineModExpr._bin(_as_expr(a), _as_expr(b))

    @staticmethod
    def get_floor_div(a, b):
        return AffineFloorDivExpr._bin(_as_expr(a), _as_expr(b))

    @staticmethod
    def get_ceil_div(a, b):
        return AffineCeilDivExpr._bin(_as_expr(a), _as_expr(b))

    # MLIR's AffineExpr.get_constant / get_dim / get_symbol (mlir-air's
    # decode_ffn_swiglu/matvec_int4_swiglu_rms.py builds a transfer map with AffineExpr.get_dim(1))
    @staticmethod
    def get_constant(value, context=None):
        return AffineConstantExpr.get(value)

    @staticmethod
    def get_dim(position, context=None):
        return AffineDimExpr.get(position)

    @staticmethod
    def get_symbol(position, context=None):
        return AffineSymbolExpr.get(position)

    def __eq__(self, other):
        return isinstance(other, AffineExpr) and str(self) == str(other)

    def __hash__(self):
        return hash(str(self))

    def __repr__(self):
        return f"AffineExpr({self})"

    @classmethod
    def isinstance(cls, e):
        return isinstance(e, cls)


class AffineConstantExpr(AffineExpr):
    def __init__(self, value):
        self.value = int(value)

    @classmethod
    def get(cls, value, context=None):
        if isinstance(value, Value):
            raise SymbolicValueError(
                "AffineConstantExpr.get needs a Python int, got a symbolic Value; "
                "use AffineSymbolExpr.get(i) and pass the value as a map operand"
            )
        return cls(value)

    def _py(self):
        return f"({self.value})"

    def __str__(self):
        return str(self.value)


class _PositionExpr(AffineExpr):
    """A map input by position: printed `{_letter}{position}`, read from `_letter`[position]."""

    _letter = "?"

    def __init__(self, position):
        self.position = int(position)

    @classmethod
    def get(cls, position, context=None):
        return cls(position)

    def _py(self):
        return f"{self._letter}[{self.position}]"

    def __str__(self):
        return f"{self._letter}{self.position}"


class AffineSymbolExpr(_PositionExpr):
    _letter = "s"


class AffineDimExpr(_PositionExpr):
    _letter = "d"


class AffineBinaryExpr(AffineExpr):
    _op = "?"
    _pyop = "?"

    @classmethod
    def _bin(cls, a, b):
        e = cls.__new__(cls)
        e.lhs, e.rhs = a, b
        return e

    def _py(self):
        return f"({self.lhs._py()} {self._pyop} {self.rhs._py()})"

    def __str__(self):
        return _expr_text(self, strong=False)


class AffineAddExpr(AffineBinaryExpr):
    _op, _pyop = "+", "+"


class AffineMulExpr(AffineBinaryExpr):
    _op, _pyop = "*", "*"


class AffineModExpr(AffineBinaryExpr):
    _op, _pyop = "mod", "%"


class AffineFloorDivExpr(AffineBinaryExpr):
    _op, _pyop = "floordiv", "//"


class AffineCeilDivExpr(AffineBinaryExpr):
    _op = "ceildiv"

    def _py(self):
        return f"(-((-{self.lhs._py()}) // {self.rhs._py()}))"


def _const_value(e):
    return e.value if isinstance(e, AffineConstantExpr) else None


def _expr_text(e, strong):
    """An affine expression as MLIR's printer spells it: + and - bind weakly, * mod floordiv ceildiv
    strongly (a weak expression inside a strong one is parenthesised), x + y * -c as x - y * c,
    x + -c as x - c, x * -1 as -x."""
    if not isinstance(e, AffineBinaryExpr):
        return str(e)
    lhs, rhs = e.lhs, e.rhs
    if isinstance(e, AffineAddExpr):
        rc = _const_value(rhs)
        if isinstance(rhs, AffineMulExpr) and (_const_value(rhs.rhs) or 0) < 0:
            c = -_const_value(rhs.rhs)
            sub = _expr_text(
                rhs.lhs, strong=c != 1 or isinstance(rhs.lhs, AffineAddExpr)
            )
            text = f"{_expr_text(lhs, False)} - {sub}" + ("" if c == 1 else f" * {c}")
        elif rc is not None and rc < 0:
            text = f"{_expr_text(lhs, False)} - {-rc}"
        else:
            text = f"{_expr_text(lhs, False)} + {_expr_text(rhs, False)}"
        return f"({text})" if strong else text
    if isinstance(e, AffineMulExpr) and _const_value(rhs) == -1:
        text = "-" + _expr_text(lhs, True)
    else:
        text = f"{_expr_text(lhs, True)} {e._op} {_expr_text(rhs, True)}"
    return f"({text})" if strong else text


def _check_expr(e, n_dims, n_syms):
    if isinstance(e, AffineSymbolExpr) and e.position >= n_syms:
        raise TraceError(f"affine map uses s{e.position} but declares {n_syms} symbols")
    if isinstance(e, AffineDimExpr) and e.position >= n_dims:
        raise TraceError(f"affine map uses d{e.position} but declares {n_dims} dims")
    if isinstance(e, AffineBinaryExpr):
        _check_expr(e.lhs, n_dims, n_syms)
        _check_expr(e.rhs, n_dims, n_syms)
        if isinstance(e, AffineMulExpr) and not (
            isinstance(e.lhs, AffineConstantExpr)
            or isinstance(e.rhs, AffineConstantExpr)
            or _is_const_expr(e.lhs)
            or _is_const_expr(e.rhs)
        ):
            raise TraceError(
                f"affine map: {e} multiplies two non-constant terms (not affine)"
            )
        if isinstance(
            e, (AffineModExpr, AffineFloorDivExpr, AffineCeilDivExpr)
        ) and not _is_const_expr(e.rhs):
            raise TraceError(f"affine map: {e} divides by a non-constant (not affine)")


def _is_const_expr(e):
    if isinstance(e, AffineConstantExpr):
        return True
    if isinstance(e, AffineBinaryExpr):
        return _is_const_expr(e.lhs) and _is_const_expr(e.rhs)
    return False


class AffineMap:
    def __init__(self, n_dims, n_syms, exprs):
        self.n_dims = int(n_dims)
        self.n_symbols = int(n_syms)
        self.results = [_as_expr(e) for e in exprs]
        for e in self.results:
            _check_expr(e, self.n_dims, self.n_symbols)
        self._fn = None

    @staticmethod
    def get(dim_count, symbol_count, exprs, context=None):
        return AffineMap(dim_count, symbol_count, exprs)

    @staticmethod
    def get_constant(value, context=None):
        return AffineMap(0, 0, [AffineConstantExpr.get(value)])

    @staticmethod
    def get_identity(n_dims, context=None):
        return AffineMap(n_dims, 0, [AffineDimExpr.get(i) for i in range(n_dims)])

    @staticmethod
    def get_empty(context=None):
        return AffineMap(0, 0, [])

    @property
    def n_inputs(self):
        return self.n_dims + self.n_symbols

    def evaluator(self):
        """A Python function f(*operands) -> int (one result) or tuple."""
        if self._fn is None:
            nd = self.n_dims
            body = ", ".join(e._py() for e in self.results)
            if len(self.results) == 1:
                src = f"lambda *v: (lambda d, s: {body})(v[:{nd}], v[{nd}:])"
            else:
                src = f"lambda *v: (lambda d, s: ({body},))(v[:{nd}], v[{nd}:])"
            self._fn = eval(src, {})
        return self._fn

    def __str__(self):
        dims = ", ".join(f"d{i}" for i in range(self.n_dims))
        syms = ", ".join(f"s{i}" for i in range(self.n_symbols))
        text = f"({dims})"
        if self.n_symbols:
            text += f"[{syms}]"
        return text + " -> (" + ", ".join(str(e) for e in self.results) + ")"

    def __eq__(self, other):
        return isinstance(other, AffineMap) and str(self) == str(other)

    def __hash__(self):
        return hash(str(self))


# --------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------


def _no_python_arith(name):
    def f(self, *args):
        raise SymbolicValueError(
            f"Python '{name}' on a symbolic value ({self.describe()}): index values have no Python "
            f"value while the design is traced; use affine.apply or arith ops "
            f"(e.g. arith.addi / arith.muli) to compute with them"
        )

    return f


class Value:
    """An SSA value: an op result or a block argument.  Symbolic."""

    __slots__ = ("type", "_owner", "_index", "_loc", "_uid")
    _counter = [0]

    def __init__(self, type, owner, index):
        self.type = type
        self._owner = owner
        self._index = index
        self._loc = None
        Value._counter[0] += 1
        self._uid = Value._counter[0]

    @property
    def owner(self):
        return self._owner

    def get_name(self, *args, **kwargs):
        return f"%v{self._uid}"

    def describe(self):
        o = self._owner
        if isinstance(o, Block):
            parent = o.owner
            pname = parent.OPERATION_NAME if parent is not None else "block"
            return f"block argument #{self._index} of {pname}"
        return f"result of {o.OPERATION_NAME} at {o._loc}"

    def __repr__(self):
        return f"Value({self.describe()} : {self.type})"

    __str__ = __repr__

    # Real MLIR values have no Python arithmetic; comparisons are made to fail
    # loudly here because a design that branches on them in Python is wrong.
    __add__ = __radd__ = _no_python_arith("+")
    __sub__ = __rsub__ = _no_python_arith("-")
    __mul__ = __rmul__ = _no_python_arith("*")
    __floordiv__ = __rfloordiv__ = _no_python_arith("//")
    __truediv__ = __rtruediv__ = _no_python_arith("/")
    __mod__ = __rmod__ = _no_python_arith("%")
    __pow__ = __rpow__ = _no_python_arith("**")
    __neg__ = _no_python_arith("unary -")
    __pos__ = _no_python_arith("unary +")
    __abs__ = _no_python_arith("abs()")
    __lshift__ = __rlshift__ = _no_python_arith("<<")
    __rshift__ = __rrshift__ = _no_python_arith(">>")
    __and__ = __rand__ = _no_python_arith("&")
    __or__ = __ror__ = _no_python_arith("|")
    __xor__ = __rxor__ = _no_python_arith("^")
    __lt__ = _no_python_arith("<")
    __le__ = _no_python_arith("<=")
    __gt__ = _no_python_arith(">")
    __ge__ = _no_python_arith(">=")
    __int__ = _no_python_arith("int()")
    __float__ = _no_python_arith("float()")
    __index__ = _no_python_arith("use as a Python integer (range(), indexing)")
    __bool__ = _no_python_arith("truth value (if / while / and / or)")
    __iter__ = _no_python_arith("iteration")

    def __eq__(self, other):
        if isinstance(other, Value):
            return self is other
        if other is None:
            return False
        raise SymbolicValueError(
            f"Python '==' between a symbolic value ({self.describe()}) and {other!r}: the value "
            f"is not known while the design is traced"
        )

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return self._uid

    @property
    def result_number(self):
        return self._index

    @property
    def arg_number(self):
        return self._index


class OpResult(Value):
    __slots__ = ()


class BlockArgument(Value):
    __slots__ = ()


def _as_value(x, what="operand"):
    """Accept a Value or a single-result op; anything else is a trace error."""
    if isinstance(x, Value):
        return x
    if isinstance(x, Operation):
        if len(x.results) != 1:
            raise TraceError(
                f"{what}: operation {x.OPERATION_NAME} has {len(x.results)} results, "
                f"cannot be used as a single value"
            )
        return x.results[0]
    raise TraceError(
        f"{what} must be an MLIR Value (or a single-result op), got {type(x).__name__} {x!r}"
    )


# --------------------------------------------------------------------------
# Blocks, regions, operations
# --------------------------------------------------------------------------


class Block:
    def __init__(self, arg_types=(), owner=None):
        self.owner = owner
        self.arguments = [BlockArgument(t, self, i) for i, t in enumerate(arg_types)]
        self.operations = []

    def _insert(self, op, before=None):
        if before is None:
            self.operations.append(op)
        else:
            self.operations.insert(self.operations.index(before), op)
        op.parent_block = self

    def append(self, op):
        self._insert(op)

    def add_argument(self, type, loc=None):
        a = BlockArgument(type, self, len(self.arguments))
        self.arguments.append(a)
        return a

    @staticmethod
    def create_at_start(parent, arg_types=(), arg_locs=None):
        return parent.blocks.append(*arg_types)

    def __iter__(self):
        return iter(self.operations)

    def __str__(self):
        return "\n".join(_Printer().block_lines(self, 0))


class _BlockList:
    def __init__(self, region):
        self._region = region
        self._blocks = []

    def append(self, *arg_types, arg_locs=None):
        for t in arg_types:
            if not isinstance(t, Type):
                raise TraceError(f"block argument type {t!r} is not a type")
        b = Block(arg_types, owner=self._region.owner)
        self._blocks.append(b)
        return b

    def __getitem__(self, i):
        return self._blocks[i]

    def __len__(self):
        return len(self._blocks)

    def __iter__(self):
        return iter(self._blocks)


class Region:
    def __init__(self, owner):
        self.owner = owner
        self.blocks = _BlockList(self)


class _AttrMap:
    """op.attributes: a name -> Attribute map (values must be attributes)."""

    def __init__(self, op):
        self._op = op
        self._d = {}

    def __setitem__(self, name, value):
        if not isinstance(value, Attribute):
            raise TraceError(
                f"attributes[{name!r}] of {self._op.OPERATION_NAME} must be an MLIR attribute "
                f"(e.g. StringAttr.get(...)), got {type(value).__name__} {value!r}"
            )
        self._d[name] = value

    def __getitem__(self, name):
        return self._d[name]

    def __delitem__(self, name):
        del self._d[name]

    def __contains__(self, name):
        return name in self._d

    def __len__(self):
        return len(self._d)

    def __iter__(self):
        return iter(self._d)

    def get(self, name, default=None):
        return self._d.get(name, default)

    def items(self):
        return self._d.items()

    def keys(self):
        return self._d.keys()


class Operation:
    """An operation of the traced tree (OpView and Operation in one class)."""

    OPERATION_NAME = "builtin.unknown"
    _is_terminator = False
    # The attributes MLIR keeps as the op's inherent properties (printed `<{...}>` in the generic
    # form); every other attribute is discardable (`{...}`). AIR ops stay unregistered: none.
    _PROPERTIES = ()

    def _init_op(
        self,
        operands=(),
        result_types=(),
        num_regions=0,
        loc=None,
        ip=None,
        insert=True,
    ):
        self.operands = list(operands)
        self.results = [OpResult(t, self, i) for i, t in enumerate(result_types)]
        self.regions = [Region(self) for _ in range(num_regions)]
        self.attributes = _AttrMap(self)
        self.parent_block = None
        self._loc = _user_location()
        if insert:
            point = ip if ip is not None else InsertionPoint._current_or_none()
            if point is None:
                raise TraceError(
                    f"{self.OPERATION_NAME} built outside any insertion point (build the design "
                    f"inside @module_builder / `with InsertionPoint(...)`)"
                )
            point.insert(self)

    @property
    def operation(self):
        return self

    @property
    def opview(self):
        return self

    @property
    def name(self):
        return self.OPERATION_NAME

    @property
    def result(self):
        if len(self.results) != 1:
            raise ValueError(
                f"{self.OPERATION_NAME} has {len(self.results)} results, not exactly one"
            )
        return self.results[0]

    @property
    def parent(self):
        return self.parent_block.owner if self.parent_block is not None else None

    @property
    def context(self):
        return Context._current()

    @property
    def location(self):
        return Location(self._loc)

    def where(self):
        """'op.name (file:line)' for error messages."""
        sym = ""
        if "sym_name" in self.attributes:
            sym = f" @{self.attributes['sym_name'].value}"
        return f"{self.OPERATION_NAME}{sym} at {self._loc}"

    def verify(self):
        return True

    def erase(self):
        if self.parent_block is not None:
            self.parent_block.operations.remove(self)
            self.parent_block = None

    def walk(self, fn):
        fn(self)
        for r in self.regions:
            for b in r.blocks:
                for op in list(b.operations):
                    op.walk(fn)

    def __str__(self):
        return "\n".join(_Printer().op_lines(self, 0))

    def __repr__(self):
        return f"<{self.OPERATION_NAME} at {self._loc}>"

    def get_asm(
        self,
        binary=False,
        large_elements_limit=None,
        large_resource_limit=None,
        enable_debug_info=False,
        pretty_debug_info=False,
        print_generic_op_form=False,
        use_local_scope=False,
        use_name_loc_as_prefix=False,
        assume_verified=False,
        skip_regions=False,
    ):
        """The op's text as the real bindings' get_asm: the custom form, or with
        print_generic_op_form=True MLIR's generic form (what stock mlir-opt parses with
        --allow-unregistered-dialect). The elision limits have nothing to elide here."""
        if enable_debug_info or pretty_debug_info:
            raise UnsupportedError(
                "Operation.print / get_asm: enable_debug_info (locations) is not emulated"
            )
        if skip_regions and not print_generic_op_form:
            raise UnsupportedError(
                "Operation.print / get_asm: skip_regions is emulated for the generic "
                "form only (print_generic_op_form=True)"
            )
        text = "\n".join(
            _Printer(generic=print_generic_op_form, skip_regions=skip_regions).op_lines(
                self, 0
            )
        )
        return text.encode() if binary else text

    def print(
        self,
        large_elements_limit=None,
        large_resource_limit=None,
        enable_debug_info=False,
        pretty_debug_info=False,
        print_generic_op_form=False,
        use_local_scope=False,
        use_name_loc_as_prefix=False,
        assume_verified=False,
        file=None,
        binary=False,
        skip_regions=False,
    ):
        """Operation.print of the real bindings (same keywords and order): writes to file
        (default sys.stdout), bytes when binary=True; the AsmState overload is not emulated.
        """
        if large_elements_limit is not None and not isinstance(
            large_elements_limit, int
        ):
            raise UnsupportedError(
                "Operation.print(state, ...): AsmState is not emulated"
            )
        text = self.get_asm(
            binary=binary,
            print_generic_op_form=print_generic_op_form,
            enable_debug_info=enable_debug_info,
            pretty_debug_info=pretty_debug_info,
            skip_regions=skip_regions,
        )
        out = sys.stdout if file is None else file
        out.write(text)

    # --- printing -----------------------------------------------------
    def _print_custom(self, p, indent):
        """Return a list of lines or None for the generic form."""
        return None

    def _generic_extras(self):
        """(properties, attributes) the generic form shows beyond op.attributes: what MLIR stores on
        the op but the emulator keeps in Python fields (operandSegmentSizes, static_offsets, ...).
        Values are attributes or verbatim attribute text."""
        return {}, {}

    def _generic_attributes(self):
        """(properties, discardable attributes) of the generic form, each sorted by name as MLIR's
        dictionaries are."""
        extra_props, extra_attrs = self._generic_extras()
        props = {k: v for k, v in self.attributes.items() if k in self._PROPERTIES}
        attrs = {k: v for k, v in self.attributes.items() if k not in self._PROPERTIES}
        props.update(extra_props)
        attrs.update(extra_attrs)
        return sorted(props.items()), sorted(attrs.items())


OpView = Operation


class ModuleOp(Operation):
    OPERATION_NAME = "builtin.module"
    _PROPERTIES = ("sym_name", "sym_visibility")

    def __init__(self):
        self._init_op(num_regions=1, insert=False)
        self.regions[0].blocks.append()

    @property
    def body(self):
        return self.regions[0].blocks[0]

    def _print_custom(self, p, indent):
        lines = [" " * indent + "module {"]
        lines += p.block_lines(self.body, indent + 2)
        lines.append(" " * indent + "}")
        return lines


# an op's name where a line of MLIR text starts one: after any `%results = `, bare or quoted
_OP_AT_LINE_START = re.compile(
    r'^\s*(?:%[\w#:]+(?:\s*,\s*%[\w#:]+)*\s*=\s*)?"?([a-z_][\w]*\.[\w.]*\w)"?[\s(]',
    re.MULTILINE,
)


class Module:
    def __init__(self):
        self._op = ModuleOp()

    @staticmethod
    def create(loc=None):
        return Module()

    @staticmethod
    def parse(text, context=None):
        """Not modelled: reading MLIR text back takes a parser of every op's custom assembly (what
        MLIR's own parser is); the emulator builds modules through the Python API only. The refusal
        names the ops the text holds."""
        ops = sorted(set(_OP_AT_LINE_START.findall(str(text))))
        dialects = sorted({o.split(".")[0] for o in ops})
        raise UnsupportedError(
            f"Module.parse: not modelled: the emulator has no MLIR parser; this text uses "
            f"{len(ops)} operation names from the dialects ({', '.join(dialects)}), and reading it "
            f"back needs a parser of each op's custom assembly, as MLIR's own; the emulator builds "
            f"modules through the Python API only"
        )

    @property
    def body(self):
        return self._op.body

    @property
    def operation(self):
        return self._op

    @property
    def context(self):
        return Context._current()

    def __str__(self):
        return str(self._op)


# --------------------------------------------------------------------------
# The printer: readable, MLIR-like text
# --------------------------------------------------------------------------


class _Printer:
    """Prints ops in their custom form (each op's _print_custom) or, with generic=True, in MLIR's
    generic form: %r = "dialect.op"(%a, %b) <{properties}> ({regions}) {attributes} : (types) -> types.
    """

    def __init__(self, generic=False, skip_regions=False):
        self.generic = generic
        self.skip_regions = skip_regions
        self._names = {}
        self._n = 0
        self._a = 0

    def name(self, v):
        if not isinstance(v, Value):
            return str(v)
        n = self._names.get(v._uid)
        if n is None:
            if isinstance(v, BlockArgument):
                n = f"%arg{self._a}"
                self._a += 1
            else:
                n = f"%{self._n}"
                self._n += 1
            self._names[v._uid] = n
        return n

    def names(self, vals):
        return ", ".join(self.name(v) for v in vals)

    def mixed(self, vals):
        return (
            "["
            + ", ".join(self.name(v) if isinstance(v, Value) else str(v) for v in vals)
            + "]"
        )

    @staticmethod
    def attr_items(items):
        return ", ".join(
            _attr_name(k) if isinstance(v, UnitAttr) else f"{_attr_name(k)} = {v}"
            for k, v in items
        )

    def attr_dict(self, op, skip=()):
        items = [(k, v) for k, v in op.attributes.items() if k not in skip]
        if not items:
            return ""
        return " {" + self.attr_items(items) + "}"

    def results_prefix(self, op):
        """'%3 = ', or for several results '%3:2 = ' (the results are then %3#0, %3#1)."""
        rs = op.results
        if not rs:
            return ""
        if len(rs) == 1:
            return self.name(rs[0]) + " = "
        n = self._n
        self._n += 1
        for i, r in enumerate(rs):
            self._names[r._uid] = f"%{n}#{i}"
        return f"%{n}:{len(rs)} = "

    def block_lines(self, block, indent):
        lines = []
        for op in block.operations:
            lines += self.op_lines(op, indent)
        return lines

    def region_lines(self, region, indent):
        lines = []
        for b in region.blocks:
            lines += self.block_lines(b, indent)
        return lines

    def op_lines(self, op, indent):
        if self.generic:
            return self.generic_op_lines(op, indent)
        custom = op._print_custom(self, indent)
        if custom is not None:
            return custom
        pad = " " * indent
        text = (
            f'{pad}{self.results_prefix(op)}"{op.OPERATION_NAME}"({self.names(op.operands)})'
            f"{self.attr_dict(op)} : ({', '.join(str(v.type) for v in op.operands)}) -> "
            f"({', '.join(str(r.type) for r in op.results)})"
        )
        if not op.regions:
            return [text]
        lines = [text + " ({"]
        for r in op.regions:
            lines += self.region_lines(r, indent + 2)
        lines.append(pad + "})")
        return lines

    # --- the generic form ------------------------------------------------
    @staticmethod
    def _result_types(types):
        if len(types) == 1 and not isinstance(types[0], FunctionType):
            return str(types[0])
        return "(" + ", ".join(map(str, types)) + ")"

    def generic_op_lines(self, op, indent):
        pad = " " * indent
        props, attrs = op._generic_attributes()
        head = f'{pad}{self.results_prefix(op)}"{op.OPERATION_NAME}"({self.names(op.operands)})'
        if props:
            head += " <{" + self.attr_items(props) + "}>"
        tail = ""
        if attrs:
            tail += " {" + self.attr_items(attrs) + "}"
        tail += (
            f" : ({', '.join(str(v.type) for v in op.operands)}) -> "
            f"{self._result_types([r.type for r in op.results])}"
        )
        if not op.regions:
            return [head + tail]
        if self.skip_regions:
            return [head + " (" + ", ".join("{...}" for _ in op.regions) + ")" + tail]
        lines = [head + " ({"]
        for i, r in enumerate(op.regions):
            if i:
                lines.append(pad + "}, {")
            for j, b in enumerate(r.blocks):
                if j or b.arguments:
                    args = ", ".join(f"{self.name(a)}: {a.type}" for a in b.arguments)
                    lines.append(
                        f"{pad}^bb{j}" + (f"({args})" if b.arguments else "") + ":"
                    )
                for inner in b.operations:
                    lines += self.generic_op_lines(inner, indent + 2)
        lines.append(pad + "})" + tail)
        return lines


__all__ = [
    "Context",
    "Location",
    "InsertionPoint",
    "Type",
    "IntegerType",
    "IndexType",
    "BF16Type",
    "F16Type",
    "F32Type",
    "F64Type",
    "FloatType",
    "NoneType",
    "FunctionType",
    "ShapedType",
    "MemRefType",
    "AsyncTokenType",
    "VectorType",
    "Attribute",
    "IntegerAttr",
    "BoolAttr",
    "FloatAttr",
    "StringAttr",
    "UnitAttr",
    "ArrayAttr",
    "DenseI32ArrayAttr",
    "DenseI64ArrayAttr",
    "DenseBoolArrayAttr",
    "TypeAttr",
    "FlatSymbolRefAttr",
    "DictAttr",
    "StridedLayoutAttr",
    "AffineMapAttr",
    "AffineExpr",
    "AffineConstantExpr",
    "AffineSymbolExpr",
    "AffineDimExpr",
    "AffineBinaryExpr",
    "AffineAddExpr",
    "AffineMulExpr",
    "AffineModExpr",
    "AffineFloorDivExpr",
    "AffineCeilDivExpr",
    "AffineMap",
    "Value",
    "OpResult",
    "BlockArgument",
    "Block",
    "Region",
    "Operation",
    "OpView",
    "Module",
    "ModuleOp",
]


# ------------------------------------------------------------------------------------------ numpy types
_INT = {
    (8, ""): np.int8,
    (16, ""): np.int16,
    (32, ""): np.int32,
    (64, ""): np.int64,
    (8, "s"): np.int8,
    (16, "s"): np.int16,
    (32, "s"): np.int32,
    (64, "s"): np.int64,
    (8, "u"): np.uint8,
    (16, "u"): np.uint16,
    (32, "u"): np.uint32,
    (64, "u"): np.uint64,
    (1, ""): np.bool_,
}


def np_dtype(t):
    """numpy dtype of an element type."""
    if isinstance(t, BF16Type):
        return np.dtype(bfloat16)
    if isinstance(t, F32Type):
        return np.dtype(np.float32)
    if isinstance(t, F16Type):
        return np.dtype(np.float16)
    if isinstance(t, F64Type):
        return np.dtype(np.float64)
    if isinstance(t, IndexType):
        return np.dtype(np.int64)
    if isinstance(t, IntegerType):
        key = (t.width, t._sign)
        if key in _INT:
            return np.dtype(_INT[key])
    raise UnsupportedError(
        f"element type {t} has no numpy equivalent in the emulator "
        f"(sub-byte types must be carried as i8 / ui8 bytes)"
    )
