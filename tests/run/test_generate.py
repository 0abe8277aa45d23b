# SPDX-License-Identifier: MIT
"""host/generate.py (issue 53): text from synthetic Llama files (2 layers, hidden 512, a small trained
tokenizer, written by layer_files with gguf's writer and as an AutoAWQ directory), checked against float64,
its decode step against the layer modules on the emulator, and its refusals."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest
from ml_dtypes import bfloat16

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(TESTS)
sys.path[:0] = [REPO, TESTS, os.path.join(TESTS, "formats"), os.path.join(REPO, "host")]

import generate as cli  # noqa: E402  (host/generate.py)
from layer_files import awq_checkpoint, q4_k_m_file  # noqa: E402

from int4awq.formats.fuse import fuse_columns  # noqa: E402
from int4awq.formats.quant import random_activations  # noqa: E402
from int4awq.formats.weights_file import random_format_weights  # noqa: E402
from int4awq.kernel.kernel_model import PreparedWeights, kernel_gemm_model  # noqa: E402
from int4awq.run import generate as gen  # noqa: E402

E, H = 512, 1024


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A Q4_K_M GGUF file (8 key/value heads: its Q6_K v alone is a GEMV of 512 columns) and an AutoAWQ
    directory (4 key/value heads: q, k and v fuse to 1024 columns), each with the tokenizer and a tied
    embedding."""
    d = tmp_path_factory.mktemp("models")
    return {
        "gguf": q4_k_m_file(
            d / "m.gguf", E, H, 2, "tied", tokenizer=True, kv_heads=8, centered=True
        ),
        "awq": awq_checkpoint(
            d / "awq", E, H, 2, "tied", tokenizer=True, kv_heads=4, trained=True
        ),
    }


@pytest.mark.parametrize(
    "fmt, gs",
    [
        ("awq", 128),
        ("awq_f16", 128),
        ("int4_min", 32),
        ("int8_min", 32),
        ("int8_triple", 16),
    ],
)
@pytest.mark.parametrize("tile_k", [32, 256])
def test_prepared_weights_are_the_kernel_model_bit_for_bit(fmt, gs, tile_k):
    w = random_format_weights(fmt, 512, 48, gs, 3)
    for m in (1, 5):
        a = random_activations(m, 512, 7 + m)
        want = kernel_gemm_model(a, w, tile_k).view(np.uint16)
        assert np.array_equal(PreparedWeights(w)(a, tile_k).view(np.uint16), want)


