# SPDX-License-Identifier: MIT
"""Synthetic decoder-layer files of a Llama's shapes for the layer module's tests: an AutoAWQ checkpoint
directory (config.json with the heads, model.safetensors) and a Q4_K_M GGUF file (Q6_K attn_v and ffn_down,
the rest Q4_K), with their RMSNorm weights; with tokenizer=True, a small byte-level BPE tokenizer in Llama 3's
form (tiny_tokenizer: its tokenizer.json files in the directory, the same vocabulary in the GGUF header).

    python3 tests/layer_files.py awq|q4_k_m PATH [--hidden 512] [--intermediate 1024] [--layers 1] [--tokenizer]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

TESTS = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(TESTS), os.path.join(TESTS, "formats")]

from int4awq.formats.weights_file import GGUF_PROJECTIONS, HF_PROJECTIONS  # noqa: E402

# the smallest hidden / intermediate sizes whose GEMVs fill 32 PEs at tile_n 16
E, H = 512, 1024


HEADS, KV_HEADS = 8, 2  # head_dim 64: q 512, k and v 128
# RoPE as Llama-3.2-1B's config.json has it (rope_theta, rope_scaling)
ROPE_THETA = 500000.0
LLAMA3_SCALING = {
    "rope_type": "llama3",
    "factor": 32.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}


def layer_shapes(e, h, kv_heads=KV_HEADS) -> list[tuple[int, int]]:
    """(K, N) of q, k, v, o, gate, up, down at hidden e, intermediate h and HEADS / kv_heads heads."""
    kv = e * kv_heads // HEADS
    return [(e, e), (e, kv), (e, kv), (e, e), (e, h), (e, h), (h, e)]


# the LM head's vocabulary in the files that have one: not a multiple of the GEMV's 512 columns (padded)
VOCAB = 1000


# The small tokenizer's training text (ASCII, accents, digits, runs of spaces, newlines; no emoji, so that an
# emoji is split into byte tokens), its special tokens (Llama 3's names, after the BPE tokens as in Llama 3)
# and a chat template of Llama 3's form.
TOKENIZER_TEXT = [
    "The quick brown fox jumps over the lazy dog.",
    "Llamas eat grass in the Andes; the café serves crème brûlée, naïve résumé.",
    "In 2026 the NPU decoded 1234567 tokens at 68 tokens per second.",
    "Hello, world! It's a test, isn't it? We're decoding   with    spaces.\n\nNew lines too.\n",
    "def main():\n    return 0\n",
]
# at most this many BPE tokens; the special tokens come after them, all under VOCAB
TOKENIZER_VOCAB = 480
SPECIAL_TOKENS = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|eot_id|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim"
    " + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)


def tiny_tokenizer():
    """A byte-level BPE tokenizer in Llama 3's form, trained by the tokenizers library on TOKENIZER_TEXT
    (deterministic, a few ms): Llama 3's split and ByteLevel, ignore_merges, the SPECIAL_TOKENS after the BPE
    tokens, BOS put first by the post-processor."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from tokenizers import processors, trainers

    from int4awq.formats.tokenizer import LLAMA3_REGEX

    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(LLAMA3_REGEX), "isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_VOCAB,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(TOKENIZER_TEXT, trainer)
    tok.add_special_tokens(SPECIAL_TOKENS)
    bos = SPECIAL_TOKENS[0]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A",
        pair=f"{bos} $A {bos} $B:1",
        special_tokens=[(bos, tok.token_to_id(bos))],
    )
    assert tok.get_vocab_size(with_added_tokens=True) <= VOCAB
    return tok


def tokenizer_files(d):
    """The tiny tokenizer as a Hugging Face checkpoint keeps it: tokenizer.json, tokenizer_config.json (bos and
    eos tokens, the chat template) and generation_config.json (Llama 3 instruct's ids: end of text and of turn).
    """
    tok = tiny_tokenizer()
    tok.save(str(d / "tokenizer.json"))
    config = {
        "bos_token": SPECIAL_TOKENS[0],
        "eos_token": {"content": "<|eot_id|>", "special": True},
        "chat_template": CHAT_TEMPLATE,
    }
    (d / "tokenizer_config.json").write_text(json.dumps(config))
    ids = {
        "bos_token_id": tok.token_to_id(SPECIAL_TOKENS[0]),
        "eos_token_id": [tok.token_to_id(t) for t in ("<|end_of_text|>", "<|eot_id|>")],
    }
    (d / "generation_config.json").write_text(json.dumps(ids))


