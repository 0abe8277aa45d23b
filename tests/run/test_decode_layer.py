# SPDX-License-Identifier: MIT
"""A decoder layer's o_proj + FFN as one module of seven launches (o_gemv_ffn_int4.py): on the emulator each
launch's output bit for bit the kernels' models chained, and host/run.py --layer-module on an AWQ checkpoint
and a Q4_K_M GGUF file against a float reference of the layer."""

from __future__ import annotations

import json
import types
import os
import sys

import numpy as np
import pytest
from ml_dtypes import bfloat16

from int4awq.errors import ConfigError
from int4awq.formats.quant import random_activations, random_weights
from int4awq.formats import rope
from int4awq.kernel import eltwise_model as em
from int4awq.kernel import record
from int4awq.kernel.kernel_model import kernel_gemv_model
from int4awq.run.reference import dequantize
from int4_packed_record import GemvConfig, LayerConfig

from host_args import REPO, run
from layer_files import E, H, awq_checkpoint, q4_k_m_file


def gemv(k, n, **kw):
    return GemvConfig(m=1, k=k, n=n, gs=128, tile_n=16, tile_k_l1=128, **kw)


def u16(x):
    return np.asarray(x).view(np.uint16)


@pytest.mark.parametrize("with_next", [False, True, "head"])
def test_every_launch_is_the_model_bit_for_bit(with_next):
    """Each launch's output bit for bit the kernels' models chained; with_next: the module also ends with
    the next layer's attention norm, a q, k, v GEMV (a third kernel object, tile 32 x 64) and the RoPE of
    its q and k (8 query and 4 key/value heads of 64, at position 77); "head": the last layer's, ending with
    the final norm and an LM head of 1000 columns (padded to 1024, the same object as o_proj's).
    """
    sys.path.insert(0, os.path.join(REPO, "emulator"))
    from air.backend.xrt import XRTBackend

    import o_gemv_ffn_int4 as builder
    from int4awq.design import layer

    # o_proj and down share the n16 object; gate_up's n32 tile is a second object, its entries prefixed
    head = with_next == "head"
    with_next = with_next is True
    nxt = (
        (GemvConfig(m=1, k=E, n=1024, gs=128, tile_n=32, tile_k_l1=64),)
        if with_next
        else ()
    )
    cfg = builder.LayerConfig.named(
        gemv(E, E),
        GemvConfig(m=1, k=E, n=2 * H, gs=128, tile_n=32, tile_k_l1=128),
        gemv(H, E),
        nxt,
        (64, 8, 4) if with_next else (),
        gemv(E, 1024) if head else None,
    )
    prefixes = ["", "k1_", ""] + (["k2_"] if with_next else []) + ([""] if head else [])
    assert [g.symbol_prefix for g in cfg.launch_gemvs] == prefixes
    os.environ["AIR_EMU_LIB_PATH"] = layer.host_libraries(cfg)
    rng = np.random.default_rng(3)
    given = {
        "attn": random_activations(1, E, 1),
        "x": random_activations(1, E, 2),
        "ffn_norm": (1 + 0.1 * rng.standard_normal((1, E))).astype(bfloat16),
        "next_norm": (1 + 0.1 * rng.standard_normal((1, E))).astype(bfloat16),
        "rope_table": rope.table(rope.base_frequencies(500000.0, 64), 77),
        "final_norm": (1 + 0.1 * rng.standard_normal((1, E))).astype(bfloat16),
    }
    weights = {
        name: random_weights(g.k, g.n, 128, seed=4 + i)
        for i, (name, g) in enumerate(
            zip(
                ["w_o", "w_gate_up", "w_down", "w_head" if head else "w_qkv0"],
                cfg.launch_gemvs,
            )
        )
    }
    if (
        head
    ):  # a vocabulary of 1000 columns, padded to the GEMV's 1024 with zero columns
        weights["w_head"] = random_weights(E, 1000, 128, seed=7)
    buffers = [
        (
            record.padded_operands(
                kind, np.zeros((1, kind.k), bfloat16), weights[name]
            )[1]
            if name in weights
            else given.get(name, np.zeros((1, kind), bfloat16))
        )
        for name, kind in cfg.buffers()
    ]
    backend = XRTBackend(**builder.backend_options(cfg))
    out = backend.compile_and_load(builder.build_module(cfg))(*buffers)
    got = {name: np.asarray(out[i]) for i, (name, _) in enumerate(cfg.buffers())}
    want = {"proj": kernel_gemv_model(given["attn"], weights["w_o"], 128)}
    want["h"] = em.add(want["proj"], given["x"])
    want["normed"] = em.rms_norm(want["h"][0], given["ffn_norm"][0])[None]
    want["gate_up"] = kernel_gemv_model(want["normed"], weights["w_gate_up"], 128)
    want["act"] = em.silu_mul(want["gate_up"][0, :H], want["gate_up"][0, H:])[None]
    want["down"] = kernel_gemv_model(want["act"], weights["w_down"], 128)
    want["out"] = em.add(want["down"], want["h"])
    if with_next:
        want["next_normed"] = em.rms_norm(want["out"][0], given["next_norm"][0])[None]
        want["qkv0"] = kernel_gemv_model(want["next_normed"], weights["w_qkv0"], 64)
        table = given["rope_table"][0]
        want["q_roped"] = em.rope(want["qkv0"][:, :512], table, 64)
        want["k_roped"] = em.rope(want["qkv0"][:, 512:768], table, 64)
    if head:
        want["final_normed"] = em.rms_norm(want["out"][0], given["final_norm"][0])[None]
        logits = kernel_gemv_model(want["final_normed"], weights["w_head"], 128)
        got["logits"] = got["logits"].reshape(1, -1)[:, :1000]  # the padding dropped
        want["logits"] = logits
    for name, value in want.items():
        np.testing.assert_array_equal(
            u16(got[name].reshape(value.shape)), u16(value), err_msg=name
        )
    assert backend.emu_resources.summary() == "resources: within limits"


