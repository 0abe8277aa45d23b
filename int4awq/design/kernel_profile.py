# SPDX-License-Identifier: MIT
"""What one call of the kernel issues on the AIE2P core, from the host aie_api's profiling build.

Printed with the calibrated cycles by `python3 -m int4awq.design.kernel_cost --tile-m 64 --tile-n 64 --tile-k 64`.

Per marked (software-pipelined) loop of matmul_int4_bf16_packed_f32: its entries and the instructions it issued
per AIE2P slot class (emulator/include/aie_api/detail/host_profile.hpp), the peak number of block streams
live at once against the core's FIFO registers (two load, one store), and a LOWER BOUND on the cycles of
a call: each loop as fast as its busiest slot allows (perfect pipelining, no fill or drain), everything
outside loops one instruction per cycle. Of scalar code only element moves between vector registers
and the scalar unit are counted (SCALAR); the rest does not go through aie_api. These are counts from the host build, not from Peano's schedule, and the bound is not a prediction: the
calibrated cycle model built on these counts is int4awq/design/kernel_cost.py (docs/performance.md#the-kernel-cost-model).
"""

from __future__ import annotations

import ctypes
import functools
import re
from dataclasses import dataclass

import numpy as np

SLOTS = (
    "MAC",
    "LOAD",
    "STORE",
    "SHUFFLE",
    "CONVERT",
    "ALU",
    "SCALAR",
)  # the order of host_profile.hpp's enum
# Instructions per cycle: two vector load units (lda, ldb), one of everything else (llvm-aie AIE2PSlots.td).
WIDTH = {"LOAD": 2}
# Block-stream registers: two load FIFOs, one store FIFO; five 2048-bit accumulator registers
# (llvm-aie AIE2PRegisterInfo.td).
LOAD_FIFOS, STORE_FIFOS = 2, 1
ACC_REGISTERS, ACC_REGISTER_BITS = 5, 2048


@dataclass
class Loop:
    line: int
    entries: int
    ops: dict
    peak_in: int = 0  # block streams live while the loop runs
    peak_out: int = 0
    fills_static: int = 0  # load-FIFO fills placed by the compiler (in LOAD)
    fills_dynamic: int = 0  # fills issued with every pop (in LOAD)
    peak_acc_bits: int = 0  # accumulator bits alive at once (an estimate: C++ values)
    acc_spill_bits: int = (
        0  # accumulator bits that came alive beyond the registers (estimate)
    )
    iterations: int = 0  # 0: the loop does not mark its iterations

    @property
    def cycles(self) -> float:
        return max(n / WIDTH.get(s, 1) for s, n in self.ops.items())

    @property
    def acc_registers(self) -> float:
        return self.peak_acc_bits / ACC_REGISTER_BITS


@dataclass
class Profile:
    loops: list
    outside: dict
    peak_in: int
    peak_out: int
    outside_fills_static: int = 0
    outside_fills_dynamic: int = 0
    outside_acc_spill_bits: int = 0
    peak_acc_bits: int = 0

    @property
    def fills(self) -> tuple[int, int]:
        """(static, dynamic) load-FIFO fills of the call."""
        return (
            self.outside_fills_static + sum(lp.fills_static for lp in self.loops),
            self.outside_fills_dynamic + sum(lp.fills_dynamic for lp in self.loops),
        )

    @property
    def acc_registers(self) -> float:
        return self.peak_acc_bits / ACC_REGISTER_BITS

    @property
    def acc_spill_bits_total(self) -> int:
        return self.outside_acc_spill_bits + sum(lp.acc_spill_bits for lp in self.loops)

    def total(self, slot: str) -> int:
        return self.outside[slot] + sum(lp.ops[slot] for lp in self.loops)

    @property
    def cycles_lower_bound(self) -> float:
        return sum(lp.cycles for lp in self.loops) + sum(self.outside.values())


