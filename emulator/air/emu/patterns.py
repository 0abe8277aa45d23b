# SPDX-License-Identifier: MIT
"""Access patterns (offsets / sizes / strides) and the AIE2P DMA limits.

A pattern addresses element  sum_d offset_d * stride_d + sum_d i_d * stride_d
(i_d in [0, size_d)), innermost dimension fastest, as memref.subview does.
Before counting dimensions it is canonicalised the way AIR canonicalises wraps
and strides: size-1 dimensions are dropped and a dimension is merged into the
next inner one when stride_outer == size_inner * stride_inner.

Limits applied to one side of a transfer, by the level of that side's memref
(the DMA engine that walks that side is the one in that tile):

  L3 side (shim DMA, AIRRtToNpuPass.cpp):
    * at most 4 dimensions, the outermost being the repeat / iteration
      dimension (3 buffer-descriptor dimensions + repeat);
    * a zero stride is a repeat: allowed in any dimension but the innermost
      (AIR folds middle zero strides into the repeat count);
    * wraps: unless the pattern is one linear run (optionally repeated),
      a dimension whose size reaches the AIE2 bound of its slot
      ({64, 1024, 1024, 1024}, outermost first, right-aligned) is split by
      AIR into two, which costs one more dimension; the total must stay <= 4.
  L2 side (memtile DMA): at most 4 buffer-descriptor dimensions;
  L1 side (core-tile DMA): at most 3 buffer-descriptor dimensions;
    on both, a zero stride is allowed only in the outermost dimension, which
    then is a repeat (task repeat count) and does not take a descriptor
    dimension; unless linear, every size <= 1023 (10-bit wrap fields).
  L1 and L2: one BD moves at most 16383 / 131071 32-bit words (the BD's length field).
  Every level: every stride, in 32-bit words (stride x element bytes / 4), at
  most 2^(step bits) of that tile's BD (mlir-aie AIETargetModel getDmaBdStepBits;
  mlir-air's loop folding bounds the same in words, foldForLoopNestAsExtendedSizesAndStrides
  in Util.cpp): shim 2^20, memtile 2^17, core tile 2^13 words; no negative
  strides.  Words, not elements: mlir-air's kernel registry documents its bf16
  GEMM at 2048x2048x11008 refused at tile_k_l2 = 256 (a folded stride of
  2818048 elements = 1409024 words) and built at 128 (1409024 elements =
  704512 words).  A core-tile wrap has 8 bits (sizes <= 255), memtile and shim
  wraps 10 bits (<= 1023); a larger size costs one more dimension (split into
  two factors).  The
  resource model (resources.py) checks the same bounds again after folding
  the surrounding loops into the BD.
"""

from .errors import DmaLimitError
from .types import L1, L2, L3, LEVEL_NAMES

MAX_STRIDE = {L3: 1 << 20, L2: 1 << 17, L1: 1 << 13}
SHIM_WRAP_BOUNDS = (64, 1024, 1024, 1024)
BD_WRAP_MAX = {L2: 1023, L1: 255}
# The largest dimension size aie.dma_bd's verifier lets through on a BD with dimensions: its check is
# `size >= 2^9 + 1` under the message "Size may not exceed 1023" (mlir-aie AIEDialect.cpp at 7e00b57;
# a later mlir-aie raises it to 1023 with a hardware measurement); generated designs at 512 compile,
# at 513 and 600 they do not. The core tile keeps its 8-bit wrap.
BD_SIZE_MAX = {L2: 512, L1: 255}
MAX_DIMS = {L3: 4, L2: 4, L1: 3}
# A BD's length field, in 32-bit words: 14 bits on a compute tile, 17 on a memtile (mlir-aie's
# aie.dma_bd verifier against the target model's BD length; its lit test dma_bd_len_limits.mlir holds
# 131071 / 131072 on a memtile; aiecc refuses a 16384-word compute-tile BD, seen here).
MAX_BD_WORDS = {L2: (1 << 17) - 1, L1: (1 << 14) - 1}
ENGINE = {L3: "shim DMA", L2: "memtile DMA", L1: "core-tile DMA"}


def canonical(sizes, strides, max_size=None):
    """[(size, stride)] outermost first, size-1 dims dropped, contiguous dims merged.  With max_size,
    a merge that would make a non-contiguous dimension larger than it is not made (AIR's wrap-and-stride
    canonicalisation keeps each wrap within its field, maxSize 1023)."""
    dims = [(int(s), int(t)) for s, t in zip(sizes, strides) if int(s) != 1]
    out = []
    for sz, st in dims:
        out.append([sz, st])
    i = len(out) - 2
    while i >= 0:
        o, n = out[i], out[i + 1]
        if o[1] == n[0] * n[1] and (
            max_size is None or n[1] == 1 or o[0] * n[0] <= max_size
        ):
            out[i] = [o[0] * n[0], n[1]]
            del out[i + 1]
        i -= 1
    if not out:
        return [(1, 1)]
    return [tuple(d) for d in out]


def _linear(dims):
    if len(dims) == 1:
        return dims[0][1] == 1
    return len(dims) == 2 and dims[0][1] == 0 and dims[1][1] == 1


