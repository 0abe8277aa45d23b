# SPDX-License-Identifier: MIT
"""Import one int4 linear layer of a real quantised checkpoint into the host layout (AwqWeights).

Supported layouts (safetensors only; docs/checkpoints.md cites the source of each):

    awq-gemm            AutoAWQ WQLinear_GEMM: qweight I32 [K, N/8], qzeros I32 [K/gs, N/8],
                        scales F16 [K/gs, N]; nibble i of packed column c is logical column 8c + AWQ_ORDER[i].
    gptq, gptq_v2       GPTQ (AutoGPTQ / GPTQModel): qweight I32 [K/8, N] packed along K, qzeros I32
                        [K/gs, N/8] packed along N, nibble j = element 8r + j; scales F16 [K/gs, N];
                        v1 ("gptq") stores z - 1 as a packed word (word = sum z_j 16^j - 0x11111111).
    compressed-tensors  pack-quantized, int4, group or channel strategy: weight_packed I32 [N, ceil(K/8)]
                        holding v + 8 (v in -8..7), element j of a word at bits 4j; weight_zero_point I32
                        [ceil(N/8), K/gs] packed along N the same way (absent when symmetric: zp = 0);
                        weight_scale F16/BF16/F32 [N, K/gs].

K is in_features (the reduction dimension), N is out_features. Every format dequantises as
(code - zero) * scale, so the host record is q = code nibble, z = zero nibble (after the format's own
offset), s = scale rounded to bf16; dequantize(w) equals the format's own dequantisation with bf16 scales.

Only the requested layer's tensors are read (safetensors' mmap-backed safe_open, framework="np"); nothing is
unpickled. Bad input raises ConfigError with one line naming the tensor or config field.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from ml_dtypes import bfloat16

from ..errors import ConfigError, not_found
from .quant import AwqWeights, scale_pair_of

FORMATS = ("awq-gemm", "compressed-tensors", "gptq", "gptq_v2")

# AutoAWQ packs logical column 8c + AWQ_ORDER[i] into nibble i of packed column c; AWQ_INVERSE[m] is the
# nibble that holds logical column 8c + m (AWQ_ORDER[AWQ_INVERSE[m]] == m).
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
AWQ_INVERSE = tuple(int(i) for i in np.argsort(AWQ_ORDER))
# GPTQ v1 -> v2 for 4-bit int32 words: GPTQModel adds one to every nibble as one word addition (carries
# propagate), the exact inverse of the word subtraction its exporter performs.
GPTQ_V1_WORD_OFFSET = 0x11111111
# compressed-tensors stores a signed 4-bit value v (-8..7) as the nibble v + 8.
CT_OFFSET = 8
# GPTQModel writes v1 zero points it can read back exactly (word arithmetic) from this version on.
GPTQMODEL_MIN_V1_ASYM = (0, 9, 0)

_NIBBLE_SHIFTS = np.arange(8, dtype=np.uint32) * np.uint32(4)
_ST_DTYPES = {
    "BOOL": np.bool_,
    "U8": np.uint8,
    "I8": np.int8,
    "U16": np.uint16,
    "I16": np.int16,
    "U32": np.uint32,
    "I32": np.int32,
    "U64": np.uint64,
    "I64": np.int64,
    "F16": np.float16,
    "BF16": bfloat16,
    "F32": np.float32,
    "F64": np.float64,
}
_SCALE_DTYPES = ("F16", "BF16", "F32")
_INT_DTYPES = ("U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64")


@dataclass(frozen=True)
class LayerInfo:
    name: str  # module prefix, e.g. "model.layers.0.self_attn.q_proj"
    format: str  # one of FORMATS
    in_features: int  # K
    out_features: int  # N
    group_size: int


@dataclass(frozen=True)
class ImportReport:
    name: str
    format: str
    scale_dtype: str  # numpy name of the stored scales: float16, bfloat16 or float32
    total_scales: int
    scales_changed: (
        int  # scales whose value changed in the cast to bf16 (round to nearest even)
    )
    max_rel_scale_change: (
        float  # max |bf16(s) - s| / |s| over all scales (0.0 when none changed)
    )
    k: int
    n: int
    group_size: int
    zero_wraps: int = (
        0  # GPTQ v1 only: zero points stored as z - 1 = -1 (z = 0), read through the carry
    )
    has_bias: bool = (
        False  # the checkpoint has <layer>.bias; the GEMM does not apply it
    )
    kept_as: str = "bfloat16"  # or "bfloat16 pair" (format awq_f16: s + s_lo)

    def summary(self) -> str:
        pct = 100.0 * self.scales_changed / self.total_scales
        line = (
            f"{self.name}: {self.format} K={self.k} N={self.n} GS={self.group_size}; scales {self.scale_dtype}"
            f" -> {self.kept_as}: {self.scales_changed} of {self.total_scales} changed ({pct:.2f}%),"
            f" max relative change {self.max_rel_scale_change:.3g}"
        )
        if self.zero_wraps:
            line += f"; {self.zero_wraps} GPTQ v1 zero points were z = 0 stored as -1 (read with carry)"
        if self.has_bias:
            line += "; bias present in the checkpoint, not applied"
        return line


# --------------------------------------------------------------------------------------------------
# safetensors access: every header check and every tensor read is safetensors' own (safe_open, numpy;
# BF16 arrives as ml_dtypes.bfloat16 from safetensors 0.8 on)


@dataclass(frozen=True)
class _Entry:
    file: Path
    dtype: str  # safetensors dtype string, e.g. "I32"
    shape: tuple[int, ...]


def _safetensors_error(file: Path, e: Exception) -> ConfigError:
    if isinstance(e, OSError):
        return ConfigError(f"{file}: cannot read ({e.strerror or e})")
    # safetensors refuses a truncated file whole: say that it is cut short, not that it is another format
    cut = _cut_short(file)
    if cut:
        return ConfigError(f"{file}: {cut}")
    first = str(e).splitlines()[0] if str(e) else type(e).__name__
    return ConfigError(f"{file}: not a safetensors file ({first})")


# safetensors refuses longer headers (its MAX_HEADER_SIZE)
SAFETENSORS_MAX_HEADER = 100_000_000


def _cut_short(file: Path) -> str:
    """'' unless the file's own header (an 8-byte length, then JSON) describes more bytes than the file
    holds: then a phrase saying so, with both sizes."""
    try:
        size = file.stat().st_size
        with open(file, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                return ""
            length = int.from_bytes(head, "little")
            if length > SAFETENSORS_MAX_HEADER:
                return ""  # not a length safetensors writes: damage, not truncation
            if length > size - 8:
                return f"cut short: its header is {length} bytes long, the file holds {size}"
            header = json.loads(f.read(length))
        end = max(
            (
                int(v["data_offsets"][1])
                for key, v in header.items()
                if key != "__metadata__"
            ),
            default=0,
        )
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError):
        return ""  # not even the header is readable: safetensors' own words say more
    if 8 + length + end > size:
        return (
            f"cut short: its header describes {8 + length + end} bytes, the file holds {size} "
            "(a truncated download?)"
        )
    return ""


def _read_header(file: Path) -> tuple[dict[str, _Entry], dict]:
    """Tensor names, dtypes and shapes, and the metadata, as safetensors validates and reports them
    (offsets inside the data region, contiguous, no overlap, sizes matching shape and dtype).
    """
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(file), framework="np") as f:
            entries = {}
            for name in f.keys():
                sl = f.get_slice(name)
                entries[name] = _Entry(
                    file, str(sl.get_dtype()), tuple(int(x) for x in sl.get_shape())
                )
            meta = f.metadata() or {}
    except (SafetensorError, OSError) as e:
        raise _safetensors_error(file, e) from None
    return entries, meta


def _native_get(file: Path, name: str) -> np.ndarray:
    """The tensor through safetensors' numpy API (mmap; reads only this tensor's bytes)."""
    from safetensors import safe_open

    with safe_open(str(file), framework="np") as f:
        return f.get_tensor(name)


class _Checkpoint:
    """A directory (config.json + model.safetensors or a sharded index) or one .safetensors file."""

    def __init__(self, path: str | Path):
        if not str(path):
            raise ConfigError(
                "checkpoint path is empty: give a directory or a .safetensors file"
            )
        self.path = Path(path)
        self.config: dict | None = None  # quantization_config
        self.config_file = ""
        try:
            kind = (
                "dir"
                if self.path.is_dir()
                else (
                    "file"
                    if self.path.is_file()
                    else "other" if self.path.exists() else ""
                )
            )
        except OSError as e:  # e.g. a name too long
            raise ConfigError(f"{self.path}: cannot read ({e.strerror})") from None
        if kind == "dir":
            self._open_dir()
        elif kind == "file":
            self.shards = {self.path: None}
            self.where = None
        elif kind == "other":
            raise ConfigError(
                f"{self.path}: not a regular file or a directory (give a checkpoint directory"
                " or a .safetensors file)"
            )
        else:
            raise ConfigError(f"{self.path}: no such file or directory")
        self._headers: dict[Path, dict[str, _Entry]] = {}
        self._meta: dict[Path, dict] = {}

    def _open_dir(self) -> None:
        d = self.path
        cfg = _load_json(d / "config.json") if (d / "config.json").is_file() else {}
        if isinstance(cfg.get("quantization_config"), dict):
            self.config, self.config_file = cfg["quantization_config"], "config.json"
        elif (
            d / "quantize_config.json"
        ).is_file():  # AutoGPTQ keeps it next to config.json
            self.config, self.config_file = (
                _load_json(d / "quantize_config.json"),
                "quantize_config.json",
            )
        index = d / "model.safetensors.index.json"
        if index.is_file():
            weight_map = _load_json(index).get("weight_map")
            if not isinstance(weight_map, dict):
                raise ConfigError(f"{index}: field weight_map missing or not an object")
            for t, f in weight_map.items():
                if not isinstance(f, str) or not f:
                    raise ConfigError(
                        f"{index}: weight_map[{t!r}] = {f!r}: expected a shard file name"
                    )
            self.where = {t: d / f for t, f in weight_map.items()}
            self.shards = {f: None for f in self.where.values()}
            return
        single = d / "model.safetensors"
        if not single.is_file():
            found = sorted(d.glob("*.safetensors"))
            if len(found) != 1:
                raise ConfigError(
                    f"{d}: expected model.safetensors or model.safetensors.index.json"
                    f" (found {len(found)} other .safetensors files)"
                )
            single = found[0]
        self.shards = {single: None}
        self.where = None

    def _header(self, file: Path) -> dict[str, _Entry]:
        if file not in self._headers:
            if not file.is_file():
                raise ConfigError(
                    f"{file}: shard listed in model.safetensors.index.json is missing"
                )
            self._headers[file], self._meta[file] = _read_header(file)
        return self._headers[file]

    def metadata(self) -> dict:
        first = next(iter(self.shards))
        self._header(first)
        return self._meta[first]

    def names(self) -> list[str]:
        if self.where is not None:
            return list(self.where)
        return list(self._header(next(iter(self.shards))))

    def entry(self, name: str) -> _Entry | None:
        if self.where is not None:
            file = self.where.get(name)
            if file is None:
                return None
            e = self._header(file).get(name)
            if e is None:
                raise ConfigError(
                    f"{file}: tensor {name} listed in model.safetensors.index.json is missing"
                )
            return e
        return self._header(next(iter(self.shards))).get(name)

    def read(self, e: _Entry, name: str) -> np.ndarray:
        from safetensors import SafetensorError

        want = np.dtype(_ST_DTYPES[e.dtype]) if e.dtype in _ST_DTYPES else None
        if want is None:
            raise ConfigError(f"tensor {name}: unsupported safetensors dtype {e.dtype}")
        try:
            arr = _native_get(e.file, name)
        except (
            TypeError
        ):  # "data type 'bfloat16' not understood": safetensors before 0.8
            import safetensors

            raise ConfigError(
                f"tensor {name}: safetensors {safetensors.__version__} cannot read {e.dtype} into numpy;"
                " 0.8 or newer can (pip install -r requirements.txt)"
            ) from None
        except (SafetensorError, OSError) as err:
            raise _safetensors_error(e.file, err) from None
        if arr.dtype != want or tuple(arr.shape) != e.shape:
            raise ConfigError(
                f"{e.file}: tensor {name} read as {arr.dtype} {list(arr.shape)}, "
                f"its header says {e.dtype} {list(e.shape)}"
            )
        return arr


def _load_json(file: Path) -> dict:
    try:
        data = json.loads(file.read_text())
    except OSError as e:
        raise ConfigError(f"{file}: cannot read ({e.strerror})") from None
    except (
        ValueError,
        RecursionError,
    ) as e:  # bad UTF-8 or JSON, over-long integers, deep nesting
        raise ConfigError(
            f"{file}: not valid JSON ({str(e).splitlines()[0] if str(e) else type(e).__name__})"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{file}: expected a JSON object")
    return data


# --------------------------------------------------------------------------------------------------
# bit unpacking (vectorised)


def _nibbles(words: np.ndarray) -> np.ndarray:
    """uint8 [..., 8]: element j holds bits 4j..4j+3 of each 32-bit word (one pass per nibble position)."""
    u = np.ascontiguousarray(words).view(np.uint32)
    out = np.empty(u.shape + (8,), np.uint8)
    for j, shift in enumerate(_NIBBLE_SHIFTS):
        out[..., j] = (u >> shift) & np.uint32(0xF)
    return out


# --------------------------------------------------------------------------------------------------
# per-layer plan from headers and config (no tensor data)


@dataclass(frozen=True)
class _Plan:
    info: LayerInfo
    tensors: dict  # role -> (tensor name, _Entry)
    v1_carry_ok: bool = (
        False  # GPTQ v1 written by GPTQModel >= 0.9.0: wrapped zero points are exact
    )


_ROLE_SUFFIX = {
    "qweight": ("qweight", "qzeros", "scales", "g_idx", "bias"),
    "ct": (
        "weight_packed",
        "weight_zero_point",
        "weight_scale",
        "weight_g_idx",
        "weight_shape",
        "bias",
    ),
}


def _cfg_get(cfg: dict, *keys, default=None):
    for k in keys:
        if k in cfg and cfg[k] is not None:
            return k, cfg[k]
    return keys[0], default


def _field(ck: _Checkpoint, key: str) -> str:
    """Where a config value lives, e.g. 'config.json: quantization_config.bits'."""
    where = "quantization_config." if ck.config_file == "config.json" else ""
    return f"{ck.config_file}: {where}{key}"


def _expect(
    name: str,
    e: _Entry | None,
    dtypes: tuple[str, ...],
    shape: tuple | None,
    what: str = "",
) -> _Entry:
    if e is None:
        raise ConfigError(f"missing tensor {name}")
    if e.dtype not in dtypes:
        raise ConfigError(
            f"tensor {name}: dtype {e.dtype}, expected {' or '.join(dtypes)}"
        )
    if shape is not None and e.shape != shape:
        raise ConfigError(
            f"tensor {name}: shape {list(e.shape)}, expected {list(shape)}{what}"
        )
    return e


def _as_int(v, field: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ConfigError(f"{field} = {v!r}: expected an integer")
    return v


def _method(ck: _Checkpoint) -> str | None:
    if ck.config is None:
        return None
    key, m = _cfg_get(ck.config, "quant_method", "method")
    if m is None and ck.config_file == "quantize_config.json":
        return "gptq"  # AutoGPTQ's quantize_config.json predates the field
    if m not in ("awq", "gptq", "compressed-tensors"):
        raise ConfigError(
            f"{_field(ck, key)} = {m!r}: unknown format (supported: awq version gemm, gptq, gptq_v2,"
            " compressed-tensors pack-quantized)"
        )
    return m


def _group_size(ck: _Checkpoint, field: str, gs, k: int, layer: str) -> int:
    gs = _as_int(gs, field)
    if gs == -1:
        return k
    if gs <= 0:
        raise ConfigError(
            f"{field} = {gs}: group size must be positive or -1 (one group per column)"
        )
    if k % gs:
        raise ConfigError(
            f"{field} = {gs} does not divide in_features = {k} of layer {layer}"
        )
    return gs


def _gs_from_shapes(scale_name: str, groups: int, k: int) -> int:
    if groups <= 0 or k % groups:
        raise ConfigError(
            f"tensor {scale_name}: {groups} groups do not divide in_features = {k}"
        )
    return k // groups


def _plan_qweight(ck: _Checkpoint, layer: str, method: str | None) -> _Plan:
    """AutoAWQ gemm or GPTQ: both name their tensors qweight / qzeros / scales."""
    t = {r: f"{layer}.{r}" for r in _ROLE_SUFFIX["qweight"]}
    scales = _expect(t["scales"], ck.entry(t["scales"]), _SCALE_DTYPES, None)
    qweight = _expect(t["qweight"], ck.entry(t["qweight"]), ("I32",), None)
    for nm, e in (("scales", scales), ("qweight", qweight)):
        if len(e.shape) != 2:
            raise ConfigError(
                f"tensor {t[nm]}: shape {list(e.shape)}, expected 2 dimensions"
            )
    groups, n = scales.shape
    cfg = ck.config or {}

    if method is None:  # recognise from the shapes: AWQ packs N, GPTQ packs K
        if qweight.shape[1] * 8 == n and ck.entry(t["g_idx"]) is None:
            method = "awq"
        elif qweight.shape[1] == n:
            method = "gptq"
        else:
            raise ConfigError(
                f"tensor {t['qweight']}: shape {list(qweight.shape)} fits neither AutoAWQ gemm [K, N/8] nor"
                f" GPTQ [K/8, N] with N = {n} from {t['scales']} (4-bit weights only)"
            )

    v1_carry_ok = False
    if method == "awq":
        fmt = "awq-gemm"
        bkey, bits = _cfg_get(cfg, "bits", "w_bit", default=4)
        vkey, version = _cfg_get(cfg, "version", "format", default="gemm")
        if str(version).lower() != "gemm":
            raise ConfigError(
                f"{_field(ck, vkey)} = {version!r}: only AutoAWQ's 'gemm' packing is supported"
            )
        if cfg.get("backend") == "llm-awq":
            raise ConfigError(
                f"{_field(ck, 'backend')} = 'llm-awq': llm-awq packing is not supported (only AutoAWQ gemm)"
            )
        k = qweight.shape[0]
        gkey, gs = _cfg_get(cfg, "group_size", "q_group_size")
    else:
        fkey, version = _cfg_get(cfg, "format", "checkpoint_format")
        if version is None:
            version = ck.metadata().get("gptq_checkpoint_format", "gptq")
        if version not in ("gptq", "gptq_v2"):
            raise ConfigError(
                f"{_field(ck, fkey)} = {version!r}: only the 'gptq' and 'gptq_v2' layouts are supported"
            )
        fmt = version
        dyn, over = _gptq_dynamic(cfg, layer)
        bkey, bits = (
            (dyn + "bits", over["bits"])
            if "bits" in over
            else _cfg_get(cfg, "bits", default=4)
        )
        k = qweight.shape[0] * 8
        gkey, gs = (
            (dyn + "group_size", over["group_size"])
            if "group_size" in over
            else _cfg_get(cfg, "group_size")
        )
        desc_act = over.get("desc_act", cfg.get("desc_act"))
        if desc_act and ck.entry(t["g_idx"]) is None:
            raise ConfigError(
                f"{_field(ck, 'desc_act')} = true but tensor {t['g_idx']} is missing: act-order is not supported"
            )
        if version == "gptq":
            v1_carry_ok = _gptqmodel_version(cfg) >= GPTQMODEL_MIN_V1_ASYM
    if _as_int(bits, _field(ck, bkey)) != 4:
        raise ConfigError(
            f"{_field(ck, bkey)} = {bits}: only 4-bit weights are supported"
        )
    gs = (
        _group_size(ck, _field(ck, gkey), gs, k, layer)
        if gs is not None
        else _gs_from_shapes(t["scales"], groups, k)
    )

    g = k // gs
    if n % 8:
        raise ConfigError(
            f"tensor {t['scales']}: out_features = {n} is not a multiple of 8 (int32 packing of zero points)"
        )
    if fmt == "awq-gemm":
        _expect(t["qweight"], qweight, ("I32",), (k, n // 8), " = [K, N/8]")
    else:
        _expect(t["qweight"], qweight, ("I32",), (k // 8, n), " = [K/8, N]")
    _expect(
        t["scales"], scales, _SCALE_DTYPES, (g, n), f" = [K/gs, N] for K={k} gs={gs}"
    )
    tensors = {"qweight": (t["qweight"], qweight), "scales": (t["scales"], scales)}
    tensors["qzeros"] = (
        t["qzeros"],
        _expect(
            t["qzeros"], ck.entry(t["qzeros"]), ("I32",), (g, n // 8), " = [K/gs, N/8]"
        ),
    )
    if fmt != "awq-gemm" and ck.entry(t["g_idx"]) is not None:
        tensors["g_idx"] = (
            t["g_idx"],
            _expect(t["g_idx"], ck.entry(t["g_idx"]), _INT_DTYPES, (k,), " = [K]"),
        )
    if ck.entry(t["bias"]) is not None:
        tensors["bias"] = (t["bias"], ck.entry(t["bias"]))
    return _Plan(LayerInfo(layer, fmt, k, n, gs), tensors, v1_carry_ok=v1_carry_ok)


def _gptq_dynamic(cfg: dict, layer: str) -> tuple[str, dict]:
    """GPTQModel's per-module overrides {"+:regex": {...}} (or a bare regex), re.match on the module name:
    the field path that names them and the override dict ({} when none applies)."""
    dyn = cfg.get("dynamic") or {}
    if not isinstance(dyn, dict):
        return "", {}
    for pattern, over in dyn.items():
        if pattern.startswith("-:"):
            continue  # excluded modules stay unquantised: they have no qweight
        rx = pattern[2:] if pattern.startswith("+:") else pattern
        try:
            hit = re.match(rx, layer)
        except re.error:
            raise ConfigError(
                f"quantization_config.dynamic key {pattern!r}: not a regular expression"
            ) from None
        if hit and isinstance(over, dict):
            return f"dynamic[{pattern!r}].", over
    return "", {}


def _gptqmodel_version(cfg: dict) -> tuple[int, ...]:
    """Version of GPTQModel recorded in quantization_config.meta.quantizer ('gptqmodel:x.y.z'), or ()."""
    meta = cfg.get("meta") or {}
    quantizers = meta.get("quantizer", []) if isinstance(meta, dict) else []
    if isinstance(quantizers, str):
        quantizers = [quantizers]
    for q in quantizers if isinstance(quantizers, list) else []:
        if isinstance(q, str) and q.lower().startswith("gptqmodel:"):
            nums = re.findall(r"\d+", q.split(":", 1)[1].split("-")[0])
            return tuple(int(x) for x in nums[:3])
    return ()


def _ct_scheme(ck: _Checkpoint, layer: str) -> tuple[dict, str]:
    """The weights args of the config group that targets this layer, and the field path naming it."""
    cfg = ck.config
    groups = cfg.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise ConfigError(f"{_field(ck, 'config_groups')}: missing or empty")
    presets = {"W4A16": True, "W4A16_ASYM": False}
    by_name, by_class = [], []
    for gname, scheme in groups.items():
        if isinstance(scheme, list):  # a preset scheme name mapped to its targets
            if gname not in presets:
                raise ConfigError(
                    f"{_field(ck, 'config_groups.' + gname)}: preset scheme {gname!r} is not supported"
                )
            scheme = {
                "targets": scheme,
                "weights": {
                    "num_bits": 4,
                    "type": "int",
                    "symmetric": presets[gname],
                    "strategy": "group",
                    "group_size": 128,
                },
            }
        if not isinstance(scheme, dict):
            continue
        targets = scheme.get("targets") or []
        if isinstance(targets, str):
            targets = [targets]
        if not isinstance(targets, list):
            raise ConfigError(
                f"{_field(ck, 'config_groups.' + gname + '.targets')} = {targets!r}: expected a list of"
                " module names or re: patterns"
            )
        for target in targets:
            if not isinstance(target, str):
                continue
            try:
                hit = target.startswith("re:") and re.match(target[3:], layer)
            except re.error:
                raise ConfigError(
                    f"{_field(ck, 'config_groups.' + gname + '.targets')}: {target!r} is not a regular"
                    " expression"
                ) from None
            if target == layer or hit:
                by_name.append((gname, scheme))
                break
            if (
                not target.startswith("re:") and "." not in target
            ):  # a module class such as "Linear"
                by_class.append((gname, scheme))
                break
    found = by_name or by_class
    if not found:
        raise ConfigError(
            f"{_field(ck, 'config_groups')}: no group targets layer {layer}"
        )
    gname, scheme = found[0]
    prefix = f"config_groups.{gname}"
    fkey, fmt = (
        ("format", scheme["format"])
        if scheme.get("format")
        else ("format", cfg.get("format"))
    )
    if fmt != "pack-quantized":
        raise ConfigError(
            f"{_field(ck, (prefix + '.' if scheme.get('format') else '') + fkey)} = {fmt!r}:"
            " only compressed-tensors 'pack-quantized' is supported"
        )
    if scheme.get("input_activations"):
        raise ConfigError(
            f"{_field(ck, prefix + '.input_activations')} is set: activation quantisation is not supported"
            " (weight-only int4, bf16 activations)"
        )
    w = scheme.get("weights")
    if not isinstance(w, dict):
        raise ConfigError(
            f"{_field(ck, prefix + '.weights')} = {w!r}: layer {layer} has no weight quantisation"
        )
    return w, prefix + ".weights"


def _plan_ct(ck: _Checkpoint, layer: str) -> _Plan:
    t = {r: f"{layer}.{r}" for r in _ROLE_SUFFIX["ct"]}
    packed = _expect(t["weight_packed"], ck.entry(t["weight_packed"]), ("I32",), None)
    scale = _expect(t["weight_scale"], ck.entry(t["weight_scale"]), _SCALE_DTYPES, None)
    for nm, e in (("weight_packed", packed), ("weight_scale", scale)):
        if len(e.shape) != 2:
            raise ConfigError(
                f"tensor {t[nm]}: shape {list(e.shape)}, expected 2 dimensions"
            )
    n = packed.shape[0]
    ws = ck.entry(t["weight_shape"])
    if ws is not None:
        _expect(t["weight_shape"], ws, _INT_DTYPES, (2,))
        out_in = ck.read(ws, t["weight_shape"]).astype(np.int64)
        if int(out_in[0]) != n:
            raise ConfigError(
                f"tensor {t['weight_shape']} = {out_in.tolist()}: out_features disagrees with "
                f"{t['weight_packed']} rows = {n}"
            )
        k = int(out_in[1])
    else:
        k = packed.shape[1] * 8
    zp = ck.entry(t["weight_zero_point"])
    if ck.config is not None:
        w, prefix = _ct_scheme(ck, layer)
        f = lambda key: _field(ck, f"{prefix}.{key}")  # noqa: E731
        if w.get("type", "int") != "int":
            raise ConfigError(
                f"{f('type')} = {w.get('type')!r}: only integer quantisation is supported"
            )
        bits = w.get("num_bits", 8)
        if _as_int(bits, f("num_bits")) != 4:
            raise ConfigError(
                f"{f('num_bits')} = {bits}: only 4-bit weights are supported"
            )
        strategy = w.get("strategy")
        if strategy == "group":
            gs = _group_size(ck, f("group_size"), w.get("group_size"), k, layer)
        elif strategy == "channel":
            gs = k
        else:
            raise ConfigError(
                f"{f('strategy')} = {strategy!r}: only the 'group' and 'channel' strategies are supported"
            )
        if not w.get("symmetric", True) and zp is None:
            raise ConfigError(
                f"missing tensor {t['weight_zero_point']} ({f('symmetric')} = false)"
            )
        if (
            w.get("actorder") in ("group", "dynamic")
            and ck.entry(t["weight_g_idx"]) is None
        ):
            raise ConfigError(
                f"{f('actorder')} = {w['actorder']!r} but tensor {t['weight_g_idx']} is missing"
            )
    else:
        gs = _gs_from_shapes(
            t["weight_scale"], scale.shape[1], k
        )  # symmetric exactly when zp is absent
    g = k // gs
    _expect(t["weight_packed"], packed, ("I32",), (n, -(-k // 8)), " = [N, ceil(K/8)]")
    _expect(
        t["weight_scale"],
        scale,
        _SCALE_DTYPES,
        (n, g),
        f" = [N, K/gs] for K={k} gs={gs}",
    )
    tensors = {
        "weight_packed": (t["weight_packed"], packed),
        "weight_scale": (t["weight_scale"], scale),
    }
    if zp is not None:
        if zp.dtype == "I32":
            _expect(
                t["weight_zero_point"],
                zp,
                ("I32",),
                (-(-n // 8), g),
                " = [ceil(N/8), K/gs] (packed along N)",
            )
        else:  # compressed-tensors before April 2025 kept asymmetric zero points unpacked
            _expect(
                t["weight_zero_point"],
                zp,
                ("I8",),
                (n, g),
                " = [N, K/gs] (unpacked int8)",
            )
        tensors["weight_zero_point"] = (t["weight_zero_point"], zp)
    gi = ck.entry(t["weight_g_idx"])
    if gi is not None:
        tensors["g_idx"] = (
            t["weight_g_idx"],
            _expect(t["weight_g_idx"], gi, _INT_DTYPES, (k,), " = [K]"),
        )
    if ck.entry(t["bias"]) is not None:
        tensors["bias"] = (t["bias"], ck.entry(t["bias"]))
    return _Plan(LayerInfo(layer, "compressed-tensors", k, n, gs), tensors)


def _plan(ck: _Checkpoint, layer: str, method: str | None) -> _Plan:
    has_ct = ck.entry(f"{layer}.weight_packed") is not None
    has_q = ck.entry(f"{layer}.qweight") is not None
    if method == "compressed-tensors" or (method is None and has_ct):
        if not has_ct:
            raise ConfigError(
                f"missing tensor {layer}.weight_packed (checkpoint is compressed-tensors)"
            )
        return _plan_ct(ck, layer)
    if not has_q:
        raise ConfigError(
            f"missing tensor {layer}.qweight (checkpoint is {method or 'awq/gptq'})"
        )
    return _plan_qweight(ck, layer, method)


def _layer_names(ck: _Checkpoint) -> list[str]:
    names = set()
    for t in ck.names():
        for suffix in (".qweight", ".weight_packed"):
            if t.endswith(suffix):
                names.add(t[: -len(suffix)])
    return sorted(
        names,
        key=lambda s: [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", s)],
    )


@dataclass(frozen=True)
class OtherTensor:
    """A tensor of a checkpoint that is no part of a layer it lists: an unquantised weight, a norm, a bias."""

    name: str
    dtype: str  # safetensors dtype string, e.g. "BF16"
    shape: tuple[int, ...]


def other_tensors(ck: _Checkpoint, parts: set[str]) -> list[OtherTensor]:
    """The checkpoint's tensors not in `parts` (the tensors of its listed layers), from the headers."""
    out = []
    for t in ck.names():
        if t not in parts:
            e = ck.entry(t)
            out.append(OtherTensor(t, e.dtype, e.shape))
    return out