def read_profile(lib: ctypes.CDLL) -> Profile:
    """The profile a library built with -DAIE_HOST_PROFILE has gathered since its last reset."""
    fn = lib.aie_host_profile_read
    fn.argtypes, fn.restype = [
        ctypes.POINTER(ctypes.c_uint64),
        ctypes.c_uint,
    ], ctypes.c_uint
    buf = (ctypes.c_uint64 * 4096)()
    n = fn(buf, len(buf))
    v = list(buf[:n])
    loops, i = [], 1
    for _ in range(v[0]):
        ops = dict(zip(SLOTS, v[i + 2 : i + 2 + len(SLOTS)]))
        j = i + 2 + len(SLOTS)
        loops.append(Loop(v[i], v[i + 1], ops, *v[j : j + 7]))
        i = j + 7
    outside = dict(zip(SLOTS, v[i : i + len(SLOTS)]))
    j = i + len(SLOTS)
    fs, fd, spill, p_in, p_out, acc = v[j : j + 6]
    return Profile(loops, outside, p_in, p_out, fs, fd, spill, acc)


@functools.lru_cache(maxsize=1)
def _toolchain():
    """kernels/toolchain.py, the kernel sources' own checks (run by kernels/Makefile with a bare python3):
    the one home of how a kernel source is read without its comments."""
    import importlib.util
    import os

    from ..errors import REPO

    spec = importlib.util.spec_from_file_location(
        "kernels_toolchain", os.path.join(REPO, "kernels", "toolchain.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _without_comments(source: str) -> str:
    """C++ source with its comments blanked (line breaks kept, so line numbers hold)."""
    return _toolchain().without_comments(source)


def _block_end(text: str, i: int, open_: str, close: str) -> int:
    """The index just past the bracket that closes the one at text[i]."""
    depth = 0
    for j in range(i, len(text)):
        depth += (text[j] == open_) - (text[j] == close)
        if depth == 0:
            return j + 1
    raise ValueError("unbalanced brackets")


# The kernel's files, in the order of their loop-site bases: a marked loop's site is base * SITE_BASE + its
# line in the file (kernels/host_hooks.h, the host build's hooks, numbers them from __FILE__).
KERNEL_FILES = ("int4_kernel.h", "mm_int4_bf16.cc", "mv_int4_bf16.cc")
SITE_BASE = 100000


def site_file_line(site: int) -> tuple[str, int]:
    """(the kernel file, the line) of a marked loop's profile site."""
    return KERNEL_FILES[site // SITE_BASE], site % SITE_BASE


@functools.lru_cache(maxsize=1)
def _kernel_texts() -> dict[str, str]:
    """The kernel's files, read once per process (a table profiles thousands of calls)."""
    import os

    from ..errors import REPO

    texts = {}
    for f in KERNEL_FILES:
        with open(os.path.join(REPO, "kernels", f)) as fh:
            texts[f] = fh.read()
    return texts


def site_hazards(site: int) -> list[str]:
    """loop_hazards of the kernel's marked loop at a profile site, read from its own file."""
    name, line = site_file_line(site)
    texts = _kernel_texts()
    # an entry file includes the header; the header's own loops see the header alone
    included = texts[KERNEL_FILES[0]] if name != KERNEL_FILES[0] else ""
    return loop_hazards(texts[name], line, included)


def loop_hazards(source: str, line: int, included: str = "") -> list[str]:
    """What in the loop marked at `line` of `source` (1-based: the line of AIE_LOOP_MIN_ITERATION_COUNT,
    whose `for` follows) keeps llvm-aie's pipeliners off it: a remainder (`%`: an unsigned remainder by a
    run-time value is a library call on AIE2P) or a call of a function the source, or what it includes
    (`included`), defines out of line (a call ends the loop's single basic block). A reading of the
    source, not of Peano's output: a `%` the compiler folds still counts.
    """
    text = _without_comments(source)
    start = sum(len(s) + 1 for s in text.split("\n")[: line - 1])
    head = text.index("for", start)
    body_start = text.index("{", _block_end(text, text.index("(", head), "(", ")"))
    loop = text[head : _block_end(text, body_start, "{", "}")]
    hazards = ["a remainder (%)"] if "%" in loop else []
    outlined = re.findall(
        r"^(?!inline\b|constexpr\b|static\b|template\b|using\b|struct\b|return\b)"
        r"[A-Za-z_][\w:<>]*[\s*]+(\w+)\s*\([^;{]*\)\s*\{",
        text + "\n" + _without_comments(included),
        flags=re.M,
    )
    hazards += [
        f"a call of {name}" for name in outlined if re.search(rf"\b{name}\s*\(", loop)
    ]
    return hazards


def profile_library(obj) -> str:
    """The profiling build of a kernel object (record.KernelObject; kernels/Makefile host-profile)."""
    from ..kernel.kernel_model import build_host_kernel

    return str(build_host_kernel(obj, target="host-profile"))


def _reset(lib: ctypes.CDLL) -> None:
    lib.aie_host_profile_reset.argtypes, lib.aie_host_profile_reset.restype = [], None
    lib.aie_host_profile_reset()


def _first_record(obj) -> np.ndarray:
    """The first packed record, as obj (a record.KernelObject) reads it, of seeded weights of its format
    (K = one chunk, or one AWQ group)."""
    from ..kernel.record import pack_format
    from ..formats.weights_file import random_format_weights

    w = random_format_weights(
        obj.format, max(obj.tile_k, obj.gs), obj.tile_n, obj.gs, seed=0
    )
    return pack_format(w, obj.tile_n, obj.tile_k, obj.format, obj.dense)[0, 0]


def profile_accumulate(
    tile_m: int, tile_n: int, tile_k: int, gs: int, fmt: str = "awq"
) -> Profile:
    """One matmul_int4_bf16_packed_f32 call of the profiling build on seeded operands."""
    from ..kernel.kernel_model import HostKernel, a_tile_blocked
    from ..formats.quant import random_activations
    from ..kernel.record import KernelObject

    obj = KernelObject("gemm", tile_n, tile_k, gs, tile_m, format=fmt)
    k = HostKernel(tile_m, tile_n, tile_k, gs, lib=profile_library(obj), format=fmt)
    a = random_activations(tile_m, tile_k, seed=1)
    k.zero()
    _reset(k.lib)
    k.accumulate(_first_record(obj), a_tile_blocked(a))
    return read_profile(k.lib)


def tile_ends_chunk(tile_m: int, tile_n: int) -> int | None:
    """The smallest K-chunk of an AWQ GEMM object (GS 128) at this C tile, or None when none is legal: the
    object whose zero and drain calls stand for every format's and chunk's (they are the same code).
    """
    from ..errors import ConfigError
    from ..kernel.record import GEMM_K_CHUNKS, check_kernel_tiles

    for tk in GEMM_K_CHUNKS:
        try:
            check_kernel_tiles(tile_m, tile_n, tk, 128)
            return tk
        except ConfigError:
            continue
    return None


def profile_tile_ends(tile_m: int, tile_n: int) -> Profile:
    """zero_vectorized_f32_mn then f32_to_bf16_mn, the calls made once per C tile (tile_ends_chunk's object)."""
    from ..errors import ConfigError
    from ..kernel.kernel_model import HostKernel
    from ..kernel.record import KernelObject

    tk = tile_ends_chunk(tile_m, tile_n)
    if tk is None:
        raise ConfigError(f"no GEMM object at {tile_m} x {tile_n}")
    obj = KernelObject("gemm", tile_n, tk, 128, tile_m)
    k = HostKernel(tile_m, tile_n, tk, 128, lib=profile_library(obj))
    _reset(k.lib)
    k.zero()
    k.drain()
    return read_profile(k.lib)


def profile_gemv(
    tile_n: int, tile_k: int, gs: int, m: int, fmt: str = "awq"
) -> Profile:
    """One gemv_int4_accumulate call of m rows (the GEMV object of the record tile)."""
    from ..kernel.kernel_model import GemvHostKernel, gemv_acc_elems
    from ..formats.quant import random_activations
    from ..kernel.record import KernelObject

    obj = KernelObject("gemv", tile_n, tile_k, gs, format=fmt)
    k = GemvHostKernel(tile_n, tile_k, gs, lib=profile_library(obj), format=fmt)
    a = random_activations(m, tile_k, seed=1)
    acc = k.g_acc[: gemv_acc_elems(m, tile_n)]
    k.gemv_zero(acc, m)
    _reset(k.lib)
    k.gemv_accumulate(_first_record(obj), a, acc)
    return read_profile(k.lib)


@functools.lru_cache(maxsize=None)
def profile_attention_step(g: int, d: int, t: int) -> Profile:
    """One attn_step_bf16 call of the profiling build over a whole chunk of t valid positions whose scores
    raise the maximum (the rescale runs: the dearer path), g query heads of d, after attn_init_bf16.
    """
    from ml_dtypes import bfloat16

    from int4_packed_record import attention_state_elems

    from ..kernel.kernel_model import aligned_empty, build_eltwise_kernel

    lib = ctypes.CDLL(str(build_eltwise_kernel("host-profile")))
    i32, ptr = ctypes.c_int32, ctypes.c_void_p
    lib.attn_init_bf16.argtypes = [ptr] * 4 + [i32] * 3
    lib.attn_step_bf16.argtypes = [ptr] * 5 + [i32] * 5
    rng = np.random.default_rng(0)
    q = aligned_empty((g * d + 2 * d + 32,), bfloat16)
    q[: g * d + 2 * d] = rng.standard_normal(g * d + 2 * d).astype(bfloat16)
    q[g * d : g * d + d] = (
        0  # the own key scores 0: the chunk's rising keys raise the maximum
    )
    q[g * d + 2 * d :].view(np.int32)[:] = t
    ramp = np.linspace(1, 4, t)[:, None] * np.asarray(q[:d], np.float32)
    rows = aligned_empty((2 * t * d,), bfloat16)
    rows[...] = np.concatenate([ramp, rng.standard_normal((t, d))]).reshape(-1)
    scores = aligned_empty((g * t,), np.float32)
    probs = aligned_empty((g * t,), bfloat16)
    o = aligned_empty((attention_state_elems(g, d),), np.float32)
    bufs = [b.ctypes.data for b in (q, scores, probs, o)]
    lib.attn_init_bf16(*bufs, g, d, 2 * t)
    _reset(lib)
    lib.attn_step_bf16(bufs[0], rows.ctypes.data, *bufs[1:], 0, g, d, t, 2 * t)
    return read_profile(lib)


def report(p: Profile, tile_m: int, tile_n: int, tile_k: int, gs: int) -> str:
    steps = (tile_m // 8) * (tile_n // 8) * (tile_k // 8)
    head = (
        f"{'loop (line)':<14}{'entries':>9}{'iters':>7}"
        + "".join(f"{s:>9}" for s in SLOTS)
        + f"{'cycles >=':>11}"
    )
    lines = [
        f"matmul_int4_bf16_packed_f32 {tile_m}x{tile_n}x{tile_k}, GS {gs}: {steps} 8x8x8 mmul steps "
        f"(host aie_api profile, not a Peano schedule)",
        head,
    ]
    for lp in sorted(p.loops, key=lambda lp: lp.line):
        name, line = site_file_line(lp.line)
        lines.append(
            f"{name.split('_')[0] + ':' + str(line):<14}{lp.entries:>9}{lp.iterations or '':>7}"
            + "".join(f"{lp.ops[s]:>9}" for s in SLOTS)
            + f"{lp.cycles:>11.0f}"
        )
    lines.append(
        f"{'outside loops':<14}{'':>16}"
        + "".join(f"{p.outside[s]:>9}" for s in SLOTS)
        + f"{sum(p.outside.values()):>11}"
    )
    lines.append(
        f"{'total':<14}{'':>16}"
        + "".join(f"{p.total(s):>9}" for s in SLOTS)
        + f"{p.cycles_lower_bound:>11.0f}"
    )
    lines.append(
        f"live block streams in/out: {p.peak_in}/{p.peak_out} (the core has {LOAD_FIFOS} load and "
        f"{STORE_FIFOS} store FIFO{'s' if STORE_FIFOS > 1 else ''})"
    )
    fs, fd = p.fills
    lines.append(
        f"load-FIFO fills: {fs} static, {fd} dynamic (one per pop: a pop in a rolled loop its stream "
        f"was opened outside of)"
    )
    lines.append(
        f"live accumulators: {p.acc_registers:g} x 2048 bits at the peak, {p.acc_spill_bits_total // 512} "
        f"x 512 bits beyond the core's {ACC_REGISTERS} registers (estimates: C++ values)"
    )
    lines.append(
        f"cycles per call >= {p.cycles_lower_bound:.0f}, per 8x8x8 mmul step >= "
        f"{p.cycles_lower_bound / steps:.2f} (busiest slot per loop; no fill, drain or scalar code)"
    )
    return "\n".join(lines)
