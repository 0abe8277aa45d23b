# SPDX-License-Identifier: MIT
"""GGUF files read through the gguf package (int4awq/gguf_file.py), on files written by gguf itself: an MXFP4
tensor loads as exactly the weights gguf.quants dequantises, runs through the host program and saves them;
every other type, a missing tensor and a damaged file are one line and exit 2."""

import os
import subprocess
import sys

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as Q  # noqa: E402

from int4awq.errors import ConfigError  # noqa: E402
from int4awq.gguf_file import list_gguf_layers, load_gguf_layer  # noqa: E402

from host_args import REPO, RUN  # noqa: E402

K, N = 256, 128


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A GGUF file written by gguf: an MXFP4 and a Q4_0 projection and an f32 norm."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((N, K)) / 16).astype(
        np.float32
    )  # ggml rows: one per output n
    mx = gguf.quants.quantize(w, Q.MXFP4)
    path = tmp_path_factory.mktemp("gguf") / "model.gguf"
    out = gguf.GGUFWriter(str(path), "llama")
    out.add_tensor("blk.0.attn_q.weight", mx, raw_dtype=Q.MXFP4)
    out.add_tensor(
        "blk.0.attn_k.weight", gguf.quants.quantize(w, Q.Q4_0), raw_dtype=Q.Q4_0
    )
    out.add_tensor("blk.0.attn_norm.weight", np.ones(K, np.float32))
    out.write_header_to_file()
    out.write_kv_data_to_file()
    out.write_tensors_to_file()
    out.close()
    return path, gguf.quants.dequantize(mx, Q.MXFP4)  # gguf's own [N, K] f32


def run(*args):
    res = subprocess.run(
        [sys.executable, RUN, *args], capture_output=True, text=True, cwd=REPO
    )
    return res.returncode, res.stdout, res.stderr


def test_mxfp4_tensor_is_exactly_what_gguf_dequantises(model):
    path, ref = model
    w = load_gguf_layer(path, "blk.0.attn_q.weight")
    assert (w.k, w.n) == (K, N) and np.array_equal(w.dequantize().T, ref)


def test_list_names_every_2d_tensor_with_its_type(model):
    path, _ = model
    layers = {
        t.name: (t.type_name, t.k, t.n, t.readable) for t in list_gguf_layers(path)
    }
    assert layers == {
        "blk.0.attn_q.weight": ("MXFP4", K, N, True),
        "blk.0.attn_k.weight": ("Q4_0", K, N, False),
    }


def test_host_program_runs_the_layer_and_saves_ggufs_weights(model, tmp_path):
    path, ref = model
    code, out, err = run(
        "--weights",
        str(path),
        "--layer",
        "blk.0.attn_q.weight",
        "--m",
        "40",
        "--backend",
        "emu",
        "--save",
        str(tmp_path / "out"),
    )
    assert code == 0, out + err
    assert (
        "GGUF MXFP4 K=256 N=128" in out
        and out.splitlines()[1].startswith("MXFP4 M=")
        and "PASS!" in out
    )
    assert np.array_equal(np.load(tmp_path / "out" / "w_dequant.npy"), ref.T)


@pytest.mark.parametrize(
    "layer, message",
    [
        (
            "blk.0.attn_k.weight",
            "GGUF Q4_0 is not read yet: its fp16 scales are not bf16",
        ),
        (
            "blk.0.attn_norm.weight",
            "GGUF F32 [256] is not read: MXFP4 2-D weights only so far",
        ),
        ("blk.9.ffn_up.weight", "tensor 'blk.9.ffn_up.weight' not found"),
    ],
)
def test_what_is_not_an_mxfp4_weight_is_one_line_exit_2(model, layer, message):
    path, _ = model
    code, out, err = run(
        "--weights", str(path), "--layer", layer, "--m", "8", "--backend", "emu"
    )
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, (
        out + err
    )


def test_a_truncated_file_is_one_line(model, tmp_path):
    path, _ = model
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[:200])
    with pytest.raises(ConfigError, match="not a readable GGUF file"):
        load_gguf_layer(cut, "blk.0.attn_q.weight")
    code, out, err = run(
        "--weights", str(cut), "--layer", "blk.0.attn_q.weight", "--m", "8"
    )
    assert code == 2 and len(err.strip().splitlines()) == 1, out + err
