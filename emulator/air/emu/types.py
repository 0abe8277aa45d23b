# SPDX-License-Identifier: MIT
"""Element types, memory levels and poison values."""

import numpy as np
from ml_dtypes import bfloat16

from ..ir import (
    BF16Type,
    F16Type,
    F32Type,
    F64Type,
    IndexType,
    IntegerType,
    MemRefType,
)
from .errors import UnsupportedError

L3, L2, L1 = 0, 1, 2
LEVEL_NAMES = {L3: "L3", L2: "L2", L1: "L1"}

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


def level_of(memref_type):
    """0 = L3 (DDR), 1 = L2 (memtile), 2 = L1 (core tile)."""
    ms = memref_type.memory_space_value
    if ms not in (0, 1, 2):
        raise UnsupportedError(f"memory space {ms} of {memref_type} is not L1/L2/L3")
    return ms


def is_memref(t):
    return isinstance(t, MemRefType)


POISON_BYTE = 0xA5


def poison_fill(arr):
    """Fill a fresh buffer: NaN for floats, 0xA5 bytes for integers."""
    if arr.dtype.kind == "f" or arr.dtype == np.dtype(bfloat16):
        arr[...] = np.nan
    else:
        arr.view(np.uint8)[...] = POISON_BYTE
