# SPDX-License-Identifier: MIT
# A decoder layer's o_proj + FFN at decode (M = 1) for NPU2 (AIE2P): one MLIR-AIR module of seven launches.
"""out = h + down(silu(gate(n)) * up(n)),  n = rms_norm(h) * norm_w,  h = x + o_proj(attn),  one row.

The module
----------
The attention-free part of a Llama decoder layer, as mlir-air's llms multi-launch builders put it in one
module (llama32_1b_int4/multi_launch_builder, shared/builders/o_ffn_multi.py): a function of several
`air.launch`es run in program order. aircc compiles each launch into an `aie.device` of its own and a main
runtime sequence that configures and runs them in turn, so the host dispatches the layer once. Every
intermediate goes through DDR (the launches share no on-chip state), as upstream's multi-launch modules do.

  1. o_proj     proj   = attn x dequant(W_o)              GEMV, 32 PEs (matvec_int4_packed.gemv_launch)
  2. residual   h      = x + proj                          element-wise, herd [8, 1]
  3. rms_norm   normed = rms_norm(h) * norm_w              one PE (the whole row: a sum over it)
  4. gate_up    gu     = normed x dequant(W_gate | W_up)   GEMV over N = 2 x hidden, fused along N
  5. swiglu     act    = silu(gu[:hidden]) * gu[hidden:]   element-wise, herd [8, 1]
  6. down       d      = act x dequant(W_down)             GEMV
  7. residual   out    = h + d                             element-wise, herd [8, 1]

The element-wise work has launches of its own, as upstream's o_ffn_multi gives it (its residual add,
RMSNorm and SwiGLU launches), not fused into the GEMVs as its o_gemv_ffn_int4_multi does: the GEMV here
spreads N over all 32 PEs and K over L2 refills, so a norm inside it would be recomputed by every PE from
a row no PE holds whole, and SwiGLU in its drain would need gate and up interleaved in the records. Its
own launches keep the GEMV and its kernel object exactly the design of matvec_int4_packed.py, at the cost
of four launch boundaries inside one dispatch (about zero each: mlir-air #1653; docs/decode.md).

The element-wise launches follow mlir-air's silu_and_mul example: a segment with a herd [8, 1] (one PE
for the norm, as weighted_rms_norm's single-tile run) whose PEs DMA their stretch of each operand from
DDR into L1, call the kernel (kernels/eltwise_bf16.cc), and DMA the result back.

With LayerConfig.next_qkv the module goes on with the next layer's attention: an RMSNorm of out by that
layer's norm weight on one PE, and its q, k, v GEMVs over the result (one per run of parts that fuse), so a
token takes one dispatch a layer (the host's attention sits between q, k, v and the next o_proj). With
LayerConfig.rope it then rotates that q and k (half-split RoPE, one launch each, the entry rope_bf16 on a
[cos | sin] row of the token's position, read whole by every PE), as mlir-air's rms_qkv_int4_rope_multi
module ends with its RoPE launches (its kernel: the hardware-tested rope_halfsplit example's rotation).

Host buffers, in argument order (inputs, intermediates, output; every vector [1, n] bf16; with next_qkv,
LayerConfig.buffers adds next_norm and W_qkv to the inputs, next_normed to the intermediates and each q, k,
v GEMV's C to the outputs):
  attn [1, E], x [1, E], W_o, norm_w [1, E], W_gu, W_down,
  proj [1, E], h [1, E], normed [1, E], gu [1, 2H], act [1, H], d [1, E], out [1, E]
with E the hidden size, H the intermediate size and W_* the GEMV's packed records
(int4_packed_record.pack_records). 13 arguments: the module is built for the ELF flow
(output_format="elf"), as upstream's multi-launch modules are.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

if __name__ == "__main__" and importlib.util.find_spec("air") is None:
    # run as a script where mlir-air is not installed: the emulator's air package prints the same module
    sys.path.insert(
        0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "emulator")
    )

try:
    from air.dialects import arith
    from air.dialects.affine import apply as affine_apply
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
    from air.dialects.memref import AllocOp, DeallocOp
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
    )
except ImportError as e:  # as a script without mlir-air: say what to do
    if __name__ != "__main__":
        raise
    print(
        f"error: {e}: run it through host/run.py or `make run_llama_decode_layer`",
        file=sys.stderr,
    )
    sys.exit(2)

from int4_packed_record import (
    ATTN_CHUNK,
    ATTN_CTX,
    COLUMNS,
    attention_ddr_bytes,
    attention_q_width,
    attention_state_elems,
    qkv_part,
    FORMAT_GS,
    L1_BYTES,
    FORMATS,
    ConfigError,
    GemvConfig,
    LayerConfig,
    QkvConfig,
    RecordSlab,
    TokenConfig,
)
from matvec_int4_packed import (
    gemv_kernel_funcs,
    gemv_l3_types,
    gemv_launch,
    kernel_func,
)

ELTWISE_OBJECT = "eltwise_bf16.o"  # kernels/Makefile ENTRIES=eltwise


def l3_types(cfg: LayerConfig | QkvConfig | TokenConfig):
    """The host buffers' types, in argument order (LayerConfig.buffers): a row of bf16, a matrix of bf16
    (rows, columns), or a GEMV's records."""
    bf16 = BF16Type.get()

    def of(kind):
        if isinstance(kind, int):
            return MemRefType.get([1, kind], bf16)
        if isinstance(kind, tuple):
            return MemRefType.get(list(kind), bf16)
        if isinstance(kind, RecordSlab):
            u8 = IntegerType.get_signless(8)
            return MemRefType.get([kind.tiles, kind.chunks, kind.record], u8)
        return gemv_l3_types(kind)[1]

    return [of(kind) for _, kind in cfg.buffers()]


