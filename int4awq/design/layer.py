# SPDX-License-Identifier: MIT
"""A decoder layer's o_proj + FFN as one module (o_gemv_ffn_int4.py): its default configuration, its DDR
traffic and its modelled time.

time = FIXED_S (one dispatch) + the sum over its launches (seven; more with the next layer's q, k, v) of
       max(DDR, compute)
       + LAUNCH_BOUNDARY_S per launch after the first

MODELLED, never measured. The GEMV launches are matvec_int4_packed's, priced by gemv.modelled without its
fixed cost; the element-wise launches move their operands once at model.DDR_BYTES_PER_S and are
DDR-bound by the estimate below. A launch boundary inside one dispatch is taken as free: mlir-air #1653
measured one fused launch at 1,375 us against the same work as three launches of one ELF at 1,340 us.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from int4_packed_record import (
    COLUMNS,
    PES,
    ConfigError,
    GemvConfig,
    LayerConfig,
    QkvConfig,
    RecordSlab,
    TokenConfig,
    attention_ddr_bytes,
    buffer_shape,
)

from . import gemv, model
from .llama import PROJECTIONS, VOCAB, shape_of
from ..kernel.record import FORMAT_GS, GEMV_TILE_NS

LAUNCH_BOUNDARY_S = (
    0.0  # mlir-air #1653: three launches of one ELF no slower than one fused launch
)
# Element-wise compute, estimated (not profiled): per 16 lanes about 8 vector operations (SwiGLU's loads,
# tanh, add, three multiplies, store) at one per cycle of the core clock, on each PE's share
ELTWISE_OPS_PER_VECTOR = 8
# Llama-3.2-1B's attention: head_dim, query heads, key/value heads (its config.json)
LLAMA_ROPE = (64, 32, 8)


def eltwise_launches(cfg) -> list[tuple[str, int, int]]:
    """(name, DDR bytes, elements of the busiest PE) of each element-wise launch of the module (a
    LayerConfig's, a QkvConfig's: its RMSNorm and RoPE, or a TokenConfig's: its modules' in turn).
    """
    if isinstance(cfg, TokenConfig):
        return [t for m in cfg.modules for t in eltwise_launches(m)]
    e = cfg.hidden
    norm = 2 * 3 * e, 2 * e  # one PE, two passes over the row
    if isinstance(cfg, QkvConfig):
        out = [("rms_norm", *norm)]
    else:
        h = cfg.intermediate
        out = [
            ("residual", 2 * 3 * e, e // COLUMNS),
            ("rms_norm", *norm),
            ("swiglu", 2 * 3 * h, h // COLUMNS),
            ("residual2", 2 * 3 * e, e // COLUMNS),
        ]
        out += [("next_rms_norm", *norm)] if cfg.next_qkv else []
        out += [("final_rms_norm", *norm)] if cfg.head else []
    # RoPE: x and out a value each, the [cos | sin] row once (aircc reads it once for the herd and
    # broadcasts it: the compiled runtime sequence moves it once per launch)
    out += [
        (f"rope_{part}", 2 * (2 * n + cfg.rope[0]), n // pes)
        for part, _, _, n, pes in (cfg.rope_launches() if cfg.rope else [])
    ]
    if cfg.context:
        # the token's value copied, then the attention launch (its compute: _sum takes the longer)
        d, heads, kv = cfg.rope
        out += [
            ("copy_v", 2 * 2 * kv * d, d),
            ("attention", attention_ddr_bytes(heads, kv, d, cfg.context), 0),
        ]
    return out


def attention_compute_s(rope: tuple[int, ...], context: int) -> float:
    """The attention launch's compute on a PE with every one of `context` positions valid: a call of
    attn_step_bf16 a chunk at the kernel cost model's cycles (MODELLED; kernel_cost.attention_step_cycles).
    """
    from int4_packed_record import ATTN_CHUNK

    from .kernel_cost import attention_step_cycles

    d, heads, kv = rope
    cycles = attention_step_cycles(heads // kv, d, ATTN_CHUNK)
    return context // ATTN_CHUNK * cycles / gemv.CLOCK_HZ


def default_layer(
    hidden: int,
    intermediate: int,
    formats=("awq",) * 3,
    gss=None,
    next_qkv=(),
    rope=(),
    head=None,
    context=0,
):
    """The LayerConfig of the shapes: each GEMV at its own default configuration (gemv.default_config) for
    its format and group size (formats, gss: o_proj, gate_up, down; gss None: each format's); next_qkv:
    (N, format, group size) of each of the next layer's q, k, v GEMVs the module should end with; rope:
    (head_dim, query heads, key/value heads) to rotate that q and k (LayerConfig.rope); head: (N, format,
    group size) of the LM head the last layer's module ends with, N padded to whole launch iterations;
    context: > 0, the module ends with the next layer's attention launch over a cache of that many positions.
    """
    gss = gss or tuple(FORMAT_GS[f] for f in formats)
    # the GEMV spreads N over its 32 PEs, 16 columns each at least; padding N would break the chain
    least = PES * min(GEMV_TILE_NS)
    bad = [n for n, _, _ in next_qkv if n % least]
    if hidden % least or 2 * intermediate % least or bad:
        raise ConfigError(
            f"hidden size {hidden}, intermediate size {intermediate}"
            + (f", next q, k, v N {bad[0]}" if bad else "")
            + f": the layer module's GEMVs spread N over {PES} PEs of at least {min(GEMV_TILE_NS)} "
            f"columns, so the hidden size, twice the intermediate size and each q, k, v GEMV's N must be "
            f"multiples of {least}"
        )
    shapes = ((hidden, hidden), (hidden, 2 * intermediate), (intermediate, hidden))
    own = [
        gemv.default_config(1, k, n, gs, fmt)
        for (k, n), fmt, gs in zip(shapes, formats, gss)
    ]
    nxt = tuple(gemv.default_config(1, hidden, n, gs, fmt) for n, fmt, gs in next_qkv)
    tail = gemv.default_config(1, hidden, head[0], head[2], head[1]) if head else None
    return LayerConfig.named(*own, nxt, rope, tail, context)


def default_qkv(hidden: int, qkv, rope, context: int = 0) -> QkvConfig:
    """The QkvConfig that starts a token: qkv = (N, format, group size) of each q, k, v GEMV at its default
    configuration, rope = (head_dim, query heads, key/value heads); context > 0: ending with layer 0's
    attention launch over a cache of that many positions."""
    return QkvConfig.named(
        tuple(gemv.default_config(1, hidden, n, gs, fmt) for n, fmt, gs in qkv),
        rope,
        context,
    )


def default_token(
    hidden: int,
    intermediate: int,
    layers: int,
    formats=("awq",) * 3,
    gss=None,
    qkv=(),
    rope=LLAMA_ROPE,
    context=1024,
    head=None,
) -> TokenConfig:
    """The TokenConfig of `layers` like layers (default_layer's formats and gss, every q, k, v as qkv's
    (N, format, group size) runs), the attention over a cache of `context` positions, the last layer
    ending with the LM head `head` (N, format, group size)."""
    first = default_qkv(hidden, qkv, rope, context)
    chained = default_layer(
        hidden, intermediate, formats, gss, qkv, rope, context=context
    )
    last = default_layer(hidden, intermediate, formats, gss, head=head)
    return TokenConfig.named(first, (chained,) * (layers - 1) + (last,))


def llama_layer(formats=("awq",) * 3, gss=None, next_qkv_format=None, head_format=None):
    """Llama-3.2-1B's layer (hidden 2048, intermediate 8192); next_qkv_format: also the next layer's q, k
    and v as one GEMV (N 3072) in that format, at its group size, and their RoPE (32 query heads, 8
    key/value heads of 64); head_format: the last layer's, ending with the final norm and the LM head (the
    tied embedding's vocabulary) in that format."""
    k, n = shape_of("qkv_proj")
    nxt = ((n, next_qkv_format, FORMAT_GS[next_qkv_format]),) if next_qkv_format else ()
    return default_layer(
        PROJECTIONS["o_proj"][0],
        PROJECTIONS["down_proj"][0],
        formats,
        gss,
        nxt,
        LLAMA_ROPE if next_qkv_format else (),
        (VOCAB, head_format, FORMAT_GS[head_format]) if head_format else None,
    )


def host_libraries(cfg) -> str:
    """AIR_EMU_LIB_PATH for the module on the emulator or the simulator: the folders of the host builds of
    every kernel object it links (each GEMV object, the element-wise one), built where out of date.
    """
    from ..kernel.kernel_model import build_eltwise_kernel
    from .design import build_host_kernel

    dirs = {build_host_kernel(g) for g in cfg.launch_gemvs}
    return os.pathsep.join(sorted(dirs | {str(build_eltwise_kernel().parent)}))


def _records(cfg: GemvConfig, weights):
    """A GEMV's W buffer: weights packed into its records (the kernel's record format)."""
    import numpy as np
    from ml_dtypes import bfloat16

    from ..kernel.record import padded_operands

    return padded_operands(cfg, np.zeros((1, cfg.k), bfloat16), weights)[1]


def module_buffers(cfg, weights: dict, rows: dict) -> list:
    """The module's host buffers in argument order (LayerConfig.buffers): each GEMV's records packed from
    weights[name] (the kernel's record format), the rows given by name, zeros for what the module writes.
    """
    import numpy as np
    from ml_dtypes import bfloat16

    return [
        (
            _records(kind, weights[name])
            if name in weights
            else rows.get(name, np.zeros(buffer_shape(kind), bfloat16))
        )
        for name, kind in cfg.buffers()
    ]


def token_dispatches(first: QkvConfig, layers: tuple[LayerConfig, ...], per_dispatch):
    """A token's dispatches: TokenConfig.split's of per_dispatch layers each, or with per_dispatch 0 or
    None one a module (the first module, then each layer's)."""
    if per_dispatch:
        return list(TokenConfig.split(first, tuple(layers), per_dispatch))
    return [first, *layers]


def token_buffers(cfg: TokenConfig, weights: list[dict], rows: list[dict]) -> list:
    """The token module's host buffers in argument order (TokenConfig.buffers), from what each of its
    modules would be given (weights[j], rows[j]: module_buffers' by module j's names), each placed at its
    rows (TokenConfig.refs); zeros elsewhere."""
    import numpy as np
    from ml_dtypes import bfloat16

    out = [
        np.zeros(
            buffer_shape(kind), np.uint8 if isinstance(kind, RecordSlab) else bfloat16
        )
        for _, kind in cfg.buffers()
    ]
    place(cfg, out, weights, rows)
    return out


def put(cfg: TokenConfig, buffers: list, j: int, name: str, value) -> None:
    """Writes module j's buffer `name` (its value as the module alone would take it) into the token's
    buffers at its rows (TokenConfig.refs)."""
    import numpy as np

    slab, row = cfg.refs(j)[name]
    dst = buffers[cfg.index(slab)]
    value = np.asarray(value).reshape(-1, *dst.shape[1:])
    dst[row : row + value.shape[0]] = value


def place(
    cfg: TokenConfig, buffers: list, weights: list[dict], rows: list[dict]
) -> None:
    """Writes module j's weights[j] (packed into records) and rows[j], by its names, into the token's
    buffers at their rows (put)."""
    import numpy as np
    from ml_dtypes import bfloat16

    for j, m in enumerate(cfg.modules):
        for name, kind in m.buffers():
            if name in weights[j]:
                put(cfg, buffers, j, name, _records(kind, weights[j][name]))
            elif name in rows[j]:
                put(cfg, buffers, j, name, np.asarray(rows[j][name], bfloat16))


def token_outputs(cfg: TokenConfig, buffers: list) -> list[dict]:
    """Per module, its buffers by name (module j's rows of the token's buffers after a dispatch, given
    flat or shaped)."""
    import numpy as np

    by_name = {
        name: np.asarray(a).reshape(buffer_shape(kind))
        for (name, kind), a in zip(cfg.buffers(), buffers)
    }
    out = []
    for j, m in enumerate(cfg.modules):
        mine = {}
        for name, kind in m.buffers():
            slab, row = cfg.refs(j)[name]
            mine[name] = by_name[slab][row : row + buffer_shape(kind)[0]]
        out.append(mine)
    return out


def ddr_bytes(cfg) -> int:
    """Bytes one dispatch of the module moves: the GEMVs' and the element-wise launches'."""
    return sum(g.ddr_bytes() for g in cfg.launch_gemvs) + sum(
        b for _, b, _ in eltwise_launches(cfg)
    )


@dataclass(frozen=True)
class LayerEstimate:
    launches: tuple[
        tuple[str, float], ...
    ]  # (name, seconds) in module order, no fixed cost
    ddr_bytes: int
    seconds: float  # one dispatch: FIXED_S + the launches + their boundaries

    @property
    def gbps(self) -> float:
        return self.ddr_bytes / self.seconds / 1e9


def modelled(cfg) -> LayerEstimate:
    """The module's modelled time (MODELLED): the module docstring's sum; a QkvConfig's likewise (its
    RMSNorm, its q, k, v GEMVs, their RoPE); a TokenConfig's, its modules' launches in one dispatch.
    """
    if isinstance(cfg, TokenConfig):
        parts = [modelled(m) for m in cfg.modules]
        launches = tuple(
            (f"m{j}_{name}", s) for j, p in enumerate(parts) for name, s in p.launches
        )
        return LayerEstimate(
            launches, sum(p.ddr_bytes for p in parts), _dispatch_seconds(launches)
        )
    if isinstance(cfg, QkvConfig):
        return _sum(
            cfg,
            ["rms_norm"] + [f"qkv{i}" for i in range(len(cfg.qkv))],
            [f"qkv{i}" for i in range(len(cfg.qkv))],
        )
    names = (
        ["o_proj", "gate_up", "down"]
        + [f"next_qkv{i}" for i in range(len(cfg.next_qkv))]
        + (["head"] if cfg.head else [])
    )
    order = ["o_proj", "residual", "rms_norm", "gate_up", "swiglu", "down", "residual2"]
    if cfg.next_qkv:
        order += ["next_rms_norm"] + names[3:]
    order += ["final_rms_norm", "head"] if cfg.head else []
    return _sum(cfg, order, names)


def _sum(cfg, order: list[str], names: list[str]) -> LayerEstimate:
    """The launches in order (the GEMVs by names, in launch_gemvs' order), then the RoPE's."""
    gemvs = {
        name: gemv.modelled(g).seconds - model.FIXED_S
        for name, g in zip(names, cfg.launch_gemvs)
    }
    elt = {
        name: max(
            b / model.DDR_BYTES_PER_S,
            per_pe / 16 * ELTWISE_OPS_PER_VECTOR / gemv.CLOCK_HZ,
        )
        for name, b, per_pe in eltwise_launches(cfg)
    }
    order = order + [f"rope_{r[0]}" for r in (cfg.rope_launches() if cfg.rope else [])]
    if cfg.context:
        order += ["copy_v", "attention"]
        elt["attention"] = max(
            elt["attention"], attention_compute_s(cfg.rope, cfg.context)
        )
    launches = tuple((n, (gemvs | elt)[n]) for n in order)
    return LayerEstimate(launches, ddr_bytes(cfg), _dispatch_seconds(launches))


def _dispatch_seconds(launches) -> float:
    """One dispatch of these (name, seconds) launches: its fixed cost, the launches, their boundaries."""
    return (
        model.FIXED_S
        + sum(s for _, s in launches)
        + (len(launches) - 1) * LAUNCH_BOUNDARY_S
    )
