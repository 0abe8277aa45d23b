# SPDX-License-Identifier: MIT
"""vector: the ops mlir-air's programming examples write in herd bodies, with MLIR's Python signatures.

transfer_read / transfer_write (minor-identity permutation maps, in_bounds true or false, no mask),
broadcast of a scalar, fma and reduction of float vectors. Values are numpy arrays of the element type;
every op rounds its result to the element type (docs/emulator.md, "Vector and math ops in herd bodies").
Anything else of the dialect is refused by name at import."""

import enum

import numpy as np

from ..ir import (
    AffineDimExpr,
    AffineMap,
    AffineMapAttr,
    ArrayAttr,
    BoolAttr,
    DenseI32ArrayAttr,
    IndexType,
    MemRefType,
    Operation,
    Type,
    VectorType,
    _as_value,
    _FloatType,
)
from ..emu.errors import TraceError, UnsupportedError
from ._elementwise import f64, fused_multiply_add, rounded

_FASTMATH = "#arith.fastmath<none>"


def _vector_value(x, what):
    v = _as_value(x, what)
    if not isinstance(v.type, VectorType):
        raise TraceError(f"{what} must be a vector, got {v.type}")
    return v


def _float_vector(v, what):
    if not isinstance(v.type.element_type, _FloatType):
        raise UnsupportedError(
            f"{what} of {v.type}: integer vectors are not supported by the emulator "
            f"(float vectors only)"
        )


def _bools(in_bounds, rank, what):
    if in_bounds is None:
        return [False] * rank
    if isinstance(in_bounds, ArrayAttr):
        in_bounds = [a.value for a in in_bounds]
    vals = [bool(b.value if isinstance(b, BoolAttr) else b) for b in in_bounds]
    if len(vals) != rank:
        raise TraceError(
            f"{what}: in_bounds has {len(vals)} entries for a rank-{rank} vector"
        )
    return vals


class _Transfer(Operation):
    """What transfer_read and transfer_write share: the memref, the indices, the permutation map (a
    minor identity: the vector's dimensions are the memref's innermost ones, in order) and in_bounds.
    """

    _PROPERTIES = ("in_bounds", "permutation_map")

    def _setup(self, vtype, source, indices, permutation_map, in_bounds, mask):
        what = self.OPERATION_NAME
        if mask is not None:
            raise UnsupportedError(
                f"{what} with a mask is not supported by the emulator"
            )
        if not isinstance(vtype, VectorType):
            raise TraceError(f"{what}: {vtype} is not a vector type")
        m = _as_value(source, f"{what} memref")
        mt = m.type
        if not isinstance(mt, MemRefType):
            raise UnsupportedError(
                f"{what} on {mt}: only memrefs are supported by the emulator"
            )
        if vtype.element_type != mt.element_type:
            raise TraceError(
                f"{what}: vector {vtype} and memref {mt} have different element types"
            )
        idx = [_as_value(i, f"{what} index") for i in indices]
        if len(idx) != mt.rank:
            raise TraceError(f"{what}: {len(idx)} indices for a rank-{mt.rank} memref")
        for v in idx:
            if not isinstance(v.type, IndexType):
                raise TraceError(f"{what}: index of type {v.type} (must be index)")
        k = len(vtype.shape)
        if k > mt.rank:
            raise TraceError(f"{what}: {vtype} has more dimensions than {mt}")
        minor = AffineMap(
            mt.rank, 0, [AffineDimExpr.get(d) for d in range(mt.rank - k, mt.rank)]
        )
        if permutation_map is None:
            permutation_map = minor
        if isinstance(permutation_map, AffineMapAttr):
            permutation_map = permutation_map.value
        if not isinstance(permutation_map, AffineMap):
            raise TraceError(
                f"{what}: permutation_map must be an AffineMap(Attr), got {permutation_map!r}"
            )
        if permutation_map != minor:
            raise UnsupportedError(
                f"{what}: permutation map {permutation_map} is not supported by the emulator "
                f"(only the minor identity {minor})"
            )
        self._in_bounds = _bools(in_bounds, k, what)
        self._map = permutation_map
        self._vtype = vtype
        return m, idx

    def _set_attrs(self):
        self.attributes["in_bounds"] = ArrayAttr.get(
            [BoolAttr.get(b) for b in self._in_bounds]
        )
        self.attributes["permutation_map"] = AffineMapAttr.get(self._map)

    def _attr_text(self):
        # MLIR's custom form elides a minor-identity map and an all-false in_bounds
        if any(self._in_bounds):
            return f" {{in_bounds = {self.attributes['in_bounds']}}}"
        return ""


