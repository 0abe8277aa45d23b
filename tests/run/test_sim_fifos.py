# SPDX-License-Identifier: MIT
"""Bounded FIFOs in the simulator of the compiled design (emulator/aiesim, issue 51's "bounded FIFOs"; the
depths and their sources: docs/simulator.md, "Bounded FIFOs").

Three small physical designs, written here in MLIR's generic form (aie-opt --mlir-print-op-generic of a
hand-written NPU2 design), each a deadlock that only back-pressure coupling makes, run at the depth (it
passes) and one word past it (it hangs, the report naming the full FIFO):

* a sender runs ahead of its receiver by at most the FIFOs of its path: tile (0, 2)'s MM2S sends one BD of
  N words to tile (0, 3), whose first BD takes M of them and whose second BD waits for a lock tile (0, 3)'s
  core releases only once the sender's BD has ended (its locks released); the X = N - M words between fit
  in the path's FIFOs (the DMA channels' and two switchboxes' ports: 192 bytes) or the sender stalls;
* a broadcast moves at the pace of its slowest receiver: tile (0, 2)'s MM2S reaches tile (0, 3) and, through
  (0, 3)'s switchbox, tile (0, 4); (0, 4)'s BD waits for a lock (0, 3)'s core releases once (0, 3) has the
  whole transfer: (0, 3) can be ahead by the FIFOs on (0, 4)'s branch (128 bytes) and no more;
* a cascade put blocks when the cascade holds its depth: tile (0, 3)'s core puts P 512-bit words down the
  cascade to tile (0, 2) before releasing the lock (0, 2)'s core waits for before its first get: four words
  fit (two in each core's cascade FIFO).

The simulator before these bounds (unbounded buffering) ran the broadcast and the cascade past their
depths to the right output, and hung the first design even at its depth (a BD ended only when its
receiver had taken every word).
"""

import os
import sys

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "emulator"))
import aiesim  # noqa: E402
from aiesim import engine  # noqa: E402

SEEDS = (None, 0, 1, 2)  # the deterministic order and three seeded schedules