# A layer's tensors besides its bias (a bias is not applied by the GEMM: listed as another tensor).
_LAYER_PARTS = tuple(
    s for suffixes in _ROLE_SUFFIX.values() for s in suffixes if s != "bias"
)


# --------------------------------------------------------------------------------------------------
# public API


def list_layers(path: str | Path) -> list[LayerInfo]:
    """The int4 linear layers of a checkpoint with their shapes, from the headers (no weight data)."""
    return list_contents(path)[0]


def list_contents(path: str | Path) -> tuple[list[LayerInfo], list[OtherTensor]]:
    """The int4 linear layers of a checkpoint (list_layers) and its other tensors, from the headers."""
    ck = _Checkpoint(path)
    method = _method(ck)
    layers = [_plan(ck, name, method).info for name in _layer_names(ck)]
    if not layers:
        raise ConfigError(
            f"{path}: no int4 linear layers (no tensor named *.qweight or *.weight_packed)"
        )
    parts = {f"{i.name}.{s}" for i in layers for s in _LAYER_PARTS}
    return layers, other_tensors(ck, parts)


def load_layer(
    path: str | Path, name: str, scale_pair: bool = False
) -> tuple[AwqWeights, ImportReport]:
    """Layer `name` (its module prefix) as host AwqWeights plus the report of the scale conversion: to bf16,
    or with scale_pair to exact bf16 pairs (record format awq_f16; fp16 and bf16 scales always fit).
    """
    ck = _Checkpoint(path)
    method = _method(ck)
    if (
        ck.entry(f"{name}.qweight") is None
        and ck.entry(f"{name}.weight_packed") is None
    ):
        raise not_found("layer", name, path, "int4 layers", _layer_names(ck))
    plan = _plan(ck, name, method)
    data = {
        role: ck.read(e, tname)
        for role, (tname, e) in plan.tensors.items()
        if role != "bias"
    }
    info = plan.info
    wraps = 0
    if info.format == "compressed-tensors":
        q, z, s_src, s_name = _decode_ct(plan, data)
    else:
        q, z, wraps = _decode_qweight(plan, data)
        s_src, s_name = data["scales"], plan.tensors["scales"][0]
    _check_g_idx(plan, data)
    s, s_lo, report = _convert_scales(s_src, s_name, plan, wraps, scale_pair)
    w = AwqWeights(q, z, s, info.group_size, s_lo)
    try:
        w.validate()
    except ConfigError as e:
        raise ConfigError(f"layer {name}: {e}") from None
    return w, report


