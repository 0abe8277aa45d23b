# SPDX-License-Identifier: MIT
"""GGUF's block-integer types (int4awq/formats/gguf_quants.py) read through int4awq/formats/gguf_file.py from files written by
gguf's own GGUFWriter. gguf cannot quantise the k-quants or IQ types, so each tensor is made of valid raw blocks:
random code bytes from a seeded RNG with finite fp16 scale fields. Every expected value is gguf's own
`gguf.quants.dequantize` of those bytes; the loaded weights must equal it bit for bit (the arithmetic argument
is in BlockIntWeights.dequantize). Every type runs through the host program and PASSes, saving exactly gguf's
values; a truncated tensor and an inf scale are one line and exit 2."""

from dataclasses import replace

import numpy as np
from ml_dtypes import bfloat16
import pytest

import gguf  # noqa: E402  (a required dependency: requirements.txt)
from gguf import GGMLQuantizationType as Q  # noqa: E402
from gguf.constants import GGML_QUANT_SIZES  # noqa: E402

from int4awq.formats import gguf_file  # noqa: E402
from int4awq.errors import ConfigError  # noqa: E402
from int4awq.formats.gguf_file import list_gguf_layers, load_gguf_layer  # noqa: E402
from int4awq.formats.gguf_quants import BlockIntWeights, decode  # noqa: E402
from int4awq.formats.weights_file import list_layers, listing  # noqa: E402

from host_args import run  # noqa: E402

# type: (K, N, byte offsets of its fp16 fields in a block (ggml-common.h), gs, range of v, has a min)
TYPES = {
    "Q4_1": (256, 16, (0, 2), 32, (0, 15), True),
    "Q5_0": (512, 8, (0,), 32, (-16, 15), False),
    "Q5_1": (256, 16, (0, 2), 32, (0, 31), True),
    "Q8_0": (512, 8, (0,), 32, (-128, 127), False),
    "Q4_K": (512, 8, (0, 2), 32, (0, 15), True),
    "Q5_K": (256, 16, (0, 2), 32, (0, 31), True),
    "Q6_K": (512, 16, (208,), 16, (-32, 31), False),
    "IQ4_NL": (256, 8, (0,), 32, (-127, 113), False),
    "IQ4_XS": (512, 8, (0,), 32, (-127, 113), False),
}
IQ4_VALUES = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}


def name_of(kind: str) -> str:
    """Tensor i is decoder layer i's attn_q, so --decoder-layer i meets it first."""
    return f"blk.{list(TYPES).index(kind)}.attn_q.weight"


