# SPDX-License-Identifier: MIT
"""The AIE2P kernel from the host: a numpy model of its arithmetic and a ctypes driver of its host build.

kernel_gemm_model(a, w, tile_k) reproduces, bit for bit, what the kernel (kernels/int4_kernel.h) computes (native
bfp16ebs8 x bfp16ebs8 mmul on A converted once per call and (q - z) written exactly as int8 mantissas with
exponent byte 133, i.e. value = q - z; the same numbers as
a bf16 mmul built with AIE_API_EMULATE_BFLOAT16_MMUL_WITH_BFP16), under the bfp16 model the host aie_api
implements:

  * A rows (and, with the same values, (q - z) columns: every integer |q - z| <= 15 is exact either way) are
    cut into blocks of 8 along K and converted to bfp16 (shared exponent
    e = floor(log2 max|x|), mantissa round-half-even(x / 2^(e-6)) saturated to [-128, 127]);
  * per 8-deep K block the dot product is exact; it is added to the f32 group accumulator G (one
    round-to-nearest-even addition per block, K blocks in order);
  * per fold span (a group, or a K-chunk when a group spans chunks) c += hi * s, then c += lo * s in f32,
    hi = bf16(G), lo = bf16(G - hi), both round-to-nearest-even; with a scale pair s + s_lo (format
    awq_f16) then also c += hi * s_lo and c += lo * s_lo;
  * C = bf16(c), round-to-nearest-even.

HostKernel builds the GEMM object's shared library for a tile configuration (make -C kernels host) and runs a
whole GEMM through its three entry points, tile by tile, the way a PE would; GemvHostKernel does the same with
the GEMV object of a record tile.
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
from pathlib import Path

import numpy as np
from ml_dtypes import bfloat16, float4_e2m1fn

from ..errors import ConfigError
from int4_packed_record import (
    GEMV_MAX_M,
    gemv_acc_elems,
)  # noqa: F401  (the decode rules)
from ..formats.mxfp4 import E_BIAS, MX_BLOCK, Mxfp4Weights
from ..formats.quant import AwqWeights, bf16_rne
from .record import (
    KernelObject,
    block_int_parts,
    check_kernel_tiles,
    check_record_tile,
    check_weight_tiling,
    pack_format,
    w_scratch_bytes,
)

KERNELS_DIR = Path(__file__).resolve().parents[2] / "kernels"


# ------------------------------------------------------------------------------------------ numpy model
def bfp16_blocks(x: np.ndarray) -> np.ndarray:
    """bfp16ebs8 value of x (float32, last axis = blocks of 8), as float64 (exact)."""
    x = np.asarray(x, dtype=np.float32)
    if x.shape[-1] != 8:
        raise ConfigError(
            f"bfp16_blocks: last axis has {x.shape[-1]} values, expected blocks of 8"
        )
    x = np.where(
        np.abs(x) < np.finfo(np.float32).tiny, np.float32(0), x
    )  # subnormals count as 0
    mx = np.max(np.abs(x), axis=-1, keepdims=True)
    _, p = np.frexp(mx)  # mx = f * 2^p, f in [0.5, 1): floor(log2 mx) = p - 1
    step = np.ldexp(1.0, (p - 1 - 6).astype(np.int32))
    m = np.clip(np.rint(x.astype(np.float64) / step), -128, 127)
    return np.where(mx > 0, m * step, 0.0)


def mmul_integers(w) -> np.ndarray:
    """int16 [K, N]: the integers the kernel's block mmul takes for W, q - z (AWQ) or v (the block-integer
    types, int4awq.formats.gguf_quants); every one is exact as a bfp16 mantissa."""
    if isinstance(w, AwqWeights):
        return w.q.astype(np.int16) - np.repeat(w.z, w.gs, axis=0).astype(np.int16)
    return w.v


def _operands(a: np.ndarray, w):
    """The kernel's operands: A as bfp16 blocks along K [M, KB, 8]; W's integers as the blocks the mmul
    takes, [KB, N, 8] (exact: (q - z) of AWQ weights, |q - z| <= 15, through the block conversion; a
    block-integer type's v, which the record holds as mantissas with exponent byte 133); the scale's bf16
    parts and the min term's (None without one), f32 [groups, N] each.
    """
    m, k = a.shape
    a_bfp = bfp16_blocks(a.astype(np.float32).reshape(m, k // 8, 8))
    # the integers enter the mmul exactly (AWQ's through the block conversion, block-integer codes as
    # stored mantissas), so their blocks are their values
    ints = mmul_integers(w).astype(np.float64)
    w_bfp = ints.reshape(k // 8, 8, w.n).transpose(0, 2, 1)
    if isinstance(w, AwqWeights):
        s_parts, m_parts = [w.s] if w.s_lo is None else [w.s, w.s_lo], None
    else:  # block-integer weights (int4awq.formats.gguf_quants.BlockIntWeights)
        s_parts, m_parts = block_int_parts(w)

    def f32(parts):
        return None if parts is None else [p.astype(np.float32) for p in parts]

    return a_bfp, w_bfp, f32(s_parts), f32(m_parts)


def _split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """f32 x -> (bf16(x), bf16(x - bf16(x))) as f32, round to nearest even: how the kernel folds G and R."""
    hi = bf16_rne(x)
    return hi, bf16_rne(x - hi)


def _partial_sum(
    a_bfp: np.ndarray,
    w_bfp: np.ndarray,
    s: list[np.ndarray],
    m_parts: list[np.ndarray] | None,
    chunks: list[int] | range,
    tile_k: int,
    gs: int,
) -> np.ndarray:
    """f32 [M, N]: the sum over these K-chunks, in order: per fold span an f32 group sum G of exact 8-deep
    block products, then for each scale part s_i c += bf16(G) * s_i and c += bf16(G - bf16(G)) * s_i;
    with a min term, the span's row sums R of A (f32 sums of exact 8-deep block sums) the same way with
    the min term's parts (see module doc).
    """
    m, n = a_bfp.shape[0], w_bfp.shape[1]
    span = min(tile_k, gs)
    c = np.zeros((m, n), dtype=np.float32)

    def fold(c, x_hi, x_lo, parts, g):
        for part in parts:
            sc = part[g][None, :]
            c = (c + x_hi * sc).astype(np.float32)
            c = (c + x_lo * sc).astype(np.float32)
        return c

    for kc in chunks:
        for f in range(kc * tile_k // span, (kc + 1) * tile_k // span):
            g_acc = r_acc = None
            for kb in range(f * span // 8, (f + 1) * span // 8):
                d = (a_bfp[:, kb, :] @ w_bfp[kb].T).astype(np.float32)  # exact
                g_acc = d if g_acc is None else (g_acc + d).astype(np.float32)
                if m_parts is not None:  # a min term's row sums
                    r = a_bfp[:, kb, :].sum(axis=1).astype(np.float32)[:, None]  # exact
                    r_acc = r if r_acc is None else (r_acc + r).astype(np.float32)
            g = (f * span) // gs
            c = fold(c, *_split(g_acc), s, g)
            if m_parts is not None:
                c = fold(c, *_split(r_acc), m_parts, g)
    return c


def kernel_gemm_model(a: np.ndarray, w, tile_k: int) -> np.ndarray:
    """bf16 [M, N]: the kernel's result for C = A x dequant(W) with K-chunks of tile_k (see module doc), for
    AWQ weights and block-integer ones (int4awq.formats.gguf_quants.BlockIntWeights)."""
    a_bfp, w_bfp, s, m_parts = _operands(a, w)
    chunks = range(a.shape[1] // tile_k)
    return _partial_sum(a_bfp, w_bfp, s, m_parts, chunks, tile_k, w.gs).astype(bfloat16)


# ------------------------------------------------------------------------------------------ MXFP4 model
def mantissas(codes: np.ndarray) -> np.ndarray:
    """int8: twice each E2M1 code's value, the bfp16 mantissa it becomes."""
    return (codes.view(float4_e2m1fn).astype(np.float32) * 2).astype(np.int8)


def weight_blocks(w: Mxfp4Weights) -> np.ndarray:
    """float64 [K / 8, N, 8]: W as the kernel's bfp16 blocks along K (exactly its values)."""
    m = mantissas(w.codes).astype(np.float64)  # [K, N]
    e = np.repeat(w.scales.astype(np.int64) + E_BIAS - 133, MX_BLOCK, axis=0)  # [K, N]
    vals = np.ldexp(m, e)
    return vals.reshape(w.k // 8, 8, w.n).transpose(0, 2, 1)


def kernel_mxfp4_model(a: np.ndarray, w: Mxfp4Weights) -> np.ndarray:
    """bf16 [M, N]: what the MXFP4 entries compute for C = A x W: A in bfp16 blocks of 8 along K (the model
    of kernel_model), each 8-deep block product exact, added to the f32 accumulator in K order (one
    round-to-nearest-even addition per block, across K-chunks), C = bf16(c)."""
    m, k = a.shape
    a_bfp = bfp16_blocks(a.astype(np.float32).reshape(m, k // 8, 8))
    w_bfp = weight_blocks(w)
    c = np.zeros((m, w.n), dtype=np.float32)
    for kb in range(k // 8):
        c = c + (a_bfp[:, kb, :] @ w_bfp[kb].T).astype(np.float32)
    return c.astype(bfloat16)


# ------------------------------------------------------------------------------------------ host build
def build_host_kernel(obj: KernelObject, target: str = "host") -> Path:
    """make -C kernels host (or host-profile) for one kernel object; returns the path of the shared library."""
    if obj.entries == "gemm":
        check_kernel_tiles(obj.tile_m, obj.tile_n, obj.tile_k, obj.gs, fmt=obj.format)
    else:
        check_record_tile(obj.tile_n, obj.tile_k, obj.gs, obj.format)
    make = ["make", "-s", "-C", str(KERNELS_DIR), target, *obj.make_args()]
    # a build takes seconds: say so, once, where one is due (make -q: out of date); the profiling builds run
    # under their own progress bar
    if target == "host" and subprocess.run(make[:1] + ["-q"] + make[1:]).returncode:
        print(
            f"building the host kernel library {obj.stem} (g++, once per kernel change: a few seconds)",
            file=sys.stderr,
            flush=True,
        )
    proc = subprocess.run(make, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"kernel host build failed:\n{proc.stdout}{proc.stderr}")
    suffix = "_profile.so" if target == "host-profile" else ".so"
    lib = KERNELS_DIR / "build" / (obj.stem + suffix)
    if not lib.exists():
        raise RuntimeError(f"kernel host build did not produce {lib}")
    return lib


# The decoder layer's element-wise entries (kernels/eltwise_bf16.cc): one object for every configuration
ELTWISE_OBJECT = "eltwise_bf16.o"


def build_eltwise_kernel(target: str = "host") -> Path:
    """make -C kernels <target> ENTRIES=eltwise (host, or host-profile: the profiling build); returns the
    path of the shared library."""
    proc = subprocess.run(
        ["make", "-s", "-C", str(KERNELS_DIR), target, "ENTRIES=eltwise"],
        capture_output=True,
        text=True,
    )
    suffix = "_profile.so" if target == "host-profile" else ".so"
    lib = KERNELS_DIR / "build" / ELTWISE_OBJECT.replace(".o", suffix)
    if proc.returncode or not lib.exists():
        raise RuntimeError(
            f"element-wise kernel host build failed:\n{proc.stdout}{proc.stderr}"
        )
    return lib


def aligned_empty(shape: tuple[int, ...], dtype, align: int = 64) -> np.ndarray:
    """An uninitialised array whose data starts on an `align`-byte boundary (AIE2P vector alignment)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    raw = np.empty(nbytes + align, dtype=np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off : off + nbytes].view(dtype).reshape(shape)


def a_tile_blocked(a_tile: np.ndarray) -> np.ndarray:
    """[TM, TK] -> the kernel's A order: 8x8 blocks (mb, kb) at (mb * TK/8 + kb) * 64, row-major inside."""
    tm, tk = a_tile.shape
    return a_tile.reshape(tm // 8, 8, tk // 8, 8).transpose(0, 2, 1, 3).reshape(-1)


class _HostObject:
    """A host-built kernel object loaded through ctypes, with the record and scratch buffers a PE has."""

    def __init__(self, obj: KernelObject, entries, lib: Path | None):
        self.obj = obj
        self.path = lib or build_host_kernel(obj)
        self.lib = ctypes.CDLL(str(self.path))
        for name, args in entries:
            fn = getattr(self.lib, name)
            fn.argtypes, fn.restype = args, None
        self.misaligned = self.lib.aie_host_misaligned_accesses
        self.misaligned.argtypes, self.misaligned.restype = [], ctypes.c_ulong
        self.w_buf = aligned_empty((obj.record_bytes,), np.uint8)
        self.scratch = aligned_empty(
            (w_scratch_bytes(obj.tile_n, obj.tile_k, obj.gs, obj.format),), np.uint8
        )


def gemm_c_rows(c_mem: np.ndarray, tile_m: int, tile_n: int) -> np.ndarray:
    """The GEMM accumulator's first tile_m * tile_n elements (8x8 blocks of C, block (mb, nb) at
    (nb * tile_m/8 + mb) * 64, row-major inside; f32 during the K sweep, bf16 after the drain) as C rows
    [tile_m, tile_n]."""
    blocks = np.asarray(c_mem)[: tile_m * tile_n].reshape(
        tile_n // 8, tile_m // 8, 8, 8
    )
    return blocks.transpose(1, 2, 0, 3).reshape(tile_m, tile_n).copy()


class HostKernel(_HostObject):
    """The host-built GEMM object for one tile configuration, driven through ctypes like a PE would."""

    def __init__(
        self,
        tile_m: int,
        tile_n: int,
        tile_k: int,
        gs: int,
        lib: Path | None = None,
        rounding: str = "conv_even",
        format: str = "awq",
    ):
        self.tile_m, self.tile_n, self.tile_k, self.gs = tile_m, tile_n, tile_k, gs
        vp = ctypes.c_void_p
        super().__init__(
            KernelObject("gemm", tile_n, tile_k, gs, tile_m, rounding, format),
            (
                ("zero_vectorized_f32_mn", [vp]),
                ("matmul_int4_bf16_packed_f32", [vp] * 4),
                ("f32_to_bf16_mn", [vp]),
            ),
            lib,
        )
        tm, tn, tk = tile_m, tile_n, tile_k
        self.c_acc = aligned_empty(
            (tm * tn,), np.float32
        )  # as the design types it: bf16, 2 * tm * tn
        self.a_buf = aligned_empty((tm * tk,), bfloat16)

    def zero(self) -> None:
        self.lib.zero_vectorized_f32_mn(self.c_acc.ctypes.data)

    def accumulate(self, record: np.ndarray, a_blocked: np.ndarray) -> None:
        self.w_buf[...] = record
        self.a_buf[...] = a_blocked
        self.lib.matmul_int4_bf16_packed_f32(
            self.w_buf.ctypes.data,
            self.a_buf.ctypes.data,
            self.c_acc.ctypes.data,
            self.scratch.ctypes.data,
        )

    def drain_blocks(self) -> np.ndarray:
        """bf16(C) drained in place: the accumulator's first tile_m * tile_n bf16, 8x8 blocks column-block
        outer (a copy)."""
        self.lib.f32_to_bf16_mn(self.c_acc.ctypes.data)
        return self.c_acc.view(bfloat16)[: self.tile_m * self.tile_n].copy()

    def drain(self) -> np.ndarray:
        """bf16(C) [tile_m, tile_n]: drain_blocks un-blocked, as the design's drain DMA does."""
        return gemm_c_rows(self.drain_blocks(), self.tile_m, self.tile_n)

    def gemm(
        self, a: np.ndarray, w: AwqWeights, packed: np.ndarray | None = None
    ) -> np.ndarray:
        """C = A x dequant(W) in bf16, every (M-tile, N-tile) through zero / accumulate per K-chunk / drain."""
        tm, tn, tk = self.tile_m, self.tile_n, self.tile_k
        m, k = a.shape
        check_weight_tiling(k, w.n, w.gs, tn, tk)
        if m % tm:
            raise ConfigError(f"M = {m} is not a multiple of tile_m = {tm}")
        if packed is None:
            packed = pack_format(w, tn, tk, self.obj.format)
        # A in kernel order, per (M-tile, K-chunk)
        a_blk = a.reshape(m // tm, tm // 8, 8, k // tk, tk // 8, 8).transpose(
            0, 3, 1, 4, 2, 5
        )
        a_blk = np.ascontiguousarray(a_blk).reshape(m // tm, k // tk, tm * tk)
        c = np.empty((m, w.n), dtype=bfloat16)
        for mt in range(m // tm):
            for nt in range(w.n // tn):
                self.zero()
                for kc in range(k // tk):
                    self.accumulate(packed[nt, kc], a_blk[mt, kc])
                c[mt * tm : (mt + 1) * tm, nt * tn : (nt + 1) * tn] = self.drain()
        return c


# ------------------------------------------------------------------------------------------ GEMV (decode)


def kernel_gemv_model(a: np.ndarray, w: AwqWeights, tile_k: int) -> np.ndarray:
    """bf16 [M, N]: what the GEMV entries compute for C = A x dequant(W), M <= GEMV_MAX_M rows, one K sweep:
    the GEMM kernel's arithmetic row by row (a row's bfp16 blocks run along K, so they do not depend on the
    other rows), i.e. kernel_gemm_model's rows."""
    m, _ = a.shape
    if not 1 <= m <= GEMV_MAX_M:
        raise ConfigError(f"M = {m}: the GEMV takes 1 to {GEMV_MAX_M} rows")
    return kernel_gemm_model(a, w, tile_k)


class GemvHostKernel(_HostObject):
    """The host-built GEMV object of one record tile (its record dense where the format allows, the GEMM's
    scratch): zero, accumulate each K-chunk's record, drain, per N-tile."""

    def __init__(
        self,
        tile_n: int,
        tile_k: int,
        gs: int,
        lib: Path | None = None,
        rounding: str = "conv_even",
        format: str = "awq",
    ):
        self.tile_n, self.tile_k, self.gs = tile_n, tile_k, gs
        vp, i32 = ctypes.c_void_p, ctypes.c_int32
        super().__init__(
            KernelObject("gemv", tile_n, tile_k, gs, rounding=rounding, format=format),
            (
                ("gemv_int4_zero", [vp, i32]),
                ("gemv_int4_accumulate", [vp, vp, vp, vp, i32]),
                ("gemv_int4_drain", [vp, vp, i32]),
            ),
            lib,
        )
        tn, tk = tile_n, tile_k
        self.g_acc = aligned_empty((gemv_acc_elems(GEMV_MAX_M, tn),), np.float32)
        self.g_a = aligned_empty((GEMV_MAX_M * tk,), bfloat16)
        self.g_out = aligned_empty((GEMV_MAX_M * tn,), bfloat16)

    def gemv_zero(self, acc: np.ndarray, m: int) -> None:
        self.lib.gemv_int4_zero(acc.ctypes.data, m)

    def gemv_accumulate(
        self, record: np.ndarray, a_rows: np.ndarray, acc: np.ndarray
    ) -> None:
        m = a_rows.shape[0]
        self.w_buf[...] = record
        self.g_a[: a_rows.size] = a_rows.reshape(-1)
        self.lib.gemv_int4_accumulate(
            self.w_buf.ctypes.data,
            self.g_a.ctypes.data,
            acc.ctypes.data,
            self.scratch.ctypes.data,
            m,
        )

    def gemv(
        self, a: np.ndarray, w: AwqWeights, packed: np.ndarray | None = None
    ) -> np.ndarray:
        """C = A x dequant(W) in bf16 for M <= GEMV_MAX_M rows, N-tile by N-tile, all of K."""
        tn, tk = self.tile_n, self.tile_k
        m, k = a.shape
        if not 1 <= m <= GEMV_MAX_M:
            raise ConfigError(f"M = {m}: the GEMV takes 1 to {GEMV_MAX_M} rows")
        check_weight_tiling(k, w.n, w.gs, tn, tk)
        if packed is None:
            packed = pack_format(w, tn, tk, self.obj.format, self.obj.dense)
        acc = self.g_acc[: gemv_acc_elems(m, tn)]
        c = np.empty((m, w.n), dtype=bfloat16)
        for nt in range(w.n // tn):
            self.gemv_zero(acc, m)
            for kc in range(k // tk):
                self.gemv_accumulate(
                    packed[nt, kc],
                    np.ascontiguousarray(a[:, kc * tk : (kc + 1) * tk]),
                    acc,
                )
            self.lib.gemv_int4_drain(acc.ctypes.data, self.g_out.ctypes.data, m)
            c[:, nt * tn : (nt + 1) * tn] = self.g_out[: m * tn].reshape(m, tn)
        return c


# ------------------------------------------------------------------------------------------ prepared model
class PreparedWeights:
    """kernel_gemm_model for a weight used at every token (host/generate.py's `model` backend): W's side of
    the operands made once (the mmul's integers as int8 blocks [K/8, 8, N], the scale and min-term parts),
    and the arithmetic vectorised over K blocks without changing a rounding: every 8-deep block product is
    an integer times A's block step (|m| <= 128, |integer| <= 128: at most 2^17 in 8 terms), exact in f32
    whatever the order; the f32 group sums run block after block inside each span, and the folds span
    after span, as the kernel and kernel_gemm_model do. MXFP4 weights go to kernel_mxfp4_model as they are.
    """

    def __init__(self, w):
        self.w, self.k, self.n, self.gs = w, w.k, w.n, w.gs
        if isinstance(w, Mxfp4Weights):
            return
        ints = mmul_integers(w)
        self.blocks = ints.astype(np.int8).reshape(w.k // 8, 8, w.n)
        if isinstance(w, AwqWeights):
            s, m = [w.s] if w.s_lo is None else [w.s, w.s_lo], None
        else:
            s, m = block_int_parts(w)
        self.s = [p.astype(np.float32) for p in s]
        self.m = None if m is None else [p.astype(np.float32) for p in m]

    def __call__(self, a: np.ndarray, tile_k: int) -> np.ndarray:
        """bf16 [M, N]: kernel_gemm_model(a, w, tile_k), bit for bit."""
        if isinstance(self.w, Mxfp4Weights):
            return kernel_mxfp4_model(a, self.w)
        m, k = a.shape
        a_bfp = bfp16_blocks(a.astype(np.float32).reshape(m, k // 8, 8)).astype(
            np.float32
        )
        span = min(tile_k, self.gs)
        spans, per = k // span, span // 8
        d = np.matmul(a_bfp.transpose(1, 0, 2), self.blocks.astype(np.float32))
        d = d.reshape(spans, per, m, self.n)
        g = d[:, 0]
        for j in range(1, per):
            g = g + d[:, j]
        if self.m is not None:  # the span's row sums of A, block after block
            rows = a_bfp.sum(axis=2).reshape(m, spans, per)
            r = rows[:, :, 0]
            for j in range(1, per):
                r = r + rows[:, :, j]
        c = np.zeros((m, self.n), np.float32)
        for f in range(spans):
            group = f * span // self.gs
            folds = [(g[f], self.s)]
            if self.m is not None:
                folds.append((r[:, f : f + 1], self.m))
            for x, parts in folds:
                hi, lo = _split(x)
                for part in parts:
                    sc = part[group][None, :]
                    c = c + hi * sc
                    c = c + lo * sc
        return c.astype(bfloat16)