# --------------------------------------------------------------------------------------------------
# decoding


def _decode_qweight(plan: _Plan, data: dict) -> tuple[np.ndarray, np.ndarray, int]:
    k, n = plan.info.in_features, plan.info.out_features
    g = k // plan.info.group_size
    if plan.info.format == "awq-gemm":
        q = _nibbles(data["qweight"])[:, :, AWQ_INVERSE].reshape(k, n)
        z = _nibbles(data["qzeros"])[:, :, AWQ_INVERSE].reshape(g, n)
        return q, z, 0
    q = (
        _nibbles(data["qweight"]).transpose(0, 2, 1).reshape(k, n)
    )  # element j of row r is K row 8r + j
    words = np.ascontiguousarray(data["qzeros"]).view(np.uint32)
    if plan.info.format == "gptq_v2":
        return q, _nibbles(words).reshape(g, n), 0
    stored = _nibbles(words)
    z_carry = _nibbles(
        words + np.uint32(GPTQ_V1_WORD_OFFSET)
    )  # GPTQModel: one word addition (wraps mod 2^32)
    z_nibble = (stored + np.uint8(1)) & np.uint8(
        0xF
    )  # AutoGPTQ: one per nibble, no carry
    differ = np.argwhere((z_carry != z_nibble).any(axis=2))
    if differ.size and not plan.v1_carry_ok:
        r, c = (int(x) for x in differ[0])
        tname = plan.tensors["qzeros"][0]
        raise ConfigError(
            f"tensor {tname}[{r}, {c}]: GPTQ v1 zero point 0 stored as -1 wraps into its neighbour; GPTQModel"
            " (>= 0.9.0, word carry) and AutoGPTQ (per nibble) read this word differently and"
            " quantization_config.meta.quantizer does not name gptqmodel >= 0.9.0: re-export as gptq_v2"
        )
    wraps = int(np.count_nonzero(stored == 0xF))
    return q, z_carry.reshape(g, n), wraps


