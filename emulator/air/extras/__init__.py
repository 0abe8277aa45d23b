# SPDX-License-Identifier: MIT
"""mlir.extras equivalents used by mlir-air's Python API."""
