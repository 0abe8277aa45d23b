# SPDX-License-Identifier: MIT
"""MXFP4 safetensors checkpoints, read as they are: E2M1 codes and E8M0 scale bytes become
int4awq.formats.mxfp4.Mxfp4Weights with no conversion, so the layer is exact.

Layouts (K = in_features along the 32-value MX groups, N = out_features, one row per output):

    compressed-tensors   `quant_method: compressed-tensors`, `format: mxfp4-pack-quantized`: <layer>.weight_packed
                         U8 [N, K/2], element 2i in the low nibble of byte i and 2i + 1 in the high one
                         (compressors/nvfp4/helpers.py pack_fp4_to_uint8), <layer>.weight_scale U8 [N, K/32],
                         the E8M0 byte 127 + floor(log2 scale) (compressors/mx_utils.py compress_mx_scale).
    quark                `quant_method: quark`, AMD Quark 0.13's OCP_MXFP4Spec export (global weight spec: dtype
                         fp4, qscheme per_group, group_size 32, scale_format e8m0): <layer>.weight U8 [N, K/2] in
                         the same nibble order (torch/utils/pack.py Pack_fp4), <layer>.weight_scale U8 [N, K/32],
                         127 + round(log2 scale) (torch/utils/numerics.py to_e8m0_uint8).
    gpt-oss              `quant_method: mxfp4` (OpenAI gpt-oss; only the MoE experts are MXFP4):
                         <prefix>_blocks U8 [E, N, K/32, 16], the same nibble order within a 32-value block,
                         <prefix>_scales U8 [E, N, K/32]; one expert's projection is one GEMM (expert=E).
                         transformers integrations/mxfp4.py convert_moe_packed_tensors dequantises them to
                         [E, K, N]; gate_up_proj's N interleaves the gate (even) and up (odd) outputs.

Refused with one line: Quark exports of other types or with per-layer configurations.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from .checkpoints import _Checkpoint, _expect
from ..errors import ConfigError, not_found
from .mxfp4 import MX_BLOCK, Mxfp4Weights, check_scales

CT_FORMAT = "mxfp4-pack-quantized"


@dataclass(frozen=True)
class MxLayer:
    name: str
    layout: str  # "compressed-tensors", "quark" or "gpt-oss"
    k: int
    n: int
    experts: int | None  # gpt-oss: experts in the tensor; None for a plain linear layer
    # why the loader refuses its scales (gpt-oss: those of the first expert refused), or ""
    refused: str = ""
    # gpt-oss: the experts whose scales are refused
    refused_experts: tuple[int, ...] = ()

    @property
    def runs(self) -> bool:
        """It runs (gpt-oss: at least one of its experts does)."""
        return not self.refused or (
            self.experts is not None and len(self.refused_experts) < self.experts
        )

    @property
    def status(self) -> str:
        if self.experts is None:
            return f"does not run: {self.refused}" if self.refused else "runs"
        which = f"--expert 0 to {self.experts - 1}"
        if not self.refused:
            return f"runs, one expert at a time ({which})"
        if not self.runs:
            return (
                f"does not run: every expert's scales are refused, e.g. {self.refused}"
            )
        bad = ", ".join(str(e) for e in self.refused_experts)
        plural = "s" if len(self.refused_experts) > 1 else ""
        return f"runs, one expert at a time ({which}), except expert{plural} {bad}: {self.refused}"


def layout(ck: _Checkpoint) -> str | None:
    """The checkpoint's MXFP4 layout, or None when it is not an MXFP4 checkpoint."""
    cfg = ck.config or {}
    method = cfg.get("quant_method")
    if method == "quark":
        _check_quark(ck)
        return "quark"
    if method == "mxfp4":
        return "gpt-oss"
    if method == "compressed-tensors":
        return "compressed-tensors" if cfg.get("format") == CT_FORMAT else None
    if ck.config is None:  # a lone .safetensors file: the tensors tell
        for t in ck.names():
            if t.endswith("_blocks") and ck.entry(t[: -len("_blocks")] + "_scales"):
                return "gpt-oss"
            if t.endswith(".weight_packed") and ck.entry(t).dtype == "U8":
                return "compressed-tensors"
    return None


QUARK_MXFP4 = {
    "dtype": "fp4",
    "qscheme": "per_group",
    "group_size": MX_BLOCK,
    "scale_format": "e8m0",
}


def _check_quark(ck: _Checkpoint) -> None:
    """A Quark export is read when its one weight spec is OCP MXFP4 and no layer overrides it."""
    where = f"{ck.path}: quantization_config"
    weight = (ck.config.get("global_quant_config") or {}).get("weight") or {}
    for key, want in QUARK_MXFP4.items():
        if weight.get(key) != want:
            raise ConfigError(
                f"{where}.global_quant_config.weight.{key} = {weight.get(key)!r}: Quark exports are read "
                f"when their weights are OCP MXFP4 ({key} {want!r})"
            )
    for key in ("layer_quant_config", "layer_type_quant_config"):
        if ck.config.get(key):
            raise ConfigError(
                f"{where}.{key} is not empty: Quark exports with per-layer configurations are not read yet"
            )


_PACKED = {"compressed-tensors": ".weight_packed", "quark": ".weight"}


def _natural(s: str):
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", s)]


