# SPDX-License-Identifier: MIT
"""A decoder layer's projections fused along N at load time (int4awq.formats.fuse): q, k and v as one run and
gate and up as one, in every format; each projection's columns checked against its own reference.
"""

import numpy as np
import pytest

from int4awq.errors import ConfigError
from int4awq.formats.fuse import fusable_runs, fuse_columns, offsets
from int4awq.formats.weights_file import random_format_weights
from int4awq.run.reference import dequantize

from test_checkpoints import awq_tensors, logical, write_dir
from test_gguf_quants import Q4_K_M_LAYER, TYPES, raw_blocks, run, write


@pytest.mark.parametrize("fmt", ["awq", "awq_f16", "int4_min", "int8_triple", "mxfp4"])
def test_a_fused_weight_is_its_parts_side_by_side(fmt):
    gs = {"awq": 128, "awq_f16": 128, "int8_triple": 16}.get(fmt, 32)
    parts = [
        random_format_weights(fmt, 256, n, gs, seed=i)
        for i, n in enumerate((64, 32, 96))
    ]
    fused = fuse_columns(parts)
    assert (fused.k, fused.n, fused.format) == (256, 192, fmt)
    got = dequantize(fused)
    for part, off in zip(parts, offsets(parts)):
        np.testing.assert_array_equal(got[:, off : off + part.n], dequantize(part))


def test_parts_of_different_types_run_apart():
    q4k = random_format_weights("int4_min", 256, 64, 32, seed=1)
    q6k = random_format_weights("int8_triple", 256, 64, 16, seed=2)
    assert fusable_runs([q4k, q4k, q6k]) == [[0, 1], [2]]
    assert fusable_runs([q4k, q6k, q4k]) == [[0], [1], [2]]
    with pytest.raises(
        ConfigError, match="cannot fuse a .* with a .*: one kernel object"
    ):
        fuse_columns([q4k, q6k])


def decoder_lines(out: str, prefix: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(prefix)]


def test_a_q4_k_m_decoder_layer_runs_fused_where_its_types_allow(tmp_path):
    """Q4_K_M keeps attn_v in Q6_K here: q and k run as one GEMV, v alone; gate and up as one."""
    rng = np.random.default_rng(26)
    tensors = {
        "token_embd.weight": (rng.standard_normal((8, 256)).astype(np.float32), None)
    }
    for proj, (kind, k, n) in Q4_K_M_LAYER.items():
        tensors[f"blk.0.{proj}.weight"] = (
            raw_blocks(kind, k, n, TYPES[kind][2], rng),
            kind,
        )
    path = write(tmp_path / "toy-q4_k_m.gguf", tensors)
    code, out, err = run(
        "--weights", str(path), "--decoder-layer", "0", "--m", "1", "--backend", "emu", "--fused"
    )  # fmt: skip
    assert code == 0, out + err
    lines = decoder_lines(out, "blk.0.")
    assert len(lines) == 7 and all(line.endswith("PASS") for line in lines), out
    runs = {line.split()[0].split(".")[2]: line for line in lines}
    assert (
        "[one run of N=320]" in runs["attn_q"]
        and "[one run of N=320]" in runs["attn_k"]
    )
    assert "one run" not in runs["attn_v"] and "GEMV" in runs["attn_v"]
    assert (
        "[one run of N=1024]" in runs["ffn_gate"]
        and "[one run of N=1024]" in runs["ffn_up"]
    )
    assert out.splitlines()[-1] == "PASS!"


def test_an_awq_decoder_layer_runs_qkv_and_gate_up_as_one_run_each(tmp_path):
    shapes = {
        "self_attn.q_proj": (128, 128),
        "self_attn.k_proj": (128, 64),
        "self_attn.v_proj": (128, 64),
        "self_attn.o_proj": (128, 128),
        "mlp.gate_proj": (128, 256),
        "mlp.up_proj": (128, 256),
        "mlp.down_proj": (256, 128),
    }
    tensors = {}
    for i, (proj, (k, n)) in enumerate(shapes.items()):
        tensors.update(
            awq_tensors(
                *logical(k, n, 64, seed=40 + i), prefix=f"model.layers.0.{proj}"
            )
        )
    d = write_dir(
        tmp_path / "awq",
        tensors,
        {"quant_method": "awq", "bits": 4, "group_size": 64, "version": "gemm"},
    )
    code, out, err = run(
        "--weights", str(d), "--decoder-layer", "0", "--m", "2", "--backend", "emu", "--fused"
    )  # fmt: skip
    assert code == 0, out + err
    lines = decoder_lines(out, "model.layers.0.")
    assert len(lines) == 7 and all(line.endswith("PASS") for line in lines), out
    assert sum("[one run of N=256]" in line for line in lines) == 3  # q, k, v
    assert sum("[one run of N=512]" in line for line in lines) == 2  # gate, up


def test_fused_without_a_decoder_layer_is_refused_in_one_line():
    code, out, err = run("--m", "4", "--k", "128", "--n", "64", "--fused")
    assert code == 2 and err.strip().splitlines() == [
        "error: --fused fuses a decoder layer's projections: it needs --weights PATH --decoder-layer L"
    ]
