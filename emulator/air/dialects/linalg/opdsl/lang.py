# SPDX-License-Identifier: MIT
"""The names of mlir's linalg opdsl language, enough for a design to define a structured op.

A definition records its name and arguments and nothing more; calling the op raises UnsupportedError
(the emulator does not lower linalg: use an external kernel).
"""

from ....emu.errors import UnsupportedError

__all__ = [
    "linalg_structured_op",
    "TensorDef",
    "ScalarDef",
    "IndexAttrDef",
    "UnaryFnAttrDef",
    "BinaryFnAttrDef",
    "TypeFnAttrDef",
    "S",
    "D",
    "TV",
    "T",
    "U",
    "TypeFn",
    "UnaryFn",
    "BinaryFn",
    "ReduceFn",
    "domain",
    "implements",
    "defines",
    "index",
    "const",
]


class _Symbols:
    """S.x, D.x, TV.x: symbols by name (a shape symbol, a dimension, a type variable)."""

    def __init__(self, kind):
        self._kind = kind

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Symbol(self._kind, name)


class _Symbol:
    def __init__(self, kind, name):
        self.kind, self.name = kind, name

    def __repr__(self):
        return f"{self.kind}.{self.name}"


S, D, TV = _Symbols("S"), _Symbols("D"), _Symbols("TV")
T, U = TV.T, TV.U


class _Expr:
    """Any expression of an op body: indexing, arithmetic and function application build more of it."""

    def __getitem__(self, _):
        return _Expr()

    def __setitem__(self, key, value):
        pass

    def __add__(self, _):
        return _Expr()

    __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __iadd__ = __add__


class TensorDef(_Expr):
    def __init__(self, type_var, *shape, index_dims=None, output=False):
        self.type_var, self.shape, self.output = type_var, shape, output


class ScalarDef(_Expr):
    def __init__(self, type_var):
        self.type_var = type_var


class _AttrDef:
    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


IndexAttrDef = UnaryFnAttrDef = BinaryFnAttrDef = TypeFnAttrDef = _AttrDef


class _Fns:
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *args, **kwargs: _Expr()


TypeFn, UnaryFn, BinaryFn = _Fns(), _Fns(), _Fns()


class _Reduce:
    def __getitem__(self, _):
        return lambda *args, **kwargs: _Expr()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self


ReduceFn = _Reduce()


def domain(*dims):
    pass


def implements(*interfaces):
    pass


def defines(*definitions):
    pass


def index(dim):
    return _Expr()


def const(value):
    return _Expr()


class _StructuredOp:
    def __init__(self, fn, name):
        self.fn, self.op_name = fn, name

    def __call__(self, *args, **kwargs):
        raise UnsupportedError(
            f"linalg structured op {self.op_name!r}: the emulator does not lower linalg ops; build the "
            f"design with an external kernel (func.call to a link_with object), e.g. --codegen external"
        )


def linalg_structured_op(fn=None, *, op_name=None):
    """@linalg_structured_op or @linalg_structured_op(): records the definition."""
    if fn is None:
        return lambda f: _StructuredOp(f, op_name or f.__name__)
    return _StructuredOp(fn, op_name or fn.__name__)
