"""XRTRunner for the CPU emulator: mlir-air's run_test, with its pass/fail
semantics and output lines (`Output i correlation: ...`, `PASS!` / `failed.`).

Emulator extras: after run_test, `runner.emu_stats` (counters) and
`runner.emu_budget` (static budget) hold the tables of the last test; with the
environment variable AIR_EMU_REPORT=1 run_test also prints both.
"""

import os
from collections import defaultdict
from typing import List

import numpy as np
from ml_dtypes import bfloat16

from .abc import AirBackendError
from .xrt import XRTBackend, _omit_pingpong_mode
from ..extras import types as T

TYPE_MAP_DICT = defaultdict(
    lambda: None,
    {
        np.int8: T.i8,
        np.int16: T.i16,
        np.int32: T.i32,
        np.int64: T.i64,
        np.uint8: T.ui8,
        np.uint16: T.ui16,
        np.uint32: T.ui32,
        np.uint64: T.ui64,
        np.float16: T.f16,
        np.float32: T.f32,
        np.float64: T.f64,
        bfloat16: T.bf16,
    },
)


def type_mapper(np_dtype):
    factory = TYPE_MAP_DICT[np_dtype]
    if factory is None:
        raise AirBackendError(f"numpy data type {np_dtype} has no default mapping")
    xrt_dtype = factory()
    if xrt_dtype.width / 8 != np.dtype(np_dtype).itemsize:
        raise AirBackendError(f"Python data type has width {xrt_dtype.width / 8} but numpy data type has "
                              f"width {np.dtype(np_dtype).itemsize}")
    return xrt_dtype


