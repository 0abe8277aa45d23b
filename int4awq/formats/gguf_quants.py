# SPDX-License-Identifier: MIT
"""GGUF's "integer times block scale" types, read exactly into one algebra, and the record format each runs as.

Every type here stores each weight as a small integer v and each group of gs values along K as a scale s and,
for the types with a min, an additive term m, so that

    value = v * s + m        (m absent: value = v * s)

| type   | block | v                   | gs | s              | m            |
|--------|-------|---------------------|----|----------------|--------------|
| Q4_1   | 32    | q (0..15)           | 32 | d              | m            |
| Q5_0   | 32    | q - 16 (-16..15)    | 32 | d              | -            |
| Q5_1   | 32    | q (0..31)           | 32 | d              | m            |
| Q8_0   | 32    | q (int8)            | 32 | d              | -            |
| Q4_K   | 256   | q (0..15)           | 32 | d sc_j         | -dmin m_j    |
| Q5_K   | 256   | q (0..31)           | 32 | d sc_j         | -dmin m_j    |
| Q6_K   | 256   | q - 32 (-32..31)    | 16 | d sc_j (int8)  | -            |
| IQ4_NL | 32    | kvalues[q]          | 32 | d              | -            |
| IQ4_XS | 256   | kvalues[q]          | 32 | d (ls_j - 32)  | -            |

d, dmin and Q4_1/Q5_1's m are the block's fp16 fields; sc_j, m_j (6-bit) and ls_j (6-bit) are per-32
sub-block fields, Q6_K's sc_j an int8 per 16. The definitions are gguf-py's `gguf/quants.py` (the reference
the tests compare with) and llama.cpp's `ggml-common.h` (block structs) and `ggml-quants.c`
(`dequantize_row_*`, `get_scale_min_k4`); the code below is written from those descriptions.

Block sizes in values and bytes come from `gguf.constants.GGML_QUANT_SIZES`; the field layout within a block
is checked against that byte size. GGUFReader gives a [K, N] tensor's data as uint8 (N, K / block * bytes);
the decoders are vectorised over all blocks at once.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from ml_dtypes import bfloat16

from ..errors import ConfigError
from .quant import check_dims, frozen


@functools.cache
def kvalues_iq4() -> np.ndarray:
    """The 16 int8 values IQ4_NL and IQ4_XS codes index (ggml-common.h kvalues_iq4nl), as gguf holds them."""
    from gguf.quants import IQ4_NL

    return np.asarray(IQ4_NL.kvalues, dtype=np.int16)


@dataclass(frozen=True)
class _Type:
    gs: int  # values along K per scale
    lo: int  # the range of v (for the IQ types, of the table)
    hi: int
    has_min: bool
    table: bool  # v is one of kvalues_iq4()
    format: str  # the kernel record format it runs as (int4awq.kernel.record.FORMATS)


# int4_min: 4-bit codes (zero point 0) with the min term; int8: 8-bit codes v in the record's bfp16 image;
# int8_min: int8 with the min term. Scales and min terms are exact bf16 pairs (up to 17 significant bits:
# fp16 fields, d * sc_j and dmin * m_j of 6-bit sc_j, m_j, d * (ls_j - 32)), except Q6_K's d * sc_j (an fp16
# times an int8, up to 18): int8_triple, three parts.
TYPES = {
    "Q4_1": _Type(32, 0, 15, True, False, "int4_min"),
    "Q5_0": _Type(32, -16, 15, False, False, "int8"),
    "Q5_1": _Type(32, 0, 31, True, False, "int8_min"),
    "Q8_0": _Type(32, -128, 127, False, False, "int8"),
    "Q4_K": _Type(32, 0, 15, True, False, "int4_min"),
    "Q5_K": _Type(32, 0, 31, True, False, "int8_min"),
    "Q6_K": _Type(16, -32, 31, False, False, "int8_triple"),
    "IQ4_NL": _Type(32, -127, 113, False, True, "int8"),
    "IQ4_XS": _Type(32, -127, 113, False, True, "int8"),
}
# The K-quants' fast mode (BlockIntWeights.with_bf16_scales): the format of one bf16 per scale and min term
# beside each exact format with a min term.
FAST_FORMATS = {"int4_min": "int4_min_bf16", "int8_min": "int8_min_bf16"}
# The type each block-integer record format's seeded weights take (random_block_weights): block 32.
SEED_TYPES = {
    "int4_min": "Q4_1",
    "int8": "Q8_0",
    "int8_triple": "Q6_K",
    "int8_min": "Q5_1",
}


def quant_sizes(type_name: str) -> tuple[int, int]:
    """(values, bytes) of one block of ggml type `type_name`, as gguf defines them."""
    from gguf import GGMLQuantizationType
    from gguf.constants import GGML_QUANT_SIZES

    return GGML_QUANT_SIZES[GGMLQuantizationType[type_name]]


@dataclass(frozen=True, eq=False)
class BlockIntWeights:
    """A [K, N] weight of one of the TYPES as value = v * s + m, exactly as the file holds it.

    v int16 [K, N] (the integer after the type's offset or table), s float32 [K // gs, N] (the group's scale,
    an fp16 times a small integer: exact in f32), m float32 [K // gs, N] or None (the additive term).
    bf16_scales: s and m were rounded to one bf16 each (with_bf16_scales: the K-quants' fast mode).
    """

    v: np.ndarray
    gs: int
    s: np.ndarray
    m: np.ndarray | None
    type_name: str
    bf16_scales: bool = False

    @property
    def k(self) -> int:
        return self.v.shape[0]

    @property
    def n(self) -> int:
        return self.v.shape[1]

    @property
    def groups(self) -> int:
        return self.k // self.gs

    def validate(self) -> "BlockIntWeights":
        """Raise ConfigError naming the first broken rule; return self when all hold."""
        t = TYPES.get(self.type_name)
        if t is None:
            raise ConfigError(
                f"{self.type_name}: not a block-integer type ({', '.join(TYPES)})"
            )
        who = self.type_name
        v = self.v
        if not (isinstance(v, np.ndarray) and v.dtype == np.int16 and v.ndim == 2):
            got = getattr(v, "dtype", type(v).__name__)
            raise ConfigError(f"{who} v: {got}, expected an int16 [K, N] array")
        if self.gs != t.gs:
            raise ConfigError(f"{who}: gs = {self.gs}, expected {t.gs}")
        if self.k % self.gs:
            raise ConfigError(
                f"{who}: K = {self.k} is not a whole number of groups of {self.gs}"
            )
        terms = [("s", self.s)]
        if t.has_min != (self.m is not None):
            raise ConfigError(
                f"{who} needs an additive term m (value = v*s + m)"
                if t.has_min
                else f"{who} has no additive term: m must be None"
            )
        if self.m is not None:
            terms.append(("m", self.m))
        for name, a in terms:
            if not (isinstance(a, np.ndarray) and a.dtype == np.float32):
                got = getattr(a, "dtype", type(a).__name__)
                raise ConfigError(f"{who} {name}: {got}, expected float32")
            if a.shape != (self.groups, self.n):
                raise ConfigError(
                    f"{who} {name}: shape {a.shape}, expected (K/gs, N) = ({self.groups}, {self.n})"
                )
            _first_bad(~np.isfinite(a), a, f"{who} {name}", "not finite")
        if t.table:
            _first_bad(~np.isin(v, kvalues_iq4()), v, f"{who} v", "not an IQ4 value")
        else:
            _first_bad(
                (v < t.lo) | (v > t.hi), v, f"{who} v", f"outside {t.lo}..{t.hi}"
            )
        return frozen(self, self.v, self.s, self.m)

    def dequantize(self) -> np.ndarray:
        """float32 [K, N]: f32(v * s), then + m, each step rounded to f32.

        This equals `gguf.quants.dequantize(raw, type).T` bit for bit, for every type here: gguf forms the same
        scale first (d, d * sc_j or d * (ls_j - 32) in f32, exact: 11 significant bits times at most 7), then
        multiplies by the integer (exact: at most 11 + 7 + 5 = 23 significant bits, IQ4_XS 11 + 5 + 7, f32 has
        24), and the min types add their term last in one rounding, as here: Q4_1 / Q5_1 `d * q + m`, Q4_K /
        Q5_K `(d * sc) * q - dmin * m` with dmin * m exact, which is v * s + m with m = -(dmin * m_j). One f32
        rounding of the same exact operands gives the same result whatever the order of the exact steps.
        (llama.cpp's C may contract `d * q + m` into a fused multiply-add; gguf-py does not, nor does this.)
        """
        g, n = self.s.shape
        out = self.v.astype(np.float32).reshape(g, self.gs, n) * self.s[:, None, :]
        if self.m is not None:
            out += self.m[:, None, :]
        return out.reshape(self.k, n)

    # ---------------------------------------------------------------------------------- the kernel's view
    @property
    def format(self) -> str:
        """The kernel record format these weights run as (int4awq.kernel.record.FORMATS)."""
        exact = TYPES[self.type_name].format
        return FAST_FORMATS[exact] if self.bf16_scales else exact

    def with_bf16_scales(self) -> tuple["BlockIntWeights", str]:
        """The fast mode of a type with a min term (FAST_FORMATS): s and m each rounded to the nearest bf16,
        as AWQ's default rounds fp16 scales, so that a fold multiplies one part, not a pair; and a line
        saying how much they moved (how many changed, the largest relative change)."""
        if TYPES[self.type_name].format not in FAST_FORMATS:
            raise ConfigError(
                f"{self.type_name}: its scales have no one-bf16 mode (the types with a min term do)"
            )
        s = self.s.astype(bfloat16).astype(np.float32)
        m = self.m.astype(bfloat16).astype(np.float32)
        changed = int(np.count_nonzero(s != self.s) + np.count_nonzero(m != self.m))
        total = self.s.size + self.m.size
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.concatenate(
                [
                    np.where(x != 0, np.abs(y - x) / np.abs(x), 0).ravel()
                    for x, y in ((self.s, s), (self.m, m))
                ]
            )
        w = BlockIntWeights(self.v, self.gs, s, m, self.type_name, True).validate()
        line = (
            f"scales and min terms rounded to bf16 (format {w.format}, the fast mode): {changed} of {total} "
            f"changed ({100.0 * changed / total:.2f}%), max relative change {float(rel.max(initial=0.0)):.3g}"
        )
        return w, line

    def padded(self, n: int) -> "BlockIntWeights":
        """Zero columns up to n (v = 0, s = 1, m = 0): they dequantise to 0 and their C columns are dropped."""
        extra = n - self.n
        if not extra:
            return self

        def pad(a, value=0):
            return np.pad(a, ((0, 0), (0, extra)), constant_values=value)

        m = None if self.m is None else pad(self.m)
        return BlockIntWeights(
            pad(self.v), self.gs, pad(self.s, 1), m, self.type_name, self.bf16_scales
        )


def _first_bad(bad: np.ndarray, a: np.ndarray, what: str, rule: str) -> None:
    hit = np.flatnonzero(bad)
    if hit.size:
        idx = tuple(int(i) for i in np.unravel_index(hit[0], a.shape))
        raise ConfigError(f"{what}{list(idx)} = {a[idx]}: {rule}")


# ------------------------------------------------------------------------------------------ the blocks
# Each layout is the block struct of ggml-common.h as (field, bytes); _fields checks the total against gguf.
LAYOUTS = {
    "Q4_1": (("d", 2), ("m", 2), ("qs", 16)),
    "Q5_0": (("d", 2), ("qh", 4), ("qs", 16)),
    "Q5_1": (("d", 2), ("m", 2), ("qh", 4), ("qs", 16)),
    "Q8_0": (("d", 2), ("qs", 32)),
    "Q4_K": (("d", 2), ("dmin", 2), ("scales", 12), ("qs", 128)),
    "Q5_K": (("d", 2), ("dmin", 2), ("scales", 12), ("qh", 32), ("qs", 128)),
    "Q6_K": (("ql", 128), ("qh", 64), ("scales", 16), ("d", 2)),
    "IQ4_NL": (("d", 2), ("qs", 16)),
    "IQ4_XS": (("d", 2), ("scales_h", 2), ("scales_l", 4), ("qs", 128)),
}


def _fields(type_name: str, blocks: np.ndarray) -> dict[str, np.ndarray]:
    """The fields of every block (..., bytes) by name; fp16 fields as f32 (exact), the rest as bytes."""
    layout = LAYOUTS[type_name]
    size = quant_sizes(type_name)[1]
    if sum(b for _, b in layout) != size or blocks.shape[-1] != size:
        raise ConfigError(
            f"{type_name}: block layout of {sum(b for _, b in layout)} bytes, gguf says {size}"
        )
    out, at = {}, 0
    for name, b in layout:
        out[name] = blocks[..., at : at + b]
        at += b
    for name in ("d", "dmin", "m"):
        if name in out:
            half = np.ascontiguousarray(out[name]).view("<f2")[..., 0]
            out[name] = half.astype(np.float32)
    return out


def _split_halves(qs: np.ndarray) -> np.ndarray:
    """(..., 16) bytes -> (..., 32) nibbles: value j is byte j's low nibble, value j + 16 its high one."""
    return np.concatenate([qs & 15, qs >> 4], axis=-1)


def _chunk_nibbles(qs: np.ndarray) -> np.ndarray:
    """K-quant nibbles (..., 128) -> (..., 8, 32): each 32 bytes give a 64-value chunk, low nibbles first
    (sub-block 2c), then high nibbles (sub-block 2c + 1)."""
    c = qs.reshape(*qs.shape[:-1], 4, 1, 32)
    return np.concatenate([c & 15, c >> 4], axis=-2).reshape(*qs.shape[:-1], 8, 32)


def _bit_planes(qh: np.ndarray, planes: int, width: int) -> np.ndarray:
    """(..., w) bytes -> (..., planes, w) of `width`-bit fields: plane p is bits [p*width, (p+1)*width)."""
    shift = (np.arange(planes, dtype=np.uint8) * width)[:, None]
    return (qh[..., None, :] >> shift) & ((1 << width) - 1)


def _scale_min_k4(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K / Q5_K's 12 bytes (..., 12) -> 8 six-bit scales and 8 six-bit mins (..., 8) each, by gguf's own
    unpacking (gguf.quants.Q4_K.get_scale_min, llama.cpp's get_scale_min_k4)."""
    from gguf.quants import Q4_K

    lead = scales.shape[:-1]
    sc, mn = Q4_K.get_scale_min(np.ascontiguousarray(scales).reshape(-1, 12))
    return sc.reshape(*lead, 8), mn.reshape(*lead, 8)


def _q4_1(f):
    return _split_halves(f["qs"]), f["d"], f["m"]


def _q5_high(f):
    # qh is a little-endian u32: bit j is the fifth bit of value j
    hi = np.unpackbits(f["qh"], axis=-1, bitorder="little")
    return _split_halves(f["qs"]) | (hi << 4)


def _q5_0(f):
    return _q5_high(f).astype(np.int16) - 16, f["d"], None


def _q5_1(f):
    return _q5_high(f), f["d"], f["m"]


def _q8_0(f):
    return np.ascontiguousarray(f["qs"]).view(np.int8), f["d"], None


def _k_scales(f):
    sc, mn = _scale_min_k4(f["scales"])
    d, dmin = f["d"][..., None], f["dmin"][..., None]
    # the products are exact (11 + 6 bits); m is negated so that value = v * s + m
    return d * sc.astype(np.float32), -(dmin * mn.astype(np.float32))


def _q4_k(f):
    s, m = _k_scales(f)
    return _chunk_nibbles(f["qs"]), s, m


def _q5_k(f):
    s, m = _k_scales(f)
    # bit p of qh[l] is the fifth bit of value l of sub-block p
    return _chunk_nibbles(f["qs"]) | (_bit_planes(f["qh"], 8, 1) << 4), s, m


def _q6_k(f):
    lead = f["ql"].shape[:-1]
    # two halves of 128 values; in each, 64 ql bytes (low nibbles: values 0..63, high nibbles: 64..127) and
    # 32 qh bytes whose 2-bit fields p = 0..3 are the top bits of values 32p .. 32p + 31
    ql = f["ql"].reshape(*lead, 2, 64)
    low = np.concatenate([ql & 15, ql >> 4], axis=-1)
    high = _bit_planes(f["qh"].reshape(*lead, 2, 32), 4, 2).reshape(*lead, 2, 128)
    v = (low | (high << 4)).astype(np.int16) - 32
    sc = np.ascontiguousarray(f["scales"]).view(np.int8).astype(np.float32)
    return v, f["d"][..., None] * sc, None


def _iq4_nl(f):
    return kvalues_iq4()[_split_halves(f["qs"])], f["d"], None


def _iq4_xs(f):
    lead = f["d"].shape
    sl = f["scales_l"]
    # sub-scale 2i's low bits are byte i's low nibble, 2i + 1's its high nibble
    low = np.stack([sl & 15, sl >> 4], axis=-1).reshape(*lead, 8)
    sh = np.ascontiguousarray(f["scales_h"]).view("<u2")[..., 0]
    top = (sh[..., None] >> (2 * np.arange(8, dtype=np.uint16))) & 3
    ls = (low | (top << 4)).astype(np.int16) - 32
    codes = _split_halves(f["qs"].reshape(*lead, 8, 16))
    return kvalues_iq4()[codes], f["d"][..., None] * ls.astype(np.float32), None


DECODERS = {
    "Q4_1": _q4_1,
    "Q5_0": _q5_0,
    "Q5_1": _q5_1,
    "Q8_0": _q8_0,
    "Q4_K": _q4_k,
    "Q5_K": _q5_k,
    "Q6_K": _q6_k,
    "IQ4_NL": _iq4_nl,
    "IQ4_XS": _iq4_xs,
}


def decode(type_name: str, raw: np.ndarray, k: int, n: int) -> BlockIntWeights:
    """Raw blocks of a [K, N] tensor, uint8, N rows of K / block blocks (flat, as gguf_file reads them, or
    (N, K / block * bytes) as GGUFReader gives them) -> BlockIntWeights.

    Not validated here: the caller names the tensor in the error (BlockIntWeights.validate).
    """
    block, size = quant_sizes(type_name)
    if k % block:
        raise ConfigError(
            f"{type_name} [{k}, {n}]: K = {k} is not a whole number of {block}-value blocks"
        )
    # the size check comes before the reshape, so a short buffer is named here and not in numpy's words
    raw = np.asarray(raw, dtype=np.uint8)
    if raw.size != n * (k // block) * size:
        raise ConfigError(
            f"{type_name} [{k}, {n}]: {raw.size} bytes of data, expected {n * (k // block) * size} "
            f"({n} rows of {k // block} {size}-byte blocks): a truncated file?"
        )
    blocks = raw.reshape(n, k // block, size)
    v, s, m = DECODERS[type_name](_fields(type_name, blocks))
    gs = TYPES[type_name].gs

    def by_k(a, rows):  # (N, blocks, ...) -> [rows, N]
        return np.ascontiguousarray(a.reshape(n, rows).T)

    return BlockIntWeights(
        by_k(v.astype(np.int16), k),
        gs,
        by_k(np.asarray(s, np.float32), k // gs),
        None if m is None else by_k(np.asarray(m, np.float32), k // gs),
        type_name,
    )


def random_block_weights(
    fmt: str, k: int, n: int, seed: int, exact: bool = False, gs: int | None = None
) -> BlockIntWeights:
    """Seeded weights of a block-integer record format, as its SEED_TYPES type holds them (groups of 32), or
    with gs the first of the format's types with that group.

    Default: v uniform over the type's range, s = d * sc with an fp16 d and an sc of 6 bits (7 in int8_triple,
    whose triples hold Q6_K's 8-bit sc), so s takes every bf16 part the format holds; for the min types
    m = -(dmin * m_j) likewise; sized so that W is about N(0, 1/K). exact=True: v in -15..15 (0..15 for
    the unsigned types), s = 2^-e and m = -j 2^-e' (e, e' in 0..3, j in 0..7): with quant.random_activations(exact=True) every product and partial sum is
    a multiple of 2^-3 below 2^21 (a span's sum G or row sum R is an integer below 2^11), so exact in f32
    in any order; only C's rounding to bf16 remains.
    """
    check_dims(K=k, N=n)
    exact_of = {fast: exact for exact, fast in FAST_FORMATS.items()}
    if fmt in exact_of:
        # the fast mode: the exact format's weights, their scales rounded to bf16
        w = random_block_weights(exact_of[fmt], k, n, seed, exact, gs)
        return w.with_bf16_scales()[0]  # exact: powers of two, which stay as they are
    type_name = SEED_TYPES[fmt]
    if gs is not None and gs != TYPES[type_name].gs:
        same = [x for x, t in TYPES.items() if t.format == fmt and t.gs == gs]
        if not same:
            groups = sorted({t.gs for t in TYPES.values() if t.format == fmt})
            raise ConfigError(
                f"--format {fmt}: its GGUF types have groups of {' or '.join(map(str, groups))} values "
                f"along K, not --gs {gs}"
            )
        type_name = same[0]
    t = TYPES[type_name]
    if k % t.gs:
        raise ConfigError(
            f"K = {k}: {fmt} seeds {type_name}-like weights, groups of {t.gs} along K"
        )
    rng = np.random.default_rng(seed)
    g = k // t.gs
    if exact:
        v = rng.integers(max(t.lo, -15), min(t.hi, 15) + 1, (k, n)).astype(np.int16)
        s = np.exp2(-rng.integers(0, 4, (g, n))).astype(np.float32)
        m = -(rng.integers(0, 8, (g, n)) * np.exp2(-rng.integers(0, 4, (g, n))))
    else:
        v = rng.integers(t.lo, t.hi + 1, (k, n)).astype(np.int16)
        # s = d * sc * 2^-e: an fp16 d in [0.5, 1) (11 significant bits, never subnormal), an sc of 6 bits
        # (7 where the format holds triples), and a power of two that sizes W to about N(0, 1/K)
        sc_bits = 7 if fmt == "int8_triple" else 6  # Q6_K's 8-bit sc, as triples
        d = rng.uniform(0.5, 1.0, (g, n)).astype(np.float16).astype(np.float32)
        sc = rng.integers(1 << (sc_bits - 1), 1 << sc_bits, (g, n)).astype(np.float32)
        e = np.round(np.log2(np.sqrt(k) * (t.hi - t.lo) / 2 * 0.75 * (1 << sc_bits)))
        s = d * sc * np.float32(2.0**-e)
        # the min types: -(dmin * m_j) with a 6-bit m_j (mean about 40), dmin centring v * s (whose mean is
        # about (hi + 1) / 2 times s's)
        dmin = (
            np.mean(s) * (t.hi + 1) / 2 / 40 * rng.uniform(0.9, 1.1, (g, n))
        ).astype(np.float16)
        m = -(dmin.astype(np.float32) * rng.integers(16, 64, (g, n)).astype(np.float32))
    m = np.asarray(m, np.float32) if t.has_min else None
    return BlockIntWeights(v, t.gs, s.astype(np.float32), m, type_name).validate()