def raw_blocks(kind: str, k: int, n: int, fp16_at, rng, fp16=None) -> np.ndarray:
    """uint8 (N, K / block * bytes): random bytes, with each fp16 field (d, dmin, m) set to fp16(x) or, by
    default, +-[2^-8, 2^-2] (d and dmin positive, as llama.cpp's quantisers make them; Q4_1/Q5_1's m signed).
    """
    block, size = GGML_QUANT_SIZES[Q[kind]]
    raw = rng.integers(0, 256, (n, k // block, size), dtype=np.uint8)
    for i, at in enumerate(fp16_at):
        if fp16 is None:
            x = 2.0 ** rng.uniform(-8, -2, raw.shape[:2])
            if kind in ("Q4_1", "Q5_1") and i == 1:
                x *= rng.choice([-1.0, 1.0], raw.shape[:2])
            fields = x.astype("<f2")
        else:
            fields = fp16(raw.shape[:2])
        raw[:, :, at : at + 2] = fields.view(np.uint8).reshape(*raw.shape[:2], 2)
    return raw.reshape(n, -1)


def write(path, tensors):
    out = gguf.GGUFWriter(str(path), "llama")
    for name, (raw, kind) in tensors.items():
        if kind is None:  # a float tensor
            out.add_tensor(name, raw)
        else:
            out.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=Q[kind])
    out.write_header_to_file()
    out.write_kv_data_to_file()
    out.write_tensors_to_file()
    out.close()
    return path


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """Every type as decoder layer i's attn_q, plus a Q2_K and an F16 weight (listed, not read) and an f32
    norm; with gguf's own dequantisation of each block-integer tensor, [N, K] f32."""
    rng = np.random.default_rng(20)
    tensors, ref = {}, {}
    for kind, (k, n, at, *_) in TYPES.items():
        raw = raw_blocks(kind, k, n, at, rng)
        tensors[name_of(kind)] = (raw, kind)
        ref[kind] = gguf.quants.dequantize(raw, Q[kind])
    tensors["blk.9.attn_q.weight"] = (raw_blocks("Q2_K", 256, 8, (80, 82), rng), "Q2_K")
    tensors["blk.9.attn_k.weight"] = (
        rng.standard_normal((8, 256)).astype(np.float16),
        None,
    )
    tensors["blk.9.attn_norm.weight"] = (np.ones(256, np.float32), None)
    return write(tmp_path_factory.mktemp("gguf") / "quants.gguf", tensors), ref


@pytest.mark.parametrize("kind", TYPES)
def test_each_type_is_exactly_what_gguf_dequantises(model, kind):
    path, ref = model
    k, n, _, gs, (lo, hi), has_min = TYPES[kind]
    w = load_gguf_layer(path, name_of(kind))
    assert isinstance(w, BlockIntWeights) and w.type_name == kind
    assert (w.k, w.n, w.gs, w.groups) == (k, n, gs, k // gs)
    assert (
        w.v.dtype == np.int16 and w.s.dtype == np.float32 and w.s.shape == (k // gs, n)
    )
    assert (w.m is not None) == has_min
    assert np.array_equal(w.dequantize(), ref[kind].T)
    # random bytes reach every end of the type's range, so the range is not vacuous
    if kind.startswith("IQ4"):
        assert set(np.unique(w.v).tolist()) == IQ4_VALUES
    else:
        assert (w.v.min(), w.v.max()) == (lo, hi)


@pytest.mark.parametrize("kind", TYPES)
def test_scale_fields_drawn_over_every_finite_fp16_pattern_stay_exact(kind):
    """Scale fields drawn at random over all finite fp16 bit patterns (subnormals, negatives, up to 65504):
    still bit for bit, because every product before the one final addition is exact in f32.
    """
    rng = np.random.default_rng(21)
    k, n, at, *_ = TYPES[kind]

    def any_finite(shape):
        h = rng.integers(0, 1 << 16, shape).astype("<u2")
        h[(h & 0x7C00) == 0x7C00] ^= 0x4000  # inf / nan exponent -> a finite one
        return h.view("<f2")

    raw = raw_blocks(kind, k, n, at, rng, fp16=any_finite)
    w = decode(kind, raw, k, n).validate()
    assert np.array_equal(w.dequantize(), gguf.quants.dequantize(raw, Q[kind]).T)


def test_list_layers_names_each_types_status(model):
    path, _ = model
    rows = {r.name: r for r in listing(path).rows}
    for kind, (k, n, *_) in TYPES.items():
        r = rows[name_of(kind)]
        assert (r.type, r.shape, r.status, r.outcome) == (
            kind,
            f"K={k} N={n}",
            "runs",
            "runs",
        )
    q2_k, f16 = rows["blk.9.attn_q.weight"], rows["blk.9.attn_k.weight"]
    assert (q2_k.type, q2_k.shape, q2_k.status) == (
        "Q2_K",
        "K=256 N=8",
        "not read (Q2_K: no decoder for this type yet)",
    )
    assert (f16.type, f16.shape, f16.status) == (
        "F16",
        "K=256 N=8",
        "not read (F16: a float weight, the kernel takes quantised ones)",
    )
    assert (
        len(rows) == len(TYPES) + 2
    )  # the 1-D norm is not a layer: the summary counts it
    lines = list_layers(path)
    assert lines[0].split() == ["name", "type", "shape", "status"]
    # aligned: every row's type starts where the header's does
    at = lines[0].index("type")
    assert all(line[at - 2 : at] == "  " and line[at] != " " for line in lines[2:-1])
    assert lines[-1] == (
        f"{len(TYPES) + 2} tensors: {len(TYPES)} run, 2 not read; not listed: 1 1-D tensor"
    )
    runs = {t.name: t.runs for t in list_gguf_layers(path)}
    assert all(runs[name_of(kind)] for kind in TYPES)
    assert not runs["blk.9.attn_q.weight"] and not runs["blk.9.attn_k.weight"]


@pytest.mark.parametrize(
    "layer, message",
    [
        (
            "blk.9.attn_q.weight",
            "blk.9.attn_q.weight: GGUF Q2_K [256, 8] is not read (Q2_K: no decoder for this type yet)",
        ),
        (
            "blk.9.attn_k.weight",
            "blk.9.attn_k.weight: GGUF F16 [256, 8] is not read (F16: a float weight, the kernel takes "
            "quantised ones)",
        ),
    ],
)
def test_types_not_read_are_one_line(model, layer, message):
    path, _ = model
    with pytest.raises(ConfigError) as e:
        load_gguf_layer(path, layer)
    assert str(e.value) == message


# A GEMM configuration given whole, so that no configuration search runs in the tests.
TILES = ("--tile-m", "16", "--tile-n", "16", "--tile-k-l1", "32", "--tile-k-l2", "64",
         "--herd-m", "1", "--herd-n", "2")  # fmt: skip
# The record format each type runs as (the kernel's entries: int4awq/kernel/record.py FORMAT_SPECS).
FORMAT = {
    "Q4_1": "INT4_MIN", "Q4_K": "INT4_MIN", "Q5_1": "INT8_MIN", "Q5_K": "INT8_MIN", "Q5_0": "INT8",
    "Q8_0": "INT8", "Q6_K": "INT8_TRIPLE", "IQ4_NL": "INT8", "IQ4_XS": "INT8",
}  # fmt: skip


# The types with a min term run in the fast mode unless --format names their exact format.
FAST = {"Q4_1", "Q4_K", "Q5_1", "Q5_K"}


@pytest.mark.parametrize("kind", TYPES)
def test_the_host_program_runs_every_type_and_saves_ggufs_values(model, tmp_path, kind):
    path, ref = model
    k, n, *_ = TYPES[kind]
    exact = ("--format", FORMAT[kind].lower()) if kind in FAST else ()
    code, out, err = run(
        "--weights", str(path), "--layer", name_of(kind), "--m", "16", "--backend", "emu",
        *TILES, *exact, "--save", str(tmp_path / "out"),
    )  # fmt: skip
    assert code == 0, out + err
    lines = out.splitlines()
    assert lines[0].startswith(
        f"{name_of(kind)}: GGUF {kind} K={k} N={n}: value = v * s"
    )
    assert lines[1].startswith(f"{FORMAT[kind]} M=16 K={k}") and "PASS!" in out
    assert np.array_equal(np.load(tmp_path / "out" / "w_dequant.npy"), ref[kind].T)


@pytest.mark.parametrize("kind", sorted(FAST))
def test_a_type_with_a_min_term_runs_in_the_fast_mode_by_default(model, tmp_path, kind):
    """Without --format: scales and min terms rounded to one bf16 each (the fast mode, as AWQ's default
    rounds fp16 scales), the rounding reported, and the weights that run are gguf's v with those bf16 terms.
    """
    path, _ = model
    k, n, *_ = TYPES[kind]
    code, out, err = run(
        "--weights", str(path), "--layer", name_of(kind), "--m", "16", "--backend", "emu",
        *TILES, "--save", str(tmp_path / "out"),
    )  # fmt: skip
    assert code == 0, out + err
    lines = out.splitlines()
    fast = FORMAT[kind].lower() + "_bf16"
    assert f"rounded to bf16 (format {fast}, the fast mode)" in lines[0]
    assert "max relative change" in lines[0]
    assert lines[0].endswith(f"--format {FORMAT[kind].lower()} keeps them exact")
    assert lines[1].startswith(f"{fast.upper()} M=16 K={k}") and "PASS!" in out
    w = load_gguf_layer(path, name_of(kind))
    bf = lambda x: x.astype(bfloat16).astype(np.float32)  # noqa: E731
    want = (
        w.v.astype(np.float32).reshape(-1, w.gs, n) * bf(w.s)[:, None, :]
        + bf(w.m)[:, None, :]
    )
    assert np.array_equal(
        np.load(tmp_path / "out" / "w_dequant.npy"), want.reshape(k, n)
    )


def test_a_truncated_k_quant_file_is_one_line(tmp_path):
    """Written by GGUFWriter, then cut inside the tensor's data: the header parses, the tensor is short.
    The line names the tensor and the bytes found and expected (8 rows of 2 Q4_K blocks of 144 bytes,
    ggml-common.h), never numpy's words; --list-layers still lists it."""
    rng = np.random.default_rng(22)
    raw = raw_blocks("Q4_K", 512, 8, (0, 2), rng)
    path = write(tmp_path / "q4k.gguf", {"w": (raw, "Q4_K")})
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[:-500])  # inside the tensor's data
    says = (
        f"w: GGUF Q4_K [512, 8]: {8 * 2 * 144 - 500} bytes of data in the file, expected {8 * 2 * 144} "
        "(8 rows of 2 144-byte blocks): a truncated file?"
    )
    with pytest.raises(ConfigError) as e:
        load_gguf_layer(cut, "w")
    assert str(e.value) == says
    code, out, err = run("--weights", str(cut), "--layer", "w", "--m", "8")
    assert code == 2 and err.strip() == f"error: {says}", out + err
    code, out, err = run("--weights", str(cut), "--list-layers")
    assert code == 0, out + err
    assert out.splitlines()[2] == (
        f"w     Q4_K  K=512 N=8  not read (cut short: {8 * 2 * 144 - 500} of its {8 * 2 * 144} bytes "
        "are in the file)"
    )
    assert out.splitlines()[-1] == "1 tensor: 1 not read"


def test_short_tensor_data_is_one_line(tmp_path, monkeypatch):
    """Should a reader ever hand over fewer bytes than the header's shape needs, the size check says so."""
    rng = np.random.default_rng(23)
    path = write(
        tmp_path / "q6k.gguf", {"w": (raw_blocks("Q6_K", 256, 8, (208,), rng), "Q6_K")}
    )
    real = gguf_file._reader

    class Short:
        def __init__(self, p):
            self.tensors = [replace(t, data=t.data[:-7]) for t in real(p).tensors]

    monkeypatch.setattr(gguf_file, "_reader", Short)
    with pytest.raises(ConfigError) as e:
        load_gguf_layer(path, "w")
    assert str(e.value) == (
        "w: GGUF Q6_K [256, 8]: 1673 bytes of data in the file, expected 1680 (8 rows of 1 210-byte "
        "blocks): a truncated file?"
    )


def test_decode_checks_the_size_before_shaping_the_bytes():
    raw = np.zeros(8 * 144 - 1, np.uint8)  # one byte short of 8 rows of a Q4_K block
    with pytest.raises(ConfigError) as e:
        decode("Q4_K", raw, 256, 8)
    assert str(e.value) == (
        "Q4_K [256, 8]: 1151 bytes of data, expected 1152 (8 rows of 1 144-byte blocks): a truncated "
        "file?"
    )
    with pytest.raises(ConfigError) as e:
        decode("Q4_K", np.zeros(8 * 144, np.uint8), 128, 8)
    assert (
        str(e.value)
        == "Q4_K [128, 8]: K = 128 is not a whole number of 256-value blocks"
    )


def test_a_scale_that_is_not_finite_is_one_line_naming_the_tensor(tmp_path):
    rng = np.random.default_rng(24)
    raw = raw_blocks("Q4_K", 256, 8, (0, 2), rng).reshape(8, 1, 144)
    raw[3, 0, 0:2] = np.array([np.inf], "<f2").view(np.uint8)  # d of column 3's block
    path = write(tmp_path / "inf.gguf", {"w": (raw.reshape(8, -1), "Q4_K")})
    with pytest.raises(ConfigError) as e:
        load_gguf_layer(path, "w")
    assert str(e.value).startswith("w: Q4_K s[") and "= inf: not finite" in str(e.value)
    assert ", 3] = " in str(e.value)


def good(kind="Q4_K", k=256, n=4):
    gs = 16 if kind == "Q6_K" else 32
    g = k // gs
    m = np.zeros((g, n), np.float32) if TYPES[kind][5] else None
    return dict(
        v=np.zeros((k, n), np.int16),
        gs=gs,
        s=np.ones((g, n), np.float32),
        m=m,
        type_name=kind,
    )


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(type_name="Q2_K"), "Q2_K: not a block-integer type"),
        (
            dict(v=np.zeros((256, 4), np.uint8)),
            "Q4_K v: uint8, expected an int16 [K, N] array",
        ),
        (dict(gs=16), "Q4_K: gs = 16, expected 32"),
        (
            dict(v=np.zeros((40, 4), np.int16)),
            "Q4_K: K = 40 is not a whole number of groups of 32",
        ),
        (dict(m=None), "Q4_K needs an additive term m"),
        (dict(s=np.ones((8, 4), np.float64)), "Q4_K s: float64, expected float32"),
        (
            dict(s=np.ones((4, 4), np.float32)),
            "Q4_K s: shape (4, 4), expected (K/gs, N) = (8, 4)",
        ),
        (dict(m=np.full((8, 4), np.nan, np.float32)), "Q4_K m[0, 0] = nan: not finite"),
        (dict(v=np.full((256, 4), 16, np.int16)), "Q4_K v[0, 0] = 16: outside 0..15"),
    ],
)
def test_validate_names_the_first_broken_rule(change, message):
    with pytest.raises(ConfigError) as e:
        BlockIntWeights(**{**good(), **change}).validate()
    assert str(e.value).startswith(message)


