# SPDX-License-Identifier: MIT
"""The packed int4 weight record the kernel reads, and the rules a design of it keeps.

Beside matmul_int4_packed.py (the GEMM) and matvec_int4_packed.py (the decode GEMV), and imported by both:
what the kernel (kernels/int4_kernel.h) reads and what it needs, in one place. The layout of a record,
the tiles the kernel supports, the PE's L1 plan, the stack, the name of the kernel object built for a
tile, and the GEMM configuration's rules (GemmConfig). Python's standard library only: the builders stand
alone with numpy, ml_dtypes and mlir-air, and the tools beside them (int4awq) take these rules from here.

The record (tile_n = TN, tile_k = TK, group size GS; every section starts on a 64-byte boundary):

    groups held   G   = TK // GS if TK >= GS else 1   (a chunk inside a group carries that group's S, Z)
    L   = pad64(144 * TK / 8)                          bytes of one W pair line in the kernel's scratch
    Q   offset 0                      TN / 16 * L / 2 bytes   4-bit codes, two per byte
    S   offset S_OFF = pad64(Q bytes)  G * TN bf16          s[g0 + j, n] at S_OFF + 2 * (j * TN + n)
    Z   offset Z_OFF = S_OFF + pad64(2 * G * TN)          2 z[g0 + j, n] at Z_OFF + j * TN + n (uint8)
    total = Z_OFF + pad64(G * TN)                          (g0 = first group of the chunk)

Q holds the codes in the memory-image order of the kernel's W pair lines, one nibble per image byte
(image_index; pack_records below packs every format but MXFP4; docs/kernel.md). The other formats
(FORMAT_SPECS) add scale parts, a min term or byte codes.
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass, replace


class ConfigError(ValueError):
    """A shape, option, file or value the program cannot accept; the message says which rule failed."""


class ChainError(ConfigError):
    """The A read of an L2 refill would chain more memtile BDs than MAX_A_CHAIN."""


# The one group-size rule (the kernel's, and so the host's, the checkpoint importer's and the design's):
# its dequantisation converts two 8-deep K blocks per step, so a group holds whole 16-row steps.
GS_MULTIPLE = 16
GS_REASON = "the kernel's dequantisation converts two 8-deep K blocks per step"


def check_dims(**dims: int) -> None:
    """Every named dimension must be a positive integer (no empty GEMMs)."""
    for name, value in dims.items():
        if (
            isinstance(value, bool)
            or not isinstance(value, numbers.Integral)
            or value <= 0
        ):
            raise ConfigError(f"{name} = {value!r}: must be a positive integer")


def check_group_size(k: int, gs: int) -> None:
    check_dims(K=k, GS=gs)
    if gs % GS_MULTIPLE:
        raise ConfigError(
            f"GS = {gs}: must be a multiple of {GS_MULTIPLE} ({GS_REASON})"
        )
    if k % gs:
        raise ConfigError(
            f"K = {k} is not a multiple of GS = {gs}: groups must tile K exactly"
        )


ALIGN = (
    64  # section alignment: AIE2P's 512-bit vector loads need 64-byte aligned addresses
)
BLOCK = 8  # mmul block edge (8x8x8 bf16 mmul)
L1_BYTES = 64 * 1024  # data memory of one compute tile, stack included
# The stack a PE's core needs: what matmul_int4_bf16_packed_f32 keeps live at its busiest point (the 2x2 hot
# loop and the scale folds that follow it), in bytes if every value spilled at once, plus the frame of the
# core function aircc generates around the calls. The kernel keeps no arrays on the stack and nothing here
# grows with the tile. Peano's real frames: `make -C kernels stack-report` (docs/kernel.md#building).
KERNEL_LIVE_BYTES = {
    "four 8x8 f32 mmul accumulators": 4 * 64 * 4,
    "four bfp16ebs8 8x8 operands, a 1024-bit register each": 4 * 128,
    "two block streams: pointer, 512-bit FIFO register, count": 2 * 80,
    "two 64-lane bf16 scale vectors": 2 * 128,
    "fold temporaries: accumulator, hi, lo, c": 256 + 128 + 128 + 256,
}
# Each further bf16 part of a scale (awq_f16: 2, the triples: 3) keeps two more 64-lane vectors live; a min
# term as many again for its parts, plus the two row blocks' row sums (hi and lo each).
SCALE_PART_LIVE_BYTES = 2 * 128
MIN_TERM_LIVE_BYTES = 4 * 128
# The AIR-generated core function's own frame: 960 B under LLVM 21 and 1216 B under LLVM 22 for mlir-air's
# cores (mlir-air PR #1980, which raised aircc's default stack_size to 2048 for it).
CORE_FRAME_BYTES = 1216
KERNEL_NAME = "mv_int4_bf16"


def _pad(x: int) -> int:
    return -(-x // ALIGN) * ALIGN


# ------------------------------------------------------------------------------------------ kernel rules
def check_record_tile(tile_n: int, tile_k: int, gs: int, fmt: str = "awq") -> None:
    """Raise ConfigError (naming the numbers) unless the kernel supports this record tile (both designs'
    objects read the same record).

    tile_n: a multiple of 16 (2x2 blocks of 8x8 mmul tiles; zero points read 16 columns at once).
    tile_k (the K-chunk per call) and gs: multiples of 16 and one divides the other: a chunk holds whole
    groups (tile_k % gs == 0; the scale is folded once per group) or a group spans whole chunks
    (gs % tile_k == 0; folded once per chunk). With 4-bit codes a chunk holding several groups needs
    gs % 32 == 0 (each group's part of a W pair line is then whole 576-byte periods of the zero-point
    pattern); 8-bit codes pad each group's part to 64 bytes instead.
    """
    check_dims(tile_n=tile_n, tile_k=tile_k, gs=gs)
    if tile_n % 16:
        raise ConfigError(
            f"tile_n = {tile_n}: must be a multiple of 16 (the kernel computes 2x2 blocks of 8x8 mmul tiles)"
        )
    if tile_k % GS_MULTIPLE:
        raise ConfigError(
            f"tile_k = {tile_k}: must be a multiple of {GS_MULTIPLE} ({GS_REASON})"
        )
    check_group_size(gs, gs)  # the one GS rule (above)
    check_chunk_and_group(tile_k, gs)
    if FORMAT_SPECS[fmt].codes != "e2m1":
        # the kernel's static_assert (kernels/int4_kernel.h Z_WORDS) holds the byte-code formats, which
        # have no zero points, to the same bound: one rule for every object of that source
        zero_points = tile_k // min(tile_k, gs) * tile_n
        staged = 2 * -(-zero_points // ALIGN) * ALIGN
        line = w_pair_line_bytes(tile_k, fold_span(tile_k, gs, fmt))
        if staged > line:
            what = (
                f"stages the record's {zero_points} zero points as bf16 ({staged} bytes)"
                if FORMAT_SPECS[fmt].codes == "int4"
                else f"asserts for every object of its source the room to stage {zero_points} zero points "
                f"as bf16 ({staged} bytes)"
            )
            raise ConfigError(
                f"tile_n = {tile_n}, tile_k = {tile_k}: the kernel {what} in its {line}-byte A line; use a "
                "smaller tile_n or a larger tile_k"
            )
    if tile_k > gs and gs % 32 and FORMAT_SPECS[fmt].codes != "int8":
        raise ConfigError(
            f"tile_k = {tile_k}, gs = {gs}: a K-chunk holding several groups needs gs to be a multiple of "
            f"32 (each group's part of the kernel's W lines must be whole 576-byte zero-point periods)"
        )
    if tile_n * tile_k * 2 > L1_BYTES:
        raise ConfigError(
            f"tile_n x tile_k = {tile_n} x {tile_k}: its W tile ({tile_n * tile_k * 2} bytes as bf16) is larger "
            f"than a PE's {L1_BYTES} bytes of L1 (the kernel's static_assert)"
        )


def check_kernel_tiles(
    tile_m: int,
    tile_n: int,
    tile_k: int,
    gs: int,
    stack: int | None = None,
    fmt: str = "awq",
) -> None:
    """Raise ConfigError (naming the numbers) unless the GEMM kernel supports this tile configuration:
    the record tile (check_record_tile), tile_m a multiple of 16, and the PE's 64 KiB L1 (l1_budget).
    """
    check_dims(tile_m=tile_m)
    if tile_m % 16:
        raise ConfigError(
            f"tile_m = {tile_m}: must be a multiple of 16 (the kernel computes 2x2 blocks of 8x8 mmul tiles)"
        )
    check_record_tile(tile_n, tile_k, gs, fmt)
    budget = l1_budget(tile_m, tile_n, tile_k, gs, check=False, stack=stack, fmt=fmt)
    if budget["total"] > L1_BYTES:
        parts = ", ".join(f"{k} {v}" for k, v in budget.items() if k != "total")
        raise ConfigError(
            f"tile_m x tile_n x tile_k = {tile_m} x {tile_n} x {tile_k} (gs {gs}) needs {budget['total']} bytes of L1 "
            f"({parts}), more than the {L1_BYTES} a PE has; use a smaller tile_k or tile"
        )


def check_weight_tiling(k: int, n: int, gs: int, tile_n: int, tile_k: int) -> None:
    """K and N must be whole numbers of K-chunks and N-tiles; groups must align with chunks. The weight's
    own K, N and gs are a validated weight's (int4awq.formats), so only the tiles are checked.
    """
    check_dims(tile_n=tile_n, tile_k=tile_k)
    if n % tile_n:
        raise ConfigError(f"N = {n} is not a multiple of tile_n = {tile_n}")
    if k % tile_k:
        raise ConfigError(f"K = {k} is not a multiple of tile_k = {tile_k}")
    check_chunk_and_group(tile_k, gs)


def check_chunk_and_group(tile_k: int, gs: int) -> None:
    """A K-chunk holds whole groups (the scale is folded once per group), or a group spans whole K-chunks
    (folded once per chunk)."""
    if tile_k % gs and gs % tile_k:
        raise ConfigError(
            f"tile_k = {tile_k} and gs = {gs}: one must divide the other (a K-chunk holds whole groups, "
            f"or a group spans whole K-chunks)"
        )


# A stack over the first 16 KiB bank compiles only where aiecc's bank-aware placement fails and places
# the buffers after the stack instead; where it succeeds it puts buffers at 0x4000, over the stack
# (docs/design.md): the product keeps to one bank.
STACK_MAX = 16 * 1024


def check_stack_size(stack_size: int | None) -> None:
    """A stack_size override: at least 1 KiB (the toolchains' default), 16-byte aligned, and within the
    first 16 KiB bank of L1, where aiecc keeps it."""
    if stack_size is not None and (
        stack_size < 1024 or stack_size % 16 or stack_size > STACK_MAX
    ):
        raise ConfigError(
            f"stack_size = {stack_size}: must be a multiple of 16, at least 1024 bytes and at most "
            f"{STACK_MAX} (beyond one bank aiecc may place buffers from 0x4000, over the stack)"
        )


# ------------------------------------------------------------------------------------------ record layout
@dataclass(frozen=True)
class RecordFormat:
    """What a record format holds (kernels/Makefile FORMAT): its codes ("int4" nibbles with zero points,
    "int8" the W lines' image bytes, "e2m1" MXFP4's), the bf16 parts per scale, and a min term.
    """

    codes: str
    scale_parts: int = 1
    min_term: bool = False


# The record formats the kernel has entries for: "awq" (q, z, bf16 s), "awq_f16" (q, z, s as an exact bf16
# pair: fp16 scales, GGUF Q4_0), "int4_min" (q, z = 0, s and a min term m as exact pairs: GGUF Q4_1, Q4_K),
# "int8" (8-bit codes v, s as an exact pair: GGUF Q5_0, Q8_0, IQ4_NL, IQ4_XS), "int8_triple" (the same, s as
# an exact triple: GGUF Q6_K), "int8_min" (8-bit codes with a min term, pairs: GGUF Q5_1, Q5_K) and "mxfp4"
# (E2M1 codes, E8M0 per 32 along K); "int4_min_bf16" and "int8_min_bf16" are the K-quants' fast mode: one
# bf16 per scale and per min term, rounded to nearest (gguf_quants.BlockIntWeights.with_bf16_scales), as
# AWQ's default rounds fp16 scales. A pair split with round to nearest holds 17 significant bits
# (quant.bf16_parts): every fp16 (Q5_0, Q8_0, IQ4_NL: 11), every K-quant product d * sc_j of 6-bit sc_j,
# and IQ4_XS's d * (ls_j - 32) (11 + 5); Q6_K's d * sc_j with an 8-bit sc_j can take 18, so it alone takes
# three parts, one more bf16 multiply-add per fold.
FORMAT_SPECS = {
    "awq": RecordFormat("int4"),
    "awq_f16": RecordFormat("int4", 2),
    "int4_min": RecordFormat("int4", 2, True),
    "int4_min_bf16": RecordFormat("int4", 1, True),
    "int8": RecordFormat("int8", 2),
    "int8_triple": RecordFormat("int8", 3),
    "int8_min": RecordFormat("int8", 2, True),
    "int8_min_bf16": RecordFormat("int8", 1, True),
    "mxfp4": RecordFormat("e2m1"),
}
FORMATS = tuple(FORMAT_SPECS)
# Each format's usual group size: AWQ checkpoints' 128; GGUF's 32 (Q6_K's 16); the MX group, 32.
FORMAT_GS = {f: {"awq": 128, "int8_triple": 16}.get(f, 32) for f in FORMATS}


def fold_span(tile_k: int, gs: int, fmt: str = "awq") -> int:
    """K covered by one fold of the kernel: a group, or the K-chunk when a group spans chunks (MXFP4: the
    chunk, it has no fold)."""
    return tile_k if fmt == "mxfp4" else min(tile_k, gs)


def dense_codes(entries: str, fmt: str, tile_k: int, gs: int) -> bool:
    """Whether a record holds its 4-bit codes dense: two a byte, 64 per W block vector in the order the
    kernel pushes them (dense_index), the kernel making each block's exponent (kernels/int4_kernel.h DENSE,
    the same rule). The GEMV's records do, for the nibble formats, where a fold span's 2 * span / 8 block
    vectors end on a whole stream word (span a multiple of 32); the GEMM's keep the W lines' image with its
    exponent slots (4.5 bits a code), which it dequantises with one subtraction a word.
    """
    return (
        entries == "gemv"
        and FORMAT_SPECS[fmt].codes == "int4"
        and fold_span(tile_k, gs, fmt) % 32 == 0
    )


@dataclass(frozen=True)
class RecordLayout:
    tile_n: int
    tile_k: int
    gs: int
    groups: int  # groups whose S (M, Z) the record holds
    q_offset: int
    q_bytes: int
    s_offset: int
    s_bytes: int  # used bytes (section padded to 64)
    m_offset: int
    m_bytes: int
    z_offset: int
    z_bytes: int
    total: int


def record_layout(
    tile_n: int, tile_k: int, gs: int, fmt: str = "awq", dense: bool = False
) -> RecordLayout:
    """A record's sections for format fmt (not mxfp4, mxfp4_record_bytes): Q (dense: tile_n x tile_k
    nibbles, dense_codes), then S (the scale parts, part by part, each groups x tile_n bf16), M (the min
    term's parts, laid out as S; min formats only), Z (groups x tile_n uint8; 4-bit codes only), each
    starting on 64 bytes. Checks its numbers (an edge); a validated KernelObject takes _layout directly.
    """
    check_dims(tile_n=tile_n, tile_k=tile_k, gs=gs)
    if tile_n % 16 or tile_k % 16:
        raise ConfigError(
            f"tile_n = {tile_n}, tile_k = {tile_k}: both must be multiples of 16"
        )
    if tile_k % gs and gs % tile_k:
        raise ConfigError(f"tile_k = {tile_k} and gs = {gs}: one must divide the other")
    if dense and not dense_codes("gemv", fmt, tile_k, gs):
        raise ConfigError(
            f"format {fmt}, tile_k = {tile_k}, gs = {gs}: no dense record (4-bit codes in fold spans of "
            "a multiple of 32 only)"
        )
    return _layout(tile_n, tile_k, gs, fmt, dense)


def _layout(
    tile_n: int, tile_k: int, gs: int, fmt: str, dense: bool = False
) -> RecordLayout:
    """record_layout's arithmetic, for numbers already checked."""
    spec = FORMAT_SPECS[fmt]
    groups = tile_k // gs if tile_k >= gs else 1
    q_bytes = (
        tile_n * tile_k // 2
        if dense
        else q_section_bytes(
            tile_n, tile_k, fold_span(tile_k, gs, fmt), spec.codes == "int8"
        )
    )
    s_off = _pad(q_bytes)
    s_bytes = 2 * groups * tile_n * spec.scale_parts
    m_off = s_off + _pad(s_bytes)
    m_bytes = s_bytes if spec.min_term else 0
    z_off = m_off + _pad(m_bytes)
    z_bytes = 0 if spec.codes == "int8" else groups * tile_n
    return RecordLayout(
        tile_n=tile_n,
        tile_k=tile_k,
        gs=gs,
        groups=groups,
        q_offset=0,
        q_bytes=q_bytes,
        s_offset=s_off,
        s_bytes=s_bytes,
        m_offset=m_off,
        m_bytes=m_bytes,
        z_offset=z_off,
        z_bytes=z_bytes,
        total=z_off + _pad(z_bytes),
    )


def record_bytes(tile_n: int, tile_k: int, gs: int) -> int:
    """Bytes of one packed AWQ record (a multiple of 64)."""
    return record_layout(tile_n, tile_k, gs).total


def q_section_bytes(
    tile_n: int, tile_k: int, span: int | None = None, codes8: bool = False
) -> int:
    """Bytes of a record's codes: one nibble (codes8: one byte) per byte of the W pair lines' image."""
    line = tile_n // 16 * w_pair_line_bytes(tile_k, span)
    return line if codes8 else line // 2


def mxfp4_record_bytes(tile_n: int, tile_k: int) -> int:
    """Bytes of one packed MXFP4 record (pack_mxfp4): the codes in the W pair lines' image order, then
    a bf16 exponent carrier per 32-value group and column; a multiple of 64."""
    return _pad(q_section_bytes(tile_n, tile_k)) + _pad(2 * (tile_k // 32) * tile_n)


def format_record_bytes(
    fmt: str, tile_n: int, tile_k: int, gs: int, dense: bool = False
) -> int:
    """Bytes of the record a format's accumulate entry reads, for a record tile check_record_tile accepted
    (a KernelObject's, a validated configuration's); dense: dense_codes' record."""
    if fmt == "mxfp4":
        return mxfp4_record_bytes(tile_n, tile_k)
    return _layout(tile_n, tile_k, gs, fmt, dense).total


BFP16_BLOCK_VECTOR_BYTES = (
    72  # aie::block_vector<bfp16ebs8, 64>: 8 blocks of (exponent byte, 8 mantissas)
)
BFP16_EXPONENT_ONE = (
    133  # the block exponent byte of value = mantissa (value = m * 2^(E - 133))
)


# A block output stream writes whole 512-bit words only (the core's store FIFO; the host aie_api stops on a
# stream that ends inside one), and 72-byte block vectors make whole words 8 at a time (576 bytes = 9 words):
# every stream the kernel writes pushes a multiple of 8.
STREAM_WORD_BLOCKS = 8
W_SCRATCH_STAGE_BYTES = (
    STREAM_WORD_BLOCKS
    * 72  # where the kernel stages the zero-point pattern: [V0 V1] four times, 9 words
)
ROW_SUMS_BLOCK_BYTES = (
    256  # one span's row sums of one 8-row block: bf16 hi, lo, 64 lanes each
)


def w_pair_line_bytes(tile_k: int, span: int | None = None) -> int:
    """One pair line of the kernel's scratch: the block vectors of two 8-column (or 8-row) blocks interleaved
    along K, 2 * tile_k / 8 block vectors of 72 bytes, each fold span's part (span: the fold span, default
    tile_k) starting on 64 bytes. With 4-bit codes a span of a multi-span chunk is whole 576-byte periods,
    so the line is 18 * tile_k padded to 64 bytes."""
    span = tile_k if span is None else span
    return tile_k // span * _pad(2 * (span // 8) * BFP16_BLOCK_VECTOR_BYTES)


def a_line_bytes(tile_k: int, span: int | None = None) -> int:
    """The kernel's A pair line in its scratch (int4_kernel.h A_LINE_BYTES): per fold span the GEMM's
    2 * span / 8 A block vectors, pushed through one output stream and padded to a multiple of 8 (whole
    512-bit words); the GEMV's span / 8 fit in the same room. Equal to w_pair_line_bytes when 2 * span / 8
    is a multiple of 8; a span of 16 or 48 takes 576 bytes a span where its W line takes 320.
    """
    span = tile_k if span is None else span
    blocks = -(-2 * (span // 8) // STREAM_WORD_BLOCKS) * STREAM_WORD_BLOCKS
    return tile_k // span * blocks * BFP16_BLOCK_VECTOR_BYTES


def w_scratch_bytes(
    tile_n: int, tile_k: int, gs: int | None = None, fmt: str = "awq"
) -> int:
    """Bytes of the kernel's private scratch (w_scratch, u8: the kernel stores bfp16ebs8 blocks in it).

    4-bit codes: tile_n / 16 pair lines of dequantised W (one per pair of 8-column blocks, their bfp16ebs8
    block vectors interleaved along K), one pair line of A (the two 8-row blocks being swept, interleaved
    likewise, each span's pushes padded to whole words: a_line_bytes) and 576 bytes where the zero-point
    pattern is staged: tile_n / 16 * pad64(18 * tile_k) + a_line_bytes + 576 bytes. 8-bit codes: the A
    line only (the streams read W from the record). A min term adds each fold span's row sums of two 8-row
    blocks (256 bytes each). Independent of tile_m.
    """
    spec = FORMAT_SPECS[fmt]
    span = fold_span(tile_k, tile_k if gs is None else gs, fmt)
    line = w_pair_line_bytes(tile_k, span)
    a_line = a_line_bytes(tile_k, span)
    if spec.codes == "int8":
        need = a_line
    else:
        need = tile_n // 16 * line + a_line + W_SCRATCH_STAGE_BYTES
    if spec.min_term:
        need += 2 * (tile_k // span) * ROW_SUMS_BLOCK_BYTES
    return need


def kernel_stack_bytes(fmt: str = "awq") -> int:
    """The design's default stack_size (bytes): the kernel's live set spilled whole plus the core's frame
    (KERNEL_LIVE_BYTES, CORE_FRAME_BYTES), rounded up to 1 KiB. An upper bound derived from the source,
    NOT measured with Peano here; the same for every tile of a format."""
    spec = FORMAT_SPECS[fmt]
    need = sum(KERNEL_LIVE_BYTES.values()) + CORE_FRAME_BYTES
    need += (spec.scale_parts - 1) * SCALE_PART_LIVE_BYTES
    if spec.min_term:
        need += spec.scale_parts * SCALE_PART_LIVE_BYTES + MIN_TERM_LIVE_BYTES
    return -(-need // 1024) * 1024


def l1_budget(
    tile_m: int,
    tile_n: int,
    tile_k: int,
    gs: int,
    check: bool = True,
    stack: int | None = None,
    fmt: str = "awq",
) -> dict[str, int]:
    """Bytes of L1 one PE needs: the design's buffers (ping-pong ones twice) plus the stack (stack_size,
    by default kernel_stack_bytes()); the record is the format's."""
    if check:
        check_kernel_tiles(tile_m, tile_n, tile_k, gs, stack, fmt)
    budget = {
        "c_acc": 4
        * tile_m
        * tile_n,  # f32; the drain writes bf16 C into its first half
        "a_tile_x2": 2 * 2 * tile_m * tile_k,
        "w_record_x2": 2 * format_record_bytes(fmt, tile_n, tile_k, gs),
        "w_scratch": w_scratch_bytes(tile_n, tile_k, gs, fmt),
        "stack": kernel_stack_bytes(fmt) if stack is None else stack,
    }
    budget["total"] = sum(budget.values())
    return budget


# The format's tag in a kernel object's name (kernels/Makefile PREFIX).
STEM_TAGS = {
    "awq": "",
    "awq_f16": "_f16s",
    "int4_min": "_i4m",
    "int4_min_bf16": "_i4mb",
    "int8": "_i8",
    "int8_triple": "_i8t",
    "int8_min": "_i8m",
    "int8_min_bf16": "_i8mb",
    "mxfp4": "_mxfp4",
}


@dataclass(frozen=True)
class KernelObject:
    """One build of the kernel: the GEMM's entries (kernels/mm_int4_bf16.cc) for a tile (tile_m given) or
    the GEMV's (kernels/mv_int4_bf16.cc) for a record tile (kernels/Makefile ENTRIES=gemm|gemv): each
    design links only the entries it calls.
    """

    entries: str  # "gemm" or "gemv"
    tile_n: int
    tile_k: int
    gs: int
    tile_m: int | None = (
        None  # the GEMM's tile rows; the GEMV's entries take the rows at run time
    )
    rounding: str = (
        "conv_even"  # the accumulate entries' mode; "floor" only for host/bringup.py's probe
    )
    format: str = "awq"  # one of FORMATS (mxfp4: gs is 32)
    # Prefixes the GEMV entries' names and the stem: a module of several launches whose GEMVs need different
    # objects (o_gemv_ffn_int4.py) declares each entry once, so each object's entries need names of their own
    symbol_prefix: str = ""

    def __post_init__(self):
        if self.symbol_prefix and (
            self.entries != "gemv" or not self.symbol_prefix.isidentifier()
        ):
            raise ConfigError(
                f"symbol prefix {self.symbol_prefix!r}: a C identifier, for the GEMV's entries only"
            )
        if self.rounding not in ("conv_even", "floor"):
            raise ConfigError(f"kernel rounding {self.rounding!r}: conv_even or floor")
        if self.format not in FORMATS:
            raise ConfigError(
                f"weight format {self.format!r}: one of {', '.join(FORMATS)}"
            )
        if self.format == "mxfp4" and self.gs != 32:
            raise ConfigError(f"MXFP4 groups are 32 values along K, not {self.gs}")
        if self.format == "mxfp4" and self.tile_k % 32:
            raise ConfigError(
                f"MXFP4: tile_k_l1 = {self.tile_k} must be a multiple of 32 (whole MX groups per record)"
            )
        # a KernelObject is a validated record tile: what derives from it (record_bytes) trusts it
        check_record_tile(self.tile_n, self.tile_k, self.gs, self.format)

    @property
    def stem(self) -> str:
        prefix = KERNEL_NAME + STEM_TAGS[self.format]
        gs = "" if self.format == "mxfp4" else f"_gs{self.gs}"
        if self.entries == "gemm":
            stem = f"{prefix}_gemm_m{self.tile_m}_n{self.tile_n}_k{self.tile_k}{gs}"
        else:
            stem = f"{prefix}_gemv_n{self.tile_n}_k{self.tile_k}{gs}"
        stem = self.symbol_prefix + stem
        return stem if self.rounding == "conv_even" else f"{stem}_rfloor"

    def symbol(self, entry: str) -> str:
        """An entry's name in this object (gemv_int4_zero, ...: prefixed with symbol_prefix)."""
        return self.symbol_prefix + entry

    @property
    def dense(self) -> bool:
        """Whether the accumulate entry reads dense codes (dense_codes)."""
        return dense_codes(self.entries, self.format, self.tile_k, self.gs)

    @property
    def record_bytes(self) -> int:
        """Bytes of the record the accumulate entry reads."""
        return format_record_bytes(
            self.format, self.tile_n, self.tile_k, self.gs, self.dense
        )

    def lib_name(self, host: bool = False) -> str:
        """<stem>.o (Peano) or <stem>.so (host)."""
        return self.stem + (".so" if host else ".o")

    def make_args(self) -> list[str]:
        """The variables of `make -C kernels <target>` for this object."""
        dims = [f"ENTRIES={self.entries}"]
        if self.entries == "gemm":
            dims.append(f"DIM_M={self.tile_m}")
        dims += [
            f"DIM_N={self.tile_n}",
            f"DIM_K_CHUNK={self.tile_k}",
            f"DIM_GS={self.gs}",
        ]
        if self.format != "awq":
            dims.append(f"FORMAT={self.format}")
        if self.rounding != "conv_even":
            dims.append(f"ROUNDING={self.rounding}")
        if self.symbol_prefix:
            dims.append(f"SYMBOL_PREFIX={self.symbol_prefix}")
        return dims


# ------------------------------------------------------------------------------------------ pack / unpack
class KernelSizes:
    """What a design configuration (design.DesignConfig, gemv.GemvConfig) derives from its kernel tiles:
    needs tile_n, tile_k_l1, gs, stack_size (None: the derived stack) and `kernel`, its KernelObject.
    """

    @property
    def record_bytes(self) -> int:
        return self.kernel.record_bytes

    def call_buffers(self, a, w_packed, c=None) -> list:
        """The buffers of build_module's function, in its order and shapes (in_function_order), from A
        [m, k], the records [n_tiles, k_chunks, record] and C [m, n] (zeros unless given): every caller
        passes what the function the user gets takes."""
        import numpy as np
        from ml_dtypes import bfloat16

        if c is None:
            c = np.zeros((self.m, self.n), bfloat16)
        return self.in_function_order(a, w_packed, c)

    def in_function_order(self, a, w_packed, c) -> list:
        """The GEMM's function, (A, W, C) as given (GemvConfig's differs)."""
        return [a, w_packed, c]

    @property
    def scratch_bytes(self) -> int:
        return w_scratch_bytes(self.tile_n, self.tile_k_l1, self.gs, self.kernel.format)

    @property
    def stack_bytes(self) -> int:
        return (
            kernel_stack_bytes(self.kernel.format)
            if self.stack_size is None
            else self.stack_size
        )

    @property
    def kernel_object(self) -> str:
        """The object the design links (link_with)."""
        return self.kernel.lib_name()


# ------------------------------------------------------------------------------------------ packing
# numpy is imported where the packing needs it: the rules above are plain integers, and the tools take
# their error type from here before they know numpy is installed.


def _chunk_groups(k: int, gs: int, tile_k: int) -> np.ndarray:
    """[K//tile_k, groups-per-record] indices of the groups whose S, Z each record carries."""
    import numpy as np

    kc = k // tile_k
    if tile_k >= gs:
        per = tile_k // gs
        return np.arange(kc * per).reshape(kc, per)
    return ((np.arange(kc) * tile_k) // gs).reshape(kc, 1)


def image_index(tile_n: int, tile_k: int, span: int | None = None) -> np.ndarray:
    """int64 [TK, TN]: the byte of the W pair lines' image (tile_n / 16 lines of w_pair_line_bytes) that holds
    element (k, n) of a chunk (module doc); span: the fold span, each span's part starting on 64 bytes.
    """
    import numpy as np

    span = tile_k if span is None else span
    k = np.arange(tile_k)[:, None]
    n = np.arange(tile_n)[None, :]
    kk = k % span
    return (
        (n // 16) * w_pair_line_bytes(tile_k, span)
        + (k // span) * _pad(2 * (span // BLOCK) * BFP16_BLOCK_VECTOR_BYTES)
        + (2 * (kk // BLOCK) + (n // BLOCK) % 2) * BFP16_BLOCK_VECTOR_BYTES
        + (n % BLOCK) * 9
        + 1
        + kk % BLOCK
    )


def dense_index(tile_n: int, tile_k: int, span: int) -> np.ndarray:
    """int64 [TK, TN]: the nibble of a dense record's Q (dense_codes) that holds element (k, n) of a chunk:
    column pair, fold span, 8-deep K block, the pair's column block, then the block vector's lane (8 per
    column, along K), as the kernel pushes them."""
    import numpy as np

    k = np.arange(tile_k)[:, None]
    n = np.arange(tile_n)[None, :]
    kk = k % span
    return (
        (n // 16) * 16 * tile_k
        + (k // span) * 16 * span
        + (kk // BLOCK) * 128
        + (n // BLOCK) % 2 * 64
        + (n % BLOCK) * BLOCK
        + kk % BLOCK
    )


def nibble_index(
    tile_n: int, tile_k: int, gs: int, fmt: str, dense: bool = False
) -> np.ndarray:
    """int64 [TK, TN]: the Q nibble of element (k, n) of a chunk in a 4-bit format's record, dense
    (dense_index) or in the W lines' image (q_nibble_index)."""
    if dense:
        return dense_index(tile_n, tile_k, fold_span(tile_k, gs, fmt))
    return q_nibble_index(tile_n, tile_k)


def q_nibble_index(tile_n: int, tile_k: int) -> np.ndarray:
    """int64 [TK, TN]: the Q nibble that holds element (k, n) of a chunk (module doc): 4-bit codes' spans
    are whole 576-byte periods, so one span of tile_k gives the same index for every fold span.
    """
    return image_index(tile_n, tile_k)


def _q_order(
    q: np.ndarray,
    tile_n: int,
    tile_k: int,
    q_nibbles: int,
    fill: int = 0,
    index: np.ndarray | None = None,
) -> np.ndarray:
    """q [K, N] -> [NT, KC, q_nibbles] codes in record order (index: image_index, default the nibble
    order; `fill` where no element lives)."""
    import numpy as np

    k, n = q.shape
    kc, nt = k // tile_k, n // tile_n
    tiles = q.reshape(kc, tile_k, nt, tile_n).transpose(2, 0, 1, 3)  # [NT, KC, TK, TN]
    out = np.full((nt, kc, q_nibbles), fill, dtype=np.uint8)
    out[:, :, q_nibble_index(tile_n, tile_k) if index is None else index] = tiles
    return out


def int4_operands(W_q, W_s, W_z, K: int, N: int, GS: int):
    """Check mlir-air's int4 operands (both builders' pack_inputs and cpu_reference take them) against K, N
    and GS, ConfigError naming the first broken rule, and return the codes as uint8 [K, N]: W_q [N, K / 2]
    uint8, two 4-bit codes a byte along K, the even k in the low nibble; W_s [K / GS, N] bfloat16 scales,
    finite and positive; W_z [K / GS, N] uint8 zero points, 0..15."""
    import numpy as np
    from ml_dtypes import bfloat16

    check_dims(K=K, N=N)
    check_group_size(K, GS)
    for name, a, shape, dtype in (
        ("W_q", W_q, (N, K // 2), np.uint8),
        ("W_s", W_s, (K // GS, N), bfloat16),
        ("W_z", W_z, (K // GS, N), np.uint8),
    ):
        if not isinstance(a, np.ndarray) or a.shape != shape or a.dtype != dtype:
            got = (
                f"{a.dtype} {list(a.shape)}"
                if isinstance(a, np.ndarray)
                else type(a).__name__
            )
            raise ConfigError(
                f"{name}: expected {np.dtype(dtype)} {list(shape)}, got {got}"
            )
    if (W_z > 15).any():
        raise ConfigError(f"W_z: zero points are 4-bit (0..15), found {int(W_z.max())}")
    s = W_s.astype(np.float32)
    if not (np.isfinite(s) & (s > 0)).all():
        raise ConfigError("W_s: scales must be finite and positive")
    codes = np.empty((N, K), np.uint8)
    codes[:, 0::2], codes[:, 1::2] = W_q & 0xF, W_q >> 4
    return np.ascontiguousarray(codes.T)


def pack_records(
    codes: np.ndarray,
    z: np.ndarray | None,
    s_parts: list[np.ndarray],
    m_parts: list[np.ndarray] | None,
    gs: int,
    tile_n: int,
    tile_k: int,
    fmt: str,
    dense: bool = False,
) -> np.ndarray:
    """uint8 [N // tile_n, K // tile_k, record_bytes] records of format fmt (not mxfp4) from validated
    operands: codes [K, N] (uint8 0..15 for 4-bit formats, int8 for 8-bit ones), z [K / gs, N] uint8 (4-bit
    formats), the scale's and the min term's bf16 parts, each [K / gs, N], as many as the format holds;
    dense: the codes dense (dense_codes, the GEMV's record).
    """
    import numpy as np

    spec = FORMAT_SPECS[fmt]
    k, n = codes.shape
    check_weight_tiling(k, n, gs, tile_n, tile_k)
    lay = record_layout(tile_n, tile_k, gs, fmt, dense)
    nt, kc = n // tile_n, k // tile_k
    out = np.zeros((nt, kc, lay.total), dtype=np.uint8)
    if spec.codes == "int8":
        index = image_index(tile_n, tile_k, fold_span(tile_k, gs, fmt))
        image = _q_order(codes.view(np.uint8), tile_n, tile_k, lay.q_bytes, index=index)
        # every block's exponent byte (the byte before its 8 mantissas) is 133: value = mantissa
        image[:, :, index[::BLOCK] - 1] = BFP16_EXPONENT_ONE
        out[:, :, : lay.q_bytes] = image
    else:
        index = nibble_index(tile_n, tile_k, gs, fmt, dense)
        nib = _q_order(codes, tile_n, tile_k, 2 * lay.q_bytes, index=index)
        out[:, :, : lay.q_bytes] = nib[:, :, 0::2] | (nib[:, :, 1::2] << 4)

    g = _chunk_groups(k, gs, tile_k)  # [KC, G]

    def per_record(x: np.ndarray) -> np.ndarray:  # [groups, N] -> [NT, KC, G * TN]
        sel = x[g]  # [KC, G, N]
        return (
            sel.reshape(kc, lay.groups, nt, tile_n)
            .transpose(2, 0, 1, 3)
            .reshape(nt, kc, lay.groups * tile_n)
        )

    sections = [(lay.s_offset, lay.s_bytes, s_parts)]
    if spec.min_term:
        sections.append((lay.m_offset, lay.m_bytes, m_parts))
    for offset, size, parts in sections:
        if len(parts) != spec.scale_parts:
            raise ConfigError(
                f"format {fmt} holds {spec.scale_parts} bf16 parts per term, not {len(parts)}"
            )
        part = np.ascontiguousarray(np.concatenate([per_record(h) for h in parts], 2))
        out[:, :, offset : offset + size] = part.view(np.uint8)  # bf16 little-endian
    if spec.codes != "int8":
        # the zero points doubled (2 z, 0 .. 30): the kernel adds 0x80 to form the bf16 bits 0x5D80 + 2 z
        # and never doubles a byte vector itself (x + x on bytes is llvm-aie #480's trigger)
        z2 = (np.asarray(z, np.uint16) * 2).astype(np.uint8)
        out[:, :, lay.z_offset : lay.z_offset + lay.z_bytes] = per_record(z2)
    return out


# ------------------------------------------------------------------------------------------ the GEMM design
# The GEMM's kernel entries under the names of mlir-air's int4 GEMM (matrix_multiplication/int4_awq/
# matmul_int4_packed.py at e972f29): its llms stitchers (o_ffn_int4_multi.py, rms_gemms_rope_int4_multi.py)
# keep exactly these symbols unprefixed when they merge the builder's modules, and take their declarations
# from the builder's own IR. Our signatures are ours (the record, the blocked in-place accumulator, the
# scratch: docs/kernel.md); the names are upstream's.
GEMM_ENTRIES = {
    "zero": "zero_vectorized_f32_mn",
    "accumulate": "matmul_int4_bf16_packed_f32",
    "drain": "f32_to_bf16_mn",
}
HERD_COLS, HERD_ROWS = 8, 4  # NPU2 compute array: 8 columns x 4 rows of compute tiles
MEMTILE_BYTES = 512 * 1024
MEMTILES = 8
# An AIE2P lock holds 6 bits (mlir-aie AIE2TargetModel::getMaxLockValue = 0x3F): the most times a
# buffer can be re-sent by one refeed (mlir-air fused_decode.py MAX_REFEED)
MAX_LOCK_VALUE = 63
# What mlir-air's hardware-tested GEMMs run (their NPU2 lit tests; docs/design.md#provenance), which this
# design does not go beyond:
# * the memtile BD chain of one A read stream: one BD per K-chunk of an L2 refill, twice that when the L2
#   block is ping-ponged; bf16_x_bfp16's llama_qproj lit runs 16 (tile_k_l2 / tile_k_l1 = 2048 / 128);
MAX_A_CHAIN = 16
# * the launch grid: what llms/llama32_1b_int4's prefill runs this GEMM at, seq 2048 with 16x16 tiles and
#   [2, 2] runtime loop tiling (multi_launch_builder/rms_gemms_rope_int4_multi.py, o_ffn_int4_multi.py;
#   compiled by its run_npu2_compile.lit, timed on NPU2 in its README: 698 ms a layer): [16, 128] for
#   gate and up on the 8x4 herd, [64, 32] for down on 2x4; so 64 along M, 128 along N, 2048 in all.
MAX_LAUNCH_M, MAX_LAUNCH_N, MAX_LAUNCHES = 64, 128, 2048
# * the decode GEMV's launch grid along N: 64 (bf16's llama_8x4_gate_up lit, [1, 64]), which no consumer
#   of ours exceeds.
MAX_GEMV_LAUNCH_N = 64
# * runtime_loop_tiling_sizes: [2, 2], except [1, 1] on a herd of fewer than 8 cores with more than one
#   launch iteration (matrix_multiplication/bfp16/run.py: there [2, 2] writes only the first launch
#   iteration's output).
SMALL_HERD_CORES = 8
# * [1, 1] tiles the launch loops by one and unrolls every launch iteration into its own shim tasks
#   (AIRDependencyScheduleOpt.cpp at e972f29, ~7504); unrolled launch iterations on NPU2 were reported
#   fine at 2, silently wrong at 4-5 and hanging at 6-8 (Xilinx/mlir-air PR #1639), and no NPU2 lit test
#   runs bfp16/run.py's [1, 1] branch: a small herd takes at most 2 launch iterations.
MAX_UNROLLED_LAUNCHES = 2


def a_chain_bds(k: int, tile_k_l1: int, tile_k_l2: int) -> int:
    """Memtile BDs of one A read stream: a 6-D read per chunk does not fold into the 4-D BD, so one BD per
    chunk of an L2 refill, and each of them twice when the L2 block is ping-ponged (more than one refill).
    """
    return tile_k_l2 // tile_k_l1 * (2 if k > tile_k_l2 else 1)


def check_exact_tiling(*rows: tuple[str, int, int, str]) -> None:
    """Each (what, size, step, the step's name): size a whole number of steps, as both designs tile their
    dimensions exactly (ConfigError naming the first that is not)."""
    for what, size, step, name in rows:
        if size % step:
            raise ConfigError(
                f"{what} = {size} is not a multiple of {step} ({name}): the design tiles it exactly"
            )


class RefillLoops:
    """The two loops aircc ping-pongs in both designs (needs k, tile_k_l1, tile_k_l2): the segment's K
    loop over L2 refills and the compute herd's chunk loop over each refill."""

    @property
    def k_refills(self) -> int:
        """Trips of the segment's K loop: L2 refills of A and W."""
        return self.k // self.tile_k_l2

    @property
    def chunks_per_l2(self) -> int:
        """Trips of the compute herd's chunk loop: kernel calls per L2 refill."""
        return self.tile_k_l2 // self.tile_k_l1

    def check_even_trips(self) -> None:
        """aircc unrolls a ping-ponged loop by 2; an odd trip count leaves a one-trip epilogue outside
        the ping-pong ring, which corrupts data on NPU2 (docs/emulator.md#odd-trip-counts). One chunk per
        refill with several refills is refused too (below)."""
        for what, trips in (
            ("tile_k_l2 / tile_k_l1", self.chunks_per_l2),
            ("K / tile_k_l2", self.k_refills),
        ):
            if trips > 1 and trips % 2:
                raise ConfigError(
                    f"{what} = {trips}: aircc ping-pongs that loop and an odd trip count leaves a "
                    "one-trip epilogue outside the ping-pong ring (docs/emulator.md#odd-trip-counts); "
                    "use an even count"
                )
        # Seen compiling the decode GEMV at K 2048, tile_k_l1 = tile_k_l2 = 256 with aircc e972f29: the
        # herd's one-trip chunk loop is not folded away but ends up as a loop of K / tile_k_l2 trips in the
        # herd, and air-label-scf-for-to-ping-pong doubles the A chunk and the record there, which the
        # design did not count (aiecc: "allocated buffers exceeded available memory").
        if self.chunks_per_l2 == 1 and self.k_refills > 1:
            raise ConfigError(
                f"tile_k_l2 = tile_k_l1 = {self.tile_k_l1} with K = {self.k}: aircc turns the K refills into "
                "a loop around the PE's one chunk and ping-pongs its L1 buffers there "
                "(docs/emulator.md#one-chunk-per-refill); use tile_k_l2 = 2 * tile_k_l1 or more"
            )


@dataclass(frozen=True)
class GemmConfig(KernelSizes, RefillLoops):
    """One configuration of the GEMM design (matmul_int4_packed.build_module), validated whole on
    construction: every rule names the numbers it refuses."""

    m: int
    k: int
    n: int
    gs: int
    tile_m: int
    tile_n: int
    tile_k_l1: int
    tile_k_l2: int
    herd_m: int
    herd_n: int
    # The core's stack in L1 (XRTBackend stack_size); None: kernel_stack_bytes(), derived.
    stack_size: int | None = None
    format: str = "awq"  # the weights' record format (FORMATS)
    # M blocks (tile_m * herd_m rows) one launch iteration's segment walks in a loop: mlir-air's int4
    # GEMM's knob, which keeps the launch grid along M small
    m_per_segment: int = 1
    # N blocks (tile_n * herd_n columns) one launch iteration's segment walks with A's block of rows
    # resident in L2 over all of K, re-sent per N block by mlir-air's refeed primitive: novel, unproven
    # on NPU2 (docs/design.md#a-resident-across-n-blocks-n_per_segment)
    n_per_segment: int = 1

    def __post_init__(self):
        check_dims(
            M=self.m,
            K=self.k,
            N=self.n,
            tile_m=self.tile_m,
            tile_n=self.tile_n,
            tile_k_l1=self.tile_k_l1,
            tile_k_l2=self.tile_k_l2,
            herd_m=self.herd_m,
            herd_n=self.herd_n,
            m_per_segment=self.m_per_segment,
            n_per_segment=self.n_per_segment,
        )
        check_group_size(self.k, self.gs)
        self.kernel  # the weight format's rules on the tile (KernelObject)
        if self.herd_m > HERD_COLS or self.herd_n > HERD_ROWS:
            raise ConfigError(
                f"herd {self.herd_m}x{self.herd_n} does not fit the NPU2 array: "
                f"herd_m <= {HERD_COLS} (columns), herd_n <= {HERD_ROWS} (compute rows)"
            )
        check_stack_size(self.stack_size)
        check_kernel_tiles(
            self.tile_m,
            self.tile_n,
            self.tile_k_l1,
            self.gs,
            self.stack_size,
            self.format,
        )  # incl. L1
        check_exact_tiling(
            ("M", self.m, self.tile_m * self.herd_m, "tile_m * herd_m"),
            ("N", self.n, self.tile_n * self.herd_n, "tile_n * herd_n"),
            ("K", self.k, self.tile_k_l2, "tile_k_l2"),
            ("tile_k_l2", self.tile_k_l2, self.tile_k_l1, "tile_k_l1"),
        )
        blocks = self.m // (self.tile_m * self.herd_m)
        if blocks % self.m_per_segment:
            raise ConfigError(
                f"M / (tile_m * herd_m) = {blocks} M blocks is not a multiple of m_per_segment = "
                f"{self.m_per_segment}: each segment walks the same number of them"
            )
        n_blocks = self.n // (self.tile_n * self.herd_n)
        if n_blocks % self.n_per_segment:
            raise ConfigError(
                f"N / (tile_n * herd_n) = {n_blocks} N blocks is not a multiple of n_per_segment = "
                f"{self.n_per_segment}: each segment walks the same number of them"
            )
        if self.n_per_segment > 1:
            self._check_resident_a()
        self._check_proven_limits()
        l2 = self.l2_total()
        if l2 > MEMTILES * MEMTILE_BYTES:
            raise ConfigError(
                f"segment L2 needs {l2} bytes > {MEMTILES} memtiles x {MEMTILE_BYTES} "
                f"({', '.join(f'{name} {size}' for name, size in self.l2_budget())}): "
                "use a smaller tile_k_l2"
            )

    def _check_resident_a(self):
        """The rules of A resident over n_per_segment N blocks (docs/design.md#a-resident-across-n-blocks-n_per_segment)."""
        if self.m_per_segment > 1:
            raise ConfigError(
                "m_per_segment and n_per_segment are not combined: a segment walks M blocks, or "
                "N blocks with A resident, not both"
            )
        # each slice's air.refeed_count becomes its fill lock's initial value and acquire, and an AIE2P
        # lock holds 6 bits (mlir-aie AIE2TargetModel::getMaxLockValue). aircc checks only [1, INT32_MAX]
        # (AIRDialect.cpp verifyRefeedCountAttr ~3561-3580) and nothing else range-checks it
        # (fused_decode.py 124-127): a larger count truncates on the device and deadlocks
        if self.n_per_segment > MAX_LOCK_VALUE:
            raise ConfigError(
                f"n_per_segment = {self.n_per_segment}: each slice of the resident A is re-sent that "
                f"many times, a lock count, and an NPU2 lock holds at most {MAX_LOCK_VALUE}"
            )
        if self.resident_column_bytes() > MEMTILE_BYTES:
            raise ConfigError(
                f"A resident over K = {self.k} needs {self.resident_column_bytes()} bytes of a herd "
                f"row's memtile (its rows of A {2 * self.tile_m * self.k}, a C piece and a W piece), "
                f"more than its {MEMTILE_BYTES}: use n_per_segment = 1 or a smaller tile_m"
            )
        # Each slice takes two BDs of its herd row's memtile (its fill and its re-send): the emulator's
        # resource model counts them against the memtile's pools, as for every L2 buffer (aircc + aiecc
        # compiled 8 and 16 slices and agreed with it; it refuses 20).

    def resident_column_bytes(self) -> int:
        """Bytes of the memtile a herd row's resident A is pinned to: its tile_m rows over all of K, and
        at most one piece of each of the split C and W blocks beside them."""
        return (
            2 * self.tile_m * self.k
            + 2 * self.herd_n * self.tile_m * self.tile_n
            + (2 if self.k_refills > 1 else 1) * self.chunks_per_l2 * self.record_bytes
        )

    def _check_proven_limits(self):
        """Refuse what mlir-air's hardware-tested GEMMs do not run (docs/design.md#provenance)."""
        lm, ln = self.launch_grid
        if lm > MAX_LAUNCH_M or ln > MAX_LAUNCH_N or lm * ln > MAX_LAUNCHES:
            raise ConfigError(
                f"launch grid [{lm}, {ln}] (M / (tile_m * herd_m * m_per_segment), "
                "N / (tile_n * herd_n * n_per_segment)): "
                "mlir-air's "
                f"llama32_1b_int4 prefill runs this GEMM at most {MAX_LAUNCH_M} launch iterations along "
                f"M, {MAX_LAUNCH_N} along N and {MAX_LAUNCHES} in all; use larger tiles or herd"
            )
        if self.runtime_loop_tiling == (1, 1) and lm * ln > MAX_UNROLLED_LAUNCHES:
            raise ConfigError(
                f"a herd of {self.herd_m * self.herd_n} cores with {lm * ln} launch iterations: under "
                f"[2, 2] runtime loop tiling NPU2 writes only the first launch iteration's output on "
                f"herds under {SMALL_HERD_CORES} cores (mlir-air bfp16/run.py), and [1, 1] unrolls "
                f"every launch iteration into shim tasks, reported wrong beyond "
                f"{MAX_UNROLLED_LAUNCHES} (mlir-air PR #1639); use a herd of {SMALL_HERD_CORES} or "
                f"more cores, or larger tiles"
            )
        if self.a_chain_bds > MAX_A_CHAIN:
            raise ChainError(
                f"tile_k_l2 / tile_k_l1 = {self.chunks_per_l2}"
                + (" (x2: the L2 block is ping-ponged)" if self.k_refills > 1 else "")
                + f" = {self.a_chain_bds} memtile BDs on each A read stream: mlir-air's hardware-tested "
                f"GEMMs chain at most {MAX_A_CHAIN}; use a smaller tile_k_l2 or a larger tile_k_l1"
            )
        self.check_even_trips()

    @classmethod
    def with_chainable_refill(cls, tile_k_l2: int, **args) -> "GemmConfig":
        """The configuration with this tile_k_l2, or, when only its A chain (MAX_A_CHAIN) breaks a rule,
        with the largest smaller tile_k_l2 (a multiple of tile_k_l1 dividing K) that keeps every rule:
        the K of an L2 refill is a tiling choice, and the accumulator stays in L1 across refills, so the
        result is the same. Any other broken rule is raised as it is."""
        try:
            return cls(tile_k_l2=tile_k_l2, **args)
        except ChainError as e:
            first = e
        k, l1 = args["k"], args["tile_k_l1"]
        for t in range(tile_k_l2 - l1, 0, -l1):
            if k % t == 0:
                try:
                    return cls(tile_k_l2=t, **args)
                except ConfigError:
                    continue
        raise first

    builder = "matmul_int4_packed"  # the module whose build_module takes builder_args()

    def builder_args(self) -> dict:
        """matmul_int4_packed.build_module's arguments for this configuration."""
        return dict(
            m=self.m,
            k=self.k,
            n=self.n,
            gs=self.gs,
            tile_m=self.tile_m,
            tile_k_l2=self.tile_k_l2,
            tile_k_l1=self.tile_k_l1,
            tile_n=self.tile_n,
            herd_m=self.herd_m,
            herd_n=self.herd_n,
            m_per_segment=self.m_per_segment,
            n_per_segment=self.n_per_segment,
            weight_format=self.format,
            stack_size=self.stack_size,
        )

    @functools.cached_property
    def kernel(self) -> KernelObject:
        """The GEMM's kernel object at this tile."""
        return KernelObject(
            "gemm",
            self.tile_n,
            self.tile_k_l1,
            self.gs,
            self.tile_m,
            format=self.format,
        )

    @property
    def launch_grid(self) -> tuple[int, int]:
        """Launch iterations along M and N: one (m_per_segment M blocks, n_per_segment N blocks) each."""
        return (
            self.m // (self.tile_m * self.herd_m * self.m_per_segment),
            self.n // (self.tile_n * self.herd_n * self.n_per_segment),
        )

    @property
    def a_chain_bds(self) -> int:
        return a_chain_bds(self.k, self.tile_k_l1, self.tile_k_l2)

    @property
    def runtime_loop_tiling(self) -> tuple[int, int]:
        """runtime_loop_tiling_sizes as mlir-air's bfp16 GEMM chooses them (module comment above)."""
        lm, ln = self.launch_grid
        small = self.herd_m * self.herd_n < SMALL_HERD_CORES and lm * ln > 1
        return (1, 1) if small else (2, 2)

    # Budgets -----------------------------------------------------------------------------------------
    def l1_budget(self) -> list[tuple[str, int]]:
        """Per-PE L1 bytes (the kernel's rule, l1_budget): ping-ponged buffers count twice."""
        budget = l1_budget(
            self.tile_m,
            self.tile_n,
            self.tile_k_l1,
            self.gs,
            check=False,
            stack=self.stack_bytes,
            fmt=self.format,
        )
        return [(name, size) for name, size in budget.items() if name != "total"]

    def l2_budget(self) -> list[tuple[str, int]]:
        """Per-segment L2 bytes; the A and W blocks are ping-ponged when there is more than one refill
        (aircc folds a one-trip loop away, and with it the ping-pong)."""
        a = 2 * self.herd_m * self.tile_m * self.tile_k_l2
        pp = 2 if self.k_refills > 1 else 1
        if (
            self.n_per_segment > 1
        ):  # all of K once, in a slice per refill, never ping-ponged
            a_entry = ("A rows bf16, all of K (resident)", a * self.k_refills)
        else:
            a_entry = (f"A block bf16 x{pp}", pp * a)
        return [
            a_entry,
            (
                f"W records x{pp}",
                pp
                * self.herd_n
                * (self.tile_k_l2 // self.tile_k_l1)
                * self.record_bytes,
            ),
            ("C block bf16", 2 * self.herd_m * self.herd_n * self.tile_m * self.tile_n),
        ]

    def l1_total(self) -> int:
        return sum(size for _, size in self.l1_budget())

    def l2_total(self) -> int:
        return sum(size for _, size in self.l2_budget())


# ------------------------------------------------------------------------------------------ the decode GEMV
COLUMNS, ROWS = HERD_COLS, HERD_ROWS  # the decode herd is the whole 8 x 4 array
PES = COLUMNS * ROWS
GEMV_MAX_M = 32  # rows of A one GEMV call takes (four 8-row bands; kernels/mv_int4_bf16.cc GEMV_MAX_M)


def gemv_acc_elems(m: int, tile_n: int) -> int:
    """f32 elements of one GEMV accumulator tile: ceil(m / 8) bands of 8 rows x tile_n."""
    return -(-m // 8) * 8 * tile_n


@dataclass(frozen=True)
class GemvConfig(KernelSizes, RefillLoops):
    """One configuration of the decode design (matvec_int4_packed.build_module), validated whole on
    construction: every rule names the numbers it refuses."""

    m: int
    k: int
    n: int
    gs: int
    tile_n: int  # the record's N tile (the GEMM's tile_n)
    tile_k_l1: int  # the record's K-chunk (the GEMM's tile_k_l1)
    tile_k_l2: int | None = None  # K per L2 refill; None: K
    stack_size: int | None = None
    format: str = "awq"  # the weights' format (FORMATS)
    symbol_prefix: str = (
        ""  # of the kernel object's entries (KernelObject.symbol_prefix)
    )

    def __post_init__(self):
        if self.tile_k_l2 is None:
            object.__setattr__(self, "tile_k_l2", self.k)
        check_dims(
            M=self.m,
            K=self.k,
            N=self.n,
            tile_n=self.tile_n,
            tile_k_l1=self.tile_k_l1,
            tile_k_l2=self.tile_k_l2,
        )
        check_group_size(self.k, self.gs)
        self.kernel  # the weight format's rules on the tile (KernelObject)
        if self.m > GEMV_MAX_M:
            raise ConfigError(
                f"M = {self.m}: the GEMV takes 1 to {GEMV_MAX_M} rows (more rows: the GEMM)"
            )
        check_record_tile(self.tile_n, self.tile_k_l1, self.gs, self.format)
        check_stack_size(self.stack_size)
        check_exact_tiling(
            ("N", self.n, PES * self.tile_n, f"tile_n * {PES} PEs"),
            ("K", self.k, self.tile_k_l2, "tile_k_l2"),
            ("tile_k_l2", self.tile_k_l2, self.tile_k_l1, "tile_k_l1"),
        )
        if self.launch_n > MAX_GEMV_LAUNCH_N:
            raise ConfigError(
                f"launch grid [1, {self.launch_n}] (N / (tile_n * {PES})): mlir-air's hardware-tested "
                f"designs run at most {MAX_GEMV_LAUNCH_N} launch iterations along N; use a larger tile_n"
            )
        self.check_even_trips()
        b = self.l1_budget()
        if b["total"] > L1_BYTES:
            parts = ", ".join(f"{k} {v}" for k, v in b.items() if k != "total")
            raise ConfigError(
                f"the decode PE needs {b['total']} bytes of L1 ({parts}), more than the {L1_BYTES} "
                "a PE has: use a smaller tile_k_l1 or tile_n, or fewer rows"
            )
        if self.l2_column_bytes() > MEMTILE_BYTES:
            raise ConfigError(
                f"a column's L2 pieces (A, records, C) need {self.l2_column_bytes()} bytes, more than "
                f"a memtile's {MEMTILE_BYTES}: use a smaller tile_k_l2"
            )

    builder = "matvec_int4_packed"

    def builder_args(self) -> dict:
        """matvec_int4_packed.build_module's arguments for this configuration (mlir-air's GEMV names:
        M is this N, M_TILE the record's tile_n, K_CHUNK its tile_k_l1; rows this M)."""
        return dict(
            M=self.n,
            K=self.k,
            GS=self.gs,
            M_TILE=self.tile_n,
            K_CHUNK=self.tile_k_l1,
            rows=self.m,
            tile_k_l2=self.tile_k_l2,
            weight_format=self.format,
            stack_size=self.stack_size,
        )

    def in_function_order(self, a, w_packed, c) -> list:
        """mlir-air's GEMV function: (PACKED [tiles, record], B [m * k], D [m * n]); views, no copies."""
        return [
            w_packed.reshape(self.n_tiles * self.k_chunks, self.record_bytes),
            a.reshape(-1),
            c.reshape(-1),
        ]

    # Derived sizes ---------------------------------------------------------------------------------
    @functools.cached_property
    def kernel(self) -> KernelObject:
        """The GEMV's kernel object for this record tile."""
        return KernelObject(
            "gemv",
            self.tile_n,
            self.tile_k_l1,
            self.gs,
            format=self.format,
            symbol_prefix=self.symbol_prefix,
        )

    @property
    def n_tiles(self) -> int:
        return self.n // self.tile_n

    @property
    def launch_n(self) -> int:
        """Launch iterations: blocks of 32 N tiles, one per PE."""
        return self.n_tiles // PES

    @property
    def k_chunks(self) -> int:
        return self.k // self.tile_k_l1

    @property
    def out_elems(self) -> int:
        """bf16 elements of a PE's drain buffer: its M x tile_n tile, rounded up to 64 bytes (the kernel
        takes every buffer 64-byte aligned, and the herd-wide buffer's slices follow one another).
        """
        return -(-self.m * self.tile_n // 32) * 32

    @property
    def acc_elems(self) -> int:
        return gemv_acc_elems(self.m, self.tile_n)

    @property
    def pes(self) -> int:
        return PES

    @property
    def runtime_loop_tiling(self) -> tuple[int, int]:
        return (
            2,
            2,
        )  # 32 cores: mlir-air's GEMMs' [2, 2] (bfp16/run.py's rule gives it too)

    # Budgets and traffic ---------------------------------------------------------------------------
    def l1_budget(self) -> dict[str, int]:
        """L1 bytes of a PE as the builder allocates them and aircc ping-pongs them (the A chunk and the
        record in the chunk loop, when it has more than one trip)."""
        pp = 2 if self.chunks_per_l2 > 1 else 1
        b = {
            "acc": 4 * self.acc_elems,
            "c_out": 2 * self.out_elems,
            "a_chunk": pp * 2 * self.m * self.tile_k_l1,
            "record": pp * self.record_bytes,
            "w_scratch": self.scratch_bytes,
            "stack": self.stack_bytes,
        }
        b["total"] = sum(b.values())
        return b

    def l2_column_bytes(self) -> int:
        """One column's L2 pieces: its copy of A and its 4 PEs' records (both ping-ponged when K is
        refilled), its 4 C tiles."""
        pp = 2 if self.k_refills > 1 else 1
        a = 2 * self.m * self.tile_k_l2
        w = ROWS * self.chunks_per_l2 * self.record_bytes
        return pp * (a + w) + ROWS * 2 * self.m * self.tile_n


# bf16 lanes of the element-wise kernels (kernels/eltwise_bf16.cc): each PE's stretch is a multiple of it
ELTWISE_LANES = 16


def check_rope(qkv: tuple[GemvConfig, ...], rope: tuple[int, ...]) -> None:
    """RoPE's rules over the q, k, v GEMVs it rotates (head_dim, query heads, key/value heads)."""
    d, heads, kv = rope
    half = d // 2
    if d % 2 or half % ELTWISE_LANES or heads % kv:
        raise ConfigError(
            f"RoPE: head_dim {d} with {heads} query and {kv} key/value heads: half a head a multiple "
            f"of the kernel's {ELTWISE_LANES} lanes, the query heads a multiple of the key/value heads"
        )
    if sum(g.n for g in qkv) != (heads + 2 * kv) * d:
        raise ConfigError(
            f"RoPE: the next q, k, v GEMVs give {sum(g.n for g in qkv)} values, not "
            f"(heads {heads} + 2 x {kv}) x head_dim {d}"
        )
    if heads // math.gcd(heads, kv) > COLUMNS:
        raise ConfigError(
            f"RoPE: {heads} query heads over {kv} key/value heads: more than {COLUMNS} PEs of whole heads"
        )


def rope_launches(
    qkv: tuple[GemvConfig, ...], rope: tuple[int, ...], fused: bool = False
) -> list[tuple[str, str, int, int, int]]:
    """The RoPE launches (name, source buffer, element offset in it, n, PEs), q then k: each PE takes
    gcd(heads, kv) whole heads, so both launches call the entry on one L1 row type; fused (writing into
    the attention launch's q buffer), one PE per key/value head: its query heads, or its key.
    """
    d, heads, kv = rope
    per_pe = math.gcd(heads, kv)
    return [
        (name, *qkv_part(qkv, start), count * d, kv if fused else count // per_pe)
        for name, start, count in (("q", 0, heads), ("k", heads * d, kv))
    ]


def qkv_part(qkv: tuple[GemvConfig, ...], start: int) -> tuple[str, int]:
    """(buffer, element offset) of the q, k, v outputs' element `start` (q, then k, then v) among the
    GEMVs' outputs qkv0, qkv1, ..."""
    i, offset = 0, start
    while offset >= qkv[i].n:
        offset -= qkv[i].n
        i += 1
    return f"qkv{i}", offset


# bf16 slots behind each PE's key and value in the attention launch's q buffer: 16 int32, ctx[0] the cache
# rows before the token (o_gemv_ffn_int4.attention_launch)
ATTN_CTX = 32
# cache positions a step of the attention launch (one DMA, one attn_step_bf16 call)
ATTN_CHUNK = 32


def attention_q_width(g: int, d: int) -> int:
    """A PE's stretch of the attention launch's q buffer: its g query heads, the token's own key and value,
    ctx."""
    return g * d + 2 * d + ATTN_CTX


def attention_state_elems(g: int, d: int) -> int:
    """f32 values of a PE's attention state (kernels/eltwise_bf16.cc): g x d output sums, g x 16 lanes of
    sums of probabilities, g maxima."""
    return g * d + g * 16 + g


def attention_ddr_bytes(heads: int, kv: int, d: int, context: int) -> int:
    """What one attention launch moves: each PE's q buffer, its head's columns of every cache row (keys
    and values, all `context` of each: the launch's shape is fixed, ctx[0] only limits what is used), the
    output."""
    g = heads // kv
    return 2 * (kv * attention_q_width(g, d) + 2 * context * kv * d + heads * d)


def check_fused_attention(rope: tuple[int, ...], context: int) -> None:
    """A module ending with the attention launch (context > 0) writes its RoPE outputs into the launch's
    q buffer (rope_launches' fused form); the launch's own rules are the builder's
    (o_gemv_ffn_int4.attention_problem)."""
    if not rope:
        raise ConfigError(
            "the attention launch in the module: it needs the RoPE launches (rope)"
        )


def attention_buffers(rope: tuple[int, ...], context: int):
    """(inputs, outputs) of a module ending with the attention launch: the layer's KV cache [2 * context,
    kv * d] (key rows, then value rows; the host appends the token's after the dispatch), the launch's q
    buffer (the RoPE launches and the value copy write it, the host ctx) and its output.
    """
    d, heads, kv = rope
    width = attention_q_width(heads // kv, d)
    return [("kv_cache", (2 * context, kv * d))], [
        ("q_attn", kv * width),
        ("attn_next", heads * d),
    ]


def named_gemvs(gemvs) -> list[GemvConfig]:
    """The configurations with the first distinct kernel object's entries named as usual and each further
    one's prefixed k1_, k2_, ... (a module declares each object's entries once)."""
    prefixes, out = {}, []
    for cfg in gemvs:
        key = replace(cfg.kernel, symbol_prefix="")
        prefix = prefixes.setdefault(key, f"k{len(prefixes)}_" if prefixes else "")
        out.append(replace(cfg, symbol_prefix=prefix))
    return out


def check_prefixes(gemvs) -> None:
    """One symbol prefix per distinct kernel object, distinct prefixes for distinct objects."""
    seen = {}
    for cfg in gemvs:
        key = replace(cfg.kernel, symbol_prefix="")
        prefix = seen.setdefault(key, cfg.symbol_prefix)
        if cfg.symbol_prefix != prefix or (
            prefix in [p for k, p in seen.items() if k != key]
        ):
            raise ConfigError(
                "the GEMVs' kernel objects: one symbol prefix per distinct object, distinct "
                "prefixes for distinct objects (named_gemvs)"
            )


@dataclass(frozen=True)
class LayerConfig:
    """The GEMVs of the decode layer module (o_gemv_ffn_int4.py), validated together: one row; the shapes a
    decoder layer chains (o_proj E x E, gate_up E x 2H, down H x E) and, when the module also starts the next
    layer, that layer's q, k, v GEMVs over its normed input (K = E, one GEMV per run of parts that fuse);
    entry names of their own for each distinct kernel object (the module declares each entry once).
    """

    o_proj: GemvConfig
    gate_up: GemvConfig
    down: GemvConfig
    next_qkv: tuple[GemvConfig, ...] = ()
    # (head_dim, query heads, key/value heads): the module also rotates the next layer's q and k (RoPE,
    # half-split) at the position whose [cos | sin] row it is given; () none
    rope: tuple[int, ...] = ()
    # the model's LM head: the last layer's module ends with the final RMSNorm and this GEMV (logits)
    head: GemvConfig | None = None
    # > 0: the module ends with the next layer's attention launch over a KV cache of this many positions
    context: int = 0

    def __post_init__(self):
        e, h = (
            self.hidden,
            self.intermediate,
        )  # o_proj fixes the one, gate_up (gate | up) the other
        shapes = [
            ("o_proj", self.o_proj, e, e),
            ("gate_up", self.gate_up, e, 2 * h),
            ("down", self.down, h, e),
        ] + [(f"next q, k, v GEMV {i}", g, e, g.n) for i, g in enumerate(self.next_qkv)]
        for name, cfg, k, n in shapes:
            if (cfg.m, cfg.k, cfg.n) != (1, k, n):
                raise ConfigError(
                    f"{name}: M={cfg.m} K={cfg.k} N={cfg.n}; the layer needs M=1 K={k} N={n} "
                    f"(hidden {e}, intermediate {h})"
                )
        if e % (COLUMNS * ELTWISE_LANES) or h % (COLUMNS * ELTWISE_LANES):
            raise ConfigError(
                f"hidden {e} and intermediate {h}: multiples of {COLUMNS * ELTWISE_LANES} (the element-wise "
                f"herd's {COLUMNS} PEs times the kernel's {ELTWISE_LANES} lanes)"
            )
        if self.rope:
            self.check_rope()
        if self.context:
            check_fused_attention(self.rope, self.context)
        if self.head is not None and (
            self.next_qkv or (self.head.m, self.head.k) != (1, e)
        ):
            raise ConfigError(
                f"the LM head: M={self.head.m} K={self.head.k}; the last layer's module needs M=1 K={e} "
                "(hidden) and no next layer's q, k, v"
            )
        check_prefixes(self.launch_gemvs)

    def check_rope(self) -> None:
        if not self.next_qkv:
            raise ConfigError(
                "RoPE rotates the next layer's q and k: the module must end with them"
            )
        check_rope(self.next_qkv, self.rope)

    def rope_launches(self) -> list[tuple[str, str, int, int, int]]:
        return rope_launches(self.next_qkv, self.rope, bool(self.context))

    @classmethod
    def named(
        cls,
        o_proj: GemvConfig,
        gate_up: GemvConfig,
        down: GemvConfig,
        next_qkv: tuple[GemvConfig, ...] = (),
        rope: tuple[int, ...] = (),
        head: GemvConfig | None = None,
        context: int = 0,
    ) -> "LayerConfig":
        """The configurations with their entries named (named_gemvs)."""
        out = named_gemvs((o_proj, gate_up, down, *next_qkv, *([head] if head else [])))
        nxt = tuple(out[3 : 3 + len(next_qkv)])
        return cls(*out[:3], nxt, rope, out[-1] if head else None, context)

    @property
    def gemvs(self) -> tuple[GemvConfig, GemvConfig, GemvConfig]:
        """The layer's own three: o_proj, gate_up, down."""
        return self.o_proj, self.gate_up, self.down

    @property
    def launch_gemvs(self) -> tuple[GemvConfig, ...]:
        """Every GEMV launch of the module, in order: the layer's three, then the next layer's q, k, v or
        the LM head."""
        return self.gemvs + self.next_qkv + ((self.head,) if self.head else ())

    def with_launch_gemvs(self, gemvs: tuple[GemvConfig, ...]) -> "LayerConfig":
        """The same layer with launch_gemvs replaced, in launch_gemvs' order."""
        k = len(self.next_qkv)
        return replace(
            self,
            o_proj=gemvs[0],
            gate_up=gemvs[1],
            down=gemvs[2],
            next_qkv=tuple(gemvs[3 : 3 + k]),
            head=gemvs[3 + k] if self.head else None,
        )

    @property
    def qkv_gemvs(self) -> tuple[GemvConfig, ...]:
        """The q, k, v GEMVs the RoPE launches read."""
        return self.next_qkv

    @property
    def hidden(self) -> int:
        return self.o_proj.k

    @property
    def intermediate(self) -> int:
        return self.gate_up.n // 2

    def buffers(self) -> list[tuple[str, int | GemvConfig]]:
        """The module's host buffers in argument order, inputs, intermediates, outputs: (name, a row's bf16
        elements, or the GemvConfig whose packed records it holds)."""
        e, h = self.hidden, self.intermediate
        qkv = [(f"w_qkv{i}", g) for i, g in enumerate(self.next_qkv)]
        nxt = bool(self.next_qkv)
        rope = self.rope_launches() if self.rope else []
        cache, attn = (
            attention_buffers(self.rope, self.context) if self.context else ([], [])
        )
        return (
            [("attn", e), ("x", e), ("w_o", self.o_proj), ("ffn_norm", e)]
            + [("w_gate_up", self.gate_up), ("w_down", self.down)]
            + ([("next_norm", e)] + qkv if nxt else [])
            + ([("rope_table", self.rope[0])] if rope else [])
            + cache
            + ([("final_norm", e), ("w_head", self.head)] if self.head else [])
            + [("proj", e), ("h", e), ("normed", e), ("gate_up", 2 * h), ("act", h)]
            + [("down", e)]
            + ([("next_normed", e)] if nxt else [])
            + [("out", e)]
            + [(f"qkv{i}", g.n) for i, g in enumerate(self.next_qkv)]
            + (attn or [(f"{name}_roped", n) for name, _, _, n, _ in rope])
            + ([("final_normed", e), ("logits", self.head.n)] if self.head else [])
        )

    def index(self, name: str) -> int:
        """A buffer's position in the module's arguments."""
        return [n for n, _ in self.buffers()].index(name)


@dataclass(frozen=True)
class QkvConfig:
    """The module that starts a token (o_gemv_ffn_int4.build_qkv_module; mlir-air's llama32_1b_int4 runs
    the same chain as rms_qkv_int4_rope): layer 0's attention RMSNorm, its q, k, v GEMVs over the normed
    row (one per run of parts that fuse) and their RoPE. Every later layer's q, k, v end the previous
    layer's module (LayerConfig.next_qkv)."""

    qkv: tuple[GemvConfig, ...]
    rope: tuple[int, ...]
    # > 0: the module ends with layer 0's attention launch over a KV cache of this many positions
    context: int = 0

    def __post_init__(self):
        e = self.hidden
        for i, g in enumerate(self.qkv):
            if (g.m, g.k) != (1, e):
                raise ConfigError(
                    f"q, k, v GEMV {i}: M={g.m} K={g.k}; the module needs M=1 K={e} (hidden)"
                )
        if e % (COLUMNS * ELTWISE_LANES):
            raise ConfigError(
                f"hidden {e}: a multiple of {COLUMNS * ELTWISE_LANES} (the element-wise herd's {COLUMNS} "
                f"PEs times the kernel's {ELTWISE_LANES} lanes)"
            )
        check_rope(self.qkv, self.rope)
        check_prefixes(self.qkv)
        if self.context:
            check_fused_attention(self.rope, self.context)

    @classmethod
    def named(
        cls, qkv: tuple[GemvConfig, ...], rope: tuple[int, ...], context: int = 0
    ) -> "QkvConfig":
        return cls(tuple(named_gemvs(qkv)), rope, context)

    @property
    def hidden(self) -> int:
        return self.qkv[0].k

    @property
    def launch_gemvs(self) -> tuple[GemvConfig, ...]:
        return self.qkv

    def with_launch_gemvs(self, gemvs: tuple[GemvConfig, ...]) -> "QkvConfig":
        return replace(self, qkv=tuple(gemvs))

    @property
    def qkv_gemvs(self) -> tuple[GemvConfig, ...]:
        """The q, k, v GEMVs the RoPE launches read."""
        return self.qkv

    def rope_launches(self) -> list[tuple[str, str, int, int, int]]:
        return rope_launches(self.qkv, self.rope, bool(self.context))

    def index(self, name: str) -> int:
        """A buffer's position in the module's arguments."""
        return [n for n, _ in self.buffers()].index(name)

    def buffers(self) -> list[tuple[str, int | GemvConfig]]:
        """The module's host buffers in argument order (LayerConfig.buffers' names for the same rows)."""
        e = self.hidden
        cache, attn = (
            attention_buffers(self.rope, self.context) if self.context else ([], [])
        )
        return (
            [("x", e), ("attn_norm", e)]
            + [(f"w_qkv{i}", g) for i, g in enumerate(self.qkv)]
            + [("rope_table", self.rope[0])]
            + cache
            + [("normed", e)]
            + [(f"qkv{i}", g.n) for i, g in enumerate(self.qkv)]
            + (
                attn
                or [(f"{name}_roped", n) for name, _, _, n, _ in self.rope_launches()]
            )
        )


def buffer_shape(kind) -> tuple[int, ...]:
    """A module's host buffer's shape from its kind in buffers(): a row's bf16 elements, a matrix's
    (rows, columns), a GEMV's records [n_tiles, k_chunks, record_bytes], or a RecordSlab.
    """
    if isinstance(kind, int):
        return (1, kind)
    if isinstance(kind, tuple):
        return kind
    if isinstance(kind, GemvConfig):
        return (kind.n_tiles, kind.k_chunks, kind.record_bytes)
    return (kind.tiles, kind.chunks, kind.record)


@dataclass(frozen=True)
class RecordSlab:
    """Packed records of several GEMVs of one record shape, one after another along the first dimension:
    [tiles, chunks, record] u8 (a GEMV's W buffer is [n_tiles, k_chunks, record_bytes]).
    """

    tiles: int
    chunks: int
    record: int


@dataclass(frozen=True)
class TokenConfig:
    """Decode layers as one module, one dispatch (o_gemv_ffn_int4.build_token_module): optionally the first
    module's launches (QkvConfig: layer 0's norm, q, k, v, RoPE and attention), then each layer module's
    (LayerConfig: ending with the next layer's q, k, v, RoPE and attention, the last layer's with the final
    norm and the LM head), in one function. A whole token is one TokenConfig, or a few run one after another
    (TokenConfig.split: aircc's compile time and memory grow faster than the launches, docs/decode.md). As
    mlir-air's fused_decode addresses its layers (per-layer slabs of a few DDR buffers at constant offsets),
    each module's buffer is a row block of one of the dispatch's buffers (slabs): the layers' records of one
    shape one after another, their norms, caches and intermediates row by row. The hidden row is chained in
    `hidden` (row 0 the dispatch's input: the token's embedding, or the previous dispatch's last row), and so
    is the attention's output in `attn_next` (each layer's o_proj reads the row its previous module wrote;
    without the first module, row 0 is the previous dispatch's). The RoPE table is one row for every layer.
    """

    first: QkvConfig | None
    layers: tuple[LayerConfig, ...]

    def __post_init__(self):
        if not self.layers:
            raise ConfigError("a token module needs at least one layer")
        *inner, last = self.layers
        context, rope = self.context, self.rope
        for i, ly in enumerate(inner):
            if not ly.next_qkv or ly.rope != rope or ly.context != context:
                raise ConfigError(
                    f"layer {i} of the token module must end with the next layer's q, k, v, RoPE "
                    f"{rope} and attention at context {context}"
                )
        if last.head is None and (last.rope != rope or last.context != context):
            raise ConfigError(
                "the token module's last layer must end with the LM head, or with the next layer's q, k, "
                f"v, RoPE {rope} and attention at context {context}"
            )
        if self.first is not None and (
            self.first.rope != rope or self.first.context != context
        ):
            raise ConfigError(
                "the token module's first module must end with the attention its layers run"
            )
        if not context and (self.first is not None or len(self.layers) > 1):
            raise ConfigError("the token module runs the attention: context > 0")
        if any(m.hidden != self.layers[0].hidden for m in self.modules):
            raise ConfigError("the token module's layers must share the hidden size")
        check_prefixes(self.launch_gemvs)

    @classmethod
    def named(
        cls, first: QkvConfig | None, layers: tuple[LayerConfig, ...]
    ) -> "TokenConfig":
        """The modules' GEMVs with their entries named across the whole dispatch (named_gemvs): the module
        declares each distinct kernel object's entries once."""
        modules = ((first,) if first is not None else ()) + tuple(layers)
        out = named_gemvs([g for m in modules for g in m.launch_gemvs])
        renamed, at = [], 0
        for m in modules:
            n = len(m.launch_gemvs)
            renamed.append(m.with_launch_gemvs(out[at : at + n]))
            at += n
        if first is not None:
            return cls(renamed[0], tuple(renamed[1:]))
        return cls(None, tuple(renamed))

    @classmethod
    def split(
        cls, first: QkvConfig, layers: tuple[LayerConfig, ...], per_dispatch: int
    ) -> tuple["TokenConfig", ...]:
        """A whole token as dispatches of at most per_dispatch layers each, the first module with the
        first layers: like groups of like layers are the same module (compiled once)."""
        if per_dispatch < 1:
            raise ConfigError(f"layers a dispatch: {per_dispatch}, at least 1")
        return tuple(
            cls.named(first if i == 0 else None, tuple(layers[i : i + per_dispatch]))
            for i in range(0, len(layers), per_dispatch)
        )

    @property
    def modules(self) -> tuple:
        return ((self.first,) if self.first is not None else ()) + self.layers

    @property
    def launch_gemvs(self) -> tuple[GemvConfig, ...]:
        return tuple(g for m in self.modules for g in m.launch_gemvs)

    @property
    def hidden(self) -> int:
        return self.layers[0].hidden

    @property
    def rope(self) -> tuple[int, ...]:
        return next((m.rope for m in self.modules if m.rope), ())

    @property
    def context(self) -> int:
        return max(m.context for m in self.modules)

    @functools.cached_property
    def _layout(self):
        """(slabs: {name: [kind, rows]} in argument order, refs: per module {buffer: (slab, row)})."""
        # the module's buffers that are shared rows rather than rows of their own: (slab, row of module j);
        # without the first module, layer module j reads row j and writes row j + 1
        o = 0 if self.first is not None else 1
        chained = {
            "x": ("hidden", lambda j: max(j - 1 + o, 0)),
            "out": ("hidden", lambda j: j + o),
            "attn": ("attn_next", lambda j: j - 1 + o),
            "attn_next": ("attn_next", lambda j: j + o),
            "rope_table": ("rope_table", lambda j: 0),
        }
        slabs, refs = {}, []
        for j, m in enumerate(self.modules):
            ref = {}
            for name, kind in m.buffers():
                shape = buffer_shape(kind)
                if isinstance(kind, GemvConfig):
                    key = f"records_{kind.k_chunks}x{kind.record_bytes}"
                else:
                    key = name if name not in chained else chained[name][0]
                    if key in slabs and slabs[key][0][1:] != shape[1:]:
                        key = f"{key}_{shape[-1]}"
                if name in chained:
                    row = chained[name][1](j)
                    rows = slabs.get(key, [shape, 0])[1]
                    slabs[key] = [shape, max(rows, row + 1)]
                else:
                    row = slabs.get(key, [shape, 0])[1]
                    slabs[key] = [shape, row + shape[0]]
                ref[name] = (key, row)
            refs.append(ref)

        # the inputs first (records, norm weights, the RoPE table, the caches), then the chained rows
        # (hidden, attn_next: the host gives row 0 when the dispatch has no first module), then the rest
        def rank(key):
            if key.startswith("records_") or key.endswith("norm"):
                return 0
            return {"rope_table": 0, "kv_cache": 0, "hidden": 1, "attn_next": 2}.get(
                key, 3
            )

        order = sorted(slabs, key=rank)
        return {k: slabs[k] for k in order}, refs

    def buffers(self) -> list[tuple[str, tuple[int, int] | RecordSlab]]:
        """The token module's host buffers in argument order, inputs first: (name, (rows, bf16 columns) or
        a RecordSlab)."""
        out = []
        for key, (shape, rows) in self._layout[0].items():
            if key.startswith("records_"):
                out.append((key, RecordSlab(rows, *shape[1:])))
            else:
                out.append((key, (rows, shape[1])))
        return out

    def refs(self, j: int) -> dict[str, tuple[str, int]]:
        """Module j's buffers (of self.modules), each as (the dispatch's buffer, its first row there; a
        record buffer's rows are N tiles)."""
        return self._layout[1][j]

    def index(self, name: str) -> int:
        """A buffer's position in the module's arguments."""
        return [n for n, _ in self.buffers()].index(name)
