# SPDX-License-Identifier: MIT
"""Dialects of the emulated air package."""
