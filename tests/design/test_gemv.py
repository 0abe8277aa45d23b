# SPDX-License-Identifier: MIT
"""The decode GEMV: its kernel entries, numpy model, design and host program, on the GEMM's packed record.

* the GEMV object's entries, host-built, bit for bit against int4awq.kernel.kernel_model.kernel_gemv_model for
  1..32 rows; exact-mode operands bit-identical to the reference;
* one packed buffer, two objects: each GEMV row is the GEMM's row, bit for bit;
* the design (matvec_int4_packed.py) on the emulator at K = N = 512: the model's bits (K in one part per
  PE), the design's DDR traffic, 32 PEs; its resource model for every Llama-3.2-1B projection at M = 1,
  each DDR-bound;
* the configuration rules and the host program's choice of design.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from ml_dtypes import bfloat16

from int4awq.design import gemv
from int4awq.kernel import record
from int4awq.errors import ConfigError
from int4awq.design.gemv import GemvConfig
from int4awq.kernel.kernel_model import (
    GemvHostKernel,
    HostKernel,
    kernel_gemm_model,
    kernel_gemv_model,
)
from int4awq.design.llama import PROJECTIONS
from int4awq.formats.quant import random_activations, random_weights
from int4awq.run.reference import reference_gemm

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Tiles whose GEMM objects tests/kernel/test_kernel.py builds too: (tile_m, tile_n, tile_k, gs), a chunk inside a
# group and one holding whole groups; the GEMV object is the record tile's (tile_n, tile_k, gs).
OBJECTS = [(16, 16, 32, 128), (64, 64, 64, 32)]


def u16(x):
    return np.asarray(x).view(np.uint16)


@pytest.fixture(scope="module")
def kernels():
    return {obj: GemvHostKernel(*obj[1:]) for obj in OBJECTS}


# ----------------------------------------------------------------------------------------------- kernel
@pytest.mark.parametrize("obj", OBJECTS)
@pytest.mark.parametrize("m", [1, 3, 8, 13, 32])
def test_gemv_entries_match_the_model_bit_for_bit(kernels, obj, m):
    _, tn, tk, gs = obj
    k = 512
    a = random_activations(m, k, seed=m)
    w = random_weights(k, 2 * tn, gs, seed=100 + m)
    np.testing.assert_array_equal(
        u16(kernels[obj].gemv(a, w)), u16(kernel_gemv_model(a, w, tk))
    )
    assert kernels[obj].misaligned() == 0


@pytest.mark.parametrize("obj", OBJECTS)
def test_exact_mode_is_bit_identical_to_the_reference(kernels, obj):
    _, tn, tk, gs = obj
    a = random_activations(5, 1024, seed=3, exact=True)
    w = random_weights(1024, 2 * tn, gs, seed=4, exact=True)
    np.testing.assert_array_equal(
        u16(kernels[obj].gemv(a, w)), u16(reference_gemm(a, w)[1])
    )


@pytest.mark.parametrize("obj", OBJECTS)
def test_gemv_rows_are_the_gemm_rows_from_either_record(kernels, obj):
    """The GEMM object (tile_m rows, the line-image record) and the GEMV object (the first m of them, the
    dense record): the rows agree bit for bit, and the model says the same.
    """
    tm, tn, tk, gs = obj
    a = random_activations(tm, 512, seed=7)
    w = random_weights(512, 2 * tn, gs, seed=8)
    c_gemm = HostKernel(*obj).gemm(a, w, packed=record.pack_weights(w, tn, tk))
    dense = record.pack_weights(w, tn, tk, dense=True)
    assert dense.shape[2] < record.pack_weights(w, tn, tk).shape[2]
    for m in (1, 8):
        np.testing.assert_array_equal(
            u16(kernels[obj].gemv(a[:m], w, packed=dense)), u16(c_gemm[:m])
        )
    np.testing.assert_array_equal(
        u16(kernel_gemv_model(a[:8], w, tk)), u16(kernel_gemm_model(a, w, tk)[:8])
    )
    assert kernels[obj].path.name == f"mv_int4_bf16_gemv_n{tn}_k{tk}_gs{gs}.so"


# ----------------------------------------------------------------------------------------------- design
def run_design(cfg, a, w):
    sys.path.insert(0, os.path.join(REPO, "emulator"))
    from air.backend.xrt import XRTBackend

    from int4awq.design.design import build_host_kernel
    from matvec_int4_packed import backend_options, build_module

    os.environ["AIR_EMU_LIB_PATH"] = build_host_kernel(cfg)
    backend = XRTBackend(**backend_options(cfg))
    invoke = backend.compile_and_load(build_module(**cfg.builder_args()))
    # mlir-air's GEMV function: (PACKED, B, D), the vectors flat
    _, _, c = invoke(
        record.pack_weights(
            w, cfg.tile_n, cfg.tile_k_l1, dense=cfg.kernel.dense
        ).reshape(cfg.n_tiles * cfg.k_chunks, -1),
        a.reshape(-1),
        np.zeros(cfg.m * cfg.n, bfloat16),
    )
    return np.asarray(c).reshape(cfg.m, cfg.n), backend


@pytest.mark.parametrize(
    "m, tk2, n, exact", [(1, 512, 512, False), (5, 128, 1024, True)]
)
def test_design_on_the_emulator_is_the_model(m, tk2, n, exact):
    # one K refill of 16 chunks; four refills of 4 chunks (L2 ping-ponged) over two launch iterations
    cfg = GemvConfig(m, 512, n, 128, tile_n=16, tile_k_l1=32, tile_k_l2=tk2)
    a = random_activations(m, 512, seed=11, exact=exact)
    w = random_weights(512, n, 128, seed=12, exact=exact)
    c, backend = run_design(cfg, a, w)
    np.testing.assert_array_equal(u16(c), u16(kernel_gemv_model(a, w, 32)))
    if exact:
        np.testing.assert_array_equal(u16(c), u16(reference_gemm(a, w)[1]))
    st = backend.emu_stats
    assert st.bytes[("L3", "L2")] + st.bytes[("L2", "L3")] == cfg.ddr_bytes()
    # per launch iteration: zero, one compute herd per K refill, drain
    assert st.pe_executions == (2 + cfg.k_refills) * 32 * cfg.launch_n
    assert st.kernel_calls["gemv_int4_accumulate"] == cfg.n_tiles * cfg.k_chunks
    assert backend.emu_resources.summary() == "resources: within limits"
    [herd] = backend.emu_budget.herds
    assert herd.used == cfg.l1_budget()["total"]


def test_two_gemvs_chained_in_one_module_are_each_the_model():
    """build_chained_module: C1 = A x W1 in one launch, C2 = C1 x W2 in the next, C1 through DDR; each
    output bit for bit the kernel model's of its own operands (C2's of the C1 the first launch wrote).
    """
    sys.path.insert(0, os.path.join(REPO, "emulator"))
    from air.backend.xrt import XRTBackend

    from int4awq.design.design import build_host_kernel
    from matvec_int4_packed import backend_options, build_chained_module

    m, k, n1, n2, tn, tk = 3, 256, 1024, 512, 16, 64
    cfg = GemvConfig(m, k, n1, 128, tile_n=tn, tile_k_l1=tk)
    a = random_activations(m, k, seed=21)
    w1, w2 = random_weights(k, n1, 128, seed=22), random_weights(n1, n2, 128, seed=23)
    os.environ["AIR_EMU_LIB_PATH"] = build_host_kernel(cfg)
    backend = XRTBackend(**backend_options(cfg))
    invoke = backend.compile_and_load(build_chained_module(m, k, n1, n2, 128, tn, tk))
    out = invoke(
        a,
        record.pack_weights(w1, tn, tk, dense=True),
        np.zeros((m, n1), bfloat16),
        record.pack_weights(w2, tn, tk, dense=True),
        np.zeros((m, n2), bfloat16),
    )
    c1, c2 = (np.asarray(out[i]).reshape(m, n) for i, n in ((2, n1), (4, n2)))
    np.testing.assert_array_equal(u16(c1), u16(kernel_gemv_model(a, w1, tk)))
    np.testing.assert_array_equal(u16(c2), u16(kernel_gemv_model(c1, w2, tk)))
    assert backend.emu_resources.summary() == "resources: within limits"


# ------------------------------------------------------------------- mlir-air's GEMV API (issue 49)
def upstream_operands(M, K, GS, seed):
    """mlir-air's GEMV operands (its main's generator): A_q [M, K / 2], A_s and A_z [K / GS, M], B [K]."""
    rng = np.random.default_rng(seed)
    nibbles = rng.integers(0, 16, (M, K), dtype=np.uint8)
    a_q = (nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)).astype(np.uint8)
    a_s = rng.uniform(0.005, 0.02, (K // GS, M)).astype(bfloat16)
    a_z = rng.integers(7, 9, (K // GS, M), dtype=np.uint8)
    return nibbles, a_q, a_s, a_z, rng.standard_normal(K).astype(bfloat16)


def test_cpu_reference_is_upstreams_definition():
    """D[r] = sum_k (nibble(r, k) - z[k / GS, r]) * s[k / GS, r] * B[k], the even k in the low nibble, in f32
    (mlir-air's loop, written out here); B [rows, K] gives one D row per vector."""
    sys.path.insert(0, os.path.join(REPO, "emulator"))
    from matvec_int4_packed import cpu_reference

    M, K, GS = 16, 64, 32
    nibbles, a_q, a_s, a_z, b = upstream_operands(M, K, GS, 3)
    want = np.zeros(M, np.float32)
    for r in range(M):
        for k in range(K):
            g = k // GS
            want[r] += (
                (np.float32(nibbles[r, k]) - np.float32(a_z[g, r]))
                * np.float32(a_s[g, r])
                * np.float32(b[k])
            )
    got = cpu_reference(a_q, a_s, a_z, b)
    assert got.dtype == bfloat16 and got.shape == (M,)
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=1e-2, atol=1e-3)
    two = cpu_reference(a_q, a_s, a_z, np.stack([b, -b]))
    assert two.shape == (2, M) and np.array_equal(u16(two[0]), u16(got))


