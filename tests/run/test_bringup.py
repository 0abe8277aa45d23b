# SPDX-License-Identifier: MIT
"""The bring-up ladder (host/bringup.py, host/kernel_probe.py): its checks catch what they are for.

The whole ladder passing on the emulator is tests/run_emu_bringup.lit; here each check is shown to fail
when the hardware gets its part wrong (a probe output corrupted, a rounding rule changed, a dispatch that
returns stale results), with expected values written out by hand."""

import os
import sys

import numpy as np
import pytest
from ml_dtypes import bfloat16

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "host"))

import bringup  # noqa: E402
import kernel_probe as kp  # noqa: E402
from int4awq.kernel import record  # noqa: E402

# ------------------------------------------------------------------------------------------ rounding
# The mantissas of bringup.ROUNDING_BLOCKS, by hand: steps (64,) 0.5 1.5 2.5 -0.5 -1.5 -2.5 0.75 and
# (64,) 0.25 -0.25 -0.75 3.5 -3.5 1.25 -1.25.
HALF_EVEN = [[64, 0, 2, 2, 0, -2, -2, 1], [64, 0, 0, -1, 4, -4, 1, -1]]
FLOOR = [[64, 0, 1, 2, -1, -2, -3, 0], [64, 0, -1, -1, 3, -4, 1, -2]]
TOWARD_ZERO = [[64, 0, 1, 2, 0, -1, -2, 0], [64, 0, 0, 0, 3, -3, 1, -1]]
HALF_AWAY = [[64, 1, 2, 3, -1, -2, -3, 1], [64, 0, 0, -1, 4, -4, 1, -1]]
HALF_ODD = [[64, 1, 1, 3, -1, -1, -3, 1], [64, 0, 0, -1, 3, -3, 1, -1]]


@pytest.mark.parametrize(
    "mantissas, modes",
    [
        (HALF_EVEN, ["conv_even"]),
        (FLOOR, ["floor"]),
        (TOWARD_ZERO, ["symmetric_floor"]),
        (HALF_AWAY, ["symmetric_inf"]),
        (HALF_ODD, ["conv_odd"]),
        ([[64] * 8, [64] * 8], []),
    ],
    ids=["half-even", "floor", "toward-zero", "half-away", "half-odd", "none"],
)
def test_rounding_blocks_name_one_mode(mantissas, modes):
    assert bringup.classify_rounding(np.array(mantissas)) == modes


def test_probe_blocks_are_exact_in_bf16_and_where_the_probe_reads_them():
    a = bringup.numerics_rows()
    assert a.dtype == bfloat16 and a.shape == (8, 64)
    assert a[0, :8].astype(np.float64).tolist() == [
        1.0,
        2**-7,
        3 * 2**-7,
        5 * 2**-7,
        -(2**-7),
        -3 * 2**-7,
        -5 * 2**-7,
        3 * 2**-8,
    ]
    assert a[2, 0] == 1.9921875 and not a[2, 1:8].astype(np.float32).any()
    assert not a[4, :8].astype(np.float32).any()
    assert a[5, 0].astype(np.float64) == 2.0**-130


# ------------------------------------------------------------------------------------------ layouts
def test_acc_to_rows_reads_the_gemv_bands_row_block_outer():
    # GEMV, tile_n 16: blocks (b, nb) at (b * 2 + nb) * 64; element (r, c) of a block at r * 8 + c.
    probe = kp.Probe(record.KernelObject("gemv", 16, 16, 128), 16, "zero")
    acc = np.arange(2 * 8 * 16, dtype=np.float32)
    rows = kp.acc_to_rows(probe, acc)
    assert rows[0, 0] == 0 and rows[0, 7] == 7 and rows[0, 8] == 64 and rows[1, 0] == 8
    assert rows[8, 0] == 128 and rows[9, 9] == 128 + 64 + 9
    five = kp.Probe(record.KernelObject("gemv", 16, 16, 128), 5, "zero")
    assert kp.acc_to_rows(five, acc).shape == (5, 16)