def test_validate_per_type_rules():
    assert BlockIntWeights(**good("Q6_K")).validate().groups == 16
    with pytest.raises(ConfigError, match=r"Q6_K v\[0, 0\] = -33: outside -32..31"):
        BlockIntWeights(
            **{**good("Q6_K"), "v": np.full((256, 4), -33, np.int16)}
        ).validate()
    with pytest.raises(ConfigError, match=r"IQ4_NL v\[0, 0\] = 0: not an IQ4 value"):
        BlockIntWeights(**good("IQ4_NL")).validate()
    with pytest.raises(ConfigError, match="Q8_0 has no additive term: m must be None"):
        BlockIntWeights(
            **{**good("Q8_0"), "m": np.zeros((8, 4), np.float32)}
        ).validate()


def test_a_non_finite_scale_is_one_line_on_the_run_path(tmp_path):
    """dmin = inf: the min terms -(dmin * m_j) are infinite (or NaN where m_j = 0); the run names the first,
    in one line, with no numpy warning before it."""
    rng = np.random.default_rng(24)
    raw = raw_blocks("Q4_K", 256, 8, (0, 2), rng)
    raw.reshape(8, 144)[:, 2:4] = np.frombuffer(
        np.float16(np.inf).tobytes(), np.uint8
    )  # dmin = inf
    path = write(tmp_path / "inf.gguf", {"w": (raw, "Q4_K")})
    code, out, err = run("--weights", str(path), "--layer", "w", "--m", "8")
    assert code == 2 and len(err.strip().splitlines()) == 1, out + err
    assert err.startswith("error: w: Q4_K m[0, 0] = ") and err.strip().endswith(
        ": not finite"
    )


