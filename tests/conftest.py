# SPDX-License-Identifier: MIT
"""Tests import the repository's own packages (int4awq, host) however pytest is started.

The formats' own libraries (requirements-formats.txt: torch, compressed-tensors, transformers; amd-quark)
are used only by the tests marked `formats`, which run with `--formats` (`make test-formats`) and are
deselected otherwise; without `--formats` a session that loaded any of them fails, so that no other test
comes to depend on them (the others read the committed files in tests/fixtures/).

The tests marked `slow` (whole designs through the compiler and the simulator, whole decoder layers, each
default configuration) are deselected by `make test`, which must stay within about 3 minutes here, and run
by `make test-all`; each area keeps a test of its own kind in `make test`."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# the tests of each package (tests/formats/, ...) import the shared helpers here (host_args, fixture_files)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

FORMAT_LIBRARIES = ("torch", "transformers", "compressed_tensors", "quark")


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
    config.addinivalue_line(
        "markers",
        "slow: a whole design, layer or configuration sweep; `make test-all` runs it, `make test` does not",
    )


def pytest_collection_modifyitems(config, items):
    if config.getoption("--formats"):
        return
    skipped = [item for item in items if item.get_closest_marker("formats")]
    if skipped:
        config.hook.pytest_deselected(items=skipped)
        items[:] = [item for item in items if not item.get_closest_marker("formats")]


def pytest_sessionfinish(session, exitstatus):
    """Without --formats no test may have pulled in the formats' libraries (imports are left alone: a
    dependency may probe for them; the check is that none was loaded)."""
    if session.config.getoption("--formats"):
        return
    loaded = sorted(m for m in FORMAT_LIBRARIES if m in sys.modules)
    if loaded:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print(
            f"\nconftest: {', '.join(loaded)} imported by a test outside the `formats` marker "
            "(the default tests read tests/fixtures/ instead)",
            file=sys.stderr,
        )


@pytest.fixture
def compiler_required():
    """The real compiler must run: skip without it (naming what is missing), fail in CI."""
    import compiler_tools

    compiler_tools.require()


def pytest_terminal_summary(terminalreporter):
    """How many designs aircc + aiecc compiled in this session (tests record each with the property
    `aircc_compiled`; `air_opt_only`: aircc's AIR passes alone)."""
    props = [
        p
        for rep in terminalreporter.stats.get("passed", [])
        for p in getattr(rep, "user_properties", ())
    ]
    compiled = sum(1 for k, _ in props if k == "aircc_compiled")
    passes = sum(1 for k, _ in props if k == "air_opt_only")
    generated = sum(v for k, v in props if k == "aircc_generated")
    if compiled or passes or generated:
        terminalreporter.write_line(
            f"the real compiler: {compiled} of the project's designs compiled with aircc + aiecc, "
            f"{passes} more through aircc's AIR passes only; {generated} generated designs judged"
        )