def test_acc_to_rows_reads_the_gemm_blocks_column_block_outer():
    # GEMM, tile_m 16, tile_n 32: blocks (mb, nb) at (nb * 2 + mb) * 64.
    probe = kp.Probe(record.KernelObject("gemm", 32, 16, 128, 16), 16, "zero")
    acc = np.arange(16 * 32, dtype=np.float32)
    rows = kp.acc_to_rows(probe, acc)
    assert rows[0, 0] == 0 and rows[0, 8] == 128 and rows[0, 24] == 3 * 128
    assert rows[8, 0] == 64 and rows[9, 9] == 128 + 64 + 8 + 1 and rows[15, 31] == 511


def test_decode_blocks_reads_exponent_then_signed_mantissas():
    raw = np.array([127, 64, 0xFF, 0x80, 1, 2, 3, 4, 5], np.uint8)
    e, m = kp.decode_blocks(raw)
    assert e.tolist() == [127] and m.tolist() == [[64, -1, -128, 1, 2, 3, 4, 5]]
    assert kp.block_values(e, m)[0, :3].tolist() == [1.0, -(2**-6), -2.0]


# ------------------------------------------------------------------------------------------ the checks catch faults
@pytest.fixture(autouse=True)
def numerics_file(tmp_path, monkeypatch):
    """The numerics probe's result goes to a temporary file, not the checkout's build/bringup."""
    from int4awq.run import npu

    monkeypatch.setattr(npu, "NUMERICS_FILE", str(tmp_path / "numerics.txt"))


@pytest.fixture(scope="module")
def ladder():
    return bringup.Ladder("emu", "/tmp/int4awq_bringup_test", seed=0)


def _corrupting(ladder, monkeypatch, stage, output, byte, obj=bringup.PROBE_GEMM):
    real = ladder.probes.run

    def run(probe, inputs):
        outs = real(probe, inputs)
        if probe.stage == stage and probe.obj == obj:
            outs[output].view(np.uint8).reshape(-1)[byte] ^= 0x01
        return outs

    monkeypatch.setattr(ladder.probes, "run", run)


@pytest.mark.parametrize(
    "stage, output, byte, check",
    [
        ("zero", 0, 2, "gemm_int4 64x64: zero"),
        ("accumulate", 1, 10, "gemm_int4 64x64: dequantised W = q - z exactly"),
        ("accumulate", 1, 4 * 1152 + 10, "gemm_int4 64x64: A to bfp16 blocks"),
        ("accumulate", 0, 100, "gemm_int4 64x64: accumulator = host build"),
        ("drain", 0, 1, "gemm_int4 64x64: drain = bf16 round to nearest even"),
    ],
    ids=["zero", "w-line", "a-line", "accumulator", "drain"],
)
def test_kernel_harness_names_the_corrupted_output(
    ladder, monkeypatch, stage, output, byte, check
):
    _corrupting(ladder, monkeypatch, stage, output, byte)
    out = bringup.step_kernel_harness(ladder)
    assert out.status == "FAIL"
    assert any(line.startswith(f"FAIL {check} (") for line in out.lines)
    assert out.figures.endswith(f"first: {check}")


def test_kernel_harness_checks_the_a_line_tail_at_tile_k_16(ladder, monkeypatch):
    """The 16x16x16 probe's A line is 4 block vectors, 288 bytes after one 320-byte W pair line: its last
    byte (607) sits in the 512-bit word the stream's final partial flush writes."""
    obj = bringup.PROBE_GEMM_K16
    assert record.w_pair_line_bytes(obj.tile_k) == 320
    _corrupting(ladder, monkeypatch, "accumulate", 1, 320 + 287, obj)
    out = bringup.step_kernel_harness(ladder)
    assert out.status == "FAIL"
    assert out.figures.endswith("first: gemm_int4 16x16: A to bfp16 blocks")


def test_kernel_harness_passes_clean_runs(ladder):
    out = bringup.step_kernel_harness(ladder)
    assert out.status == "PASS" and len(out.lines) == 22
    assert out.lines[0] == f"ok   {bringup.CONVERSION_RULE}"


