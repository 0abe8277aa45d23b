# SPDX-License-Identifier: MIT
"""func: FuncOp (declarations of external kernels and the design's entry
function), CallOp and ReturnOp, with the real bindings' constructor forms."""

import inspect

from ..ir import (
    FlatSymbolRefAttr,
    FunctionType,
    InsertionPoint,
    Operation,
    StringAttr,
    Type,
    TypeAttr,
    Value,
    _as_value,
)
from ..emu.errors import TraceError


class FuncOp(Operation):
    OPERATION_NAME = "func.func"
    _PROPERTIES = (
        "sym_name",
        "function_type",
        "sym_visibility",
        "arg_attrs",
        "res_attrs",
        "no_inline",
    )

    def __init__(
        self, name, type, *, visibility=None, body_builder=None, loc=None, ip=None
    ):
        if isinstance(type, tuple):
            type = FunctionType.get(inputs=type[0], results=type[1])
        if not isinstance(type, FunctionType):
            raise TraceError(
                f"FuncOp {name!r}: type must be a FunctionType or (inputs, results)"
            )
        self._init_op([], [], num_regions=1, loc=loc, ip=ip)
        self.attributes["sym_name"] = StringAttr.get(str(name))
        self.attributes["function_type"] = TypeAttr.get(type)
        if visibility is not None:
            self.attributes["sym_visibility"] = StringAttr.get(str(visibility))
        if body_builder:
            entry = self.add_entry_block()
            with InsertionPoint(entry):
                body_builder(self)

    @property
    def is_external(self):
        return len(self.regions[0].blocks) == 0

    @property
    def body(self):
        return self.regions[0]

    @property
    def type(self):
        return self.attributes["function_type"].value

    @property
    def visibility(self):
        return self.attributes.get("sym_visibility")

    @property
    def name(self):
        return self.attributes["sym_name"]

    @property
    def sym_name(self):
        return self.attributes["sym_name"].value

    @property
    def entry_block(self):
        if self.is_external:
            raise IndexError("External function does not have a body")
        return self.regions[0].blocks[0]

    def add_entry_block(self, arg_locs=None):
        if not self.is_external:
            raise IndexError("The function already has an entry block!")
        return self.body.blocks.append(*self.type.inputs)

    @property
    def arguments(self):
        return self.entry_block.arguments

    @classmethod
    def from_py_func(cls, *inputs, results=None, name=None):
        def decorator(f):
            sig = inspect.signature(f)
            has_func_op = any(
                p.kind == p.VAR_KEYWORD
                or (
                    p.name == "func_op"
                    and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
                )
                for p in sig.parameters.values()
            )
            implicit_return = results is None
            symbol = name or f.__name__
            ftype = FunctionType.get(
                inputs=inputs, results=[] if implicit_return else results
            )
            func_op = cls(name=symbol, type=ftype)
            with InsertionPoint(func_op.add_entry_block()):
                kwargs = {"func_op": func_op} if has_func_op else {}
                rv = f(*func_op.entry_block.arguments, **kwargs)
                if not implicit_return:
                    if rv is not None:
                        raise TraceError(
                            "from_py_func with explicit results= must return None"
                        )
                    return_types = list(results)
                else:
                    if rv is None:
                        rv = []
                    elif isinstance(rv, (Value, Operation)):
                        rv = [_as_value(rv)]
                    else:
                        rv = [_as_value(v) for v in rv]
                    ReturnOp(rv)
                    return_types = [v.type for v in rv]
                    func_op.attributes["function_type"] = TypeAttr.get(
                        FunctionType.get(inputs=inputs, results=return_types)
                    )

            def emit_call_op(*call_args):
                call = CallOp(
                    return_types, FlatSymbolRefAttr.get(symbol), list(call_args)
                )
                if not return_types:
                    return None
                if len(return_types) == 1:
                    return call.result
                return call.results

            emit_call_op.__name__ = f.__name__
            emit_call_op.func_op = func_op
            return emit_call_op

        return decorator

    def _print_custom(self, p, indent):
        pad = " " * indent
        vis = self.visibility
        vis_s = f"{vis.value} " if vis is not None and vis.value != "public" else ""
        t = self.type
        outs = ""
        if t.results:
            outs = " -> " + (
                str(t.results[0])
                if len(t.results) == 1
                else "(" + ", ".join(map(str, t.results)) + ")"
            )
        attrs = p.attr_dict(self, skip=("sym_name", "function_type", "sym_visibility"))
        if attrs:
            attrs = " attributes" + attrs
        if self.is_external:
            return [
                f"{pad}func.func {vis_s}@{self.sym_name}({', '.join(map(str, t.inputs))}){outs}{attrs}"
            ]
        args = ", ".join(f"{p.name(a)}: {a.type}" for a in self.entry_block.arguments)
        lines = [f"{pad}func.func {vis_s}@{self.sym_name}({args}){outs}{attrs} {{"]
        lines += p.region_lines(self.regions[0], indent + 2)
        lines.append(pad + "}")
        return lines


