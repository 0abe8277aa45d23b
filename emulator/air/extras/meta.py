# SPDX-License-Identifier: MIT
"""`region_op`: an op class as a body decorator (the form mlir's python extras give launch, segment, herd).

`@herd(sizes=..., operands=...)` builds the op, then calls the decorated function once with the op's
block arguments, inside the block, to trace the body; what the function returns goes to the terminator.
"""

from ..ir import InsertionPoint


def region_op(op_class, terminator=None):
    def build(*args, **kwargs):
        op = op_class(*args, **kwargs)
        blocks = op.regions[0].blocks

        def trace_body(body):
            with InsertionPoint(blocks[0]):
                returned = body(*blocks[0].arguments)
            if terminator is not None:
                if returned is None:
                    returned = []
                values = (
                    list(returned)
                    if isinstance(returned, (tuple, list))
                    else [returned]
                )
                with InsertionPoint(blocks[len(blocks) - 1]):
                    terminator(values)
            return op.results[0] if len(op.results) == 1 else op

        return trace_body

    def decorator(*args, **kwargs):
        if (
            len(args) == 1 and not kwargs and callable(args[0])
        ):  # bare @op: no constructor arguments
            return build()(args[0])
        return build(*args, **kwargs)

    return decorator
