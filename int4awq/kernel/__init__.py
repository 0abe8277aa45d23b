# SPDX-License-Identifier: MIT
"""int4awq.kernel: the kernel's packed records, its numpy model and its host build's driver."""
