# SPDX-License-Identifier: MIT
"""GGUF files read through the gguf package (int4awq/formats/gguf_file.py), on files written by gguf itself: MXFP4,
Q4_0 and Q4_1 tensors load as exactly the weights gguf.quants dequantises, run through the host program and save
them (tests/formats/test_gguf_quants.py has every block-integer type); a type not read, a missing tensor and a damaged
file are one line and exit 2."""

import numpy as np
import pytest

import gguf  # noqa: E402  (a required dependency: requirements.txt)
from gguf import GGMLQuantizationType as Q  # noqa: E402

from int4awq.errors import ConfigError  # noqa: E402
from int4awq.formats.gguf_file import list_gguf_layers, load_gguf_layer  # noqa: E402
from int4awq.formats.quant import AwqWeights, dequantize  # noqa: E402

from host_args import run  # noqa: E402

K, N = 256, 128


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A GGUF file written by gguf: MXFP4, Q4_0 and Q4_1 projections and an f32 norm. The Q4_0 weights have
    an all-zero block (d = 0) and, as gguf's quantiser makes them, about half of their scales negative.
    """
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((N, K)) / 16).astype(
        np.float32
    )  # ggml rows: one per output n
    mx = gguf.quants.quantize(w, Q.MXFP4)
    w0 = w.copy()
    w0[5, 32:64] = 0
    q40 = gguf.quants.quantize(w0, Q.Q4_0)
    q41 = gguf.quants.quantize(w, Q.Q4_1)
    path = tmp_path_factory.mktemp("gguf") / "model.gguf"
    out = gguf.GGUFWriter(str(path), "llama")
    out.add_tensor("blk.0.attn_q.weight", mx, raw_dtype=Q.MXFP4)
    out.add_tensor("blk.0.attn_k.weight", q40, raw_dtype=Q.Q4_0)
    out.add_tensor("blk.0.attn_v.weight", q41, raw_dtype=Q.Q4_1)
    out.add_tensor("blk.0.attn_norm.weight", np.ones(K, np.float32))
    out.write_header_to_file()
    out.write_kv_data_to_file()
    out.write_tensors_to_file()
    out.close()
    return path, {  # gguf's own dequantisation, [N, K] f32
        "blk.0.attn_q.weight": gguf.quants.dequantize(mx, Q.MXFP4),
        "blk.0.attn_k.weight": gguf.quants.dequantize(q40, Q.Q4_0),
        "blk.0.attn_v.weight": gguf.quants.dequantize(q41, Q.Q4_1),
    }


def test_mxfp4_tensor_is_exactly_what_gguf_dequantises(model):
    path, ref = model
    w = load_gguf_layer(path, "blk.0.attn_q.weight")
    assert w.format == "mxfp4" and (w.k, w.n) == (K, N)
    assert np.array_equal(w.dequantize().T, ref["blk.0.attn_q.weight"])


def test_q4_0_tensor_is_exactly_what_gguf_dequantises(model):
    path, ref = model
    w = load_gguf_layer(path, "blk.0.attn_k.weight")
    assert w.format == "awq_f16" and (w.k, w.n, w.gs) == (K, N, 32)
    assert np.array_equal(dequantize(w).T, ref["blk.0.attn_k.weight"])
    # the file's scales really need the pair: their bf16 roundings alone give other weights
    assert np.count_nonzero(w.s_lo.astype(np.float32)) > w.s_lo.size // 2
    assert not np.array_equal(
        dequantize(AwqWeights(w.q, w.z, w.s, w.gs)), dequantize(w)
    )
    # negative scales went into the codes (zero point 7), the zero block is codes 8 with zero point 8
    assert 0 < np.count_nonzero(w.z == 7) < w.z.size and set(np.unique(w.z)) == {7, 8}
    assert np.all(w.q[32:64, 5] == 8) and w.z[1, 5] == 8


def test_list_names_every_2d_tensor_with_its_type(model):
    path, _ = model
    layers = {t.name: (t.type_name, t.k, t.n, t.runs) for t in list_gguf_layers(path)}
    assert layers == {
        "blk.0.attn_q.weight": ("MXFP4", K, N, True),
        "blk.0.attn_k.weight": ("Q4_0", K, N, True),
        "blk.0.attn_v.weight": ("Q4_1", K, N, True),
    }


@pytest.mark.parametrize(
    "layer, kind, fmt",
    [
        ("blk.0.attn_q.weight", "MXFP4", "MXFP4"),
        ("blk.0.attn_k.weight", "Q4_0", "AWQ_F16"),
        ("blk.0.attn_v.weight", "Q4_1", "INT4_MIN"),
    ],
)
def test_host_program_runs_the_layer_and_saves_ggufs_weights(
    model, tmp_path, layer, kind, fmt
):
    """Each type exactly as the file holds it (Q4_1 with --format int4_min: its default is the fast mode,
    tests/formats/test_gguf_quants.py)."""
    path, ref = model
    exact = ("--format", "int4_min") if kind == "Q4_1" else ()
    code, out, err = run(
        "--weights",
        str(path),
        "--layer",
        layer,
        "--m",
        "40",
        "--backend",
        "emu",
        *exact,
        "--save",
        str(tmp_path / "out"),
    )
    assert code == 0, out + err
    assert (
        f"GGUF {kind} K=256 N=128" in out
        and out.splitlines()[1].startswith(f"{fmt} M=")
        and "PASS!" in out
    )
    assert np.array_equal(np.load(tmp_path / "out" / "w_dequant.npy"), ref[layer].T)


@pytest.mark.parametrize(
    "layer, message",
    [
        (
            "blk.0.attn_norm.weight",
            "GGUF F32 [256] is not read: 2-D weights only",
        ),
        ("blk.9.ffn_up.weight", "tensor 'blk.9.ffn_up.weight' not found"),
    ],
)
def test_what_is_not_a_weight_read_is_one_line_exit_2(model, layer, message):
    path, _ = model
    code, out, err = run(
        "--weights", str(path), "--layer", layer, "--m", "8", "--backend", "emu"
    )
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, (
        out + err
    )


@pytest.mark.slow
def test_a_q4_0_decoder_layer_runs_a_line_per_projection(tmp_path):
    """blk.1's seven projections, as llama.cpp names them, written by gguf as Q4_0 (hidden 64, FFN 128)."""
    rng = np.random.default_rng(2)
    path = tmp_path / "layer.gguf"
    out = gguf.GGUFWriter(str(path), "llama")
    h, f = 64, 128
    shapes = dict(attn_q=(h, h), attn_k=(h, h), attn_v=(h, h), attn_output=(h, h))
    shapes.update(ffn_gate=(f, h), ffn_up=(f, h), ffn_down=(h, f))  # (N, K)
    for proj, (n, k) in shapes.items():
        w = (rng.standard_normal((n, k)) / 16).astype(np.float32)
        q = gguf.quants.quantize(w, Q.Q4_0)
        out.add_tensor(f"blk.1.{proj}.weight", q, raw_dtype=Q.Q4_0)
    out.write_header_to_file()
    out.write_kv_data_to_file()
    out.write_tensors_to_file()
    out.close()
    code, stdout, err = run(
        "--weights", str(path), "--decoder-layer", "1", "--m", "16", "--backend", "emu"
    )  # fmt: skip
    assert code == 0, stdout + err
    lines = [line for line in stdout.splitlines() if line.startswith("blk.1.")]
    assert [line.split()[0] for line in lines] == [
        f"blk.1.{p}.weight" for p in shapes
    ] and all(line.endswith("PASS") for line in lines)


