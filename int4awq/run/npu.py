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

from ..errors import REPO, ConfigError, RunFailure

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


def _pyxrt():
    import pyxrt

    return pyxrt


class ResidentCall:
    """A loaded module's kernel called with device buffers that live from call to call, as mlir-air's
    LLM examples call theirs (programming_examples/llms/shared/infra/cache.py, KernelCache.load_and_run, at
    e972f29; its llama32_1b_int4 decode is measured at 15.92 tok/s through it): one xrt.ext.bo an argument,
    allocated and mapped on the first call (the ELF flow's, as XRTBackend.load makes them), then

    * `once` arguments (weights, norms, the launches' intermediates) written and synced to the device on
      the first call only;
    * `partial` ones (the KV caches) whole on the first call, afterwards only the byte ranges given as
      `dirty` (the rows appended since);
    * every other argument written whole every call (the rows a token gives);
    * only `read` arguments synced back and returned as read; the others come back as given, so a caller
      must not read a buffer it did not name (mlir-air's invoker, by contrast, allocates, writes and reads
      back every argument on every call: a token would move all the weights both ways).

    backend: a loaded XRTBackend (its `device` and `kernel`, as load() leaves them for an ELF).
    """

    def __init__(self, backend, once=(), partial=(), read=(), xrt=None):
        self.backend, self.xrt = backend, xrt
        self.once, self.partial, self.read = set(once), set(partial), set(read)
        self.bos, self.maps = None, None
        self.written = self.read_back = 0  # bytes of the last call, each way

    def _sync(self, i: int, direction, size: int, offset: int = 0) -> None:
        if offset == 0 and size == self.maps[i].size:
            self.bos[i].sync(direction)
        else:
            self.bos[i].sync(direction, size, offset)

    def __call__(self, *arrays, dirty: dict | None = None) -> list:
        xrt = self.xrt or _pyxrt()
        to_device = xrt.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE
        raw = [np.ascontiguousarray(a).reshape(-1).view(np.uint8) for a in arrays]
        first = self.bos is None
        if first:
            self.bos = [xrt.ext.bo(self.backend.device, r.size) for r in raw]
            self.maps = [
                np.frombuffer(bo.map(), np.uint8, r.size)
                for bo, r in zip(self.bos, raw)
            ]
        elif [m.size for m in self.maps] != [r.size for r in raw]:
            raise ValueError("a resident call's buffers changed size between calls")
        self.written = 0
        for i, r in enumerate(raw):
            if first or i not in self.once | self.partial:
                ranges = [(0, r.size)]
            elif i in self.partial:
                ranges = (dirty or {}).get(i, [])
            else:
                continue
            for offset, size in ranges:
                self.maps[i][offset : offset + size] = r[offset : offset + size]
                self._sync(i, to_device, size, offset)
                self.written += size
        run = xrt.run(self.backend.kernel)
        for i, bo in enumerate(self.bos):
            run.set_arg(i, bo)
        run.start()
        state = run.wait2()
        completed = getattr(xrt.ert_cmd_state, "ERT_CMD_STATE_COMPLETED", None)
        if state is not None and completed is not None and state != completed:
            # a run the driver timed out or aborted leaves partly written outputs (mlir-air #1822)
            raise RunFailure(f"the NPU run did not complete: {state}")
        self.read_back, out = 0, []
        for i, a in enumerate(arrays):
            if i in self.read:
                self._sync(
                    i, xrt.xclBOSyncDirection.XCL_BO_SYNC_BO_FROM_DEVICE, raw[i].size
                )
                out.append(self.maps[i].copy().view(a.dtype).reshape(a.shape))
                self.read_back += raw[i].size
            else:
                out.append(a)
        return out
