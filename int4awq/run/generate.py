# SPDX-License-Identifier: MIT
"""Text from a Llama checkpoint (host/generate.py, make generate): the prompt's prefill, then a token at a
time through the decode path as the NPU runs it, each token the greedy (or sampled) pick of the LM head's
logits.

The decode path is the one `make bench` prices as a whole token, one dispatch a module: the first
module (layer 0's attention norm, q, k, v GEMVs, RoPE and attention over the KV cache:
o_gemv_ffn_int4.build_qkv_module), then per layer its module (o_proj, residual, RMSNorm, gate and up,
SwiGLU, down, residual; the next layer's norm, q, k, v GEMVs, RoPE and attention, or, after the last
layer, the final norm and the LM head). Its GEMVs run at their default configurations (layer.default_layer,
layer.default_qkv): the K-chunk of each decides where the kernel folds, so it decides the bits.

Backends:
* model: the kernels' numpy models (kernel_model.PreparedWeights, eltwise_model), bit for bit what the
  emulator computes for each launch; a machine without an NPU generates text at numpy's speed. Its prefill
  runs the chain on all of the prompt's rows at once, each projection the GEMM's model at the GEMM's
  default configuration for M = the prompt's length (sweep.default_config); the attention row by row in
  the decode attention's arithmetic (no prefill attention design exists: it runs on the host).
* emu, sim, npu (Dispatches): each dispatch of a token on the emulator, the simulator of the compiled
  design, or NPU2; they prefill through the GEMM design on the same backend (Dispatches.prefill), the
  rest of the prompt's chain on the host as the model backend's.

--check runs a float64 reference of the same weights (each its own dequantisation, exact softmax, float64
RoPE) on the same tokens beside it: at every generated step the top-1 token must be the reference's and
the logits' correlation at least 0.999.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from dataclasses import dataclass

import numpy as np
from ml_dtypes import bfloat16

from int4_packed_record import (
    GemvConfig,
    RecordSlab,
    TokenConfig,
    buffer_shape,
)

from ..errors import ConfigError, RunFailure
from ..formats import rope, weights_file
from ..formats.fuse import fusable_runs
from ..formats.quant import dequantize
from ..kernel import eltwise_model as elt
from ..kernel.kernel_model import PreparedWeights
from . import npu

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# emu, sim and npu run each dispatch of a token; auto: npu where an NPU2 and pyxrt are present, else model
BACKENDS = ("auto", "model", "emu", "sim", "npu")
# --check's bar at every generated step (issue 53)
MIN_CORRELATION = 0.999
# the KV cache's positions without --max-context (mlir-air's fused_decode builds its template at 2,048)
DEFAULT_CONTEXT = 2048
# Layers a dispatch (TokenConfig.split): aircc + aiecc's time and memory grow faster than a module's
# launches (here, Llama-3.2-1B's shapes: 2 layers, 28 launches, 66 s and 0.8 GB; 4 layers, 54 launches,
# 219 s and 2.0 GB; 8 layers, 106 launches, 7.0 GB; all 16, 210 launches, past 13 GB in air-opt and
# growing: docs/decode.md#one-dispatch-a-token)
LAYERS_PER_DISPATCH = 4
# A dispatch's buffers the host writes every token (Dispatches.step's rows: the hidden row and the
# attention output a dispatch takes, the RoPE row, the attention's q buffers; a token module's or a
# module's names) and those it reads back (the hidden row and the attention output the next dispatch
# takes, the q buffers the KV caches are appended from, the logits)
GIVEN = ("x", "attn", "hidden", "attn_next", "rope_table", "q_attn")
READ_BACK = ("hidden", "out", "attn_next", "q_attn", "logits")
Q, K, V, O, GATE, UP, DOWN = range(7)  # weights_file.decoder_layer_names' order


def _builder():
    """o_gemv_ffn_int4 (its attention rules), on the emulator's air package where mlir-air is absent."""
    import importlib.util

    if importlib.util.find_spec("air") is None:
        sys.path.insert(0, os.path.join(REPO, "emulator"))
    import o_gemv_ffn_int4

    return o_gemv_ffn_int4


@dataclass
class Layer:
    # q, k, v, o, gate, up, down: the file's weights in their record formats, and the same prepared for
    # the kernel model
    weights: list
    prepared: list
    # the RMSNorm weights as the file holds them, float32 (the launches read them as bf16)
    attn_norm: np.ndarray
    ffn_norm: np.ndarray

    @property
    def qkv_runs(self) -> list[list[int]]:
        """q, k, v's indices in runs that fuse into one GEMV (one format and group)."""
        return fusable_runs(self.weights[:3])

    @property
    def runs(self) -> list[list[int]]:
        """The layer's projections as the NPU path fuses them: q, k, v's runs, o, gate with up, down."""
        return self.qkv_runs + [[O], [GATE, UP], [DOWN]]