def test_a_file_cut_inside_its_header_is_one_line(model, tmp_path):
    path, _ = model
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[:200])
    says = (
        f"{cut}: not a readable GGUF file: its header runs past the end of the file (200 bytes; "
        "cut short?)"
    )
    with pytest.raises(ConfigError) as e:
        load_gguf_layer(cut, "blk.0.attn_q.weight")
    assert str(e.value) == says
    for args in (["--layer", "blk.0.attn_q.weight", "--m", "8"], ["--list-layers"]):
        code, out, err = run("--weights", str(cut), *args)
        assert code == 2 and err.strip() == f"error: {says}", out + err


def test_a_file_that_is_not_gguf_is_one_line(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"PK\x03\x04" + bytes(60))
    code, out, err = run("--weights", str(bad), "--list-layers")
    assert code == 2 and err.strip() == (
        f"error: {bad}: not a GGUF file (64 bytes; a GGUF file begins with the bytes 'GGUF')"
    ), (out + err)


# Bytes of a block (ggml-common.h: block_mxfp4 is e and 16 bytes, block_q4_0 an fp16 d and 16 bytes,
# block_q4_1 fp16 d, fp16 m and 16 bytes).
MXFP4_BLOCK, Q4_0_BLOCK, Q4_1_BLOCK = 17, 18, 20