def gguf_tokenizer(
    out, model="gpt2", pre="llama-bpe", add_bos=True, chat_template=CHAT_TEMPLATE
):
    """The tiny tokenizer as llama.cpp's converter writes Llama 3's into a GGUF header (gguf.GGUFWriter):
    model gpt2, pre llama-bpe, tokens by id, merges as "a b", the special tokens CONTROL, eos <|eot_id|>;
    another model, pre, add_bos or template for the tests of refusals and defaults (None: not written).
    """
    import gguf

    tok = tiny_tokenizer()
    merges = json.loads(tok.to_str())["model"]["merges"]
    vocab = tok.get_vocab(with_added_tokens=True)
    tokens = sorted(vocab, key=vocab.get)
    assert [vocab[t] for t in tokens] == list(range(len(tokens)))
    out.add_tokenizer_model(model)
    if pre is not None:
        out.add_tokenizer_pre(pre)
    out.add_token_list(tokens)
    out.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    out.add_token_types(
        [
            gguf.TokenType.CONTROL if t in SPECIAL_TOKENS else gguf.TokenType.NORMAL
            for t in tokens
        ]
    )
    out.add_bos_token_id(vocab[SPECIAL_TOKENS[0]])
    out.add_eos_token_id(vocab["<|eot_id|>"])
    if add_bos is not None:
        out.add_add_bos_token(add_bos)
    if chat_template is not None:
        out.add_chat_template(chat_template)


