#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Host-side figures (measured on this machine's CPU, not the NPU):

  * the reference GEMM for M = N = K = 2048 (f64 and f32 accumulation), budget 2 s;
  * the packer's time for every Llama-3.2-1B projection weight of 16 layers
    (q, o 2048x2048; k, v 2048x512; gate, up 2048x8192; down 8192x2048), budget 10 s;
  * the host-built kernel's speed for one tile configuration (MAC/s of matmul_int4_bf16_packed_f32 calls,
    i.e. the emulator's speed), default 64x64 tile, K-chunk 64, GS 128.

Usage: python3 host/bench_host.py [--tile-m 64 --tile-n 64 --tile-k 64 --gs 128 --calls 2000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
from ml_dtypes import bfloat16  # noqa: E402

from int4awq.errors import ConfigError  # noqa: E402
from int4awq.kernel.kernel_model import HostKernel, a_tile_blocked  # noqa: E402
from int4awq.formats.quant import random_activations, random_weights  # noqa: E402
from int4awq.run.reference import reference_gemm  # noqa: E402
from int4awq.design.llama import LAYERS, PROJECTIONS  # noqa: E402
from int4awq.formats.quant import AwqWeights  # noqa: E402
from int4awq.kernel.record import check_kernel_tiles, pack_weights  # noqa: E402


def bench_pack(
    layers: int = LAYERS,
    tile_n: int = 64,
    tile_k: int = 64,
    gs: int = 128,
    seed: int = 0,
) -> float:
    """Seconds to pack every Llama-3.2-1B projection of `layers` layers (weights generated up front)."""
    rng = np.random.default_rng(seed)
    pool = {}
    for k, n in set(
        PROJECTIONS.values()
    ):  # random codes; the packer's speed does not depend on the values
        pool[(k, n)] = AwqWeights(
            rng.integers(0, 16, (k, n), dtype=np.uint8),
            rng.integers(0, 16, (k // gs, n), dtype=np.uint8),
            rng.uniform(0.001, 0.1, (k // gs, n)).astype(bfloat16),
            gs,
        )
    t0 = time.perf_counter()
    for _ in range(layers):
        for k, n in PROJECTIONS.values():
            pack_weights(pool[(k, n)], tile_n, tile_k)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tile-m", type=int, default=64)
    ap.add_argument("--tile-n", type=int, default=64)
    ap.add_argument("--tile-k", type=int, default=64)
    ap.add_argument("--gs", type=int, default=128)
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()
    tm, tn, tk, gs = args.tile_m, args.tile_n, args.tile_k, args.gs
    try:
        check_kernel_tiles(tm, tn, tk, gs)
    except ConfigError as e:
        print(f"error: {e}")
        return 2

    w, a = random_weights(2048, 2048, 128, 0), random_activations(2048, 2048, 1)
    for acc in (np.float64, np.float32):
        t0 = time.perf_counter()
        reference_gemm(a, w, accumulate=acc)
        print(
            f"reference GEMM 2048^3 ({np.dtype(acc).name} accumulation): {time.perf_counter() - t0:.2f} s"
        )

    dt = bench_pack(layers=16, tile_n=tn, tile_k=tk, gs=gs)
    print(
        f"packer: all Llama-3.2-1B projections, 16 layers (tile_n {tn}, tile_k {tk}, gs {gs}): {dt:.2f} s"
    )

    hk = HostKernel(tm, tn, tk, gs)
    k = max(tk, gs)
    w = random_weights(k, tn, gs, 1)
    rec = pack_weights(w, tn, tk)[0, 0]
    hk.zero()
    hk.accumulate(rec, a_tile_blocked(random_activations(tm, tk, 2)))
    fn, bufs = hk.lib.matmul_int4_bf16_packed_f32, (
        hk.w_buf,
        hk.a_buf,
        hk.c_acc,
        hk.scratch,
    )
    ptrs = [b.ctypes.data for b in bufs]
    t0 = time.perf_counter()
    for _ in range(args.calls):
        fn(*ptrs)
    dt = time.perf_counter() - t0
    macs = args.calls * tm * tn * tk
    per_call = dt / args.calls
    print(
        f"host kernel {tm}x{tn}x{tk} (gs {gs}): {macs / dt / 1e6:.0f} MMAC/s, {per_call * 1e6:.0f} us per "
        f"matmul_int4_bf16_packed_f32 call; a 2048^3 GEMM ({2048**3 // (tm * tn * tk)} calls) ~ "
        f"{2048**3 / (macs / dt):.1f} s of kernel time"
    )
    assert np.isfinite(hk.c_acc).all()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
