# SPDX-License-Identifier: MIT
"""GGUF's block-integer types (int4awq/gguf_quants.py) read through int4awq/gguf_file.py from files written by
gguf's own GGUFWriter. gguf cannot quantise the k-quants or IQ types, so each tensor is made of valid raw blocks:
random code bytes from a seeded RNG with finite fp16 scale fields. Every expected value is gguf's own
`gguf.quants.dequantize` of those bytes; the loaded weights must equal it bit for bit (the arithmetic argument
is in BlockIntWeights.dequantize). A type that is read but does not run is refused by the host program with one
line and exit 2; a truncated tensor and an inf scale are one line too."""

from dataclasses import replace

import numpy as np
import pytest

import gguf  # noqa: E402  (a required dependency: requirements.txt)
from gguf import GGMLQuantizationType as Q  # noqa: E402
from gguf.constants import GGML_QUANT_SIZES  # noqa: E402

from int4awq import gguf_file  # noqa: E402
from int4awq.errors import ConfigError  # noqa: E402
from int4awq.gguf_file import list_gguf_layers, load_gguf_layer  # noqa: E402
from int4awq.gguf_quants import BlockIntWeights, decode  # noqa: E402
from int4awq.weights_file import list_layers, listing  # noqa: E402

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
STATUS = {
    "Q4_1": "read exactly (Q4_1: v*s + m); the kernel has no min term yet",
    "Q5_0": "read exactly (Q5_0); the kernel takes 4-bit codes only so far",
    "Q5_1": "read exactly (Q5_1: v*s + m); the kernel has no min term yet and takes 4-bit codes only so far",
    "Q8_0": "read exactly (Q8_0); the kernel takes 4-bit codes only so far",
    "Q4_K": "read exactly (Q4_K: v*s + m); the kernel has no min term yet",
    "Q5_K": "read exactly (Q5_K: v*s + m); the kernel has no min term yet and takes 4-bit codes only so far",
    "Q6_K": "read exactly (Q6_K); the kernel takes 4-bit codes only so far",
    "IQ4_NL": "read exactly (IQ4_NL: v = kvalues[q]); the kernel has no IQ4 code table yet",
    "IQ4_XS": "read exactly (IQ4_XS: v = kvalues[q]); the kernel has no IQ4 code table yet",
}


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
            STATUS[kind],
            "read",
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
        f"{len(TYPES) + 2} tensors: {len(TYPES)} read exactly but do not run yet, 2 not read; not "
        "listed: 1 1-D tensor"
    )
    flags = {t.name: (t.runs, t.read_exactly) for t in list_gguf_layers(path)}
    assert all(flags[name_of(kind)] == (False, True) for kind in TYPES)
    assert (
        flags["blk.9.attn_q.weight"] == flags["blk.9.attn_k.weight"] == (False, False)
    )


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


@pytest.mark.parametrize("kind", ["Q4_K", "Q6_K", "IQ4_XS"])
def test_the_host_program_refuses_a_type_it_cannot_run_in_one_line(model, kind):
    path, _ = model
    k, n, *_ = TYPES[kind]
    code, out, err = run(
        "--weights", str(path), "--layer", name_of(kind), "--m", "8", "--backend", "emu"
    )  # fmt: skip
    assert code == 2 and len(err.strip().splitlines()) == 1, out + err
    assert (
        err.strip()
        == f"error: {name_of(kind)}: GGUF {kind} K={k} N={n} does not run: {STATUS[kind]}"
    )


def test_a_decoder_layer_with_a_k_quant_is_refused_in_one_line(model):
    path, _ = model
    code, out, err = run(
        "--weights", str(path), "--decoder-layer", str(list(TYPES).index("Q5_K")), "--m", "8",
        "--backend", "emu",
    )  # fmt: skip
    assert code == 2 and len(err.strip().splitlines()) == 1, out + err
    assert (
        f"{name_of('Q5_K')}: GGUF Q5_K K=256 N=16 does not run: {STATUS['Q5_K']}" in err
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
    # the run path refuses the type from the header, before the data is looked at
    code, out, err = run("--weights", str(cut), "--layer", "w", "--m", "8")
    assert code == 2 and err.strip() == (
        "error: w: GGUF Q4_K K=512 N=8 does not run: read exactly (Q4_K: v*s + m); the kernel has no min "
        "term yet"
    ), (out + err)
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
            dict(v=np.zeros((64, 4), np.int16)),
            "Q4_K: K = 64 is not a whole number of 256-value blocks",
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


def test_a_non_finite_scale_of_a_read_only_type_is_one_line_on_the_run_path(tmp_path):
    """The run path refuses a type it does not run from the header: no decoding, so no numpy warning
    before the one line, whatever the scales hold."""
    rng = np.random.default_rng(24)
    raw = raw_blocks("Q4_K", 256, 8, (0, 2), rng)
    raw.reshape(8, 144)[:, 2:4] = np.frombuffer(
        np.float16(np.inf).tobytes(), np.uint8
    )  # dmin = inf
    path = write(tmp_path / "inf.gguf", {"w": (raw, "Q4_K")})
    code, out, err = run("--weights", str(path), "--layer", "w", "--m", "8")
    assert code == 2 and len(err.strip().splitlines()) == 1, out + err
    assert "does not run" in err