def _layer(ck: _Checkpoint, kind: str, name: str) -> MxLayer:
    if kind == "gpt-oss":
        blocks = _expect(f"{name}_blocks", ck.entry(f"{name}_blocks"), ("U8",), None)
        if len(blocks.shape) != 4 or blocks.shape[3] != MX_BLOCK // 2:
            raise ConfigError(
                f"tensor {name}_blocks: shape {list(blocks.shape)}, expected [experts, N, K/32, 16]"
            )
        e, n, g, _ = blocks.shape
        _expect(f"{name}_scales", ck.entry(f"{name}_scales"), ("U8",), (e, n, g))
        return MxLayer(name, kind, g * MX_BLOCK, n, e)
    tname = name + _PACKED[kind]
    packed = _expect(tname, ck.entry(tname), ("U8",), None)
    if len(packed.shape) != 2:
        raise ConfigError(
            f"tensor {tname}: shape {list(packed.shape)}, expected [N, K/2]"
        )
    n, k = packed.shape[0], packed.shape[1] * 2
    if k % MX_BLOCK:
        raise ConfigError(
            f"tensor {tname}: K = {k} is not a whole number of 32-value MX groups"
        )
    _expect(
        f"{name}.weight_scale",
        ck.entry(f"{name}.weight_scale"),
        ("U8",),
        (n, k // MX_BLOCK),
        " (one E8M0 byte per 32 values)",
    )
    return MxLayer(name, kind, k, n, None)


def _names(ck: _Checkpoint, kind: str) -> list[str]:
    """The layers: every tensor of codes with its scales beside it (Quark keeps its unquantised layers'
    `.weight` in bf16, without `.weight_scale`)."""
    suffix, scales = (
        ("_blocks", "_scales")
        if kind == "gpt-oss"
        else (_PACKED[kind], ".weight_scale")
    )
    return sorted(
        (
            t[: -len(suffix)]
            for t in ck.names()
            if t.endswith(suffix) and ck.entry(t[: -len(suffix)] + scales) is not None
        ),
        key=_natural,
    )


def list_mx_layers(ck: _Checkpoint, kind: str, scales: bool = False) -> list[MxLayer]:
    """The MXFP4 layers of a checkpoint of this layout, from the headers; with scales, each layer's scale
    tensor is read too (1/16 of its codes' bytes) and a scale the loader would refuse is named in it.
    """
    layers = [_layer(ck, kind, name) for name in _names(ck, kind)]
    if not layers:
        raise ConfigError(f"{ck.path}: no MXFP4 layers ({kind})")
    return [_with_refusal(ck, t) for t in layers] if scales else layers


def _with_refusal(ck: _Checkpoint, t: MxLayer) -> MxLayer:
    """t with the loader's refusal of its scales, if any (check_scales, as Mxfp4Weights.validate runs it)."""
    name = f"{t.name}_scales" if t.experts is not None else f"{t.name}.weight_scale"
    scales = ck.read(ck.entry(name), name)
    bad = []
    for e, s in enumerate(scales if t.experts is not None else [scales]):
        try:
            check_scales(s.T)  # the loader's orientation: [K/32, N]
        except ConfigError as err:
            bad.append((e, str(err)))
    if not bad:
        return t
    return replace(t, refused=bad[0][1], refused_experts=tuple(e for e, _ in bad))


def layer_parts(kind: str, name: str) -> tuple[str, ...]:
    """The tensors that make up MXFP4 layer `name` of this layout."""
    if kind == "gpt-oss":
        return f"{name}_blocks", f"{name}_scales"
    return name + _PACKED[kind], f"{name}.weight_scale"


def load_mx_layer(
    ck: _Checkpoint, kind: str, name: str, expert: int | None
) -> Mxfp4Weights:
    """Layer `name` (its module prefix; gpt-oss: one expert of it) as Mxfp4Weights [K, N]."""
    known = _names(ck, kind)
    if name not in known:
        raise not_found("layer", name, ck.path, "MXFP4 layers", known)
    info = _layer(ck, kind, name)
    if kind == "gpt-oss":
        if expert is None:
            raise ConfigError(
                f"{name} holds {info.experts} experts: give --expert E (0 to {info.experts - 1})"
            )
        if not 0 <= expert < info.experts:
            raise ConfigError(
                f"--expert {expert}: {name} has experts 0 to {info.experts - 1}"
            )
        blocks = ck.read(ck.entry(f"{name}_blocks"), f"{name}_blocks")[expert]
        scales = ck.read(ck.entry(f"{name}_scales"), f"{name}_scales")[expert]
        packed = blocks.reshape(info.n, info.k // 2)
    else:
        if expert is not None:
            raise ConfigError(
                f"--expert: {name} is one linear layer, not a tensor of experts"
            )
        tname = name + _PACKED[kind]
        packed = ck.read(ck.entry(tname), tname)
        scales = ck.read(ck.entry(f"{name}.weight_scale"), f"{name}.weight_scale")
    codes = np.empty((info.n, info.k), np.uint8)
    codes[:, 0::2], codes[:, 1::2] = packed & 15, packed >> 4
    w = Mxfp4Weights(np.ascontiguousarray(codes.T), np.ascontiguousarray(scales.T))
    try:
        w.validate()
    except ConfigError as e:
        raise ConfigError(f"layer {name}: {e}") from None
    return w


def open_mx(path: str | Path) -> tuple[_Checkpoint, str] | None:
    """(checkpoint, layout) when path is an MXFP4 safetensors checkpoint, else None."""
    ck = _Checkpoint(path)
    kind = layout(ck)
    return None if kind is None else (ck, kind)