def _base(name: str) -> str:
    """A token module's buffer name without the width TokenConfig appends to tell slabs apart."""
    stem, _, width = name.rpartition("_")
    return stem if stem and width.isdigit() else name


def buffer_roles(cfg) -> dict[str, list[int]]:
    """A dispatch's buffers (by index) as the npu backend keeps them on the device (npu.ResidentCall):
    partial, the KV caches (the rows appended since the last call); once, all but those and the rows the
    host gives every token (GIVEN): the weights, the norms and the launches' intermediates; read, what
    Dispatches.step reads back (READ_BACK)."""
    names = [_base(name) for name, _ in cfg.buffers()]
    return dict(
        once=[i for i, n in enumerate(names) if n not in (*GIVEN, "kv_cache")],
        partial=[i for i, n in enumerate(names) if n == "kv_cache"],
        read=[i for i, n in enumerate(names) if n in READ_BACK],
    )


def host_transfers(cfgs, layers: int, kv_width: int) -> tuple[int, int, int]:
    """(bytes written on the first call, bytes written a token after it, bytes read back a token) between
    the host and NPU2 for a token's dispatches kept on the device (buffer_roles): every buffer once, then
    the rows the host gives and two new rows of each layer's KV cache (kv_width bf16 each).
    """
    once = token = read = 0
    for cfg in cfgs:
        roles = buffer_roles(cfg)
        for i, (_, kind) in enumerate(cfg.buffers()):
            records = isinstance(kind, (GemvConfig, RecordSlab))  # bytes; the rest bf16
            size = int(np.prod(buffer_shape(kind))) * (1 if records else 2)
            once += size
            if i not in roles["once"] + roles["partial"]:
                token += size
            if i in roles["read"]:
                read += size
    return once, token + layers * 2 * kv_width * 2, read


def _key(w) -> tuple:
    return (w.format, w.gs)


def prefill_rows(m: int) -> int:
    """The M a prompt of m tokens is prefilled at: m rounded up to a power of two, at least 32 (the
    smallest M the configuration table holds), so that one compiled prefill serves every prompt up to it
    (mlir-air's llama32_1b_int4 pads its prompts to the one length its prefill ELFs are built for).
    """
    return max(32, 1 << (m - 1).bit_length())


@functools.lru_cache(maxsize=None)
def _gemm_config(m: int, k: int, n: int, gs: int, fmt: str):
    """The GEMM's default configuration for an M-row projection (sweep.default_config)."""
    from ..design import sweep

    return sweep.default_config(m, k, n, gs, fmt)[0]


