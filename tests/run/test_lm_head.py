# SPDX-License-Identifier: MIT
"""The LM head on the GEMV (issue 53): `--layer lm_head` finds the model's output projection however the
file holds it (GGUF output.weight or the tied token_embd.weight in their own type; a checkpoint's bf16
lm_head.weight or tied model.embed_tokens.weight quantised at load with --head-format awq), runs it on the
emulator with the vocabulary padded to whole launch iterations, and reports the greedy token and what the
rounding of a float head costs."""

from __future__ import annotations

import numpy as np
import pytest
from ml_dtypes import bfloat16

from host_args import run
from layer_files import VOCAB, awq_checkpoint, q4_k_m_file

from int4awq.formats.quant import dequantize, quantize_awq
from int4awq.formats.weights_file import load_head


def run_head(path, *more):
    return run(
        "--weights",
        str(path),
        "--layer",
        "lm_head",
        "--m",
        "3",
        "--backend",
        "emu",
        "--no-compile",
        *more,
    )


@pytest.mark.parametrize("head", ["float", "tied"])
def test_a_float_head_runs_quantised_at_load_with_its_rounding_reported(tmp_path, head):
    code, out, err = run_head(
        awq_checkpoint(tmp_path / "ckpt", head=head), "--head-format", "awq"
    )
    assert code == 0, out + err
    lines = out.splitlines()
    source = (
        "lm_head.weight"
        if head == "float"
        else "model.embed_tokens.weight (tied: the token embedding)"
    )
    assert lines[0].startswith(
        f"LM head {source}: float K=512 N={VOCAB}, quantised at load to AWQ int4 g128"
    )
    assert "relative RMS error of the weights" in lines[0]
    assert any(
        line.startswith("GEMV M=3 K=512 N=1024") for line in lines
    )  # padded to 32 x 32 columns
    assert "top-1 token      3 of 3 rows as the float64 reference's" in lines
    assert any(
        line.startswith(
            "head rounding    the float head's logits against the quantised head's"
        )
        for line in lines
    )
    assert lines[-1] == "PASS!"


def test_the_quantised_head_is_autoawqs_rounding_of_the_files_tensor(tmp_path):
    """load_head's weights: quant.quantize_awq (AutoAWQ's round-to-nearest with zero points, g128) of the
    bf16 tensor as safetensors reads it, transposed to [hidden, vocab]."""
    from safetensors.numpy import load_file

    d = awq_checkpoint(tmp_path / "ckpt", head="float")
    w, _, dense = load_head(d, "awq")
    raw = load_file(str(d / "model.safetensors"))["lm_head.weight"].astype(np.float32).T
    want = quantize_awq(np.ascontiguousarray(raw), 128)
    assert np.array_equal(dense, raw)
    assert np.array_equal(w.q, want.q) and np.array_equal(w.z, want.z)
    assert np.array_equal(w.s.view(np.uint16), want.s.view(np.uint16))
    assert (
        np.abs(dequantize(w) - raw).max() <= float(np.abs(raw).max()) / 15
    )  # within a step of its group


@pytest.mark.parametrize(
    "head, name", [("output", "output.weight"), ("tied", "token_embd.weight")]
)
def test_a_gguf_head_runs_in_its_own_type(tmp_path, head, name):
    code, out, err = run_head(q4_k_m_file(tmp_path / "m.gguf", head=head))
    assert code == 0, out + err
    lines = out.splitlines()
    tied = " (tied: the token embedding)" if head == "tied" else ""
    assert (
        lines[0]
        == f"LM head{tied}: {name}: GGUF Q6_K K=512 N={VOCAB}: value = v * s, scales as exact bf16 parts (format int8_triple) (exact)"
    )
    assert "top-1 token      3 of 3 rows as the float64 reference's" in lines
    assert (
        not any(line.startswith("head rounding") for line in lines)
        and lines[-1] == "PASS!"
    )


@pytest.mark.parametrize(
    "more, message",
    [
        ((), "the LM head lm_head.weight is a float tensor: give --head-format awq"),
        (
            ("--head-format", "awq", "--layer", "model.layers.0.mlp.up_proj"),
            "--head-format quantises the LM head",
        ),
    ],
)
def test_bad_head_options_are_one_line(tmp_path, more, message):
    d = awq_checkpoint(tmp_path / "ckpt", head="float")
    code, out, err = run(
        "--weights", str(d), "--layer", "lm_head", "--m", "1", "--backend", "emu", *more
    )
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, (
        out + err
    )