func = FuncOp.from_py_func


class CallOp(Operation):
    OPERATION_NAME = "func.call"
    _PROPERTIES = ("callee", "arg_attrs", "res_attrs", "no_inline")

    def __init__(
        self,
        calleeOrResults,
        argumentsOrCallee=None,
        arguments=None,
        *,
        loc=None,
        ip=None,
    ):
        if isinstance(calleeOrResults, FuncOp):
            if not isinstance(argumentsOrCallee, list):
                raise TraceError("CallOp(func, args): the arguments must be a list")
            if arguments is not None:
                raise TraceError("CallOp(func, args): unexpected third argument")
            results = list(calleeOrResults.type.results)
            callee = calleeOrResults.sym_name
            args = argumentsOrCallee
            self._callee_op = calleeOrResults
        else:
            if isinstance(argumentsOrCallee, list):
                raise TraceError(
                    "CallOp(result_types, callee, args): callee must be a str or FlatSymbolRefAttr"
                )
            results = list(calleeOrResults or [])
            callee = (
                argumentsOrCallee.value
                if isinstance(argumentsOrCallee, FlatSymbolRefAttr)
                else str(argumentsOrCallee)
            )
            args = arguments or []
            self._callee_op = None
        for t in results:
            if not isinstance(t, Type):
                raise TraceError(
                    f"func.call @{callee}: result type {t!r} is not a type"
                )
        vals = [
            _as_value(a, f"func.call @{callee} argument #{i}")
            for i, a in enumerate(args)
        ]
        self._init_op(vals, results, loc=loc, ip=ip)
        self.attributes["callee"] = FlatSymbolRefAttr.get(callee)

    @property
    def callee(self):
        return self.attributes["callee"]

    def _print_custom(self, p, indent):
        ins = ", ".join(str(v.type) for v in self.operands)
        outs = ", ".join(str(r.type) for r in self.results)
        return [
            " " * indent + f"{p.results_prefix(self)}func.call @{self.callee.value}"
            f"({p.names(self.operands)}) : ({ins}) -> ({outs})"
        ]


def call(result, callee, operands_, *, loc=None, ip=None):
    op = CallOp(result, callee, operands_, loc=loc, ip=ip)
    return (
        op.results[0]
        if len(op.results) == 1
        else (op if not op.results else op.results)
    )


class ReturnOp(Operation):
    OPERATION_NAME = "func.return"
    _is_terminator = True

    def __init__(self, operands_=(), *, loc=None, ip=None):
        self._init_op([_as_value(v) for v in operands_], [], loc=loc, ip=ip)

    def _print_custom(self, p, indent):
        text = "return"
        if self.operands:
            text += (
                " "
                + p.names(self.operands)
                + " : "
                + ", ".join(str(v.type) for v in self.operands)
            )
        return [" " * indent + text]


def return_(operands_=(), *, loc=None, ip=None):
    return ReturnOp(operands_, loc=loc, ip=ip)