def test_upstreams_build_module_and_pack_inputs_run_on_the_emulator():
    """build_module(M, K, GS, M_TILE, K_CHUNK) is mlir-air's function (PACKED [tiles, bytes] i8, B [K],
    D [M]); pack_inputs fills PACKED from mlir-air's operands at its information (4 + 24 / GS bits a
    weight: mlir-air's own tile is the same size at these tiles) and the emulator's D is cpu_reference's.
    """
    sys.path.insert(0, os.path.join(REPO, "emulator"))
    from air.backend.xrt import XRTBackend

    from int4awq.design.design import build_host_kernel
    from matvec_int4_packed import (
        backend_options,
        build_module,
        cpu_reference,
        gemv_config,
        pack_inputs,
    )

    M, K, GS, M_TILE, K_CHUNK = 512, 1024, 128, 16, 512
    _, a_q, a_s, a_z, b = upstream_operands(M, K, GS, 5)
    packed = pack_inputs(a_q, a_s, a_z, M, K, GS, M_TILE, K_CHUNK)
    # mlir-air's tile: M_TILE * K_CHUNK / 2 code bytes, then 2 + 1 bytes of scale and zero a group and row
    upstream_tile = M_TILE * K_CHUNK // 2 + 3 * M_TILE * (K_CHUNK // GS)
    assert packed.shape == (M // M_TILE * (K // K_CHUNK), upstream_tile)
    module = build_module(M, K, GS, M_TILE, K_CHUNK)
    assert (
        f"func.func @matvec_int4_packed(%arg0: memref<{packed.shape[0]}x{upstream_tile}xi8>, "
        f"%arg1: memref<{K}xbf16>, %arg2: memref<{M}xbf16>)" in str(module)
    )
    cfg = gemv_config(M, K, GS, M_TILE, K_CHUNK)
    os.environ["AIR_EMU_LIB_PATH"] = build_host_kernel(cfg)
    invoke = XRTBackend(**backend_options(cfg)).compile_and_load(module)
    d = np.asarray(invoke(packed, b, np.zeros(M, bfloat16))[2])
    ref = cpu_reference(a_q, a_s, a_z, b).astype(np.float32)
    # the kernel takes B as bfp16 blocks (8-bit mantissas), the reference in f32
    assert np.corrcoef(d.astype(np.float32), ref)[0, 1] > 0.999


@pytest.mark.parametrize(
    "args, message",
    [
        (dict(N_CORES=8), "N_CORES = 8: this GEMV runs on all 32 cores"),
        (
            dict(M_PER_LAUNCH=2048),
            "M_PER_LAUNCH = 2048: a launch iteration covers 32 x M_TILE",
        ),
        (dict(M_TILE=8), "tile_n"),
    ],
)
def test_upstream_calls_this_gemv_cannot_take_are_refused_by_name(args, message):
    """mlir-air's consumers call with N_CORES = 8, M_TILE = 8 (its [8, 1] herd and tile): refused with the
    rule, before any buffer is sized, rather than packed into a layout the caller sizes otherwise.
    """
    sys.path.insert(0, os.path.join(REPO, "emulator"))
    from matvec_int4_packed import build_module, pack_inputs

    call = dict(M=2048, K=2048, GS=128, M_TILE=16, K_CHUNK=512) | args
    with pytest.raises(ConfigError, match=message):
        build_module(**call)
    _, a_q, a_s, a_z, _ = upstream_operands(2048, 2048, 128, 1)
    with pytest.raises(ConfigError, match=message):
        pack_inputs(a_q, a_s, a_z, **call)


@pytest.mark.parametrize("proj", PROJECTIONS)
def test_every_llama_projection_at_m1_fits_npu2_and_is_ddr_bound(proj):
    k, n = PROJECTIONS[proj]
    cfg = gemv.default_config(1, k, n, 128)
    assert cfg.resources().summary() == "resources: within limits" and cfg.pes == 32
    est = gemv.modelled(cfg, 1, n)
    assert est.bound == "DDR" and est.compute_s < est.ddr_s
    assert cfg.n == n  # no padding of N for the Llama shapes


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(m=33), "M = 33: the GEMV takes 1 to 32 rows"),
        (dict(n=500), "N = 500 is not a multiple of 512 (tile_n * 32 PEs)"),
        (
            dict(k=384, tile_k_l1=64, tile_k_l2=128),
            "K / tile_k_l2 = 3: aircc ping-pongs that loop and an odd trip count",
        ),
        (dict(n=65 * 512), "launch grid [1, 65]"),
        (dict(tile_n=24), "tile_n = 24: must be a multiple of 16"),
    ],
)
def test_bad_configurations_are_one_line(kwargs, message):
    args = dict(m=1, k=512, n=512, gs=128, tile_n=16, tile_k_l1=32) | kwargs
    with pytest.raises(ConfigError) as e:
        GemvConfig(**args)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_padded_rounds_n_up_to_whole_launch_iterations():
    cfg = GemvConfig.padded(1, 512, 300, 128, tile_n=16, tile_k_l1=32)
    assert cfg.n == 512 and cfg.launch_n == 1 and cfg.tile_k_l2 == 512
    cfg = GemvConfig.padded(1, 512, 513, 128, tile_n=16, tile_k_l1=32)
    assert cfg.n == 1024 and cfg.launch_n == 2