def run(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("kind", ["gguf", "awq"])
def test_generate_check_passes_and_streams_text(files, capsys, kind):
    head = ["--head-format", "awq"] if kind == "awq" else []
    code, out, err = run(
        capsys,
        "--model",
        files[kind],
        "--prompt",
        "Hello world",
        "--tokens",
        8,
        "--check",
        *head,
    )
    assert code == 0, out + err
    lines = out.splitlines()
    assert lines[-1] == "PASS!"
    steps = [line for line in lines if line.startswith("step ")]
    assert len(steps) == 8 and all(line.endswith("PASS") for line in steps)
    text = lines[lines.index(next(x for x in lines if x.startswith("prefill:"))) + 1]
    assert text.startswith("Hello world")
    assert "backend, wall time here" in out and "MODELLED on NPU2" in out


def test_top_k_1_sampling_is_greedy(files, capsys):
    greedy = run(
        capsys, "--model", files["gguf"], "--prompt", "Hello world", "--tokens", 4
    )[1]
    sampled = run(
        capsys,
        "--model",
        files["gguf"],
        "--prompt",
        "Hello world",
        "--tokens",
        4,
        "--temperature",
        0.8,
        "--top-k",
        1,
        "--seed",
        5,
    )[1]
    text = [out.splitlines()[4] for out in (greedy, sampled)]
    assert text[0] == text[1]


def test_the_decode_step_is_the_layer_modules_on_the_emulator(files):
    """One decode step of the model backend against o_gemv_ffn_int4's modules run on the emulator with
    the same inputs: the first (layer 0's norm, q, k, v, RoPE and attention), layer 0's (o_proj, the FFN,
    layer 1's norm, q, k, v, RoPE and attention) and the last one's (with the final norm and the head),
    every output bit for bit. The caches hold the three positions before the token, the rows from the
    token's on NaN: the attention launches take its own key and value from their q buffer.
    """
    from int4awq.design import layer
    from int4awq.formats import rope
    from int4awq.run.decode_layer import run_module

    builder = gen._builder()
    model = gen.Llama(str(files["gguf"]), None, 64)
    model.forward([422, 17, 99], 0, model.decode_tiles)  # three positions in the cache
    trace = {}
    model.forward([5], 3, model.decode_tiles, trace)
    table = rope.table(model.frequencies, 3)
    kv, d = model.kv_heads, model.d
    g = model.heads // kv
    ctx = builder.attention_q(
        np.zeros(model.heads * d), np.zeros(kv * d), np.zeros(kv * d), 3, kv
    )

    def cache(i):  # layer i's cache as it stands before the token's dispatch
        k, v = model.cache_k[i].copy(), model.cache_v[i].copy()
        k[3:], v[3:] = np.nan, np.nan
        return builder.attention_cache(k, v)

    def attention_side(got, i):
        """The q buffer's parts and the launch's output against layer i's trace."""
        qa = got["q_attn"].reshape(kv, -1)
        for name, part, want in (
            ("q", qa[:, : g * d], trace[(i, "q")]),
            ("k", qa[:, g * d : g * d + d], trace[(i, "k")]),
            ("v", qa[:, g * d + d : g * d + 2 * d], trace[(i, "v")]),
            ("attn", got["attn_next"], trace[(i, "attn")]),
        ):
            a = np.asarray(part).reshape(-1).view(np.uint16)
            assert np.array_equal(a, np.asarray(want).reshape(-1).view(np.uint16)), (
                i,
                name,
            )

    qkv = run_module(
        model.qkv_cfg,
        layer.module_buffers(
            model.qkv_cfg,
            {
                f"w_qkv{r}": fuse_columns([model.layers[0].weights[j] for j in run_])
                for r, run_ in enumerate(model.layers[0].qkv_runs)
            },
            {
                "x": trace[(0, "x")],
                "attn_norm": model.layers[0].attn_norm.astype(bfloat16)[None],
                "rope_table": table,
                "kv_cache": cache(0),
                "q_attn": ctx,
            },
        ),
        "emu",
        False,
    )
    attention_side(
        {n: np.asarray(qkv[k]) for k, (n, _) in enumerate(model.qkv_cfg.buffers())}, 0
    )
    for i, cfg in enumerate(model.module_cfgs):
        ly, last = model.layers[i], i + 1 == len(model.layers)
        w = ly.weights
        weights = {
            "w_o": w[gen.O],
            "w_gate_up": fuse_columns([w[gen.GATE], w[gen.UP]]),
            "w_down": w[gen.DOWN],
        }
        given = {
            "attn": trace[(i, "attn")],
            "x": trace[(i, "x")],
            "ffn_norm": ly.ffn_norm.astype(bfloat16)[None],
        }
        if last:
            weights["w_head"] = model.head
            given["final_norm"] = model.final_norm.astype(bfloat16)[None]
        else:
            nxt = model.layers[i + 1]
            for r, run_ in enumerate(nxt.qkv_runs):
                weights[f"w_qkv{r}"] = fuse_columns([nxt.weights[j] for j in run_])
            given["next_norm"] = nxt.attn_norm.astype(bfloat16)[None]
            given["rope_table"] = table
            given["kv_cache"], given["q_attn"] = cache(i + 1), ctx
        bufs = run_module(cfg, layer.module_buffers(cfg, weights, given), "emu", False)
        got = {name: np.asarray(bufs[k]) for k, (name, _) in enumerate(cfg.buffers())}

        def same(name, want):
            a = got[name].reshape(-1)[: want.size].view(np.uint16)
            assert np.array_equal(a, np.asarray(want).reshape(-1).view(np.uint16)), name

        same("out", trace[(i, "out")])
        if last:
            same("logits", trace["logits"])
        else:
            attention_side(got, i + 1)


def test_the_attention_is_the_attention_launch_on_the_emulator(files):
    """The decode step's attention (layer 0, 4 positions in the cache) against the attention launch on the
    emulator reading the model's own KV cache, bit for bit."""
    from int4awq.kernel.kernel_model import build_eltwise_kernel

    builder = (
        gen._builder()
    )  # puts the emulator's air package on the path where mlir-air is absent
    from air.backend.xrt import XRTBackend

    model = gen.Llama(str(files["awq"]), "awq", 64)
    trace = {}
    model.forward([422, 17, 99], 0, model.decode_tiles)
    model.forward([5], 3, model.decode_tiles, trace)
    heads, kv, d = model.heads, model.kv_heads, model.d
    g = heads // kv
    # position 3 (the fourth token): three cache rows, the token's own key and value in the q buffer
    qbuf = builder.attention_q(
        trace[(0, "q")], model.cache_k[0][3], model.cache_v[0][3], 3, kv
    )
    cached_k, cached_v = model.cache_k[0].copy(), model.cache_v[0].copy()
    cached_k[3:], cached_v[3:] = np.nan, np.nan
    os.environ["AIR_EMU_LIB_PATH"] = str(build_eltwise_kernel().parent)
    run = XRTBackend(**builder.attention_backend_options()).compile_and_load(
        builder.build_attention_module(heads, kv, d, model.context)
    )
    out = run(
        qbuf,
        builder.attention_cache(cached_k, cached_v),
        np.zeros((1, heads * d), bfloat16),
    )
    got = np.asarray(out[2]).reshape(-1).view(np.uint16)
    assert np.array_equal(got, trace[(0, "attn")].reshape(-1).view(np.uint16))


def _mistral(src, dst):
    import shutil

    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    (dst / "config.json").write_text(
        json.dumps(cfg | {"architectures": ["MistralForCausalLM"]})
    )
    return dst


@pytest.mark.parametrize(
    "case, message",
    [
        ("arch", "only Llama's (LlamaForCausalLM) runs as a whole model"),
        ("context", "past the context of 64 positions"),
        ("odd_context", "context 40 (a multiple of 64"),
        ("no_tokenizer", "tokenizer.json"),
        ("float_head", "give --head-format awq"),
        ("backend", "--backend tpu: generate runs on"),
        ("tokens", "--tokens 0: at least 1"),
        ("no_embedding", "tensor 'token_embd.weight' not found"),
    ],
)
def test_bad_input_is_one_line(files, capsys, tmp_path, case, message):
    model, extra = files["awq"], ["--head-format", "awq"]
    if case == "arch":
        model = _mistral(files["awq"], tmp_path / "mistral")
    elif case == "no_tokenizer":
        model = awq_checkpoint(tmp_path / "bare", E, H, 1, "tied", kv_heads=4)
    elif case == "float_head":
        extra = []
    elif (
        case == "no_embedding"
    ):  # an output head and no token_embd (every real GGUF file has one)
        model = q4_k_m_file(
            tmp_path / "o.gguf", E, H, 1, "output", tokenizer=True, kv_heads=8
        )
        extra = []
    extra += {
        "context": ["--max-context", 64, "--tokens", 70],
        "odd_context": ["--max-context", 40],
        "backend": ["--backend", "tpu"],
        "tokens": ["--tokens", 0],
    }.get(case, [])
    code, out, err = run(capsys, "--model", model, "--prompt", "Hi", *extra)
    assert code == 2, out + err
    assert len(err.strip().splitlines()) == 1 and message in err, err


@pytest.mark.parametrize(
    "kind, per_dispatch, dispatches",
    [("awq", 0, 3), ("awq", 1, 2), ("awq", 2, 1), ("gguf", 2, 1)],
)
def test_the_emu_backend_is_the_model_backend_bit_for_bit(
    files, kind, per_dispatch, dispatches
):
    """Two tokens (after a prompt of two) through every dispatch on the emulator: one a module, one a
    layer (the first module with layer 0; the second dispatch's hidden row and attention output the
    first's), or the whole token as one module (the GGUF file's: Q4_K and Q6_K records in buffers of their
    own); and through the model backend's decode step: the same logits bit for bit at every step, hence
    the same tokens, and the same KV cache.
    """
    head = "awq" if kind == "awq" else None
    model = gen.Llama(str(files[kind]), head, 64)
    emu = gen.Dispatches(
        model, "emu", compile_first=False, layers_per_dispatch=per_dispatch
    )
    assert len(emu.cfgs) == dispatches
    twin = gen.Llama(str(files[kind]), head, 64)
    tokens = [422, 17]
    for pos in range(4):
        got, want = emu.step(tokens[pos], pos), twin.decode_step(tokens[pos], pos)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), pos
        tokens.append(int(np.argmax(want)))
    assert np.array_equal(model.cache_k[1][:4], twin.cache_k[1][:4])
    assert np.array_equal(model.cache_v[1][:4], twin.cache_v[1][:4])


