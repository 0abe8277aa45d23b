# SPDX-License-Identifier: MIT
"""A decoder layer's o_proj + FFN as one module of seven launches (o_gemv_ffn_int4.py): on the emulator each
launch's output bit for bit the kernels' models chained, and host/run.py --layer-module on an AWQ checkpoint
and a Q4_K_M GGUF file against a float reference of the layer."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest
from ml_dtypes import bfloat16

from int4awq.errors import ConfigError
from int4awq.formats.weights_file import GGUF_PROJECTIONS, HF_PROJECTIONS
from int4awq.formats.quant import random_activations, random_weights
from int4awq.kernel import eltwise_model as em
from int4awq.kernel import record
from int4awq.kernel.kernel_model import build_eltwise_kernel, kernel_gemv_model
from int4awq.run.reference import dequantize
from int4_packed_record import GemvConfig

from host_args import REPO, run

sys.path.insert(
    0, os.path.join(REPO, "tests", "formats")
)  # the checkpoint writers of the format tests

E, H = (
    512,
    1024,
)  # the smallest hidden / intermediate sizes whose GEMVs fill 32 PEs at tile_n 16


def gemv(k, n, **kw):
    return GemvConfig(m=1, k=k, n=n, gs=128, tile_n=16, tile_k_l1=128, **kw)


def u16(x):
    return np.asarray(x).view(np.uint16)


def test_every_launch_is_the_model_bit_for_bit():
    sys.path.insert(0, os.path.join(REPO, "emulator"))
    from air.backend.xrt import XRTBackend

    import o_gemv_ffn_int4 as builder
    from int4awq.design.design import build_host_kernel

    # o_proj and down share the n16 object; gate_up's n32 tile is a second object, its entries prefixed
    cfg = builder.LayerConfig.named(
        gemv(E, E),
        GemvConfig(m=1, k=E, n=2 * H, gs=128, tile_n=32, tile_k_l1=128),
        gemv(H, E),
    )
    assert [g.symbol_prefix for g in cfg.gemvs] == ["", "k1_", ""]
    libs = {build_host_kernel(g) for g in cfg.gemvs} | {
        str(build_eltwise_kernel().parent)
    }
    os.environ["AIR_EMU_LIB_PATH"] = os.pathsep.join(sorted(libs))
    attn, x = random_activations(1, E, 1), random_activations(1, E, 2)
    norm_w = (1 + 0.1 * np.random.default_rng(3).standard_normal((1, E))).astype(
        bfloat16
    )
    w_o, w_gu, w_d = (
        random_weights(k, n, 128, seed=s)
        for k, n, s in ((E, E, 4), (E, 2 * H, 5), (H, E, 6))
    )
    backend = XRTBackend(**builder.backend_options(cfg))
    invoke = backend.compile_and_load(builder.build_module(cfg))
    packed = [
        record.pack_weights(w, g.tile_n, g.tile_k_l1)
        for w, g in zip((w_o, w_gu, w_d), cfg.gemvs)
    ]
    rows = [np.zeros((1, n), bfloat16) for n in (E, E, E, 2 * H, H, E, E)]
    out = [
        np.asarray(o)
        for o in invoke(attn, x, packed[0], norm_w, packed[1], packed[2], *rows)
    ]
    proj = kernel_gemv_model(attn, w_o, 128)
    h = em.add(proj, x)
    normed = em.rms_norm(h[0], norm_w[0])[None]
    gu = kernel_gemv_model(normed, w_gu, 128)
    act = em.silu_mul(gu[0, :H], gu[0, H:])[None]
    d = kernel_gemv_model(act, w_d, 128)
    for i, want in zip(range(6, 13), (proj, h, normed, gu, act, d, em.add(d, h))):
        np.testing.assert_array_equal(u16(out[i].reshape(want.shape)), u16(want))
    assert backend.emu_resources.summary() == "resources: within limits"


def test_layer_config_refuses_shapes_that_do_not_chain():
    import o_gemv_ffn_int4 as builder

    with pytest.raises(
        ConfigError, match=r"down: M=1 K=512 N=512; the layer needs M=1 K=1024 N=512"
    ):
        builder.LayerConfig.named(gemv(E, E), gemv(E, 2 * H), gemv(E, E))
    with pytest.raises(ConfigError, match="one symbol prefix per distinct object"):
        builder.LayerConfig(
            gemv(E, E),
            gemv(E, 2 * H, symbol_prefix="k1_"),
            gemv(H, E, symbol_prefix="k1_"),
        )


# -------------------------------------------------------------------------------------- checkpoints
HEADS, KV_HEADS = 8, 2  # head_dim 64: q 512, k and v 128


def layer_shapes(e, h) -> list[tuple[int, int]]:
    """(K, N) of q, k, v, o, gate, up, down at hidden e, intermediate h and HEADS / KV_HEADS heads."""
    kv = e * KV_HEADS // HEADS
    return [(e, e), (e, kv), (e, kv), (e, e), (e, h), (e, h), (h, e)]


def awq_checkpoint(d, e=E, h=H):
    """One Llama-shaped decoder layer (hidden e, intermediate h; head_dim e / 8), AutoAWQ GEMM format, GS 128."""
    from test_checkpoints import (
        AWQ_CFG,
        awq_tensors,
        logical,
        st_bytes,
        write_safetensors,
    )

    shapes = dict(zip(HF_PROJECTIONS, layer_shapes(e, h)))
    tensors = {}
    for i, (name, (k, n)) in enumerate(shapes.items()):
        tensors |= awq_tensors(
            *logical(k, n, 128, seed=30 + i), prefix=f"model.layers.0.{name}"
        )
    rng = np.random.default_rng(40)
    for norm in ("input_layernorm", "post_attention_layernorm"):
        tensors[f"model.layers.0.{norm}.weight"] = st_bytes(
            1 + 0.1 * rng.standard_normal(e), "BF16"
        )
    d.mkdir(parents=True)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "quantization_config": AWQ_CFG | {"group_size": 128},
    }
    (d / "config.json").write_text(json.dumps(config))
    write_safetensors(d / "model.safetensors", tensors)
    return d


def q4_k_m_file(path, e=E, h=H):
    """The same layer as a Q4_K_M GGUF file keeps it: attn_v and ffn_down in Q6_K, the rest Q4_K (small
    positive scales, so the layer's values stay in a model's range)."""
    import gguf

    from test_gguf_quants import TYPES, raw_blocks

    rng = np.random.default_rng(41)
    # Q4_K_M's types: attn_v and ffn_down in Q6_K, the rest Q4_K
    kinds = dict(
        zip(GGUF_PROJECTIONS, ["Q4_K"] * 2 + ["Q6_K"] + ["Q4_K"] * 3 + ["Q6_K"])
    )
    shapes = dict(zip(GGUF_PROJECTIONS, layer_shapes(e, h)))
    small = lambda shape: (2.0 ** rng.uniform(-14, -11, shape)).astype(
        "<f2"
    )  # noqa: E731
    tensors = {
        f"blk.0.{p}.weight": (
            raw_blocks(kind, *shapes[p], TYPES[kind][2], rng, fp16=small),
            kind,
        )
        for p, kind in kinds.items()
    }
    for norm in ("attn_norm", "ffn_norm"):
        tensors[f"blk.0.{norm}.weight"] = (
            (1 + 0.1 * rng.standard_normal(e)).astype(np.float32),
            None,
        )
    out = gguf.GGUFWriter(str(path), "llama")
    out.add_head_count(HEADS)
    out.add_head_count_kv(KV_HEADS)
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


def run_layer(path) -> tuple[int, str, str]:
    """host/run.py --layer-module on layer 0 of path, on the emulator (make aircc-check compiles the module)."""
    return run(
        "--weights",
        str(path),
        "--decoder-layer",
        "0",
        "--layer-module",
        "--backend",
        "emu",
        "--no-compile",
    )


def layer_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("layer 0 ")]


@pytest.mark.parametrize("kind", ["awq", "q4_k_m"])
def test_layer_module_runs_a_checkpoint_layer(tmp_path, kind):
    path = (
        awq_checkpoint(tmp_path / "awq")
        if kind == "awq"
        else q4_k_m_file(tmp_path / "l.gguf")
    )
    code, out, err = run_layer(path)
    assert code == 0, out + err
    lines = layer_lines(out)
    # each launch against float64 of the inputs it read, then the layer against the float layer
    assert [line.split()[2] for line in lines] == [
        "o_proj",
        "residual",
        "rms_norm",
        "gate",
        "up",
        "swiglu",
        "down",
        "residual2",
        "layer",
    ]
    assert all(line.endswith("PASS") for line in lines), out
    assert "one dispatch of 7 launches" in out and out.rstrip().endswith("PASS!")
    if (
        kind == "q4_k_m"
    ):  # Q4_K o_proj and gate/up, Q6_K down: two kernel objects in one module
        assert "INT4_MIN_BF16 GEMV" in out and "INT8_TRIPLE GEMV" in out


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--layer-module"],
            "--layer-module runs a decoder layer's o_proj and FFN: it needs",
        ),
        (
            ["--decoder-layer", "0", "--layer-module", "--m", "2"],
            "cannot be combined with --m 2",
        ),
        (
            ["--decoder-layer", "0", "--layer-module", "--fused"],
            "cannot be combined with --fused",
        ),
    ],
)
def test_layer_module_bad_options_are_one_line(tmp_path, args, message):
    code, out, err = run("--weights", str(tmp_path), *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_a_checkpoint_without_its_heads_is_one_line(tmp_path):
    d = awq_checkpoint(tmp_path / "awq")
    cfg = json.loads((d / "config.json").read_text())
    del cfg["num_attention_heads"]
    (d / "config.json").write_text(json.dumps(cfg))
    code, out, err = run_layer(d)
    assert code == 2 and "num_attention_heads None" in err, err


def test_a_layer_too_narrow_for_32_pes_is_one_line(tmp_path):
    path = q4_k_m_file(tmp_path / "narrow.gguf", 256, 512)
    code, out, err = run_layer(path)
    assert (
        code == 2
        and "hidden size 256, intermediate size 512" in err
        and "multiples of 512" in err
    ), err


def test_attention_at_position_0_is_each_query_heads_value():
    """One key: softmax is 1, so query head i outputs the value of key/value head i // (heads / kv_heads)."""
    from int4awq.run.decode_layer import attention_at_position_0

    w_v = random_weights(128, 4, 128, seed=7)  # two key/value heads of 2
    x = random_activations(1, 128, 8)
    norm = np.ones(128, np.float32)
    out = attention_at_position_0(x, norm, w_v, heads=4, kv_heads=2)
    xf = x.astype(np.float64)[0]
    v = (xf / np.sqrt(np.mean(xf * xf) + 1e-5)) @ dequantize(w_v).astype(np.float64)
    np.testing.assert_allclose(
        out[0], [v[0], v[1], v[0], v[1], v[2], v[3], v[2], v[3]], rtol=1e-12
    )


def test_the_builder_prints_llama_layer_module():
    import subprocess

    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "o_gemv_ffn_int4.py"), "-p"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("air.launch") == 7
    # AWQ: o_proj and down on one object, gate_up's 128-column tile on a second, its entries prefixed
    assert (
        "@k1_gemv_int4_accumulate" in proc.stdout
        and "@gemv_int4_accumulate" in proc.stdout
    )
    assert "@rms_norm_bf16" in proc.stdout and "@silu_mul_bf16" in proc.stdout
