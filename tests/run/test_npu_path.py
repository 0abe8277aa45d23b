# SPDX-License-Identifier: MIT
"""The NPU path runs through mlir-air's own XRTBackend (int4awq.run.npu.run_compiled), here against a
recording stand-in for the three names it uses: what it constructs, loads and invokes, in order.
"""

import types

import numpy as np
import pytest
from ml_dtypes import bfloat16

from int4awq.errors import ConfigError
from int4awq.run.npu import run_compiled


class StandInError(Exception):
    pass


def stand_in(log, fail=None, latency=123.5):
    """XRTBackend / XRTCompileArtifact / AirBackendError as mlir-air spells them, recording into log."""

    class Artifact:
        def __init__(self, output_binary, kernel, insts):
            log.append(("artifact", output_binary, kernel, insts))

    class Backend:
        def __init__(self, **options):
            log.append(("backend", options))
            self.last_latency_us = None

        def load(self, artifact):
            log.append(("load",))
            if fail:
                raise StandInError(fail)

            def invoker(*args):
                log.append(("invoke", [a.shape for a in args]))
                self.last_latency_us = latency
                # as mlir-air's invoker: one flat array per argument, in its dtype; C becomes all ones
                return tuple(
                    np.ones(a.size, a.dtype) if i == 2 else a.reshape(-1)
                    for i, a in enumerate(args)
                )

            return invoker

        def unload(self):
            log.append(("unload",))

    return types.SimpleNamespace(
        XRTBackend=Backend, XRTCompileArtifact=Artifact, AirBackendError=StandInError
    )


@pytest.fixture
def build_dir(tmp_path):
    (tmp_path / "air.xclbin").write_bytes(b"xclbin")
    np.arange(37, dtype=np.uint32).tofile(tmp_path / "air.insts.bin")
    return tmp_path


def buffers():
    return [
        np.ones((64, 128), bfloat16),
        np.arange(240, dtype=np.uint8).reshape(2, 3, 40),
        np.zeros((64, 16), bfloat16),
    ]


def test_the_run_is_mlir_airs_load_and_timed_invoker(build_dir):
    log = []
    res = run_compiled(
        str(build_dir), buffers(), output=2, iters=3, warmup=2, air=stand_in(log)
    )
    assert log == [
        ("backend", {"target_device": "npu2", "n_warmup_iters": 2, "n_perf_iters": 3}),
        (
            "artifact",
            str(build_dir / "air.xclbin"),
            "MLIR_AIE",
            str(build_dir / "air.insts.bin"),
        ),
        ("load",),
        ("invoke", [(64, 128), (2, 3, 40), (64, 16)]),
        ("unload",),
    ]
    assert res.mean_us == 123.5
    assert (
        res.output.shape == (64, 16)
        and res.output.dtype == bfloat16
        and (res.output == 1).all()
    )


def test_a_backend_error_is_one_line_and_still_unloads(build_dir):
    log = []
    with pytest.raises(
        ConfigError, match=r"\(pyxrt\) is not available \(or use --backend emu\)"
    ):
        run_compiled(
            str(build_dir),
            buffers(),
            2,
            air=stand_in(log, fail="XRT runtime (pyxrt) is not available"),
        )
    assert log[-1] == ("unload",)


def test_missing_artifacts_and_too_many_buffers(build_dir, tmp_path_factory):
    empty = tmp_path_factory.mktemp("empty")
    with pytest.raises(ConfigError, match="air.xclbin is missing: run `make compile`"):
        run_compiled(str(empty), buffers(), 2, air=stand_in([]))
    with pytest.raises(ConfigError, match="at most 5"):
        run_compiled(str(build_dir), buffers() * 2, 2, air=stand_in([]))


def test_each_buffer_set_is_one_dispatch_of_one_loaded_design(build_dir):
    """run_compiled_each (the bring-up ladder's repeated dispatch): one backend, one load, then one
    invocation per buffer set in order, every argument returned, the backend unloaded.
    """
    from int4awq.run.npu import run_compiled_each

    log = []
    sets = [buffers(), buffers()[:2] + [np.zeros((64, 16), bfloat16) + 1]]
    outs = run_compiled_each(str(build_dir), sets, air=stand_in(log))
    assert [e[0] for e in log] == [
        "backend",
        "artifact",
        "load",
        "invoke",
        "invoke",
        "unload",
    ]
    assert log[0] == ("backend", {"target_device": "npu2"})
    assert len(outs) == 2 and all(len(o) == 3 for o in outs)
    assert outs[1][1].tolist() == list(range(240))