def test_layer_config_refuses_shapes_that_do_not_chain():
    with pytest.raises(
        ConfigError, match=r"down: M=1 K=512 N=512; the layer needs M=1 K=1024 N=512"
    ):
        LayerConfig.named(gemv(E, E), gemv(E, 2 * H), gemv(E, E))
    with pytest.raises(
        ConfigError,
        match=r"next q, k, v GEMV 0: M=1 K=1024 N=512; the layer needs M=1 K=512",
    ):
        LayerConfig.named(gemv(E, E), gemv(E, 2 * H), gemv(H, E), (gemv(H, E),))
    with pytest.raises(ConfigError, match="one symbol prefix per distinct object"):
        LayerConfig(
            gemv(E, E),
            gemv(E, 2 * H, symbol_prefix="k1_"),
            gemv(H, E, symbol_prefix="k1_"),
        )


def test_the_token_module_lays_each_module_out_in_rows_of_its_buffers():
    """TokenConfig at Llama-3.2-1B's shapes, 3 layers: the hidden row chained (module j reads row
    max(j - 1, 0), writes row j), the attention's output row i read by layer i's o_proj, each layer's records
    after the previous layer's of the same shape (the head shares o_proj's: the same K-chunk and record),
    each layer's cache 2 x 1,024 rows after the previous layer's, one RoPE row for all.
    """
    from int4awq.design import layer

    t = layer.default_token(
        2048, 8192, 3, qkv=((3072, "awq", 128),), head=(128256, "awq", 128)
    )
    bufs = dict(t.buffers())
    assert bufs["hidden"] == (4, 2048) and bufs["attn_next"] == (3, 2048)
    assert bufs["kv_cache"] == (3 * 2048, 512) and bufs["rope_table"] == (1, 64)
    o, head = t.layers[0].o_proj, t.layers[2].head
    assert (
        bufs[f"records_{o.k_chunks}x{o.record_bytes}"].tiles
        == 3 * o.n_tiles + head.n_tiles
    )
    for j in range(4):
        refs = t.refs(j)
        assert refs["x"] == ("hidden", max(j - 1, 0))
        if j:
            assert refs["out"] == ("hidden", j) and refs["attn"] == ("attn_next", j - 1)
            assert refs["w_o"][1] == (j - 1) * o.n_tiles
        if j < 3:
            assert refs["rope_table"] == ("rope_table", 0)
            assert refs["kv_cache"] == ("kv_cache", 2048 * j)
            assert refs["attn_next"] == ("attn_next", j)
    assert t.refs(3)["w_head"][1] == 3 * o.n_tiles
    # the inputs come first: records, norms, the RoPE row, the caches; then what the launches write
    names = [n for n, _ in t.buffers()]
    assert names.index("kv_cache") < names.index("hidden") < names.index("logits")
    # across the token one name per distinct kernel object
    prefixes = {g.kernel: g.symbol_prefix for g in t.launch_gemvs}
    assert len(set(prefixes.values())) == len(prefixes)


