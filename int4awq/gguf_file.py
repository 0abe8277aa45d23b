# SPDX-License-Identifier: MIT
"""GGUF files (llama.cpp), read with the `gguf` package's own GGUFReader.

A 4-bit tensor of a GGUF file is ggml's [K, N] (ne[0] = K, blocks along K, a row per output n); GGUFReader
gives its raw blocks as uint8 (N, K / 32 * block bytes). Read so far:

* MXFP4 (ggml type 39): `block_mxfp4 { u8 e; u8 qs[16]; }`, 17 bytes per 32 values; element j of a block is
  kvalues_mxfp4[qs[j] & 15] * 2^(e - 128), element j + 16 is the same of qs[j] >> 4 (the "split half" nibble
  order). kvalues_mxfp4 is twice the E2M1 table, so the nibble is the E2M1 code and e is the OCP E8M0 byte:
  the layer is exactly int4awq.mxfp4.Mxfp4Weights(codes, scales = e), no conversion.

Refused with one line: Q4_0 (its fp16 scale d is not a bf16: exact only as a pair d_hi + d_lo folded after
the mmul, which the kernel does not do yet), the other k-quants and legacy types, and any tensor that is not
a 2-D 4-bit weight.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import ConfigError
from .mxfp4 import MX_BLOCK, Mxfp4Weights

MXFP4_BLOCK_BYTES = 17


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
    def readable(self) -> bool:
        return self.type_name == "MXFP4"


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


def load_gguf_layer(path: str | Path, name: str) -> Mxfp4Weights:
    """Tensor `name` as MXFP4 weights [K, N], exactly as the file holds them."""
    tensors = {t.name: t for t in _reader(path).tensors}
    t = tensors.get(name)
    if t is None:
        known = [n for n, x in tensors.items() if len(x.shape) == 2]
        hint = ", ".join(known[:4]) + (
            f", ... ({len(known)} in all)" if len(known) > 4 else ""
        )
        raise ConfigError(
            f"tensor {name!r} not found in {path} (2-D tensors: {hint or 'none'})"
        )
    kind = _type_name(t)
    if kind == "Q4_0":
        raise ConfigError(
            f"{name}: GGUF Q4_0 is not read yet: its fp16 scales are not bf16, exact only as a pair "
            "d_hi + d_lo folded after the mmul, which the kernel does not do yet"
        )
    if kind != "MXFP4" or len(t.shape) != 2:
        raise ConfigError(
            f"{name}: GGUF {kind} {[int(d) for d in t.shape]} is not read: MXFP4 2-D weights only so far"
        )
    k, n = int(t.shape[0]), int(t.shape[1])
    if k % MX_BLOCK:
        raise ConfigError(
            f"{name}: K = {k} is not a whole number of 32-value MXFP4 blocks"
        )
    raw = np.asarray(t.data, dtype=np.uint8)
    if raw.size != n * (k // MX_BLOCK) * MXFP4_BLOCK_BYTES:
        raise ConfigError(
            f"{name}: {raw.size} bytes of data, expected {n * (k // MX_BLOCK) * MXFP4_BLOCK_BYTES} for "
            f"MXFP4 [{k}, {n}] (a truncated file?)"
        )
    blocks = raw.reshape(n, k // MX_BLOCK, MXFP4_BLOCK_BYTES)
    qs = blocks[:, :, 1:]
    codes = np.concatenate([qs & 15, qs >> 4], axis=2).reshape(
        n, k
    )  # split half: j, then j + 16
    w = Mxfp4Weights(
        np.ascontiguousarray(codes.T), np.ascontiguousarray(blocks[:, :, 0].T)
    )
    try:
        w.validate()
    except ConfigError as e:
        raise ConfigError(f"{name}: {e}") from None
    return w
