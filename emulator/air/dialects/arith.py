# SPDX-License-Identifier: MIT
"""arith: constants and scalar integer / float ops, evaluated by the interpreter.

Each op class carries `_eval(values, result_type)`, the run-time semantics:
integer results wrap to their bit width (index is 64-bit), division follows
arith's rounding (divsi / remsi truncate toward zero, floordivsi / ceildivsi
round as named), a shift by the bit width or more (poison in MLIR) is an
ExecutionError, float ops compute in the element type (bf16 results are rounded
to bf16).
"""

import enum

import numpy as np

from ..ir import (
    Attribute,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    Operation,
    Type,
    Value,
    VectorType,
    _FloatType,
    _as_value,
)
from ..emu.errors import ExecutionError, TraceError, UnsupportedError
from ._elementwise import element_type, f64, is_float_like, rounded


def _wrap(v, t):
    """Wrap a Python int to the width of integer type t (signed view)."""
    if isinstance(t, IndexType):
        return int(v)
    w = t.width
    if w == 1:
        return int(v) & 1
    v = int(v) & ((1 << w) - 1)
    if t.is_unsigned:
        return v
    return v - (1 << w) if v >= (1 << (w - 1)) else v


def _unsigned(v, t):
    w = 64 if isinstance(t, IndexType) else t.width
    return int(v) & ((1 << w) - 1)


def _is_int_like(t):
    return isinstance(t, (IntegerType, IndexType))


class ConstantOp(Operation):
    OPERATION_NAME = "arith.constant"
    _PROPERTIES = ("value",)

    def __init__(self, result, value=None, *, loc=None, ip=None):
        if value is None:
            if not isinstance(result, Attribute):
                raise TraceError(
                    "arith.constant needs (type, value) or a typed attribute"
                )
            attr = result
            result = attr.type
        elif isinstance(value, Attribute):
            attr = value
        elif isinstance(value, Value):
            raise TraceError(
                "arith.constant needs a Python number, got a symbolic Value"
            )
        elif isinstance(value, bool) or isinstance(value, (int, np.integer)):
            if not _is_int_like(result):
                if isinstance(result, _FloatType):
                    attr = FloatAttr.get(result, float(value))
                else:
                    raise TraceError(
                        f"arith.constant: cannot make a {result} from {value!r}"
                    )
            else:
                attr = IntegerAttr.get(result, int(value))
        elif isinstance(value, (float, np.floating)):
            if not isinstance(result, _FloatType):
                raise TraceError(
                    f"arith.constant: float value {value!r} for non-float type {result}"
                )
            attr = FloatAttr.get(result, float(value))
        else:
            raise TraceError(f"arith.constant: unsupported value {value!r}")
        if not isinstance(result, Type):
            raise TraceError(f"arith.constant: result type {result!r} is not a type")
        self._init_op([], [result], loc=loc, ip=ip)
        self.attributes["value"] = attr

    @classmethod
    def create_index(cls, value, *, loc=None, ip=None):
        return cls(IndexType.get(), value, loc=loc, ip=ip)

    @property
    def type(self):
        return self.results[0].type

    @property
    def value(self):
        return self.attributes["value"]

    @property
    def literal_value(self):
        a = self.attributes["value"]
        return a.value

    def _const(self):
        a = self.attributes["value"]
        t = self.results[0].type
        if _is_int_like(t):
            return _wrap(a.value, t)
        from ..emu.types import np_dtype

        return np_dtype(t).type(a.value)

    def _print_custom(self, p, indent):
        a = self.attributes["value"]
        t = self.results[0].type
        if isinstance(a, IntegerAttr) and a.type == t:
            text = f"{a.value} : {t}"
        else:
            text = str(a)
        return [" " * indent + f"{p.results_prefix(self)}arith.constant {text}"]


def constant(result, value, *, loc=None, ip=None):
    return ConstantOp(result, value, loc=loc, ip=ip).result