class Llama:
    """A Llama checkpoint (GGUF or a Hugging Face directory) loaded for the decode path's shapes: every
    rule of the NPU path checked once, here, at load (the layer modules' GEMVs, the attention launch at
    the context)."""

    def __init__(self, path: str, head_format: str | None, max_context: int | None):
        self.path = path
        info = weights_file.model_info(path)
        eps = float(elt.RMS_EPSILON)
        if info.rms_eps is not None and np.float32(info.rms_eps) != elt.RMS_EPSILON:
            raise ConfigError(
                f"{path}: RMSNorm epsilon {info.rms_eps:g}: the element-wise kernel builds in {eps:g} "
                "(kernels/eltwise_bf16.cc)"
            )
        self.heads, self.kv_heads = weights_file.attention_heads(path)
        self.layers = []
        for i in range(info.layers):
            names = weights_file.decoder_layer_names(path, i)
            ws = [weights_file.load(path, n)[0] for n in names]
            self.layers.append(
                Layer(ws, [None] * 7, *weights_file.layer_norms(path, i))
            )
        first = self.layers[0].weights
        self.hidden, self.inter = first[Q].k, first[DOWN].k
        self.d = first[Q].n // self.heads
        if first[Q].n != self.heads * self.d or first[K].n != self.kv_heads * self.d:
            raise ConfigError(
                f"{path}: q_proj N = {first[Q].n}, k_proj N = {first[K].n}: not whole heads of "
                f"{self.heads} query and {self.kv_heads} key/value heads"
            )
        self.head, self.head_summary, _ = weights_file.load_head(path, head_format)
        self.final_norm = weights_file.final_norm(path)
        self.embed, self.vocab, embed_hidden = weights_file.embedding(path)
        if embed_hidden != self.hidden or self.head.k != self.hidden:
            raise ConfigError(
                f"{path}: token embedding of {embed_hidden} and LM head K = {self.head.k}: the layers' "
                f"hidden size is {self.hidden}"
            )
        self.frequencies = weights_file.rope_frequencies(path, self.d)
        self.context = self._context(max_context, info.context)
        self._configure()
        for layer in self.layers:
            layer.prepared = [PreparedWeights(w) for w in layer.weights]
        self.head_prepared = PreparedWeights(self.head)
        # the KV cache: per layer keys (after RoPE) and values, [context, kv_heads * d] bf16
        self.cache_k = [
            np.zeros((self.context, self.kv_heads * self.d), bfloat16)
            for _ in self.layers
        ]
        self.cache_v = [np.zeros_like(c) for c in self.cache_k]

    def _context(self, asked: int | None, trained: int | None) -> int:
        """The KV cache's length: --max-context, else DEFAULT_CONTEXT (never past what the file says the
        model was trained for). Every token's attention reads the whole cache (its launch's shape is fixed),
        so a longer one costs every token."""
        b = _builder()
        if asked is None:
            whole = 2 * b.ATTN_CHUNK
            asked = min(DEFAULT_CONTEXT, trained or DEFAULT_CONTEXT) // whole * whole
        problem = b.attention_problem(self.heads, self.kv_heads, self.d, asked)
        if problem:
            raise ConfigError(f"--max-context {asked}: {problem}")
        if trained is not None and asked > trained:
            raise ConfigError(
                f"--max-context {asked}: the model's context is {trained} positions"
            )
        return asked

    def _configure(self) -> None:
        """Each decode GEMV's K-chunk, from the configurations the NPU path would run (layer.default_qkv for
        the first module, layer.default_layer per layer module): what they refuse is refused here.
        """
        from ..design import layer

        def run_specs(ly: Layer):
            return [
                (sum(ly.weights[i].n for i in run), *_key(ly.weights[run[0]]))
                for run in ly.qkv_runs
            ]

        def run_tiles(ly: Layer, cfgs) -> dict[int, int]:
            return {i: c.tile_k_l1 for run, c in zip(ly.qkv_runs, cfgs) for i in run}

        rope_shape = (self.d, self.heads, self.kv_heads)
        # the token's first module: layer 0's norm, q, k, v and RoPE (o_gemv_ffn_int4.build_qkv_module)
        self.qkv_cfg = layer.default_qkv(
            self.hidden, run_specs(self.layers[0]), rope_shape, self.context
        )
        self.module_cfgs = []
        self.decode_tiles: list[dict[int, int]] = [
            run_tiles(self.layers[0], self.qkv_cfg.qkv)
        ] + [{} for _ in self.layers[1:]]
        for i, ly in enumerate(self.layers):
            w = ly.weights
            last = i + 1 == len(self.layers)
            if _key(w[GATE]) != _key(w[UP]):
                raise ConfigError(
                    f"layer {i}: gate_proj ({w[GATE].format} g{w[GATE].gs}) and up_proj ({w[UP].format} "
                    f"g{w[UP].gs}) do not fuse into the module's one GEMV"
                )
            cfg = layer.default_layer(
                self.hidden,
                self.inter,
                (w[O].format, w[GATE].format, w[DOWN].format),
                (w[O].gs, w[GATE].gs, w[DOWN].gs),
                () if last else tuple(run_specs(self.layers[i + 1])),
                () if last else rope_shape,
                (self.head.n, *_key(self.head)) if last else None,
                0 if last else self.context,
            )
            self.module_cfgs.append(cfg)
            o, gate_up, down, *rest = cfg.launch_gemvs
            self.decode_tiles[i] |= {
                O: o.tile_k_l1,
                GATE: gate_up.tile_k_l1,
                UP: gate_up.tile_k_l1,
                DOWN: down.tile_k_l1,
            }
            if last:
                self.head_tile = rest[0].tile_k_l1
            else:
                self.decode_tiles[i + 1] |= run_tiles(self.layers[i + 1], rest)

    def prefill_gemms(self, m: int) -> list[dict[int, tuple]]:
        """Per layer, each projection's (GEMM configuration, N of its launch) for a prompt of m rows (at
        M = prefill_rows(m)): q, k, v in their fused runs and gate with up, as the decode path fuses
        them."""
        out = []
        for ly in self.layers:
            w, gemms = ly.weights, {}
            for run in ly.runs:
                k, n = w[run[0]].k, sum(w[i].n for i in run)
                for i in run:
                    gemms[i] = (
                        _gemm_config(prefill_rows(m), k, n, w[i].gs, w[i].format),
                        n,
                    )
            out.append(gemms)
        return out

    def modelled_prefill_s(self, m: int) -> float:
        """The prefill's GEMMs at their default configurations, one dispatch each (MODELLED)."""
        from ..design import sweep

        return sum(
            sweep.modelled(cfg, m, n).seconds
            for gemms in self.prefill_gemms(m)
            for cfg, n in {id(c): (c, n) for c, n in gemms.values()}.values()
        )

    def modelled_token_s(
        self, layers_per_dispatch: int | None = LAYERS_PER_DISPATCH
    ) -> tuple[float, int]:
        """(seconds, dispatches) of one decode token as the NPU path runs it (MODELLED, make bench's
        whole-token sum): the first module (layer 0's norm, q, k, v, RoPE and attention), then per layer
        its module (ending with the next layer's q, k, v, RoPE and attention, the last with the head), in
        dispatches of layers_per_dispatch layers (TokenConfig.split) or one a module (None); the attention at
        the longer of its DDR time and its modelled compute (layer.modelled).
        """
        from ..design import layer

        cfgs = layer.token_dispatches(
            self.qkv_cfg, self.module_cfgs, layers_per_dispatch
        )
        return sum(layer.modelled(c).seconds for c in cfgs), len(cfgs)

    def prefill(self, tokens: list[int], project=None) -> np.ndarray:
        """The logits after the prompt, from position 0: each projection the GEMM's at its default
        configuration for the prompt (prefill_gemms, at M = prefill_rows of its length; its kernel model's,
        or project's: see forward)."""
        tiles = [
            {j: cfg.tile_k_l1 for j, (cfg, _) in gemms.items()}
            for gemms in self.prefill_gemms(len(tokens))
        ]
        return self.forward(tokens, 0, tiles, project=project)

    def decode_step(self, token: int, pos: int) -> np.ndarray:
        """One token through the decode path's kernel models (what Dispatches.step runs launch by launch)."""
        return self.forward([token], pos, self.decode_tiles)

    # ------------------------------------------------------------------------------ the kernels' models
    def _attention(self, q: np.ndarray, i: int, n: int) -> np.ndarray:
        """Decode attention of one row q [heads * d] over layer i's first n cache rows, per key/value
        head as the attention launch's PE x computes it."""
        g, d = self.heads // self.kv_heads, self.d
        out = [
            elt.attention(
                q.reshape(self.heads, d)[h * g : (h + 1) * g],
                self.cache_k[i][:n, h * d : (h + 1) * d],
                self.cache_v[i][:n, h * d : (h + 1) * d],
                n,
            )
            for h in range(self.kv_heads)
        ]
        return np.concatenate(out).reshape(-1)

    def forward(
        self,
        tokens: list[int],
        start: int,
        tiles,
        trace: dict | None = None,
        project=None,
    ) -> np.ndarray:
        """The logits (f32 [vocab], bf16 values) after tokens at positions start, start + 1, ...: their
        keys and values join the cache; tiles: each layer's K-chunk per projection; trace: filled with
        each layer's rows by (layer, name) (x, attn, q and k after RoPE, v, out; and "logits");
        project(layer, weight, rows): each projection's output rows, instead of its kernel model's.
        """
        m, end = len(tokens), start + len(tokens)
        if end > self.context:
            raise ConfigError(
                f"position {end - 1}: past the KV cache's context of {self.context} (--max-context)"
            )
        x = self.embed(tokens).astype(bfloat16)  # [m, hidden]
        tables = [rope.table(self.frequencies, p)[0] for p in range(start, end)]
        for i, ly in enumerate(self.layers):
            t = tiles[i]
            if project is None:
                p = [
                    lambda a, w=w, j=j, t=t: w(a, t[j])
                    for j, w in enumerate(ly.prepared)
                ]
            else:
                p = [functools.partial(project, i, j) for j in range(len(ly.weights))]
            n = np.stack(
                [elt.rms_norm(row, ly.attn_norm.astype(bfloat16)) for row in x]
            )
            q, k, v = (p[j](n) for j in (Q, K, V))
            q = np.stack([elt.rope(r, tab, self.d) for r, tab in zip(q, tables)])
            k = np.stack([elt.rope(r, tab, self.d) for r, tab in zip(k, tables)])
            self.cache_k[i][start:end], self.cache_v[i][start:end] = k, v
            attn = np.stack([self._attention(q[r], i, start + r + 1) for r in range(m)])
            rows = dict(x=x, q=q, k=k, v=v, attn=attn)
            h = elt.add(x, p[O](attn))
            n = np.stack([elt.rms_norm(row, ly.ffn_norm.astype(bfloat16)) for row in h])
            act = elt.silu_mul(p[GATE](n), p[UP](n))
            x = elt.add(h, p[DOWN](act))
            if trace is not None:
                trace.update({(i, name): r for name, r in (rows | dict(out=x)).items()})
        last = elt.rms_norm(x[-1], self.final_norm.astype(bfloat16))[None]
        logits = self.head_prepared(last, self.head_tile)
        if trace is not None:
            trace["logits"] = logits
        return logits[0].astype(np.float32)


