# SPDX-License-Identifier: MIT
"""linalg opdsl (see lang)."""
