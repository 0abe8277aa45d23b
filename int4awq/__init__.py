# SPDX-License-Identifier: MIT
"""Host side of the int4-AWQ GEMM example: formats, reference, checks, checkpoints."""