# tile (0, 2): a core writing 0..N-1 into `a` (N i32 words), then releasing lock 0; its MM2S 0 (acquire
# lock 0) sends `a` North to tile (0, 3) and releases lock 1 when its BD ends. Tile (0, 3): S2MM 0 takes M
# words into b1 (then releases lock 1 of (0, 3)), then, after acquiring lock 0 of (0, 3), X = N - M words
# into b2 (then releases lock 2); its core acquires lock 1 of (0, 2) (the sender's BD ended) and releases
# lock 0 of (0, 3); its MM2S 0 sends b1 and b2 South to the shim, whose S2MM 0 writes the host array.
P2P = """
"builtin.module"() ({
  "aie.device"() <{device = 8 : i32, sym_name = "main"}> ({
    %0 = "aie.tile"() <{col = 0 : i32, row = 0 : i32}> : () -> index
    %1 = "aie.tile"() <{col = 0 : i32, row = 1 : i32}> : () -> index
    %2 = "aie.tile"() <{col = 0 : i32, row = 2 : i32}> : () -> index
    %3 = "aie.tile"() <{col = 0 : i32, row = 3 : i32}> : () -> index
    %4 = "aie.lock"(%2) <{init = 0 : i32, lockID = 0 : i32}> : (index) -> index
    %5 = "aie.lock"(%2) <{init = 0 : i32, lockID = 1 : i32}> : (index) -> index
    %6 = "aie.buffer"(%2) <{address = 1024 : i32, aligned = true, sym_name = "a"}> : (index) -> memref<N_WORDSxi32>
    %7 = "aie.lock"(%3) <{init = 0 : i32, lockID = 0 : i32}> : (index) -> index
    %8 = "aie.lock"(%3) <{init = 0 : i32, lockID = 1 : i32}> : (index) -> index
    %9 = "aie.lock"(%3) <{init = 0 : i32, lockID = 2 : i32}> : (index) -> index
    %10 = "aie.buffer"(%3) <{address = 1024 : i32, aligned = true, sym_name = "b1"}> : (index) -> memref<M_WORDSxi32>
    %11 = "aie.buffer"(%3) <{address = 16384 : i32, aligned = true, sym_name = "b2"}> : (index) -> memref<X_WORDSxi32>
    %12 = "aie.core"(%2) ({
      %28 = "arith.constant"() <{value = 1 : i32}> : () -> i32
      %29 = "arith.constant"() <{value = 0 : index}> : () -> index
      %30 = "arith.constant"() <{value = 1 : index}> : () -> index
      %31 = "arith.constant"() <{value = N_WORDS : index}> : () -> index
      "cf.br"(%29)[^bb1] : (index) -> ()
    ^bb1(%32: index):
      %33 = "arith.cmpi"(%32, %31) <{predicate = 2 : i64}> : (index, index) -> i1
      "cf.cond_br"(%33)[^bb2, ^bb3] <{operandSegmentSizes = array<i32: 1, 0, 0>}> : (i1) -> ()
    ^bb2:
      %34 = "arith.index_cast"(%32) : (index) -> i32
      "memref.store"(%34, %6, %32) : (i32, memref<N_WORDSxi32>, index) -> ()
      %35 = "arith.addi"(%32, %30) <{overflowFlags = #arith.overflow<none>}> : (index, index) -> index
      "cf.br"(%35)[^bb1] : (index) -> ()
    ^bb3:
      "aie.use_lock"(%4, %28) <{action = 1 : i32}> : (index, i32) -> ()
      "aie.end"() : () -> ()
    }) : (index) -> index
    %13 = "aie.mem"(%2) ({
      %26 = "arith.constant"() <{value = 1 : i32}> : () -> i32
      %27 = "aie.dma_start"()[^bb1, ^bb2] <{channel_dir = 1 : i32, channel_index = 0 : i32, repeat_count = 0 : i32}> : () -> i1
    ^bb1:
      "aie.use_lock"(%4, %26) <{action = 2 : i32}> : (index, i32) -> ()
      "aie.dma_bd"(%6) <{bd_id = 0 : i32, operandSegmentSizes = array<i32: 1, 0, 0, 0, 0>, static_len = N_WORDS : i32, static_offset = 0 : i32}> : (memref<N_WORDSxi32>) -> ()
      "aie.use_lock"(%5, %26) <{action = 1 : i32}> : (index, i32) -> ()
      "aie.next_bd"()[^bb2] : () -> ()
    ^bb2:
      "aie.end"() : () -> ()
    }) : (index) -> index
    %14 = "aie.core"(%3) ({
      %25 = "arith.constant"() <{value = 1 : i32}> : () -> i32
      "aie.use_lock"(%5, %25) <{action = 2 : i32}> : (index, i32) -> ()
      "aie.use_lock"(%7, %25) <{action = 1 : i32}> : (index, i32) -> ()
      "aie.end"() : () -> ()
    }) : (index) -> index
    %15 = "aie.mem"(%3) ({
      %22 = "arith.constant"() <{value = 1 : i32}> : () -> i32
      %23 = "aie.dma_start"()[^bb1, ^bb4] <{channel_dir = 0 : i32, channel_index = 0 : i32, repeat_count = 0 : i32}> : () -> i1
    ^bb1:
      "aie.dma_bd"(%10) <{bd_id = 0 : i32, operandSegmentSizes = array<i32: 1, 0, 0, 0, 0>, static_len = M_WORDS : i32, static_offset = 0 : i32}> : (memref<M_WORDSxi32>) -> ()
      "aie.use_lock"(%8, %22) <{action = 1 : i32}> : (index, i32) -> ()
      "aie.next_bd"()[^bb2] : () -> ()
    ^bb2:
      "aie.use_lock"(%7, %22) <{action = 2 : i32}> : (index, i32) -> ()
      "aie.dma_bd"(%11) <{bd_id = 1 : i32, operandSegmentSizes = array<i32: 1, 0, 0, 0, 0>, static_len = X_WORDS : i32, static_offset = 0 : i32}> : (memref<X_WORDSxi32>) -> ()
      "aie.use_lock"(%9, %22) <{action = 1 : i32}> : (index, i32) -> ()
      "aie.next_bd"()[^bb3] : () -> ()
    ^bb3:
      "aie.end"() : () -> ()
    ^bb4:
      %24 = "aie.dma_start"()[^bb5, ^bb7] <{channel_dir = 1 : i32, channel_index = 0 : i32, repeat_count = 0 : i32}> : () -> i1
    ^bb5:
      "aie.use_lock"(%8, %22) <{action = 2 : i32}> : (index, i32) -> ()
      "aie.dma_bd"(%10) <{bd_id = 2 : i32, operandSegmentSizes = array<i32: 1, 0, 0, 0, 0>, static_len = M_WORDS : i32, static_offset = 0 : i32}> : (memref<M_WORDSxi32>) -> ()
      "aie.next_bd"()[^bb6] : () -> ()
    ^bb6:
      "aie.use_lock"(%9, %22) <{action = 2 : i32}> : (index, i32) -> ()
      "aie.dma_bd"(%11) <{bd_id = 3 : i32, operandSegmentSizes = array<i32: 1, 0, 0, 0, 0>, static_len = X_WORDS : i32, static_offset = 0 : i32}> : (memref<X_WORDSxi32>) -> ()
      "aie.next_bd"()[^bb7] : () -> ()
    ^bb7:
      "aie.end"() : () -> ()
    }) : (index) -> index
    %16 = "aie.switchbox"(%2) ({
      "aie.connect"() <{dest_bundle = 5 : i32, dest_channel = 0 : i32, source_bundle = 1 : i32, source_channel = 0 : i32}> : () -> ()
      "aie.connect"() <{dest_bundle = 3 : i32, dest_channel = 0 : i32, source_bundle = 5 : i32, source_channel = 0 : i32}> : () -> ()
      "aie.end"() : () -> ()
    }) : (index) -> index
    %17 = "aie.switchbox"(%3) ({
      "aie.connect"() <{dest_bundle = 1 : i32, dest_channel = 0 : i32, source_bundle = 3 : i32, source_channel = 0 : i32}> : () -> ()
      "aie.connect"() <{dest_bundle = 3 : i32, dest_channel = 0 : i32, source_bundle = 1 : i32, source_channel = 0 : i32}> : () -> ()
      "aie.end"() : () -> ()
    }) : (index) -> index
    %18 = "aie.switchbox"(%1) ({
      "aie.connect"() <{dest_bundle = 3 : i32, dest_channel = 0 : i32, source_bundle = 5 : i32, source_channel = 0 : i32}> : () -> ()
      "aie.end"() : () -> ()
    }) : (index) -> index
    %19 = "aie.switchbox"(%0) ({
      "aie.connect"() <{dest_bundle = 3 : i32, dest_channel = 2 : i32, source_bundle = 5 : i32, source_channel = 0 : i32}> : () -> ()
      "aie.end"() : () -> ()
    }) : (index) -> index
    %20 = "aie.shim_mux"(%0) ({
      "aie.connect"() <{dest_bundle = 1 : i32, dest_channel = 0 : i32, source_bundle = 5 : i32, source_channel = 2 : i32}> : () -> ()
      "aie.end"() : () -> ()
    }) : (index) -> index
    "aie.shim_dma_allocation"(%0) <{channel_dir = 0 : i32, channel_index = 0 : i64, plio = false, sym_name = "out"}> : (index) -> ()
    "aie.runtime_sequence"() <{sym_name = "seq"}> ({
    ^bb0(%arg0: memref<N_WORDSxi32>):
      %21 = "aiex.dma_configure_task_for"() <{alloc = @out, issue_token = true}> ({
        "aie.dma_bd"(%arg0) <{operandSegmentSizes = array<i32: 1, 0, 0, 0, 0>, static_len = N_WORDS : i32, static_offset = 0 : i32}> : (memref<N_WORDSxi32>) -> ()
        "aie.end"() : () -> ()
      }) : () -> index
      "aiex.dma_start_task"(%21) : (index) -> ()
      "aiex.dma_await_task"(%21) : (index) -> ()
    }) : () -> ()
    "aie.end"() : () -> ()
  }) : () -> ()
}) : () -> ()
"""

