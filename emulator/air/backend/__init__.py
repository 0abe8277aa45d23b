# SPDX-License-Identifier: MIT
"""Backends: `xrt.XRTBackend` and `xrt_runner.XRTRunner`, interpreted on the CPU."""
