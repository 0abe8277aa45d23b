# SPDX-License-Identifier: MIT
"""The emulator's exceptions.

One base class, `EmulatorError`, split in two families:

* `DesignError` -- the design itself cannot work on NPU2: a budget, herd shape,
  DMA dimension/stride limit, call signature, an API misuse while tracing, a
  missing kernel library.  Raised before anything runs (when the backend
  compiles the module) wherever the facts are static.  `static` is True: a host
  program maps these to its "bad configuration" exit code.
* `ExecutionError` -- found while interpreting: an access out of bounds, two PEs
  writing one element, a get from an empty channel, use after dealloc.
  `static` is False: report it as a failed run.

`EmulatorError` derives from `air.backend.abc.AirBackendError`, so code written
against mlir-air's own backend error keeps working.
"""

from ..backend.abc import AirBackendError


class EmulatorError(AirBackendError):
    """Base class of every error the emulator raises on purpose."""

    static = False

    def __init__(self, message):
        super().__init__(message)
        self.message = message

    def __str__(self):
        return self.message


class DesignError(EmulatorError):
    """A static design error (exit code 2 in a host program)."""

    static = True


class TraceError(DesignError, TypeError):
    """The builder used the API in a way real MLIR would reject (e.g. Python
    arithmetic on a symbolic index, a missing terminator)."""


class SymbolicValueError(TraceError):
    """Python arithmetic, comparison, truth value or int() on a symbolic value."""


class BudgetError(DesignError):
    """Per-PE L1 or per-segment L2 over capacity."""


class ResourceError(DesignError):
    """More DMA channels, BDs, locks or memtile space than NPU2 has, or a transfer aircc cannot
    lower (the resource model, resources.py)."""


class HerdShapeError(DesignError):
    """A herd that does not fit the compute array."""


class DmaLimitError(DesignError):
    """An access pattern the AIE2P DMA of that level cannot express."""


class CallSignatureError(DesignError):
    """A func.call whose operand types differ from its FuncOp's inputs."""


class LibraryError(DesignError):
    """A kernel library (link_with) or symbol that cannot be found."""


class UnsupportedError(DesignError):
    """A construct the emulator does not implement (says so plainly)."""


class ExecutionError(EmulatorError):
    """A run-time fault found while interpreting the design."""


class DmaBoundsError(ExecutionError):
    """A DMA / channel access outside its memref, or element counts that differ."""


class WriteConflictError(ExecutionError):
    """Two PEs of one herd execution wrote the same element of a shared buffer."""


class ChannelError(ExecutionError):
    """A get from an empty channel, or data left in a channel at the end."""


class UnwrittenReadError(ExecutionError):
    """A DMA or channel put whose source holds elements nothing has written."""


class KernelOverrunError(ExecutionError):
    """A kernel wrote outside the L1 buffer it was given (guard zone changed)."""


__all__ = [
    "EmulatorError",
    "DesignError",
    "TraceError",
    "SymbolicValueError",
    "BudgetError",
    "HerdShapeError",
    "DmaLimitError",
    "CallSignatureError",
    "LibraryError",
    "UnsupportedError",
    "ExecutionError",
    "DmaBoundsError",
    "WriteConflictError",
    "ChannelError",
    "KernelOverrunError",
    "UnwrittenReadError",
    "ResourceError",
]
