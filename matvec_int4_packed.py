# SPDX-License-Identifier: MIT
# int4-AWQ GEMV (decode) for NPU2 (AIE2P): the MLIR-AIR design.
"""C[M, N] (bf16) = A[M, K] (bf16) x dequant(W)[K, N] for M = 1 .. 32, on the GEMM's packed records.

The design
----------
One launch, one segment, all 32 compute tiles: four herds of one row each (8 columns), so the chain of
PEs down a column can differ in what it does at its two ends. With k_split = ks (2 or 4), the rows of a
column form 4 / ks chains of ks PEs; PE (x, y) is position q = y % ks of chain c = y // ks and computes
its N group g = x * (4 / ks) + c (tiles_per_group N tiles, all accumulators resident in L1) over its K
part q (the K-chunks kc with kc % ks == q).

* Weights: one stream per column from DDR (its own channel declaration, pinned to the column's shim
  tile with air.shim_col), into a memtile staging buffer per K step ([chains, tiles, ks, record],
  ping-ponged), from which each PE gets its records: one per N tile per step. A step's ks consecutive
  records of one N tile are one contiguous run in the GEMM's L3 order, so a column's whole stream is one
  3-dimensional shim pattern.
* A: one stream per column from DDR into a memtile staging buffer per step (a step's ks consecutive
  K-chunks, part by part, all M rows each), broadcast to the column's first PEs. The first PE keeps
  part 0 and passes parts 1 .. ks-1 to the PE below it, which keeps the next and passes the rest.
* Reduction: after its K steps a PE adds the partial sum arriving from the PE above (gemv_int4_add) and
  passes the sum on; the last PE of a chain drains it to bf16 and writes its columns of C to DDR.
  So every PE has two input streams (its records, and A then partial sums from one neighbour) and one
  output stream, and 32 / ks PEs write C (docs/decode.md has the channel count that rules out ks = 1).

Memory plan per level:
  L3: A [M, K] bf16, W [N/tile_n, K/tile_k, record] u8 (the GEMM's, int4awq.record), C [M, N] bf16
  L2: per column and K step, [4/ks, tiles_per_group, ks, record] u8 and A [ks, M, tile_k] bf16
  L1 per PE: accumulators [tiles_per_group, ceil(M/8)*8*tile_n] f32, the kernel's scratch, and
      (ping-ponged) the record, A's own part, A's parts to pass on, the partial sum in, C's tile out.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

try:
    from air.dialects import arith
    from air.dialects.air import (
        Channel,
        ChannelGet,
        ChannelPut,
        MemorySpace,
        T,
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
        f"error: {e}: install mlir-air (README, 'Running on an NPU2 machine'), or set PYTHONPATH=emulator "
        "to use the emulator's air package",
        file=sys.stderr,
    )
    sys.exit(2)


from int4awq.gemv import (
    COLUMNS,
    ROWS,
    GemvConfig,
)  # the example's own host package, beside this file

REPO = os.path.dirname(os.path.abspath(__file__))

W_L3 = "w_l3_col"  # weights DDR -> memtile: w_l3_col0 .. w_l3_col7
A_L3 = "a_l3_col"  # A DDR -> memtile: a_l3_col0 .. a_l3_col7
W_IN = "w_in"  # records memtile -> PE
A_IN = "a_in"  # A memtile -> the first PE of each chain (broadcast over the column's chains)
CHAIN = (
    "chain"  # PE (x, y) -> PE (x, y + 1): A's remaining parts, then the partial sums
)
C_OUT = "c_out"  # the last PE of each chain -> DDR


def kernel_func(name, arg_types, obj):
    func = FuncOp(name, (arg_types, []), visibility="private")
    func.attributes["link_with"] = StringAttr.get(obj)
    func.attributes["llvm.emit_c_interface"] = UnitAttr.get()
    return func


def loop(trips):
    """scf.for over `trips` iterations yielding its induction variable, or, for one trip, no loop and the
    index 0 (a one-trip loop would only stop aircc from ping-ponging the buffers inside it).
    """
    if trips > 1:
        for iv in for_(0, trips):
            yield iv
            yield_([])
    else:
        yield arith.ConstantOp.create_index(0)


@module_builder
def build_module(m, k=None, n=None, gs=128, tile_n=64, tile_k_l1=128, k_split=2):
    """The AIR module, for plain integers (M, K, N, group size, the record's tile_n and tile_k_l1, the
    chain length k_split), or for a validated int4awq.gemv.GemvConfig passed as the only argument.
    """
    cfg = (
        m
        if isinstance(m, GemvConfig)
        else GemvConfig(
            m=m, k=k, n=n, gs=gs, tile_n=tile_n, tile_k_l1=tile_k_l1, k_split=k_split
        )
    )
    m, k, n, tn, tk, ks = cfg.m, cfg.k, cfg.n, cfg.tile_n, cfg.tile_k_l1, cfg.k_split
    rec, cpc, ntg, steps, acc_n = (
        cfg.record_bytes,
        cfg.chains_per_column,
        cfg.tiles_per_group,
        cfg.steps,
        cfg.acc_elems,
    )
    chunks = cfg.k_chunks

    bf16, f32, u8 = BF16Type.get(), F32Type.get(), IntegerType.get_signless(8)
    l1 = IntegerAttr.get(T.i32(), MemorySpace.L1)
    l2 = IntegerAttr.get(T.i32(), MemorySpace.L2)

    a_l3 = MemRefType.get([m, k], bf16)
    w_l3 = MemRefType.get([cfg.n_tiles, chunks, rec], u8)
    c_l3 = MemRefType.get([m, n], bf16)
    stage_l2 = MemRefType.get([cpc, ntg, ks, rec], u8, memory_space=l2)
    a_stage_l2 = MemRefType.get([ks, m, tk], bf16, memory_space=l2)
    rec_l1 = MemRefType.get([rec], u8, memory_space=l1)
    a_own_l1 = MemRefType.get([m, tk], bf16, memory_space=l1)
    acc_l1 = MemRefType.get([ntg, acc_n], f32, memory_space=l1)
    # one N tile's accumulator: a subview of acc at the tile's loop index, or all of acc for one tile
    acc_tile = (
        acc_l1
        if ntg == 1
        else MemRefType.get(
            [1, acc_n],
            f32,
            memory_space=l1,
            layout=StridedLayoutAttr.get(ShapedType.get_dynamic_size(), [acc_n, 1]),
        )
    )
    part_l1 = MemRefType.get([acc_n], f32, memory_space=l1)
    out_l1 = MemRefType.get([m, tn], bf16, memory_space=l1)
    # the kernel's scratch: one herd-wide buffer per row herd, allocated by the segment, a slice per PE (a
    # buffer a PE allocated itself and first touched by a kernel call would keep aircc from ping-ponging
    # the records and A in the loops around that call, as in the GEMM)
    scratch_row = MemRefType.get([COLUMNS, cfg.scratch_bytes], u8, memory_space=l1)
    scratch_l1 = MemRefType.get(
        [1, cfg.scratch_bytes],
        u8,
        memory_space=l1,
        layout=StridedLayoutAttr.get(
            ShapedType.get_dynamic_size(), [cfg.scratch_bytes, 1]
        ),
    )

    obj = cfg.kernel_object
    i32 = T.i32()
    zero = kernel_func("gemv_int4_zero", [acc_tile, i32], obj)
    accumulate = kernel_func(
        "gemv_int4_accumulate", [rec_l1, a_own_l1, acc_tile, scratch_l1, i32], obj
    )
    add = kernel_func("gemv_int4_add", [acc_tile, part_l1, i32], obj)
    drain = kernel_func("gemv_int4_drain", [acc_tile, out_l1, i32], obj)

    # DDR streams: one channel declaration per column, pinned to that column's shim tile (aircc gives all
    # the sub-channels of one declaration a single shim DMA channel; air.shim_col places a declaration)
    for x in range(COLUMNS):
        for name in (W_L3, A_L3):
            Channel(f"{name}{x}", size=[1]).attributes["air.shim_col"] = (
                IntegerAttr.get(T.i64(), x)
            )
    Channel(W_IN, size=[COLUMNS, ROWS])
    Channel(A_IN, size=[COLUMNS, 1], broadcast_shape=[COLUMNS, cpc])
    Channel(CHAIN, size=[COLUMNS, ROWS - 1])
    Channel(C_OUT, size=[COLUMNS, cpc])

    def tile(acc, j):
        return (
            acc
            if ntg == 1
            else subview(acc, offsets=[j, 0], sizes=[1, acc_n], strides=[1, 1])
        )

    def row_herd(y, scratch_buf):
        c, q = divmod(y, ks)
        first, last = q == 0, q == ks - 1
        a_rest_l1 = (
            None if last else MemRefType.get([ks - 1 - q, m, tk], bf16, memory_space=l1)
        )

        @herd(name=f"gemv_row{y}", sizes=[COLUMNS, 1], operands=[scratch_buf])
        def body(x, _y, _sx, _sy, scratch_h):
            rows = arith.ConstantOp(i32, m)
            acc = AllocOp(acc_l1, [], [])
            scratch = subview(
                scratch_h, offsets=[x, 0], sizes=[1, cfg.scratch_bytes], strides=[1, 1]
            )
            for j in loop(ntg):
                CallOp(zero, [tile(acc, j), rows])
            source = (A_IN, [x, c]) if first else (CHAIN, [x, y - 1])
            for _ in loop(steps):
                a_own = AllocOp(a_own_l1, [], [])
                ChannelGet(source[0], a_own, indices=source[1])
                if not last:
                    a_rest = AllocOp(a_rest_l1, [], [])
                    ChannelGet(source[0], a_rest, indices=source[1])
                for j in loop(ntg):
                    w_rec = AllocOp(rec_l1, [], [])
                    ChannelGet(W_IN, w_rec, indices=[x, y])
                    CallOp(accumulate, [w_rec, a_own, tile(acc, j), scratch, rows])
                    DeallocOp(w_rec)
                if not last:
                    ChannelPut(CHAIN, a_rest, indices=[x, y])
                    DeallocOp(a_rest)
                DeallocOp(a_own)
            for j in loop(ntg):
                if not first:  # the running sum of the PEs above, plus this PE's part
                    part = AllocOp(part_l1, [], [])
                    ChannelGet(CHAIN, part, indices=[x, y - 1])
                    CallOp(add, [tile(acc, j), part, rows])
                    DeallocOp(part)
                if not last:
                    ChannelPut(
                        CHAIN,
                        acc,
                        indices=[x, y],
                        offsets=[j, 0],
                        sizes=[1, acc_n],
                        strides=[acc_n, 1],
                    )
                else:
                    out = AllocOp(out_l1, [], [])
                    CallOp(drain, [tile(acc, j), out, rows])
                    ChannelPut(C_OUT, out, indices=[x, c])
                    DeallocOp(out)
            DeallocOp(acc)

        body.attributes["link_with"] = StringAttr.get(obj)
        body.attributes["x_loc"] = IntegerAttr.get(T.i64(), 0)
        body.attributes["y_loc"] = IntegerAttr.get(T.i64(), 2 + y)

    @FuncOp.from_py_func(a_l3, w_l3, c_l3)
    def matvec_int4_packed(arg_a, arg_w, arg_c):
        @launch(operands=[arg_a, arg_w, arg_c], sizes=[1, 1])
        def launch_body(_lx, _ly, _sx, _sy, l3a, l3w, l3c):
            for x in range(COLUMNS):
                # column x's records in step order: step i, chain c, tile j, part q -> record
                # (nt = (x*cpc + c)*ntg + j, kc = i*ks + q); the ks parts of a tile are one run of records
                ChannelPut(
                    f"{W_L3}{x}",
                    l3w,
                    offsets=[0, x * cpc * ntg, 0],
                    sizes=[steps, cpc * ntg, ks * rec],
                    strides=[ks * rec, chunks * rec, 1],
                )
                # all of A, step by step: per step its ks K-chunks, part by part, each all M rows
                ChannelPut(
                    f"{A_L3}{x}",
                    l3a,
                    sizes=[steps, ks, m, tk],
                    strides=[ks * tk, tk, k, 1],
                )

            @segment(name="gemv_seg")
            def segment_body():
                for x in range(COLUMNS):
                    for _ in loop(steps):
                        a_stage = AllocOp(a_stage_l2, [], [])
                        ChannelGet(f"{A_L3}{x}", a_stage)
                        ChannelPut(A_IN, a_stage, indices=[x, 0])
                        DeallocOp(a_stage)
                        stage = AllocOp(stage_l2, [], [])
                        ChannelGet(f"{W_L3}{x}", stage)
                        for c in range(cpc):
                            for q in range(ks):
                                ChannelPut(
                                    W_IN,
                                    stage,
                                    indices=[x, c * ks + q],
                                    offsets=[c, 0, q, 0],
                                    sizes=[1, ntg, 1, rec],
                                    strides=[ntg * ks * rec, ks * rec, rec, 1],
                                )
                        DeallocOp(stage)

                scratch = [AllocOp(scratch_row, [], []) for _ in range(ROWS)]
                for y in range(ROWS):
                    row_herd(y, scratch[y])
                for buf in scratch:
                    DeallocOp(buf)

            # C: the last PE of each chain writes its group's tiles_per_group * tile_n columns
            for x in range(COLUMNS):
                for c in range(cpc):
                    g = x * cpc + c
                    ChannelGet(
                        C_OUT,
                        l3c,
                        indices=[x, c],
                        offsets=[0, 0, g * ntg * tn],
                        sizes=[ntg, m, tn],
                        strides=[tn, n, 1],
                    )


def backend_options(cfg: GemvConfig) -> dict:
    """XRTBackend options for this design (the NPU compile and the emulator take the same)."""
    return dict(
        target_device="npu2",
        stack_size=cfg.stack_bytes,
        omit_while_true_loop=False,
        instance_name="matvec_int4_packed",
    )


def main(argv=None) -> int:
    from int4awq.air_run import act, add_action_arguments
    from int4awq.errors import ConfigError
    from int4awq.gemv import config_from_args

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--m", type=int, required=True, help="rows of A and C (1 to 32)"
    )
    parser.add_argument("--k", type=int, required=True, help="reduction dimension")
    parser.add_argument("--n", type=int, required=True, help="columns of C")
    parser.add_argument("--gs", type=int, default=128, help="AWQ group size along K")
    for opt, what in (
        ("tile-n", "the record's N tile"),
        ("tile-k-l1", "the record's K-chunk"),
        ("k-split", "PEs per chain down a column, 2 or 4"),
        ("tile-m", "the GEMM tile_m of the shared kernel object"),
        ("stack-size", "the core's stack in L1, bytes"),
    ):
        parser.add_argument(
            f"--{opt}",
            dest=opt.replace("-", "_"),
            type=int,
            default=None,
            help=f"{what} (default: the best modelled configuration the resource model accepts)",
        )
    add_action_arguments(parser)
    args = parser.parse_args(argv)
    try:
        cfg, _ = config_from_args(args, args.m, args.k, args.n, args.gs)
        module = build_module(cfg)
        return act(args, cfg, module, backend_options(cfg))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| less` ends quietly
    sys.exit(main())