# tile (0, 2)'s core and MM2S as above (no release after the BD); the stream reaches tile (0, 3)'s S2MM 0
# and, forked in (0, 3)'s switchbox, tile (0, 4)'s S2MM 0. (0, 3) takes N words into r3 and releases its
# lock 0; its core acquires that and releases lock 0 of (0, 4), which (0, 4)'s S2MM waits for before
# taking the N words into r4; (0, 4)'s MM2S sends r4 South to the shim.
BROADCAST = """
"builtin.module"() ({
  "aie.device"() <{device = 8 : i32, sym_name = "main"}> ({
    %0 = "aie.tile"() <{col = 0 : i32, row = 0 : i32}> : () -> index
    %1 = "aie.tile"() <{col = 0 : i32, row = 1 : i32}> : () -> index
    %2 = "aie.tile"() <{col = 0 : i32, row = 2 : i32}> : () -> index
    %3 = "aie.tile"() <{col = 0 : i32, row = 3 : i32}> : () -> index
    %4 = "aie.tile"() <{col = 0 : i32, row = 4 : i32}> : () -> index
    %5 = "aie.lock"(%2) <{init = 0 : i32, lockID = 0 : i32}> : (index) -> index
    %6 = "aie.buffer"(%2) <{address = 1024 : i32, aligned = true, sym_name = "a"}> : (index) -> memref<N_WORDSxi32>
    %7 = "aie.lock"(%3) <{init = 0 : i32, lockID = 0 : i32}> : (index) -> index
    %8 = "aie.buffer"(%3) <{address = 1024 : i32, aligned = true, sym_name = "r3"}> : (index) -> memref<N_WORDSxi32>
    %9 = "aie.lock"(%4) <{init = 0 : i32, lockID = 0 : i32}> : (index) -> index
    %10 = "aie.lock"(%4) <{init = 0 : i32, lockID = 1 : i32}> : (index) -> index
    %11 = "aie.buffer"(%4) <{address = 1024 : i32, aligned = true, sym_name = "r4"}> : (index) -> memref<N_WORDSxi32>
    %12 = "aie.core"(%2) ({
      %32 = "arith.constant"() <{value = 1 : i32}> : () -> i32
      %33 = "arith.constant"() <{value = 0 : index}> : () -> index
      %34 = "arith.constant"() <{value = 1 : index}> : () -> index
      %35 = "arith.constant"() <{value = N_WORDS : index}> : () -> index
      "cf.br"(%33)[^bb1] : (index) -> ()
    ^bb1(%36: index):
      %37 = "arith.cmpi"(%36, %35) <{predicate = 2 : i64}> : (index, index) -> i1
      "cf.cond_br"(%37)[^bb2, ^bb3] <{operandSegmentSizes = array<i32: 1, 0, 0>}> : (i1) -> ()
    ^bb2:
      %38 = "arith.index_cast"(%36) : (index) -> i32
      "memref.store"(%38, %6, %36) : (i32, memref<N_WORDSxi32>, index) -> ()
      %39 = "arith.addi"(%36, %34) <{overflowFlags = #arith.overflow<none>}> : (index, index) -> index
      "cf.br"(%39)[^bb1] : (index) -> ()
    ^bb3:
      "aie.use_lock"(%5, %32) <{action = 1 : i32}> : (index, i32) -> ()
      "aie.end"() : () -> ()
    }) : (index) -> index
    %13 = "aie.mem"(%2) ({
      %30 = "arith.constant"() <{value = 1 : i32}> : () -> i32
      %31 = "aie.dma_start"()[^bb1, ^bb2] <{channel_dir = 1 : i32, channel_index = 0 : i32, repeat_count = 0 : i32}> : () -> i1
    ^bb1:
      "aie.use_lock"(%5, %30) <{action = 2 : i32}> : (index, i32) -> ()
      "aie.dma_bd"(%6) <{bd_id = 0 : i32, operandSegmentSizes = array<i32: 1, 0, 0, 0, 0>, static_len = N_WORDS : i32, static_offset = 0 : i32}> : (memref<N_WORDSxi32>) -> ()
      "aie.next_bd"()[^bb2] : () -> ()
    ^bb2:
      "aie.end"() : () -> ()
    }) : (index) -> index
    %14 = "aie.core"(%3) ({
      %29 = "arith.constant"() <{value = 1 : i32}> : () -> i32
      "aie.use_lock"(%7, %29) <{action = 2 : i32}> : (index, i32) -> ()
      "aie.use_lock"(%9, %29) <{action = 1 : i32}> : (index, i32) -> ()
      "aie.end"() : () -> ()
    }) : (index) -> index
    %15 = "aie.mem"(%3) ({
      %27 = "arith.constant"() <{value = 1 : i32}> : () -> i32
      %28 = "aie.dma_start"()[^bb1, ^bb2] <{channel_dir = 0 : i32, channel_index = 0 : i32, repeat_count = 0 : i32}> : () -> i1
    ^bb1:
      "aie.dma_bd"(%8) <{bd_id = 0 : i32, operandSegmentSizes = array<i32: 1, 0, 0, 0, 0>, static_len = N_WORDS : i32, static_offset = 0 : i32}> : (memref<N_WORDSxi32>) -> ()
      "aie.use_lock"(%7, %27) <{action = 1 : i32}> : (index, i32) -> ()
      "aie.next_bd"()[^bb2] : () -> ()
    ^bb2:
      "aie.end"() : () -> ()
    }) : (index) -> index
    %16 = "aie.mem"(%4) ({
      %24 = "arith.constant"() <{value = 1 : i32}> : () -> i32
      %25 = "aie.dma_start"()[^bb1, ^bb3] <{channel_dir = 0 : i32, channel_index = 0 : i32, repeat_count = 0 : i32}> : () -> i1
    ^bb1:
      "aie.use_lock"(%9, %24) <{action = 2 : i32}> : (index, i32) -> ()
      "aie.dma_bd"(%11) <{bd_id = 0 : i32, operandSegmentSizes = array<i32: 1, 0, 0, 0, 0>, static_len = N_WORDS : i32, static_offset = 0 : i32}> : (memref<N_WORDSxi32>) -> ()
      "aie.use_lock"(%10, %24) <{action = 1 : i32}> : (index, i32) -> ()
      "aie.next_bd"()[^bb2] : () -> ()
    ^bb2:
      "aie.end"() : () -> ()
    ^bb3:
      %26 = "aie.dma_start"()[^bb4, ^bb5] <{channel_dir = 1 : i32, channel_index = 0 : i32, repeat_count = 0 : i32}> : () -> i1
    ^bb4:
      "aie.use_lock"(%10, %24) <{action = 2 : i32}> : (index, i32) -> ()
      "aie.dma_bd"(%11) <{bd_id = 1 : i32, operandSegmentSizes = array<i32: 1, 0, 0, 0, 0>, static_len = N_WORDS : i32, static_offset = 0 : i32}> : (memref<N_WORDSxi32>) -> ()
      "aie.next_bd"()[^bb5] : () -> ()
    ^bb5:
      "aie.end"() : () -> ()
    }) : (index) -> index
    %17 = "aie.switchbox"(%2) ({
      "aie.connect"() <{dest_bundle = 5 : i32, dest_channel = 0 : i32, source_bundle = 1 : i32, source_channel = 0 : i32}> : () -> ()
      "aie.connect"() <{dest_bundle = 3 : i32, dest_channel = 0 : i32, source_bundle = 5 : i32, source_channel = 0 : i32}> : () -> ()
      "aie.end"() : () -> ()
    }) : (index) -> index
    %18 = "aie.switchbox"(%3) ({
      "aie.connect"() <{dest_bundle = 1 : i32, dest_channel = 0 : i32, source_bundle = 3 : i32, source_channel = 0 : i32}> : () -> ()
      "aie.connect"() <{dest_bundle = 5 : i32, dest_channel = 0 : i32, source_bundle = 3 : i32, source_channel = 0 : i32}> : () -> ()
      "aie.connect"() <{dest_bundle = 3 : i32, dest_channel = 0 : i32, source_bundle = 5 : i32, source_channel = 0 : i32}> : () -> ()
      "aie.end"() : () -> ()
    }) : (index) -> index
    %19 = "aie.switchbox"(%4) ({
      "aie.connect"() <{dest_bundle = 1 : i32, dest_channel = 0 : i32, source_bundle = 3 : i32, source_channel = 0 : i32}> : () -> ()
      "aie.connect"() <{dest_bundle = 3 : i32, dest_channel = 0 : i32, source_bundle = 1 : i32, source_channel = 0 : i32}> : () -> ()
      "aie.end"() : () -> ()
    }) : (index) -> index
    %20 = "aie.switchbox"(%1) ({
      "aie.connect"() <{dest_bundle = 3 : i32, dest_channel = 0 : i32, source_bundle = 5 : i32, source_channel = 0 : i32}> : () -> ()
      "aie.end"() : () -> ()
    }) : (index) -> index
    %21 = "aie.switchbox"(%0) ({
      "aie.connect"() <{dest_bundle = 3 : i32, dest_channel = 2 : i32, source_bundle = 5 : i32, source_channel = 0 : i32}> : () -> ()
      "aie.end"() : () -> ()
    }) : (index) -> index
    %22 = "aie.shim_mux"(%0) ({
      "aie.connect"() <{dest_bundle = 1 : i32, dest_channel = 0 : i32, source_bundle = 5 : i32, source_channel = 2 : i32}> : () -> ()
      "aie.end"() : () -> ()
    }) : (index) -> index
    "aie.shim_dma_allocation"(%0) <{channel_dir = 0 : i32, channel_index = 0 : i64, plio = false, sym_name = "out"}> : (index) -> ()
    "aie.runtime_sequence"() <{sym_name = "seq"}> ({
    ^bb0(%arg0: memref<N_WORDSxi32>):
      %23 = "aiex.dma_configure_task_for"() <{alloc = @out, issue_token = true}> ({
        "aie.dma_bd"(%arg0) <{operandSegmentSizes = array<i32: 1, 0, 0, 0, 0>, static_len = N_WORDS : i32, static_offset = 0 : i32}> : (memref<N_WORDSxi32>) -> ()
        "aie.end"() : () -> ()
      }) : () -> index
      "aiex.dma_start_task"(%23) : (index) -> ()
      "aiex.dma_await_task"(%23) : (index) -> ()
    }) : () -> ()
    "aie.end"() : () -> ()
  }) : () -> ()
}) : () -> ()
"""