def test_each_dispatch_refuses_what_a_single_run_refuses(build_dir, tmp_path):
    from int4awq.run.npu import run_compiled_each

    with pytest.raises(ConfigError, match="air.xclbin is missing"):
        run_compiled_each(str(tmp_path / "none"), [buffers()], air=stand_in([]))
    with pytest.raises(ConfigError, match="at most 5"):
        run_compiled_each(str(build_dir), [buffers() * 2], air=stand_in([]))
    log = []
    with pytest.raises(ConfigError, match="pyxrt"):
        run_compiled_each(
            str(build_dir),
            [buffers()],
            air=stand_in(log, fail="pyxrt is not available"),
        )
    assert log[-1] == ("unload",)


def test_numerics_line_shows_the_ladders_last_probe_or_how_to_run_it(
    tmp_path, monkeypatch
):
    from int4awq.run import npu

    monkeypatch.setattr(npu, "NUMERICS_FILE", str(tmp_path / "numerics.txt"))
    assert npu.numerics_line().startswith(
        "numerics probe: not run here (make bringup BACKEND=npu"
    )
    (tmp_path / "numerics.txt").write_text(
        "npu: as the host model assumes\nconv_even set: rounding conv_even\n"
    )
    assert npu.numerics_line() == (
        "numerics probe (make bringup): npu: as the host model assumes | conv_even set: rounding conv_even"
    )


def _resident(kernel_fn, protos, state="completed"):
    from pyxrt_stand_in import Kernel, Xrt

    from int4awq.run.npu import ResidentCall

    xrt = Xrt(state)
    backend = types.SimpleNamespace(device="npu", kernel=Kernel(kernel_fn, protos))
    return xrt, ResidentCall(backend, once=[0], partial=[1], read=[3], xrt=xrt)


def test_a_resident_call_writes_weights_once_and_reads_back_only_what_is_named():
    """Arguments (weights, cache, row, out): out = weights[0] * row + the cache's sum, on a stand-in device
    whose memory is apart from the host's. The first call writes all four and reads back `out` alone;
    the second writes the row whole, the cache only at its dirty range and the weights not at all, and
    the kernel sees the new row and the new cache entry."""
    from pyxrt_stand_in import FROM, TO

    def kernel(w, cache, row, out):
        return w, cache, row, (w[0] * row + cache.sum()).astype(np.float32)

    w = np.full(1000, 3.0, np.float32)
    cache = np.zeros(16, np.float32)
    row, out = np.ones(4, np.float32), np.zeros(4, np.float32)
    xrt, call = _resident(kernel, [w, cache, row, out])
    got = call(w, cache, row, out)
    np.testing.assert_array_equal(got[3], [3.0] * 4)
    assert got[0] is w and got[2] is row  # not read back: as given
    assert sorted((b, d, o, n) for b, d, o, n in xrt.log if d == TO) == [
        (0, TO, 0, 4000),
        (1, TO, 0, 64),
        (2, TO, 0, 16),
        (3, TO, 0, 16),
    ]
    assert [e for e in xrt.log if e[1] == FROM] == [(3, FROM, 0, 16)]
    assert (call.written, call.read_back) == (4096, 16)

    xrt.log.clear()
    w[:] = (
        100.0  # a weight changed on the host after the first call never reaches the device
    )
    cache[5], row[:] = 2.0, 10.0
    got = call(w, cache, row, out, dirty={1: [(20, 4)]})
    np.testing.assert_array_equal(got[3], [32.0] * 4)
    assert [e for e in xrt.log if e[1] == TO] == [
        (1, TO, 20, 4),
        (2, TO, 0, 16),
        (3, TO, 0, 16),
    ]
    assert call.written == 36


def test_a_resident_call_without_the_dirty_range_leaves_the_device_cache_stale():
    """The partial rule has teeth: a cache entry the host changed but did not name as dirty does not reach
    the kernel."""

    def kernel(w, cache, row, out):
        return w, cache, row, np.full(4, cache.sum(), np.float32)

    args = [np.ones(4, np.float32), np.zeros(16, np.float32), np.ones(4, np.float32)]
    args.append(np.zeros(4, np.float32))
    _, call = _resident(kernel, args)
    call(*args)
    args[1][7] = 5.0
    assert call(*args)[3][0] == 0.0
    assert call(*args, dirty={1: [(28, 4)]})[3][0] == 5.0


def test_a_resident_run_that_did_not_complete_is_a_run_failure():
    from int4awq.errors import RunFailure

    args = [np.ones(4, np.float32) for _ in range(4)]
    _, call = _resident(lambda *a: a, args, state="timeout")
    with pytest.raises(RunFailure, match="did not complete: timeout"):
        call(*args)
