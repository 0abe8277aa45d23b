# SPDX-License-Identifier: MIT
"""One interface to the weight files the host program reads: a path and a layer name in; the layer's weights,
in the record format they need, and one line saying what was read, out. Each file format has its module:

    int4awq/gguf_file.py       GGUF (llama.cpp): MXFP4, Q4_0 (run); Q4_1 .. IQ4_XS read exactly
                               (gguf_quants.py), refused by load until the kernel takes them
    int4awq/mx_safetensors.py  MXFP4 safetensors: compressed-tensors mxfp4-pack-quantized, AMD Quark,
                               gpt-oss experts
    int4awq/checkpoints.py     int4 safetensors: AutoAWQ, GPTQ, compressed-tensors pack-quantized

so a new format is one new module and a line in each function below. random_format_weights gives seeded
weights of a record format instead of a file's.
"""

from __future__ import annotations

from pathlib import Path

from .errors import ConfigError
from .gguf_file import is_gguf
from .mxfp4 import random_mxfp4
from .quant import random_weights


def list_layers(path: str | Path) -> list[str]:
    """A line per layer of the file: its name, its type, K and N, and whether it runs."""
    if is_gguf(path):
        from .gguf_file import list_gguf_layers

        return [
            f"{t.name}  GGUF {t.type_name}  K={t.k} N={t.n}  {t.status}"
            for t in list_gguf_layers(path)
        ]
    from .mx_safetensors import list_mx_layers, open_mx

    mx = open_mx(path)
    if mx is not None:
        return [
            f"{t.name}  {t.layout} MXFP4  K={t.k} N={t.n}"
            + ("" if t.experts is None else f"  experts={t.experts} (--expert E)")
            for t in list_mx_layers(*mx)
        ]
    from .checkpoints import list_layers as list_int4_layers

    return [
        f"{i.name}  {i.format}  K={i.in_features} N={i.out_features} GS={i.group_size}"
        for i in list_int4_layers(path)
    ]


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
    path: str | Path, name: str, *, scale_pair: bool = False, expert: int | None = None
):
    """(weights, summary line) of layer `name`, in a record format the kernel runs. scale_pair keeps an int4
    checkpoint's scales exactly as bf16 pairs (format awq_f16); expert picks one expert of a gpt-oss expert
    tensor. A GGUF tensor that is read exactly but does not run yet (gguf_quants.BlockIntWeights) is refused
    here with one line; gguf_file.load_gguf_layer gives its values."""
    if is_gguf(path):
        from .gguf_file import gguf_status, load_gguf_layer
        from .gguf_quants import BlockIntWeights

        if expert is not None:
            raise ConfigError(
                "--expert: GGUF tensors are read one 2-D weight at a time"
            )
        w = load_gguf_layer(path, name)
        # the kernel path starts here: a type it cannot run is refused, never passed on
        if isinstance(w, BlockIntWeights):
            raise ConfigError(
                f"{name}: GGUF {w.type_name} K={w.k} N={w.n} does not run: {gguf_status(w.type_name)}"
            )
        kind, held = (
            ("MXFP4", "E2M1 codes and E8M0 scales as the file holds them")
            if w.format == "mxfp4"
            else ("Q4_0", "codes and fp16 scales d as bf16 pairs (format awq_f16)")
        )
        return w, f"{name}: GGUF {kind} K={w.k} N={w.n}: {held} (exact)"
    from .mx_safetensors import load_mx_layer, open_mx

    mx = open_mx(path)
    if mx is not None:
        ck, kind = mx
        w = load_mx_layer(ck, kind, name, expert)
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

    w, report = load_layer(path, name, scale_pair=scale_pair)
    return w, report.summary()


def random_format_weights(
    fmt: str, k: int, n: int, gs: int, seed: int, exact: bool = False
):
    """Seeded weights of a record format: quant.random_weights (awq; awq_f16 with fp16 scales as exact
    pairs) or mxfp4.random_mxfp4 (gs is 32)."""
    if fmt == "mxfp4":
        return random_mxfp4(k, n, seed, exact=exact)
    return random_weights(k, n, gs, seed, exact=exact, scale_pair=fmt == "awq_f16")
