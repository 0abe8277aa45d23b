# SPDX-License-Identifier: MIT
"""Run a compiled design on an NPU2 through XRT's Python binding (pyxrt).

The sequence is the one mlir-air's XRTBackend.load uses for an xclbin: open device 0, register the
xclbin, open a hardware context, find the kernel whose name contains MLIR_AIE, put the instruction
stream in a cacheable BO of group_id(1), each data buffer in a host_only BO of group_id(3 + i), sync
inputs to the device, call kernel(3, instr_bo, instruction_count, *data_bos), wait, sync back.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass

import numpy as np

from .errors import ConfigError

KERNEL_NAME = "MLIR_AIE"
NPU2_MODELS = ("npu4", "npu5", "npu6", "strix", "krackan")


def emulator_hint() -> str:
    """How to pick the emulator instead: the make variable when a make target runs the program (the
    Makefile sets INT4AWQ_MAKE_TARGET), the command-line flag otherwise."""
    target = os.environ.get("INT4AWQ_MAKE_TARGET")
    return f"`make {target} BACKEND=emu`" if target else "--backend emu"


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
    outputs: list[np.ndarray]
    times_us: list[float]  # one per timed iteration, kernel call to completion


def run_xclbin(
    xclbin: str,
    insts: str,
    buffers: list[np.ndarray],
    outputs: list[int],
    iters: int = 1,
    warmup: int = 0,
    xrt=None,
) -> NpuRun:
    """Run the design once per iteration on `buffers` (inputs and outputs, in argument order).

    outputs: indices of the buffers to read back. At most 5 data buffers fit the kernel's arguments.
    """
    if xrt is None:
        try:
            import pyxrt as xrt
        except ImportError:
            raise ConfigError(
                f"pyxrt is not importable: source XRT's setup.sh (see README) or use {emulator_hint()}"
            ) from None
    for path in (xclbin, insts):
        if not os.path.isfile(path):
            raise ConfigError(
                f"{path} is missing: run `make compile` with the same configuration first"
                f" (or use {emulator_hint()})"
            )
    if len(buffers) > 5:
        raise ConfigError(
            f"{len(buffers)} data buffers; the NPU kernel takes at most 5"
        )

    device = xrt.device(0)
    image = xrt.xclbin(xclbin)
    device.register_xclbin(image)
    context = xrt.hw_context(device, image.get_uuid())
    names = [k.get_name() for k in image.get_kernels()]
    match = [name for name in names if KERNEL_NAME in name]
    if not match:
        raise ConfigError(
            f"{xclbin} has no kernel named like {KERNEL_NAME} (it has {names})"
        )
    kernel = xrt.kernel(context, match[0])

    instr = np.fromfile(insts, dtype=np.uint32)
    instr_bo = xrt.bo(device, instr.nbytes, xrt.bo.cacheable, kernel.group_id(1))
    instr_bo.write(instr.tobytes(), 0)
    instr_bo.sync(xrt.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE)

    bos, views = [], []
    for i, buf in enumerate(buffers):
        raw = np.ascontiguousarray(buf).view(np.uint8).reshape(-1)
        bo = xrt.bo(device, raw.nbytes, xrt.bo.host_only, kernel.group_id(3 + i))
        view = np.frombuffer(bo.map(), dtype=np.uint8, count=raw.nbytes)
        view[:] = raw
        bo.sync(xrt.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE)
        bos.append(bo)
        views.append(view)

    completed = getattr(xrt.ert_cmd_state, "ERT_CMD_STATE_COMPLETED", None)
    times = []
    for it in range(warmup + iters):
        t0 = time.perf_counter()
        state = kernel(3, instr_bo, len(instr), *bos).wait()
        elapsed = (time.perf_counter() - t0) * 1e6
        if completed is not None and state is not None and state != completed:
            raise RuntimeError(f"NPU run did not complete: {state}")
        if it >= warmup:
            times.append(elapsed)

    result = []
    for i in outputs:
        bos[i].sync(xrt.xclBOSyncDirection.XCL_BO_SYNC_BO_FROM_DEVICE)
        result.append(views[i].copy().view(buffers[i].dtype).reshape(buffers[i].shape))
    return NpuRun(result, times)
