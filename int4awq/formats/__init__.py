# SPDX-License-Identifier: MIT
"""int4awq.formats: weight formats and the files that hold them: values, validation, readers."""