# tile (0, 3)'s core writes 0..N-1 into s (N = 16 P), puts P vector<16xi32> (one 512-bit word each) down
# the cascade to tile (0, 2), then releases lock 0 of (0, 2); (0, 2)'s core acquires that, then its
# buffer's free lock, gets P words into c, releases the full lock; its MM2S sends c to the shim.
CASCADE = """
"builtin.module"() ({
  "aie.device"() <{device = 8 : i32, sym_name = "main"}> ({
    %0 = "aie.tile"() <{col = 0 : i32, row = 0 : i32}> : () -> index
    %1 = "aie.tile"() <{col = 0 : i32, row = 1 : i32}> : () -> index
    %2 = "aie.tile"() <{col = 0 : i32, row = 3 : i32}> : () -> index
    %3 = "aie.tile"() <{col = 0 : i32, row = 2 : i32}> : () -> index
    "aie.configure_cascade"(%2) <{inputDir = 5 : i32, outputDir = 3 : i32}> : (index) -> ()
    "aie.configure_cascade"(%3) <{inputDir = 5 : i32, outputDir = 3 : i32}> : (index) -> ()
    %4 = "aie.buffer"(%2) <{address = 1024 : i32, aligned = true, sym_name = "s"}> : (index) -> memref<N_WORDSxi32>
    %5 = "aie.lock"(%3) <{init = 0 : i32, lockID = 0 : i32}> : (index) -> index
    %6 = "aie.lock"(%3) <{init = 1 : i32, lockID = 1 : i32}> : (index) -> index
    %7 = "aie.lock"(%3) <{init = 0 : i32, lockID = 2 : i32}> : (index) -> index
    %8 = "aie.buffer"(%3) <{address = 1024 : i32, aligned = true, sym_name = "c"}> : (index) -> memref<N_WORDSxi32>
    %9 = "aie.core"(%2) ({
      %29 = "arith.constant"() <{value = 1 : i32}> : () -> i32
      %30 = "arith.constant"() <{value = 0 : index}> : () -> index
      %31 = "arith.constant"() <{value = 1 : index}> : () -> index
      %32 = "arith.constant"() <{value = 16 : index}> : () -> index
      %33 = "arith.constant"() <{value = N_WORDS : index}> : () -> index
      %34 = "arith.constant"() <{value = PUTS : index}> : () -> index
      "cf.br"(%30)[^bb1] : (index) -> ()
    ^bb1(%35: index):
      %36 = "arith.cmpi"(%35, %33) <{predicate = 2 : i64}> : (index, index) -> i1
      "cf.cond_br"(%36, %30)[^bb2, ^bb3] <{operandSegmentSizes = array<i32: 1, 0, 1>}> : (i1, index) -> ()
    ^bb2:
      %37 = "arith.index_cast"(%35) : (index) -> i32
      "memref.store"(%37, %4, %35) : (i32, memref<N_WORDSxi32>, index) -> ()
      %38 = "arith.addi"(%35, %31) <{overflowFlags = #arith.overflow<none>}> : (index, index) -> index
      "cf.br"(%38)[^bb1] : (index) -> ()
    ^bb3(%39: index):
      %40 = "arith.cmpi"(%39, %34) <{predicate = 2 : i64}> : (index, index) -> i1
      "cf.cond_br"(%40)[^bb4, ^bb5] <{operandSegmentSizes = array<i32: 1, 0, 0>}> : (i1) -> ()
    ^bb4:
      %41 = "arith.muli"(%39, %32) <{overflowFlags = #arith.overflow<none>}> : (index, index) -> index
      %42 = "vector.load"(%4, %41) : (memref<N_WORDSxi32>, index) -> vector<16xi32>
      "aie.put_cascade"(%42) : (vector<16xi32>) -> ()
      %43 = "arith.addi"(%39, %31) <{overflowFlags = #arith.overflow<none>}> : (index, index) -> index
      "cf.br"(%43)[^bb3] : (index) -> ()
    ^bb5:
      "aie.use_lock"(%5, %29) <{action = 1 : i32}> : (index, i32) -> ()
      "aie.end"() : () -> ()
    }) : (index) -> index
    %10 = "aie.core"(%3) ({
      %19 = "arith.constant"() <{value = 1 : i32}> : () -> i32
      %20 = "arith.constant"() <{value = 0 : index}> : () -> index
      %21 = "arith.constant"() <{value = 1 : index}> : () -> index
      %22 = "arith.constant"() <{value = 16 : index}> : () -> index
      %23 = "arith.constant"() <{value = PUTS : index}> : () -> index
      "aie.use_lock"(%5, %19) <{action = 2 : i32}> : (index, i32) -> ()
      "aie.use_lock"(%6, %19) <{action = 2 : i32}> : (index, i32) -> ()
      "cf.br"(%20)[^bb1] : (index) -> ()
    ^bb1(%24: index):
      %25 = "arith.cmpi"(%24, %23) <{predicate = 2 : i64}> : (index, index) -> i1
      "cf.cond_br"(%25)[^bb2, ^bb3] <{operandSegmentSizes = array<i32: 1, 0, 0>}> : (i1) -> ()
    ^bb2:
      %26 = "aie.get_cascade"() : () -> vector<16xi32>
      %27 = "arith.muli"(%24, %22) <{overflowFlags = #arith.overflow<none>}> : (index, index) -> index
      "vector.store"(%26, %8, %27) : (vector<16xi32>, memref<N_WORDSxi32>, index) -> ()
      %28 = "arith.addi"(%24, %21) <{overflowFlags = #arith.overflow<none>}> : (index, index) -> index
      "cf.br"(%28)[^bb1] : (index) -> ()
    ^bb3:
      "aie.use_lock"(%7, %19) <{action = 1 : i32}> : (index, i32) -> ()
      "aie.end"() : () -> ()
    }) : (index) -> index
    %11 = "aie.mem"(%3) ({
      %17 = "arith.constant"() <{value = 1 : i32}> : () -> i32
      %18 = "aie.dma_start"()[^bb1, ^bb2] <{channel_dir = 1 : i32, channel_index = 0 : i32, repeat_count = 0 : i32}> : () -> i1
    ^bb1:
      "aie.use_lock"(%7, %17) <{action = 2 : i32}> : (index, i32) -> ()
      "aie.dma_bd"(%8) <{bd_id = 0 : i32, operandSegmentSizes = array<i32: 1, 0, 0, 0, 0>, static_len = N_WORDS : i32, static_offset = 0 : i32}> : (memref<N_WORDSxi32>) -> ()
      "aie.use_lock"(%6, %17) <{action = 1 : i32}> : (index, i32) -> ()
      "aie.next_bd"()[^bb2] : () -> ()
    ^bb2:
      "aie.end"() : () -> ()
    }) : (index) -> index
    %12 = "aie.switchbox"(%3) ({
      "aie.connect"() <{dest_bundle = 3 : i32, dest_channel = 0 : i32, source_bundle = 1 : i32, source_channel = 0 : i32}> : () -> ()
      "aie.end"() : () -> ()
    }) : (index) -> index
    %13 = "aie.switchbox"(%1) ({
      "aie.connect"() <{dest_bundle = 3 : i32, dest_channel = 0 : i32, source_bundle = 5 : i32, source_channel = 0 : i32}> : () -> ()
      "aie.end"() : () -> ()
    }) : (index) -> index
    %14 = "aie.switchbox"(%0) ({
      "aie.connect"() <{dest_bundle = 3 : i32, dest_channel = 2 : i32, source_bundle = 5 : i32, source_channel = 0 : i32}> : () -> ()
      "aie.end"() : () -> ()
    }) : (index) -> index
    %15 = "aie.shim_mux"(%0) ({
      "aie.connect"() <{dest_bundle = 1 : i32, dest_channel = 0 : i32, source_bundle = 5 : i32, source_channel = 2 : i32}> : () -> ()
      "aie.end"() : () -> ()
    }) : (index) -> index
    "aie.shim_dma_allocation"(%0) <{channel_dir = 0 : i32, channel_index = 0 : i64, plio = false, sym_name = "out"}> : (index) -> ()
    "aie.runtime_sequence"() <{sym_name = "seq"}> ({
    ^bb0(%arg0: memref<N_WORDSxi32>):
      %16 = "aiex.dma_configure_task_for"() <{alloc = @out, issue_token = true}> ({
        "aie.dma_bd"(%arg0) <{operandSegmentSizes = array<i32: 1, 0, 0, 0, 0>, static_len = N_WORDS : i32, static_offset = 0 : i32}> : (memref<N_WORDSxi32>) -> ()
        "aie.end"() : () -> ()
      }) : () -> index
      "aiex.dma_start_task"(%16) : (index) -> ()
      "aiex.dma_await_task"(%16) : (index) -> ()
    }) : () -> ()
    "aie.end"() : () -> ()
  }) : () -> ()
}) : () -> ()
"""