def test_conversion_rule_blocks_decode_to_their_values_under_the_rule():
    """The hand-written exponent bytes and mantissas are each block's exact values, with the largest
    magnitude's mantissa in 64 .. 127 (the rule), and no two rules tell the same story: E + 1 would halve them.
    """
    for what, bits, e, m in bringup.CONVERSION_RULE_BLOCKS:
        values = np.array(bits, np.uint16).view(bfloat16).astype(np.float64)
        np.testing.assert_array_equal(np.ldexp(np.array(m, float), e - 133), values)
        assert 64 <= max(abs(x) for x in m) <= 127, what


def _converting_as(ladder, monkeypatch, rule):
    """The GEMV probe's A line rewritten as a core following another exponent rule would write it."""
    real = ladder.probes.run

    def run(probe, inputs):
        outs = real(probe, inputs)
        if probe.stage == "accumulate" and probe.obj == bringup.PROBE_GEMV:
            o = probe.obj
            start = o.tile_n // 16 * record.w_pair_line_bytes(o.tile_k)
            blocks = outs[1][start : start + 8 * kp.BLOCK_BYTES].reshape(8, 9)
            for b in blocks:
                e, m = int(b[0]), b[1:].view(np.int8).astype(int)
                b[0], b[1:] = rule(e, m)
        return outs

    monkeypatch.setattr(ladder.probes, "run", run)