def _decode_ct(
    plan: _Plan, data: dict
) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    k, n = plan.info.in_features, plan.info.out_features
    g = k // plan.info.group_size
    packed = data["weight_packed"]
    q = (
        _nibbles(packed).reshape(n, -1)[:, :k].T
    )  # stored v + 8 is the host code (v - zp = q - z)
    zp = data.get("weight_zero_point")
    zname = plan.tensors.get("weight_zero_point", ("",))[0]
    if zp is None:
        z = np.full((g, n), CT_OFFSET, np.uint8)  # symmetric: zp = 0
    elif zp.dtype == np.int32:
        z = (
            _nibbles(zp).transpose(0, 2, 1).reshape(-1, g)[:n].T
        )  # element j of row r is out row 8r + j
    else:
        bad = np.argwhere((zp < -CT_OFFSET) | (zp >= CT_OFFSET))
        if bad.size:
            r, c = (int(x) for x in bad[0])
            raise ConfigError(
                f"tensor {zname}[{r}, {c}] = {int(zp[r, c])}: int4 zero points must lie in -8..7"
                " (0..15 after the +8 offset)"
            )
        z = (zp.astype(np.int16) + CT_OFFSET).astype(np.uint8).T
    return (
        np.ascontiguousarray(q),
        np.ascontiguousarray(z),
        data["weight_scale"].T,
        plan.tensors["weight_scale"][0],
    )