class XRTRunner:
    def __init__(
        self,
        verbose: bool = False,
        omit_while_true_loop: bool = True,
        omit_pingpong: str = "",
        lower_linalg_to_func: bool = False,
        air_loop_fusion: bool = False,
        runtime_loop_tiling_sizes: list = [],
        omit_auto_broadcast: bool = False,
        channel_multiplexing: list = [],
        use_lock_race_condition_fix: bool = False,
        use_lock_race_condition_fix_v2: bool = False,
        trace_offset: int = 0,
        trace_size: int = 0,
        output_format: str = "xclbin",
        kernel_name: str = "",
        instance_name: str = "",
        kernel_id: str = "",
        xclbin_input: str = "",
        trace_file: str = "trace_data.txt",
        num_device_cols: int = 0,
        debug_ir: bool = False,
        bf16_emulation: bool = False,
        target_device: str = None,
        stack_size: int = 1024,
        n_perf_iters: int = 0,
        n_warmup_iters: int = 10,
        perf_flops: float = None,
        report_precision: bool = False,
    ):
        self.verbose = verbose
        self.omit_while_true_loop = omit_while_true_loop
        self.omit_pingpong = _omit_pingpong_mode(omit_pingpong)
        self.lower_linalg_to_func = lower_linalg_to_func
        self.air_loop_fusion = air_loop_fusion
        self.runtime_loop_tiling_sizes = runtime_loop_tiling_sizes
        self.omit_auto_broadcast = omit_auto_broadcast
        self.channel_multiplexing = channel_multiplexing
        self.use_lock_race_condition_fix = use_lock_race_condition_fix
        self.use_lock_race_condition_fix_v2 = use_lock_race_condition_fix_v2
        self.trace_offset = trace_offset
        self.trace_size = trace_size
        self.output_format = output_format
        self.kernel_name = kernel_name
        self.instance_name = instance_name
        self.kernel_id = kernel_id
        self.xclbin_input = xclbin_input
        self.trace_file = trace_file
        self.num_device_cols = num_device_cols
        self.debug_ir = debug_ir
        self.bf16_emulation = bf16_emulation
        self.target_device = target_device
        self.stack_size = stack_size
        self.n_perf_iters = n_perf_iters
        self.n_warmup_iters = n_warmup_iters
        self.perf_flops = perf_flops
        self.last_latency_us = None
        self.report_precision = report_precision
        self.emu_stats = None
        self.emu_budget = None

    def run_test(
        self,
        mlir_module,
        inputs: List[np.ndarray],
        expected_outputs: List[np.ndarray] = [],
        stochastic_expected_outputs: List[np.ndarray] = [],
        rtol: float = 1e-3,
        atol: float = 1e-8,
        max_mismatch_percentage: float = 0,
        min_correlation: float = None,
        trace_file: str = None,
    ):
        if self.verbose:
            print("Running module: ")
            print(mlir_module)
        if self.trace_size > 0:
            raise AirBackendError("trace_size > 0: the emulator does not produce hardware traces")

        backend = XRTBackend(
            verbose=self.verbose,
            omit_while_true_loop=self.omit_while_true_loop,
            omit_pingpong=self.omit_pingpong,
            lower_linalg_to_func=self.lower_linalg_to_func,
            air_loop_fusion=self.air_loop_fusion,
            runtime_loop_tiling_sizes=self.runtime_loop_tiling_sizes,
            omit_auto_broadcast=self.omit_auto_broadcast,
            channel_multiplexing=self.channel_multiplexing,
            use_lock_race_condition_fix=self.use_lock_race_condition_fix,
            use_lock_race_condition_fix_v2=self.use_lock_race_condition_fix_v2,
            trace_offset=self.trace_offset,
            trace_size=self.trace_size,
            output_format=self.output_format,
            kernel_name=self.kernel_name,
            instance_name=self.instance_name,
            kernel_id=self.kernel_id,
            xclbin_input=self.xclbin_input,
            num_device_cols=self.num_device_cols,
            debug_ir=self.debug_ir,
            bf16_emulation=self.bf16_emulation,
            target_device=self.target_device,
            stack_size=self.stack_size,
            n_perf_iters=self.n_perf_iters,
            n_warmup_iters=self.n_warmup_iters,
        )

        if expected_outputs:
            output_placeholders = [np.zeros(o.shape, o.dtype) for o in expected_outputs]
        elif stochastic_expected_outputs:
            output_placeholders = [np.zeros(o["shape"], o["values"][0].dtype)
                                   for o in stochastic_expected_outputs]
        else:
            assert False, ("Expect one of 'expected_outputs' and 'stochastic_expected_outputs' to not be "
                           "empty, or trace_size > 0.")

        expanded_inputs = list(inputs) + output_placeholders
        report = os.environ.get("AIR_EMU_REPORT", "") not in ("", "0")

        compiled_module = backend.compile(mlir_module)
        self.emu_budget = backend.emu_budget
        if report:
            print(backend.emu_budget.table())
        module_function = backend.load(compiled_module)
        actual_outputs = module_function(*expanded_inputs)
        self.emu_stats = backend.emu_stats
        if report:
            print(backend.emu_stats.table())
        self.last_latency_us = None
        backend.unload()

        actual_outputs = list(actual_outputs[len(inputs):])

        if expected_outputs and actual_outputs:
            ok = self._check_outputs(actual_outputs, expected_outputs, rtol=rtol, atol=atol,
                                     max_mismatch_percentage=max_mismatch_percentage,
                                     min_correlation=min_correlation)
        elif stochastic_expected_outputs and actual_outputs:
            ok = self._check_outputs_stochastic(actual_outputs, stochastic_expected_outputs, rtol=rtol,
                                                atol=atol, max_mismatch_percentage=max_mismatch_percentage)
        else:
            print("No outputs to validate.")
            return 0
        if ok:
            print("PASS!")
            return 0
        print("failed.")
        return -1

    def _print_precision(self, i, actual_f64, expected_f64, rtol, atol):
        abs_err = np.abs(actual_f64 - expected_f64)
        rel_err = abs_err / (np.abs(expected_f64) + 1e-30)
        mean_rel_l1 = abs_err.mean() / (np.abs(expected_f64).mean() + 1e-30)
        print(f"[precision] Output {i} ({abs_err.size} elements): mean_rel_L1={mean_rel_l1:.3e} | "
              f"rel_err max={rel_err.max():.3e} | abs_err max={abs_err.max():.3e} | "
              f"rtol={rtol:.1e} atol={atol:.1e}")

    @staticmethod
    def _report_mismatches(expected, actual, idxs, n, show_diff=True):
        max_display = 20
        print(f"First {min(max_display, n)} mismatched locations:")
        for j in range(min(max_display, n)):
            idx = tuple(dim[j] for dim in idxs)
            if show_diff:
                print(f"  Index {idx}: expected={expected[idx]}, actual={actual[idx]}, "
                      f"diff={abs(actual[idx] - expected[idx])}")
            else:
                print(f"  Index {idx}: expected={expected[idx]}, actual={actual[idx]}")
        if n > max_display:
            print(f"  ... and {n - max_display} more mismatches")

    @staticmethod
    def _report_sampled_mismatches(i, expected, values, sample, bad, show_count):
        """The failure lines of a stochastic check: header, then the first 20 bad samples."""
        total = len(values)
        print(f"ERROR: Output {i} does not meet expected output.")
        print(f"Shape: {expected['shape']}")
        print(f"Stochastic check: {total} sampled elements")
        if show_count:
            print(f"Mismatches: {len(bad)} / {total} elements ({100 * len(bad) / total:.2f}%)")
        for pos in bad[:20]:
            idx = tuple(dim[pos] for dim in expected["indices"])
            print(f"  Index {idx}: expected={values[pos]}, actual={sample[pos]}")

    def _check_outputs(self, actual_outputs, expected_outputs, rtol=1e-3, atol=1e-8,
                       max_mismatch_percentage=0, min_correlation=None):
        assert len(actual_outputs) == len(expected_outputs), (
            f"Number of actual outputs ({len(actual_outputs)}) does not equal number of expected "
            f"outputs ({len(expected_outputs)})")
        for i, (actual, expected) in enumerate(zip(actual_outputs, expected_outputs)):
            actual = np.reshape(actual, expected.shape)
            if self.verbose:
                print("Expected: ")
                print(expected)
                print("Actual: ")
                print(actual)
            if expected.dtype in [np.float16, np.float32, np.float64, bfloat16]:
                if expected.dtype == bfloat16:
                    expected = expected.astype(np.float64)
                    actual = actual.astype(np.float64)
                if self.report_precision:
                    self._print_precision(i, actual, expected, rtol, atol)
                elementwise_ok = True
                close = np.isclose(actual, expected, rtol=rtol, atol=atol)
                idxs = np.where(~close)
                n = len(idxs[0])
                total = expected.size
                max_acceptable = int(total * max_mismatch_percentage / 100)
                if n > max_acceptable:
                    elementwise_ok = False
                    print(f"ERROR: Output {i} does not meet expected output.")
                    print(f"Shape: {expected.shape}")
                    if total > 0:
                        print(f"Mismatches: {n} / {total} elements ({100 * n / total:.2f}%)")
                    if max_acceptable > 0:
                        print(f"Max acceptable: {max_acceptable} ({max_mismatch_percentage}%)")
                    self._report_mismatches(expected, actual, idxs, n)
                corr_ok = True
                if min_correlation is not None and total > 0:
                    with np.errstate(all="ignore"):
                        corr = float(np.corrcoef(actual.flatten(), expected.flatten())[0, 1])
                    print(f"Output {i} correlation: {corr:.6f} (threshold: {min_correlation})")
                    if not np.isfinite(corr) or corr < min_correlation:
                        corr_ok = False
                        print(f"ERROR: Output {i} correlation {corr:.6f} below threshold {min_correlation}")
                if not elementwise_ok or not corr_ok:
                    return False
            else:
                if not np.array_equal(actual, expected):
                    print(f"ERROR: Output {i} does not meet expected output.")
                    idxs = np.where(actual != expected)
                    n = len(idxs[0])
                    total = expected.size
                    print(f"Shape: {expected.shape}")
                    if total > 0:
                        print(f"Mismatches: {n} / {total} elements ({100 * n / total:.2f}%)")
                    self._report_mismatches(expected, actual, idxs, n, show_diff=False)
                    return False
        return True

    def _check_outputs_stochastic(self, actual_outputs, stochastic_expected_outputs, rtol=1e-3, atol=1e-8,
                                  max_mismatch_percentage=0):
        assert len(actual_outputs) == len(stochastic_expected_outputs)
        for i, (actual, expected) in enumerate(zip(actual_outputs, stochastic_expected_outputs)):
            actual = np.reshape(actual, expected["shape"])
            values = np.asarray(expected["values"])
            sample = actual[tuple(expected["indices"])]
            if values.dtype in [np.float16, np.float32, np.float64, bfloat16]:
                if values.dtype == bfloat16:
                    values = values.astype(np.float64)
                    sample = sample.astype(np.float64)
                if self.report_precision:
                    self._print_precision(i, np.asarray(sample, np.float64), np.asarray(values, np.float64),
                                          rtol, atol)
                close = np.isclose(sample, values, rtol=rtol, atol=atol)
                bad = np.where(~close)[0]
                total = len(values)
                max_acceptable = int(total * max_mismatch_percentage / 100)
                if len(bad) > max_acceptable:
                    self._report_sampled_mismatches(i, expected, values, sample, bad, show_count=True)
                    return False
            else:
                if not np.array_equal(sample, values):
                    bad = np.where(sample != values)[0]
                    self._report_sampled_mismatches(i, expected, values, sample, bad, show_count=False)
                    return False
        return True
