# SPDX-License-Identifier: MIT
"""GGUF files (llama.cpp), read with the `gguf` package's own GGUFReader.

A 4-bit tensor of a GGUF file is ggml's [K, N] (ne[0] = K, blocks along K, a row per output n), N rows of
K / 32 blocks. The header is read by GGUFReader; each tensor's bytes are kept flat, as the file holds them,
and checked against the type and shape before they are shaped, so that a truncated file still lists and a
cut tensor is one line naming it. Read so far:

* MXFP4 (ggml type 39): `block_mxfp4 { u8 e; u8 qs[16]; }`, 17 bytes per 32 values; element j of a block is
  kvalues_mxfp4[qs[j] & 15] * 2^(e - 128), element j + 16 is the same of qs[j] >> 4 (the "split half" nibble
  order). kvalues_mxfp4 is twice the E2M1 table, so the nibble is the E2M1 code and e is the OCP E8M0 byte:
  the layer is exactly int4awq.formats.mxfp4.Mxfp4Weights(codes, scales = e), no conversion.

* Q4_0 (ggml type 2): `block_q4_0 { f16 d; u8 qs[16]; }`, 18 bytes per 32 values, split-half order; value
  d * (q - 8). That is an AWQ record with group 32, zero point 8 and scale d, except that d is fp16 (11
  significant bits, bf16 has 8): it is held exactly as a bf16 pair d_hi + d_lo (record format awq_f16, whose
  fold multiplies by both halves). A negative d is folded into the codes, d (q - 8) = |d| ((15 - q) - 7),
  and a block with d = 0 (all values 0) becomes codes 8, zero point 8, scale 1: the values are unchanged.

* Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_NL and IQ4_XS (int4awq/formats/gguf_quants.py) become
  BlockIntWeights, value = v * s + m, equal to gguf.quants.dequantize bit for bit, which run as the record
  formats int4_min, int8 and int8_min (gguf_quants.TYPES gives each type's).

Refused with one line, naming the type: the other types (Q2_K, Q3_K, the other IQ types, float weights) and
any tensor that is not a 2-D weight.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ConfigError, not_found
from .gguf_quants import TYPES as BLOCK_INT_TYPES
from .gguf_quants import BlockIntWeights, decode, quant_sizes
from .mxfp4 import MX_BLOCK, Mxfp4Weights, check_scales
from .quant import AwqWeights, scale_pair_of

# The types that run on the kernel (ggml-common.h block_mxfp4, block_q4_0: 32 values a block; the
# block-integer types of gguf_quants).
KERNEL_TYPES = ("MXFP4", "Q4_0", *BLOCK_INT_TYPES)
FLOAT_TYPES = ("F32", "F16", "BF16", "F64")


def gguf_status(type_name: str) -> str:
    """What happens to a 2-D tensor of this ggml type: 'runs',
    or 'not read (...)'."""
    if type_name in KERNEL_TYPES:
        return "runs"
    if type_name in FLOAT_TYPES:
        return (
            f"not read ({type_name}: a float weight, the kernel takes quantised ones)"
        )
    return f"not read ({type_name}: no decoder for this type yet)"


def is_gguf(path: str | Path) -> bool:
    return str(path).endswith(".gguf")


class _CutShort(Exception):
    """The GGUF header runs past the end of the file."""


@dataclass(frozen=True)
class GgufTensor:
    """One tensor of a GGUF file as its header describes it, with the bytes the file holds for it."""

    name: str
    # ggml's name of the type, or "type <code>" for a code gguf does not know
    type_name: str
    # ggml order: dims[0] = ne[0] is K (the blocks run along it)
    dims: tuple[int, ...]
    # bytes the type and shape need; None when not a whole number of blocks
    expected: int | None
    # uint8: the bytes from the tensor's offset, at most `expected` (fewer if cut short)
    data: np.ndarray

    @property
    def cut_short(self) -> str:
        """'' when the file holds all of the tensor's bytes, else why not, in one phrase."""
        if self.expected is None:
            return ""
        if self.data.size < self.expected:
            return f"cut short: {self.data.size} of its {self.expected} bytes are in the file"
        return ""


