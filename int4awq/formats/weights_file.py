# SPDX-License-Identifier: MIT
"""One interface to the weight files the host program reads: a path and a layer name in; the layer's weights,
in the record format they need, and one line saying what was read, out. Each file format has its module:

    int4awq/formats/gguf_file.py       GGUF (llama.cpp): MXFP4, Q4_0, Q4_1 .. IQ4_XS
                               (gguf_quants.py), refused by load until the kernel takes them
    int4awq/formats/mx_safetensors.py  MXFP4 safetensors: compressed-tensors mxfp4-pack-quantized, AMD Quark,
                               gpt-oss experts
    int4awq/formats/checkpoints.py     int4 safetensors: AutoAWQ, GPTQ, compressed-tensors pack-quantized

so a new format is one new module and a branch in each function below: listing (--list-layers: a row per
layer with its status, the other tensors counted) and load. random_format_weights gives seeded weights of a
record format instead of a file's.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from .gguf_file import is_gguf
from .gguf_quants import FAST_FORMATS, SEED_TYPES, random_block_weights
from .mxfp4 import random_mxfp4
from .quant import random_weights


@dataclass(frozen=True)
class Row:
    """One line of --list-layers."""

    name: str  # what --layer takes
    type: str  # the file's type of it, e.g. Q4_K, awq-gemm, compressed-tensors MXFP4, BF16
    shape: str  # K=.. N=.. (int4: GS=..; gpt-oss: experts=..)
    status: str  # "runs", or why not
    outcome: str  # one of OUTCOMES


# What a row's status comes to, in the summary's order and words (count 1, count > 1).
OUTCOMES = {
    "runs": ("runs", "run"),
    "refused": (
        "refused at load (its status says why)",
        "refused at load (their status says why)",
    ),
    "not read": ("not read", "not read"),
}
HEADER = ("name", "type", "shape", "status")


@dataclass(frozen=True)
class Listing:
    """What --list-layers prints of a weights file: a row per layer and a count of the tensors not listed."""

    rows: list[Row]
    noun: str  # "tensor" (GGUF) or "layer" (safetensors checkpoints)
    # the number of dimensions of each tensor not listed (norms, biases, 3-D expert tensors, ...)
    not_listed: list[int]

    def summary(self) -> str:
        counts = Counter(r.outcome for r in self.rows)
        parts = [
            f"{counts[o]} {words[counts[o] != 1]}"
            for o, words in OUTCOMES.items()
            if counts[o]
        ]
        s = "s" if len(self.rows) != 1 else ""
        line = f"{len(self.rows)} {self.noun}{s}: {', '.join(parts)}"
        dims = Counter(self.not_listed)
        if dims:
            line += "; not listed: " + ", ".join(
                f"{c} {'scalar' if d == 0 else f'{d}-D'} tensor{'s' if c != 1 else ''}"
                for d, c in sorted(dims.items())
            )
        return line

    def table(self) -> list[str]:
        """A header row, aligned columns (the status last, unpadded), a rule under the header, the summary."""
        cells = [HEADER] + [(r.name, r.type, r.shape, r.status) for r in self.rows]
        widths = [max(len(c[i]) for c in cells) for i in range(3)]

        def line(c):
            return "  ".join([*(x.ljust(w) for x, w in zip(c, widths)), c[3]]).rstrip()

        rule = line(tuple("-" * w for w in widths) + ("-" * len(HEADER[3]),))
        return [line(cells[0]), rule, *(line(c) for c in cells[1:]), self.summary()]


def list_layers(path: str | Path) -> list[str]:
    """--list-layers: a table of the file's layers (name, type, shape [K, N], status: runs or why not) and a
    summary line (listing has the rows)."""
    return listing(path).table()


def listing(path: str | Path) -> Listing:
    """Every layer of a weights file, from its header (and, for the types that run, their scales, so that a
    scale the loader refuses is named here rather than at the run), with the tensors not listed counted.
    """
    if is_gguf(path):
        from .gguf_file import gguf_contents

        contents = gguf_contents(path)
        if not contents.layers:
            raise ConfigError(
                f"{path}: no 2-D tensors ({len(contents.others)} tensors of other dimensions)"
            )
        rows = [
            Row(t.name, t.type_name, f"K={t.k} N={t.n}", t.status, _gguf_outcome(t))
            for t in contents.layers
        ]
        return Listing(rows, "tensor", [len(d) for d in contents.others])
    from .mx_safetensors import layer_parts, list_mx_layers, open_mx
    from .checkpoints import other_tensors

    mx = open_mx(path)
    if mx is not None:
        ck, kind = mx
        layers = list_mx_layers(ck, kind, scales=True)
        rows = [
            Row(
                t.name,
                f"{t.layout} MXFP4",
                f"K={t.k} N={t.n}"
                + ("" if t.experts is None else f" experts={t.experts}"),
                t.status,
                "runs" if t.runs else "refused",
            )
            for t in layers
        ]
        parts = {p for t in layers for p in layer_parts(kind, t.name)}
        return _with_others(rows, other_tensors(ck, parts))
    from .checkpoints import list_contents
    from .quant import check_group_size

    layers, others = list_contents(path)
    rows = []
    for i in layers:
        try:
            check_group_size(i.in_features, i.group_size)
            status, outcome = "runs", "runs"
        except ConfigError as e:
            status, outcome = f"does not run: {e}", "refused"
        rows.append(
            Row(
                i.name,
                i.format,
                f"K={i.in_features} N={i.out_features} GS={i.group_size}",
                status,
                outcome,
            )
        )
    return _with_others(rows, others)


def _gguf_outcome(t) -> str:
    if t.runs:
        return "runs"
    return "refused" if t.refused else "not read"


def _with_others(rows: list[Row], others) -> Listing:
    """A safetensors checkpoint's listing: its layers, then its unquantised 2-D weights (not read), the rest
    counted."""
    from .gguf_file import FLOAT_TYPES

    more, not_listed = [], []
    for t in others:
        if len(t.shape) == 2 and t.name.endswith(".weight"):
            n, k = t.shape  # torch's [out_features, in_features]
            why = (
                "a float weight, the kernel takes quantised ones"
                if t.dtype in FLOAT_TYPES
                else "not part of a layer this reader knows"
            )
            name = t.name[: -len(".weight")]
            more.append(
                Row(
                    name,
                    t.dtype,
                    f"K={k} N={n}",
                    f"not read ({t.dtype}: {why})",
                    "not read",
                )
            )
        else:
            not_listed.append(len(t.shape))
    more.sort(key=lambda r: _natural(r.name))
    return Listing(rows + more, "layer", not_listed)


def _natural(s: str):
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", s)]


# A Llama decoder layer's seven projections, by the names each kind of file gives them: Hugging Face
# checkpoints' module names, and llama.cpp's GGUF tensor names (gguf-py's tensor_mapping: attn_q .. ffn_down).
HF_PROJECTIONS = (
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
)
GGUF_PROJECTIONS = (
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_output",
    "ffn_gate",
    "ffn_up",
    "ffn_down",
)


def decoder_layer_names(path: str | Path, layer: int) -> list[str]:
    """The seven projection layers of decoder layer `layer`, as the file names them."""
    if is_gguf(path):
        return [f"blk.{layer}.{p}.weight" for p in GGUF_PROJECTIONS]
    return [f"model.layers.{layer}.{p}" for p in HF_PROJECTIONS]


def load(
    path: str | Path,
    name: str,
    *,
    scale_pair: bool = False,
    expert: int | None = None,
    fmt: str | None = None,
):
    """(weights, summary line) of layer `name`, in a record format the kernel runs. The file decides the
    format: fmt (--format, or None) may only choose between the records a file gives, awq and awq_f16 for an
    int4 checkpoint (awq_f16, like scale_pair, keeps its scales exactly as bf16 pairs); any other fmt is
    refused with one line. expert picks one expert of a gpt-oss expert tensor. A GGUF tensor of a type the
    kernel does not run is refused with one line."""
    if is_gguf(path):
        from .gguf_file import load_gguf_layer

        if expert is not None:
            raise ConfigError(
                "--expert: GGUF tensors are read one 2-D weight at a time"
            )
        # a type the kernel cannot run is refused from the header, never decoded
        w = load_gguf_layer(path, name)
        if w.format == "mxfp4":
            kind, held = "MXFP4", "E2M1 codes and E8M0 scales as the file holds them"
        elif w.format == "awq_f16":
            kind, held = (
                "Q4_0",
                "codes and fp16 scales d as bf16 pairs (format awq_f16)",
            )
        else:
            kind = w.type_name
            fast = FAST_FORMATS.get(w.format)
            if fast is not None:
                # the K-quants with a min term: the fast mode by default, as AWQ's default rounds fp16
                # scales to bf16; --format <exact> keeps the exact pairs
                _check_format(
                    fmt, (fast, w.format), path, name, f"a GGUF {kind} tensor"
                )
                if fmt != w.format:
                    exact = w.format
                    w, moved = w.with_bf16_scales()
                    return w, (
                        f"{name}: GGUF {kind} K={w.k} N={w.n}: value = v * s + m, {moved}; "
                        f"--format {exact} keeps them exact"
                    )
            terms = "scales and min terms" if w.m is not None else "scales"
            held = f"value = v * s{' + m' if w.m is not None else ''}, {terms} as exact bf16 parts (format {w.format})"
        _check_format(fmt, (w.format,), path, name, f"a GGUF {kind} tensor")
        return w, f"{name}: GGUF {kind} K={w.k} N={w.n}: {held} (exact)"
    from .mx_safetensors import load_mx_layer, open_mx

    mx = open_mx(path)
    if mx is not None:
        ck, kind = mx
        w = load_mx_layer(ck, kind, name, expert)
        _check_format(fmt, ("mxfp4",), path, name, f"a {kind} MXFP4 layer")
        which = "" if expert is None else f" expert {expert}"
        return w, (
            f"{name}{which}: {kind} MXFP4 K={w.k} N={w.n}: E2M1 codes and E8M0 scales as the file holds "
            "them (exact)"
        )
    if expert is not None:
        raise ConfigError(
            "--expert applies to gpt-oss expert tensors; this is an int4 checkpoint"
        )
    from .checkpoints import load_layer

    w, report = load_layer(path, name, scale_pair=scale_pair or fmt == "awq_f16")
    _check_format(fmt, ("awq", "awq_f16"), path, name, "an int4 checkpoint's layer")
    return w, report.summary()


def _check_format(
    fmt: str | None, gives: tuple[str, ...], path, name: str, what: str
) -> None:
    """--format names a record format the file gives for this layer, or is not given."""
    if fmt is not None and fmt not in gives:
        can = " or ".join(f"--format {g}" for g in gives)
        raise ConfigError(
            f"--format {fmt} does not match --weights {path}: {name} is {what}, which runs as {can}; "
            "leave --format out (the file decides)"
        )


def random_format_weights(
    fmt: str, k: int, n: int, gs: int, seed: int, exact: bool = False
):
    """Seeded weights of a record format: quant.random_weights (awq; awq_f16 with fp16 scales as exact
    pairs), mxfp4.random_mxfp4 (gs is 32) or gguf_quants.random_block_weights (the GGUF formats: a type of
    the format with group gs)."""
    if fmt == "mxfp4":
        return random_mxfp4(k, n, seed, exact=exact)
    if fmt in SEED_TYPES or fmt in FAST_FORMATS.values():
        return random_block_weights(fmt, k, n, seed, exact=exact, gs=gs)
    return random_weights(k, n, gs, seed, exact=exact, scale_pair=fmt == "awq_f16")


# The name --layer takes for the model's LM head, however the file holds it (load_head)
HEAD = "lm_head"
# What --head-format takes: a float head quantised at load to AWQ int4 (round to nearest, AutoAWQ's zero
# point) at this group size
HEAD_GS = 128


def load_head(path: str | Path, head_format: str | None = None, fmt: str | None = None):
    """(weights, summary line, the float head [hidden, vocab] float32 where it was quantised at load, else
    None) of the model's LM head, W [hidden, vocab]: GGUF's output.weight, or
    token_embd.weight where the file ties it, in its own type; a checkpoint's quantized lm_head as its other
    layers, or its float lm_head.weight (model.embed_tokens.weight when tied) quantised at load to AWQ int4
    g128 with head_format "awq" (quant.quantize_awq; the summary reports the rounding). A float head without
    head_format is refused: no bf16 GEMV is built yet."""
    import numpy as np

    from .quant import dequantize, quantize_awq

    if is_gguf(path):
        from .gguf_file import gguf_contents

        names = {t.name for t in gguf_contents(path).layers}
        name = "output.weight" if "output.weight" in names else "token_embd.weight"
        w, summary = load(path, name, fmt=fmt)
        tied = " (tied: the token embedding)" if name == "token_embd.weight" else ""
        return w, f"LM head{tied}: {summary}", None
    from .checkpoints import head_source, load_float_matrix

    name, tied = head_source(path)
    if name == HEAD:
        w, summary = load(path, HEAD, fmt=fmt)
        return w, f"LM head: {summary}", None
    if head_format != "awq":
        raise ConfigError(
            f"{path}: the LM head {name} is a float tensor: give --head-format awq (quantised at load to "
            f"AWQ int4 g{HEAD_GS}); a bf16 GEMV is not built"
        )
    dense = load_float_matrix(path, name).T  # [hidden, vocab]: K x N
    w = quantize_awq(np.ascontiguousarray(dense), HEAD_GS)
    err = dequantize(w) - dense
    rel = float(
        np.sqrt(
            (err.astype(np.float64) ** 2).sum() / (dense.astype(np.float64) ** 2).sum()
        )
    )
    return (
        w,
        (
            f"LM head {name}{' (tied: the token embedding)' if tied else ''}: float K={w.k} N={w.n}, quantised "
            f"at load to AWQ int4 g{HEAD_GS} (round to nearest, bf16 scales): relative RMS error of the "
            f"weights {rel:.2e}"
        ),
        dense,
    )


def layer_norms(path: str | Path, layer: int) -> tuple[np.ndarray, np.ndarray]:
    """Decoder layer `layer`'s RMSNorm weights (before the attention, before the FFN) as float32."""
    if is_gguf(path):
        from .gguf_file import load_gguf_vector

        return tuple(
            load_gguf_vector(path, f"blk.{layer}.{n}.weight")
            for n in ("attn_norm", "ffn_norm")
        )
    from .checkpoints import load_vector

    return tuple(
        load_vector(path, f"model.layers.{layer}.{n}.weight")
        for n in ("input_layernorm", "post_attention_layernorm")
    )


