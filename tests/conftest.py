# SPDX-License-Identifier: MIT
"""Tests import the repository's own packages (int4awq, host) however pytest is started.

The formats' own libraries (requirements-formats.txt: torch, compressed-tensors, transformers; amd-quark)
are used only by the tests marked `formats`, which run with `--formats` (`make test-formats`) and are
deselected otherwise; without `--formats` importing those libraries fails, so that no other test comes
to depend on them (the others read the committed files in tests/fixtures/)."""

import importlib.abc
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FORMAT_LIBRARIES = ("torch", "transformers", "compressed_tensors", "quark")


class _NoFormatLibraries(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in FORMAT_LIBRARIES:
            raise ModuleNotFoundError(
                f"No module named {name!r} here: the formats' libraries are for the tests marked "
                "`formats` (pytest --formats, make test-formats)",
                name=name,
            )
        return None


_BLOCKER = _NoFormatLibraries()


def pytest_addoption(parser):
    parser.addoption(
        "--formats",
        action="store_true",
        help="run the tests marked `formats`, which use the formats' own libraries "
        "(requirements-formats.txt; make test-formats)",
    )


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "formats: uses the formats' own libraries (requirements-formats.txt); runs with --formats only",
    )
    if not config.getoption("--formats"):
        sys.meta_path.insert(0, _BLOCKER)


def pytest_unconfigure(config):
    if _BLOCKER in sys.meta_path:
        sys.meta_path.remove(_BLOCKER)


def pytest_collection_modifyitems(config, items):
    if config.getoption("--formats"):
        return
    skipped = [item for item in items if item.get_closest_marker("formats")]
    if skipped:
        config.hook.pytest_deselected(items=skipped)
        items[:] = [item for item in items if not item.get_closest_marker("formats")]
