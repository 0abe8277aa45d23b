# SPDX-License-Identifier: MIT
"""Type shorthands (`T.i32()`, `T.index()`, `T.bf16()` ...), as in mlir.extras.types."""

from ..ir import (
    BF16Type,
    F16Type,
    F32Type,
    F64Type,
    FunctionType,
    IndexType,
    IntegerType,
    MemRefType,
    NoneType,
    Attribute,
)

index = lambda: IndexType.get()  # noqa: E731


def i(width):
    return IntegerType.get_signless(width)


def si(width):
    return IntegerType.get_signed(width)


def ui(width):
    return IntegerType.get_unsigned(width)


bool = lambda: i(1)  # noqa: E731
i8 = lambda: i(8)  # noqa: E731
i16 = lambda: i(16)  # noqa: E731
i32 = lambda: i(32)  # noqa: E731
i64 = lambda: i(64)  # noqa: E731
si8 = lambda: si(8)  # noqa: E731
si16 = lambda: si(16)  # noqa: E731
si32 = lambda: si(32)  # noqa: E731
si64 = lambda: si(64)  # noqa: E731
ui8 = lambda: ui(8)  # noqa: E731
ui16 = lambda: ui(16)  # noqa: E731
ui32 = lambda: ui(32)  # noqa: E731
ui64 = lambda: ui(64)  # noqa: E731
f16 = lambda: F16Type.get()  # noqa: E731
f32 = lambda: F32Type.get()  # noqa: E731
f64 = lambda: F64Type.get()  # noqa: E731
bf16 = lambda: BF16Type.get()  # noqa: E731
none = lambda: NoneType.get()  # noqa: E731


def memref(*shape, element_type=None, memory_space=None, layout=None):
    if element_type is None:
        element_type = shape[-1]
        shape = shape[:-1]
    if memory_space is not None and not isinstance(memory_space, Attribute):
        memory_space = Attribute.parse(str(memory_space))
    return MemRefType.get(
        list(shape), element_type, layout=layout, memory_space=memory_space
    )


def function(*, inputs, results):
    return FunctionType.get(inputs, results)
