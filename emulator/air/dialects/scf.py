# SPDX-License-Identifier: MIT
"""scf: for loops (`for_` / ForOp), IfOp and yield_, as the real bindings build them.

The loop body is traced once with a symbolic induction variable; the backend
iterates it.  Loop-carried values (iter_args) are supported for index/scalar
values.
"""

from ..ir import IndexType, InsertionPoint, IntegerType, Operation, Value, _as_value
from ..emu.errors import TraceError
from .arith import constant


class ForOp(Operation):
    OPERATION_NAME = "scf.for"
    _PROPERTIES = ("unsignedCmp",)

    def __init__(
        self, lower_bound, upper_bound, step, iter_args=None, *, loc=None, ip=None
    ):
        if iter_args is None:
            iter_args = []
        if isinstance(iter_args, Operation):
            iter_args = iter_args.results
        bounds = [
            _as_value(b, f"scf.for {n}")
            for b, n in (
                (lower_bound, "lower bound"),
                (upper_bound, "upper bound"),
                (step, "step"),
            )
        ]
        t0 = bounds[0].type
        for b in bounds:
            if b.type != t0:
                raise TraceError(
                    f"scf.for: bounds and step must share one type ({b.type} vs {t0})"
                )
        inits = [_as_value(v, "scf.for iter_arg") for v in iter_args]
        self._init_op(
            bounds + inits, [v.type for v in inits], num_regions=1, loc=loc, ip=ip
        )
        self.regions[0].blocks.append(t0, *[v.type for v in inits])

    @property
    def body(self):
        return self.regions[0].blocks[0]

    @property
    def induction_variable(self):
        return self.body.arguments[0]

    @property
    def inner_iter_args(self):
        return self.body.arguments[1:]

    @property
    def initArgs(self):
        return self.operands[3:]

    def _print_custom(self, p, indent):
        pad = " " * indent
        lb, ub, st = (p.name(v) for v in self.operands[:3])
        head = f"{pad}{p.results_prefix(self)}scf.for {p.name(self.induction_variable)} = {lb} to {ub} step {st}"
        if self.operands[3:]:
            head += (
                " iter_args("
                + ", ".join(
                    f"{p.name(a)} = {p.name(v)}"
                    for a, v in zip(self.inner_iter_args, self.operands[3:])
                )
                + ")"
            )
            head += " -> (" + ", ".join(str(r.type) for r in self.results) + ")"
        if self.operands[0].type != IndexType.get():
            head += f" : {self.operands[0].type}"
        # attributes follow the body, as scf.for's printer writes them (`} {unroll = 2 : i32}`)
        lines = [head + " {"]
        lines += p.region_lines(self.regions[0], indent + 2)
        lines.append(pad + "}" + p.attr_dict(self))
        return lines


def for_(start, stop=None, step=None, iter_args=None, *, loc=None, ip=None):
    if step is None:
        step = 1
    if stop is None:
        stop = start
        start = 0
    params = []
    for p in (start, stop, step):
        if isinstance(p, bool):
            raise TraceError(f"scf.for bound {p!r} must be an int or an index Value")
        if isinstance(p, int):
            p = constant(IndexType.get(), p)
        elif isinstance(p, float):
            raise ValueError(f"{p=} must be int.")
        params.append(p)
    for_op = ForOp(params[0], params[1], params[2], iter_args, loc=loc, ip=ip)
    iv = for_op.induction_variable
    inner = tuple(for_op.inner_iter_args)
    with InsertionPoint(for_op.body):
        if len(inner) > 1:
            yield iv, inner, for_op.results
        elif len(inner) == 1:
            yield iv, inner[0], for_op.results[0]
        else:
            yield iv


range_ = for_


class IfOp(Operation):
    """scf.if as MLIR's Python bindings build it: IfOp(cond, results_=None, *, has_else=False); the
    caller fills then_block (and else_block) and ends each with yield_ of the results' values. The
    condition is an i1; an op with results needs the else region (SCFOps.td: scf.if's verifier).
    """

    OPERATION_NAME = "scf.if"

    def __init__(self, cond, results_=None, *, has_else=False, loc=None, ip=None):
        c = _as_value(cond, "scf.if condition")
        if c.type != IntegerType.get_signless(1):
            raise TraceError(f"scf.if: the condition is {c.type}, it must be i1")
        results_ = list(results_ or [])
        if results_ and not has_else:
            raise TraceError(
                "scf.if: an scf.if with results must have an else region (has_else=True): "
                "each branch yields the results' values"
            )
        self._init_op([c], results_, num_regions=2, loc=loc, ip=ip)
        self.regions[0].blocks.append()
        if has_else:
            self.regions[1].blocks.append()

    @property
    def condition(self):
        return self.operands[0]

    @property
    def then_block(self):
        return self.regions[0].blocks[0]

    @property
    def else_block(self):
        if not self.regions[1].blocks:
            raise TraceError(
                "scf.if: this op has no else region (build it with has_else=True)"
            )
        return self.regions[1].blocks[0]

    def _print_custom(self, p, indent):
        pad = " " * indent
        head = f"{pad}{p.results_prefix(self)}scf.if {p.name(self.condition)}"
        if self.results:
            head += " -> (" + ", ".join(str(r.type) for r in self.results) + ")"
        lines = [head + " {"]
        lines += p.region_lines(self.regions[0], indent + 2)
        if self.regions[1].blocks:
            lines.append(pad + "} else {")
            lines += p.region_lines(self.regions[1], indent + 2)
        lines.append(pad + "}" + p.attr_dict(self))
        return lines


class YieldOp(Operation):
    OPERATION_NAME = "scf.yield"
    _is_terminator = True

    def __init__(self, results_=(), *, loc=None, ip=None):
        self._init_op(
            [_as_value(v, "scf.yield operand") for v in (results_ or [])],
            [],
            loc=loc,
            ip=ip,
        )

    def _print_custom(self, p, indent):
        text = "scf.yield"
        if self.operands:
            text += (
                " "
                + p.names(self.operands)
                + " : "
                + ", ".join(str(v.type) for v in self.operands)
            )
        return [" " * indent + text]


def yield_(results_=(), *, loc=None, ip=None):
    return YieldOp(results_, loc=loc, ip=ip)


_ = Value
