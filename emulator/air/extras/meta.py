"""`region_op`: turn an op class into a body decorator, as mlir.extras.meta does."""

from ..ir import InsertionPoint


def op_region_builder(op, op_region, terminator=None):
    def builder_wrapper(body_builder):
        block = op_region.blocks[0]
        with InsertionPoint(block):
            results = body_builder(*list(block.arguments))
        with InsertionPoint(op_region.blocks[len(op_region.blocks) - 1]):
            if terminator is not None:
                res = []
                if isinstance(results, (tuple, list)):
                    res.extend(results)
                elif results is not None:
                    res.append(results)
                terminator(res)
        if len(op.results) == 1:
            return op.results[0]
        return op

    return builder_wrapper


def region_op(op_constructor, terminator=None):
    def op_decorator(*args, **kwargs):
        op = op_constructor(*args, **kwargs)
        return op_region_builder(op, op.regions[0], terminator)

    def maybe_no_args(*args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]):
            return op_decorator()(args[0])
        return op_decorator(*args, **kwargs)

    return maybe_no_args