def p2p(n, m):
    return (
        P2P.replace("N_WORDS", str(n))
        .replace("M_WORDS", str(m))
        .replace("X_WORDS", str(n - m))
    )


def simulate(text, n, seed=None, ownership=True):
    """The design's output (n i32 words) and the Simulator; ownership=False: without the lock-ownership
    rule (these designs hand a lock from one tile's core to another tile's DMA, which the rule, deriving
    ownership from BD lock pairs, counts as a release with no acquire)."""
    sim = aiesim.Simulator(aiesim.load(aiesim.parse(text))[0], seed=seed)
    sim.check_ownership = ownership
    [out] = sim.run([np.zeros(n, np.int32)])
    return out, sim


def buffer(sim, name):
    return next(b for b in sim.design.buffers if b.name == name).view()


def test_the_path_of_a_stream_and_what_its_fifos_hold():
    design = aiesim.load(aiesim.parse(BROADCAST.replace("N_WORDS", "8")))[0]
    # the sender's channel, each switchbox's slave and master port, the receiver's channel
    assert [s[0] for s in design.paths[(0, 2, 0)][0]] == [
        "mm2s",
        "slave",
        "master",
        "slave",
        "master",
        "s2mm",
    ]
    sim = aiesim.Simulator(design)
    st = sim.streams[(0, 2, 0)]
    assert [p.name for p in st.ports] == ["tile (0, 3) S2MM 0", "tile (0, 4) S2MM 0"]
    # 4 entries of 8 bytes a stage (AM020's 4-deep ports, AM027's 64-bit data path; the DMA channels'
    # 4 an estimate): 6 stages to (0, 3), 8 to (0, 4)
    assert engine.SWITCH_PORT_FIFO_ENTRIES * engine.STREAM_FIFO_ENTRY_BYTES == 32
    assert st.depth == [192, 256]
    # what one receiver may take past the other: the stages on the other's branch after the fork
    assert st.lead[1][0] == 128 and st.lead[0][1] == 64


