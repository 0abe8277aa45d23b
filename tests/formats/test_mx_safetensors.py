# SPDX-License-Identifier: MIT
"""MXFP4 safetensors checkpoints (int4awq/formats/mx_safetensors.py) through the one weights-file interface
(int4awq/formats/weights_file.py), on files made by the formats' own libraries:

* compressed-tensors mxfp4-pack-quantized: tensors from the package's MXFP4PackedCompressor.compress, the
  config from its QuantizationConfig; the loaded weights equal MXFP4PackedCompressor.decompress exactly;
* gpt-oss experts: blocks and scales in the checkpoint's layout; one expert's weights equal transformers'
  convert_moe_packed_tensors (the dequantiser transformers loads gpt-oss with) exactly;
* both run through host/run.py on the emulator (PASS) and --save writes those weights;
* AMD Quark: an OCP_MXFP4Spec export made by Quark, equal to Quark's own unpacking (where amd-quark is
  installed);
* bad input (a missing or wrong expert, a Quark export of another type, a NaN scale) is one line, exit 2.

The compressed-tensors and gpt-oss checkpoints and the libraries' dequantisations are committed in
tests/fixtures/ (made by `make fixtures`, tests/fixtures/PROVENANCE.md): these tests need neither torch,
compressed-tensors nor transformers. The tests marked `formats` (`make test-formats`) make them again with
the libraries and check the fixtures are what they write; Quark's test is one of them.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import save_file

from int4awq.errors import ConfigError
from int4awq.formats.weights_file import list_layers, listing, load

from fixture_files import FIXTURES, generator, reference  # noqa: E402
from host_args import run

CT_LAYERS = {"model.layers.0.self_attn.q_proj": (128, 256), "lm_head": (64, 128)}
OSS_NAME = "model.layers.0.mlp.experts.down_proj"
E, K_OSS, N_OSS = (
    3,
    128,
    64,
)  # gpt-oss: experts, hidden (K of down_proj's GEMM here), outputs


@pytest.fixture(scope="module")
def ct_checkpoint():
    """The compressed-tensors MXFP4 checkpoint of CT_LAYERS: {layer: the package's own decompress [N, K]}."""
    refs = {
        name: reference(f"ct_mxfp4/{name}.bf16.npy").astype(np.float32)
        for name in CT_LAYERS
    }
    return FIXTURES / "ct_mxfp4", refs


@pytest.fixture(scope="module")
def oss_checkpoint():
    """A gpt-oss-layout checkpoint with one MXFP4 expert tensor: transformers' dequantisation [E, K, N]."""
    ref = reference(f"gpt_oss/{OSS_NAME}.bf16.npy").astype(np.float32)
    return FIXTURES / "gpt_oss", OSS_NAME, ref


@pytest.mark.parametrize("name", list(CT_LAYERS))
def test_compressed_tensors_layer_is_exactly_the_packages_decompression(
    ct_checkpoint, name
):
    d, refs = ct_checkpoint
    w, line = load(d, name)
    assert w.format == "mxfp4" and (w.n, w.k) == CT_LAYERS[name]
    assert np.array_equal(w.dequantize().T, refs[name])
    assert line.startswith(f"{name}: compressed-tensors MXFP4 K=")


def test_gpt_oss_expert_is_exactly_what_transformers_dequantises(oss_checkpoint):
    d, name, ref = oss_checkpoint
    for e in range(E):
        w, line = load(d, name, expert=e)
        assert (w.k, w.n) == (K_OSS, N_OSS) and f"expert {e}" in line
        assert np.array_equal(w.dequantize(), ref[e])


def test_list_layers_names_the_layouts(ct_checkpoint, oss_checkpoint):
    assert list_layers(ct_checkpoint[0]) == [  # in natural order
        "name                             type                      shape        status",
        "-------------------------------  ------------------------  -----------  ------",
        "lm_head                          compressed-tensors MXFP4  K=128 N=64   runs",
        "model.layers.0.self_attn.q_proj  compressed-tensors MXFP4  K=256 N=128  runs",
        "2 layers: 2 run",
    ]
    d, name, _ = oss_checkpoint
    rows = listing(d).rows
    assert [(r.name, r.type, r.shape, r.status) for r in rows] == [
        (
            name,
            "gpt-oss MXFP4",
            f"K={K_OSS} N={N_OSS} experts={E}",
            f"runs, one expert at a time (--expert 0 to {E - 1})",
        ),
        # the router is a float weight [E, K]: listed, not read
        (
            "model.layers.0.mlp.router",
            "F32",
            f"K={K_OSS} N={E}",
            "not read (F32: a float weight, the kernel takes quantised ones)",
        ),
    ]
    assert list_layers(d)[-1] == "2 layers: 1 runs, 1 not read"


@pytest.mark.parametrize("which", ["ct", "oss"])
def test_host_program_runs_the_layer_and_saves_its_weights(
    ct_checkpoint, oss_checkpoint, tmp_path, which
):
    if which == "ct":
        d, refs = ct_checkpoint
        name = "model.layers.0.self_attn.q_proj"
        extra, ref = [], refs[name].T
    else:
        d, name, ref3 = oss_checkpoint
        extra, ref = ["--expert", "2"], ref3[2]
    code, out, err = run(
        "--weights", str(d), "--layer", name, *extra, "--m", "24",
        "--backend", "emu", "--save", str(tmp_path / "out"),
    )  # fmt: skip
    assert code == 0, out + err
    assert out.splitlines()[1].startswith("MXFP4 M=") and "PASS!" in out
    assert np.array_equal(np.load(tmp_path / "out" / "w_dequant.npy"), ref)


@pytest.mark.slow
def test_a_decoder_layer_of_an_mxfp4_checkpoint_runs_a_line_per_projection():
    # the seven projections of decoder layer 1, q k v o [64, 64], gate and up [N, K] = [128, 64], down [64, 128]
    d = FIXTURES / "ct_mxfp4_decoder"
    code, out, err = run(
        "--weights", str(d), "--decoder-layer", "1", "--m", "16", "--backend", "emu"
    )  # fmt: skip
    assert code == 0, out + err
    lines = [line for line in out.splitlines() if line.startswith("model.layers.1.")]
    assert len(lines) == 7 and all(line.endswith("PASS") for line in lines)


def test_bad_input_is_one_line_exit_2(ct_checkpoint, oss_checkpoint, tmp_path):
    ct, _ = ct_checkpoint
    oss, name, _ = oss_checkpoint
    quark = tmp_path / "quark"  # a Quark int4 export: only its MXFP4 exports are read
    quark.mkdir()
    save_file(
        {"l.weight": np.zeros((4, 16), np.uint8)}, str(quark / "model.safetensors")
    )
    spec = {"dtype": "int4", "qscheme": "per_group", "group_size": 32}
    (quark / "config.json").write_text(
        json.dumps(
            {
                "quantization_config": {
                    "quant_method": "quark",
                    "global_quant_config": {"weight": spec},
                }
            }
        )
    )
    for args, says in [
        (["--weights", str(oss), "--layer", name], "holds 3 experts: give --expert E"),
        (["--weights", str(oss), "--layer", name, "--expert", "3"], "has experts 0 to 2"),
        (["--weights", str(ct), "--layer", "lm_head", "--expert", "0"], "not a tensor of experts"),
        (["--weights", str(ct), "--layer", "nope"], "layer 'nope' not found"),
        (["--weights", str(quark), "--layer", "l"], "weight.dtype = 'int4': Quark exports are read when"),
        (["--m", "4", "--k", "64", "--n", "64", "--expert", "1"], "--expert needs --weights"),
    ]:  # fmt: skip
        code, out, err = run(*args, "--m", "8", "--backend", "emu")
        assert code == 2 and says in err and len(err.strip().splitlines()) == 1, (
            args,
            out + err,
        )


def test_a_nan_scale_is_refused_at_load_and_in_the_list(tmp_path):
    d = tmp_path / "nan"
    d.mkdir()
    scales = np.full((16, 2), 127, np.uint8)
    scales[3, 1] = 255
    save_file(
        {
            "l.weight_packed": np.zeros((16, 32), np.uint8),
            "l.weight_scale": scales,
            "l.bias": np.zeros(16, np.float32),
            "norm.weight": np.ones(64, np.float32),
        },
        str(d / "model.safetensors"),
    )  # no config: the U8 tensors say MXFP4
    # scales [N, K/32] = [16, 2]: row 3 is output column 3, its second byte group 1
    why = "MXFP4 scale byte 255 (group 1, column 3) is not supported: NaN"
    with pytest.raises(ConfigError) as e:
        load(d, "l")
    assert str(e.value) == f"layer l: {why}"
    assert list_layers(d)[2:] == [
        f"l     compressed-tensors MXFP4  K=64 N=16  does not run: {why}",
        "1 layer: 1 refused at load (its status says why); not listed: 2 1-D tensors",
    ]


def test_a_gpt_oss_expert_with_a_nan_scale_is_named_in_the_list(tmp_path):
    rng = np.random.default_rng(4)
    scales = rng.integers(118, 126, (E, N_OSS, K_OSS // 32), dtype=np.uint8)
    scales[1, 5, 2] = 255  # expert 1, output 5, group 2
    save_file(
        {
            "experts.down_proj_blocks": np.zeros((E, N_OSS, K_OSS // 32, 16), np.uint8),
            "experts.down_proj_scales": scales,
        },
        str(tmp_path / "model.safetensors"),
    )
    why = "MXFP4 scale byte 255 (group 2, column 5) is not supported: NaN"
    [row] = listing(tmp_path).rows
    assert row.status == (
        f"runs, one expert at a time (--expert 0 to {E - 1}), except expert 1: {why}"
    )
    assert load(tmp_path, "experts.down_proj", expert=0)[0].k == K_OSS
    with pytest.raises(ConfigError) as e:
        load(tmp_path, "experts.down_proj", expert=1)
    assert str(e.value) == f"layer experts.down_proj: {why}"


def test_a_format_an_mxfp4_checkpoint_is_not_is_refused(ct_checkpoint):
    d, _ = ct_checkpoint
    code, out, err = run(
        "--weights", str(d), "--layer", "lm_head", "--m", "8", "--format", "awq"
    )
    assert code == 2 and err.strip() == (
        f"error: --format awq does not match --weights {d}: lm_head is a compressed-tensors MXFP4 "
        "layer, which runs as --format mxfp4; leave --format out (the file decides)"
    ), (out + err)


# ---------------------------------------------------------------------------------------------- formats
# With the libraries themselves (make test-formats).


@pytest.mark.formats
@pytest.mark.parametrize("name", list(CT_LAYERS))
def test_compressed_tensors_layer_is_the_packages_decompression_made_now(
    tmp_path, name
):
    import torch  # noqa: F401  (the test needs it installed: make test-formats)
    import compressed_tensors  # noqa: F401  (the test needs it installed: make test-formats)

    refs = generator().write_ct_mxfp4(tmp_path, CT_LAYERS)
    w, _ = load(tmp_path, name)
    assert np.array_equal(w.dequantize().T, refs[name].float().numpy())


@pytest.mark.formats
def test_gpt_oss_expert_is_what_transformers_dequantises_now(tmp_path):
    import torch  # noqa: F401  (the test needs it installed: make test-formats)
    import transformers  # noqa: F401  (the test needs it installed: make test-formats)

    ref = generator().write_gpt_oss(tmp_path).float().numpy()
    assert ref.shape == (E, K_OSS, N_OSS)
    for e in range(E):
        assert np.array_equal(
            load(tmp_path, OSS_NAME, expert=e)[0].dequantize(), ref[e]
        )


@pytest.mark.formats
@pytest.mark.parametrize("name", ["ct_mxfp4", "ct_mxfp4_decoder", "gpt_oss"])
def test_the_committed_fixture_is_what_the_libraries_write(tmp_path, name):
    import torch  # noqa: F401  (the test needs it installed: make test-formats)
    import compressed_tensors  # noqa: F401  (the test needs it installed: make test-formats)
    import transformers  # noqa: F401  (the test needs it installed: make test-formats)

    fx = generator()
    fx.make(name, tmp_path)
    assert fx.differences(FIXTURES, tmp_path, name) == [], "run `make fixtures`"


@pytest.mark.formats
def test_quark_export_is_exactly_what_quark_unpacks(tmp_path):
    """An AMD Quark OCP_MXFP4Spec export of a small random Llama, made by Quark itself, against Quark's own
    Pack_fp4.unpack times its E8M0 scales. Runs where amd-quark is installed (not in requirements-formats.txt:
    it needs onnx, pandas and a C++ JIT build, about 40 s here); skipped elsewhere."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("quark.torch")  # amd-quark is not in requirements-formats.txt
    from quark.torch import ModelQuantizer, export_safetensors
    from quark.torch.quantization.config.config import (
        Config,
        OCP_MXFP4Spec,
        QLayerConfig,
    )
    from quark.torch.utils.pack import Pack_fp4
    from safetensors.torch import load_file
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        vocab_size=64,
    )
    model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    spec = OCP_MXFP4Spec(ch_axis=-1, is_dynamic=False).to_quantization_spec()
    quantizer = ModelQuantizer(
        Config(global_quant_config=QLayerConfig(weight=spec), exclude=["lm_head"])
    )
    model = quantizer.freeze(quantizer.quantize_model(model, None))
    export_safetensors(model, str(tmp_path))
    tensors = load_file(str(tmp_path / "model.safetensors"))
    rows = listing(
        tmp_path
    ).rows  # the seven projections, then the unquantised lm_head and embeddings
    assert [r.type for r in rows[:7]] == ["quark MXFP4"] * 7
    assert all(r.status == "runs" for r in rows[:7])
    assert all(r.status.startswith("not read (BF16: a float weight") for r in rows[7:])
    for name in ("model.layers.0.mlp.down_proj", "model.layers.0.self_attn.q_proj"):
        values = Pack_fp4("per_group", "fp4").unpack(tensors[f"{name}.weight"], False)
        scale = 2.0 ** (tensors[f"{name}.weight_scale"].to(torch.int16) - 127).float()
        ref = (values * scale.repeat_interleave(32, dim=1)).numpy()
        w, _ = load(tmp_path, name)
        assert np.array_equal(w.dequantize(), ref.T)
