# SPDX-License-Identifier: MIT
"""The NPU2 probe, and running a compiled design through mlir-air's own run path (XRTBackend.load and
its timed invoker); everything pyxrt does happens inside mlir-air."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from ..errors import REPO, ConfigError

KERNEL_NAME = "MLIR_AIE"
NPU2_MODELS = ("npu4", "npu5", "npu6", "strix", "krackan")


def emulator_hint() -> str:
    """How to pick the emulator instead: the make variable when a make target runs the program (the
    Makefile sets INT4AWQ_MAKE_TARGET), the command-line flag otherwise."""
    target = os.environ.get("INT4AWQ_MAKE_TARGET")
    return f"`make {target} BACKEND=emu`" if target else "--backend emu"


# The bring-up ladder's numerics probe result (host/bringup.py step 3), shown beside measured figures.
NUMERICS_FILE = os.path.join(
    REPO,
    "build",
    "bringup",
    "numerics.txt",
)


def numerics_line() -> str:
    """What the bring-up ladder's numerics probe last measured, or how to measure it."""
    try:
        with open(NUMERICS_FILE) as f:
            lines = [line.strip() for line in f if line.strip()]
    except OSError:
        return "numerics probe: not run here (make bringup BACKEND=npu measures the core's bfp16 rounding)"
    return "numerics probe (make bringup): " + " | ".join(lines)


def npu2_present() -> tuple[bool, str]:
    """(found, why): whether `xrt-smi examine` names an XDNA2 part."""
    xrt_smi = shutil.which("xrt-smi") or shutil.which(
        "xrt-smi",
        path=os.path.join(os.environ.get("XILINX_XRT", "/opt/xilinx/xrt"), "bin"),
    )
    if not xrt_smi:
        return False, "xrt-smi not found (XRT not installed or not sourced)"
    try:
        out = subprocess.run(
            [xrt_smi, "examine"], capture_output=True, text=True, timeout=30
        ).stdout.lower()
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"xrt-smi examine failed: {e}"
    if any(model in out for model in NPU2_MODELS):
        return True, "xrt-smi examine reports an NPU2"
    return False, "xrt-smi examine reports no NPU2 device"


@dataclass
class NpuRun:
    output: np.ndarray  # the result buffer, read back after the last run
    mean_us: (
        float  # mean kernel time over the timed runs (mlir-air's XRTBackend timing)
    )


def _mlir_air():
    try:
        from air.backend import abc, xrt
    except ImportError:
        raise ConfigError(
            "mlir-air's Python package is not importable: install it (README, 'Running on "
            f"an NPU2 machine') or use {emulator_hint()}"
        ) from None
    return SimpleNamespace(
        XRTBackend=xrt.XRTBackend,
        XRTCompileArtifact=xrt.XRTCompileArtifact,
        AirBackendError=abc.AirBackendError,
    )


def _artifact_paths(build_dir: str) -> tuple[str, str]:
    xclbin, insts = os.path.join(build_dir, "air.xclbin"), os.path.join(
        build_dir, "air.insts.bin"
    )
    for path in (xclbin, insts):
        if not os.path.isfile(path):
            raise ConfigError(
                f"{path} is missing: run `make compile` with the same configuration first"
                f" (or use {emulator_hint()})"
            )
    return xclbin, insts


def _check_buffers(buffers) -> None:
    if len(buffers) > 5:
        raise ConfigError(
            f"{len(buffers)} data buffers; the NPU kernel takes at most 5"
        )


def run_compiled(
    build_dir: str,
    buffers: list[np.ndarray],
    output: int,
    iters: int = 1,
    warmup: int = 0,
    air=None,
) -> NpuRun:
    """Run the design aircc compiled into build_dir (air.xclbin, air.insts.bin) on `buffers` (inputs and
    outputs, in argument order) through mlir-air's own run path: XRTBackend.load of the compiled artifact,
    whose invoker runs `warmup` untimed and `iters` timed iterations and keeps their mean latency.
    air: what the run uses of mlir-air (XRTBackend, XRTCompileArtifact, AirBackendError); by default mlir-air's
    own (a stand-in in tests)."""
    xclbin, insts = _artifact_paths(build_dir)
    _check_buffers(buffers)
    air = air or _mlir_air()
    backend = air.XRTBackend(
        target_device="npu2", n_warmup_iters=warmup, n_perf_iters=iters
    )
    try:
        invoker = backend.load(air.XRTCompileArtifact(xclbin, KERNEL_NAME, insts))
        outs = invoker(*buffers)
    except (
        air.AirBackendError
    ) as e:  # e.g. pyxrt not importable: XRT not installed or not sourced
        raise ConfigError(f"{e} (or use {emulator_hint()})") from None
    finally:
        backend.unload()
    return NpuRun(
        np.asarray(outs[output])
        .view(buffers[output].dtype)
        .reshape(buffers[output].shape),
        float(backend.last_latency_us),
    )


def run_compiled_each(
    build_dir: str, buffer_sets: list[list[np.ndarray]], air=None
) -> list[tuple[np.ndarray, ...]]:
    """Load the compiled design once and dispatch it once per buffer set, in order, through the same
    invoker (mlir-air's XRTBackend.load): every argument as read back after each dispatch. A dispatch
    that depends on state a previous one left (locks, BDs) shows up as a wrong later result.
    """
    xclbin, insts = _artifact_paths(build_dir)
    for bufs in buffer_sets:
        _check_buffers(bufs)
    air = air or _mlir_air()
    backend = air.XRTBackend(target_device="npu2")
    try:
        invoker = backend.load(air.XRTCompileArtifact(xclbin, KERNEL_NAME, insts))
        return [tuple(invoker(*bufs)) for bufs in buffer_sets]
    except air.AirBackendError as e:
        raise ConfigError(f"{e} (or use {emulator_hint()})") from None
    finally:
        backend.unload()
