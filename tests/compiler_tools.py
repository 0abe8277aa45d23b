# SPDX-License-Identifier: MIT
"""Whether the real compiler (aircc, aiecc, air-opt) runs here, for the tests that need it.

Without it those tests skip, naming what is missing; in CI (`CI=true`) a missing compiler fails them
instead: CI is where the compiler must judge every design (`.ci/run` installs its runtime). Hidden on
purpose (INT4AWQ_NO_COMPILER=1: `make test`'s second pass, a clone without the compiler) they skip in CI
too.
"""

import os

import pytest

from int4awq.design import compiler

MISSING = compiler.tools_missing()
IN_CI = os.environ.get("CI", "").lower() == "true"


def require(*tools: str) -> None:
    """Skip (fail in CI) the calling test when the named tools (all three by default) cannot run."""
    missing = compiler.tools_missing(*tools) if tools else MISSING
    if missing is None:
        return
    if IN_CI and not compiler.hidden():
        pytest.fail(f"CI=true and the compiler cannot run here: {missing}")
    pytest.skip(missing)
