# SPDX-License-Identifier: MIT
"""Plain mlir-air-style designs run through XRTRunner.run_test on the emulator, and the
interpreter-overhead benchmark at the int4 GEMM's 2048^3 op counts."""

import os
import sys
import time

import numpy as np
from ml_dtypes import bfloat16

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "designs"))
import emu_testlib  # noqa: E402  (puts the emulated `air` first on sys.path)

import add_2x2  # noqa: E402
import passthrough  # noqa: E402
import synthetic_gemm  # noqa: E402
import two_launches  # noqa: E402
from air.backend.xrt import XRTBackend  # noqa: E402
from air.backend.xrt_runner import XRTRunner  # noqa: E402


def test_passthrough_through_l2_and_l1_prints_pass(capsys):
    assert passthrough.main() == 0
    assert capsys.readouterr().out.splitlines()[-1] == "PASS!"


def test_two_launches_run_in_program_order_through_ddr(capsys):
    """A multi-launch module: the second launch reads what the first wrote to DDR."""
    assert two_launches.main() == 0
    assert capsys.readouterr().out.splitlines()[-1] == "PASS!"


def test_bf16_add_on_a_2x2_herd_prints_pass(monkeypatch, capsys):
    monkeypatch.setenv("AIR_EMU_LIB_PATH", emu_testlib.build_kernels())
    assert add_2x2.main() == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "PASS!"
    assert out[-2].startswith("Output 0 correlation: 1.000000")


def test_run_test_fails_like_mlir_air_on_a_wrong_answer(monkeypatch, capsys):
    monkeypatch.setenv("AIR_EMU_LIB_PATH", emu_testlib.build_kernels())
    a = np.ones((add_2x2.ROWS, add_2x2.COLS), bfloat16)
    wrong = np.full_like(a, 3)
    rc = XRTRunner().run_test(
        add_2x2.build_module(), inputs=[a, a], expected_outputs=[wrong], rtol=0, atol=0
    )
    out = capsys.readouterr().out
    assert rc == -1
    assert (
        "Mismatches: 1024 / 1024 elements (100.00%)" in out
        and out.splitlines()[-1] == "failed."
    )


def test_emulation_at_the_2048_cube_op_counts_is_fast(monkeypatch):
    """32,768 kernel calls and ~74,000 DMAs: the emulator's own overhead (no-op kernels).
    The brief's budget is 60 s for the whole emulated GEMM, of which ~30 s is the kernel.
    """
    monkeypatch.setenv("AIR_EMU_LIB_PATH", emu_testlib.build_kernels())
    backend = XRTBackend(stack_size=4096)
    backend.emu_progress = False
    t0 = time.perf_counter()
    invoke = backend.compile_and_load(synthetic_gemm.build_module())
    t1 = time.perf_counter()
    m, k, n = synthetic_gemm.M, synthetic_gemm.K, synthetic_gemm.N
    invoke(
        np.zeros((m, k), bfloat16),
        np.zeros((k, n), bfloat16),
        np.zeros((m, n), bfloat16),
    )
    t2 = time.perf_counter()
    st = backend.emu_stats
    ops = st.dma_ops + st.total_kernel_calls + st.pe_executions
    print(
        f"\nemulator overhead at 2048^3 op counts: trace+compile {t1 - t0:.2f} s, run {t2 - t1:.2f} s for "
        f"{st.dma_ops} DMAs + {st.total_kernel_calls} calls ({1e6 * (t2 - t1) / ops:.1f} us per op)"
    )
    assert st.kernel_calls["noop3"] == 32768
    assert st.transfers[("L2", "L1")] == 65536
    assert st.herd_executions == {"gemm": 256} and st.pe_executions == 8192
    assert t2 - t1 < 20.0, f"interpretation took {t2 - t1:.1f} s"
