# SPDX-License-Identifier: MIT
"""XRTRunner on the CPU emulator: mlir-air's run_test contract (signature, pass/fail rule, the
`Output i correlation: ...` line, `PASS!` / `failed.` and return value 0 / -1), implemented here.

Pass rule, per output, as mlir-air states it: integers must match exactly; floats pass when at most
max_mismatch_percentage (0-100) of the elements fail np.isclose(actual, expected, rtol, atol) and, when
min_correlation is given, np.corrcoef(actual, expected) >= min_correlation. Stochastic outputs are dicts
{"shape", "indices", "values"} and are checked at the given indices only.

Emulator extras: after run_test, `runner.emu_stats` (counters) and `runner.emu_budget` (static budget) hold
the last test's tables; with AIR_EMU_REPORT=1 run_test also prints both.
"""

import inspect
import os
from typing import List

import numpy as np
from ml_dtypes import bfloat16

from ..extras import types as T
from .abc import AirBackendError
from .xrt import XRTBackend, _omit_pingpong_mode

_NUMPY_TO_AIR = {
    np.dtype(np.int8): T.i8,
    np.dtype(np.int16): T.i16,
    np.dtype(np.int32): T.i32,
    np.dtype(np.int64): T.i64,
    np.dtype(np.uint8): T.ui8,
    np.dtype(np.uint16): T.ui16,
    np.dtype(np.uint32): T.ui32,
    np.dtype(np.uint64): T.ui64,
    np.dtype(np.float16): T.f16,
    np.dtype(np.float32): T.f32,
    np.dtype(np.float64): T.f64,
    np.dtype(bfloat16): T.bf16,
}
_FLOATS = (
    np.dtype(np.float16),
    np.dtype(np.float32),
    np.dtype(np.float64),
    np.dtype(bfloat16),
)
_SHOW = 20  # mismatching elements listed on a failure


def type_mapper(np_dtype):
    """The air element type of a numpy dtype (same width)."""
    try:
        air_type = _NUMPY_TO_AIR[np.dtype(np_dtype)]()
    except (KeyError, TypeError):
        raise AirBackendError(
            f"no air element type for numpy dtype {np_dtype}"
        ) from None
    if air_type.width // 8 != np.dtype(np_dtype).itemsize:
        raise AirBackendError(
            f"{np_dtype}: {np.dtype(np_dtype).itemsize} bytes, air type {air_type} "
            f"{air_type.width // 8}"
        )
    return air_type


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
        options = {name: value for name, value in locals().items() if name != "self"}
        options["omit_pingpong"] = _omit_pingpong_mode(omit_pingpong)
        self.__dict__.update(
            options
        )  # every option stays readable as an attribute, as in mlir-air
        self.last_latency_us = None  # the emulator measures no NPU latency
        self.emu_stats = None
        self.emu_budget = None
        self.emu_resources = None

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
        """Run the module on inputs + zero-filled outputs and check the outputs; 0 on pass, -1 on failure."""
        if self.trace_size > 0:
            raise AirBackendError(
                "trace_size > 0: the emulator does not produce hardware traces"
            )
        if expected_outputs:
            wanted = [
                (np.asarray(e).shape, np.asarray(e).dtype, e) for e in expected_outputs
            ]
        elif stochastic_expected_outputs:
            wanted = [
                (tuple(e["shape"]), np.asarray(e["values"]).dtype, e)
                for e in stochastic_expected_outputs
            ]
        else:
            raise AirBackendError(
                "run_test needs expected_outputs or stochastic_expected_outputs"
            )
        if self.verbose:
            print(mlir_module)

        backend = XRTBackend(**{name: getattr(self, name) for name in _FORWARDED})
        report = os.environ.get("AIR_EMU_REPORT", "") not in ("", "0")
        artifact = backend.compile(mlir_module)
        self.emu_budget = backend.emu_budget
        self.emu_resources = backend.emu_resources
        if report:
            print(self.emu_budget.table())
            print(self.emu_resources.table())
        outputs = [np.zeros(shape, dtype) for shape, dtype, _ in wanted]
        results = backend.load(artifact)(*inputs, *outputs)[len(inputs) :]
        self.emu_stats = backend.emu_stats
        if report:
            print(self.emu_stats.table())
        backend.unload()

        for i, (result, (shape, _, want)) in enumerate(zip(results, wanted)):
            result = np.reshape(result, shape)
            if isinstance(want, dict):
                where = tuple(np.asarray(ix) for ix in want["indices"])
                ok = self._verify(
                    i,
                    result[where],
                    np.asarray(want["values"]),
                    shape,
                    where,
                    rtol,
                    atol,
                    max_mismatch_percentage,
                    None,
                )
            else:
                where = None
                ok = self._verify(
                    i,
                    result,
                    np.asarray(want),
                    shape,
                    where,
                    rtol,
                    atol,
                    max_mismatch_percentage,
                    min_correlation,
                )
            if not ok:
                print("failed.")
                return -1
        print("PASS!")
        return 0

    def _verify(self, i, got, want, shape, where, rtol, atol, max_pct, min_corr):
        """One output (or its sampled elements): print what failed; True if it passes."""
        if self.verbose:
            print(f"Output {i} expected:\n{want}\nactual:\n{got}")
        if want.dtype not in _FLOATS:
            bad = got != want
            allowed = 0
        else:
            got, want = got.astype(np.float64), want.astype(np.float64)
            if self.report_precision:
                err = np.abs(got - want)
                print(
                    f"[precision] Output {i} ({err.size} elements): "
                    f"mean_rel_L1={err.sum() / max(np.abs(want).sum(), 1e-30):.3e} | "
                    f"rel_err max={(err / np.maximum(np.abs(want), 1e-30)).max(initial=0):.3e} | "
                    f"abs_err max={err.max(initial=0):.3e} | rtol={rtol:.1e} atol={atol:.1e}"
                )
            bad = ~np.isclose(got, want, rtol=rtol, atol=atol)
            allowed = int(want.size * max_pct / 100)
        n_bad = int(np.count_nonzero(bad))
        ok = n_bad <= allowed
        if not ok:
            print(f"ERROR: Output {i} does not meet expected output.")
            print(f"Shape: {shape}")
            print(
                f"Mismatches: {n_bad} / {want.size} elements ({100 * n_bad / max(want.size, 1):.2f}%)"
                + (f", {allowed} allowed ({max_pct}%)" if allowed else "")
            )
            flat = np.flatnonzero(bad)
            for j in flat[:_SHOW]:
                idx = (
                    tuple(int(ix.reshape(-1)[j]) for ix in where)
                    if where is not None
                    else tuple(int(v) for v in np.unravel_index(j, want.shape))
                )
                print(
                    f"  at {idx}: expected {want.reshape(-1)[j]}, actual {got.reshape(-1)[j]}"
                )
            if flat.size > _SHOW:
                print(f"  ({flat.size - _SHOW} more)")
        if min_corr is not None and want.dtype in _FLOATS and want.size:
            with np.errstate(all="ignore"):
                corr = float(np.corrcoef(got.reshape(-1), want.reshape(-1))[0, 1])
            print(f"Output {i} correlation: {corr:.6f} (threshold: {min_corr})")
            if not corr >= min_corr:
                print(f"ERROR: Output {i} correlation {corr:.6f} is below {min_corr}")
                ok = False
        return ok


# The options XRTRunner forwards to each XRTBackend it creates: those both take.
_FORWARDED = sorted(
    (
        set(inspect.signature(XRTBackend.__init__).parameters)
        & set(inspect.signature(XRTRunner.__init__).parameters)
    )
    - {"self"}
)