def final_norm(path: str | Path):
    """The model's final RMSNorm weight, before the LM head, as float32: GGUF's output_norm.weight, or the
    checkpoint's model.norm.weight."""
    if is_gguf(path):
        from .gguf_file import load_gguf_vector

        return load_gguf_vector(path, "output_norm.weight")
    from .checkpoints import load_vector

    return load_vector(path, "model.norm.weight")


def rope_frequencies(path: str | Path, d: int):
    """The rotary frequencies of heads of d (int4awq.formats.rope): GGUF's header and rope_freqs, or the
    checkpoint's config.json."""
    if is_gguf(path):
        from .gguf_file import gguf_rope_frequencies

        return gguf_rope_frequencies(path, d)
    from .checkpoints import rope_frequencies as hf_frequencies

    return hf_frequencies(path, d)


def attention_heads(path: str | Path) -> tuple[int, int]:
    """(query heads, key/value heads) of the model: GGUF's header, or the checkpoint's config.json."""
    if is_gguf(path):
        from .gguf_file import gguf_attention_heads

        return gguf_attention_heads(path)
    from .checkpoints import attention_heads as hf_heads

    return hf_heads(path)


@dataclass(frozen=True)
class ModelInfo:
    """What a whole-model run needs from a file besides its tensors: the decoder layers, the RMSNorm
    epsilon and the context the model was trained for (None where the file does not say).
    """

    layers: int
    rms_eps: float | None
    context: int | None


