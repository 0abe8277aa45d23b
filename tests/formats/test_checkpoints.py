# SPDX-License-Identifier: MIT
"""Checkpoint import: fixtures written byte by byte from each format's definition, independently of the
importer (own safetensors writer, own packers running in the packing direction, own dequantisation from
the logical codes the fixture was built from)."""

import json
import struct

import numpy as np
import pytest
from ml_dtypes import bfloat16

from int4awq.formats import checkpoints
from int4awq.formats.checkpoints import ImportReport, LayerInfo, list_layers, load_layer
from int4awq.errors import ConfigError
from int4awq.formats.quant import dequantize

LAYER = "model.layers.0.self_attn.q_proj"
AWQ_PACK_ORDER = [
    0,
    2,
    4,
    6,
    1,
    3,
    5,
    7,
]  # AutoAWQ: nibble i of a packed column <- logical column 8c + order[i]


# ---------------------------------------------------------------------------------------------- writers


def st_bytes(arr, dtype):
    """(safetensors dtype string, shape, little-endian bytes) of a numpy array."""
    le = {"I32": "<i4", "I64": "<i8", "I8": "i1", "F16": "<f2", "F32": "<f4"}
    if dtype == "BF16":
        data = np.asarray(arr, dtype=bfloat16).view("<u2").tobytes()
    else:
        data = np.ascontiguousarray(arr, dtype=le[dtype]).tobytes()
    return dtype, list(np.shape(arr)), data


def write_safetensors(path, tensors, metadata=None):
    """8-byte little-endian header length, JSON header, concatenated data (the safetensors format)."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {
            "dtype": dtype,
            "shape": shape,
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))


def write_dir(d, tensors, qcfg=None, config_name="config.json"):
    d.mkdir(parents=True, exist_ok=True)
    if qcfg is not None:
        body = {"architectures": ["LlamaForCausalLM"], "quantization_config": qcfg}
        if config_name != "config.json":
            (d / "config.json").write_text(
                json.dumps({"architectures": ["LlamaForCausalLM"]})
            )
            body = qcfg
        (d / config_name).write_text(json.dumps(body))
    write_safetensors(d / "model.safetensors", tensors)
    return d


def pack_words(nibbles):
    """int32 words from [..., 8] values 0..15: value j goes to bits 4j..4j+3."""
    v = np.asarray(nibbles, dtype=np.uint64)
    assert v.max(initial=0) <= 15
    words = (v << (np.arange(8, dtype=np.uint64) * np.uint64(4))).sum(
        axis=-1, dtype=np.uint64
    )
    return words.astype(np.uint32).view(np.int32)


def bf16_rne(x):
    """Round float values to bf16 by bit arithmetic on their f32 pattern (round to nearest, ties to even)."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32)


# ---------------------------------------------------------------------------------------------- logical layers