# ----------------------------------------------------------------------------------------------- host
def host(capsys, *argv):
    from host import run as host_run

    code = host_run.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_host_picks_the_gemv_for_few_rows_and_says_so(capsys):
    code, out, err = host(
        capsys,
        "--m",
        "2",
        "--k",
        "512",
        "--n",
        "512",
        "--tile-n",
        "16",
        "--tile-k-l1",
        "32",
        "--tile-k-l2",
        "256",
        "--backend",
        "emu",
        "--exact",
    )
    assert code == 0, out + err
    assert "GEMV M=2 K=512 N=512" in out and "tile_k_l2=256" in out
    assert "gemv: M = 2 <= 8: decode" in out
    assert "pes=32" in out and out.rstrip().endswith("PASS!")
    code, out, err = host(
        capsys,
        "--m",
        "2",
        "--k",
        "512",
        "--n",
        "512",
        "--backend",
        "emu",
        "--design",
        "gemv",
        "--herd-m",
        "2",
    )
    assert (
        code == 2
        and "--herd-m is a GEMM option" in err
        and len(err.strip().splitlines()) == 1
    )


def test_host_auto_choice():
    from host.run import choose_design, parse_args

    assert choose_design(parse_args(["--m", "1"]), 1) == ("gemv", "M = 1 <= 8: decode")
    assert choose_design(parse_args(["--m", "9"]), 9) == ("gemm", "M = 9 > 8")
    assert choose_design(parse_args(["--m", "4", "--herd-m", "2"]), 4) == (
        "gemm",
        "--herd-m given",
    )
    assert choose_design(parse_args(["--m", "4", "--design", "gemm"]), 4) == (
        "gemm",
        "--design gemm",
    )


