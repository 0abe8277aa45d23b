# SPDX-License-Identifier: MIT
"""What the kernel's source must state and must not carry (issue 50): every loop's register use within
AIE2P's 12 vector registers and 5 accumulators (`make -C kernels registers`, kernels/toolchain.py), the
formats as policy types with few preprocessor branches, and no host-profiling names in device code.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from int4awq.kernel.kernel_model import KERNELS_DIR

KERNEL_SOURCES = (
    "int4_kernel.h",
    "mm_int4_bf16.cc",
    "mv_int4_bf16.cc",
    "eltwise_bf16.cc",
)


def _registers(*paths):
    return subprocess.run(
        [
            sys.executable,
            str(KERNELS_DIR / "toolchain.py"),
            "registers",
            *map(str, paths),
        ],
        capture_output=True,
        text=True,
    )


def _loop(annotation: str) -> str:
    return (
        "void f(float *p) {\n"
        f"  {annotation}\n"
        "  AIE_LOOP_MIN_ITERATION_COUNT(1)\n"
        "  for (int i = 0; i < 4; ++i)\n"
        "    p[i] = 0;\n"
        "}\n"
    )


@pytest.mark.parametrize(
    "annotation, code, says",
    [
        ("// live: 12 vec, 5 acc", 0, "1 loops"),  # at the limit
        ("// live: 13 vec, 2 acc", 2, "13 vector values and 2 accumulators"),
        ("// live: 4 vec, 6 acc", 2, "4 vector values and 6 accumulators"),
        ("// why the loop is as it is", 2, "without a `// live: N vec, M acc`"),
    ],
    ids=["at-the-limit", "13-vec", "6-acc", "unannotated"],
)
def test_register_check_trips_past_12_vec_or_5_acc_and_on_a_missing_count(
    annotation, code, says, tmp_path
):
    src = tmp_path / "k.cc"
    src.write_text(_loop(annotation))
    out = _registers(src)
    assert out.returncode == code
    assert says in (out.stdout + out.stderr)
    if code:
        assert f"{src}:4:" in out.stderr  # the loop's line


def test_every_kernel_loop_states_its_registers_within_the_core():
    out = subprocess.run(
        ["make", "-s", "-C", str(KERNELS_DIR), "registers"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert "each within 12 vector registers and 5 accumulators" in out.stdout


def test_the_header_has_at_most_six_preprocessor_branches():
    text = (KERNELS_DIR / "int4_kernel.h").read_text()
    branches = re.findall(r"^\s*#\s*(?:if|ifdef|ifndef|elif)\b", text, flags=re.M)
    assert len(branches) <= 6


def test_device_sources_name_no_host_profiling_hook():
    for name in KERNEL_SOURCES:
        text = (KERNELS_DIR / name).read_text()
        assert not re.search(r"\bAIE_HOST_\w+|\bKERNEL_FILE_BASE\b", text), name


def test_the_makefile_passes_the_format_as_one_define():
    dry = subprocess.run(
        ["make", "-B", "-n", "-s", "-C", str(KERNELS_DIR), "host", "FORMAT=int8_min"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    defines = [w for w in dry.split() if w.startswith("-DINT4_")]
    assert defines == ["-DINT4_FORMAT=int8_min", "-DINT4_A_ROUNDING=conv_even"]
    assert "-include" in dry.split() and "host_hooks.h" in dry


@pytest.mark.parametrize(
    "tile, fmt",
    [((16, 16, 256, 256), "awq"), ((16, 32, 256, 32), "mxfp4")],
    ids=["rolled-span", "mxfp4-rolled"],
)
def test_profiled_loop_sites_name_the_marked_loops_of_their_own_file(tile, fmt):
    """host_hooks.h numbers a loop's profile site from its file (kernel_profile.KERNEL_FILES): every site
    the profiling build reports is a line of that file marked AIE_LOOP_MIN_ITERATION_COUNT, the entry files'
    rolled K-block loops included."""
    from int4awq.design.kernel_profile import profile_accumulate, site_file_line

    p = profile_accumulate(*tile, fmt=fmt)
    files = set()
    for lp in p.loops:
        name, line = site_file_line(lp.line)
        files.add(name)
        text = (KERNELS_DIR / name).read_text().splitlines()[line - 1]
        assert text.strip().startswith("AIE_LOOP_MIN_ITERATION_COUNT("), (name, line)
    assert files == {"int4_kernel.h", "mm_int4_bf16.cc"}
