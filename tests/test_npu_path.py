# SPDX-License-Identifier: MIT
"""The NPU path against a recording stand-in for pyxrt: what it allocates, syncs and calls, in order."""

import types

import numpy as np
import pytest
from ml_dtypes import bfloat16

from int4awq.errors import ConfigError
from int4awq.npu import run_xclbin

TO_DEVICE, FROM_DEVICE = "to_device", "from_device"


class Recorder:
    """Just enough of pyxrt to run run_xclbin; every call is appended to `log`."""

    def __init__(
        self, kernel_names=("MLIR_AIE",), device_result=None, state="completed"
    ):
        self.log = []
        log = self.log
        rec = self

        class bo:
            cacheable, host_only = "cacheable", "host_only"

            def __init__(self, device, size, flags, group):
                self.size, self.flags, self.group = size, flags, group
                self.mem = bytearray(size)
                self.index = len([e for e in log if e[0] == "bo"])
                log.append(("bo", size, flags, group))

            def write(self, data, offset):
                self.mem[offset : offset + len(data)] = data
                log.append(("write", self.group, len(data)))

            def map(self):
                return memoryview(self.mem)

            def sync(self, direction):
                log.append(("sync", self.group, direction))
                if (
                    direction == FROM_DEVICE
                    and device_result is not None
                    and self.group == 5
                ):
                    self.mem[:] = device_result.tobytes()

        class kernel:
            def __init__(self, context, name):
                log.append(("kernel", name))

            def group_id(self, i):
                return i

            def __call__(self, opcode, instr_bo, n_instr, *bos):
                log.append(
                    (
                        "call",
                        opcode,
                        instr_bo.group,
                        n_instr,
                        tuple(b.group for b in bos),
                    )
                )
                return types.SimpleNamespace(wait=lambda: rec.state)

        self.state = state
        self.bo, self.kernel = bo, kernel
        self.device = lambda i: log.append(("device", i)) or types.SimpleNamespace(
            register_xclbin=lambda x: log.append(("register",))
        )
        self.xclbin = lambda path: types.SimpleNamespace(
            get_uuid=lambda: "uuid",
            get_kernels=lambda: [
                types.SimpleNamespace(get_name=lambda n=n: n) for n in kernel_names
            ],
        )
        self.hw_context = lambda device, uuid: log.append(("hw_context", uuid))
        self.xclBOSyncDirection = types.SimpleNamespace(
            XCL_BO_SYNC_BO_TO_DEVICE=TO_DEVICE, XCL_BO_SYNC_BO_FROM_DEVICE=FROM_DEVICE
        )
        self.ert_cmd_state = types.SimpleNamespace(ERT_CMD_STATE_COMPLETED="completed")


@pytest.fixture
def artifacts(tmp_path):
    xclbin, insts = tmp_path / "air.xclbin", tmp_path / "air.insts.bin"
    xclbin.write_bytes(b"xclbin")
    np.arange(37, dtype=np.uint32).tofile(insts)
    return str(xclbin), str(insts)


def buffers():
    a = np.ones((64, 128), bfloat16)
    w = np.arange(2 * 3 * 40, dtype=np.uint8).reshape(2, 3, 40)
    c = np.zeros((64, 16), bfloat16)
    return [a, w, c]


def test_sequence_groups_sizes_and_syncs(artifacts):
    want = (np.arange(64 * 16) % 7).astype(bfloat16).reshape(64, 16)
    xrt = Recorder(
        kernel_names=("other", "MLIR_AIE:matmul_int4_packed"), device_result=want
    )
    res = run_xclbin(*artifacts, buffers(), outputs=[2], iters=3, warmup=2, xrt=xrt)
    log = xrt.log
    assert log[:3] == [("device", 0), ("register",), ("hw_context", "uuid")]
    assert ("kernel", "MLIR_AIE:matmul_int4_packed") in log
    bos = [e for e in log if e[0] == "bo"]
    # Instructions: 37 words in a cacheable BO of group 1; data: host_only BOs of groups 3, 4, 5 by size.
    assert bos == [
        ("bo", 37 * 4, "cacheable", 1),
        ("bo", 64 * 128 * 2, "host_only", 3),
        ("bo", 2 * 3 * 40, "host_only", 4),
        ("bo", 64 * 16 * 2, "host_only", 5),
    ]
    calls = [e for e in log if e[0] == "call"]
    assert calls == [("call", 3, 1, 37, (3, 4, 5))] * 5  # 2 warm-up + 3 timed
    first_call = log.index(calls[0])
    to_device = [
        e[1] for e in log[:first_call] if e[:1] == ("sync",) and e[2] == TO_DEVICE
    ]
    assert to_device == [1, 3, 4, 5]
    after = [e for e in log[first_call:] if e[0] == "sync"]
    assert after == [
        ("sync", 5, FROM_DEVICE)
    ]  # only the output comes back, after the last run
    assert len(res.times_us) == 3
    np.testing.assert_array_equal(res.outputs[0], want)


def test_inputs_reach_the_buffers_byte_for_byte(artifacts):
    xrt = Recorder()
    seen = {}
    orig_sync = xrt.bo.sync

    def sync(self, direction):
        seen.setdefault(self.group, bytes(self.mem))
        orig_sync(self, direction)

    xrt.bo.sync = sync
    bufs = buffers()
    run_xclbin(*artifacts, bufs, outputs=[2], xrt=xrt)
    assert seen[1] == np.arange(37, dtype=np.uint32).tobytes()
    assert seen[3] == bufs[0].tobytes() and seen[4] == bufs[1].tobytes()


def test_failed_run_is_reported(artifacts):
    with pytest.raises(RuntimeError, match="did not complete: timeout"):
        run_xclbin(*artifacts, buffers(), outputs=[2], xrt=Recorder(state="timeout"))


def test_missing_artifacts_and_kernel(artifacts, tmp_path):
    with pytest.raises(ConfigError, match="missing: run `make compile`"):
        run_xclbin(
            str(tmp_path / "nope.xclbin"), artifacts[1], buffers(), [2], xrt=Recorder()
        )
    with pytest.raises(ConfigError, match="no kernel named like MLIR_AIE"):
        run_xclbin(*artifacts, buffers(), [2], xrt=Recorder(kernel_names=("foo",)))
    with pytest.raises(ConfigError, match="at most 5"):
        run_xclbin(*artifacts, buffers() * 2, [2], xrt=Recorder())