def test_one_chunk_per_refill_is_refused_where_aircc_ping_pongs_it():
    """tile_k_l2 = tile_k_l1 < K: aircc doubles the A chunk and the record in a loop of the refills
    (aiecc found the L1 overflow, docs/emulator.md#one-chunk-per-refill); two chunks per refill, or one
    chunk in all of K, are built."""
    with pytest.raises(ConfigError, match="tile_k_l2 = tile_k_l1 = 256 with K = 2048"):
        GemvConfig(1, 2048, 2048, 32, tile_n=16, tile_k_l1=256, tile_k_l2=256)
    GemvConfig(1, 2048, 2048, 32, tile_n=16, tile_k_l1=256, tile_k_l2=512)
    GemvConfig(1, 256, 2048, 32, tile_n=16, tile_k_l1=256, tile_k_l2=256)


def test_the_command_line_prints_the_default_configuration(capsys):
    """python3 -m int4awq.design.gemv: the configuration and its modelled figures (docs/decode.md)."""
    assert gemv.main(["--m", "1", "--k", "2048", "--n", "2048"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("GEMV M=1 K=2048 N=2048 GS=128") and "MODELLED" in out


# ----------------------------------------------------------------------------------------------- margins
@pytest.mark.parametrize("fmt", record.FORMATS)
def test_every_decode_default_leaves_the_spare_l1(fmt):
    """record.DEFAULT_L1_SPARE: q_proj's decode default in every format leaves 2 KiB of L1 free for a
    stack that is estimated, not measured."""
    cfg = gemv.default_config(1, 2048, 2048, record.FORMAT_GS[fmt], fmt)
    assert cfg.l1_budget()["total"] <= 65536 - 2048


def test_a_decode_default_that_cannot_leave_the_spare_is_refused(monkeypatch):
    gemv.default_config.cache_clear()
    monkeypatch.setattr(record, "DEFAULT_L1_SPARE", 65536)
    try:
        with pytest.raises(ConfigError, match="leaves 65536 bytes of L1 free"):
            gemv.default_config(1, 2048, 2048, 128)
    finally:
        gemv.default_config.cache_clear()