def _at(x, tile: int, offset: int):
    """affine.apply of x * tile + offset: a PE's first element."""
    expr = AffineExpr.get_add(
        AffineExpr.get_mul(AffineSymbolExpr.get(0), AffineConstantExpr.get(tile)),
        AffineConstantExpr.get(offset),
    )
    return affine_apply(AffineMap.get(0, 1, [expr]), [x])


def eltwise_launch(
    func,
    name: str,
    n: int,
    pes: int,
    sources,
    operands,
    out_index: int,
    extra=(),
    scatter=None,
    rows=None,
):
    """One element-wise launch over n elements on a herd [pes, 1]: PE x takes elements x * n / pes onward
    of each source ((operand index, element offset); a source (operand index, None) is read whole by every
    PE), calls func(sources..., out, n / pes, *extra) and writes its stretch of operands[out_index]; with
    scatter = (pieces, stride, base), as that many equal pieces, piece j of PE x at element
    base + (x * pieces + j) * stride. rows: each operand's row in its buffer (a token module's rows of
    one buffer, o_gemv_ffn_int4.build_token_module), 0 by default.
    """
    tile = n // pes
    widths = [op.type.shape[1] for op in operands]
    rows = rows or [0] * len(operands)
    # the default: one piece at x * tile (its outer stride, never stepped, the row's width)
    pieces, stride, base = scatter or (1, widths[out_index], 0)
    span = pieces * stride if scatter else tile
    l1_space = IntegerAttr.get(T.i32(), MemorySpace.L1)

    def row(width):
        return MemRefType.get([1, width], BF16Type.get(), memory_space=l1_space)

    l1 = row(tile)

    @launch(operands=list(operands))
    def launch_body(*l3):
        @segment(name=f"{name}_seg", operands=list(l3))
        def segment_body(*s3):
            @herd(name=f"{name}_herd", sizes=[pes, 1], operands=list(s3))
            def herd_body(x, _y, _sx, _sy, *h3):
                ins = [
                    AllocOp(l1 if offset is not None else row(widths[i]), [], [])
                    for i, offset in sources
                ]
                out = AllocOp(l1, [], [])
                for buf, (i, offset) in zip(ins, sources):
                    whole = operands[i].type.shape[0] == 1 and not rows[i]
                    if offset is None and whole:  # the whole operand, to every PE
                        dma_memcpy_nd(buf, h3[i])
                        continue
                    if offset is None:  # the whole row, to every PE
                        dma_memcpy_nd(
                            buf,
                            h3[i],
                            src_offsets=[rows[i], 0],
                            src_sizes=[1, widths[i]],
                            src_strides=[widths[i], 1],
                        )
                        continue
                    dma_memcpy_nd(
                        buf,
                        h3[i],
                        src_offsets=[rows[i], _at(x, tile, offset)],
                        src_sizes=[1, tile],
                        src_strides=[widths[i], 1],
                    )
                ints = [arith.ConstantOp(T.i32(), v) for v in (tile, *extra)]
                CallOp(func, [*ins, out, *ints])
                out_row = rows[out_index]
                # scattered pieces into a later row: the row a dimension of its own
                if scatter and out_row:
                    dma_memcpy_nd(
                        h3[out_index],
                        out,
                        dst_offsets=[out_row, 0, _at(x, span, base)],
                        dst_sizes=[1, pieces, tile // pieces],
                        dst_strides=[widths[out_index], stride, 1],
                    )
                else:
                    dma_memcpy_nd(
                        h3[out_index],
                        out,
                        dst_offsets=[out_row, _at(x, span, base)],
                        dst_sizes=[pieces, tile // pieces],
                        dst_strides=[stride, 1],
                    )
                for buf in (*ins, out):
                    DeallocOp(buf)


def eltwise_funcs(tiles, rope=None):
    """The element-wise entries (kernels/eltwise_bf16.cc) declared for L1 rows of the given lengths:
    {name: FuncOp} for each name of tiles (add, rms_norm, silu_mul, copy); with rope = (the RoPE
    launches' PE rows, head_dim), ("rope", row) for each of them (two rows: the entry's two names).
    """
    bf16, l1 = BF16Type.get(), IntegerAttr.get(T.i32(), MemorySpace.L1)

    def row(n):
        return MemRefType.get([1, n], bf16, memory_space=l1)

    symbols = {
        "add": ("eltwise_add_bf16", 3),
        "rms_norm": ("rms_norm_bf16", 3),
        "silu_mul": ("silu_mul_bf16", 3),
        "copy": ("copy_bf16", 2),
    }
    funcs = {
        name: kernel_func(symbol, [row(tiles[name])] * rows + [T.i32()], ELTWISE_OBJECT)
        for name, (symbol, rows) in symbols.items()
        if name in tiles
    }
    if rope:
        # a second row type takes the entry's second name (one declaration a symbol)
        rows, d = rope
        for name, tile in zip(("rope_bf16", "rope2_bf16"), rows):
            funcs[("rope", tile)] = kernel_func(
                name, [row(tile), row(d), row(tile), T.i32(), T.i32()], ELTWISE_OBJECT
            )
    return funcs


# ------------------------------------------------------------------------------------------- attention
# Decode attention over a KV cache of `context` positions at most, ATTN_CHUNK positions a DMA: each PE takes
# one key/value head and its g query heads (GQA), as mlir-air's attention_decode example lays its herd
# [NKV, 1] (Llama-3.2-1B: 8 PEs of 4 query heads of 64). An online softmax (one pass: the running maximum,
# sum and output rescaled when a chunk raises the maximum, as flash attention's) keeps one chunk's scores
# in L1, so the context does not depend on L1. Two DMAs a PE, the two shim channels of its column: its q,
# with the token's own key and value and the run-time length behind it (ctx[0] = n: the cache rows before
# the token), and one stream of the cache's chunks, each its 32 key rows then its 32 value rows
# (attention_cache's layout), one call of attn_step_bf16 a chunk. The token itself is taken from the q
# buffer, so the cache need not hold it yet: the host appends it after the dispatch. Rows past n are read
# but neither used nor required to hold numbers.
ATTN_MAX_D = 128  # a query head's vectors held in registers across a chunk (kernels/eltwise_bf16.cc MAX_D)


def attention_cache(k, v):
    """The launch's cache buffer [2 * context, kv * d] bf16 from one layer's keys (after RoPE) and values
    [context, kv * d], position major: chunk j of ATTN_CHUNK positions is its key rows, then its value
    rows."""
    import numpy as np
    from ml_dtypes import bfloat16

    k, v = np.asarray(k, bfloat16), np.asarray(v, bfloat16)
    chunks = k.shape[0] // ATTN_CHUNK
    both = np.stack([a.reshape(chunks, ATTN_CHUNK, a.shape[1]) for a in (k, v)], axis=1)
    return both.reshape(2 * k.shape[0], k.shape[1])


def attention_cache_rows(pos: int) -> tuple[int, int]:
    """The rows of attention_cache's buffer that hold position pos's key and its value."""
    key = pos // ATTN_CHUNK * 2 * ATTN_CHUNK + pos % ATTN_CHUNK
    return key, key + ATTN_CHUNK


def attention_q(q, k, v, n: int, kv: int):
    """The launch's q buffer [1, kv * attention_q_width] bf16 from q [heads * d] (after RoPE), the token's
    own k (after RoPE) and v [kv * d], and n, the cache rows before the token."""
    import numpy as np
    from ml_dtypes import bfloat16

    q, k, v = (np.asarray(a, bfloat16).reshape(kv, -1) for a in (q, k, v))
    g, d = q.shape[1] // k.shape[1], k.shape[1]
    buf = np.zeros((kv, attention_q_width(g, d)), bfloat16)
    buf[:, : g * d], buf[:, g * d : g * d + d], buf[:, g * d + d : g * d + 2 * d] = (
        q,
        k,
        v,
    )
    buf[:, g * d + 2 * d :].view(np.int32)[:] = n
    return buf.reshape(1, -1)


def attention_types(heads: int, kv: int, d: int, context: int):
    """The launch's DDR buffers: q [1, kv * attention_q_width] bf16 (per PE its g query heads, the token's
    key and value of its head, then its 16 int32 of ctx), the cache [2 * context, kv * d] bf16
    (attention_cache's chunks of key rows and value rows), out [1, heads * d] bf16."""
    bf16, g = BF16Type.get(), heads // kv
    return (
        MemRefType.get([1, kv * attention_q_width(g, d)], bf16),
        MemRefType.get([2 * context, kv * d], bf16),
        MemRefType.get([1, heads * d], bf16),
    )


def attention_funcs(g: int, d: int, context: int, chunk: int = ATTN_CHUNK):
    """The attention entries (kernels/eltwise_bf16.cc) declared for one PE's L1 buffers."""
    l1 = IntegerAttr.get(T.i32(), MemorySpace.L1)
    bf16, f32 = BF16Type.get(), F32Type.get()

    def buf(shape, elt):
        return MemRefType.get(shape, elt, memory_space=l1)

    ty = dict(
        q=buf([1, attention_q_width(g, d)], bf16),
        rows=buf([2 * chunk, d], bf16),
        scores=buf([1, g * chunk], f32),
        probs=buf([1, g * chunk], bf16),
        o=buf([1, attention_state_elems(g, d)], f32),
        out=buf([1, g * d], bf16),
    )
    step = [ty[k] for k in ("q", "rows", "scores", "probs", "o")] + [T.i32()] * 5
    return {
        "init": kernel_func(
            "attn_init_bf16",
            [ty["q"], ty["scores"], ty["probs"], ty["o"]] + [T.i32()] * 3,
            ELTWISE_OBJECT,
        ),
        "step": kernel_func("attn_step_bf16", step, ELTWISE_OBJECT),
        "out": kernel_func(
            "attn_out_bf16", [ty["o"], ty["out"]] + [T.i32()] * 2, ELTWISE_OBJECT
        ),
        "types": ty,
    }


def attention_launch(
    funcs,
    name: str,
    heads: int,
    kv: int,
    d: int,
    context: int,
    operands,
    rows=(0, 0, 0),
):
    """One launch of decode attention (the comment above) over the DDR buffers operands = (q with ctx,
    caches, out): herd [kv, 1], PE x the key/value head x and the query heads x * g .. x * g + g - 1;
    rows: where q, the cache and out start in their buffers (a token module's layer).
    """
    row_q, row_cache, row_out = rows
    g, chunk, ty = heads // kv, ATTN_CHUNK, funcs["types"]
    steps = context // chunk

    def i32(v):
        return v if not isinstance(v, int) else arith.ConstantOp(T.i32(), v)

    @launch(operands=list(operands))
    def launch_body(*l3):
        @segment(name=f"{name}_seg", operands=list(l3))
        def segment_body(*s3):
            @herd(name=f"{name}_herd", sizes=[kv, 1], operands=list(s3))
            def herd_body(x, _y, _sx, _sy, q3, caches3, out3):
                q = AllocOp(ty["q"], [], [])
                scores, probs = AllocOp(ty["scores"], [], []), AllocOp(
                    ty["probs"], [], []
                )
                o, out = AllocOp(ty["o"], [], []), AllocOp(ty["out"], [], [])
                width = attention_q_width(g, d)
                dma_memcpy_nd(
                    q,
                    q3,
                    src_offsets=[row_q, _at(x, width, 0)],
                    src_sizes=[1, width],
                    src_strides=[kv * width, 1],
                )
                # a first access of scores and probs outside the loop keeps them at herd scope: used by
                # the loop's kernel call alone they are sunk into it, and aircc then leaves the loop
                # single-buffered (matmul_int4_packed.anchor_at_herd_scope, docs/design.md#ping-pong)
                CallOp(funcs["init"], [q, scores, probs, o, *map(i32, (g, d, context))])
                for step in for_(0, steps):
                    rows = AllocOp(ty["rows"], [], [])
                    # the head's d columns of the step's chunk (its key rows, then its value rows)
                    dma_memcpy_nd(
                        rows,
                        caches3,
                        src_offsets=[_at(step, 2 * chunk, row_cache), _at(x, d, 0)],
                        src_sizes=[2 * chunk, d],
                        src_strides=[kv * d, 1],
                    )
                    args = [arith.index_cast(T.i32(), step), g, d, chunk, context]
                    CallOp(funcs["step"], [q, rows, scores, probs, o, *map(i32, args)])
                    DeallocOp(rows)
                    yield_([])
                CallOp(funcs["out"], [o, out, *map(i32, (g, d))])
                dma_memcpy_nd(
                    out3,
                    out,
                    dst_offsets=[row_out, _at(x, g * d, 0)],
                    dst_sizes=[1, g * d],
                    dst_strides=[heads * d, 1],
                )
                for buf in (q, scores, probs, o, out):
                    DeallocOp(buf)


def attention_backend_options() -> dict:
    """XRTBackend options of the attention module (the GEMV's stack: the kernel's scalar float code)."""
    return dict(
        target_device="npu2",
        stack_size=4096,
        omit_while_true_loop=False,
        instance_name="attention_decode",
    )


def attention_problem(heads: int, kv: int, d: int, context: int) -> str | None:
    """Why the attention launch cannot take these heads and this context, or None: the herd's shape, the
    context (whole chunks, an even count of them: aircc ping-pongs the loop over them, and an odd trip
    count corrupts data on NPU2, docs/emulator.md#odd-trip-counts), or a PE's L1 (the q buffer, one chunk's
    scores (f32) and probabilities (bf16) for its g query heads, the state (f32) and out, two chunks of
    cache rows, the stack)."""
    if (
        heads % kv
        or kv > COLUMNS
        or d % 16
        or d > ATTN_MAX_D
        or context % (2 * ATTN_CHUNK)
    ):
        return (
            f"attention: {heads} query heads over {kv} key/value heads (at most {COLUMNS}) of {d} (a "
            f"multiple of 16, at most {ATTN_MAX_D}), context {context} (a multiple of "
            f"{2 * ATTN_CHUNK}: an even count of {ATTN_CHUNK}-position chunks)"
        )
    g, stack = heads // kv, attention_backend_options()["stack_size"]
    l1 = (
        2 * attention_q_width(g, d)
        + 6 * g * ATTN_CHUNK
        + 4 * attention_state_elems(g, d)
        + 2 * g * d
        + 2 * 2 * 2 * ATTN_CHUNK * d
        + stack
    )
    if l1 <= L1_BYTES:
        return None
    return f"attention: {g} query heads of {d} a PE need {l1} bytes of its L1, more than its {L1_BYTES}"


@module_builder
def build_attention_module(heads: int, kv: int, d: int, context: int):
    """A module of one decode attention launch (attention_launch): out = attention(q, [k_cache[:n]; k],
    [v_cache[:n]; v]), n = ctx[0] < context, k and v the token's own (attention_q packs the q buffer), for
    heads query heads over kv key/value heads of d, a cache of context.
    """
    problem = attention_problem(heads, kv, d, context)
    if problem:
        raise ConfigError(problem)
    funcs = attention_funcs(heads // kv, d, context)

    @FuncOp.from_py_func(*attention_types(heads, kv, d, context))
    def attention_decode(*args):
        attention_launch(funcs, "attention", heads, kv, d, context, args)


def _kernels(cfg, tiles):
    """Each distinct GEMV object's entries and the element-wise ones (tiles: eltwise_funcs'), declared once
    for the module (a token module's: for all its modules), the RoPE launches' rows, and the attention's
    entries when a module ends with the attention launch."""
    gemv_funcs = {}
    for g in cfg.launch_gemvs:
        if g.kernel not in gemv_funcs:
            gemv_funcs[g.kernel] = gemv_kernel_funcs(g)
    modules = cfg.modules if isinstance(cfg, TokenConfig) else (cfg,)
    ropes = [r for m in modules if m.rope for r in m.rope_launches()]
    attn = None
    if cfg.context:
        d, heads, kv = cfg.rope
        problem = attention_problem(heads, kv, d, cfg.context)
        if problem:
            raise ConfigError(problem)
        tiles = {**tiles, "copy": d}
        attn = attention_funcs(heads // kv, d, cfg.context)
    rope_rows = sorted({n // pes for _, _, _, n, pes in ropes})
    elt = eltwise_funcs(tiles, (rope_rows, cfg.rope[0]) if ropes else None)
    return gemv_funcs, elt, attn


class _Launches:
    """The launches of a module's function, over its arguments (named as cfg.buffers() names them) or, in
    a token module, over bufs: each of the module's buffers as (the token's argument, its first row there),
    every launch's name prefixed."""

    def __init__(self, cfg, kernels, args=(), bufs=None, prefix=""):
        self.gemv_funcs, self.elt, self.attn = kernels
        self.ropes = cfg.rope_launches() if cfg.rope else []
        self.cfg, self.p = cfg, prefix
        if bufs is None:
            bufs = {n: (a, 0) for (n, _), a in zip(cfg.buffers(), args)}
        self.b = {n: a for n, (a, _) in bufs.items()}
        self.r = {n: row for n, (_, row) in bufs.items()}
        self.d = cfg.rope[0] if cfg.rope else None
        self.e = cfg.hidden

    def gemv(self, g, a, w, c, name):
        gemv_launch(
            g,
            self.gemv_funcs[g.kernel],
            self.b[a],
            self.b[w],
            self.b[c],
            self.p + name,
            herd_name=f"{self.p}{name}_herd",
            rows=(self.r[a], self.r[w], self.r[c]),
        )

    def eltwise(self, entry, name, n, pes, sources, operands, extra=(), scatter=None):
        # sources: (operand, element offset, or None: whole) read; the last operand is written
        ops = [self.b[o] for o in operands]
        srcs = [(operands.index(o), off) for o, off in sources]
        eltwise_launch(
            self.elt[entry],
            self.p + name,
            n,
            pes,
            srcs,
            ops,
            len(ops) - 1,
            extra,
            scatter,
            [self.r[o] for o in operands],
        )

    def rms_norm(self, name, row, weight, out):
        """RMSNorm of a hidden row on one PE (its two passes need the whole row)."""
        self.eltwise(
            "rms_norm", name, self.e, 1, [(row, 0), (weight, 0)], [row, weight, out]
        )

    def rope(self):
        """q and k rotated at the position whose [cos | sin] row rope_table holds; with the attention
        launch (cfg.context), written into its q buffer, the token's value copied there, and the launch.
        """
        if not self.ropes:
            return
        d, heads, kv = self.cfg.rope
        g, width = heads // kv, attention_q_width(heads // kv, d)
        for part, src, offset, n, pes in self.ropes:
            out, scatter = f"{part}_roped", None
            if self.attn:  # PE x: key/value head x's query heads, or its key
                out = "q_attn"
                scatter = (1, width, 0 if part == "q" else g * d)
            self.eltwise(
                ("rope", n // pes),
                f"rope_{part}",
                n,
                pes,
                [(src, offset), ("rope_table", None)],
                [src, "rope_table", out],
                (self.d,),
                scatter,
            )
        if not self.attn:
            return
        src, offset = qkv_part(self.cfg.qkv_gemvs, (heads + kv) * d)
        self.eltwise(
            "copy",
            "copy_v",
            kv * d,
            kv,
            [(src, offset)],
            [src, "q_attn"],
            scatter=(1, width, g * d + d),
        )
        names = ("q_attn", "kv_cache", "attn_next")
        attention_launch(
            self.attn,
            self.p + "attention",
            heads,
            kv,
            d,
            self.cfg.context,
            [self.b[n] for n in names],
            [self.r[n] for n in names],
        )

    def layer(self):
        """A layer module's launches (build_module's docstring)."""
        cfg, e, h = self.cfg, self.cfg.hidden, self.cfg.intermediate
        self.gemv(cfg.o_proj, "attn", "w_o", "proj", "o_proj")
        self.eltwise(
            "add", "residual", e, COLUMNS, [("proj", 0), ("x", 0)], ["proj", "x", "h"]
        )
        self.rms_norm("rms_norm", "h", "ffn_norm", "normed")
        self.gemv(cfg.gate_up, "normed", "w_gate_up", "gate_up", "gate_up")
        self.eltwise(
            "silu_mul",
            "swiglu",
            h,
            COLUMNS,
            [("gate_up", 0), ("gate_up", h)],
            ["gate_up", "act"],
        )
        self.gemv(cfg.down, "act", "w_down", "down", "down")
        self.eltwise(
            "add",
            "residual2",
            e,
            COLUMNS,
            [("down", 0), ("h", 0)],
            ["down", "h", "out"],
        )
        if cfg.next_qkv:
            self.rms_norm("next_rms_norm", "out", "next_norm", "next_normed")
            for i, g in enumerate(cfg.next_qkv):
                self.gemv(g, "next_normed", f"w_qkv{i}", f"qkv{i}", f"next_qkv{i}")
        if cfg.head:  # the last layer: the final RMSNorm and the LM head (logits)
            self.rms_norm("final_rms_norm", "out", "final_norm", "final_normed")
            self.gemv(cfg.head, "final_normed", "w_head", "logits", "head")
        self.rope()

    def first(self):
        """The first module's launches (build_qkv_module's docstring)."""
        self.rms_norm("rms_norm", "x", "attn_norm", "normed")
        for i, g in enumerate(self.cfg.qkv):
            self.gemv(g, "normed", f"w_qkv{i}", f"qkv{i}", f"qkv{i}")
        self.rope()


def _eltwise_tiles(cfg) -> dict:
    """The element-wise entries' L1 rows: a layer's (add, RMSNorm, SwiGLU), or the first module's."""
    e = cfg.hidden
    if isinstance(cfg, QkvConfig):
        return {"rms_norm": e}
    return {"add": e // COLUMNS, "rms_norm": e, "silu_mul": cfg.intermediate // COLUMNS}


@module_builder
def build_module(cfg: LayerConfig):
    """The module of the layer's o_proj + FFN (the module docstring): seven launches, one dispatch; with
    cfg.next_qkv, the next layer's attention RMSNorm and q, k, v GEMVs after them."""
    kernels = _kernels(cfg, _eltwise_tiles(cfg))

    @FuncOp.from_py_func(*l3_types(cfg))
    def o_gemv_ffn_int4(*args):
        _Launches(cfg, kernels, args).layer()


@module_builder
def build_qkv_module(cfg: QkvConfig):
    """The module that starts a token (QkvConfig): layer 0's attention RMSNorm, its q, k, v GEMVs and
    their RoPE, the same launches that end every other layer's module."""
    kernels = _kernels(cfg, _eltwise_tiles(cfg))

    @FuncOp.from_py_func(*l3_types(cfg))
    def rms_qkv_rope(*args):
        _Launches(cfg, kernels, args).first()


@module_builder
def build_token_module(cfg: TokenConfig):
    """Decode layers in one module, one dispatch (TokenConfig): the first module's launches (where it has
    it), then each layer module's, every buffer a row block of the dispatch's buffers, as mlir-air's
    fused_decode addresses its layers' slabs; each launch named after its module (m0_, m1_, ...).
    """
    kernels = _kernels(cfg, _eltwise_tiles(cfg.layers[0]))
    names = [n for n, _ in cfg.buffers()]

    @FuncOp.from_py_func(*l3_types(cfg))
    def decode_token(*args):
        by_name = dict(zip(names, args))
        for j, m in enumerate(cfg.modules):
            bufs = {n: (by_name[slab], row) for n, (slab, row) in cfg.refs(j).items()}
            run = _Launches(m, kernels, bufs=bufs, prefix=f"m{j}_")
            if isinstance(m, QkvConfig):
                run.first()
            else:
                run.layer()


def backend_options(cfg: LayerConfig | QkvConfig | TokenConfig) -> dict:
    """XRTBackend options: the ELF flow (13 arguments or more), the GEMVs' stack (and the attention's) and
    launch tiling."""
    first = cfg.launch_gemvs[0]
    stacks = [g.stack_bytes for g in cfg.launch_gemvs]
    if cfg.context:
        stacks.append(attention_backend_options()["stack_size"])
    return dict(
        target_device="npu2",
        output_format="elf",
        stack_size=max(stacks),
        omit_while_true_loop=False,
        runtime_loop_tiling_sizes=list(first.runtime_loop_tiling),
        instance_name={
            LayerConfig: "o_gemv_ffn_int4",
            QkvConfig: "rms_qkv_rope",
            TokenConfig: "decode_token",
        }[type(cfg)],
    )


# Llama-3.2-1B: hidden 2048, intermediate 8192; the next layer's q, k, v fused (N 3072) and their RoPE
LLAMA_SHAPES = dict(hidden=2048, intermediate=8192, qkv=3072, rope=(64, 32, 8))


def first_legal(k: int, n: int, fmt: str) -> GemvConfig:
    """A legal decode GEMV of K x N in format fmt: the first record tile and L2 refill, in this order, that
    every rule admits (not the modelled best: host/run.py chooses that)."""
    first = None
    for tile_n in (64, 32, 96, 128, 16):
        for tile_k_l2 in (k, 2048, 1024, 512, 256):
            try:
                return GemvConfig(
                    m=1,
                    k=k,
                    n=n,
                    gs=FORMAT_GS[fmt],
                    tile_n=tile_n,
                    tile_k_l1=128,
                    tile_k_l2=min(tile_k_l2, k),
                    format=fmt,
                )
            except ConfigError as e:
                first = first or e
    raise first


def main(argv=None) -> int:
    """-p: print Llama-3.2-1B's layer module (--next-qkv: ending with the next layer's q, k, v and their
    RoPE), each GEMV at the first legal configuration (first_legal), and stop. Runs go through host/run.py
    --layer-module (make run_llama_decode_layer), which reads a checkpoint's layer and picks each GEMV's
    modelled best. Imports nothing of the tools (int4awq)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "-p",
        "--print-module-only",
        action="store_true",
        help="print the AIR module and stop",
    )
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default="awq",
        help="the GEMVs' weight format",
    )
    parser.add_argument(
        "--next-qkv",
        action="store_true",
        help="end with the next layer's q, k, v GEMV and their RoPE",
    )
    args = parser.parse_args(argv)
    if not args.print_module_only:
        print(
            "error: runs read a checkpoint's layer: host/run.py --weights F --decoder-layer L --layer-module "
            "(make run_llama_decode_layer AWQ=F); -p prints the module",
            file=sys.stderr,
        )
        return 2
    e, h, qkv = (LLAMA_SHAPES[k] for k in ("hidden", "intermediate", "qkv"))
    try:
        cfg = LayerConfig.named(
            first_legal(e, e, args.format),
            first_legal(e, 2 * h, args.format),
            first_legal(h, e, args.format),
            (first_legal(e, qkv, args.format),) if args.next_qkv else (),
            LLAMA_SHAPES["rope"] if args.next_qkv else (),
        )
        print(build_module(cfg))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