def test_the_token_module_refuses_layers_that_do_not_chain():
    from dataclasses import replace

    from int4awq.design import layer
    from int4_packed_record import TokenConfig

    t = layer.default_token(
        2048, 8192, 2, qkv=((3072, "awq", 128),), head=(128256, "awq", 128)
    )
    with pytest.raises(ConfigError, match="at least one layer"):
        TokenConfig(t.first, ())
    # a dispatch of the first layers ends with the next layer's attention (TokenConfig.split)
    assert len(TokenConfig.named(t.first, (t.layers[0],)).modules) == 2
    with pytest.raises(ConfigError, match="first module must end with the attention"):
        TokenConfig.named(replace(t.first, context=512), t.layers)
    first, middle, last = TokenConfig.split(t.first, t.layers * 2 + t.layers[1:], 2)
    assert (first.first, middle.first, last.first) == (t.first, None, None)
    assert len(last.layers) == 1 and last.layers[0].head is not None
    with pytest.raises(ConfigError, match="layer 0 of the token module must end with"):
        TokenConfig.named(t.first, (t.layers[1], t.layers[1]))


# -------------------------------------------------------------------------------------- checkpoints
def run_layer(path, *more: str) -> tuple[int, str, str]:
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
        *more,
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
            ["--decoder-layer", "0", "--next-qkv"],
            "--next-qkv extends the decoder layer module: it needs",
        ),
        (
            ["--decoder-layer", "0", "--layer-module", "--fused"],
            "cannot be combined with --fused",
        ),
        (
            ["--decoder-layer", "0", "--layer-module", "--position", "3"],
            "--position 3: a non-negative position, with --next-qkv",
        ),
        (
            [
                "--decoder-layer",
                "0",
                "--layer-module",
                "--next-qkv",
                "--position",
                "-1",
            ],
            "--position -1: a non-negative position",
        ),
        (
            ["--decoder-layer", "0", "--layer-module", "--next-qkv", "--head"],
            "--head ends the last layer's module with the LM head: it needs --layer-module, without",
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
    """o_gemv_ffn_int4.py -p: Llama-3.2-1B's layer, each GEMV at its first legal configuration (o_proj,
    gate_up and down on one 64-column object); --next-qkv adds the norm, the q, k, v GEMV (its 32-column
    tile a second object, its entries prefixed) and the two RoPE launches."""
    import subprocess

    def printed(*more):
        proc = subprocess.run(
            [sys.executable, os.path.join(REPO, "o_gemv_ffn_int4.py"), "-p", *more],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    plain, chained = printed(), printed("--next-qkv")
    assert plain.count("air.launch") == 7 and chained.count("air.launch") == 11
    assert "@gemv_int4_accumulate" in plain and "@k1_gemv_int4_accumulate" not in plain
    assert "@rms_norm_bf16" in plain and "@silu_mul_bf16" in plain
    assert "@k1_gemv_int4_accumulate" in chained and "@rope_bf16" in chained


@pytest.mark.slow
def test_the_module_can_end_with_the_next_layers_qkv(tmp_path):
    """--next-qkv: the next layer's attention norm and q, k, v GEMVs join the module (hidden 2048, so that
    q, k and v fill 32 PEs: q 2048, k and v 512 each). A Q4_K_M file: q | k and v (its v is Q6_K), two
    GEMVs on kernel objects of their own; AWQ's single q, k, v GEMV is the bit-for-bit test's, and make
    aircc-check compiles it at Llama-3.2-1B's shapes. Then q and k rotated at position 1000 (the file's
    freq_base and rope_freqs divisors), each against float64 of the q and k the module wrote and of the chain.
    """
    path = q4_k_m_file(tmp_path / "l.gguf", 2048, 256, layers=2)
    code, out, err = run_layer(path, "--next-qkv", "--position", "1000")
    assert code == 0, out + err
    stages = [line.split()[2] for line in layer_lines(out)]
    # the layer's launches, then the next norm and q, k, v each against float64 of what their launch read,
    # then the layer and q, k, v against the float chain from x
    assert stages[8:] == ["next_norm", "next_q", "next_k", "next_v", "rope_q"] + [
        "rope_k",
        "layer",
        "layer>q",
        "layer>k",
        "layer>v",
        "layer>q_roped",
        "layer>k_roped",
    ], stages
    assert "one dispatch of 12 launches" in out and out.rstrip().endswith("PASS!")
    assert all(line.endswith("PASS") for line in layer_lines(out)), out


@pytest.mark.parametrize("kind", ["awq", "q4_k_m"])
def test_the_last_layers_module_can_end_with_the_lm_head(tmp_path, kind):
    """--head: the module ends with the final RMSNorm and the LM head (tied: the embedding; AWQ's bf16 one
    quantised at load, the GGUF's Q6_K as it is), nine launches; the norm and the head each against
    float64 of what their launch read, the logits against the float chain from x, and the greedy token.
    """
    path = (
        awq_checkpoint(tmp_path / "awq", head="tied")
        if kind == "awq"
        else q4_k_m_file(tmp_path / "l.gguf", head="tied")
    )
    code, out, err = run_layer(
        path, "--head", *(("--head-format", "awq") if kind == "awq" else ())
    )
    assert code == 0, out + err
    stages = [line.split()[2] for line in layer_lines(out) if "corr" in line]
    assert stages[7:] == [
        "residual2",
        "final_norm",
        "head",
        "layer",
        "layer>logits",
    ], stages
    assert "layer 0 top-1 token the same as the float chain's" in out
    assert "one dispatch of 9 launches" in out and out.rstrip().endswith("PASS!")
    assert out.splitlines()[0].startswith("LM head")


def test_next_qkv_without_a_next_layer_is_one_line(tmp_path):
    code, out, err = run_layer(awq_checkpoint(tmp_path / "awq"), "--next-qkv")
    assert code == 2 and "model.layers.1.self_attn.q_proj" in err, err
    assert len(err.strip().splitlines()) == 1, err


@pytest.mark.slow
def test_backend_sim_runs_the_compiled_module_and_times_its_launches(tmp_path):
    """--backend sim: the module as aircc + aiecc compiled it, in the simulator, timed launch by launch."""
    import compiler_tools

    compiler_tools.require()
    code, out, err = run(
        "--weights",
        str(awq_checkpoint(tmp_path / "awq")),
        "--decoder-layer",
        "0",
        "--layer-module",
        "--backend",
        "sim",
    )
    assert code == 0, out + err
    line = next(
        x for x in out.splitlines() if x.startswith("simulated the compiled module")
    )
    launches = (
        "o_proj",
        "residual",
        "rms_norm",
        "gate_up",
        "swiglu",
        "down",
        "residual2",
    )
    assert all(f"{name} " in line for name in launches), line
    assert "one dispatch of 7 launches (simulated" in out and out.rstrip().endswith(
        "PASS!"
    )


def test_a_module_compiled_for_the_npu_is_kept_and_loaded_without_compiling_again(
    tmp_path, monkeypatch
):
    """decode_layer.load_on_npu through a stand-in for mlir-air's XRTBackend (its compile writes an ELF in
    the working directory, as aircc does): the first call compiles and keeps the ELF under
    compiled/<key>/, a second with the same module and kernel objects loads the kept one without
    compiling, and a changed kernel object or module text compiles again."""
    from host_args import REPO

    sys.path.insert(0, os.path.join(REPO, "emulator"))
    import air.backend.xrt as xrt

    from int4awq.run import decode_layer

    obj = tmp_path / "k.o"
    obj.write_bytes(b"object 1")
    monkeypatch.setattr(decode_layer, "_peano_objects", lambda *args: [str(obj)])
    log = []

    class Backend:
        def __init__(self, **options):
            pass

        def compile(self, module):
            log.append(("compile", os.getcwd()))
            with open("air.elf", "w") as f:
                f.write(f"elf of {module}")
            return xrt.XRTCompileArtifact("air.elf", "main:m", "air.insts.bin")

        def load(self, artifact):
            with open(artifact.output_binary) as f:
                log.append(("load", artifact.output_binary, artifact.kernel, f.read()))
            return lambda *a: a

        def unload(self):
            pass

    monkeypatch.setattr(xrt, "XRTBackend", Backend)
    build = str(tmp_path / "build")
    for module in ("module A", "module A"):
        decode_layer.load_on_npu(module, {"output_format": "elf"}, build)
    obj.write_bytes(b"object 2")
    decode_layer.load_on_npu("module A", {"output_format": "elf"}, build)
    decode_layer.load_on_npu("module B", {"output_format": "elf"}, build)
    compiles = [e for e in log if e[0] == "compile"]
    loads = [e for e in log if e[0] == "load"]
    assert [c[1] for c in compiles] == [build] * 3
    assert [l[3] for l in loads] == ["elf of module A"] * 3 + ["elf of module B"]
    assert loads[0][1] == loads[1][1] != loads[2][1]  # kept, then a new key
    assert all(
        os.path.dirname(os.path.dirname(l[1])) == os.path.join(build, "compiled")
        and l[2] == "main:m"
        for l in loads
    )


def test_compile_once_keeps_a_compile_only_for_the_same_module_and_kernel_object(
    tmp_path, monkeypatch
):
    """air_run.compile_once (the bring-up ladder's and the kernel probes' NPU compiles): a second call for
    the same module and kernel object keeps the compile; an edited kernel object (or another module)
    compiles again, where it used to keep any air.xclbin it found."""
    from host_args import REPO

    sys.path.insert(0, os.path.join(REPO, "emulator"))
    from int4awq.run import air_run

    obj = tmp_path / "k.o"
    obj.write_bytes(b"object 1")
    monkeypatch.setattr(air_run, "peano_object", lambda name, args: str(obj))
    compiled = []

    def compile_only(cfg, module, options, build_dir):
        compiled.append(module)
        os.makedirs(build_dir, exist_ok=True)
        (tmp_path / "build" / "air.xclbin").write_text(module)
        return 0

    monkeypatch.setattr(air_run, "compile_only", compile_only)
    cfg = types.SimpleNamespace(
        name="probe", kernel_object="k.o", kernel=types.SimpleNamespace(make_args=list)
    )
    build = str(tmp_path / "build")
    for module in ("module A", "module A"):
        air_run.compile_once(cfg, lambda m=module: m, {}, build)
    obj.write_bytes(b"object 2")
    air_run.compile_once(cfg, lambda: "module A", {}, build)
    air_run.compile_once(cfg, lambda: "module B", {}, build)
    assert compiled == ["module A", "module A", "module B"]