class _BinaryOp(Operation):
    _kind = "int"  # or "float"
    # arith's default flags, which MLIR stores on every addi / subi / muli / shli (overflowFlags) and
    # every float op (fastmath), and prints in the generic form
    _default_props = {}

    def _generic_extras(self):
        return dict(self._default_props), {}

    def __init__(self, lhs, rhs, *, loc=None, ip=None, **kwargs):
        a = _as_value(lhs, f"{self.OPERATION_NAME} lhs")
        b = _as_value(rhs, f"{self.OPERATION_NAME} rhs")
        if a.type != b.type:
            raise TraceError(
                f"{self.OPERATION_NAME}: operand types differ ({a.type} vs {b.type})"
            )
        if self._kind == "int" and isinstance(a.type, VectorType):
            raise UnsupportedError(
                f"{self.OPERATION_NAME} on {a.type}: integer vector arithmetic is not supported "
                f"by the emulator"
            )
        if self._kind == "int" and not _is_int_like(a.type):
            raise TraceError(
                f"{self.OPERATION_NAME} needs integer or index operands, got {a.type}"
            )
        if self._kind == "float" and not is_float_like(a.type):
            raise TraceError(
                f"{self.OPERATION_NAME} needs float operands, got {a.type}"
            )
        self._init_op([a, b], [a.type], loc=loc, ip=ip)

    def _print_custom(self, p, indent):
        return [
            " " * indent + f"{p.results_prefix(self)}{self.OPERATION_NAME} "
            f"{p.names(self.operands)} : {self.results[0].type}"
        ]


_OVERFLOW = {"overflowFlags": "#arith.overflow<none>"}
_FASTMATH = {"fastmath": "#arith.fastmath<none>"}


def _int_op(name, fn):
    opname = fn.__name__.strip("_")
    cls = type(
        name,
        (_BinaryOp,),
        {
            "OPERATION_NAME": "arith." + opname,
            "_default_props": (
                _OVERFLOW if opname in ("addi", "subi", "muli", "shli") else {}
            ),
        },
    )
    cls._eval = staticmethod(lambda v, t, _fn=fn: _wrap(_fn(v[0], v[1], t), t))
    return cls


def _trunc_div(a, b):
    if b == 0:
        raise ZeroDivisionError("arith division by zero")
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _addi(a, b, t):
    return a + b


def _subi(a, b, t):
    return a - b


def _muli(a, b, t):
    return a * b


def _divsi(a, b, t):
    return _trunc_div(a, b)


def _divui(a, b, t):
    return _unsigned(a, t) // _unsigned(b, t)


def _remsi(a, b, t):
    return a - b * _trunc_div(a, b)


def _remui(a, b, t):
    return _unsigned(a, t) % _unsigned(b, t)


def _floordivsi(a, b, t):
    return a // b