# The gguf release whose GGUFReader helpers _reader_class extends (requirements.txt pins it).
GGUF_VERSION = "0.19.0"


@functools.lru_cache(maxsize=1)
def _reader_class():
    from importlib.metadata import version

    if version("gguf") != GGUF_VERSION:
        raise ConfigError(
            f"reading GGUF needs gguf {GGUF_VERSION} (requirements.txt; its reader's helpers are extended "
            f"here to list truncated files), found {version('gguf')}: pip install gguf=={GGUF_VERSION}"
        )
    from gguf import GGUFReader
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    class Reader(GGUFReader):
        """GGUFReader with two of its helpers replaced, so that a damaged file is one line and a truncated one
        still lists: _get refuses to read past the end of the file (GGUFReader's own reads would fail later
        with numpy's words), and _build_tensors keeps each tensor's bytes flat, as found (GGUFReader reshapes
        them, which fails on a truncated file before anything can be listed)."""

        def _get(self, offset, dtype, count=1, override_order=None):
            if int(offset) + np.dtype(dtype).itemsize * int(count) > len(self.data):
                raise _CutShort()
            return super()._get(offset, dtype, count, override_order)

        def _build_tensors(self, start_offs, fields):
            tensors, seen = [], set()
            for field in fields:
                _, name_data, _, dims, raw_type, offset = field.parts
                name = str(bytes(name_data), encoding="utf-8")
                if name in seen:
                    raise ValueError(f"tensor {name} appears twice")
                seen.add(name)
                dims = tuple(int(d) for d in dims)
                try:
                    kind = GGMLQuantizationType(int(raw_type[0]))
                except ValueError:
                    kind = None
                expected = None
                if kind is not None:
                    block, size = GGML_QUANT_SIZES[kind]
                    if dims and dims[0] % block == 0:
                        expected = math.prod(dims) // block * size
                at = int(start_offs) + int(offset[0])
                data = self.data[at : at + (expected or 0)]
                tensors.append(
                    GgufTensor(
                        name,
                        kind.name if kind is not None else f"type {int(raw_type[0])}",
                        dims,
                        expected,
                        np.asarray(data, dtype=np.uint8),
                    )
                )
            self.tensors = tensors

    return Reader


@functools.lru_cache(maxsize=4)
def _open(reader, path: str, mtime_ns: int, size: int):
    """One GGUFReader per file version: a whole model reads the same header for every tensor, and a
    Llama 3 header (its 280k merges) takes seconds to parse."""
    return reader(path)


def _reader(path: str | Path):
    try:
        reader = _reader_class()
    except ModuleNotFoundError:
        raise ConfigError(
            "reading GGUF needs the gguf package: pip install gguf (make deps)"
        ) from None
    if not Path(path).is_file():
        raise ConfigError(f"{path}: no such GGUF file")
    size = Path(path).stat().st_size
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ConfigError(
            f"{path}: not a GGUF file ({size} bytes; a GGUF file begins with the bytes 'GGUF')"
        )
    try:
        st = Path(path).stat()
        return _open(reader, str(path), st.st_mtime_ns, size)
    except _CutShort:
        raise ConfigError(
            f"{path}: not a readable GGUF file: its header runs past the end of the file ({size} bytes; "
            "cut short?)"
        ) from None
    except UnicodeDecodeError:
        raise ConfigError(
            f"{path}: not a readable GGUF file: its header is damaged (a name that is not UTF-8)"
        ) from None
    except Exception as e:
        # the reader's own complaint about a damaged header (version, alignment, a duplicate name)
        first = (str(e).splitlines() or [type(e).__name__])[0]
        raise ConfigError(f"{path}: not a readable GGUF file ({first})") from None


