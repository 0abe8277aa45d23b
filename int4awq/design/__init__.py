# SPDX-License-Identifier: MIT
"""int4awq.design.design: the designs' configurations, the performance models and the configuration search."""