# Decoder layer 0 of a toy Llama (hidden 256, 64-wide K/V, FFN 512) as llama.cpp's Q4_K_M mix types it:
# Q6_K for attn_v and ffn_down in the first eighth of the layers (llama-quant.cpp, use_more_bits), Q4_K for
# the other projections.
Q4_K_M_LAYER = {
    "attn_q": ("Q4_K", 256, 256),
    "attn_k": ("Q4_K", 256, 64),
    "attn_v": ("Q6_K", 256, 64),
    "attn_output": ("Q4_K", 256, 256),
    "ffn_gate": ("Q4_K", 256, 512),
    "ffn_up": ("Q4_K", 256, 512),
    "ffn_down": ("Q6_K", 512, 256),
}


@pytest.mark.slow
def test_a_q4_k_m_decoder_layer_runs_whole(tmp_path):
    rng = np.random.default_rng(25)
    tensors = {
        "token_embd.weight": (rng.standard_normal((8, 256)).astype(np.float32), None)
    }
    for proj, (kind, k, n) in Q4_K_M_LAYER.items():
        at = TYPES[kind][2]
        tensors[f"blk.0.{proj}.weight"] = (raw_blocks(kind, k, n, at, rng), kind)
    tensors["blk.0.attn_norm.weight"] = (np.ones(256, np.float32), None)
    path = write(tmp_path / "toy-q4_k_m.gguf", tensors)
    code, out, err = run(
        "--weights", str(path), "--decoder-layer", "0", "--m", "16", "--backend", "emu"
    )  # fmt: skip
    assert code == 0, out + err
    lines = out.splitlines()
    assert len(lines) == 8 and lines[-1] == "PASS!", out
    for proj, line in zip(Q4_K_M_LAYER, lines):
        k, n = Q4_K_M_LAYER[proj][1:]
        assert line.startswith(f"blk.0.{proj}.weight") and line.endswith("PASS"), line
        assert f"K={k:<5} N={n:<5}" in line, line
