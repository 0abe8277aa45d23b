# SPDX-License-Identifier: MIT
"""The committed fixtures of the format tests (tests/fixtures/, written by `make fixtures`): where they are,
the generator as a module, and the libraries' committed answers."""

import importlib.util
from pathlib import Path

import numpy as np
from ml_dtypes import bfloat16

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def generator():
    """tests/fixtures/make_fixtures.py as a module (its writers import the libraries, its checks do not)."""
    spec = importlib.util.spec_from_file_location(
        "make_fixtures", FIXTURES / "make_fixtures.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reference(path: str) -> np.ndarray:
    """A library's own answer in tests/fixtures/refs/ (a bf16 array is stored as its bits, *.bf16.npy)."""
    a = np.load(FIXTURES / "refs" / path)
    return a.view(bfloat16) if path.endswith(".bf16.npy") else a