class TransferReadOp(_Transfer):
    # vector.transfer_read: mlir-air's weighted_rms_norm/weighted_rms_norm.py,
    # decode_ffn_swiglu/matvec_int4_swiglu_rms.py, llms/llama32_1b_int4/multi_launch_builder/o_ffn_int4_multi.py
    OPERATION_NAME = "vector.transfer_read"

    def __init__(
        self,
        vector,
        source,
        indices,
        permutation_map,
        padding,
        in_bounds=None,
        *,
        mask=None,
        loc=None,
        ip=None,
    ):
        m, idx = self._setup(vector, source, indices, permutation_map, in_bounds, mask)
        pad = _as_value(padding, "vector.transfer_read padding")
        if pad.type != vector.element_type:
            raise TraceError(
                f"vector.transfer_read: padding of type {pad.type} for {vector}"
            )
        self._init_op([m] + idx + [pad], [vector], loc=loc, ip=ip)
        self._set_attrs()

    def _generic_extras(self):
        n = len(self.operands) - 2
        return {"operandSegmentSizes": DenseI32ArrayAttr.get([1, n, 1, 0])}, {}

    def _print_custom(self, p, indent):
        m, idx, pad = self.operands[0], self.operands[1:-1], self.operands[-1]
        return [
            " " * indent + f"{p.results_prefix(self)}vector.transfer_read "
            f"{p.name(m)}[{p.names(idx)}], {p.name(pad)}{self._attr_text()} : "
            f"{m.type}, {self.results[0].type}"
        ]


def transfer_read(
    vector,
    source,
    indices,
    permutation_map,
    padding,
    in_bounds=None,
    *,
    mask=None,
    loc=None,
    ip=None,
):
    return TransferReadOp(
        vector,
        source,
        indices,
        permutation_map,
        padding,
        in_bounds,
        mask=mask,
        loc=loc,
        ip=ip,
    ).result


class TransferWriteOp(_Transfer):
    # vector.transfer_write: mlir-air's weighted_rms_norm/weighted_rms_norm.py,
    # decode_ffn_swiglu/matvec_int4_swiglu_rms.py, llms/llama32_1b_int4/multi_launch_builder/o_ffn_int4_multi.py
    OPERATION_NAME = "vector.transfer_write"

    def __init__(
        self,
        result,
        valueToStore,
        dest,
        indices,
        permutation_map,
        in_bounds=None,
        *,
        mask=None,
        loc=None,
        ip=None,
    ):
        if result is not None:
            raise UnsupportedError(
                "vector.transfer_write with a result (a tensor destination) is not supported "
                "by the emulator: pass None and a memref"
            )
        v = _vector_value(valueToStore, "vector.transfer_write value")
        m, idx = self._setup(v.type, dest, indices, permutation_map, in_bounds, mask)
        self._init_op([v, m] + idx, [], loc=loc, ip=ip)
        self._set_attrs()

    def _generic_extras(self):
        n = len(self.operands) - 2
        return {"operandSegmentSizes": DenseI32ArrayAttr.get([1, 1, n, 0])}, {}

    def _print_custom(self, p, indent):
        v, m, idx = self.operands[0], self.operands[1], self.operands[2:]
        return [
            " " * indent + f"vector.transfer_write {p.name(v)}, "
            f"{p.name(m)}[{p.names(idx)}]{self._attr_text()} : {v.type}, {m.type}"
        ]