@pytest.mark.parametrize("seed", SEEDS)
def test_a_sender_runs_ahead_of_its_receiver_by_the_fifos_of_its_path(seed):
    # exactly the path's 192 bytes left for the second BD: the sender's BD ends with them in the FIFOs,
    # the lock it releases lets the second BD start, every word arrives
    out, sim = simulate(p2p(64 + 48, 64), 64 + 48, seed, ownership=False)
    assert out.tolist() == list(range(112))
    assert not sim.leftovers()
    # one word more: the sender stalls with the FIFOs full, its BD never ends, the second BD never starts
    with pytest.raises(aiesim.Hang) as e:
        simulate(p2p(64 + 49, 64), 64 + 49, seed, ownership=False)
    report = e.value.report
    assert (
        "tile (0, 2) MM2S 0: on BD 0 on a (offset 0, len 113): 448 of 452 bytes sent, stalled by "
        "back-pressure: the FIFOs of its stream are full towards tile (0, 3) S2MM 0 (its path buffers "
        "192 bytes, and it has taken 256 bytes of the stream)" in report
    )
    assert (
        "stream into tile (0, 3) S2MM 0: 192 bytes waiting (in its FIFOs), first from tile (0, 2) "
        "MM2S 0 BD 0 on a (offset 0, len 113)" in report
    )
    assert any("acquire lock 1 of tile (0, 2)" in ln for ln in report)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_broadcast_moves_at_the_pace_of_its_slowest_receiver(seed):
    # 32 words, the 128 bytes of FIFOs on (0, 4)'s branch: (0, 3) takes them all while (0, 4) waits
    out, sim = simulate(BROADCAST.replace("N_WORDS", "32"), 32, seed, ownership=False)
    assert out.tolist() == list(range(32))
    assert buffer(sim, "r3").tolist() == list(range(32))
    assert not sim.leftovers()
    # one word more: (0, 3) is held 4 bytes short, its core never releases (0, 4)'s lock
    with pytest.raises(aiesim.Hang) as e:
        simulate(BROADCAST.replace("N_WORDS", "33"), 33, seed, ownership=False)
    assert (
        "tile (0, 3) S2MM 0: on BD 0 on r3 (offset 0, len 33): 128 of 132 bytes received, held back by "
        "its broadcast (tile (0, 2) MM2S 0): tile (0, 4) S2MM 0 has taken 128 bytes fewer, which fills "
        "the 128 bytes of FIFOs on its branch (a broadcast moves at the pace of its slowest receiver)"
        in e.value.report
    )
    # a longer transfer: the sender stalls too, on the full FIFOs towards the receiver that takes nothing
    with pytest.raises(aiesim.Hang) as e:
        simulate(BROADCAST.replace("N_WORDS", "128"), 128, seed, ownership=False)
    assert (
        "tile (0, 2) MM2S 0: on BD 0 on a (offset 0, len 128): 256 of 512 bytes sent, stalled by "
        "back-pressure: the FIFOs of its stream are full towards tile (0, 4) S2MM 0 (its path buffers "
        "256 bytes, and it has taken 0 bytes of the stream)" in e.value.report
    )


