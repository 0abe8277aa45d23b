# SPDX-License-Identifier: MIT
"""Element types, memory levels and poison values."""

import numpy as np
from ml_dtypes import bfloat16

# np_dtype lives with the element types (air.ir): imported here for the emulator's modules that take it
# from here; air.ir imports nothing of this module, so the two do not import each other.
from ..ir import MemRefType, np_dtype  # noqa: F401
from .errors import UnsupportedError

L3, L2, L1 = 0, 1, 2
LEVEL_NAMES = {L3: "L3", L2: "L2", L1: "L1"}


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