def _headroom(e, m):  # E one higher, mantissas halved (32 .. 63)
    return e + 1, (m // 2).astype(np.int8).view(np.uint8)


def _minus_128(e, m):  # a negative power of two as -128 under E - 1
    if m.min() == -64 and m.max() < 64:
        return e - 1, (m * 2).astype(np.int8).view(np.uint8)
    return e, m.astype(np.int8).view(np.uint8)


@pytest.mark.parametrize(
    "rule, block, got",
    [
        (
            _headroom,
            "zero point 0 (0x5D80 x 8)",
            "exponent byte 188, mantissas [32, 32",
        ),
        (_minus_128, "max -1.0", "exponent byte 126, mantissas [-128, 64"),
    ],
    ids=["headroom", "minus-128"],
)
def test_kernel_harness_fails_first_on_another_conversion_rule(
    ladder, monkeypatch, rule, block, got
):
    _converting_as(ladder, monkeypatch, rule)
    out = bringup.step_kernel_harness(ladder)
    assert out.status == "FAIL"
    assert out.lines[0].startswith(
        f"FAIL {bringup.CONVERSION_RULE} (block '{block}': {got}"
    )
    assert out.figures.endswith(f"first: {bringup.CONVERSION_RULE}")


def test_numerics_probe_reports_a_rounding_the_model_does_not_assume(
    ladder, monkeypatch
):
    """The conv_even object answering like floor: DIFFERS, with both rules named."""
    real = ladder.probes.run

    def run(probe, inputs):
        if probe.obj.rounding == "conv_even":
            probe = kp.Probe(bringup.PROBE_GEMV_FLOOR, probe.rows, probe.stage)
        return real(probe, inputs)

    monkeypatch.setattr(ladder.probes, "run", run)
    out = bringup.step_numerics(ladder)
    assert out.status == "DIFFERS"
    assert (
        out.figures
        == "conv_even set (the kernel's): rounds as floor, model assumes conv_even"
    )


def test_numerics_probe_passes_on_the_emulator(ladder):
    from int4awq.run import npu

    out = bringup.step_numerics(ladder)
    assert out.status == "PASS"
    with open(npu.NUMERICS_FILE) as f:
        assert f.readline() == "emu: as the host model assumes\n"
    assert out.lines[0].startswith(
        "conv_even set (the kernel's): rounding conv_even; 127.5 steps saturates to 127"
    )
    assert out.lines[1].startswith("floor set (the reset mode): rounding floor;")


def test_repeated_dispatch_catches_a_stale_result(ladder, monkeypatch):
    """An invoker whose later dispatches return the first dispatch's C: every later check fails."""
    sys.path.insert(0, os.path.join(REPO, "emulator"))
    from air.backend import xrt

    real = xrt.XRTBackend.compile_and_load

    def stale(self, module):
        invoke, first = real(self, module), []

        def run(*bufs):
            outs = invoke(*bufs)
            first.append(outs)
            return first[0]

        return run

    monkeypatch.setattr(xrt.XRTBackend, "compile_and_load", stale)
    out = bringup.step_repeated_dispatch(ladder)
    assert out.status == "FAIL" and out.figures == "dispatch 2, dispatch 3 wrong"


# ------------------------------------------------------------------------------------------ command line
@pytest.mark.parametrize(
    "argv, message",
    [
        (["--steps", "2,x"], "--steps '2,x': give step numbers like 2,3"),
        (["--steps", "10"], "--steps: steps are 0 to 9"),
        (["--backend", "gpu"], "argument --backend: invalid choice"),
    ],
)
def test_bad_arguments_are_one_line_exit_2(capsys, argv, message):
    assert bringup.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_a_failing_step_stops_the_ladder_and_is_named(capsys, monkeypatch):
    fail = bringup.Outcome("FAIL", "made to fail")
    steps = tuple(
        (
            s
            if s.number != 2
            else bringup.Step(2, s.name, s.isolates, s.on_fail, lambda _: fail)
        )
        for s in bringup.STEPS
    )
    monkeypatch.setattr(bringup, "STEPS", steps)
    assert bringup.main(["--backend", "emu", "--steps", "1,2,3"]) == 1
    out = capsys.readouterr().out
    assert "step 2 kernel harness     FAIL" in out and "step 3" not in out
    assert "    next: a Peano codegen problem in the named entry" in out
    assert out.strip().endswith(
        "bring-up: first problem at step 2 (kernel harness) FAIL"
    )


def test_environment_on_npu_without_a_device_fails_naming_why(monkeypatch):
    from int4awq.run import npu

    monkeypatch.setattr(
        npu,
        "npu2_present",
        lambda: (False, "xrt-smi not found (XRT not installed or not sourced)"),
    )
    out = bringup.step_environment(
        bringup.Ladder("npu", "/tmp/int4awq_bringup_test", seed=0)
    )
    assert out.status == "FAIL" and out.figures == "no NPU2"
    assert out.lines[-1] == "xrt-smi not found (XRT not installed or not sourced)"


def test_a_gemv_probe_of_several_fold_spans_is_refused():
    from int4awq.errors import ConfigError
    from int4awq.kernel.record import KernelObject

    with pytest.raises(ConfigError, match="one fold span"):
        kp.Probe(KernelObject("gemv", 64, 256, 128), 5, "accumulate")


# ------------------------------------------------------------------------------------------ step 0


def test_compile_step_skips_without_the_compiler(ladder, monkeypatch):
    from int4awq.design import compiler

    monkeypatch.setattr(compiler, "tools_missing", lambda *n: "aircc not found (...)")
    out = bringup.step_compile(ladder)
    assert out.status == "SKIP" and out.figures == "aircc not found (...)"


def test_compile_step_names_the_design_the_compiler_refuses(ladder, monkeypatch):
    from host import aircc_check
    from int4awq.design import compiler

    if compiler.tools_missing():
        pytest.skip(compiler.tools_missing())
    good = aircc_check._config_design(
        "make run1x1", aircc_check.make_target_config("run1x1")
    )
    # a stack that leaves no room for the buffers: aiecc's address assignment refuses it
    broken = aircc_check.Design(
        "make run1x1", good.build, dict(good.options, stack_size=60000)
    )
    monkeypatch.setattr(aircc_check, "designs", lambda: [broken])
    out = bringup.step_compile(ladder)
    assert out.status == "FAIL" and out.figures == "1 of 1 designs, first: make run1x1"
    assert out.lines[0].startswith("FAIL make run1x1: aircc: ")
    assert "overlaps with stack (size: 60000 bytes)" in out.lines[0]
