# SPDX-License-Identifier: MIT
"""compressed-tensors int4 `pack-quantized` checkpoints made by the package itself (its PackedQuantization-
Compressor and QuantizationConfig, symmetric and asymmetric, bf16 and fp16 scales), read by
int4awq/formats/checkpoints.py through the weights-file interface: with the scales kept exactly (format awq_f16) the
weights equal the package's own decompress, which rounds each (q - z) * s to the scale's dtype, once the host's
exact product is rounded the same way; the layer runs on the emulator.

The checkpoints and the package's decompress are committed in tests/fixtures/ (made by `make fixtures`,
tests/fixtures/PROVENANCE.md): these tests need neither torch nor compressed-tensors. The tests marked
`formats` (`make test-formats`) make them again with the package and check the fixtures are what it writes.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from ml_dtypes import bfloat16

from int4awq.formats.quant import dequantize
from int4awq.formats.weights_file import load

from fixture_files import FIXTURES, generator, reference  # noqa: E402
from host_args import REPO, RUN

N, K, GS = 64, 256, 32
LAYER = "model.layers.0.mlp.down_proj"
PRESETS = ["W4A16", "W4A16_ASYM"]
DTYPES = {"bfloat16": bfloat16, "float16": np.float16}


def assert_is_the_decompression(d, dtype, ref):
    """The layer in d, loaded with its scales kept exactly and its exact product rounded to dtype as the
    package's decompress rounds, equals ref ([N, K] in dtype)."""
    w, line = load(d, LAYER, scale_pair=True)
    assert w.format == "awq_f16" and (w.k, w.n, w.gs) == (K, N, GS)
    assert "-> bfloat16 pair: 0 of" in line
    ours = np.ascontiguousarray(dequantize(w).T).astype(DTYPES[dtype])
    assert ref.dtype == ours.dtype and ref.shape == ours.shape == (N, K)
    assert np.array_equal(ours.astype(np.float32), ref.astype(np.float32))


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_layer_is_the_packages_decompression(preset, dtype):
    name = f"ct_int4_{preset}_{dtype}"
    suffix = "bf16" if dtype == "bfloat16" else "f16"
    ref = reference(f"{name}/{LAYER}.{suffix}.npy")
    assert_is_the_decompression(FIXTURES / name, dtype, ref)


def test_layer_runs_on_the_emulator():
    res = subprocess.run(
        [sys.executable, RUN, "--weights", str(FIXTURES / "ct_int4_W4A16_ASYM_float16"), "--layer", LAYER,
         "--format", "awq_f16", "--m", "16", "--backend", "emu"],
        capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.splitlines()[1].startswith("AWQ_F16 ") and "PASS!" in res.stdout


def test_fixtures_are_the_files_their_provenance_names():
    # every fixture file (these and tests/formats/test_mx_safetensors.py's) is in PROVENANCE.md with its sha256:
    # none was added, changed or removed without `make fixtures`
    fx = generator()
    recorded = fx.provenance_hashes(FIXTURES)
    assert sorted(recorded) == fx.fixture_files(FIXTURES)
    assert {f: fx.sha256(FIXTURES / f) for f in recorded} == recorded
    assert sum((FIXTURES / f).stat().st_size for f in recorded) < 600_000


# ---------------------------------------------------------------------------------------------- formats
# With the package itself (make test-formats).


@pytest.mark.formats
@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_layer_is_the_packages_decompression_made_now(tmp_path, preset, dtype):
    import torch
    import compressed_tensors  # noqa: F401  (the test needs it installed: make test-formats)

    ref = generator().write_ct_int4(tmp_path, preset, dtype)
    assert ref.dtype == getattr(torch, dtype)
    bits = ref.view(torch.int16).numpy().view(np.uint16)
    ref = bits.view(bfloat16) if dtype == "bfloat16" else ref.numpy()
    assert_is_the_decompression(tmp_path, dtype, ref)


@pytest.mark.formats
@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_the_committed_fixture_is_what_the_package_writes(tmp_path, preset, dtype):
    import torch  # noqa: F401  (the test needs it installed: make test-formats)
    import compressed_tensors  # noqa: F401  (the test needs it installed: make test-formats)

    fx = generator()
    name = f"ct_int4_{preset}_{dtype}"
    fx.make(name, tmp_path)
    assert fx.differences(FIXTURES, tmp_path, name) == [], "run `make fixtures`"