@dataclass(frozen=True)
class GgufLayer:
    name: str
    type_name: str  # ggml's name of the tensor type, e.g. MXFP4, Q4_0
    k: int
    n: int
    # why its data cannot be read (cut short, not whole blocks), or ""
    unread: str = ""
    # why the loader refuses the data of a type that runs (a scale), or ""
    refused: str = ""

    @property
    def runs(self) -> bool:
        """The kernel runs this tensor (a KERNEL_TYPES type, its data whole and accepted)."""
        return self.type_name in KERNEL_TYPES and not (self.unread or self.refused)

    @property
    def status(self) -> str:
        if self.unread:
            return f"not read ({self.unread})"
        if self.refused:
            return f"does not run: {self.refused}"
        return gguf_status(self.type_name)


@dataclass(frozen=True)
class GgufContents:
    """What --list-layers shows of a GGUF file: its 2-D tensors, and the dims of every other tensor."""

    layers: list[GgufLayer]
    others: list[tuple[int, ...]]


def gguf_contents(path: str | Path) -> GgufContents:
    """Every tensor of a GGUF file from its header: the 2-D ones as GgufLayer with whatever keeps them from
    being read or run (data cut short; for the types that run, a scale the loader refuses, found by reading
    the scales alone), the others by their dims."""
    layers, others = [], []
    for t in _reader(path).tensors:
        if len(t.dims) != 2:
            others.append(t.dims)
            continue
        k, n = t.dims
        unread = refused = ""
        if t.type_name in KERNEL_TYPES:
            if t.expected is None:
                block = quant_sizes(t.type_name)[0]
                unread = f"K = {k} is not a whole number of {block}-value blocks"
            elif t.cut_short:
                unread = t.cut_short
            elif t.type_name in ("MXFP4", "Q4_0"):
                refused = _scale_problem(t.type_name, t.data, k, n)
        layers.append(GgufLayer(t.name, t.type_name, k, n, unread, refused))
    return GgufContents(layers, others)


