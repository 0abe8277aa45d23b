# SPDX-License-Identifier: MIT
"""RoPE's parameters from a checkpoint (int4awq/formats/rope.py): Llama 3's scaling by its defining
properties at Llama-3.2-1B's values, the Hugging Face config's and the GGUF header's readings, and the
refusals."""

from __future__ import annotations

import json
import math
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from layer_files import LLAMA3_SCALING, ROPE_THETA, q4_k_m_file  # noqa: E402

from int4awq.errors import ConfigError  # noqa: E402
from int4awq.formats import rope  # noqa: E402
from int4awq.formats.weights_file import rope_frequencies  # noqa: E402

D = 64


def test_llama3_scaling_keeps_high_frequencies_divides_low_ones_and_blends_between():
    """Llama-3.2-1B (theta 500000, factor 32, low 1, high 4, original context 8192): a wavelength under
    8192 / 4 is kept, one over 8192 / 1 divided by 32, one between lies strictly between the two; the
    frequencies still fall with i."""
    f = rope.config_frequencies(
        {"rope_theta": ROPE_THETA, "rope_scaling": LLAMA3_SCALING}, D, "config.json"
    )
    base = ROPE_THETA ** (-np.arange(0, D, 2) / D)
    wavelength = 2 * math.pi / base
    short, long_ = wavelength < 8192 / 4, wavelength > 8192 / 1
    between = ~short & ~long_
    assert f[0] == 1.0 and short.any() and long_.any() and between.any()
    assert np.array_equal(f[short], base[short])
    assert np.allclose(f[long_], base[long_] / 32, rtol=1e-15, atol=0)
    assert (f[between] < base[between]).all() and (
        f[between] > base[between] / 32
    ).all()
    assert (np.diff(f) < 0).all()


def test_a_config_without_scaling_is_plain_rope_and_other_scalings_are_refused():
    assert np.array_equal(
        rope.config_frequencies({"rope_theta": 10000.0}, D, "c"),
        10000.0 ** (-np.arange(0, D, 2) / D),
    )
    assert math.isclose(
        rope.config_frequencies({}, D, "c")[1], 10000.0 ** (-2 / D), rel_tol=1e-15
    )
    with pytest.raises(
        ConfigError, match="rope_scaling of type 'yarn': only Llama 3's"
    ):
        rope.config_frequencies({"rope_scaling": {"rope_type": "yarn"}}, D, "c")
    with pytest.raises(ConfigError, match="rope_theta 'big': a number above 1"):
        rope.config_frequencies({"rope_theta": "big"}, D, "c")
    with pytest.raises(ConfigError, match="llama3 needs 'factor'"):
        rope.config_frequencies({"rope_scaling": {"rope_type": "llama3"}}, D, "c")


def test_the_checkpoint_directory_and_the_gguf_header_give_their_frequencies(tmp_path):
    d = tmp_path / "ckpt"
    d.mkdir()
    (d / "config.json").write_text(
        json.dumps({"rope_theta": ROPE_THETA, "rope_scaling": LLAMA3_SCALING})
    )
    assert np.array_equal(
        rope_frequencies(d, D),
        rope.llama3_frequencies(ROPE_THETA, D, LLAMA3_SCALING),
    )
    # the GGUF file: freq_base 500000 and llama.cpp's rope_freqs divisors (layer_files: 1 .. 32)
    path = q4_k_m_file(tmp_path / "l.gguf")
    divisors = np.linspace(1.0, 32.0, D // 2).astype(np.float32).astype(np.float64)
    assert np.array_equal(
        rope_frequencies(path, D), ROPE_THETA ** (-np.arange(0, D, 2) / D) / divisors
    )
    with pytest.raises(
        ConfigError, match="rope_freqs.weight holds 32 values; heads of 128 need 64"
    ):
        rope_frequencies(path, 128)
    with pytest.raises(ConfigError, match="no config.json beside the weights: RoPE's"):
        rope_frequencies(tmp_path, D)


def test_the_table_is_cos_then_sin_of_the_position_in_bf16():
    f = rope.base_frequencies(ROPE_THETA, D)
    t = rope.table(f, 0).astype(np.float32)
    assert (
        t.shape == (1, D)
        and (t[0, : D // 2] == 1).all()
        and (t[0, D // 2 :] == 0).all()
    )
    t = rope.table(f, 3).astype(np.float64)[0]
    assert np.allclose(t[: D // 2], np.cos(3 * f), atol=2**-8) and np.allclose(
        t[D // 2 :], np.sin(3 * f), atol=2**-8
    )