class Dispatches:
    """A token's dispatches as the NPU path runs them, on the emulator ("emu"), the simulator of the design
    aircc + aiecc compile ("sim": each dispatch run twice on one array, equal bit for bit, and timed), or
    NPU2 ("npu": compiled once and kept loaded, each dispatch's buffers kept on the device from token to
    token, npu.ResidentCall; written against mlir-air's XRTBackend and pyxrt, not run here).
    Dispatches of layers_per_dispatch layers each (TokenConfig.split: the first module's launches, then
    its layers' modules', in one module), or one a module (None: the first module, then per layer its
    module, each ending with the next layer's attention launch). The weights are packed
    into the buffers once; each token fills in the rows. The attention launch takes the token's own k
    (after RoPE) and v from its q buffer; the host appends them to the KV cache after the dispatch, the
    model's and the buffers' (whole again only when a step is not at the next position).
    """

    def __init__(
        self,
        model: "Llama",
        backend: str,
        compile_first: bool = True,
        layers_per_dispatch: int | None = LAYERS_PER_DISPATCH,
    ):
        from ..design import layer
        from ..formats.fuse import fuse_columns

        self.m, self.backend = model, backend
        self.builder = _builder()
        # sim: the last token's dispatches' MODELLED seconds as compiled (attention included)
        self.timed: list[float] | None = [] if backend == "sim" else None
        first = model.layers[0]
        weights = [
            {
                f"w_qkv{r}": fuse_columns([first.weights[j] for j in run])
                for r, run in enumerate(first.qkv_runs)
            }
        ]
        norms = [{"attn_norm": first.attn_norm.astype(bfloat16)[None]}]
        for i, ly in enumerate(model.layers):
            w = {
                "w_o": ly.weights[O],
                "w_gate_up": fuse_columns([ly.weights[GATE], ly.weights[UP]]),
                "w_down": ly.weights[DOWN],
            }
            n = {"ffn_norm": ly.ffn_norm.astype(bfloat16)[None]}
            if i + 1 < len(model.layers):
                nxt = model.layers[i + 1]
                for r, run in enumerate(nxt.qkv_runs):
                    w[f"w_qkv{r}"] = fuse_columns([nxt.weights[j] for j in run])
                n["next_norm"] = nxt.attn_norm.astype(bfloat16)[None]
            else:
                w["w_head"] = model.head
                n["final_norm"] = model.final_norm.astype(bfloat16)[None]
            weights.append(w)
            norms.append(n)
        self.cfgs = layer.token_dispatches(
            model.qkv_cfg, model.module_cfgs, layers_per_dispatch
        )
        # each dispatch's modules, by their index in [the first module, layer 0's, layer 1's, ...]
        self.spans, at = [], 0
        for cfg in self.cfgs:
            count = len(cfg.modules) if isinstance(cfg, TokenConfig) else 1
            self.spans.append(range(at, at + count))
            at += count
        self.buffers = [
            (
                layer.token_buffers(
                    cfg, [weights[j] for j in span], [norms[j] for j in span]
                )
                if isinstance(cfg, TokenConfig)
                else layer.module_buffers(cfg, weights[span[0]], norms[span[0]])
            )
            for cfg, span in zip(self.cfgs, self.spans)
        ]
        # on the emulator, aircc + aiecc compile each module first (where installed) unless told not to
        self.compile_first = compile_first
        self.compiled = set() if compile_first else set(self.cfgs)
        # the KV caches live in the dispatches' buffers: the positions they hold, and per dispatch the byte
        # ranges of its buffers written since its last call ({buffer index: [(offset, bytes)]})
        self.cache_rows = 0
        self.dirty = [{} for _ in self.cfgs]
        if backend == "npu":
            self._load_on_npu()

    def _load_on_npu(self) -> None:
        """Every distinct module compiled for NPU2 once, each in a build folder of its own, and kept loaded:
        a dispatch is then one call of its invoker (mlir-air's XRTBackend); like groups of like layers share
        theirs."""
        from .decode_layer import load_on_npu, module_of

        root = os.path.join(REPO, "build", "npu", "generate")
        distinct = list(dict.fromkeys(self.cfgs))
        loaded = [
            load_on_npu(
                module_of(self.builder, cfg),
                self.builder.backend_options(cfg),
                os.path.join(root, f"module{j}"),
                cfg.launch_gemvs,
            )
            for j, cfg in enumerate(distinct)
        ]
        self.backends = [backend for backend, _ in loaded]
        # a dispatch's buffers stay on the device from token to token (a set of its own, like modules
        # sharing the loaded kernel): the weights written once, the caches' appended rows, the rows
        self.calls = [
            npu.ResidentCall(loaded[distinct.index(cfg)][0], **buffer_roles(cfg))
            for cfg in self.cfgs
        ]

    def close(self) -> None:
        """Unloads what the npu backend loaded."""
        for backend in getattr(self, "backends", []):
            backend.unload()

    def dispatch(self, j: int, rows) -> list:
        """Dispatch j with these rows, given by module name (a TokenConfig's: a dict per module of it):
        every buffer back, in argument order."""
        from ..design import layer
        from .decode_layer import run_module

        cfg, bufs = self.cfgs[j], self.buffers[j]
        names = {
            n
            for given in (rows if isinstance(cfg, TokenConfig) else [rows])
            for n in given
        }
        if not names <= {*GIVEN, "kv_cache"}:
            # the npu backend writes no other buffer after the first token (buffer_roles)
            raise ValueError(
                f"rows the host does not give every token: {sorted(names)}"
            )
        # in place: every token gives every row the host writes (the weights and norms were placed once)
        if isinstance(cfg, TokenConfig):
            layer.place(cfg, bufs, [{}] * len(cfg.modules), rows)
        else:
            for name, row in rows.items():
                k = cfg.index(name)
                bufs[k][...] = np.asarray(row, bfloat16).reshape(bufs[k].shape)
        dirty, self.dirty[j] = self.dirty[j], {}
        if self.backend == "npu":
            return [np.asarray(a) for a in self.calls[j](*bufs, dirty=dirty)]
        first = cfg not in self.compiled
        self.compiled.add(cfg)
        out = run_module(cfg, bufs, self.backend, first, dispatches=2, timed=self.timed)
        return [np.asarray(a) for a in out]

    def prefill(self, tokens: list[int], progress=None) -> np.ndarray:
        """The prompt's logits, its projections through the GEMM design on this backend (decode_layer.run_gemm
        at Llama.prefill_gemms' configurations, the prompt's rows padded with zeros: q, k, v and gate
        with up fused as the decode path fuses them); the rest (RMSNorm, RoPE, the attention row by row,
        the residuals, SwiGLU, the LM head on the last row) the kernels' numpy models on the host, as the
        model backend's prefill, whose logits and KV cache these are bit for bit. progress: given a line
        as each layer's first GEMM starts."""
        from ..formats.fuse import fuse_columns, offsets
        from .decode_layer import run_gemm

        m = self.m
        gemms = m.prefill_gemms(len(tokens))
        outs = {}

        def project(i: int, j: int, rows: np.ndarray) -> np.ndarray:
            ly = m.layers[i]
            run = next(r for r in ly.runs if j in r)
            if (i, j) not in outs:
                if progress and not any(key[0] == i for key in outs):
                    progress(
                        f"prefill: layer {i + 1} of {len(m.layers)}, its GEMMs on {self.backend} ..."
                    )
                w = [ly.weights[x] for x in run]
                cfg, _ = gemms[i][j]
                c = run_gemm(
                    cfg, rows, fuse_columns(w), self.backend, self.compile_first
                )
                for x, at, wx in zip(run, offsets(w), w):
                    outs[i, x] = c[:, at : at + wx.n]
            return outs[i, j]

        return m.prefill(tokens, project)

    def _cache_at(self, i: int) -> tuple[int, int, int]:
        """(dispatch, buffer index, first row) of layer i's KV cache (module i's, of the first module and
        the layers' modules)."""
        g = next(g for g, span in enumerate(self.spans) if i in span)
        cfg = self.cfgs[g]
        if isinstance(cfg, TokenConfig):
            slab, row = cfg.refs(i - self.spans[g].start)["kv_cache"]
            return g, cfg.index(slab), row
        return g, cfg.index("kv_cache"), 0

    def _append(self, i: int, q_attn: np.ndarray, pos: int) -> None:
        """The host appends layer i's key and value at pos to its KV cache, read back from the attention
        launch's q buffer (o_gemv_ffn_int4.attention_q's layout) once the dispatch has run: to the model's
        and, at their rows (o_gemv_ffn_int4.attention_cache_rows), to the dispatch's buffer, noted as
        written for its next call.
        """
        m = self.m
        g = m.heads // m.kv_heads
        rows = np.asarray(q_attn).reshape(m.kv_heads, -1)
        m.cache_k[i][pos] = rows[:, g * m.d : g * m.d + m.d].reshape(-1)
        m.cache_v[i][pos] = rows[:, g * m.d + m.d : g * m.d + 2 * m.d].reshape(-1)
        j, k, first = self._cache_at(i)
        buf = self.buffers[j][k]
        for r, row in zip(
            self.builder.attention_cache_rows(pos),
            (m.cache_k[i][pos], m.cache_v[i][pos]),
        ):
            buf[first + r] = row
            self.dirty[j].setdefault(k, []).append(
                ((first + r) * buf[0].nbytes, buf[0].nbytes)
            )

    def step(self, token: int, pos: int) -> np.ndarray:
        """One token's dispatches at position pos: the logits (f32 [head N], bf16 values)."""
        from ..design import layer

        m = self.m
        if self.timed is not None:
            self.timed.clear()
        x = m.embed([token]).astype(bfloat16)
        table = rope.table(m.frequencies, pos)
        zeros = np.zeros(m.heads * m.d)
        # the attention launch's q buffer as the host gives it: ctx[0] = pos (the cache rows before the
        # token); the RoPE launches and the value's copy write the rest
        ctx = self.builder.attention_q(
            zeros, zeros[: m.kv_heads * m.d], zeros[: m.kv_heads * m.d], pos, m.kv_heads
        )
        # per module j: what the host gives it (j < layers: it ends with layer j's attention); the KV
        # caches only when the buffers do not hold the positions before this one (_append keeps them)
        rows = [{"rope_table": table, "q_attn": ctx} for _ in m.layers] + [{}]
        if pos != self.cache_rows:
            for i, given in enumerate(rows[:-1]):
                given["kv_cache"] = self.builder.attention_cache(
                    m.cache_k[i], m.cache_v[i]
                )
                j, k, _ = self._cache_at(i)
                self.dirty[j][k] = [(0, self.buffers[j][k].nbytes)]
        rows[0]["x"] = x
        outs = []  # per module, its buffers by name
        for g, (cfg, span) in enumerate(zip(self.cfgs, self.spans)):
            given = [dict(rows[j]) for j in span]
            # from the previous dispatch: the hidden row (the first module's: x) and the attention
            if outs:
                given[0] |= {"x": outs[-1].get("out", x), "attn": outs[-1]["attn_next"]}
            if isinstance(cfg, TokenConfig):
                outs += layer.token_outputs(cfg, self.dispatch(g, given))
            else:
                out = self.dispatch(g, given[0])
                outs.append({n: a for (n, _), a in zip(cfg.buffers(), out)})
        for i in range(len(m.layers)):
            self._append(i, outs[i]["q_attn"], pos)
        self.cache_rows = pos + 1
        return outs[-1]["logits"].reshape(-1)[: m.head.n].astype(np.float32)