def _scale_problem(kind: str, raw: np.ndarray, k: int, n: int) -> str:
    """The loader's refusal of a whole MXFP4 / Q4_0 tensor's scales ('' when it has none): the scales alone,
    a byte (MXFP4 e) or two (Q4_0 d) of each block, are read."""
    block, size = quant_sizes(kind)
    blocks = raw.reshape(n, k // block, size)
    try:
        if kind == "MXFP4":
            check_scales(blocks[:, :, 0].T)
        else:
            _check_q4_0_scales(
                np.ascontiguousarray(blocks[:, :, :2]).view("<f2")[:, :, 0]
            )
    except ConfigError as e:
        return str(e)
    return ""


def list_gguf_layers(path: str | Path) -> list[GgufLayer]:
    """The 2-D tensors of a GGUF file with their ggml types, [K, N] and status (gguf_contents)."""
    contents = gguf_contents(path)
    if not contents.layers:
        raise ConfigError(
            f"{path}: no 2-D tensors ({len(contents.others)} tensors of other dimensions)"
        )
    return contents.layers


def load_gguf_layer(
    path: str | Path, name: str
) -> Mxfp4Weights | AwqWeights | BlockIntWeights:
    """Tensor `name` [K, N], exactly as the file holds it: MXFP4 as Mxfp4Weights, Q4_0 as AwqWeights with
    scale pairs (format awq_f16), the block-integer types (gguf_quants.TYPES) as BlockIntWeights.
    A type the kernel does not run is refused from the header, before any decoding.
    """
    tensors = {t.name: t for t in _reader(path).tensors}
    t = tensors.get(name)
    if t is None:
        known = [n for n, x in tensors.items() if len(x.dims) == 2]
        raise not_found("tensor", name, path, "2-D tensors", known)
    kind = t.type_name
    shape = list(t.dims)
    if len(shape) != 2:
        raise ConfigError(f"{name}: GGUF {kind} {shape} is not read: 2-D weights only")
    status = gguf_status(kind)
    if kind not in KERNEL_TYPES:
        raise ConfigError(f"{name}: GGUF {kind} {shape} is {status}")
    k, n = shape
    block, size = quant_sizes(kind)
    if k % block:
        raise ConfigError(
            f"{name}: K = {k} is not a whole number of {block}-value {kind} blocks"
        )
    # the size check comes before any reshape: a cut file is named here, never in numpy's words
    raw = t.data
    if raw.size != n * (k // block) * size:
        raise ConfigError(
            f"{name}: GGUF {kind} [{k}, {n}]: {raw.size} bytes of data in the file, expected "
            f"{n * (k // block) * size} ({n} rows of {k // block} {size}-byte blocks): a truncated file?"
        )
    try:
        if kind in BLOCK_INT_TYPES:
            with np.errstate(
                invalid="ignore", over="ignore"
            ):  # validate() names a non-finite scale
                return decode(kind, raw, k, n).validate()
        blocks = raw.reshape(n, k // block, size)
        qs = blocks[:, :, size - 16 :]
        codes = np.concatenate([qs & 15, qs >> 4], axis=2)  # split half: j, then j + 16
        if kind == "MXFP4":
            w = Mxfp4Weights(
                np.ascontiguousarray(codes.reshape(n, k).T),
                np.ascontiguousarray(blocks[:, :, 0].T),
            )
        else:
            d = np.ascontiguousarray(blocks[:, :, :2]).view("<f2")[:, :, 0]
            w = _q4_0_weights(codes, d)
        w.validate()
    except ConfigError as e:
        raise ConfigError(f"{name}: {e}") from None
    return w


def _check_q4_0_scales(d: np.ndarray) -> None:
    """d fp16 [N, K/32]: every block scale finite."""
    if not np.isfinite(d).all():
        bad = tuple(int(i) for i in np.argwhere(~np.isfinite(d))[0])
        raise ConfigError(f"block {list(bad[::-1])} has scale d = {d[bad]}: not finite")


def _q4_0_weights(codes: np.ndarray, d: np.ndarray) -> AwqWeights:
    """codes uint8 [N, K/32, 32] and d fp16 [N, K/32] -> AwqWeights (q - z) * (s + s_lo) == d (q - 8)."""
    _check_q4_0_scales(d)
    neg, zero = d < 0, d == 0
    codes = np.where(neg[:, :, None], 15 - codes, codes)
    codes = np.where(zero[:, :, None], 8, codes).astype(np.uint8)
    z = np.where(neg, 7, 8).astype(np.uint8)
    s_hi, s_lo = scale_pair_of(np.where(zero, np.float16(1), np.abs(d)))
    n, groups = d.shape
    return AwqWeights(
        np.ascontiguousarray(codes.reshape(n, groups * MX_BLOCK).T),
        np.ascontiguousarray(z.T),
        np.ascontiguousarray(s_hi.T),
        MX_BLOCK,
        np.ascontiguousarray(s_lo.T),
    )


# The float types a norm weight is stored in (llama.cpp writes them F32)
_VECTOR_TYPES = {"F32": np.float32, "F16": np.float16, "BF16": "bfloat16"}


def load_gguf_vector(path: str | Path, name: str) -> np.ndarray:
    """1-D float tensor `name` (a norm weight) as float32."""
    tensors = {t.name: t for t in _reader(path).tensors}
    t = tensors.get(name)
    if t is None:
        known = [n for n, x in tensors.items() if len(x.dims) == 1]
        raise not_found("tensor", name, path, "1-D tensors", known)
    if len(t.dims) != 1 or t.type_name not in _VECTOR_TYPES:
        raise ConfigError(
            f"{name}: GGUF {t.type_name} {list(t.dims)}: a norm weight is a 1-D F32, F16 or BF16 tensor"
        )
    if t.cut_short:
        raise ConfigError(f"{name}: {t.cut_short}")
    dtype = _VECTOR_TYPES[t.type_name]
    if dtype == "bfloat16":
        from ml_dtypes import bfloat16 as dtype
    return t.data.view(dtype).astype(np.float32)


def gguf_attention_heads(path: str | Path) -> tuple[int, int]:
    """(query heads, key/value heads) from the header's <arch>.attention.head_count(_kv)."""
    fields = _reader(path).fields
    arch = fields.get("general.architecture")
    arch = arch.contents() if arch is not None else "llama"
    out = []
    for key in (f"{arch}.attention.head_count", f"{arch}.attention.head_count_kv"):
        f = fields.get(key)
        if f is None:
            raise ConfigError(
                f"{path}: no {key} in the GGUF header: the attention's heads are unknown"
            )
        out.append(int(f.contents()))
    return out[0], out[1]


def gguf_rope_frequencies(path: str | Path, d: int) -> np.ndarray:
    """The rotary frequencies of heads of d from the header's <arch>.rope.freq_base (10000 when absent,
    llama.cpp's default) divided by the rope_freqs tensor where the file has one (Llama 3's scaling as
    llama.cpp's converter writes it: one divisor per frequency)."""
    from .rope import base_frequencies

    reader = _reader(path)
    arch = reader.fields.get("general.architecture")
    arch = arch.contents() if arch is not None else "llama"
    base = reader.fields.get(f"{arch}.rope.freq_base")
    f = base_frequencies(float(base.contents()) if base is not None else 10000.0, d)
    divisors = next((t for t in reader.tensors if t.name == "rope_freqs.weight"), None)
    if divisors is None:
        return f
    v = load_gguf_vector(path, "rope_freqs.weight").astype(np.float64)
    if v.shape != f.shape or not (v > 0).all():
        raise ConfigError(
            f"{path}: rope_freqs.weight holds {v.size} values; heads of {d} need {f.size} positive ones"
        )
    return f / v


def gguf_field(path: str | Path, key: str):
    """A header field's value (gguf's ReaderField.contents()), with "{arch}" in key replaced by the file's
    general.architecture; None when the file has no such field."""
    fields = _reader(path).fields
    arch = fields.get("general.architecture")
    f = fields.get(key.replace("{arch}", arch.contents() if arch else "llama"))
    return None if f is None else f.contents()


def gguf_tensor_names(path: str | Path) -> list[str]:
    return [t.name for t in _reader(path).tensors]


def gguf_embedding(path: str | Path, name: str = "token_embd.weight"):
    """(rows, vocab, hidden): rows(ids) -> float32 [len(ids), hidden], the token embedding's rows
    dequantised one at a time by gguf.quants.dequantize (llama.cpp's get_rows does the same), so a
    quantised table is never expanded whole."""
    import gguf

    t = next((t for t in _reader(path).tensors if t.name == name), None)
    if t is None:
        raise not_found("tensor", name, path, "tensors", gguf_tensor_names(path))
    if len(t.dims) != 2 or t.expected is None or t.cut_short:
        raise ConfigError(
            f"{name}: GGUF {t.type_name} {list(t.dims)}: not a whole 2-D embedding table"
            + (f" ({t.cut_short})" if t.cut_short else "")
        )
    try:
        qtype = gguf.GGMLQuantizationType[t.type_name]
    except KeyError:
        raise ConfigError(
            f"{name}: GGUF type {t.type_name}: gguf cannot read it"
        ) from None
    hidden, vocab = t.dims
    table = t.data.reshape(vocab, -1)

    def rows(ids) -> np.ndarray:
        try:
            return np.stack(
                [gguf.quants.dequantize(table[i], qtype) for i in ids]
            ).astype(np.float32)
        except NotImplementedError:
            raise ConfigError(
                f"{name}: GGUF {t.type_name}: gguf.quants cannot dequantise it"
            ) from None

    return rows, vocab, hidden
