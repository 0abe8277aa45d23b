# SPDX-License-Identifier: MIT
"""The one error type for bad input (the command line prints its message and exits 2), and the line a
command prints when a Python dependency is missing. Imports nothing outside the standard library (the
example's int4_packed_record, whose error type this is, needs none either), so the entry points can use it
before numpy is known to be importable."""

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if (
    REPO not in sys.path
):  # the example's modules (the builders, their rules) live at the checkout's root
    sys.path.append(REPO)

# The example's error type: a rule of the builders and one of the tools fail alike (exit 2, one line).
from int4_packed_record import ConfigError  # noqa: E402


class RunFailure(Exception):
    """The run itself failed (device error, emulator run-time check, a hang in the simulator): exit 1."""


def emulator_failure(e) -> Exception:
    """An emulator error (air.emu.EmulatorError) as a run reports it, its first line: bad input when it is
    static (the design cannot be built for NPU2 as configured: exit 2), a failed run otherwise.
    """
    first = str(e).splitlines()[0]
    return (ConfigError if e.static else RunFailure)(f"emulator: {first}")


def not_found(what: str, name: str, path, listed: str, known: list[str]) -> ConfigError:
    """'<what> 'name' not found in <path> (<listed>: the first four known names, and how many)'."""
    hint = ", ".join(known[:4]) + (
        f", ... ({len(known)} in all)" if len(known) > 4 else ""
    )
    return ConfigError(
        f"{what} {name!r} not found in {path} ({listed}: {hint or 'none'})"
    )


def missing_module_line(e: ModuleNotFoundError) -> str:
    """One line: which package is missing for this interpreter and how to get it."""
    venv_python = os.path.join(REPO, ".venv", "bin", "python")
    here = os.path.realpath(sys.prefix) == os.path.realpath(os.path.join(REPO, ".venv"))
    if os.path.exists(venv_python) and not here:
        how = f"run it with {os.path.relpath(venv_python)} (made by `make deps`), or"
    else:
        how = "run `make deps` (it installs them into .venv outside a virtualenv), or"
    return (
        f"error: the Python package {e.name or '?'!r} is not installed for {sys.executable}: {how}"
        f" `pip install -r {os.path.relpath(os.path.join(REPO, 'requirements.txt'))}` in a virtualenv"
    )


def command_exit(run, argv) -> int:
    """The exit code of a host command line's run(argv), its failures reported the one way every command
    reports them: bad input one line on stderr (2), a failed run with FAIL! last (1), a missing Python
    package (2), Ctrl-C (130), --help (0)."""
    try:
        return run(argv)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except RunFailure as e:
        print(f"run failed: {e}\nFAIL!")
        return 1
    except (
        ModuleNotFoundError
    ) as e:  # e.g. safetensors, imported only when a checkpoint is read
        print(missing_module_line(e), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except SystemExit as e:  # --help
        return e.code if isinstance(e.code, int) else 0
