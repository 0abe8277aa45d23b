# SPDX-License-Identifier: MIT
"""The single-tile kernel harness of the bring-up ladder (host/bringup.py): one PE, plain DMAs.

The simplest structure mlir-air runs on hardware: one launch, one segment, a 1x1 herd whose L1 buffers are
filled from and drained to DDR by air.dma_memcpy_nd (mlir-air data_transfer_transpose/dma/transpose.py,
run_makefile_peano.lit: REQUIRES ryzen_ai, peano), calling a linked kernel on them
(vector_matrix_multiplication/bf16/single_core, run_npu2_makefile_peano.lit: one PE zero-fills its
accumulator, calls its kernel and sends the result out). Each probe calls kernel entries on fixed inputs and
returns their raw outputs, so a wrong number on NPU2 points at the kernel's code generation, not at data
movement:

    zero        ->  zero(acc)                              ->  acc
    accumulate  rec, A  ->  zero(acc); accumulate(rec, A, acc, scratch)  ->  acc, scratch
    drain       acc     ->  drain(acc, C)                  ->  C

At most two buffers in and two out: a compute tile has 2 S2MM and 2 MM2S DMA channels.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
from ml_dtypes import bfloat16

from int4_packed_record import GEMM_ENTRIES
from int4awq.kernel import record
from int4awq.kernel.kernel_model import (
    GemvHostKernel,
    HostKernel,
    a_tile_blocked,
    bf16_rne,
    bfp16_blocks,
    gemv_acc_elems,
    kernel_gemm_model,
)
from int4awq.formats.quant import AwqWeights

# The probes' kernel objects: the GEMM tile of `make run8x4` (64 x 64 x 64, GS 128) and the decode GEMV's
# record tile at its smallest K-chunk; the numerics probe also builds the GEMV object under floor rounding.
PROBE_GEMM = record.KernelObject("gemm", 64, 64, 128, 64)
# tile_k 16: each fold span's A line is 4 block vectors, 288 bytes, which end inside a 512-bit word; the
# kernel pads the stream to 8 (576 bytes, whole words: the store FIFO writes only whole words), and the
# probe checks that the 4 blocks' last bytes arrive (gate/up's 64x128x16).
PROBE_GEMM_K16 = record.KernelObject("gemm", 16, 16, 128, 16)
PROBE_GEMV = record.KernelObject("gemv", 64, 64, 128)
PROBE_GEMV_FLOOR = record.KernelObject("gemv", 64, 64, 128, rounding="floor")
PROBE_OBJECTS = (PROBE_GEMM, PROBE_GEMM_K16, PROBE_GEMV, PROBE_GEMV_FLOOR)
GEMV_PROBE_ROWS = 5  # a partial 8-row band

STAGES = ("zero", "accumulate", "drain")
ENTRY_ARGS = {  # each entry's buffers, in its argument order (then m, for the GEMV's)
    "zero": ("acc",),
    "accumulate": ("record", "a", "acc", "scratch"),
    "drain": ("acc", "c"),  # the GEMV's; the GEMM drains in place (GEMM_DRAIN_ARGS)
}
GEMM_DRAIN_ARGS = ("acc",)  # bf16 C blocks into the accumulator's first half
BLOCK_BYTES = 9  # bfp16ebs8: the exponent byte, then 8 mantissas
BFP16_BIAS = 133  # value = mantissa * 2^(E - 133)


@dataclass(frozen=True)
class Probe:
    """One probe design: the kernel object it links, its rows (tile_m for the GEMM, m for the GEMV) and the
    entries it calls."""

    obj: record.KernelObject
    rows: int
    stage: str

    def __post_init__(self):
        from int4awq.errors import ConfigError

        if self.stage not in STAGES:
            raise ConfigError(f"probe stage {self.stage!r}: one of {', '.join(STAGES)}")
        if self.gemv and self.obj.tile_k > self.obj.gs:
            # a_line reads the GEMV's A line as one span (several spans are each padded to 64 bytes)
            raise ConfigError(
                "a GEMV probe takes a record tile of one fold span (tile_k <= gs)"
            )

    @property
    def gemv(self) -> bool:
        return self.obj.entries == "gemv"

    @property
    def acc_elems(self) -> int:
        if self.gemv:
            return gemv_acc_elems(self.rows, self.obj.tile_n)
        return self.rows * self.obj.tile_n

    @property
    def kernel(self) -> record.KernelObject:
        return self.obj

    @property
    def kernel_object(self) -> str:
        return self.obj.lib_name()

    @property
    def name(self) -> str:
        return f"probe_{self.stage}_{self.obj.stem}_r{self.rows}"

    def args(self) -> list[tuple[str, tuple[int], type]]:
        """(name, shape, dtype) of the design's arguments, inputs first."""
        o = self.obj
        acc = ("acc", (self.acc_elems,), np.float32)
        if self.stage == "zero":
            return [acc]
        c = ("c", (self.rows * o.tile_n,), bfloat16)
        if self.stage == "drain" and not self.gemv:
            # the accumulator as the GEMM design types it: the bf16 C it ends as, twice the f32 count
            return [("acc", (2 * self.acc_elems,), bfloat16), c]
        if self.stage == "drain":
            return [acc, c]
        return [
            ("record", (o.record_bytes,), np.uint8),
            ("a", (self.rows * o.tile_k,), bfloat16),
            acc,
            self._scratch(),
        ]

    def _scratch(self) -> tuple[str, tuple[int], type]:
        o = self.obj
        return ("scratch", (record.w_scratch_bytes(o.tile_n, o.tile_k),), np.uint8)

    @property
    def drains_in_place(self) -> bool:
        """The GEMM's drain: C is the first half of the accumulator, the scratch an L1 buffer only."""
        return self.stage == "drain" and not self.gemv

    def l1_buffers(self) -> list[tuple[str, tuple[int], type]]:
        """(name, shape, dtype) of the probe's L1 buffers: one per argument (the in-place drain's C is
        read out of the accumulator)."""
        if self.drains_in_place:
            return [self.args()[0]]
        return self.args()

    def entry_args(self, entry: str) -> tuple[str, ...]:
        return GEMM_DRAIN_ARGS if self.drains_in_place else ENTRY_ARGS[entry]

    @property
    def n_inputs(self) -> int:
        return {"zero": 0, "accumulate": 2, "drain": 1}[self.stage]

    def drain_inputs(self, acc: np.ndarray) -> list[np.ndarray]:
        """The drain probe's input for f32 accumulator values (the GEMM takes their bytes as bf16)."""
        return [acc.view(bfloat16) if self.drains_in_place else acc]

    def buffers(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """The run's buffers in argument order: the inputs, then zeroed outputs."""
        outs = [np.zeros(s, t) for _, s, t in self.args()[self.n_inputs :]]
        return list(inputs) + outs


# ------------------------------------------------------------------------------------------ the host build
def host_outputs(probe: Probe, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """What the host build of the same kernel source leaves in the probe's outputs for these inputs."""
    o = probe.obj
    if probe.gemv:
        hk = GemvHostKernel(o.tile_n, o.tile_k, o.gs, rounding=o.rounding)
        acc = hk.g_acc[: probe.acc_elems]
        m = probe.rows
        if probe.stage == "drain":
            acc[...] = inputs[0]
            hk.lib.gemv_int4_drain(acc.ctypes.data, hk.g_out.ctypes.data, m)
            return [hk.g_out[: m * o.tile_n].copy()]
        hk.gemv_zero(acc, m)
        if probe.stage == "zero":
            return [acc.copy()]
        hk.gemv_accumulate(inputs[0], inputs[1].reshape(m, o.tile_k), acc)
        return [acc.copy(), hk.scratch.copy()]
    hk = HostKernel(o.tile_m, o.tile_n, o.tile_k, o.gs, rounding=o.rounding)
    if probe.stage == "drain":
        hk.c_acc[...] = inputs[0].view(np.float32)
        return [hk.drain_blocks()]  # C blocks, as the probe reads them
    hk.zero()
    if probe.stage == "zero":
        return [hk.c_acc.copy()]
    hk.accumulate(inputs[0], inputs[1])
    return [hk.c_acc.copy(), hk.scratch.copy()]


# ------------------------------------------------------------------------------------------ inputs
def accumulate_inputs(
    probe: Probe, seed: int, a_rows: np.ndarray | None = None
) -> tuple[list[np.ndarray], np.ndarray, AwqWeights]:
    """([record, A in the entry's order], A [rows, tile_k], weights): seeded AWQ weights of one record
    (K = max(tile_k, gs), the record its first K-chunk) and seeded A, or the given A rows.
    """
    from int4awq.formats.quant import random_activations, random_weights

    o = probe.obj
    w = random_weights(max(o.tile_k, o.gs), o.tile_n, o.gs, seed)
    rec = record.pack_weights(w, o.tile_n, o.tile_k, dense=o.dense)[0, 0]
    a = random_activations(probe.rows, o.tile_k, seed + 1) if a_rows is None else a_rows
    a_in = a.reshape(-1) if probe.gemv else a_tile_blocked(a)
    return [rec, np.ascontiguousarray(a_in)], a, w


def drain_input(probe: Probe, seed: int) -> np.ndarray:
    """f32 accumulator values that exercise the drain's rounding: random magnitudes over many binades,
    with ties to even between bf16 neighbours."""
    rng = np.random.default_rng(seed)
    x = (
        rng.standard_normal(probe.acc_elems)
        * 2.0 ** rng.integers(-20, 20, probe.acc_elems)
    ).astype(np.float32)
    ties = x.view(np.uint32)
    ties[::7] = (ties[::7] & np.uint32(0xFFFF0000)) | np.uint32(
        0x8000
    )  # exactly half way
    return x


# ------------------------------------------------------------------------------------------ independent expectations
def acc_to_rows(probe: Probe, acc: np.ndarray) -> np.ndarray:
    """The kernel's accumulator as C rows [rows, tile_n]. The GEMV's: 8x8 blocks (b, nb) at
    (b * tile_n/8 + nb) * 64, row-major inside, rows past `rows` (a band's padding) dropped; the GEMM's:
    blocks (mb, nb) at (nb * tile_m/8 + mb) * 64 (column-block outer)."""
    tn = probe.obj.tile_n
    acc = np.asarray(acc).reshape(-1)
    if probe.gemv:
        bands = acc.size // (8 * tn)
        blocks = acc.reshape(bands, tn // 8, 8, 8).transpose(0, 2, 1, 3)
        return blocks.reshape(bands * 8, tn)[: probe.rows]
    mbs = probe.rows // 8
    blocks = acc[: probe.rows * tn].reshape(tn // 8, mbs, 8, 8).transpose(1, 2, 0, 3)
    return blocks.reshape(probe.rows, tn)


def expected_c(probe: Probe, a: np.ndarray, w: AwqWeights) -> np.ndarray:
    """C [rows, tile_n] of zero + one accumulate + drain, from the numpy model of the kernel's arithmetic
    (kernel_model.kernel_gemm_model; A zero past the record's K-chunk)."""
    a_full = np.zeros((a.shape[0], w.k), bfloat16)
    a_full[:, : a.shape[1]] = a
    return kernel_gemm_model(a_full, w, probe.obj.tile_k)


def decode_blocks(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """bfp16ebs8 blocks as stored (9 bytes each) -> (exponent bytes [n], mantissas [n, 8] int)."""
    b = np.asarray(raw, np.uint8).reshape(-1, BLOCK_BYTES)
    return b[:, 0].astype(int), b[:, 1:].view(np.int8).astype(int)


def block_values(exps: np.ndarray, mants: np.ndarray) -> np.ndarray:
    return np.ldexp(mants.astype(np.float64), (exps - BFP16_BIAS)[:, None])


def w_lines_expected(w: AwqWeights, tile_n: int, tile_k: int) -> np.ndarray:
    """(q - z) of the record's K-chunk in the W pair lines' block order: pair p, K block kb, column block
    h, column j -> values [tile_n/16, tile_k/8, 2, 8, 8] (the K block's 8 values last).
    """
    g = np.arange(tile_k) // w.gs
    d = w.q[:tile_k].astype(int) - w.z[g].astype(int)  # [tile_k, tile_n]
    return d.reshape(tile_k // 8, 8, tile_n // 16, 2, 8).transpose(2, 0, 3, 4, 1)


def w_lines(
    scratch: np.ndarray, tile_n: int, tile_k: int
) -> tuple[np.ndarray, np.ndarray]:
    """(exponents, values) of the W pair lines in scratch, shaped like w_lines_expected."""
    line = record.w_pair_line_bytes(tile_k)
    used = 2 * (tile_k // 8) * 8 * BLOCK_BYTES
    raw = scratch[: tile_n // 16 * line].reshape(tile_n // 16, line)[:, :used]
    e, m = decode_blocks(raw)
    shape = (tile_n // 16, tile_k // 8, 2, 8)
    return e.reshape(shape), block_values(e, m).reshape(shape + (8,))


def a_line(
    scratch: np.ndarray, tile_n: int, tile_k: int, vectors: int
) -> tuple[np.ndarray, np.ndarray]:
    """(exponent bytes [blocks], mantissas [blocks, 8]) of the A pair line: `vectors` block vectors of 8
    blocks each (2 per K block for the GEMM's two 8-row blocks, 1 for the GEMV's band).
    """
    start = tile_n // 16 * record.w_pair_line_bytes(tile_k)
    return decode_blocks(scratch[start : start + vectors * 8 * BLOCK_BYTES])


def a_line_rows(probe: Probe, a: np.ndarray) -> np.ndarray:
    """The A values the A line holds after one accumulate call, in its block order [blocks, 8]: the GEMV's
    last 8-row band (one block vector per K block, block r = row r), or the GEMM's last two 8-row blocks
    (interleaved along K: K block kb, then row block 0 / 1, then row r)."""
    tk = probe.obj.tile_k
    if probe.gemv:
        band = np.zeros((8, tk), np.float32)
        r0 = (probe.rows - 1) // 8 * 8
        band[: probe.rows - r0] = a[r0:]
        return band.reshape(8, tk // 8, 8).transpose(1, 0, 2).reshape(-1, 8)
    last = a[-16:].astype(np.float32).reshape(2, 8, tk // 8, 8)
    return last.transpose(2, 0, 1, 3).reshape(-1, 8)


def a_line_expected(probe: Probe, a: np.ndarray) -> np.ndarray:
    """The A line's values under the host model's bfp16 conversion (round half to even)."""
    return bfp16_blocks(a_line_rows(probe, a))


def drain_expected(probe: Probe, acc: np.ndarray) -> np.ndarray:
    """What the drain writes: the GEMV's C rows; the GEMM's bf16 blocks in the accumulator's own order
    (in place, one block for one block)."""
    if probe.gemv:
        acc = acc_to_rows(probe, acc)
    return bf16_rne(np.asarray(acc).reshape(-1)).astype(bfloat16)


# ------------------------------------------------------------------------------------------ the AIR design
def build_module(probe: Probe):
    """The probe's AIR module: one launch, one segment, a 1x1 herd (imports air when called)."""
    from air.dialects import arith
    from air.dialects.air import (
        MemorySpace,
        T,
        dma_memcpy_nd,
        herd,
        launch,
        module_builder,
        segment,
    )
    from air.dialects.func import CallOp, FuncOp
    from air.dialects.memref import AllocOp
    from air.ir import (
        BF16Type,
        F32Type,
        IntegerAttr,
        IntegerType,
        MemRefType,
        StringAttr,
        UnitAttr,
    )

    elem = {
        np.dtype(np.uint8): lambda: IntegerType.get_signless(8),
        np.dtype(bfloat16): BF16Type.get,
        np.dtype(np.float32): F32Type.get,
    }

    @module_builder
    def build():
        l1 = IntegerAttr.get(T.i32(), MemorySpace.L1)
        args = probe.args()
        l3 = [MemRefType.get(list(s), elem[np.dtype(t)]()) for _, s, t in args]
        l1t = {
            n: MemRefType.get(list(s), elem[np.dtype(t)](), memory_space=l1)
            for n, s, t in probe.l1_buffers()
        }
        i32 = T.i32()
        rows = [i32] if probe.gemv else []
        calls = {
            "zero": ["zero"],
            "accumulate": ["zero", "accumulate"],
            "drain": ["drain"],
        }[probe.stage]
        funcs = {}
        for entry in calls:
            params = [l1t[n] for n in probe.entry_args(entry)] + rows
            name = f"gemv_int4_{entry}" if probe.gemv else GEMM_ENTRIES[entry]
            f = FuncOp(name, (params, []), visibility="private")
            f.attributes["link_with"] = StringAttr.get(probe.kernel_object)
            f.attributes["llvm.emit_c_interface"] = UnitAttr.get()
            funcs[entry] = f
        names = [n for n, _, _ in args]

        @FuncOp.from_py_func(*l3)
        def kernel_probe(*l3_args):
            @launch(operands=list(l3_args))
            def lb(*largs):
                @segment(name="probe_seg", operands=list(largs))
                def sb(*sargs):
                    @herd(name="probe", sizes=[1, 1], operands=list(sargs))
                    def hb(_x, _y, _sx, _sy, *hargs):
                        ddr = dict(zip(names, hargs))
                        buf = {n: AllocOp(l1t[n], [], []) for n in l1t}
                        for n in names[: probe.n_inputs]:
                            dma_memcpy_nd(buf[n], ddr[n])
                        m = [arith.ConstantOp(i32, probe.rows)] if probe.gemv else []
                        for entry in calls:
                            CallOp(
                                funcs[entry],
                                [buf[n] for n in probe.entry_args(entry)] + m,
                            )
                        for n in names[probe.n_inputs :]:
                            if probe.drains_in_place:  # C: the accumulator's first half
                                size = probe.rows * probe.obj.tile_n
                                dma_memcpy_nd(
                                    ddr[n],
                                    buf["acc"],
                                    src_offsets=[0],
                                    src_sizes=[size],
                                    src_strides=[1],
                                )
                            else:
                                dma_memcpy_nd(ddr[n], buf[n])

    return build()


def backend_options(probe: Probe) -> dict:
    return dict(
        target_device="npu2",
        stack_size=record.kernel_stack_bytes(),
        omit_while_true_loop=False,
        runtime_loop_tiling_sizes=[
            1,
            1,
        ],  # one launch iteration, a 1x1 herd (as bfp16/run.py's small herds)
        instance_name="kernel_probe",
    )


# ------------------------------------------------------------------------------------------ running
class ProbeRunner:
    """Runs probes on the emulator (the host build, through the same AIR module) or on NPU2 (aircc and
    Peano into build/bringup/<probe>, then mlir-air's XRTBackend)."""

    def __init__(self, backend: str, build_root: str):
        self.backend, self.build_root = backend, build_root

    def run(self, probe: Probe, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """The probe's outputs for these inputs."""
        bufs = probe.buffers(inputs)
        if self.backend == "emu":
            outs = self._emulate(probe, bufs)
        else:
            outs = self._npu(probe, bufs)
        return [
            np.array(o).view(b.dtype).reshape(b.shape)
            for o, b in zip(outs[probe.n_inputs :], bufs[probe.n_inputs :])
        ]

    def _emulate(self, probe, bufs):
        from air.backend.xrt import XRTBackend

        from int4awq.kernel.kernel_model import build_host_kernel

        os.environ["AIR_EMU_LIB_PATH"] = str(build_host_kernel(probe.obj).parent)
        backend = XRTBackend(**backend_options(probe))
        invoke = backend.compile_and_load(build_module(probe))
        return invoke(*bufs)

    def build_dir(self, probe: Probe) -> str:
        return os.path.join(self.build_root, probe.name)

    def compile(self, probe: Probe) -> None:
        """aircc for npu2 (with the Peano object), unless this very design is compiled there."""
        from int4awq.run.air_run import compile_once

        compile_once(
            probe,
            lambda: build_module(probe),
            backend_options(probe),
            self.build_dir(probe),
        )

    def _npu(self, probe, bufs):
        from int4awq.run.npu import run_compiled_each

        self.compile(probe)
        return run_compiled_each(self.build_dir(probe), [bufs])[0]