def test_the_timed_mode_charges_a_broadcast_the_pace_of_its_slower_receiver():
    # (0, 3)'s core hands (0, 4) its lock at once (its acquire of (0, 3)'s full lock taken out): no
    # deadlock, 1024 bytes to each receiver; (0, 4)'s channel made ready only at cycle 1000
    acquire = (
        '      "aie.use_lock"(%7, %29) <{action = 2 : i32}> : (index, i32) -> ()\n'
    )
    assert BROADCAST.count(acquire) == 1
    text = BROADCAST.replace(acquire, "").replace("N_WORDS", "256")
    ends = {}
    for late in (0, 1000):
        sim = aiesim.Simulator(aiesim.load(aiesim.parse(text))[0], costs=aiesim.Costs())
        sim.check_ownership = False
        late_ch = sim.design.channels[(0, 4, aiesim.design.S2MM, 0)]
        sim.dma[id(late_ch)].t = late
        [out] = sim.run([np.zeros(256, np.int32)])
        assert out.tolist() == list(range(256))
        fast, slow = sim.streams[(0, 2, 0)].ports
        ends[late] = (fast.last_t, slow.last_t)
    # together: each takes its 1024 bytes at 8 a cycle
    assert ends[0] == (128, 128)
    # (0, 4) late: (0, 3) takes the 128 bytes (0, 4)'s branch holds, then goes at (0, 4)'s pace, ending
    # 128 bytes (16 cycles) before it; unbounded, it would have ended at cycle 128
    assert ends[1000] == (1000 + (1024 - 128) / 8, 1000 + 1024 / 8)