def trained_like(k, n, gs, seed):
    """AWQ codes, zeros and fp16 scales [K/gs, N] with a trained layer's statistics rather than random
    ones: zero points near the codes' middle (7 .. 9) and scales about 1 / (4.6 sqrt(K)) (q - z has a spread
    of about 4.6), so a layer keeps its input's scale; random zeros (1 .. 15) give each column an offset of
    several times its spread, and the residual stream of a model of them grows by orders of magnitude.
    """
    rng = np.random.default_rng(seed)
    q = rng.integers(0, 16, size=(k, n))
    z = rng.integers(7, 10, size=(k // gs, n))
    s = (rng.uniform(0.5, 1.5, size=(k // gs, n)) / (4.6 * np.sqrt(k))).astype(
        np.float16
    )
    return q, z, s


def awq_checkpoint(
    d,
    e=E,
    h=H,
    layers=1,
    head=None,
    tokenizer=False,
    kv_heads=KV_HEADS,
    trained=False,
):
    """Llama-shaped decoder layers (hidden e, intermediate h; head_dim e / 8, kv_heads key/value heads),
    AutoAWQ GEMM format, GS 128; head "float": a bf16 lm_head.weight [VOCAB, e] as AutoAWQ leaves it,
    "tied": no lm_head, a bf16 model.embed_tokens.weight and tie_word_embeddings (Llama-3.2-1B's);
    tokenizer: tokenizer_files; trained: trained_like weights (else test_checkpoints.logical's).
    """
    from test_checkpoints import (
        AWQ_CFG,
        awq_tensors,
        logical,
        st_bytes,
        write_safetensors,
    )

    shapes = dict(zip(HF_PROJECTIONS, layer_shapes(e, h, kv_heads)))
    tensors = {}
    rng = np.random.default_rng(40)
    for layer in range(layers):
        for i, (name, (k, n)) in enumerate(shapes.items()):
            weights = trained_like if trained else logical
            tensors |= awq_tensors(
                *weights(k, n, 128, seed=30 + 10 * layer + i),
                prefix=f"model.layers.{layer}.{name}",
            )
        for norm in ("input_layernorm", "post_attention_layernorm"):
            tensors[f"model.layers.{layer}.{norm}.weight"] = st_bytes(
                1 + 0.1 * rng.standard_normal(e), "BF16"
            )
    if head is not None:  # and the final RMSNorm before it
        name = "lm_head.weight" if head == "float" else "model.embed_tokens.weight"
        tensors[name] = st_bytes(0.05 * rng.standard_normal((VOCAB, e)), "BF16")
        tensors["model.norm.weight"] = st_bytes(
            1 + 0.1 * rng.standard_normal(e), "BF16"
        )
    d.mkdir(parents=True)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "num_attention_heads": HEADS,
        "num_key_value_heads": kv_heads,
        "rope_theta": ROPE_THETA,
        "rope_scaling": LLAMA3_SCALING,
        "tie_word_embeddings": head == "tied",
        "quantization_config": AWQ_CFG | {"group_size": 128},
    }
    (d / "config.json").write_text(json.dumps(config))
    write_safetensors(d / "model.safetensors", tensors)
    if tokenizer:
        tokenizer_files(d)
    return d


def centered_q4_k(raw: np.ndarray) -> np.ndarray:
    """Q4_K blocks (rows of 144-byte blocks: d, dmin, 12 bytes of 6-bit scales and mins, 128 of codes)
    made zero-mean as a quantiser's are: each sub-block's min code equal to its scale code and dmin = 7.5 d,
    so value = d * sc * (q - 7.5); random scale and min codes instead give every weight a common offset of
    several times its spread, which no trained model has."""
    b = raw.reshape(raw.shape[0], -1, 144).copy()
    b[:, :, 8:12] = b[
        :, :, 4:8
    ]  # mins 0-3 = scales 0-3, and their high bits for sub-blocks 4-7
    b[:, :, 12:16] = (
        b[:, :, 12:16] & 0x0F
    ) * 0x11  # sub-blocks 4-7: the min's low nibble = the scale's
    d = b[:, :, 0:2].copy().view("<f2")
    b[:, :, 2:4] = (d.astype(np.float32) * 7.5).astype("<f2").view(np.uint8)
    return b.reshape(raw.shape)


def q4_k_m_file(
    path,
    e=E,
    h=H,
    layers=1,
    head=None,
    tokenizer=False,
    kv_heads=KV_HEADS,
    centered=False,
):
    """The same layer as a Q4_K_M GGUF file keeps it: attn_v and ffn_down in Q6_K, the rest Q4_K (small
    positive scales, so the layer's values stay in a model's range; centered: zero-mean, centered_q4_k);
    head "output": an output.weight in Q6_K [VOCAB x e], "tied": token_embd.weight in Q6_K and no
    output.weight; tokenizer: gguf_tokenizer; kv_heads key/value heads.
    """
    import gguf

    from test_gguf_quants import TYPES, raw_blocks

    rng = np.random.default_rng(41)
    # Q4_K_M's types: attn_v and ffn_down in Q6_K, the rest Q4_K
    kinds = dict(
        zip(GGUF_PROJECTIONS, ["Q4_K"] * 2 + ["Q6_K"] + ["Q4_K"] * 3 + ["Q6_K"])
    )
    shapes = dict(zip(GGUF_PROJECTIONS, layer_shapes(e, h, kv_heads)))
    small = lambda shape: (2.0 ** rng.uniform(-14, -11, shape)).astype(
        "<f2"
    )  # noqa: E731
    tensors = {
        f"blk.{layer}.{p}.weight": (
            raw_blocks(kind, *shapes[p], TYPES[kind][2], rng, fp16=small),
            kind,
        )
        for layer in range(layers)
        for p, kind in kinds.items()
    }
    if centered:
        tensors = {
            name: (centered_q4_k(raw) if kind == "Q4_K" else raw, kind)
            for name, (raw, kind) in tensors.items()
        }
    if head is not None:  # and the final RMSNorm before it
        tensors["output_norm.weight"] = (
            (1 + 0.1 * rng.standard_normal(e)).astype(np.float32),
            None,
        )
        name = "output.weight" if head == "output" else "token_embd.weight"
        tensors[name] = (
            raw_blocks("Q6_K", e, VOCAB, TYPES["Q6_K"][2], rng, fp16=small),
            "Q6_K",
        )
    for norm in [
        f"blk.{layer}.{n}" for layer in range(layers) for n in ("attn_norm", "ffn_norm")
    ]:
        tensors[f"{norm}.weight"] = (
            (1 + 0.1 * rng.standard_normal(e)).astype(np.float32),
            None,
        )
    out = gguf.GGUFWriter(str(path), "llama")
    out.add_head_count(HEADS)
    out.add_head_count_kv(kv_heads)
    out.add_rope_freq_base(ROPE_THETA)
    if tokenizer:
        gguf_tokenizer(out)
    # llama.cpp's converter writes Llama 3's scaling as one divisor per frequency; any positive ones do here
    tensors["rope_freqs.weight"] = (
        np.linspace(1.0, 32.0, e // HEADS // 2).astype(np.float32),
        None,
    )
    for name, (raw, kind) in tensors.items():
        if kind is None:
            out.add_tensor(name, raw)
        else:
            out.add_tensor(
                name,
                raw,
                raw_shape=raw.shape,
                raw_dtype=gguf.GGMLQuantizationType[kind],
            )
    out.write_header_to_file()
    out.write_kv_data_to_file()
    out.write_tensors_to_file()
    out.close()
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=["awq", "q4_k_m"])
    ap.add_argument("path")
    ap.add_argument("--hidden", type=int, default=E)
    ap.add_argument("--intermediate", type=int, default=H)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--tokenizer", action="store_true", help="with tiny_tokenizer")
    ap.add_argument("--kv-heads", type=int, default=KV_HEADS)
    ap.add_argument("--head", choices=["tied", "float", "output"], default=None)
    ap.add_argument(
        "--centered",
        action="store_true",
        help="a trained layer's statistics: zero-mean Q4_K blocks, AWQ's trained_like",
    )
    a = ap.parse_args(argv)
    common = dict(head=a.head, tokenizer=a.tokenizer, kv_heads=a.kv_heads)
    if a.kind == "awq":
        awq_checkpoint(
            Path(a.path),
            a.hidden,
            a.intermediate,
            a.layers,
            trained=a.centered,
            **common,
        )
    else:
        q4_k_m_file(
            Path(a.path),
            a.hidden,
            a.intermediate,
            a.layers,
            centered=a.centered,
            **common,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
