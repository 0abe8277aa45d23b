# SPDX-License-Identifier: MIT
# int4-AWQ GEMM for NPU2 (AIE2P): the MLIR-AIR design.
"""C[M, N] (bf16) = A[M, K] (bf16) x dequant(W)[K, N], W as packed int4-AWQ records.

The design
----------
A launch iterates over blocks of herd_m*tile_m rows of C (and, when A streams, herd_n*tile_n columns).
Each launch iteration is one segment:

* A 2D herd [herd_m, herd_n] (herd_m along the array's 8 columns, herd_n along its 4 compute rows);
  PE (x, y) owns the tile_m x tile_n C tile at rows x*tile_m, columns y*tile_n of the block.
* Its f32 accumulator stays in L1 for the whole K sweep. It is allocated once per segment, herd-wide
  ([herd_m, herd_n, tile_m*tile_n], each PE a subview of its own slice), and three herds touch it: zero,
  one compute herd per L2 refill of K, drain. They share one name: aircc merges same-named herds of a
  segment into time phases of one physical herd, so the accumulator stays on the same tiles.
  This lifts upstream's TILE_K_L2 == K restriction (its accumulator lived inside one herd, so all of K
  had to fit a memtile at once): K can be any multiple of tile_k_l2, e.g. 8192 for Llama's down_proj.
* Per L2 refill the segment brings the weight records of its herd_n N-tiles for tile_k_l2 of K. In the
  compute herd each PE walks the refill in tile_k_l1 chunks: one DMA brings its A chunk (re-laid into 8x8
  mmul blocks on the way), one brings its weight record (Q, scales and zeros in one contiguous record),
  one kernel call accumulates. The kernel dequantises once per call, for all tile_m rows.
* A in L2 is stored already cut into the kernel's 8x8 blocks ([herd_m, tile_m/8, K'/8, 8, 8]; the
  memtile's write side does the re-layout), so one PE's chunk is a single contiguous run per 8-row
  band and the chunk loop folds into one memtile BD.
* A streams (n_per_segment = 1): every launch iteration is one (M block, N block) and each L2 refill
  brings its A rows with its weight records.
* A resident (n_per_segment > 1): a segment fills its rows of A for all of K once and sweeps
  n_per_segment N blocks over them. A buffer filled once and read in every iteration of a loop has
  no correct lowering in aircc except through its refeed primitive, so A reaches the herd through a
  channel: per herd row x, one `air.channel.put` alone in an n_per_segment-trip loop (aircc lowers it
  to one BD re-sent n times, a lock of value n), broadcast to the herd_n PEs of that row.
* The drain converts the accumulator to bf16 (round to nearest even) into L1, DMAs it to the L2 C block,
  and the block goes to DDR in one DMA.

Memory plan per level:
  L3: A [M, K] bf16, W [N/tile_n, K/tile_k_l1, record] u8, C [M, N] bf16
  L2: A [herd_m, tile_m/8, tile_k_l2/8, 8, 8] bf16, W [herd_n, tile_k_l2/tile_k_l1, record] u8,
      C [herd_m, herd_n, tile_m, tile_n] bf16
  L1 per PE: accumulator f32 and drain bf16 (tile_m*tile_n each) and the kernel's scratch (herd-wide,
      a slice each), the A chunk and the record (ping-ponged by aircc), the kernel's stack.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

try:
    from air.dialects.affine import apply as affine_apply
    from air.dialects.air import (
        Channel,
        ChannelGet,
        ChannelPut,
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
        AffineConstantExpr,
        AffineExpr,
        AffineMap,
        AffineSymbolExpr,
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
        f"error: {e}: install mlir-air (README, 'Running on an NPU2 machine'), or set PYTHONPATH=emulator "
        "to use the emulator's air package",
        file=sys.stderr,
    )
    sys.exit(2)

from int4awq.design import (
    DesignConfig,
)  # the example's own host package, beside this file

REPO = os.path.dirname(os.path.abspath(__file__))

MMUL = 8  # the kernel's aie::mmul<8, 8, 8> block edge: A arrives in 8x8 blocks
# One name for the zero, compute and drain herds: aircc merges same-named herds of a segment into time
# phases of one physical herd, so the L1 accumulator they share stays on the same tiles.
HERD = "herd_0"
A_CHANNEL = "a_refeed"  # A from its resident L2 block to the herd (n_per_segment > 1)


def affine_sum(*terms):
    """affine.apply of sum(index * factor) over (index, factor) terms: offsets as MLIR wants them."""
    exprs = [
        AffineExpr.get_mul(AffineSymbolExpr.get(i), AffineConstantExpr.get(f))
        for i, (_, f) in enumerate(terms)
    ]
    total = exprs[0]
    for e in exprs[1:]:
        total = AffineExpr.get_add(total, e)
    return affine_apply(AffineMap.get(0, len(terms), [total]), [v for v, _ in terms])


def kernel_func(name, arg_types, obj):
    func = FuncOp(name, (arg_types, []), visibility="private")
    func.attributes["link_with"] = StringAttr.get(obj)
    func.attributes["llvm.emit_c_interface"] = UnitAttr.get()
    return func


@module_builder
def build_module(
    m,
    k=None,
    n=None,
    gs=128,
    tile_m=64,
    tile_k_l2=None,
    tile_k_l1=64,
    tile_n=64,
    herd_m=8,
    herd_n=4,
    n_per_segment=1,
):
    """The AIR module, for plain integers in the order of mlir-air's int4 GEMM builder (tile_k_l2
    defaults to K), or for a validated int4awq.design.DesignConfig passed as the only argument.
    """
    cfg = (
        m
        if isinstance(m, DesignConfig)
        else DesignConfig(
            m=m,
            k=k,
            n=n,
            gs=gs,
            tile_m=tile_m,
            tile_n=tile_n,
            tile_k_l1=tile_k_l1,
            tile_k_l2=k if tile_k_l2 is None else tile_k_l2,
            herd_m=herd_m,
            herd_n=herd_n,
            n_per_segment=n_per_segment,
        )
    )
    m, k, n = cfg.m, cfg.k, cfg.n
    tm, tn, tk1, tk2, hm, hn = (
        cfg.tile_m,
        cfg.tile_n,
        cfg.tile_k_l1,
        cfg.tile_k_l2,
        cfg.herd_m,
        cfg.herd_n,
    )
    rec = cfg.record_bytes
    chunks_per_l2 = tk2 // tk1
    chunks = k // tk1
    tile = tm * tn

    bf16, f32, u8 = BF16Type.get(), F32Type.get(), IntegerType.get_signless(8)
    l1 = IntegerAttr.get(T.i32(), MemorySpace.L1)
    l2 = IntegerAttr.get(T.i32(), MemorySpace.L2)

    # L3: what the host passes.
    a_l3 = MemRefType.get([m, k], bf16)
    w_l3 = MemRefType.get([n // tn, chunks, rec], u8)
    c_l3 = MemRefType.get([m, n], bf16)
    # L2: one segment's block.
    ka = k if cfg.a_resident else tk2  # the K extent of the L2 A block
    a_l2 = MemRefType.get(
        [hm, tm // MMUL, ka // MMUL, MMUL, MMUL], bf16, memory_space=l2
    )
    w_l2 = MemRefType.get([hn, chunks_per_l2, rec], u8, memory_space=l2)
    c_l2 = MemRefType.get([hm, hn, tm, tn], bf16, memory_space=l2)
    # L1: herd-wide accumulator and drain (a slice per PE), and each PE's own buffers.
    acc_herd = MemRefType.get([hm, hn, tile], f32, memory_space=l1)
    out_herd = MemRefType.get([hm, hn, tile], bf16, memory_space=l1)
    a_l1 = MemRefType.get([tm // MMUL, tk1 // MMUL, MMUL, MMUL], bf16, memory_space=l1)
    w_l1 = MemRefType.get([rec], u8, memory_space=l1)
    scratch_herd = MemRefType.get([hm, hn, cfg.scratch_bytes], u8, memory_space=l1)
    # A PE's slice of a herd-wide buffer, as memref.subview types it: dynamic offset, parent strides.
    slice_layout = StridedLayoutAttr.get(
        ShapedType.get_dynamic_size(), [hn * tile, tile, 1]
    )
    acc_pe = MemRefType.get([1, 1, tile], f32, memory_space=l1, layout=slice_layout)
    out_pe = MemRefType.get([1, 1, tile], bf16, memory_space=l1, layout=slice_layout)
    scratch_layout = StridedLayoutAttr.get(
        ShapedType.get_dynamic_size(), [hn * cfg.scratch_bytes, cfg.scratch_bytes, 1]
    )
    scratch_pe = MemRefType.get(
        [1, 1, cfg.scratch_bytes], u8, memory_space=l1, layout=scratch_layout
    )

    obj = cfg.kernel_object
    zero = kernel_func("gemm_int4_zero", [acc_pe], obj)
    accumulate = kernel_func(
        "gemm_int4_accumulate", [w_l1, a_l1, acc_pe, scratch_pe], obj
    )
    drain = kernel_func("gemm_int4_drain", [acc_pe, out_pe], obj)

    def pe_slice(buf, x, y, size=tile):
        return subview(buf, offsets=[x, y, 0], sizes=[1, 1, size], strides=[1, 1, 1])

    nps = cfg.n_per_segment
    if cfg.a_resident:
        # one stream per herd row, broadcast over the herd_n PEs of the row
        Channel(A_CHANNEL, size=[hm, 1], broadcast_shape=[hm, hn])

    @FuncOp.from_py_func(a_l3, w_l3, c_l3)
    def matmul_int4_packed(arg_a, arg_w, arg_c):
        @launch(
            operands=[arg_a, arg_w, arg_c], sizes=[m // (hm * tm), n // (hn * tn * nps)]
        )
        def launch_body(bm, bn, _nbm, _nbn, l3a, l3w, l3c):
            @segment(name="gemm_seg", operands=[bm, bn, l3a, l3w, l3c])
            def segment_body(bm_s, bn_s, l3a_s, l3w_s, l3c_s):
                row0 = affine_sum((bm_s, hm * tm))  # first row of A and C in this block
                l2a, l2w, l2c = (
                    AllocOp(a_l2, [], []),
                    AllocOp(w_l2, [], []),
                    AllocOp(c_l2, [], []),
                )
                acc, out = AllocOp(acc_herd, [], []), AllocOp(out_herd, [], [])
                scratch = AllocOp(scratch_herd, [], [])

                def fetch_a(k0):
                    # A[row0 : +hm*tm, k0 : +ka] read row by row, written as 8x8 blocks: rows (x, i, r)
                    # and columns (kb, s) land at ((x*tm/8 + i)*ka/8 + kb)*64 + r*8 + s.
                    dma_memcpy_nd(
                        l2a,
                        l3a_s,
                        dst_offsets=[0, 0, 0, 0],
                        dst_sizes=[hm * tm // MMUL, MMUL, ka // MMUL, MMUL],
                        dst_strides=[MMUL * ka, MMUL, MMUL * MMUL, 1],
                        src_offsets=[row0, k0],
                        src_sizes=[hm * tm, ka],
                        src_strides=[k, 1],
                    )

                def a_chunk_in(a_chunk, l2a_h=None, *, x, y, c):
                    """PE (x, y)'s next A chunk [tm/8][tk1/8][8][8]: blocks c*tk1/8.. of each 8-row band."""
                    if cfg.a_resident:
                        ChannelGet(A_CHANNEL, a_chunk, indices=[x, y])
                    else:
                        dma_memcpy_nd(
                            a_chunk,
                            l2a_h,
                            src_offsets=[x, 0, affine_sum((c, tk1 * MMUL))],
                            src_sizes=[1, tm // MMUL, tk1 * MMUL],
                            src_strides=[tm * ka, MMUL * ka, 1],
                        )

                def compute_block(nblock):
                    """One (M block, N block): zero the accumulators, sweep K through L2 refills, drain to DDR."""

                    @herd(name=HERD, sizes=[hm, hn], operands=[acc])
                    def herd_zero(x, y, _sx, _sy, acc_h):
                        CallOp(zero, [pe_slice(acc_h, x, y)])

                    for kr in for_(0, k // tk2):
                        if not cfg.a_resident:
                            fetch_a(affine_sum((kr, tk2)))
                        # records (nblock*hn + j, kr*chunks_per_l2 + c) -> [hn, chunks_per_l2, rec]
                        dma_memcpy_nd(
                            l2w,
                            l3w_s,
                            src_offsets=[
                                affine_sum((nblock, hn)),
                                affine_sum((kr, chunks_per_l2)),
                                0,
                            ],
                            src_sizes=[hn, chunks_per_l2, rec],
                            src_strides=[chunks * rec, rec, 1],
                        )

                        # a resident A reaches the herd through its channel, not as an operand
                        @herd(
                            name=HERD,
                            sizes=[hm, hn],
                            operands=[acc, scratch, l2w]
                            + ([] if cfg.a_resident else [l2a]),
                        )
                        def herd_gemm(x, y, _sx, _sy, acc_h, scratch_h, l2w_h, *l2a_h):
                            a_chunk, w_rec = AllocOp(a_l1, [], []), AllocOp(
                                w_l1, [], []
                            )
                            for c in for_(0, chunks_per_l2):
                                a_chunk_in(a_chunk, *l2a_h, x=x, y=y, c=c)
                                dma_memcpy_nd(
                                    w_rec,
                                    l2w_h,
                                    src_offsets=[y, c, 0],
                                    src_sizes=[1, 1, rec],
                                    src_strides=[chunks_per_l2 * rec, rec, 1],
                                )
                                CallOp(
                                    accumulate,
                                    [
                                        w_rec,
                                        a_chunk,
                                        pe_slice(acc_h, x, y),
                                        pe_slice(scratch_h, x, y, cfg.scratch_bytes),
                                    ],
                                )
                                yield_([])
                            DeallocOp(a_chunk)
                            DeallocOp(w_rec)

                        yield_([])

                    @herd(name=HERD, sizes=[hm, hn], operands=[acc, out, l2c])
                    def herd_drain(x, y, _sx, _sy, acc_h, out_h, l2c_h):
                        CallOp(drain, [pe_slice(acc_h, x, y), pe_slice(out_h, x, y)])
                        dma_memcpy_nd(
                            l2c_h,
                            out_h,
                            dst_offsets=[x, y, 0],
                            dst_sizes=[1, 1, tile],
                            dst_strides=[hn * tile, tile, 1],
                            src_offsets=[x, y, 0],
                            src_sizes=[1, 1, tile],
                            src_strides=[hn * tile, tile, 1],
                        )

                    # [hm, hn, tm, tn] -> C[row0 : +hm*tm, nblock*hn*tn : +hn*tn]
                    dma_memcpy_nd(
                        l3c_s,
                        l2c,
                        dst_offsets=[row0, affine_sum((nblock, hn * tn))],
                        dst_sizes=[hm * tm, hn * tn],
                        dst_strides=[n, 1],
                        src_offsets=[0, 0, 0, 0],
                        src_sizes=[hm, tm, hn, tn],
                        src_strides=[hn * tile, tn, tile, 1],
                    )

                if cfg.a_resident:
                    fetch_a(0)
                    for x in range(hm):
                        # the refeed primitive: the put alone in its loop; all of row x's K, chunk by chunk
                        for _ in for_(0, nps):
                            ChannelPut(
                                A_CHANNEL,
                                l2a,
                                indices=[x, 0],
                                offsets=[x, 0, 0, 0],
                                sizes=[1, chunks, tm // MMUL, tk1 * MMUL],
                                strides=[tm * k, tk1 * MMUL, MMUL * k, 1],
                            )
                            yield_([])
                    for nb in for_(0, nps):
                        compute_block(affine_sum((bn_s, nps), (nb, 1)))
                        yield_([])
                else:
                    compute_block(bn_s)
                for buf in (l2a, l2w, l2c, acc, out, scratch):
                    DeallocOp(buf)


def backend_options(cfg: DesignConfig) -> dict:
    """XRTBackend options for this design (the NPU compile and the emulator take the same)."""
    return dict(
        target_device="npu2",  # explicit: a failed device probe would silently build for npu1
        stack_size=cfg.stack_bytes,
        omit_while_true_loop=False,
        # Tiles the runtime loop over launch iterations so shim BDs are reused instead of unrolled
        # one per launch iteration (docs/hardware.md#launch-loops-unroll-into-shim-bds); mlir-air's 64x64 GEMMs use [2, 2].
        runtime_loop_tiling_sizes=[2, 2],
        instance_name="matmul_int4_packed",
    )


def main(argv=None) -> int:
    from int4awq.air_run import act, add_action_arguments
    from int4awq.design import add_design_arguments
    from int4awq.sweep import config_from_args
    from int4awq.errors import ConfigError

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_design_arguments(parser)
    add_action_arguments(parser)
    args = parser.parse_args(argv)
    try:
        cfg, _ = config_from_args(
            args, args.m, args.k, args.n, 128 if args.gs is None else args.gs
        )
        module = build_module(cfg)
        return act(args, cfg, module, backend_options(cfg))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `make print | less` ends quietly
    sys.exit(main())
