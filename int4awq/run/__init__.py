# SPDX-License-Identifier: MIT
"""int4awq.run: running a design (emulator or NPU) and checking its result."""