def transfer_write(
    result,
    valueToStore,
    dest,
    indices,
    permutation_map,
    in_bounds=None,
    *,
    mask=None,
    loc=None,
    ip=None,
):
    return TransferWriteOp(
        result,
        valueToStore,
        dest,
        indices,
        permutation_map,
        in_bounds,
        mask=mask,
        loc=loc,
        ip=ip,
    )


class BroadcastOp(Operation):
    # vector.broadcast of a scalar: mlir-air's weighted_rms_norm/weighted_rms_norm.py (the zero
    # accumulator, rstd), decode_ffn_swiglu/matvec_int4_swiglu_rms.py (SiLU's 0.5 and 1.0)
    OPERATION_NAME = "vector.broadcast"

    def __init__(self, vector, source, *, loc=None, ip=None):
        if not isinstance(vector, VectorType):
            raise TraceError(f"vector.broadcast: {vector} is not a vector type")
        s = _as_value(source, "vector.broadcast source")
        if isinstance(s.type, VectorType):
            raise UnsupportedError(
                f"vector.broadcast of {s.type}: only a scalar source is supported by the emulator"
            )
        if s.type != vector.element_type:
            raise TraceError(f"vector.broadcast: cannot broadcast {s.type} to {vector}")
        self._init_op([s], [vector], loc=loc, ip=ip)
        self._shape = tuple(vector.shape)

    def _eval(self, v, t):
        return np.full(self._shape, v[0], dtype=np.asarray(v[0]).dtype)

    def _print_custom(self, p, indent):
        s = self.operands[0]
        return [
            " " * indent + f"{p.results_prefix(self)}vector.broadcast {p.name(s)} : "
            f"{s.type} to {self.results[0].type}"
        ]


def broadcast(vector, source, *, loc=None, ip=None):
    return BroadcastOp(vector, source, loc=loc, ip=ip).result


class FMAOp(Operation):
    # vector.fma: mlir-air's primitives/vector_examples/vector_fma/vector_fma.py (alpha * b + c)
    OPERATION_NAME = "vector.fma"

    def __init__(self, lhs, rhs, acc, *, loc=None, ip=None):
        vals = [
            _vector_value(x, f"vector.fma {w}")
            for x, w in ((lhs, "lhs"), (rhs, "rhs"), (acc, "acc"))
        ]
        if len({v.type for v in vals}) != 1:
            raise TraceError(
                "vector.fma: operand types differ ("
                + ", ".join(str(v.type) for v in vals)
                + ")"
            )
        _float_vector(vals[0], "vector.fma")
        self._init_op(vals, [vals[0].type], loc=loc, ip=ip)

    _eval = staticmethod(lambda v, t: fused_multiply_add(v[0], v[1], v[2]))

    def _print_custom(self, p, indent):
        return [
            " " * indent + f"{p.results_prefix(self)}vector.fma "
            f"{p.names(self.operands)} : {self.results[0].type}"
        ]


def fma(lhs, rhs, acc, *, loc=None, ip=None):
    return FMAOp(lhs, rhs, acc, loc=loc, ip=ip).result


class CombiningKind(enum.IntFlag):
    """MLIR's vector::CombiningKind (a bit enum, values as VectorAttributes.td)."""

    ADD = 1
    MUL = 2
    MINUI = 4
    MINSI = 8
    MINNUMF = 16
    MAXUI = 32
    MAXSI = 64
    MAXNUMF = 128
    AND = 256
    OR = 512
    XOR = 1024
    MAXIMUMF = 2048
    MINIMUMF = 4096


def _fmax(a, b):  # maximumf: NaN propagates
    return np.nan if np.isnan(a) or np.isnan(b) else max(a, b)


def _fmin(a, b):
    return np.nan if np.isnan(a) or np.isnan(b) else min(a, b)


def _fmaxnum(a, b):  # maxnumf: a NaN operand yields the other
    return b if np.isnan(a) else a if np.isnan(b) else max(a, b)