class Reference:
    """The same model in float64 (--check): each weight its own dequantisation, RMSNorm with the kernel's
    epsilon, RoPE from float64 angles, softmax exact; its own KV cache."""

    def __init__(self, model: Llama):
        self.m = model
        self.w = [[dequantize(w) for w in ly.weights] for ly in model.layers]
        self.head = dequantize(model.head)
        self.k = [np.zeros((model.context, model.kv_heads * model.d)) for _ in self.w]
        self.v = [np.zeros_like(c) for c in self.k]

    @staticmethod
    def _norm(x: np.ndarray, w: np.ndarray) -> np.ndarray:
        return (
            x / np.sqrt(np.mean(x * x) + float(elt.RMS_EPSILON)) * w.astype(np.float64)
        )

    def step(self, token: int, pos: int) -> np.ndarray:
        m, d = self.m, self.m.d
        g = m.heads // m.kv_heads
        angles = pos * np.asarray(m.frequencies, np.float64)
        tab = np.concatenate([np.cos(angles), np.sin(angles)])
        x = m.embed([token])[0].astype(np.float64)
        for i, ly in enumerate(m.layers):
            w = self.w[i]
            n = self._norm(x, ly.attn_norm)
            q, k, v = (n @ w[j] for j in (Q, K, V))
            q, k = (rope.rotate_f64(y, tab, d) for y in (q, k))
            self.k[i][pos], self.v[i][pos] = k, v
            keys = self.k[i][: pos + 1].reshape(pos + 1, m.kv_heads, d)
            vals = self.v[i][: pos + 1].reshape(pos + 1, m.kv_heads, d)
            heads = q.reshape(m.heads, d)
            attn = np.empty((m.heads, d))
            for h in range(m.heads):
                s = keys[:, h // g] @ heads[h] / np.sqrt(d)
                p = np.exp(s - s.max())
                attn[h] = (p / p.sum()) @ vals[:, h // g]
            hh = x + attn.reshape(-1) @ w[O]
            n = self._norm(hh, ly.ffn_norm)
            gate = n @ w[GATE]
            x = hh + (gate / (1 + np.exp(-gate)) * (n @ w[UP])) @ w[DOWN]
        return self._norm(x, m.final_norm) @ self.head


@dataclass
class Sampler:
    """Greedy when temperature is 0, else softmax(logits / temperature) over the top_k largest (all when
    top_k is 0), drawn with a seeded generator."""

    temperature: float = 0.0
    top_k: int = 0
    seed: int = 0

    def __post_init__(self):
        self.rng = np.random.default_rng(self.seed)

    def pick(self, logits: np.ndarray) -> int:
        if self.temperature == 0:
            return int(np.argmax(logits))
        z = logits.astype(np.float64) / self.temperature
        if 0 < self.top_k < z.size:
            z[z < np.partition(z, -self.top_k)[-self.top_k]] = -np.inf
        p = np.exp(z - z.max())
        return int(self.rng.choice(z.size, p=p / p.sum()))


@dataclass
class StepCheck:
    step: int
    same_top1: bool
    correlation: float
    # where the top-1 differs: the reference's logit of its top-1 less its logit of ours (how near a tie)
    gap: float = 0.0

    @property
    def passed(self) -> bool:
        return self.same_top1 and self.correlation >= MIN_CORRELATION

    def line(self) -> str:
        near = (
            "" if self.same_top1 else f" (by {self.gap:.4g} in the reference's logits)"
        )
        return (
            f"step {self.step:<4} top-1 {'same as' if self.same_top1 else 'NOT'} the float64 reference's"
            f"{near}, logits correlation {self.correlation:.6f}  {'PASS' if self.passed else 'FAIL'}"
        )


def compare(step: int, logits: np.ndarray, want: np.ndarray) -> StepCheck:
    corr = float(np.corrcoef(logits.astype(np.float64), want)[0, 1])
    ours, theirs = int(np.argmax(logits)), int(np.argmax(want))
    return StepCheck(step, ours == theirs, corr, float(want[theirs] - want[ours]))


def generate(
    model: Llama,
    prompt: list[int],
    tokens: int,
    sampler: Sampler,
    stop: set[int],
    on_token,
    reference: Reference | None = None,
    progress=None,
    vocab: int | None = None,
    dispatches=None,
    prefill=None,
) -> tuple[list[int], list[StepCheck], float, float]:
    """(the generated ids, the checks, prefill seconds, decode seconds): the prompt's prefill, then up to
    `tokens` tokens, each passed to on_token(id) as it is made; stops after a token in `stop`. Only the
    first `vocab` logits are picked from and checked (the tokenizer's ids: a head padded past them has
    rows no text can name). dispatches: step(token, position) -> logits of another backend (Dispatches.step
    or the model's own decode, Llama.decode_step), which prefills a token at a time too unless prefill
    (prompt -> logits: Dispatches.prefill, the GEMM design on that backend) is given; None: the model
    backend, its prefill through the GEMM's kernel model."""
    t0 = time.perf_counter()
    if dispatches is None:
        if progress:
            progress(
                f"prefill: {len(prompt)} tokens through the GEMM (choosing its configurations) ..."
            )
        logits = model.prefill(prompt)[:vocab]
    elif prefill is not None:
        if progress:
            progress(
                f"prefill: {len(prompt)} tokens through the GEMM design, a launch per projection ..."
            )
        logits = prefill(prompt)[:vocab]
    else:
        if progress:
            progress(
                f"prefill: {len(prompt)} tokens a token at a time through the decode dispatches ..."
            )
        for pos, tok in enumerate(prompt):
            logits = dispatches(tok, pos)[:vocab]
    checks, out = [], []
    if reference is not None:
        for pos, tok in enumerate(prompt):
            want = reference.step(tok, pos)
        checks.append(compare(0, logits, want[:vocab]))
    t1 = time.perf_counter()
    pos = len(prompt)
    for step in range(tokens):
        tok = sampler.pick(logits)
        out.append(tok)
        on_token(tok)
        if tok in stop or step + 1 == tokens:
            break
        if dispatches is None:
            logits = model.forward([tok], pos, model.decode_tiles)[:vocab]
        else:
            logits = dispatches(tok, pos)[:vocab]
        if reference is not None:
            want = reference.step(tok, pos)[:vocab]
            checks.append(compare(step + 1, logits, want))
        pos += 1
    return out, checks, t1 - t0, time.perf_counter() - t1
