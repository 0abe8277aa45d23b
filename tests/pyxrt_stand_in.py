# SPDX-License-Identifier: MIT
"""A stand-in for the few names of pyxrt (XRT's Python bindings) that npu.ResidentCall uses, with the
device's memory apart from the host's: a buffer object's mapped bytes reach the device only through a
sync to it, and come back only through a sync from it, so a missing or short sync gives the kernel, or the
host, stale bytes. Every sync is logged as (buffer, direction, offset, bytes)."""

from __future__ import annotations

import types

import numpy as np

TO, FROM = "to device", "from device"
xclBOSyncDirection = types.SimpleNamespace(
    XCL_BO_SYNC_BO_TO_DEVICE=TO, XCL_BO_SYNC_BO_FROM_DEVICE=FROM
)
ert_cmd_state = types.SimpleNamespace(ERT_CMD_STATE_COMPLETED="completed")


class Xrt:
    """One stand-in pyxrt: `ext.bo`, `run`, the two enums; `log` holds the syncs, `bos` every buffer."""

    xclBOSyncDirection = xclBOSyncDirection
    ert_cmd_state = ert_cmd_state

    def __init__(self, state="completed"):
        self.log, self.bos, self.state = [], [], state
        xrt = self

        class Bo:
            def __init__(self, device, size):
                self.host = bytearray(size)
                self.device = bytearray(size)
                self.id = len(xrt.bos)
                xrt.bos.append(self)

            def map(self):
                return memoryview(self.host)

            def sync(self, direction, size=None, offset=0):
                size = len(self.host) if size is None else size
                src, dst = (
                    (self.host, self.device)
                    if direction == TO
                    else (self.device, self.host)
                )
                dst[offset : offset + size] = src[offset : offset + size]
                xrt.log.append((self.id, direction, offset, size))

        class Run:
            def __init__(self, kernel):
                self.kernel, self.args = kernel, {}

            def set_arg(self, i, bo):
                self.args[i] = bo

            def start(self):
                self.kernel([self.args[i].device for i in sorted(self.args)])

            def wait2(self):
                return xrt.state

        self.ext = types.SimpleNamespace(bo=Bo)
        self.run = Run


class Kernel:
    """A kernel on the stand-in device: fn(*arrays) -> every argument after the run (an invoker's
    result), applied to the device's bytes of its buffers viewed as `protos` (the arrays' dtypes and
    shapes), written back in place."""

    def __init__(self, fn, protos=None):
        self.fn, self.protos = fn, protos

    def __call__(self, device: list) -> None:
        arrays = [
            np.frombuffer(bytes(mem), a.dtype).reshape(a.shape)
            for mem, a in zip(device, self.protos)
        ]
        for mem, out in zip(device, self.fn(*arrays)):
            mem[:] = np.ascontiguousarray(out).reshape(-1).view(np.uint8).tobytes()