def model_info(path: str | Path) -> ModelInfo:
    """A Llama's ModelInfo: GGUF's general.architecture "llama" and its header, or a checkpoint whose
    config.json names LlamaForCausalLM (or model_type "llama"); any other architecture is refused in one
    line. The layers are counted from the tensor names (0 .. L - 1, each present)."""
    if is_gguf(path):
        from .gguf_file import gguf_field, gguf_tensor_names

        arch = gguf_field(path, "general.architecture")
        if arch != "llama":
            raise ConfigError(
                f"{path}: GGUF architecture {arch!r}: only Llama's ('llama') runs as a whole model"
            )
        names = gguf_tensor_names(path)
        eps = gguf_field(path, "{arch}.attention.layer_norm_rms_epsilon")
        context = gguf_field(path, "{arch}.context_length")
        pattern = r"blk\.(\d+)\."
    else:
        from .checkpoints import config, tensor_names

        cfg = config(path)
        archs = cfg.get("architectures") or []
        if "LlamaForCausalLM" not in archs and cfg.get("model_type") != "llama":
            raise ConfigError(
                f"{path}: config.json names architectures {archs} (model_type "
                f"{cfg.get('model_type')!r}): only Llama's (LlamaForCausalLM) runs as a whole model"
            )
        names = tensor_names(path)
        eps, context = cfg.get("rms_norm_eps"), cfg.get("max_position_embeddings")
        pattern = r"model\.layers\.(\d+)\."
    found = {int(m.group(1)) for n in names if (m := re.match(pattern, n))}
    if not found or found != set(range(max(found) + 1)):
        raise ConfigError(
            f"{path}: decoder layers {sorted(found)[:8]}: a model needs layers 0 .. L - 1, each present"
        )
    return ModelInfo(
        max(found) + 1,
        None if eps is None else float(eps),
        None if context is None else int(context),
    )


def embedding(path: str | Path):
    """(rows, vocab, hidden) of the token embedding: rows(ids) -> float32 [len(ids), hidden]; GGUF's
    token_embd.weight in its own type, a checkpoint's float model.embed_tokens.weight.
    """
    if is_gguf(path):
        from .gguf_file import gguf_embedding

        return gguf_embedding(path)
    from .checkpoints import embedding as hf_embedding

    return hf_embedding(path)