def test_the_emulators_prefill_runs_the_gemm_design_bit_for_bit_as_the_model(files):
    """Dispatches.prefill on the emulator: each layer's projections through the GEMM design (q, k, v
    fused, gate with up) at M = the prompt's length: the logits and the KV cache the model backend's
    prefill gives, bit for bit; the next token's dispatch (which places the whole cache the prefill left)
    is the model's decode step."""
    model = gen.Llama(str(files["awq"]), "awq", 64)
    emu = gen.Dispatches(model, "emu", compile_first=False)
    twin = gen.Llama(str(files["awq"]), "awq", 64)
    prompt = [422, 17, 9]
    lines = []
    got, want = emu.prefill(prompt, lines.append), twin.prefill(prompt)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert lines == [f"prefill: layer {i} of 2, its GEMMs on emu ..." for i in (1, 2)]
    for i in range(2):
        assert np.array_equal(model.cache_k[i][:3], twin.cache_k[i][:3])
        assert np.array_equal(model.cache_v[i][:3], twin.cache_v[i][:3])
    got, want = emu.step(5, 3), twin.decode_step(5, 3)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("per_dispatch", [None, 1, 4])
def test_the_npu_backend_keeps_each_dispatchs_buffers_on_the_device(
    tmp_path, monkeypatch, per_dispatch
):
    """The npu backend's dispatches through stand-ins for mlir-air's XRTBackend (each loaded module's
    kernel the emulator) and pyxrt (its device memory apart from the host's: tests/pyxrt_stand_in.py).
    A 4-layer model is 5 dispatches of 3 distinct modules at one module a dispatch (None: layers 0 to 2 alike), 4 of 3 at one
    layer a dispatch (the middle two alike), and 1 at 4 layers a dispatch: each distinct module compiled
    and loaded once, unloaded at close. Over 3 tokens the
    logits and the KV caches are the model backend's bit for bit; after the first token no weight, norm
    or intermediate is written again, each layer's cache takes its two new rows (key and value) and
    nothing more, and only the named outputs are read back."""
    import types

    from pyxrt_stand_in import FROM, TO, Kernel, Xrt

    from int4awq.design import layer
    from int4awq.run import decode_layer, npu

    path = awq_checkpoint(tmp_path / "awq4", E, H, 4, "tied", kv_heads=4, trained=True)
    loads, unloads, xrt = [], [], Xrt()

    class Backend:
        device = "npu"

        def __init__(self, kernel):
            self.kernel = kernel

        def unload(self):
            unloads.append(self)

    def load_on_npu(module, options, build_dir, gemvs=()):
        sys.path.insert(0, os.path.join(REPO, "emulator"))
        from air.backend.xrt import XRTBackend

        os.environ["AIR_EMU_LIB_PATH"] = layer.host_libraries(
            types.SimpleNamespace(launch_gemvs=gemvs)
        )
        loads.append(build_dir)
        return Backend(Kernel(XRTBackend(**options).compile_and_load(module))), None

    monkeypatch.setattr(decode_layer, "load_on_npu", load_on_npu)
    monkeypatch.setattr(npu, "_pyxrt", lambda: xrt)
    model = gen.Llama(str(path), "awq", 64)
    dev = gen.Dispatches(model, "npu", layers_per_dispatch=per_dispatch)
    for call, bufs in zip(dev.calls, dev.buffers):
        call.backend.kernel.protos = bufs
    twin = gen.Llama(str(path), "awq", 64)
    assert len(dev.cfgs) == {None: 5, 1: 4, 4: 1}[per_dispatch]
    assert len(loads) == len(set(dev.cfgs)) == {None: 3, 1: 3, 4: 1}[per_dispatch]
    row = model.kv_heads * model.d * 2  # bytes of a cache row
    for pos, tok in enumerate([422, 17, 9]):
        xrt.log.clear()
        got, want = dev.step(tok, pos), twin.decode_step(tok, pos)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), pos
        if pos == 0:
            continue
        to = {
            (c, i): [n for bo, d, _, n in xrt.log if d == TO and bo == call.bos[i].id]
            for c, call in enumerate(dev.calls)
            for i in range(len(call.bos))
        }
        assert not any(to[c, i] for c, call in enumerate(dev.calls) for i in call.once)
        assert sum(
            sum(to[c, i]) for c, call in enumerate(dev.calls) for i in call.partial
        ) == (4 * 2 * row)
        read = [bo for bo, d, _, _ in xrt.log if d == FROM]
        assert len(read) == sum(len(call.read) for call in dev.calls)
        # what make bench prints a token (host_transfers) is what was moved
        once, written, back = gen.host_transfers(dev.cfgs, 4, model.kv_heads * model.d)
        assert sum(n for _, d, _, n in xrt.log if d == TO) == written
        assert sum(n for _, d, _, n in xrt.log if d == FROM) == back
    for i in range(4):
        assert np.array_equal(model.cache_k[i][:3], twin.cache_k[i][:3])
        assert np.array_equal(model.cache_v[i][:3], twin.cache_v[i][:3])
    dev.close()
    assert len(unloads) == len(loads)