def cascade(puts):
    return CASCADE.replace("N_WORDS", str(16 * puts)).replace("PUTS", str(puts))


@pytest.mark.parametrize("seed", SEEDS)
def test_a_cascade_put_blocks_when_the_cascade_holds_its_depth(seed):
    # four 512-bit words: two in the sender's output FIFO, two in the receiver's input FIFO
    assert engine.CASCADE_DEPTH_WORDS == 4 and engine.CASCADE_WORD_BYTES == 64
    out, sim = simulate(cascade(4), 64, seed)
    assert out.tolist() == list(range(64)) and not sim.leftovers()
    # a fifth put before the neighbour takes any: the put stalls, the lock after it never comes
    with pytest.raises(aiesim.Hang) as e:
        simulate(cascade(5), 80, seed)
    report = e.value.report
    assert any(
        ln.startswith("core tile (0, 3): at line")
        and ln.endswith(
            "put_cascade to tile (0, 2): stalled by back-pressure, the cascade's FIFOs hold 4 of 4 "
            "512-bit words the core of tile (0, 2) has not taken"
        )
        for ln in report
    )
    assert any(
        ln.startswith("core tile (0, 2)") and "acquire lock 0 of tile (0, 2)" in ln
        for ln in report
    )


def test_an_acquire_is_dated_by_the_tokens_it_takes_not_the_locks_latest_release():
    """Each agent keeps its own clock, so a lock's latest release can lie in the future of an acquire that
    takes an older token (a ping-pong's other buffer, full long before): AcquireGreaterEqual takes the
    earliest released tokens and is dated by the last of them; acquire-equal, which takes none, by the
    lock's latest release (found at small M: each call waited for the next-but-one record).
    """
    import collections
    import types

    sim = object.__new__(engine.Simulator)
    sim.lock_t, sim.lock_tokens = {}, {}
    sim.lock_waiters = collections.defaultdict(list)
    lock = types.SimpleNamespace(value=0)
    for t in (100.0, 10.0):  # the later release processed first
        lock.value += 1
        sim.lock_released(lock, t, 1)
    assert sim.acquire_time(lock, 2, engine.ACQUIRE) == 100.0  # equal: takes nothing
    engine.lock_take(lock, 1, engine.ACQUIRE_GE)
    assert sim.acquire_time(lock, 1, engine.ACQUIRE_GE) == 10.0
    engine.lock_take(lock, 1, engine.ACQUIRE_GE)
    assert sim.acquire_time(lock, 1, engine.ACQUIRE_GE) == 100.0
    # a lock first met holding tokens from the start (its init value): they date from 0
    fresh = types.SimpleNamespace(value=2)
    engine.lock_take(fresh, 1, engine.ACQUIRE_GE)
    assert sim.acquire_time(fresh, 1, engine.ACQUIRE_GE) == 0.0