def test_a_file_cut_in_its_data_still_lists_and_names_the_cut_tensor(model, tmp_path):
    """A download that stopped early: the header parses, the last tensor (the f32 norm, K * 4 bytes) and
    the end of the one before it (Q4_1) are missing. The list says so per tensor; loading the cut tensor is
    one line with the bytes found and expected, never numpy's words."""
    path, _ = model
    cut = tmp_path / "cut.gguf"
    data = path.read_bytes()
    cut.write_bytes(data[: len(data) - 4 * K - 100])  # the norm and 100 bytes of attn_v
    q4_1 = N * (K // 32) * Q4_1_BLOCK
    code, out, err = run("--weights", str(cut), "--list-layers")
    assert code == 0, out + err
    rows = {line.split()[0]: line for line in out.splitlines()}
    assert rows["blk.0.attn_v.weight"].endswith(
        f"  not read (cut short: {q4_1 - 100} of its {q4_1} bytes are in the file)"
    )
    assert rows["blk.0.attn_q.weight"].endswith("  runs")
    assert (
        out.splitlines()[-1] == "3 tensors: 2 run, 1 not read; not listed: 1 1-D tensor"
    )
    says = (
        f"blk.0.attn_v.weight: GGUF Q4_1 [{K}, {N}]: {q4_1 - 100} bytes of data in the file, expected "
        f"{q4_1} ({N} rows of {K // 32} {Q4_1_BLOCK}-byte blocks): a truncated file?"
    )
    with pytest.raises(ConfigError) as e:
        load_gguf_layer(cut, "blk.0.attn_v.weight")
    assert str(e.value) == says
    code, out, err = run(
        "--weights", str(cut), "--layer", "blk.0.attn_v.weight", "--m", "8"
    )
    assert code == 2 and err.strip() == f"error: {says}", out + err
    # the whole tensors before the cut are still read
    assert load_gguf_layer(cut, "blk.0.attn_q.weight").k == K


def test_list_layers_is_a_table_with_a_summary(model):
    path, _ = model
    code, out, err = run("--weights", str(path), "--list-layers")
    assert code == 0, out + err
    assert out.splitlines() == [
        "name                 type   shape        status",
        "-------------------  -----  -----------  ------",
        "blk.0.attn_q.weight  MXFP4  K=256 N=128  runs",
        "blk.0.attn_k.weight  Q4_0   K=256 N=128  runs",
        "blk.0.attn_v.weight  Q4_1   K=256 N=128  runs",
        "3 tensors: 3 run; not listed: 1 1-D tensor",
    ]


def test_a_scale_the_loader_refuses_does_not_list_as_running(tmp_path):
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((N, K)) / 16).astype(np.float32)
    mx = gguf.quants.quantize(w, Q.MXFP4).reshape(N, K // 32, MXFP4_BLOCK)
    mx[7, 2, 0] = 255  # e of column 7's third block: NaN
    q40 = gguf.quants.quantize(w, Q.Q4_0).reshape(N, K // 32, Q4_0_BLOCK)
    q40[5, 1, :2] = np.array([np.inf], "<f2").view(
        np.uint8
    )  # d of column 5's second block
    path = tmp_path / "nan.gguf"
    out = gguf.GGUFWriter(str(path), "llama")
    out.add_tensor("nan.weight", mx.reshape(N, -1), raw_dtype=Q.MXFP4)
    out.add_tensor("inf.weight", q40.reshape(N, -1), raw_dtype=Q.Q4_0)
    out.write_header_to_file()
    out.write_kv_data_to_file()
    out.write_tensors_to_file()
    out.close()
    code, stdout, err = run("--weights", str(path), "--list-layers")
    assert code == 0, stdout + err
    lines = stdout.splitlines()
    nan = "MXFP4 scale byte 255 (group 2, column 7) is not supported: NaN"
    inf = "block [1, 5] has scale d = inf: not finite"
    assert lines[2].startswith("nan.weight") and lines[2].endswith(
        f"does not run: {nan}"
    )
    assert lines[3].startswith("inf.weight") and lines[3].endswith(
        f"does not run: {inf}"
    )
    assert lines[-1] == "2 tensors: 2 refused at load (their status says why)"
    assert [t.runs for t in list_gguf_layers(path)] == [False, False]
    for name, why in (("nan.weight", nan), ("inf.weight", inf)):  # what the run says
        code, stdout, err = run("--weights", str(path), "--layer", name, "--m", "8")
        assert code == 2 and err.strip() == f"error: {name}: {why}", stdout + err


@pytest.mark.parametrize(
    "layer, given, kind, gives",
    [
        ("blk.0.attn_k.weight", "awq", "Q4_0", "awq_f16"),
        ("blk.0.attn_k.weight", "mxfp4", "Q4_0", "awq_f16"),
        ("blk.0.attn_q.weight", "awq_f16", "MXFP4", "mxfp4"),
    ],
)
def test_a_format_the_tensor_is_not_is_refused(model, layer, given, kind, gives):
    path, _ = model
    code, out, err = run(
        "--weights", str(path), "--layer", layer, "--m", "8", "--format", given
    )
    assert code == 2 and err.strip() == (
        f"error: --format {given} does not match --weights {path}: {layer} is a GGUF {kind} tensor, "
        f"which runs as --format {gives}; leave --format out (the file decides)"
    ), (out + err)