def _check_g_idx(plan: _Plan, data: dict) -> None:
    g_idx = data.get("g_idx")
    if g_idx is None:
        return
    want = np.arange(plan.info.in_features) // plan.info.group_size
    bad = np.flatnonzero(g_idx.astype(np.int64) != want)
    if bad.size:
        i = int(bad[0])
        raise ConfigError(
            f"tensor {plan.tensors['g_idx'][0]}[{i}] = {int(g_idx[i])}, expected {int(want[i])} = i // group_size:"
            " act-order (desc_act) checkpoints are not supported"
        )


def _convert_scales(
    src: np.ndarray, name: str, plan: _Plan, wraps: int, scale_pair: bool
) -> tuple[np.ndarray, np.ndarray | None, ImportReport]:
    s64 = src.astype(np.float64)
    bad = np.argwhere(~(np.isfinite(s64) & (s64 > 0)))
    if bad.size:
        idx = tuple(int(x) for x in bad[0])
        if plan.info.format == "compressed-tensors":
            idx = idx[::-1]  # report in the tensor's own [N, K/gs] order
        raise ConfigError(
            f"tensor {name}{list(idx)} = {float(s64[tuple(bad[0])])}: scales must be finite and > 0"
        )
    s_lo = None
    if scale_pair:
        try:
            s, s_lo = scale_pair_of(src)
        except ConfigError as e:
            raise ConfigError(f"tensor {name}: {e}") from None
        back = s.astype(np.float64) + s_lo.astype(np.float64)
    else:
        s = np.ascontiguousarray(src.astype(bfloat16))
        back = s.astype(np.float64)
    rel = np.abs(back - s64) / s64
    info = plan.info
    report = ImportReport(
        name=info.name,
        format=info.format,
        scale_dtype=np.dtype(src.dtype).name,
        total_scales=int(s.size),
        scales_changed=int(np.count_nonzero(back != s64)),
        max_rel_scale_change=float(rel.max(initial=0.0)),
        k=info.in_features,
        n=info.out_features,
        group_size=info.group_size,
        zero_wraps=wraps,
        has_bias="bias" in plan.tensors,
        kept_as="bfloat16 pair" if scale_pair else "bfloat16",
    )
    return s, s_lo, report


