# SPDX-License-Identifier: MIT
"""Rotary position embedding's frequencies and a position's [cos | sin] row, from a checkpoint's own
parameters: Hugging Face config.json (rope_theta, rope_scaling of rope_type "llama3") or a GGUF header
(<arch>.rope.freq_base, and llama.cpp's rope_freqs tensor: Llama 3's per-frequency divisors).

Llama 3's scaling (the rule Hugging Face's transformers applies for rope_type "llama3", written out
here): with wavelength w_i = 2 pi / f_i of each base frequency f_i = theta^(-2i/d), L = the original
context (original_max_position_embeddings), a low and a high frequency factor and a factor s: a w_i above
L / low is divided by s, one below L / high kept, and one between interpolated,
f_i ((1 - t) / s + t) with t = (L / w_i - low) / (high - low).
"""

from __future__ import annotations

import numpy as np
from ml_dtypes import bfloat16

from ..errors import ConfigError


def base_frequencies(theta: float, d: int) -> np.ndarray:
    """f_i = theta^(-2i/d), i < d / 2, float64."""
    return float(theta) ** (-np.arange(0, d, 2, dtype=np.float64) / d)


def llama3_frequencies(theta: float, d: int, scaling: dict) -> np.ndarray:
    """The base frequencies with Llama 3's scaling (the module docstring)."""
    try:
        s = float(scaling["factor"])
        low, high = float(scaling["low_freq_factor"]), float(
            scaling["high_freq_factor"]
        )
        old = float(scaling["original_max_position_embeddings"])
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"rope_scaling {scaling!r}: llama3 needs {e}") from None
    if not (s > 0 and high > low > 0 and old > 0):
        raise ConfigError(
            f"rope_scaling {scaling!r}: factors must be positive, high above low"
        )
    f = base_frequencies(theta, d)
    wavelength = 2 * np.pi / f
    t = (old / wavelength - low) / (high - low)
    return np.where(
        wavelength > old / low,
        f / s,
        np.where(wavelength < old / high, f, f * ((1 - t) / s + t)),
    )


def config_frequencies(cfg: dict, d: int, where: str) -> np.ndarray:
    """Frequencies from a Hugging Face config: rope_theta (10000 when absent, transformers' default) and
    rope_scaling None or of rope_type "llama3"; any other scaling is refused by name."""
    theta = cfg.get("rope_theta", 10000.0)
    if not isinstance(theta, (int, float)) or theta <= 1:
        raise ConfigError(f"{where}: rope_theta {theta!r}: a number above 1")
    scaling = cfg.get("rope_scaling")
    if scaling is None:
        return base_frequencies(theta, d)
    kind = (
        scaling.get("rope_type", scaling.get("type"))
        if isinstance(scaling, dict)
        else None
    )
    if kind != "llama3":
        raise ConfigError(
            f'{where}: rope_scaling of type {kind!r}: only Llama 3\'s ("llama3") is implemented'
        )
    return llama3_frequencies(theta, d, scaling)


def table(frequencies: np.ndarray, position: int) -> np.ndarray:
    """The [cos | sin] row of a position, bf16 [1, d]: the angles position * f_i in float64, each rounded
    once to bf16 (the kernel's rope_bf16 reads it)."""
    angles = position * np.asarray(frequencies, np.float64)
    return np.concatenate([np.cos(angles), np.sin(angles)]).astype(bfloat16)[None]


def rotate_f64(x: np.ndarray, tab: np.ndarray, d: int) -> np.ndarray:
    """Hugging Face's rotation in float64 of x's heads of d: x cos + rotate_half(x) sin, rotate_half(x) =
    [-x2, x1], cos and sin the table's values (the reference the module's rope launches are checked by).
    """
    h = d // 2
    c, s = (
        np.asarray(tab, np.float64).reshape(-1)[k * h : (k + 1) * h] for k in (0, 1)
    )
    q = np.asarray(x, np.float64).reshape(-1, d)
    out = np.concatenate(
        [q[:, :h] * c - q[:, h:] * s, q[:, :h] * s + q[:, h:] * c], axis=1
    )
    return out.reshape(np.shape(x))
