# SPDX-License-Identifier: MIT
"""math: the element-wise functions mlir-air's programming examples call in herd bodies (rsqrt, tanh,
exp), on float scalars or float vectors, with MLIR's Python signatures (`math.rsqrt(operand, *,
fastmath=None)`). The core's approximations are not published: each result is computed in float64 and
rounded once to the result type, as the host aie_api models aie::tanh and aie::invsqrt
(docs/emulator.md). Anything else of the dialect is refused by name at import."""

import numpy as np

from ..ir import Operation, _as_value
from ..emu.errors import TraceError, UnsupportedError
from ._elementwise import f64, is_float_like, rounded


class _UnaryOp(Operation):
    _PROPERTIES = ("fastmath",)
    _fn = None

    def __init__(self, operand, *, fastmath=None, loc=None, ip=None):
        v = _as_value(operand, f"{self.OPERATION_NAME} operand")
        if not is_float_like(v.type):
            raise TraceError(
                f"{self.OPERATION_NAME} needs a float or float-vector operand, got {v.type}"
            )
        if fastmath is not None:
            raise UnsupportedError(
                f"{self.OPERATION_NAME} with fastmath flags is not supported by the emulator"
            )
        self._init_op([v], [v.type], loc=loc, ip=ip)

    def _generic_extras(self):
        return {"fastmath": "#arith.fastmath<none>"}, {}

    def _eval(self, v, t):
        with np.errstate(
            all="ignore"
        ):  # rsqrt(0) = inf, rsqrt(<0) = NaN, as IEEE gives them
            return rounded(type(self)._fn(f64(v[0])), v[0])

    def _print_custom(self, p, indent):
        return [
            " " * indent + f"{p.results_prefix(self)}{self.OPERATION_NAME} "
            f"{p.name(self.operands[0])} : {self.results[0].type}"
        ]


class RsqrtOp(_UnaryOp):
    # math.rsqrt: mlir-air's weighted_rms_norm/weighted_rms_norm.py, decode_ffn_swiglu/matvec_int4_swiglu_rms.py,
    # llms/llama32_1b_int4/multi_launch_builder/rms_qkv_int4_rope_multi.py (f32 scalar rstd)
    OPERATION_NAME = "math.rsqrt"
    _fn = staticmethod(lambda x: 1.0 / np.sqrt(x))


class TanhOp(_UnaryOp):
    # math.tanh: mlir-air's decode_ffn_swiglu/matvec_int4_swiglu_rms.py (SiLU of a vector<16xbf16>)
    OPERATION_NAME = "math.tanh"
    _fn = staticmethod(np.tanh)


class ExpOp(_UnaryOp):
    # math.exp: mlir-air's primitives/vector_examples/vector_exp/vector_exp.py,
    # vector_reduce_max/vector_reduce_max.py
    OPERATION_NAME = "math.exp"
    _fn = staticmethod(np.exp)


def _fn(cls):
    def f(operand, *, fastmath=None, loc=None, ip=None):
        return cls(operand, fastmath=fastmath, loc=loc, ip=ip).result

    f.__name__ = cls.OPERATION_NAME.split(".")[1]
    return f


rsqrt = _fn(RsqrtOp)
tanh = _fn(TanhOp)
exp = _fn(ExpOp)


def __getattr__(name):
    if name.startswith("_"):
        raise AttributeError(name)
    raise UnsupportedError(
        f"air.dialects.math.{name} is not supported by the emulator (it has rsqrt, tanh, exp)"
    )