def check_limits(
    dims, sizes, strides, level, what, itemsize=4, check_strides=True, verifier=True
):
    """Raise DmaLimitError if the canonical pattern `dims` cannot be one BD of
    the DMA engine at `level`.  `what` names the op and side; `itemsize` is the
    element size in bytes (strides are bounded in 32-bit words)."""
    lv = LEVEL_NAMES[level]

    def fail(msg):
        raise DmaLimitError(
            f"{what} ({lv}, {ENGINE[level]}): access pattern sizes {list(sizes)} "
            f"strides {list(strides)}: {msg}"
        )

    for sz, st in dims:
        if st < 0:
            fail(f"negative stride {st}")
        if check_strides and words(st, itemsize) > MAX_STRIDE[level]:
            fail(
                f"stride {st} exceeds the {ENGINE[level]} BD range [1:{MAX_STRIDE[level]}] "
                f"({words(st, itemsize)} 32-bit words)"
            )
    if dims == [(1, 1)]:
        return
    linear = _linear(dims)
    if level == L3:
        if dims[-1][1] == 0 and dims[-1][0] > 1:
            fail(
                "zero stride in the innermost dimension (size "
                f"{dims[-1][0]}): AIR turns zero strides into repeats only outside the innermost dimension"
            )
        n = len(dims)
        if n > 4:
            fail(
                f"{n} dimensions after canonicalisation {dims}; the shim BD has 4 "
                f"(3 + repeat); aircc would unroll it into one BD per outer iteration"
            )
        if not linear:
            slots = [(1, 1)] * (4 - n) + list(dims)
            split = [i for i, (sz, _) in enumerate(slots) if sz >= SHIM_WRAP_BOUNDS[i]]
            if n + len(split) > 4:
                big = [slots[i] for i in split]
                fail(
                    f"{n} dimensions {dims} and sizes {big} over the shim wrap bounds "
                    f"{list(SHIM_WRAP_BOUNDS)}: splitting them needs {n + len(split)} > 4 dimensions"
                )
        return
    # memtile / core tile
    repeat = dims[0][1] == 0
    core = dims[1:] if repeat else dims
    # (a memtile's BD length is checked after air-split-l2-memref, in resources.py: a buffer's
    # pieces have BDs of their own)
    length = -(-count(core) * itemsize // 4)
    if level == L1 and length > MAX_BD_WORDS[level]:
        fail(
            f"one BD moves {length} 32-bit words, the {ENGINE[level]}'s BD length field holds at most "
            f"{MAX_BD_WORDS[level]} (aie.dma_bd verifier: 'buffer descriptor length ... exceeds the "
            f"maximum of {MAX_BD_WORDS[level]} words supported by this tile type')"
        )
    for sz, st in core:
        if st == 0:
            fail(
                f"zero stride in a non-outermost dimension of {dims}: only an outermost zero stride "
                f"is a repeat"
            )
    limit = MAX_DIMS[level]
    if len(core) > limit:
        fail(
            f"{len(core)} buffer-descriptor dimensions after canonicalisation {dims}"
            f"{' (plus a repeat)' if repeat else ''}; the {ENGINE[level]} supports {limit}"
        )
    if not linear:
        why = wrap_problem(core, level, verifier)
        if why:
            fail(why)


def air_wrap_split(size: int, wrap: int) -> list[int] | None:
    """AIR's wrap-and-stride canonicalisation of one size over the wrap field: [a, size / a] with the
    smallest a that brings size / a within it (maxSize 1023), None when none does. Inferred from aiecc's
    verdicts on generated designs: 1024 -> 2 x 512 and 2048 -> 4 x 512 compile, 1536 -> 2 x 768 does not
    (host/aircc_fuzz.py; tests/design/test_aircc_fuzz.py)."""
    return next(
        (
            [a, size // a]
            for a in range(2, wrap + 1)
            if size % a == 0 and size // a <= wrap
        ),
        None,
    )


def wrap_problem(core, level, verifier=True) -> str | None:
    """Why a non-linear BD pattern `core` ([(size, stride)], no repeat) cannot be one BD of `level`:
    a size over the wrap field is split in two by AIR (one more dimension), within the dimensions the
    BD has; with `verifier`, each dimension must then also pass aie.dma_bd's verifier (AIR's loop
    folding decides on the first two alone)."""
    wrap, limit = BD_WRAP_MAX[level], MAX_DIMS[level]
    bound = BD_SIZE_MAX[level] if verifier else wrap
    sizes = []
    for sz, _ in core:
        if sz <= wrap:
            sizes.append(sz)
            continue
        parts = air_wrap_split(sz, wrap)
        if parts is None:
            return (
                f"size {sz} in {core} exceeds the {ENGINE[level]} wrap limit {wrap} and does not factor "
                f"into two sizes within it"
            )
        sizes += parts
    if len(sizes) > limit:
        return (
            f"sizes over the {ENGINE[level]} wrap limit {wrap} in {core}: splitting them needs "
            f"{len(sizes)} > {limit} buffer-descriptor dimensions"
        )
    over = [sz for sz in sizes if sz > bound]
    if over:
        return (
            f"dimension size {over[0]} (of {core}, sizes {sizes} once AIR splits those over {wrap}) is "
            f"over {bound}: aie.dma_bd's verifier refuses it ('Size may not exceed 1023', which it "
            f"enforces as at most {bound} at mlir-aie 7e00b57: 512 compiles, 513 and 600 do not)"
        )
    return None


def words(stride, itemsize):
    """A stride of `stride` elements of `itemsize` bytes, in the 32-bit words a BD counts."""
    return stride * itemsize // 4 if itemsize < 4 else stride * (itemsize // 4)


def span(dims):
    """Largest element offset reached from the base (strides are >= 0)."""
    return sum((sz - 1) * st for sz, st in dims)


def count(dims):
    n = 1
    for sz, _ in dims:
        n *= sz
    return n
