# SPDX-License-Identifier: MIT
"""Decode attention on the NPU path (issue 53): o_gemv_ffn_int4.build_attention_module on the emulator,
every query head's output bit for bit the kernel model's (int4awq.kernel.eltwise_model.attention) of its
key/value head's rows and the token's own key and value (from the q buffer, with the run-time length), the cache rows from it on NaN (neither used nor
needed); and the shapes it refuses. make aircc-check compiles it at Llama-3.2-1B's heads and make sim-all
runs the compiled design bit for bit as the emulator."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from ml_dtypes import bfloat16

from host_args import REPO

from int4awq.errors import ConfigError
from int4awq.kernel import eltwise_model as em
from int4awq.kernel.kernel_model import build_eltwise_kernel


def run_attention(heads, kv, d, context, n, seed):
    sys.path.insert(0, os.path.join(REPO, "emulator"))
    from air.backend.xrt import XRTBackend

    import o_gemv_ffn_int4 as builder

    g = heads // kv
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((heads, d)).astype(bfloat16)
    ramp = np.linspace(0, 2, context)[:, None] * np.concatenate(
        [q[x * g].astype(np.float32) for x in range(kv)]
    )
    k = (rng.standard_normal((context, kv * d)) + ramp).astype(bfloat16)
    v = rng.standard_normal((context, kv * d)).astype(bfloat16)
    # the cache holds n rows; the token's own key and value (position n) come in the q buffer
    qbuf = builder.attention_q(q, k[n], v[n], n, kv)
    cache_k, cache_v = k.copy(), v.copy()
    cache_k[n:], cache_v[n:] = np.nan, np.nan
    # scores that rise along the positions for the first query head of each group: the running maximum
    # grows chunk after chunk (the rescale)
    os.environ["AIR_EMU_LIB_PATH"] = str(build_eltwise_kernel().parent)
    backend = XRTBackend(**builder.attention_backend_options())
    invoke = backend.compile_and_load(
        builder.build_attention_module(heads, kv, d, context)
    )
    out = invoke(
        qbuf,
        builder.attention_cache(cache_k, cache_v),
        np.zeros((1, heads * d), bfloat16),
    )
    got = np.asarray(out[2]).reshape(heads, d)
    want = np.concatenate(
        [
            em.attention(  # the token's own row last, as the model takes it
                q[x * g : (x + 1) * g],
                k[: n + 1, x * d : (x + 1) * d],
                v[: n + 1, x * d : (x + 1) * d],
                n + 1,
            )
            for x in range(kv)
        ]
    )
    return got, want, backend


@pytest.mark.parametrize("n", [0, 31, 77, 127])
def test_each_head_is_the_kernel_model_bit_for_bit(n):
    got, want, backend = run_attention(8, 2, 64, 128, n, seed=n)
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))
    assert backend.emu_resources.summary() == "resources: within limits"


def test_llama_heads_at_4k_context_fit_and_are_the_model():
    """Llama-3.2-1B's grouping (4 query heads of 64 a PE) over 4,096 positions, which a softmax keeping
    every score in L1 could not hold: bit for bit the model at 3,000 cached positions.
    """
    got, want, backend = run_attention(32, 8, 64, 4096, 3000, seed=4)
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))
    assert backend.emu_resources.summary() == "resources: within limits"


@pytest.mark.parametrize(
    "shape, message",
    [
        ((8, 3, 64, 128), "8 query heads over 3 key/value heads"),
        ((36, 9, 64, 128), "over 9 key/value heads (at most 8)"),
        ((8, 2, 256, 128), "of 256 (a multiple of 16, at most 128)"),
        (
            (8, 2, 64, 96),
            "context 96 (a multiple of 64: an even count of 32-position chunks)",
        ),
        ((64, 1, 128, 128), "attention: 64 query heads of 128 a PE need"),
    ],
)
def test_shapes_the_launch_cannot_take_are_refused(shape, message):
    sys.path.insert(0, os.path.join(REPO, "emulator"))
    import o_gemv_ffn_int4 as builder

    with pytest.raises(
        ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")
    ):
        builder.build_attention_module(*shape)


def test_the_first_module_ends_with_the_attention_at_three_query_heads_a_group():
    """QkvConfig with the attention (context 128, 45 cached) at 24 query heads over 8 key/value heads of
    64 (Llama-3.2-3B's grouping, three a group): on the emulator the q buffer holds the RoPE of the
    module's own q and k and its v, each at its head's place, and the launch's output is the model's
    attention over the 45 cached rows and the token's own, bit for bit."""
    sys.path.insert(0, os.path.join(REPO, "emulator"))
    import o_gemv_ffn_int4 as builder

    from int4_packed_record import QkvConfig
    from int4awq.design import layer
    from int4awq.design.gemv import GemvConfig
    from int4awq.formats import rope
    from int4awq.formats.quant import random_activations
    from int4awq.formats.weights_file import random_format_weights
    from int4awq.run.decode_layer import run_module

    d, heads, kv, context, n = 64, 24, 8, 128, 45
    g = heads // kv
    gemv = GemvConfig(
        m=1, k=512, n=(heads + 2 * kv) * d, gs=128, tile_n=16, tile_k_l1=128
    )
    cfg = QkvConfig.named((gemv,), (d, heads, kv), context)
    rng = np.random.default_rng(3)
    cache_k, cache_v = (
        rng.standard_normal((context, kv * d)).astype(bfloat16) for _ in "kv"
    )
    cache_k[n:] = cache_v[n:] = np.nan
    table = rope.table(rope.base_frequencies(500000.0, d), n).reshape(-1)
    zeros = np.zeros(heads * d)
    given = {
        "x": random_activations(1, 512, 1),
        "attn_norm": random_activations(1, 512, 2),
        "rope_table": table[None],
        "kv_cache": builder.attention_cache(cache_k, cache_v),
        "q_attn": builder.attention_q(zeros, zeros[: kv * d], zeros[: kv * d], n, kv),
    }
    weights = {"w_qkv0": random_format_weights("awq", 512, gemv.n, 128, seed=4)}
    out = run_module(cfg, layer.module_buffers(cfg, weights, given), "emu", False)
    got = {name: np.asarray(out[i]) for i, (name, _) in enumerate(cfg.buffers())}
    qkv = got["qkv0"].reshape(-1)
    q = em.rope(qkv[: heads * d], table, d)
    k = em.rope(qkv[heads * d : (heads + kv) * d], table, d)
    v = qkv[(heads + kv) * d :]
    placed = got["q_attn"].reshape(kv, -1)

    def same(a, b):
        return np.array_equal(
            np.asarray(a, bfloat16).reshape(-1).view(np.uint16),
            np.asarray(b, bfloat16).reshape(-1).view(np.uint16),
        )

    assert same(placed[:, : g * d], q)
    assert same(placed[:, g * d : g * d + d], k)
    assert same(placed[:, g * d + d : g * d + 2 * d], v)
    assert (placed[:, g * d + 2 * d :].view(np.int32) == n).all()  # ctx: the host's
    keys = np.concatenate([cache_k[:n], np.asarray(k, bfloat16).reshape(1, -1)])
    values = np.concatenate([cache_v[:n], np.asarray(v, bfloat16).reshape(1, -1)])
    want = np.concatenate(
        [
            em.attention(
                np.asarray(q).reshape(heads, d)[x * g : (x + 1) * g],
                keys[:, x * d : (x + 1) * d],
                values[:, x * d : (x + 1) * d],
                n + 1,
            )
            for x in range(kv)
        ]
    )
    assert same(got["attn_next"], want)


def test_a_positions_cache_rows_are_where_the_cache_buffer_holds_it():
    """attention_cache_rows(pos) names the rows of attention_cache's buffer that hold pos's key and value
    (what the host appends on the NPU), at each chunk's first and last position."""
    import o_gemv_ffn_int4 as builder

    context = 3 * builder.ATTN_CHUNK
    k = np.arange(context * 4, dtype=np.float32).reshape(context, 4).astype(bfloat16)
    v = -k
    buf = builder.attention_cache(k, v)
    for pos in (0, builder.ATTN_CHUNK - 1, builder.ATTN_CHUNK, context - 1):
        key, value = builder.attention_cache_rows(pos)
        assert np.array_equal(buf[key], k[pos]) and np.array_equal(buf[value], v[pos])