@pytest.mark.slow
def test_the_sim_backend_is_the_model_backend_bit_for_bit(files):
    """Two tokens through the token's dispatch as aircc + aiecc compile it (the first module and both
    layers' in one module), in the simulator of the compiled design (run twice on one array, equal),
    against the model backend's decode step: the same logits bit for bit."""
    import compiler_tools

    compiler_tools.require()
    model = gen.Llama(str(files["gguf"]), None, 64)
    sim = gen.Dispatches(model, "sim")
    twin = gen.Llama(str(files["gguf"]), None, 64)
    for pos, tok in enumerate([422, 17]):
        got, want = sim.step(tok, pos), twin.decode_step(tok, pos)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), pos
    # the two layers and the head in one dispatch (generate's default: 4 layers a dispatch)
    assert len(sim.cfgs) == 1 and len(sim.timed) == 1


def test_a_check_step_names_how_near_a_differing_top1_was():
    """compare(): our top-1 (index 1) is not the reference's (index 0), whose logits put them 0.5 apart;
    the same top-1 needs no gap."""
    differ = gen.compare(3, np.array([1.0, 2.0, 0.5]), np.array([3.0, 2.5, 0.0]))
    assert not differ.same_top1 and not differ.passed
    assert differ.gap == 0.5
    assert "top-1 NOT the float64 reference's (by 0.5 in the reference's logits)" in (
        differ.line()
    )
    same = gen.compare(4, np.array([1.0, 2.0, 0.5]), np.array([1.0, 2.0, 0.5001]))
    assert same.passed and "(by" not in same.line()