def _float_tensor(path: str | Path, name: str, ndim: int, what: str) -> np.ndarray:
    """Float tensor `name` of a checkpoint as float32, refused in one line unless it is an ndim-D F32, F16
    or BF16 tensor (what: the thing it should be, for the message)."""
    ck = _Checkpoint(path)
    e = ck.entry(name)
    if e is None:
        raise not_found("tensor", name, path, "tensors", ck.names())
    if len(e.shape) != ndim or e.dtype not in ("F32", "F16", "BF16"):
        raise ConfigError(
            f"{name}: {e.dtype} {list(e.shape)}: {what} is a {ndim}-D F32, F16 or BF16 tensor"
        )
    return ck.read(e, name).astype(np.float32)


def load_vector(path: str | Path, name: str) -> np.ndarray:
    """1-D float tensor `name` of a checkpoint (a norm weight) as float32."""
    return _float_tensor(path, name, 1, "a norm weight")


def attention_heads(path: str | Path) -> tuple[int, int]:
    """(query heads, key/value heads) from the checkpoint directory's config.json (Hugging Face's
    num_attention_heads, num_key_value_heads)."""
    config = Path(path) / "config.json"
    if not config.is_file():
        raise ConfigError(
            f"{path}: no config.json beside the weights: the attention's heads are unknown "
            "(give the checkpoint's directory)"
        )
    cfg = _load_json(config)
    heads = cfg.get("num_attention_heads")
    kv = cfg.get("num_key_value_heads", heads)
    if (
        not isinstance(heads, int)
        or not isinstance(kv, int)
        or heads <= 0
        or kv <= 0
        or heads % kv
    ):
        raise ConfigError(
            f"{config}: num_attention_heads {heads!r} and num_key_value_heads {kv!r}: positive integers, "
            "the first a multiple of the second"
        )
    return heads, kv