def logical(k, n, gs, seed, zeros_zero=False):
    """Codes q [K, N], zeros z [K/gs, N] (0..15) and fp16 scales [K/gs, N], some not bf16-representable."""
    rng = np.random.default_rng(seed)
    q = rng.integers(0, 16, size=(k, n))
    z = rng.integers(0 if zeros_zero else 1, 16, size=(k // gs, n))
    s = (rng.uniform(0.001, 0.05, size=(k // gs, n))).astype(np.float16)
    s[0, 0] = np.float16(2.0**-6)  # exactly representable in bf16
    return q, z, s


def expected_dequant(q, z, s, gs):
    """(q - z) * bf16(s) in f32 [K, N]: each K row uses the zero and scale of its group row // gs."""
    rows = np.arange(q.shape[0]) // gs
    return (
        (q - z[rows]).astype(np.float32) * bf16_rne(s.astype(np.float32))[rows]
    ).astype(np.float32)


def awq_tensors(q, z, s, prefix=LAYER):
    k, n = q.shape
    qweight = pack_words(q.reshape(k, n // 8, 8)[:, :, AWQ_PACK_ORDER])
    qzeros = pack_words(z.reshape(z.shape[0], n // 8, 8)[:, :, AWQ_PACK_ORDER])
    return {
        f"{prefix}.qweight": st_bytes(qweight, "I32"),
        f"{prefix}.qzeros": st_bytes(qzeros, "I32"),
        f"{prefix}.scales": st_bytes(s, "F16"),
    }


def gptq_tensors(q, z, s, v1, prefix=LAYER, g_idx=True):
    k, n = q.shape
    qweight = pack_words(
        q.reshape(k // 8, 8, n).transpose(0, 2, 1)
    )  # rows 8r..8r+7 of column n in word [r, n]
    words = pack_words(z.reshape(z.shape[0], n // 8, 8)).view(np.uint32)
    if (
        v1
    ):  # GPTQModel's v2 -> v1 export: one word subtraction of 0x11111111 (borrows propagate)
        words = ((words.astype(np.int64) - 0x11111111) % 2**32).astype(np.uint32)
    t = {
        f"{prefix}.qweight": st_bytes(qweight, "I32"),
        f"{prefix}.qzeros": st_bytes(words.view(np.int32), "I32"),
        f"{prefix}.scales": st_bytes(s, "F16"),
    }
    if g_idx:
        gs = k // z.shape[0]
        t[f"{prefix}.g_idx"] = st_bytes(np.arange(k) // gs, "I32")
    return t


def ct_tensors(q, z, s, scale_dtype="F16", zp="packed", prefix=LAYER):
    """compressed-tensors pack-quantized from host codes: v = q - 8 stored as v + 8; zp = z - 8 likewise."""
    k, n = q.shape
    v = q.T - 8  # [N, K] signed
    stored = v + 8
    pad = -k % 8
    stored = np.pad(stored, ((0, 0), (0, pad)))
    t = {
        f"{prefix}.weight_packed": st_bytes(
            pack_words(stored.reshape(n, -1, 8)), "I32"
        ),
        f"{prefix}.weight_scale": st_bytes(s.T, scale_dtype),
        f"{prefix}.weight_shape": st_bytes(np.array([n, k]), "I64"),
    }
    zpt = z.T - 8  # [N, G] signed zero points
    if zp == "packed":
        zs = np.pad(
            zpt + 8, ((0, -n % 8), (0, 0))
        )  # pad out rows, then pack 8 consecutive rows per word
        t[f"{prefix}.weight_zero_point"] = st_bytes(
            pack_words(zs.reshape(-1, 8, zs.shape[1]).transpose(0, 2, 1)), "I32"
        )
    elif zp == "int8":
        t[f"{prefix}.weight_zero_point"] = st_bytes(zpt, "I8")
    return t


AWQ_CFG = {
    "quant_method": "awq",
    "bits": 4,
    "group_size": 32,
    "version": "gemm",
    "zero_point": True,
}


def gptq_cfg(fmt="gptq_v2", **kw):
    return {
        "quant_method": "gptq",
        "bits": 4,
        "group_size": 32,
        "desc_act": False,
        "sym": False,
        "checkpoint_format": fmt,
        **kw,
    }


def ct_cfg(symmetric=False, gs=32, strategy="group", **kw):
    w = {
        "num_bits": 4,
        "type": "int",
        "symmetric": symmetric,
        "strategy": strategy,
        "group_size": gs,
        "actorder": None,
        "dynamic": False,
    }
    w.update(kw)
    return {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "quantization_status": "compressed",
        "config_groups": {
            "group_0": {"targets": ["Linear"], "weights": w, "input_activations": None}
        },
        "ignore": ["lm_head"],
    }


def assert_layer(w, q, z, s, gs):
    np.testing.assert_array_equal(w.q, q)
    np.testing.assert_array_equal(w.z, z)
    assert w.s.dtype == bfloat16 and w.gs == gs
    np.testing.assert_array_equal(dequantize(w), expected_dequant(q, z, s, gs))


# ---------------------------------------------------------------------------------------------- known answers


def test_awq_nibble_order_known_answer(tmp_path):
    # one packed column per row: word 0x76543210 has nibble i = i, so logical column order[i] holds i
    k, n, gs = 16, 8, 16  # the smallest group the kernel takes (GS a multiple of 16)
    qweight = np.full((k, 1), 0x76543210, np.int32)
    qzeros = np.full((1, 1), 0x11111111 * 3, np.int32)  # every zero point 3
    write_dir(
        tmp_path,
        {
            f"{LAYER}.qweight": st_bytes(qweight, "I32"),
            f"{LAYER}.qzeros": st_bytes(qzeros, "I32"),
            f"{LAYER}.scales": st_bytes(np.ones((1, n)), "F16"),
        },
        {**AWQ_CFG, "group_size": gs},
    )
    w, _ = load_layer(tmp_path, LAYER)
    np.testing.assert_array_equal(w.q[0], [0, 4, 1, 5, 2, 6, 3, 7])
    np.testing.assert_array_equal(w.q[k - 1], [0, 4, 1, 5, 2, 6, 3, 7])
    np.testing.assert_array_equal(w.z, 3)


def test_gptq_and_ct_nibble_order_known_answer(tmp_path):
    k, n, gs = 16, 8, 16
    # GPTQ: word [r, n] holds K rows 8r..8r+7 of column n in nibbles 0..7; zeros sequential along N
    qweight = np.full((k // 8, n), 0x76543210, np.int32)
    qzeros = np.array([[0x76543210]], np.uint32).view(np.int32)
    write_dir(
        tmp_path / "g",
        {
            f"{LAYER}.qweight": st_bytes(qweight, "I32"),
            f"{LAYER}.qzeros": st_bytes(qzeros, "I32"),
            f"{LAYER}.scales": st_bytes(np.ones((1, n)), "F16"),
        },
        gptq_cfg(group_size=gs),
    )
    w, _ = load_layer(tmp_path / "g", LAYER)
    np.testing.assert_array_equal(w.q[:, 0], np.tile(np.arange(8), 2))
    np.testing.assert_array_equal(w.z[0], np.arange(8))
    # compressed-tensors: word [n, c] holds K columns 8c..8c+7 of out row n; zero points packed along N
    packed = np.full(
        (n, k // 8), 0xFEDCBA98 - 2**32, np.int32
    )  # stored 8..15 = values 0..7
    zp = np.array(
        [[0x89ABCDEF - 2**32]], np.int32
    )  # out rows 0..7 store 15..8 = zero points 7..0
    write_dir(
        tmp_path / "c",
        {
            f"{LAYER}.weight_packed": st_bytes(packed, "I32"),
            f"{LAYER}.weight_zero_point": st_bytes(zp, "I32"),
            f"{LAYER}.weight_scale": st_bytes(np.ones((n, 1)), "BF16"),
        },
        ct_cfg(gs=gs),
    )
    w, _ = load_layer(tmp_path / "c", LAYER)
    np.testing.assert_array_equal(w.q[:, 0], np.tile(np.arange(8, 16), 2))
    np.testing.assert_array_equal(w.z[0], np.arange(15, 7, -1))
    np.testing.assert_array_equal(dequantize(w)[:, 0], np.tile(np.arange(8) - 7.0, 2))


# ---------------------------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("k,n,gs", [(64, 16, 32), (128, 24, 128), (96, 8, 32)])
def test_awq_gemm(tmp_path, k, n, gs):
    q, z, s = logical(k, n, gs, seed=k + n, zeros_zero=True)
    write_dir(tmp_path, awq_tensors(q, z, s), {**AWQ_CFG, "group_size": gs})
    [info] = list_layers(tmp_path)
    assert info == LayerInfo(LAYER, "awq-gemm", k, n, gs)
    w, rep = load_layer(tmp_path, LAYER)
    assert_layer(w, q, z, s, gs)
    assert rep.format == "awq-gemm" and rep.scale_dtype == "float16"


@pytest.mark.parametrize("fmt", ["gptq_v2", "gptq"])
def test_gptq(tmp_path, fmt):
    k, n, gs = 128, 32, 32
    q, z, s = logical(k, n, gs, seed=3)  # z >= 1: v1 never wraps, every reader agrees
    write_dir(tmp_path, gptq_tensors(q, z, s, v1=fmt == "gptq"), gptq_cfg(fmt))
    assert list_layers(tmp_path) == [LayerInfo(LAYER, fmt, k, n, gs)]
    w, rep = load_layer(tmp_path, LAYER)
    assert_layer(w, q, z, s, gs)
    assert rep.format == fmt and rep.zero_wraps == 0


def test_gptq_v1_per_nibble_export_matches(tmp_path):
    # AutoGPTQ's exporter writes (z - 1) & 15 per nibble; without z = 0 that equals the word subtraction
    k, n, gs = 64, 16, 32
    q, z, s = logical(k, n, gs, seed=4)
    t = gptq_tensors(q, z, s, v1=False)
    t[f"{LAYER}.qzeros"] = st_bytes(
        pack_words((z - 1).reshape(z.shape[0], n // 8, 8)), "I32"
    )
    write_dir(tmp_path, t, gptq_cfg("gptq"))
    assert_layer(load_layer(tmp_path, LAYER)[0], q, z, s, gs)


def v1_with_zero(tmp_path, positions, meta=None):
    k, n, gs = 64, 16, 32
    q, z, s = logical(k, n, gs, seed=5)
    for g, col in positions:
        z[g, col] = 0
    extra = {"meta": {"quantizer": [meta]}} if meta else {}
    write_dir(tmp_path, gptq_tensors(q, z, s, v1=True), gptq_cfg("gptq", **extra))
    return q, z, s, gs


def test_gptq_v1_wrap_from_gptqmodel_is_exact(tmp_path):
    q, z, s, gs = v1_with_zero(
        tmp_path, [(0, 2), (1, 8), (1, 9)], meta="gptqmodel:2.2.0"
    )
    w, rep = load_layer(tmp_path, LAYER)
    assert_layer(w, q, z, s, gs)
    assert rep.zero_wraps >= 1 and "zero points" in rep.summary()


def test_gptq_v1_wrap_of_unknown_producer_is_rejected(tmp_path):
    v1_with_zero(tmp_path, [(1, 10)], meta="gptqmodel:0.8.0")
    with pytest.raises(
        ConfigError, match=rf"{LAYER}\.qzeros\[1, 1\].*re-export as gptq_v2"
    ):
        load_layer(tmp_path, LAYER)


@pytest.mark.parametrize("quantizer", [4, None, True, {"gptqmodel": "2.2.0"}])
def test_gptq_meta_quantizer_of_another_type_is_no_producer(tmp_path, quantizer):
    k, n, gs = 64, 16, 32
    q, z, s = logical(k, n, gs, seed=4)
    write_dir(
        tmp_path,
        gptq_tensors(q, z, s, v1=True),
        gptq_cfg("gptq", meta={"quantizer": quantizer}),
    )
    assert_layer(load_layer(tmp_path, LAYER)[0], q, z, s, gs)


def test_gptq_v1_wrap_in_top_nibble_is_unambiguous(tmp_path):
    q, z, s, gs = v1_with_zero(
        tmp_path, [(0, 7), (1, 15)]
    )  # last nibble of a word: no carry to disagree on
    w, rep = load_layer(tmp_path, LAYER)
    assert_layer(w, q, z, s, gs)
    assert rep.zero_wraps == 2


@pytest.mark.parametrize("scale_dtype", ["F16", "BF16", "F32"])
@pytest.mark.parametrize("zp", ["packed", "int8", "symmetric"])
def test_compressed_tensors(tmp_path, scale_dtype, zp):
    k, n, gs = 64, 12, 32  # N = 12: the packed zero points carry 4 padding rows
    q, z, s = logical(k, n, gs, seed=6, zeros_zero=True)
    if zp == "symmetric":
        z[:] = 8
    write_dir(
        tmp_path,
        ct_tensors(q, z, s, scale_dtype, zp),
        ct_cfg(symmetric=zp == "symmetric"),
    )
    assert list_layers(tmp_path) == [LayerInfo(LAYER, "compressed-tensors", k, n, gs)]
    w, rep = load_layer(tmp_path, LAYER)
    assert_layer(w, q, z, s, gs)
    assert (
        rep.scale_dtype
        == {"F16": "float16", "BF16": "bfloat16", "F32": "float32"}[scale_dtype]
    )
    if scale_dtype == "BF16":
        assert rep.scales_changed == 0 and rep.max_rel_scale_change == 0.0


def test_compressed_tensors_dequant_in_its_own_orientation(tmp_path):
    # the format's definition on [out, in]: (v - zp[n, k // gs]) * scale[n, k // gs]; host is its transpose
    k, n, gs = 64, 16, 16
    q, z, s = logical(k, n, gs, seed=7, zeros_zero=True)
    write_dir(tmp_path, ct_tensors(q, z, s, "BF16"), ct_cfg(gs=gs))
    v, zp, scale = q.T - 8, z.T - 8, s.T.astype(bfloat16).astype(np.float32)
    cols = np.arange(k) // gs
    w_out_in = (v - zp[:, cols]) * scale[:, cols]
    np.testing.assert_array_equal(
        dequantize(load_layer(tmp_path, LAYER)[0]), w_out_in.T.astype(np.float32)
    )


def test_compressed_tensors_channel_strategy(tmp_path):
    k, n = 64, 8
    q, z, s = logical(k, n, k, seed=8)
    write_dir(tmp_path, ct_tensors(q, z, s), ct_cfg(strategy="channel", gs=None))
    w, _ = load_layer(tmp_path, LAYER)
    assert_layer(w, q, z, s, k)


# ---------------------------------------------------------------------------------------------- containers


def test_single_file_formats_recognised_from_tensors(tmp_path):
    k, n, gs = 64, 16, 16
    q, z, s = logical(k, n, gs, seed=9)
    cases = {
        "awq-gemm": awq_tensors(q, z, s),
        "gptq": gptq_tensors(q, z, s, v1=True),
        "compressed-tensors": ct_tensors(q, z, s),
    }
    for fmt, tensors in cases.items():
        f = tmp_path / f"{fmt}.safetensors"
        write_safetensors(f, tensors)
        assert list_layers(f) == [LayerInfo(LAYER, fmt, k, n, gs)]
        assert_layer(load_layer(f, LAYER)[0], q, z, s, gs)
    f = (
        tmp_path / "v2.safetensors"
    )  # AutoGPTQ records the layout in the file's metadata
    write_safetensors(
        f,
        gptq_tensors(q, z, s, v1=False),
        metadata={"gptq_checkpoint_format": "gptq_v2"},
    )
    assert list_layers(f)[0].format == "gptq_v2"
    assert_layer(load_layer(f, LAYER)[0], q, z, s, gs)


def test_quantize_config_json_beside_config(tmp_path):
    k, n, gs = 64, 8, 32
    q, z, s = logical(k, n, gs, seed=10)
    cfg = {
        "bits": 4,
        "group_size": gs,
        "desc_act": False,
        "sym": False,
        "checkpoint_format": "gptq_v2",
    }
    write_dir(
        tmp_path,
        gptq_tensors(q, z, s, v1=False),
        cfg,
        config_name="quantize_config.json",
    )
    assert_layer(load_layer(tmp_path, LAYER)[0], q, z, s, gs)


def test_sharded_index_reads_only_the_requested_layer(tmp_path, monkeypatch):
    k, n, gs = 64, 16, 32
    q, z, s = logical(k, n, gs, seed=11)
    t0 = awq_tensors(q, z, s)
    other = "model.layers.1.self_attn.q_proj"
    t1 = awq_tensors(q, z, s, prefix=other)
    shard1 = {kk: v for kk, v in t0.items() if kk.endswith("qweight")}
    shard2 = {kk: v for kk, v in t0.items() if not kk.endswith("qweight")}
    write_safetensors(tmp_path / "model-00001-of-00003.safetensors", shard1)
    write_safetensors(tmp_path / "model-00002-of-00003.safetensors", shard2)
    (tmp_path / "model-00003-of-00003.safetensors").write_bytes(
        b"\xff" * 64
    )  # never opened for layer 0
    weight_map = {
        **{kk: "model-00001-of-00003.safetensors" for kk in shard1},
        **{kk: "model-00002-of-00003.safetensors" for kk in shard2},
        **{kk: "model-00003-of-00003.safetensors" for kk in t1},
    }
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )
    (tmp_path / "config.json").write_text(
        json.dumps({"quantization_config": {**AWQ_CFG, "group_size": gs}})
    )
    read = []
    real = checkpoints._native_get
    monkeypatch.setattr(
        checkpoints, "_native_get", lambda f, name: read.append(name) or real(f, name)
    )
    w, _ = load_layer(tmp_path, LAYER)
    assert_layer(w, q, z, s, gs)
    assert sorted(read) == sorted(t0)
    with pytest.raises(
        ConfigError, match="model-00003-of-00003.safetensors: not a safetensors file"
    ):
        load_layer(tmp_path, other)


def test_bf16_scales_need_a_safetensors_that_reads_them(tmp_path, monkeypatch):
    # safetensors before 0.8 cannot build a bfloat16 numpy array: one line saying so, not a raw read
    k, n, gs = 64, 16, 32
    q, z, s = logical(k, n, gs, seed=12)
    write_dir(tmp_path, ct_tensors(q, z, s, "BF16"), ct_cfg())
    real = checkpoints._native_get

    def old_safetensors(f, name):
        if name.endswith("weight_scale"):
            raise TypeError("data type 'bfloat16' not understood")
        return real(f, name)

    monkeypatch.setattr(checkpoints, "_native_get", old_safetensors)
    with pytest.raises(
        ConfigError,
        match=r"weight_scale: safetensors .* cannot read BF16 .* 0\.8 or newer",
    ):
        load_layer(tmp_path, LAYER)
    assert not hasattr(
        checkpoints, "_raw_get"
    )  # no hand-written reader that skips safetensors' checks


def test_bf16_scales_are_read_by_safetensors_itself(tmp_path):
    k, n, gs = 64, 16, 32
    q, z, s = logical(k, n, gs, seed=12)
    write_dir(tmp_path, ct_tensors(q, z, s, "BF16"), ct_cfg())
    w, rep = load_layer(tmp_path, LAYER)
    assert_layer(w, q, z, s, gs)
    assert rep.scale_dtype == "bfloat16" and rep.scales_changed == 0


def write_edited(path, tensors, edit=None, text_edit=None, extra=b""):
    """A safetensors file whose header `edit(header)` may break (the data stays as written), then
    `text_edit(json text)` on the serialised header; `extra` bytes are appended to the data.
    """
    header, blobs, offset = {}, [], 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {
            "dtype": dtype,
            "shape": shape,
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    if edit:
        edit(header)
    raw = json.dumps(header)
    if text_edit:
        raw = text_edit(raw)
    raw = raw.encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"".join(blobs) + extra)


def sharded_bf16(tmp_path, edit=None, text_edit=None, extra=b"", weight_map_edit=None):
    """compressed-tensors layer with BF16 scales in shard 2 of 2 (scales first, then the zero points)."""
    k, n, gs = 64, 16, 32
    q, z, s = logical(k, n, gs, seed=21)
    t = ct_tensors(q, z, s, "BF16")
    scale = f"{LAYER}.weight_scale"
    shard2 = {
        scale: t.pop(scale),
        f"{LAYER}.weight_zero_point": t.pop(f"{LAYER}.weight_zero_point"),
    }
    write_safetensors(tmp_path / "model-00001-of-00002.safetensors", t)
    write_edited(
        tmp_path / "model-00002-of-00002.safetensors", shard2, edit, text_edit, extra
    )
    weight_map = {
        **{name: "model-00001-of-00002.safetensors" for name in t},
        **{name: "model-00002-of-00002.safetensors" for name in shard2},
    }
    if weight_map_edit:
        weight_map_edit(weight_map)
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )
    (tmp_path / "config.json").write_text(json.dumps({"quantization_config": ct_cfg()}))
    return tmp_path, (q, z, s, gs)


SCALE = f"{LAYER}.weight_scale"
ZP = f"{LAYER}.weight_zero_point"


def _offsets(name, begin, end):
    def edit(h):
        h[name]["data_offsets"] = [
            begin(h[name]["data_offsets"][0]),
            end(h[name]["data_offsets"][1]),
        ]

    return edit


MALFORMED = {
    # offsets that point back into the JSON header: the bytes read as bf16 would be the header's text
    "offsets into the header": dict(
        edit=_offsets(SCALE, lambda b: b - 48, lambda e: e - 48)
    ),
    "negative offset": dict(edit=_offsets(SCALE, lambda b: -(10**6), lambda e: e)),
    # scales moved 8 bytes on, leaving a gap (safetensors itself rejects this)
    "gap between tensors": dict(
        edit=lambda h: [
            _offsets(SCALE, lambda b: b + 8, lambda e: e + 8)(h),
            _offsets(ZP, lambda b: b + 8, lambda e: e + 8)(h),
        ],
        extra=b"\0" * 8,
    ),
    "overlapping tensors": dict(edit=_offsets(ZP, lambda b: b - 2, lambda e: e - 2)),
    "size does not match shape": dict(edit=lambda h: h[SCALE].update(shape=[16, 3])),
    "bytes after the last tensor": dict(extra=b"\0" * 8),
    "shape 1e400": dict(
        text_edit=lambda raw: raw.replace('"shape": [16, 2]', '"shape": [1e400, 64]', 1)
    ),
    "shape overflows": dict(edit=lambda h: h[SCALE].update(shape=[2**40, 2**40])),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_safetensors_never_load(tmp_path, case):
    path, _ = sharded_bf16(tmp_path, **MALFORMED[case])
    with pytest.raises(
        ConfigError,
        match=r"model-00002-of-00002\.safetensors: not a safetensors file \(",
    ) as e:
        load_layer(path, LAYER)
    assert "\n" not in str(e.value)


def test_well_formed_sharded_bf16_still_loads(tmp_path):
    path, (q, z, s, gs) = sharded_bf16(tmp_path)
    assert_layer(load_layer(path, LAYER)[0], q, z, s, gs)


@pytest.mark.parametrize("value", [7, None, ["a"], ""])
def test_weight_map_value_must_be_a_file_name(tmp_path, value):
    path, _ = sharded_bf16(
        tmp_path, weight_map_edit=lambda wm: wm.update({SCALE: value})
    )
    with pytest.raises(
        ConfigError,
        match=r"weight_map\[.*weight_scale'\] = .*: expected a shard file name",
    ):
        load_layer(path, LAYER)


def test_list_layers_natural_order(tmp_path):
    q, z, s = logical(64, 16, 32, seed=13)
    tensors = {}
    names = [
        f"model.layers.{i}.mlp.{p}"
        for i in (10, 2, 0)
        for p in ("up_proj", "down_proj")
    ]
    for name in names:
        tensors.update(awq_tensors(q, z, s, prefix=name))
    tensors["model.embed_tokens.weight"] = st_bytes(np.zeros((4, 4)), "F16")
    write_dir(tmp_path, tensors, AWQ_CFG)
    got = [i.name for i in list_layers(tmp_path)]
    assert got == [
        f"model.layers.{i}.mlp.{p}"
        for i in (0, 2, 10)
        for p in ("down_proj", "up_proj")
    ]


# ---------------------------------------------------------------------------------------------- report


def test_scale_rounding_report(tmp_path):
    k, n, gs = 64, 16, 32
    q, z, s = logical(k, n, gs, seed=14)
    s[1, :4] = np.float16(1.0) + np.float16(2.0**-10) * np.arange(
        4
    )  # 1 + 2^-10 etc.: rounds to 1.0 in bf16
    t = awq_tensors(q, z, s)
    t[f"{LAYER}.bias"] = st_bytes(np.zeros(n), "F16")
    write_dir(tmp_path, t, {**AWQ_CFG, "group_size": gs})
    w, rep = load_layer(tmp_path, LAYER)
    s32 = s.astype(np.float32)
    rounded = bf16_rne(s32)
    assert isinstance(rep, ImportReport)
    assert rep.total_scales == s.size
    assert rep.scales_changed == int(np.count_nonzero(rounded != s32)) > 0
    s64, r64 = s32.astype(np.float64), rounded.astype(np.float64)
    assert rep.max_rel_scale_change == float(np.max(np.abs(r64 - s64) / s64))
    assert (
        0 < rep.max_rel_scale_change <= 2.0**-8
    )  # round to nearest keeping 8 significant bits
    np.testing.assert_array_equal(w.s.astype(np.float32), rounded)
    line = rep.summary()
    assert "\n" not in line and f"{rep.scales_changed} of {s.size} changed" in line
    assert rep.has_bias and "bias" in line


@pytest.mark.parametrize("fmt", ["awq-gemm", "compressed-tensors"])
def test_fp16_scales_kept_exactly_as_pairs(tmp_path, fmt):
    """load_layer(scale_pair=True) (host/run.py --format awq_f16): the format's own formula with its fp16
    scales, (q - z) * s, exactly; nothing changed in the report."""
    k, n, gs = 64, 16, 32
    q, z, s = logical(k, n, gs, seed=15)
    if fmt == "awq-gemm":
        write_dir(tmp_path, awq_tensors(q, z, s), {**AWQ_CFG, "group_size": gs})
    else:
        write_dir(tmp_path, ct_tensors(q, z, s), ct_cfg(gs=gs))
    w, rep = load_layer(tmp_path, LAYER, scale_pair=True)
    rows = np.arange(k) // gs
    exact = (q - z[rows]).astype(np.float64) * s.astype(np.float64)[rows]
    np.testing.assert_array_equal(dequantize(w), exact.astype(np.float32))
    assert w.format == "awq_f16" and rep.scales_changed == 0
    assert rep.max_rel_scale_change == 0.0 and "-> bfloat16 pair: 0 of" in rep.summary()
    plain, _ = load_layer(tmp_path, LAYER)
    assert not np.array_equal(dequantize(plain), dequantize(w))


# ---------------------------------------------------------------------------------------------- bad input


def bad_case(tmp_path, fmt, mutate=None, cfg_mutate=None):
    k, n, gs = 64, 16, 32
    q, z, s = logical(k, n, gs, seed=15)
    tensors, cfg = {
        "awq": (awq_tensors(q, z, s), dict(AWQ_CFG)),
        "gptq": (gptq_tensors(q, z, s, v1=False), gptq_cfg()),
        "ct": (ct_tensors(q, z, s), ct_cfg()),
    }[fmt]
    if mutate:
        mutate(tensors)
    if cfg_mutate:
        cfg_mutate(cfg)
    write_dir(tmp_path, tensors, cfg)
    return tmp_path


def _set(d, key, value):
    d[key] = value


BAD = [
    (
        "awq",
        lambda t: t.pop(f"{LAYER}.qzeros"),
        None,
        rf"missing tensor {LAYER}\.qzeros$",
    ),
    (
        "awq",
        lambda t: _set(t, f"{LAYER}.scales", st_bytes(np.ones((2, 16)), "I32")),
        None,
        rf"tensor {LAYER}\.scales: dtype I32, expected F16 or BF16 or F32",
    ),
    (
        "awq",
        lambda t: _set(t, f"{LAYER}.qweight", st_bytes(np.ones((64, 2)), "F32")),
        None,
        rf"tensor {LAYER}\.qweight: dtype F32, expected I32",
    ),
    (
        "awq",
        lambda t: _set(t, f"{LAYER}.qzeros", st_bytes(np.ones((3, 2)), "I32")),
        None,
        rf"tensor {LAYER}\.qzeros: shape \[3, 2\], expected \[2, 2\]",
    ),
    (
        "awq",
        None,
        lambda c: _set(c, "bits", 8),
        r"quantization_config\.bits = 8: only 4-bit",
    ),
    (
        "awq",
        None,
        lambda c: _set(c, "group_size", 48),
        r"quantization_config\.group_size = 48 does not divide in_features = 64",
    ),
    (
        "awq",
        None,
        lambda c: _set(c, "version", "gemv"),
        r"quantization_config\.version = 'gemv': only AutoAWQ's 'gemm'",
    ),
    (
        "awq",
        None,
        lambda c: _set(c, "quant_method", "bitsandbytes"),
        r"quantization_config\.quant_method = 'bitsandbytes': unknown format",
    ),
    (
        "gptq",
        lambda t: _set(t, f"{LAYER}.g_idx", st_bytes(np.arange(64)[::-1] // 32, "I32")),
        lambda c: _set(c, "desc_act", True),
        rf"tensor {LAYER}\.g_idx\[0\] = 1, expected 0 = i // group_size: act-order",
    ),
    (
        "gptq",
        lambda t: t.pop(f"{LAYER}.g_idx"),
        lambda c: _set(c, "desc_act", True),
        r"desc_act = true .* act-order",
    ),
    (
        "gptq",
        None,
        lambda c: _set(c, "checkpoint_format", "marlin"),
        r"checkpoint_format = 'marlin'",
    ),
    (
        "gptq",
        None,
        lambda c: _set(c, "bits", 3),
        r"quantization_config\.bits = 3: only 4-bit",
    ),
    (
        "gptq",
        None,
        lambda c: _set(c, "group_size", 24),
        r"group_size = 24 does not divide",
    ),
    (
        "gptq",
        None,
        lambda c: _set(c, "dynamic", {"-:.*mlp.*": {}, r"+:.*\.q_proj": {"bits": 8}}),
        r"quantization_config\.dynamic\[.*q_proj'\]\.bits = 8: only 4-bit",
    ),
    (
        "ct",
        lambda t: t.pop(f"{LAYER}.weight_zero_point"),
        None,
        rf"missing tensor {LAYER}\.weight_zero_point .*symmetric = false",
    ),
    (
        "ct",
        None,
        lambda c: _set(c["config_groups"]["group_0"]["weights"], "num_bits", 8),
        r"group_0\.weights\.num_bits = 8: only 4-bit",
    ),
    (
        "ct",
        None,
        lambda c: _set(c["config_groups"]["group_0"]["weights"], "strategy", "tensor"),
        r"strategy = 'tensor'",
    ),
    (
        "ct",
        None,
        lambda c: _set(c["config_groups"]["group_0"]["weights"], "type", "float"),
        r"type = 'float'",
    ),
    (
        "ct",
        None,
        lambda c: _set(c, "format", "naive-quantized"),
        r"quantization_config\.format = 'naive-quantized'",
    ),
    (
        "ct",
        None,
        lambda c: _set(
            c["config_groups"]["group_0"], "input_activations", {"num_bits": 8}
        ),
        r"input_activations is set",
    ),
    (
        "ct",
        None,
        lambda c: _set(c["config_groups"]["group_0"], "targets", 4),
        r"group_0\.targets = 4: expected a list",
    ),
    (
        "ct",
        None,
        lambda c: _set(c["config_groups"]["group_0"], "targets", ["re:("]),
        r"'re:\(' is not a regular expr",
    ),
    (
        "ct",
        lambda t: _set(t, f"{LAYER}.weight_g_idx", st_bytes(np.arange(64) % 2, "I32")),
        None,
        r"weight_g_idx\[1\] = 1, expected 0",
    ),
    (
        "ct",
        lambda t: _set(
            t, f"{LAYER}.weight_zero_point", st_bytes(np.full((16, 2), 9), "I8")
        ),
        None,
        rf"tensor {LAYER}\.weight_zero_point\[0, 0\] = 9: int4 zero points must lie in -8\.\.7",
    ),
    (
        "ct",
        lambda t: _set(t, f"{LAYER}.weight_scale", st_bytes(np.zeros((16, 2)), "F16")),
        None,
        rf"tensor {LAYER}\.weight_scale\[0, 0\] = 0\.0: scales must be finite and > 0",
    ),
]


@pytest.mark.parametrize(
    "fmt,mutate,cfg_mutate,message", BAD, ids=[b[3][:40] for b in BAD]
)
def test_bad_checkpoints(tmp_path, fmt, mutate, cfg_mutate, message):
    path = bad_case(tmp_path, fmt, mutate, cfg_mutate)
    with pytest.raises(ConfigError, match=message) as e:
        load_layer(path, LAYER)
    assert "\n" not in str(e.value)


def test_bad_paths(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        list_layers(tmp_path / "absent")
    path = bad_case(tmp_path / "a", "awq")
    with pytest.raises(
        ConfigError, match=r"layer 'model\.layers\.9\.mlp\.up_proj' not found .*q_proj"
    ):
        load_layer(path, "model.layers.9.mlp.up_proj")
    (tmp_path / "junk.safetensors").write_bytes(
        b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!"
    )
    with pytest.raises(ConfigError, match="not a safetensors file"):
        list_layers(tmp_path / "junk.safetensors")


@pytest.mark.parametrize(
    "path, message",
    [
        ("/dev/null", r"/dev/null: not a regular file or a directory"),
        ("", r"checkpoint path is empty"),
        ("x" * 5000, r"cannot read|no such file"),
    ],
    ids=["dev-null", "empty", "name-too-long"],
)
def test_paths_that_are_not_checkpoints(path, message):
    for call in (list_layers, lambda p: load_layer(p, LAYER)):
        with pytest.raises(ConfigError, match=message):
            call(path)


@pytest.mark.parametrize(
    "text",
    ["[" * 100000, '{"weight_map": {"a": 1' + "0" * 5000 + "}}", "\xff\xfe"],
    ids=["deep-nesting", "5000-digit-integer", "not-utf8"],
)
def test_index_json_that_python_cannot_parse(tmp_path, text):
    path, _ = sharded_bf16(tmp_path)
    (path / "model.safetensors.index.json").write_bytes(text.encode("latin-1"))
    with pytest.raises(
        ConfigError, match="model.safetensors.index.json: not valid JSON"
    ):
        load_layer(path, LAYER)


# ---------------------------------------------------------------------------------------------- --list-layers


def test_list_layers_is_a_table_that_counts_what_it_does_not_list(tmp_path):
    """An int4 layer with a bias, a bf16 embedding (listed, not read) and a norm: the bias and the norm are
    1-D, counted in the summary; a group of 24 breaks the kernel's rule and says so."""
    from int4awq.formats.weights_file import list_layers as table

    q, z, s = logical(96, 16, 24, seed=13)
    t = awq_tensors(q, z, s)
    t[f"{LAYER}.bias"] = st_bytes(np.zeros(16), "F32")
    t["model.embed_tokens.weight"] = st_bytes(np.zeros((32, 96)), "BF16")
    t["model.norm.weight"] = st_bytes(np.zeros(96), "BF16")
    write_dir(tmp_path, t, {**AWQ_CFG, "group_size": 24})
    gs_rule = (
        "GS = 24: must be a multiple of 16 (the kernel's dequantisation converts two 8-deep K "
        "blocks per step)"
    )
    assert table(tmp_path) == [
        "name                             type      shape            status",
        "-------------------------------  --------  ---------------  ------",
        f"{LAYER}  awq-gemm  K=96 N=16 GS=24  does not run: {gs_rule}",
        "model.embed_tokens               BF16      K=96 N=32        not read (BF16: a float weight, "
        "the kernel takes quantised ones)",
        "2 layers: 1 refused at load (its status says why), 1 not read; not listed: 2 1-D tensors",
    ]
    with pytest.raises(ConfigError) as e:  # what the run says
        load_layer(tmp_path, LAYER)
    assert str(e.value) == f"layer {LAYER}: {gs_rule}"


def test_a_truncated_safetensors_file_says_so(tmp_path):
    q, z, s = logical(64, 16, 32, seed=14)
    path = tmp_path / "m.safetensors"
    write_safetensors(path, awq_tensors(q, z, s))
    whole = path.read_bytes()
    path.write_bytes(whole[:-100])
    says = (
        f"{path}: cut short: its header describes {len(whole)} bytes, the file holds "
        f"{len(whole) - 100} (a truncated download?)"
    )
    for call in (list_layers, lambda p: load_layer(p, LAYER)):
        with pytest.raises(ConfigError) as e:
            call(path)
        assert str(e.value) == says
    path.write_bytes(whole[:20])  # inside the header
    length = int.from_bytes(whole[:8], "little")
    with pytest.raises(ConfigError) as e:
        list_layers(path)
    assert (
        str(e.value)
        == f"{path}: cut short: its header is {length} bytes long, the file holds 20"
    )