def _fminnum(a, b):
    return b if np.isnan(a) else a if np.isnan(b) else min(a, b)


# The float kinds and their step; the integer kinds are refused (no upstream example of ours uses them).
_FLOAT_KINDS = {
    "add": lambda a, b: a + b,
    "mul": lambda a, b: a * b,
    "maximumf": _fmax,
    "minimumf": _fmin,
    "maxnumf": _fmaxnum,
    "minnumf": _fminnum,
}


class ReductionOp(Operation):
    # vector.reduction <add>: mlir-air's weighted_rms_norm/weighted_rms_norm.py and
    # decode_ffn_swiglu/matvec_int4_swiglu_rms.py (sum of squares, f32); <maximumf>:
    # primitives/vector_examples/vector_reduce_max/vector_reduce_max.py
    OPERATION_NAME = "vector.reduction"
    _PROPERTIES = ("kind", "fastmath")

    def __init__(
        self, dest, kind, vector, *, acc=None, fastmath=None, loc=None, ip=None
    ):
        if isinstance(kind, CombiningKind):
            name = kind.name.lower()
        elif isinstance(kind, str):
            name = kind.lower()
        else:
            raise TraceError(f"vector.reduction: kind {kind!r} is not a CombiningKind")
        if name.upper() not in CombiningKind.__members__:
            raise TraceError(f"vector.reduction: no combining kind {kind!r}")
        if name not in _FLOAT_KINDS:
            raise UnsupportedError(
                f"vector.reduction <{name}> is not supported by the emulator "
                f"(supported: {', '.join(_FLOAT_KINDS)})"
            )
        if fastmath is not None:
            raise UnsupportedError(
                "vector.reduction with fastmath flags is not supported by the emulator"
            )
        v = _vector_value(vector, "vector.reduction vector")
        _float_vector(v, f"vector.reduction <{name}>")
        if not isinstance(dest, Type) or dest != v.type.element_type:
            raise TraceError(
                f"vector.reduction: result type {dest} must be the element type of {v.type}"
            )
        ops = [v]
        if acc is not None:
            a = _as_value(acc, "vector.reduction acc")
            if a.type != dest:
                raise TraceError(f"vector.reduction: acc of type {a.type}, not {dest}")
            ops.append(a)
        self._init_op(ops, [dest], loc=loc, ip=ip)
        self._kind = name
        self._step = _FLOAT_KINDS[name]

    def _generic_extras(self):
        return {"kind": f"#vector.kind<{self._kind}>", "fastmath": _FASTMATH}, {}

    def _eval(self, v, t):
        # Sequential, lane 0 first (the acc, when given, before lane 0), each partial result rounded to
        # the element type: LLVM's ordered llvm.vector.reduce.* that MLIR lowers to without reassoc.
        vec = v[0].reshape(-1)
        step = self._step
        like = vec[0]
        if len(v) > 1:
            r, lanes = v[1], vec
        else:
            r, lanes = like, vec[1:]
        with np.errstate(all="ignore"):
            for x in lanes:
                r = rounded(step(f64(r), f64(x)), like)
        return r

    def _print_custom(self, p, indent):
        v = self.operands[0]
        return [
            " " * indent + f"{p.results_prefix(self)}vector.reduction <{self._kind}>, "
            f"{p.names(self.operands)} : {v.type} into {self.results[0].type}"
        ]


def reduction(dest, kind, vector, *, acc=None, fastmath=None, loc=None, ip=None):
    return ReductionOp(
        dest, kind, vector, acc=acc, fastmath=fastmath, loc=loc, ip=ip
    ).result


_SUPPORTED = (
    "transfer_read, transfer_write, broadcast / BroadcastOp, fma / FMAOp, reduction / ReductionOp, "
    "CombiningKind"
)


def __getattr__(name):
    if name.startswith("_"):
        raise AttributeError(name)
    raise UnsupportedError(
        f"air.dialects.vector.{name} is not supported by the emulator (it has {_SUPPORTED})"
    )
