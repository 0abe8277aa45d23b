# SPDX-License-Identifier: MIT
"""The emulator's own API (everything mlir-air does not have).

* errors: `EmulatorError` and its two families `DesignError` (static; a host
  program maps it to exit code 2) and `ExecutionError` (found while running);
* `Stats` (counters of a run) and `BudgetReport` (static L1/L2 budget), both
  printable as tables with `.table()`; a backend exposes them after compile / run
  as `backend.emu_budget` and `backend.emu_stats`.
"""

from .errors import *  # noqa: F401,F403
from .errors import __all__ as _errors_all


def __getattr__(name):
    # Lazy: the engine imports numpy and the IR; keep `import air.emu` cheap.
    if name in ("Stats",):
        from .stats import Stats

        return Stats
    if name in ("BudgetReport",):
        from .budget import BudgetReport

        return BudgetReport
    raise AttributeError(name)


__all__ = list(_errors_all) + ["Stats", "BudgetReport"]
