# SPDX-License-Identifier: MIT
# int4-AWQ GEMV (decode) for NPU2 (AIE2P): the MLIR-AIR design.
"""C[M, N] (bf16) = A[M, K] (bf16) x dequant(W)[K, N] for M = 1 .. 32, on packed records with dense codes.

mlir-air's int4 GEMV API (matrix_vector_multiplication/int4_awq): build_module(M, K, GS, M_TILE, K_CHUNK,
N_CORES, M_PER_LAUNCH) is D[M] = dequant(W)[M, K] @ B[K] on (PACKED, B, D), pack_inputs and cpu_reference
take mlir-air's operands; `rows` vectors at once is the extension (so W's M is C's N here, and rows C's M).
What differs from upstream's and why: docs/decode.md#mlir-airs-gemv-api.

The design
----------
Decode is DDR-bound: what matters is that the weights stream through all 8 shim columns into all 32
compute tiles. The design is the GEMM's (matmul_int4_packed.py), that is mlir-air's hardware-tested
bf16 x bfp16 GEMM structure, with the herd laid over N only; docs/design.md#provenance names the
upstream example and NPU2 lit test of each construct, and docs/decode.md has the figures.

A launch iterates over blocks of 32 N tiles (tile_n columns each). Each launch iteration is one segment:

* A 2D herd [8, 4]; PE (x, y) owns N tile x*4 + y of the block, for all M rows and all of K. Its f32
  accumulator stays in L1 across K: herd-wide, a slice per PE, touched by three herds of one name
  (zero, one compute herd per L2 refill of K, drain), which aircc merges into one physical herd.
* Per L2 refill the segment copies A's M rows for tile_k_l2 of K into L2, once per herd column (a
  stride-0 outer dimension on the DDR side, as mlir-air's int4 GEMV replays its vector), so each
  column's memtile holds its own copy after aircc splits the buffer; and the records of the block's
  32 N tiles for that stretch of K.
* In the compute herd each PE walks the refill in tile_k_l1 chunks: one DMA reads its A chunk (M rows,
  row-major, as the GEMV kernel reads them), one its record, one kernel call accumulates.
* The drain converts the accumulator to bf16 into L1, DMAs it to the L2 C block, and the block goes to
  DDR in one DMA.

Memory plan per level:
  L3: A [M, K] bf16, W [N/tile_n, K/tile_k_l1, record] u8 (the GEMM's sections, the 4-bit codes dense:
      int4_packed_record.dense_codes), C [M, N] bf16
  L2: A [8, 1, M, tile_k_l2] bf16, W [8, 4, tile_k_l2/tile_k_l1, record] u8, C [8, 4, M, tile_n] bf16
  L1 per PE: accumulator f32 (ceil(M/8)*8 x tile_n) and drain bf16 (a slice each of herd-wide buffers),
      the kernel's scratch (likewise), the A chunk and the record (ping-ponged by aircc), the stack.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import sys

EMULATED_AIR = __name__ == "__main__" and importlib.util.find_spec("air") is None
if EMULATED_AIR:
    # run as a script where mlir-air is not installed: the emulator's air package beside this file builds
    # and prints the same module (docs/emulator.md)
    sys.path.insert(
        0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "emulator")
    )
    print(
        "note: mlir-air is not installed: building with the emulator's air package (emulator/air)",
        file=sys.stderr,
    )

try:
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
    from air.dialects.memref import AllocOp, DeallocOp, subview
    from air.dialects.scf import for_, yield_
    from air.ir import (
        BF16Type,
        F32Type,
        IntegerAttr,
        IntegerType,
        MemRefType,
        ShapedType,
        StridedLayoutAttr,
        StringAttr,
        UnitAttr,
    )
except (
    ImportError
) as e:  # run as a script without mlir-air: say what to do instead of a traceback
    if __name__ != "__main__":
        raise
    print(
        (
            (
                f"error: {e}: the emulator's air package needs the project's Python dependencies: run `make "
                "deps` and the script with .venv/bin/python (README, 'Prerequisites')"
            )
            if EMULATED_AIR
            else f"error: {e}: install mlir-air (README, 'Running on an NPU2 machine')"
        ),
        file=sys.stderr,
    )
    sys.exit(2)


import numpy as np
from ml_dtypes import bfloat16

# the record and the rules of this example, beside this file
from int4_packed_record import (
    COLUMNS,
    PES,
    ROWS,
    ConfigError,
    GemvConfig,
    int4_operands,
    pack_records,
)
from matmul_int4_packed import affine_sum, anchor_at_herd_scope

REPO = os.path.dirname(os.path.abspath(__file__))

HERD = "herd_0"  # zero, compute and drain: phases of one physical herd, as in the GEMM
# build_module's record tile when none is given (mlir-air's defaults, 8 x 2048, are not a tile this kernel
# takes: its tile_n is a multiple of 16, and a 2048 K-chunk's scratch is more than L1)
DEFAULT_M_TILE, DEFAULT_K_CHUNK = 64, 128


def kernel_func(name, arg_types, obj):
    func = FuncOp(name, (arg_types, []), visibility="private")
    func.attributes["link_with"] = StringAttr.get(obj)
    func.attributes["llvm.emit_c_interface"] = UnitAttr.get()
    return func


def gemv_config(
    M,
    K,
    GS=128,
    M_TILE=DEFAULT_M_TILE,
    K_CHUNK=DEFAULT_K_CHUNK,
    N_CORES=PES,
    M_PER_LAUNCH=None,
    *,
    rows=1,
    tile_k_l2=None,
    weight_format="awq",
    stack_size=None,
) -> GemvConfig:
    """The configuration build_module and pack_inputs take from mlir-air's GEMV arguments: the output length
    M (C's N), the reduction K, the group GS, the rows of W per kernel call M_TILE (the record's tile_n) and
    the K per call K_CHUNK (its tile_k_l1). This design runs on all 32 cores (N_CORES) and a launch iteration
    covers one M_TILE block a core (M_PER_LAUNCH = 32 * M_TILE); other values are refused by name.
    """
    if N_CORES != PES:
        raise ConfigError(
            f"N_CORES = {N_CORES}: this GEMV runs on all {PES} cores ({COLUMNS} x {ROWS}, every shim "
            "column); mlir-air's own [N_CORES, 1] herd is not what it builds"
        )
    if M_PER_LAUNCH is not None and M_PER_LAUNCH != PES * M_TILE:
        raise ConfigError(
            f"M_PER_LAUNCH = {M_PER_LAUNCH}: a launch iteration covers {PES} x M_TILE = "
            f"{PES * M_TILE} rows of W here (give None)"
        )
    return GemvConfig(
        m=rows,
        k=K,
        n=M,
        gs=GS,
        tile_n=M_TILE,
        tile_k_l1=K_CHUNK,
        tile_k_l2=tile_k_l2,
        stack_size=stack_size,
        format=weight_format,
    )


@module_builder
def build_module(
    M,
    K,
    GS=128,
    M_TILE=DEFAULT_M_TILE,
    K_CHUNK=DEFAULT_K_CHUNK,
    N_CORES=PES,
    M_PER_LAUNCH=None,
    *,
    rows=1,
    tile_k_l2=None,
    weight_format="awq",
    stack_size=None,
):
    """mlir-air's int4 GEMV (matrix_vector_multiplication/int4_awq/matvec_int4_packed.py) and its
    arguments: D[M] = dequant(W)[M, K] @ B[K], the function taking (PACKED [tiles, tile bytes] uint8 from
    pack_inputs, B [K] bf16, D [M] bf16). The extension: `rows` vectors at once (B [rows * K] and
    D [rows * M], row after row; 1 to 32), the K per L2 refill (None: K), the record format and the
    core's stack (None: derived). Every rule is checked first (gemv_config, GemvConfig); a broken one
    raises ConfigError naming it.
    """
    cfg = gemv_config(
        M,
        K,
        GS,
        M_TILE,
        K_CHUNK,
        N_CORES,
        M_PER_LAUNCH,
        rows=rows,
        tile_k_l2=tile_k_l2,
        weight_format=weight_format,
        stack_size=stack_size,
    )
    kernel = gemv_kernel_funcs(cfg)

    @FuncOp.from_py_func(*function_types(cfg))
    def matvec_int4_packed(arg_packed, arg_b, arg_d):
        gemv_launch(cfg, kernel, arg_b, arg_packed, arg_d)


def function_types(cfg: GemvConfig):
    """build_module's function, as mlir-air's: PACKED [tiles, record] uint8 (the records in (N tile,
    K-chunk) order, pack_inputs'), B [rows * K] bf16, D [rows * N] bf16. The launch's transfers address
    every buffer by element offset and stride, so the same launch serves gemv_l3_types' shapes.
    """
    bf16, u8 = BF16Type.get(), IntegerType.get_signless(8)
    return (
        MemRefType.get([cfg.n_tiles * cfg.k_chunks, cfg.record_bytes], u8),
        MemRefType.get([cfg.m * cfg.k], bf16),
        MemRefType.get([cfg.m * cfg.n], bf16),
    )


def pack_inputs(
    A_q, A_s, A_z, M, K, GS, M_TILE, K_CHUNK, N_CORES=PES, M_PER_LAUNCH=None
):
    """build_module's PACKED buffer, uint8 [M / M_TILE * K / K_CHUNK, record bytes], from mlir-air's int4
    operands: A_q [M, K / 2] uint8 (two codes a byte along K, the even k in the low nibble), A_s [K / GS, M]
    bfloat16 scales, A_z [K / GS, M] uint8 zero points; W[m, k] = (q - z) * s. A kernel call's record holds
    the same information as mlir-air's tile (codes, scales, zero points; 4 + 24 / GS bits a weight at
    fold spans of a multiple of 32) in this kernel's layout: the codes in the order the kernel pushes its W
    blocks, the zero points doubled, each section on 64 bytes (int4_packed_record.record_layout). Buffers
    sized by hand from mlir-air's formula therefore differ from it wherever the layouts do: size them from
    this function (or build_module's function type)."""
    cfg = gemv_config(M, K, GS, M_TILE, K_CHUNK, N_CORES, M_PER_LAUNCH)
    codes = int4_operands(A_q, A_s, A_z, K, M, GS)
    return pack_records(
        codes, A_z, [A_s], None, GS, M_TILE, K_CHUNK, "awq", cfg.kernel.dense
    ).reshape(cfg.n_tiles * cfg.k_chunks, cfg.record_bytes)


def cpu_reference(A_q, A_s, A_z, B):
    """D = dequant(A)[M, K] @ B in f32, rounded once to bf16 (mlir-air's GEMV reference): B [K] gives
    D [M], B [rows, K] gives D [rows, M]. dequant(A)[m, k] = (q - z[k / GS, m]) * s[k / GS, m].
    """
    B = np.asarray(B)
    K = B.shape[-1]
    GS = K // A_s.shape[0]
    codes = int4_operands(A_q, A_s, A_z, K, A_q.shape[0], GS).astype(np.float32)
    groups = np.arange(K) // GS
    w = (codes - A_z[groups].astype(np.float32)) * A_s[groups].astype(np.float32)
    return (B.astype(np.float32) @ w).astype(bfloat16)


@module_builder
def build_chained_module(
    m,
    k,
    n1,
    n2,
    gs=128,
    tile_n=64,
    tile_k_l1=128,
    *,
    weight_format="awq",
    stack_size=None,
):
    """Two GEMVs in one module of two launches: C1 = A x dequant(W1) [m, n1], then C2 = C1 x dequant(W2)
    [m, n2], C1 going through DDR. The multi-launch shape of a decoder layer's module (mlir-air's llms
    multi_launch_builder; aircc compiles each launch to a device of its own and a main sequence runs them
    in turn): both launches share one kernel object (the record tile, format and rows).
    """
    first, second = (
        GemvConfig(
            m=m,
            k=kk,
            n=nn,
            gs=gs,
            tile_n=tile_n,
            tile_k_l1=tile_k_l1,
            stack_size=stack_size,
            format=weight_format,
        )
        for kk, nn in ((k, n1), (n1, n2))
    )
    kernel = gemv_kernel_funcs(first)
    a, w1, c1 = gemv_l3_types(first)
    _, w2, c2 = gemv_l3_types(second)

    @FuncOp.from_py_func(a, w1, c1, w2, c2)
    def matvec_int4_chained(arg_a, arg_w1, arg_c1, arg_w2, arg_c2):
        gemv_launch(first, kernel, arg_a, arg_w1, arg_c1, name="first")
        gemv_launch(second, kernel, arg_c1, arg_w2, arg_c2, name="second")


def gemv_l3_types(cfg: GemvConfig):
    """The host buffers' types: A [M, K] bf16, W [N / tile_n, K / tile_k_l1, record] u8, C [M, N] bf16."""
    bf16, u8 = BF16Type.get(), IntegerType.get_signless(8)
    return (
        MemRefType.get([cfg.m, cfg.k], bf16),
        MemRefType.get([cfg.n_tiles, cfg.k_chunks, cfg.record_bytes], u8),
        MemRefType.get([cfg.m, cfg.n], bf16),
    )


def _l1_types(cfg: GemvConfig):
    """(A chunk, record, {accumulator, drain buffer, scratch}: (herd-wide type, one PE's slice type))."""
    bf16, f32, u8 = BF16Type.get(), F32Type.get(), IntegerType.get_signless(8)
    l1 = IntegerAttr.get(T.i32(), MemorySpace.L1)
    hx, hy = COLUMNS, ROWS

    def herd_wide(size, elt):
        """A herd-wide L1 buffer [8, 4, size] and the type of one PE's slice of it (memref.subview's)."""
        whole = MemRefType.get([hx, hy, size], elt, memory_space=l1)
        layout = StridedLayoutAttr.get(
            ShapedType.get_dynamic_size(), [hy * size, size, 1]
        )
        return whole, MemRefType.get([1, 1, size], elt, memory_space=l1, layout=layout)

    return (
        MemRefType.get([cfg.m, cfg.tile_k_l1], bf16, memory_space=l1),
        MemRefType.get([cfg.record_bytes], u8, memory_space=l1),
        {
            "acc": herd_wide(cfg.acc_elems, f32),
            "out": herd_wide(cfg.out_elems, bf16),  # each PE's slice 64-byte aligned
            "scratch": herd_wide(cfg.scratch_bytes, u8),
        },
    )


def gemv_kernel_funcs(cfg: GemvConfig):
    """The kernel's entries (zero, accumulate, drain) declared for cfg's object. A module of several GEMV
    launches declares them once: its launches share one object (the same record tile, format and rows).
    """
    a_l1, w_l1, herd_wide = _l1_types(cfg)
    acc_pe, out_pe, scratch_pe = (herd_wide[k][1] for k in ("acc", "out", "scratch"))
    obj, i32, name = cfg.kernel_object, T.i32(), cfg.kernel.symbol
    return (
        kernel_func(name("gemv_int4_zero"), [acc_pe, i32], obj),
        kernel_func(
            name("gemv_int4_accumulate"), [w_l1, a_l1, acc_pe, scratch_pe, i32], obj
        ),
        kernel_func(name("gemv_int4_drain"), [acc_pe, out_pe, i32], obj),
    )


def gemv_launch(
    cfg: GemvConfig,
    kernel,
    arg_a,
    arg_w,
    arg_c,
    name="gemv",
    herd_name=HERD,
    rows=(0, 0, 0),
):
    """The air.launch of C = A x dequant(W) over the host buffers arg_a, arg_w, arg_c (gemv_l3_types), its
    segment named <name>_seg and its herd's three phases herd_name: the whole design, for build_module's
    function or one launch of a module of several (which names each launch's herd apart, as mlir-air's
    multi-launch stitching prefixes every symbol). rows: where A, W and C start in their buffers (A's and
    C's row, W's first N tile), a constant offset on each DMA's DDR side, as mlir-air's fused_decode
    addresses a layer's slab of its buffers."""
    zero, accumulate, drain = kernel
    m, k, n = cfg.m, cfg.k, cfg.n
    tn, tk1, tk2 = cfg.tile_n, cfg.tile_k_l1, cfg.tile_k_l2
    hx, hy = COLUMNS, ROWS
    rec, acc_n, chunks, cpl2 = (
        cfg.record_bytes,
        cfg.acc_elems,
        cfg.k_chunks,
        cfg.chunks_per_l2,
    )

    bf16, u8 = BF16Type.get(), IntegerType.get_signless(8)
    l2 = IntegerAttr.get(T.i32(), MemorySpace.L2)
    a_l2 = MemRefType.get([hx, 1, m, tk2], bf16, memory_space=l2)
    w_l2 = MemRefType.get([hx, hy, cpl2, rec], u8, memory_space=l2)
    c_l2 = MemRefType.get([hx, hy, m, tn], bf16, memory_space=l2)
    a_l1, w_l1, herd_wide = _l1_types(cfg)
    acc_herd, out_herd, scratch_herd = (
        herd_wide[k][0] for k in ("acc", "out", "scratch")
    )
    i32 = T.i32()
    row_a, tile_w, row_c = rows
    if tile_w % hy:
        raise ConfigError(
            f"{name}: W starts at N tile {tile_w}, not a multiple of the herd's {hy} rows"
        )

    def pe_slice(buf, x, y, size):
        return subview(buf, offsets=[x, y, 0], sizes=[1, 1, size], strides=[1, 1, 1])

    @launch(operands=[arg_a, arg_w, arg_c], sizes=[1, cfg.launch_n])
    def launch_body(_bm, bn, _nbm, _nbn, l3a, l3w, l3c):
        @segment(name=f"{name}_seg", operands=[bn, l3a, l3w, l3c])
        def segment_body(bn_s, l3a_s, l3w_s, l3c_s):
            l2a, l2w, l2c = (AllocOp(t, [], []) for t in (a_l2, w_l2, c_l2))
            acc, out, scratch = (
                AllocOp(t, [], []) for t in (acc_herd, out_herd, scratch_herd)
            )

            @herd(name=herd_name, sizes=[hx, hy], operands=[acc, scratch])
            def herd_zero(x, y, _sx, _sy, acc_h, scratch_h):
                CallOp(zero, [pe_slice(acc_h, x, y, acc_n), arith.ConstantOp(i32, m)])
                # keeps the scratch at herd scope, so aircc ping-pongs the chunk loop
                anchor_at_herd_scope(pe_slice(scratch_h, x, y, cfg.scratch_bytes))

            for kr in for_(0, cfg.k_refills):
                # A[:, kr*tk2 : +tk2] into each column's copy: a stride-0 outer dimension on the
                # DDR side (mlir-air int4_awq matvec_int4_packed.py replays its vector so), a
                # plain fill on the L2 side (bf16_x_bfp16's A fill)
                dma_memcpy_nd(
                    l2a,
                    l3a_s,
                    src_offsets=[0, 0, row_a, affine_sum((kr, tk2))],
                    src_sizes=[hx, 1, m, tk2],
                    src_strides=[0, tk2, k, 1],
                )
                # records (bn*32 + x*4 + y, kr*cpl2 + c) -> [8, 4, cpl2, rec]
                dma_memcpy_nd(
                    l2w,
                    l3w_s,
                    src_offsets=[
                        affine_sum((bn_s, hx), constant=tile_w // hy),
                        0,
                        affine_sum((kr, cpl2)),
                        0,
                    ],
                    src_sizes=[hx, hy, cpl2, rec],
                    src_strides=[hy * chunks * rec, chunks * rec, rec, 1],
                )

                @herd(name=herd_name, sizes=[hx, hy], operands=[acc, scratch, l2a, l2w])
                def herd_gemv(x, y, _sx, _sy, acc_h, scratch_h, l2a_h, l2w_h):
                    a_chunk, w_rec = AllocOp(a_l1, [], []), AllocOp(w_l1, [], [])
                    for c in for_(0, cpl2):
                        # column x's copy of A, chunk c: M rows of tk1 (row-major, as the int4
                        # GEMM's A read of mlir-air's int4_awq example)
                        dma_memcpy_nd(
                            a_chunk,
                            l2a_h,
                            src_offsets=[x, 0, 0, affine_sum((c, tk1))],
                            src_sizes=[1, 1, m, tk1],
                            src_strides=[m * tk2, m * tk2, tk2, 1],
                        )
                        # PE (x, y)'s record for chunk c (bf16_x_bfp16's per-PE byte tile)
                        dma_memcpy_nd(
                            w_rec,
                            l2w_h,
                            src_offsets=[x, y, c, 0],
                            src_sizes=[1, 1, 1, rec],
                            src_strides=[hy * cpl2 * rec, cpl2 * rec, rec, 1],
                        )
                        CallOp(
                            accumulate,
                            [
                                w_rec,
                                a_chunk,
                                pe_slice(acc_h, x, y, acc_n),
                                pe_slice(scratch_h, x, y, cfg.scratch_bytes),
                                arith.ConstantOp(i32, m),
                            ],
                        )
                        yield_([])
                    DeallocOp(a_chunk)
                    DeallocOp(w_rec)

                yield_([])

            @herd(name=herd_name, sizes=[hx, hy], operands=[acc, out, l2c])
            def herd_drain(x, y, _sx, _sy, acc_h, out_h, l2c_h):
                CallOp(
                    drain,
                    [
                        pe_slice(acc_h, x, y, acc_n),
                        pe_slice(out_h, x, y, cfg.out_elems),
                        arith.ConstantOp(i32, m),
                    ],
                )
                dma_memcpy_nd(
                    l2c_h,
                    out_h,
                    dst_offsets=[x, y, 0, 0],
                    dst_sizes=[1, 1, m, tn],
                    dst_strides=[hy * m * tn, m * tn, tn, 1],
                    src_offsets=[x, y, 0],
                    src_sizes=[1, 1, m * tn],
                    src_strides=[hy * cfg.out_elems, cfg.out_elems, 1],
                )

            # [8, 4, M, tn] -> C[:, bn*32*tn : +32*tn] in one DMA (bf16_x_bfp16's C), herd column x
            # outermost on both sides as the GEMM's C: air-split-l2-memref cuts the block into one
            # piece per x and tiles this pattern by it. With x second (the earlier [M, 8, 4, tn]),
            # aircc gave every piece the whole DDR row block at one launch iteration: the compiled
            # runtime sequence wrote each element of C 8 times (int4awq/design/runtime_sequence.py).
            dma_memcpy_nd(
                l3c_s,
                l2c,
                dst_offsets=[0, row_c, 0, affine_sum((bn_s, hx * hy * tn))],
                dst_sizes=[hx, m, hy, tn],
                dst_strides=[hy * tn, n, tn, 1],
                src_offsets=[0, 0, 0, 0],
                src_sizes=[hx, m, hy, tn],
                src_strides=[hy * m * tn, tn, m * tn, 1],
            )
            for buf in (l2a, l2w, l2c, acc, out, scratch):
                DeallocOp(buf)


def backend_options(cfg: GemvConfig) -> dict:
    """XRTBackend options for this design (the NPU compile and the emulator take the same)."""
    return dict(
        target_device="npu2",
        stack_size=cfg.stack_bytes,
        omit_while_true_loop=False,
        runtime_loop_tiling_sizes=list(cfg.runtime_loop_tiling),
        instance_name="matvec_int4_packed",
    )


def main(argv=None) -> int:
    """mlir-air's int4 GEMV example's command line (its options, D = dequant(W) @ B with W [M, K]), plus
    --rows: build, then print (-p), compile (compile-only) or run on seeded operands packed by pack_inputs
    and checked against cpu_reference (example_main.act). Every format, checkpoint and report:
    host/run.py --design gemv."""
    import example_main

    # no abbreviations: the GEMV's `--n` (this project's earlier option) would be taken for --n-cores
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], allow_abbrev=False
    )
    parser.add_argument("--m", type=int, default=2048, help="rows of W: D's length")
    parser.add_argument("--k", type=int, default=2048)
    parser.add_argument("--gs", type=int, default=128)
    parser.add_argument("--m-tile", type=int, default=DEFAULT_M_TILE, dest="m_tile")
    parser.add_argument("--k-chunk", type=int, default=DEFAULT_K_CHUNK, dest="k_chunk")
    parser.add_argument("--n-cores", type=int, default=PES, dest="n_cores")
    parser.add_argument("--m-per-launch", type=int, default=None, dest="m_per_launch")
    parser.add_argument(
        "--rows",
        type=int,
        default=1,
        help="vectors at once, 1 to 32 (this GEMV's extension)",
    )
    example_main.add_arguments(parser)
    args = parser.parse_args(argv)
    shape = (args.m, args.k, args.gs, args.m_tile, args.k_chunk, args.n_cores)
    try:
        cfg = gemv_config(*shape, args.m_per_launch, rows=args.rows)
        module = build_module(*shape, args.m_per_launch, rows=args.rows)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    def operands():
        a_q, a_s, a_z, rng = example_main.seeded_operands(args.m, args.k, args.gs)
        b = rng.standard_normal((args.rows, args.k)).astype(bfloat16)
        packed = pack_inputs(a_q, a_s, a_z, *shape, args.m_per_launch)
        d = cpu_reference(a_q, a_s, a_z, b)
        return [packed, b.reshape(-1)], d.reshape(-1)

    return example_main.act(
        args,
        cfg,
        module,
        backend_options(cfg),
        operands,
        dict(rtol=0.1, atol=0.05, min_correlation=0.999),
    )


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| less` ends quietly
    sys.exit(main())