def test_the_npu_prefill_loads_its_configurations_module_and_runs_its_buffers(
    files, monkeypatch
):
    """decode_layer.run_gemm on the npu backend, through a stand-in for load_on_npu (here the emulator's
    XRTBackend on the module it is given): C is the emulator's run of the same configuration, the module
    is loaded from the configuration's own folder with its kernel object, and unloaded after the run.
    """
    from air.backend.xrt import XRTBackend

    from int4awq.formats.fuse import fuse_columns
    from int4awq.run import decode_layer

    model = gen.Llama(str(files["awq"]), "awq", 64)
    ly = model.layers[0]
    cfg, _ = model.prefill_gemms(3)[0][gen.GATE]
    w = fuse_columns([ly.weights[gen.GATE], ly.weights[gen.UP]])
    a = random_activations(3, w.k, 7)
    want = decode_layer.run_gemm(cfg, a, w, "emu", False)
    loads, unloads = [], []

    class Loaded:
        def unload(self):
            unloads.append(self)

    def load_on_npu(module, options, build_dir, gemvs=(), kernels=None):
        from air.backend.xrt import (
            XRTBackend,
        )  # the emulator's (run_gemm's emu run put it first)

        loads.append((build_dir, kernels))
        return Loaded(), XRTBackend(**options).compile_and_load(module)

    monkeypatch.setattr(decode_layer, "load_on_npu", load_on_npu)
    got = decode_layer.run_gemm(cfg, a, w, "npu", False)
    assert got.shape == (3, w.n) and np.array_equal(
        got.view(np.uint16), want.view(np.uint16)
    )
    assert loads == [
        (os.path.join(REPO, "build", "npu", "prefill", cfg.name), [cfg.kernel])
    ]
    assert len(unloads) == 1


def test_a_dispatch_refuses_rows_the_host_does_not_give_every_token(files):
    """The npu backend writes only generate.GIVEN's buffers and the caches after the first token, so a
    dispatch given any other row (a norm here) refuses it rather than let the device keep a stale one.
    """
    model = gen.Llama(str(files["awq"]), "awq", 64)
    emu = gen.Dispatches(model, "emu", compile_first=False)
    rows = [{} for _ in emu.cfgs[0].modules]
    rows[0]["ffn_norm"] = np.zeros(E)
    with pytest.raises(
        ValueError, match="rows the host does not give every token: \\['ffn_norm'\\]"
    ):
        emu.dispatch(0, rows)