def rope_frequencies(path: str | Path, d: int) -> np.ndarray:
    """The rotary frequencies of heads of d from the checkpoint directory's config.json (rope.py)."""
    from .rope import config_frequencies

    config = Path(path) / "config.json"
    if not config.is_file():
        raise ConfigError(
            f"{path}: no config.json beside the weights: RoPE's parameters are unknown "
            "(give the checkpoint's directory)"
        )
    return config_frequencies(_load_json(config), d, str(config))


def head_source(path: str | Path) -> tuple[str, bool]:
    """(what the model's LM head is read from, tied): a quantized layer "lm_head" (its qweight, as the
    checkpoint's other layers), a float "lm_head.weight", or, where the checkpoint has no lm_head tensor
    (it ties the head to its embedding), "model.embed_tokens.weight".
    """
    ck = _Checkpoint(path)
    names = set(ck.names())
    if "lm_head.qweight" in names or "lm_head.weight_packed" in names:
        return "lm_head", False
    if "lm_head.weight" in names:
        return "lm_head.weight", False
    if "model.embed_tokens.weight" in names:
        return "model.embed_tokens.weight", True
    raise not_found("tensor", "lm_head.weight", path, "tensors", ck.names())


def load_float_matrix(path: str | Path, name: str) -> np.ndarray:
    """2-D float tensor `name` of a checkpoint (an LM head or embedding, [vocab, hidden]) as float32."""
    return _float_tensor(path, name, 2, "an LM head")


def config(path: str | Path) -> dict:
    """The checkpoint directory's config.json (an empty dict without one)."""
    file = Path(path) / "config.json"
    return _load_json(file) if file.is_file() else {}


def tensor_names(path: str | Path) -> list[str]:
    return _Checkpoint(path).names()


def embedding(path: str | Path, name: str = "model.embed_tokens.weight"):
    """(rows, vocab, hidden) of the token embedding, a float tensor [vocab, hidden] read whole."""
    table = _float_tensor(path, name, 2, "a token embedding")
    return (lambda ids: table[np.asarray(ids)]), *table.shape