def _ceildivsi(a, b, t):
    return -((-a) // b)


def _ceildivui(a, b, t):
    return -((-_unsigned(a, t)) // _unsigned(b, t))


def _maxsi(a, b, t):
    return max(a, b)


def _minsi(a, b, t):
    return min(a, b)


def _maxui(a, b, t):
    return a if _unsigned(a, t) >= _unsigned(b, t) else b


def _minui(a, b, t):
    return a if _unsigned(a, t) <= _unsigned(b, t) else b


def _andi(a, b, t):
    return a & b


def _ori(a, b, t):
    return a | b


def _xori(a, b, t):
    return a ^ b


def _shift_amount(b, t, name):
    """b as a shift amount: MLIR's shifts are poison when it is (unsigned) >= the bit width."""
    w = 64 if isinstance(t, IndexType) else t.width
    n = _unsigned(b, t)
    if n >= w:
        raise ExecutionError(
            f"arith.{name}: shift amount {n} >= the bit width {w} of {t} (poison in MLIR)"
        )
    return n


def _shli(a, b, t):
    return a << _shift_amount(b, t, "shli")


def _shrsi(a, b, t):
    return a >> _shift_amount(b, t, "shrsi")


def _shrui(a, b, t):
    return _unsigned(a, t) >> _shift_amount(b, t, "shrui")


AddIOp = _int_op("AddIOp", _addi)
SubIOp = _int_op("SubIOp", _subi)
MulIOp = _int_op("MulIOp", _muli)
DivSIOp = _int_op("DivSIOp", _divsi)
DivUIOp = _int_op("DivUIOp", _divui)
RemSIOp = _int_op("RemSIOp", _remsi)
RemUIOp = _int_op("RemUIOp", _remui)
FloorDivSIOp = _int_op("FloorDivSIOp", _floordivsi)
CeilDivSIOp = _int_op("CeilDivSIOp", _ceildivsi)
CeilDivUIOp = _int_op("CeilDivUIOp", _ceildivui)
MaxSIOp = _int_op("MaxSIOp", _maxsi)
MinSIOp = _int_op("MinSIOp", _minsi)
MaxUIOp = _int_op("MaxUIOp", _maxui)
MinUIOp = _int_op("MinUIOp", _minui)
AndIOp = _int_op("AndIOp", _andi)
OrIOp = _int_op("OrIOp", _ori)
XOrIOp = _int_op("XOrIOp", _xori)
ShLIOp = _int_op("ShLIOp", _shli)
ShRSIOp = _int_op("ShRSIOp", _shrsi)
ShRUIOp = _int_op("ShRUIOp", _shrui)


def _float_op(name, opname, fn, vfn=None):
    """Scalars and (element-wise, numpy) float vectors, in float64 then rounded to the element type.
    Vector operands are used by mlir-air's weighted_rms_norm/weighted_rms_norm.py (mulf, addf of
    vector<16xbf16> / vector<16xf32>) and decode_ffn_swiglu/matvec_int4_swiglu_rms.py (SiLU).
    """
    cls = type(
        name,
        (_BinaryOp,),
        {
            "OPERATION_NAME": "arith." + opname,
            "_kind": "float",
            "_default_props": _FASTMATH,
        },
    )
    vfn = vfn or fn

    def ev(v, t):
        with np.errstate(all="ignore"):  # inf / NaN as IEEE gives them
            if isinstance(v[0], np.ndarray):
                return rounded(vfn(f64(v[0]), f64(v[1])), v[0])
            return type(v[0])(fn(np.float64(v[0]), np.float64(v[1])))

    cls._eval = staticmethod(ev)
    return cls


AddFOp = _float_op("AddFOp", "addf", lambda a, b: a + b)
SubFOp = _float_op("SubFOp", "subf", lambda a, b: a - b)
MulFOp = _float_op("MulFOp", "mulf", lambda a, b: a * b)
DivFOp = _float_op("DivFOp", "divf", lambda a, b: a / b)
MaximumFOp = _float_op("MaximumFOp", "maximumf", lambda a, b: max(a, b), np.maximum)
MinimumFOp = _float_op("MinimumFOp", "minimumf", lambda a, b: min(a, b), np.minimum)


def _fn(cls):
    def f(lhs, rhs, *, loc=None, ip=None, **kwargs):
        return cls(lhs, rhs, loc=loc, ip=ip).result

    f.__name__ = cls.OPERATION_NAME.split(".")[1]
    return f


addi = _fn(AddIOp)
subi = _fn(SubIOp)
muli = _fn(MulIOp)
divsi = _fn(DivSIOp)
divui = _fn(DivUIOp)
remsi = _fn(RemSIOp)
remui = _fn(RemUIOp)
floordivsi = _fn(FloorDivSIOp)
ceildivsi = _fn(CeilDivSIOp)
ceildivui = _fn(CeilDivUIOp)
maxsi = _fn(MaxSIOp)
minsi = _fn(MinSIOp)
maxui = _fn(MaxUIOp)
minui = _fn(MinUIOp)
andi = _fn(AndIOp)
ori = _fn(OrIOp)
xori = _fn(XOrIOp)
shli = _fn(ShLIOp)
shrsi = _fn(ShRSIOp)
shrui = _fn(ShRUIOp)
addf = _fn(AddFOp)
subf = _fn(SubFOp)
mulf = _fn(MulFOp)
divf = _fn(DivFOp)
maximumf = _fn(MaximumFOp)
minimumf = _fn(MinimumFOp)


class _CastOp(Operation):
    _check = staticmethod(lambda src, dst: True)

    def __init__(self, out, in_, *, loc=None, ip=None):
        v = _as_value(in_, f"{self.OPERATION_NAME} operand")
        if not isinstance(out, Type):
            raise TraceError(
                f"{self.OPERATION_NAME}: result type {out!r} is not a type"
            )
        if not self._check(v.type, out):
            raise TraceError(f"{self.OPERATION_NAME}: cannot cast {v.type} to {out}")
        self._init_op([v], [out], loc=loc, ip=ip)

    def _print_custom(self, p, indent):
        return [
            " " * indent + f"{p.results_prefix(self)}{self.OPERATION_NAME} "
            f"{p.name(self.operands[0])} : {self.operands[0].type} to {self.results[0].type}"
        ]


class IndexCastOp(_CastOp):
    OPERATION_NAME = "arith.index_cast"
    _check = staticmethod(
        lambda s, d: (isinstance(s, IndexType) and isinstance(d, IntegerType))
        or (isinstance(d, IndexType) and isinstance(s, IntegerType))
    )
    _eval = staticmethod(lambda v, t: _wrap(v[0], t))


class IndexCastUIOp(_CastOp):
    OPERATION_NAME = "arith.index_castui"
    _check = staticmethod(IndexCastOp._check)

    @staticmethod
    def _eval(v, t):
        return (
            _wrap(v[0] & ((1 << 64) - 1), t)
            if isinstance(t, IndexType)
            else _wrap(v[0], t)
        )


class ExtSIOp(_CastOp):
    OPERATION_NAME = "arith.extsi"
    _check = staticmethod(
        lambda s, d: isinstance(s, IntegerType)
        and isinstance(d, IntegerType)
        and d.width > s.width
    )
    _eval = staticmethod(lambda v, t: _wrap(v[0], t))


class ExtUIOp(_CastOp):
    OPERATION_NAME = "arith.extui"
    _check = staticmethod(ExtSIOp._check)

    @staticmethod
    def _eval(v, t):
        return v[0]  # operand already carries its unsigned value when unsigned


class TruncIOp(_CastOp):
    OPERATION_NAME = "arith.trunci"

    def _generic_extras(self):
        return dict(_OVERFLOW), {}

    _check = staticmethod(
        lambda s, d: isinstance(s, IntegerType)
        and isinstance(d, IntegerType)
        and d.width < s.width
    )
    _eval = staticmethod(lambda v, t: _wrap(v[0], t))


def _np_of(t):
    from ..emu.types import np_dtype

    return np_dtype(t)


class SIToFPOp(_CastOp):
    OPERATION_NAME = "arith.sitofp"
    _check = staticmethod(
        lambda s, d: isinstance(s, IntegerType) and isinstance(d, _FloatType)
    )
    _eval = staticmethod(lambda v, t: _np_of(t).type(v[0]))


class UIToFPOp(SIToFPOp):
    OPERATION_NAME = "arith.uitofp"


class FPToSIOp(_CastOp):
    OPERATION_NAME = "arith.fptosi"
    _check = staticmethod(
        lambda s, d: isinstance(s, _FloatType) and isinstance(d, IntegerType)
    )
    _eval = staticmethod(lambda v, t: _wrap(int(np.float64(v[0])), t))


def _same_shape(s, d):
    if isinstance(s, VectorType) or isinstance(d, VectorType):
        return (
            isinstance(s, VectorType)
            and isinstance(d, VectorType)
            and s.shape == d.shape
        )
    return True


class ExtFOp(_CastOp):
    """Float scalars, or float vectors of one shape (vector<16xbf16> to vector<16xf32> in mlir-air's
    weighted_rms_norm/weighted_rms_norm.py), element by element."""

    OPERATION_NAME = "arith.extf"
    _check = staticmethod(
        lambda s, d: is_float_like(s) and is_float_like(d) and _same_shape(s, d)
    )

    @staticmethod
    def _eval(v, t):
        if isinstance(v[0], np.ndarray):
            return v[0].astype(_np_of(element_type(t)))
        return _np_of(t).type(v[0])


class TruncFOp(ExtFOp):
    OPERATION_NAME = "arith.truncf"


def _cast_fn(cls):
    def f(out, in_, *, loc=None, ip=None, **kwargs):
        return cls(out, in_, loc=loc, ip=ip).result

    return f


index_cast = _cast_fn(IndexCastOp)
index_castui = _cast_fn(IndexCastUIOp)
extsi = _cast_fn(ExtSIOp)
extui = _cast_fn(ExtUIOp)
trunci = _cast_fn(TruncIOp)
sitofp = _cast_fn(SIToFPOp)
uitofp = _cast_fn(UIToFPOp)
fptosi = _cast_fn(FPToSIOp)
extf = _cast_fn(ExtFOp)
truncf = _cast_fn(TruncFOp)


class CmpIPredicate(enum.IntEnum):
    eq = 0
    ne = 1
    slt = 2
    sle = 3
    sgt = 4
    sge = 5
    ult = 6
    ule = 7
    ugt = 8
    uge = 9


_CMP = {
    0: lambda a, b, t: a == b,
    1: lambda a, b, t: a != b,
    2: lambda a, b, t: a < b,
    3: lambda a, b, t: a <= b,
    4: lambda a, b, t: a > b,
    5: lambda a, b, t: a >= b,
    6: lambda a, b, t: _unsigned(a, t) < _unsigned(b, t),
    7: lambda a, b, t: _unsigned(a, t) <= _unsigned(b, t),
    8: lambda a, b, t: _unsigned(a, t) > _unsigned(b, t),
    9: lambda a, b, t: _unsigned(a, t) >= _unsigned(b, t),
}


class CmpIOp(Operation):
    OPERATION_NAME = "arith.cmpi"
    _PROPERTIES = ("predicate",)

    def __init__(self, predicate, lhs, rhs, *, loc=None, ip=None):
        if isinstance(predicate, str):
            predicate = CmpIPredicate[predicate]
        if isinstance(predicate, IntegerAttr):
            predicate = predicate.value
        a = _as_value(lhs, "arith.cmpi lhs")
        b = _as_value(rhs, "arith.cmpi rhs")
        if a.type != b.type or not _is_int_like(a.type):
            raise TraceError(
                f"arith.cmpi: operands must be integers of one type ({a.type}, {b.type})"
            )
        self._init_op([a, b], [IntegerType.get_signless(1)], loc=loc, ip=ip)
        self._pred = int(predicate)
        self.attributes["predicate"] = IntegerAttr.get(
            IntegerType.get_signless(64), int(predicate)
        )

    def _eval(self, v, t):
        return int(_CMP[self._pred](v[0], v[1], self.operands[0].type))


def cmpi(predicate, lhs, rhs, *, loc=None, ip=None):
    return CmpIOp(predicate, lhs, rhs, loc=loc, ip=ip).result


class SelectOp(Operation):
    OPERATION_NAME = "arith.select"

    def __init__(self, condition, true_value, false_value, *, loc=None, ip=None):
        c = _as_value(condition, "arith.select condition")
        a = _as_value(true_value, "arith.select true value")
        b = _as_value(false_value, "arith.select false value")
        if a.type != b.type:
            raise TraceError(f"arith.select: value types differ ({a.type} vs {b.type})")
        self._init_op([c, a, b], [a.type], loc=loc, ip=ip)

    _eval = staticmethod(lambda v, t: v[1] if v[0] else v[2])


def select(condition, true_value, false_value, *, loc=None, ip=None):
    return SelectOp(condition, true_value, false_value, loc=loc, ip=ip).result
