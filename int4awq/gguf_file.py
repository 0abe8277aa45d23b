# SPDX-License-Identifier: MIT
"""GGUF files (llama.cpp), read with the `gguf` package's own GGUFReader.

A 4-bit tensor of a GGUF file is ggml's [K, N] (ne[0] = K, blocks along K, a row per output n); GGUFReader
gives its raw blocks as uint8 (N, K / 32 * block bytes). Read so far:

* MXFP4 (ggml type 39): `block_mxfp4 { u8 e; u8 qs[16]; }`, 17 bytes per 32 values; element j of a block is
  kvalues_mxfp4[qs[j] & 15] * 2^(e - 128), element j + 16 is the same of qs[j] >> 4 (the "split half" nibble
  order). kvalues_mxfp4 is twice the E2M1 table, so the nibble is the E2M1 code and e is the OCP E8M0 byte:
  the layer is exactly int4awq.mxfp4.Mxfp4Weights(codes, scales = e), no conversion.

* Q4_0 (ggml type 2): `block_q4_0 { f16 d; u8 qs[16]; }`, 18 bytes per 32 values, split-half order; value
  d * (q - 8). That is an AWQ record with group 32, zero point 8 and scale d, except that d is fp16 (11
  significant bits, bf16 has 8): it is held exactly as a bf16 pair d_hi + d_lo (record format awq_f16, whose
  fold multiplies by both halves). A negative d is folded into the codes, d (q - 8) = |d| ((15 - q) - 7),
  and a block with d = 0 (all values 0) becomes codes 8, zero point 8, scale 1: the values are unchanged.

Read exactly but not run yet (int4awq/gguf_quants.py): Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_NL and
IQ4_XS become BlockIntWeights, value = v * s + m, equal to gguf.quants.dequantize bit for bit; weights_file.load
refuses them with one line saying why the kernel cannot take them yet (GgufLayer.status).

Refused with one line, naming the type: the other types (Q2_K, Q3_K, the other IQ types, float weights) and
any tensor that is not a 2-D weight.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import ConfigError, not_found
from .gguf_quants import TYPES as BLOCK_INT_TYPES
from .gguf_quants import BlockIntWeights, decode, quant_sizes, read_status
from .mxfp4 import MX_BLOCK, Mxfp4Weights
from .quant import AwqWeights, scale_pair_of

# The types that run on the kernel today (ggml-common.h block_mxfp4, block_q4_0: 32 values a block).
KERNEL_TYPES = ("MXFP4", "Q4_0")
FLOAT_TYPES = ("F32", "F16", "BF16", "F64")


def gguf_status(type_name: str) -> str:
    """What happens to a 2-D tensor of this ggml type: 'runs', 'read exactly (...); <why not on the kernel>',
    or 'not read (...)'."""
    if type_name in KERNEL_TYPES:
        return "runs"
    if type_name in BLOCK_INT_TYPES:
        return read_status(type_name)
    if type_name in FLOAT_TYPES:
        return (
            f"not read ({type_name}: a float weight, the kernel takes quantised ones)"
        )
    return f"not read ({type_name}: no decoder for this type yet)"


def is_gguf(path: str | Path) -> bool:
    return str(path).endswith(".gguf")


def _reader(path: str | Path):
    try:
        from gguf import GGUFReader
    except ModuleNotFoundError:
        raise ConfigError(
            "reading GGUF needs the gguf package: pip install gguf (make deps)"
        ) from None
    if not Path(path).is_file():
        raise ConfigError(f"{path}: no such GGUF file")
    try:
        return GGUFReader(str(path))
    except (
        Exception
    ) as e:  # the reader's own complaint about a damaged or truncated file
        first = (str(e).splitlines() or [type(e).__name__])[0]
        raise ConfigError(f"{path}: not a readable GGUF file ({first})") from None


def _type_name(t) -> str:
    from gguf import GGMLQuantizationType

    try:
        return GGMLQuantizationType(int(t.tensor_type)).name
    except ValueError:
        return f"type {int(t.tensor_type)}"


@dataclass(frozen=True)
class GgufLayer:
    name: str
    type_name: str  # ggml's name of the tensor type, e.g. MXFP4, Q4_0
    k: int
    n: int

    @property
    def runs(self) -> bool:
        """The kernel runs this tensor today (MXFP4, Q4_0)."""
        return self.type_name in KERNEL_TYPES

    @property
    def read_exactly(self) -> bool:
        """load_gguf_layer reads this tensor's values exactly (it may still not run)."""
        return self.runs or self.type_name in BLOCK_INT_TYPES

    @property
    def status(self) -> str:
        return gguf_status(self.type_name)


def list_gguf_layers(path: str | Path) -> list[GgufLayer]:
    """The 2-D tensors of a GGUF file with their ggml types and [K, N] (from the header; no weight data)."""
    layers = [
        GgufLayer(t.name, _type_name(t), int(t.shape[0]), int(t.shape[1]))
        for t in _reader(path).tensors
        if len(t.shape) == 2
    ]
    if not layers:
        raise ConfigError(f"{path}: no 2-D tensors")
    return layers


def load_gguf_layer(
    path: str | Path, name: str
) -> Mxfp4Weights | AwqWeights | BlockIntWeights:
    """Tensor `name` [K, N], exactly as the file holds it: MXFP4 as Mxfp4Weights, Q4_0 as AwqWeights with
    scale pairs (format awq_f16), the block-integer types (gguf_quants.TYPES) as BlockIntWeights.
    """
    tensors = {t.name: t for t in _reader(path).tensors}
    t = tensors.get(name)
    if t is None:
        known = [n for n, x in tensors.items() if len(x.shape) == 2]
        raise not_found("tensor", name, path, "2-D tensors", known)
    kind = _type_name(t)
    shape = [int(d) for d in t.shape]
    if len(shape) != 2:
        raise ConfigError(f"{name}: GGUF {kind} {shape} is not read: 2-D weights only")
    status = gguf_status(kind)
    if status.startswith("not read"):
        raise ConfigError(f"{name}: GGUF {kind} {shape} is {status}")
    k, n = shape
    block, size = quant_sizes(kind)
    if k % block:
        raise ConfigError(
            f"{name}: K = {k} is not a whole number of {block}-value {kind} blocks"
        )
    raw = np.asarray(t.data, dtype=np.uint8)
    if raw.size != n * (k // block) * size:
        raise ConfigError(
            f"{name}: {raw.size} bytes of data, expected {n * (k // block) * size} for {kind} [{k}, {n}] "
            "(a truncated file?)"
        )
    try:
        if kind in BLOCK_INT_TYPES:
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
            d = np.ascontiguousarray(blocks[:, :, :2]).view(np.float16)[:, :, 0]
            w = _q4_0_weights(codes, d)
        w.validate()
    except ConfigError as e:
        raise ConfigError(f"{name}: {e}") from None
    return w


def _q4_0_weights(codes: np.ndarray, d: np.ndarray) -> AwqWeights:
    """codes uint8 [N, K/32, 32] and d fp16 [N, K/32] -> AwqWeights (q - z) * (s + s_lo) == d (q - 8)."""
    if not np.isfinite(d).all():
        bad = tuple(int(i) for i in np.argwhere(~np.isfinite(d))[0])
        raise ConfigError(f"block {list(bad[::-1])} has scale d = {d[bad]}: not finite")
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
