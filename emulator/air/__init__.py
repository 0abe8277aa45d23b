# SPDX-License-Identifier: MIT
"""CPU emulator of the mlir-air Python API.

Put the directory that contains this package first on PYTHONPATH and
`import air` resolves here: `air.ir`, `air.dialects.{air,func,memref,scf,affine,arith}`
and `air.backend.{xrt,xrt_runner}` trace a design the way real MLIR builds IR, and
the backend interprets it on the CPU.  See `air.emu` for the emulator's own API
(errors, counters, budget report).
"""

EMULATED = True
