# SPDX-License-Identifier: MIT
"""Tests import the repository's own packages (int4awq, host) however pytest is started."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
