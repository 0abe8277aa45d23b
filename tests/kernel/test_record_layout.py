# SPDX-License-Identifier: MIT
"""The record layout has one home, int4_packed_record.py; the kernel computes the same offsets from its
-D macros (kernels/int4_kernel.h Q_BYTES .. SCRATCH_BYTES). This reads the kernel's own constants, compiled
with the flags kernels/Makefile gives its host build, and holds them to the Python layout, so a change made
on one side alone fails here."""

import shlex
import subprocess

import pytest

from int4_packed_record import KernelObject, record_layout, w_scratch_bytes
from int4awq.errors import REPO

KERNELS = f"{REPO}/kernels"
FIELDS = (
    "Q_BYTES",
    "S_OFFSET",
    "M_OFFSET",
    "Z_OFFSET",
    "RECORD_BYTES",
    "SCRATCH_BYTES",
)


def kernel_layout(obj: KernelObject, tmp_path) -> dict:
    """The kernel's layout constants for obj, from a TU that includes the kernel source."""
    dry = subprocess.run(
        ["make", "-B", "-n", "-s", "-C", KERNELS, "host", *obj.make_args()],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    [cmd] = [ln for ln in dry.splitlines() if ln.startswith("g++")]
    words = shlex.split(cmd.split("&&")[0])
    flags = [w for w in words if w.startswith(("-D", "-std"))]
    flags += [f"-I{b}" for a, b in zip(words, words[1:]) if a == "-I"]
    src = tmp_path / "layout.cc"
    src.write_text(
        f'#include "{KERNELS}/{"mm" if obj.entries == "gemm" else "mv"}_int4_bf16.cc"\n'
        'extern "C" void kernel_layout(unsigned *o) {\n'
        + "".join(f"  o[{i}] = {f};\n" for i, f in enumerate(FIELDS))
        + "}\n"
    )
    lib = tmp_path / "layout.so"
    subprocess.run(
        ["g++", "-O0", "-fPIC", "-shared", "-w", *flags, str(src), "-o", str(lib)],
        check=True,
    )
    import ctypes

    out = (ctypes.c_uint * len(FIELDS))()
    ctypes.CDLL(str(lib)).kernel_layout(out)
    return dict(zip(FIELDS, out))


@pytest.mark.parametrize(
    "entries, fmt, tile_n, tile_k, gs, dense",
    [
        ("gemm", "awq", 64, 64, 128, False),  # the GEMM keeps the line image
        ("gemv", "awq", 64, 64, 128, True),  # a group spans two chunks; dense codes
        ("gemv", "awq_f16", 32, 128, 32, True),  # four groups a chunk, scale pairs
        ("gemv", "int4_min", 16, 64, 32, True),  # a min term
        ("gemv", "awq", 32, 48, 48, False),  # a span of 48: not whole words, the image
        (
            "gemv",
            "int8_triple",
            48,
            32,
            16,
            False,
        ),  # byte codes, no zero points, triples
    ],
)
def test_the_kernel_and_int4_packed_record_lay_a_record_out_alike(
    entries, fmt, tile_n, tile_k, gs, dense, tmp_path
):
    obj = KernelObject(
        entries, tile_n, tile_k, gs, 16 if entries == "gemm" else None, format=fmt
    )
    assert obj.dense == dense
    got = kernel_layout(obj, tmp_path)
    lay = record_layout(tile_n, tile_k, gs, fmt, dense)
    want = {
        "Q_BYTES": lay.q_bytes,
        "S_OFFSET": lay.s_offset,
        "M_OFFSET": lay.m_offset,
        "Z_OFFSET": lay.z_offset,
        "RECORD_BYTES": lay.total,
        "SCRATCH_BYTES": w_scratch_bytes(tile_n, tile_k, gs, fmt),
    }
    assert got == want
