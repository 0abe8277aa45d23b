# SPDX-License-Identifier: MIT
"""compressed-tensors int4 `pack-quantized` checkpoints made by the package itself (its PackedQuantization-
Compressor and QuantizationConfig, symmetric and asymmetric, bf16 and fp16 scales), read by
int4awq/checkpoints.py through the weights-file interface: with the scales kept exactly (format awq_f16) the
weights equal the package's own decompress, which rounds each (q - z) * s to the scale's dtype, once the host's
exact product is rounded the same way; the layer runs on the emulator."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("compressed_tensors")
from compressed_tensors.compressors.pack_quantized.base import (  # noqa: E402
    PackedQuantizationCompressor,
)
from compressed_tensors.quantization import (  # noqa: E402
    QuantizationConfig,
    preset_name_to_scheme,
)
from compressed_tensors.quantization.utils import calculate_qparams  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from int4awq.quant import dequantize  # noqa: E402
from int4awq.weights_file import load  # noqa: E402

from host_args import REPO, RUN  # noqa: E402

N, K, GS = 64, 256, 32
LAYER = "model.layers.0.mlp.down_proj"


def make_checkpoint(d, preset, dtype):
    """The package's own compression of a seeded [N, K] weight; returns its decompress, [N, K]."""
    scheme = preset_name_to_scheme(preset, ["Linear"])
    scheme.weights.group_size = GS
    w = (torch.randn(N, K, generator=torch.Generator().manual_seed(3)) / 16).to(dtype)
    groups = w.float().view(N, K // GS, GS)
    scale, zp = calculate_qparams(groups.amin(-1), groups.amax(-1), scheme.weights)
    state = {"weight": w, "weight_scale": scale.to(dtype), "weight_zero_point": zp}
    packed = PackedQuantizationCompressor.compress(state, scheme)
    ref = PackedQuantizationCompressor.decompress(dict(packed), scheme)["weight"]
    save_file(
        {f"{LAYER}.{k}": v.contiguous() for k, v in packed.items()},
        str(d / "model.safetensors"),
    )
    cfg = QuantizationConfig(config_groups={"group_0": scheme}, format="pack-quantized")
    (d / "config.json").write_text(
        json.dumps({"quantization_config": cfg.model_dump(mode="json")})
    )
    return ref


@pytest.mark.parametrize("preset", ["W4A16", "W4A16_ASYM"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_layer_is_the_packages_decompression(tmp_path, preset, dtype):
    ref = make_checkpoint(tmp_path, preset, dtype)
    w, line = load(tmp_path, LAYER, scale_pair=True)
    assert w.format == "awq_f16" and (w.k, w.n, w.gs) == (K, N, GS)
    assert "-> bfloat16 pair: 0 of" in line
    ours = torch.from_numpy(np.ascontiguousarray(dequantize(w).T)).to(dtype)
    assert torch.equal(ours, ref)


def test_layer_runs_on_the_emulator(tmp_path):
    make_checkpoint(tmp_path, "W4A16_ASYM", torch.float16)
    res = subprocess.run(
        [sys.executable, RUN, "--weights", str(tmp_path), "--layer", LAYER,
         "--format", "awq_f16", "--m", "16", "--backend", "emu"],
        capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.splitlines()[1].startswith("AWQ_F16 ") and "PASS!" in res.stdout
