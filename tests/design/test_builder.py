# SPDX-License-Identifier: MIT
"""matmul_int4_packed.py as mlir-air's examples are used: build_module with plain integers, and the
upstream CLI conventions (-p / --print-module-only, --compile-mode, -v), here on the emulator.
"""

import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "emulator"))

import matmul_int4_packed as builder  # noqa: E402
from int4awq.design.design import DesignConfig  # noqa: E402

SMALL = [
    "--m",
    "64",
    "--k",
    "256",
    "--n",
    "64",
    "--tile-m",
    "32",
    "--tile-n",
    "32",
    "--tile-k-l1",
    "64",
    "--tile-k-l2",
    "256",
    "--herd-m",
    "2",
    "--herd-n",
    "2",
]


def test_build_module_takes_upstreams_integers():
    # mlir-air's order: m, k, n, gs, tile_m, tile_k_l2, tile_k_l1, tile_n, herd_m, herd_n
    by_ints = str(builder.build_module(64, 256, 64, 128, 32, 256, 64, 32, 2, 2))
    cfg = DesignConfig(
        m=64,
        k=256,
        n=64,
        gs=128,
        tile_m=32,
        tile_n=32,
        tile_k_l1=64,
        tile_k_l2=256,
        herd_m=2,
        herd_n=2,
    )
    assert by_ints == str(builder.build_module(**cfg.builder_args()))
    assert "memref<64x256xbf16>" in by_ints and "air.herd @herd_0" in by_ints


def test_print_module_only(capsys):
    assert builder.main(SMALL + ["-p"]) == 0
    assert capsys.readouterr().out.startswith("module {")


def test_compile_and_run_is_the_default_and_checks_the_result(capsys):
    assert builder.main(SMALL) == 0
    out = capsys.readouterr().out
    assert "correlation" in out and out.rstrip().endswith("PASS!")


def test_a_bad_configuration_is_one_line_and_exit_2(capsys):
    assert builder.main(SMALL[:-2] + ["--herd-n", "5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not fit the NPU2 array" in err


def test_each_builder_run_as_a_script_prints_its_module_without_mlir_air():
    """Where mlir-air is not installed, the script builds with the emulator's air package beside it and
    says so in one line (the module is the one air-opt reads: tests/design/test_aircc.py).
    """
    import subprocess

    import pytest

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = [
        sys.executable,
        "-c",
        "import importlib.util; print(importlib.util.find_spec('air'))",
    ]
    if (
        subprocess.run(probe, capture_output=True, text=True, env=env).stdout.strip()
        != "None"
    ):
        pytest.skip("mlir-air is installed: the scripts build with it")
    for script, shape in (
        ("matmul_int4_packed.py", ["--m", "512", "--k", "1024", "--n", "256"]),
        ("matvec_int4_packed.py", ["--m", "2048", "--k", "2048"]),
    ):
        res = subprocess.run(
            [sys.executable, os.path.join(REPO, script), *shape, "-p"],
            capture_output=True,
            text=True,
            cwd=REPO,
            env=env,
        )
        assert res.returncode == 0, res.stderr
        assert res.stdout.startswith("module {") and "air.herd" in res.stdout
        assert res.stderr.splitlines() == [
            "note: mlir-air is not installed: building with the emulator's air package (emulator/air)"
        ]
        # an interpreter without the project's dependencies is told how to get them, in one line
        argv = [os.path.join(REPO, script), *shape, "-p"]
        bare = (
            "import runpy, sys; sys.modules['ml_dtypes'] = None; "
            f"sys.argv = {argv!r}; runpy.run_path(sys.argv[0], run_name='__main__')"
        )
        res = subprocess.run(
            [sys.executable, "-c", bare],
            capture_output=True,
            text=True,
            cwd=REPO,
            env=env,
        )
        assert res.returncode == 2 and res.stdout == "", res.stderr
        assert res.stderr.splitlines()[1:] == [
            "error: import of ml_dtypes halted; None in sys.modules: the emulator's air package needs the "
            "project's Python dependencies: run `make deps` and the script with .venv/bin/python (README, "
            "'Prerequisites')"
        ]


# ------------------------------------------------------------------------ mlir-air's int4 GEMM host API
def upstream_operands(seed, m, k, n, gs):
    """mlir-air's int4 GEMM operands as its main() makes them: W_q [N, K/2] (the even k in the low nibble),
    W_s [K/GS, N] bf16, W_z [K/GS, N] u8, A [M, K] bf16; and the codes [N, K] they pack.
    """
    import numpy as np
    from ml_dtypes import bfloat16

    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 16, (n, k), np.uint8)
    w_q = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    w_s = rng.uniform(0.005, 0.02, (k // gs, n)).astype(bfloat16)
    w_z = rng.integers(7, 9, (k // gs, n)).astype(np.uint8)
    a = rng.standard_normal((m, k)).astype(bfloat16)
    return w_q, w_s, w_z, a, codes


def test_packed_tile_bytes_are_the_sections_of_one_record():
    # tile_n 16, K-chunk 128, GS 128: half of one W pair line of pad64(144 * 128 / 8) = 2304 image bytes in
    # nibbles, 16 bf16 scales, 16 zero points, each section starting on 64 bytes
    assert builder.packed_tile_bytes(16, 128, 128) == (1152, 32, 16, 1152 + 64 + 64)


def test_pack_inputs_holds_every_code_scale_and_zero_point():
    from int4awq.kernel.record import unpack_weights

    k, n, gs = 256, 32, 64
    w_q, w_s, w_z, _, codes = upstream_operands(1, 16, k, n, gs)
    packed = builder.pack_inputs(w_q, w_s, w_z, 16, k, n, gs, 16, 128)
    assert packed.shape == (
        n // 16,
        k // 128,
        builder.packed_tile_bytes(16, 128, gs)[3],
    )
    back = unpack_weights(
        packed, k, n, gs, 16, 128
    )  # the record's own unpacker, an exact inverse
    assert (back.q == codes.T).all() and (back.z == w_z).all()
    assert (back.s.view("u2") == w_s.view("u2")).all()


def test_cpu_reference_is_the_f32_product_rounded_once_to_bf16():
    import numpy as np

    k, n, gs = 32, 16, 16
    w_q, w_s, w_z, a, codes = upstream_operands(2, 3, k, n, gs)
    want = np.zeros((3, n), np.float64)
    for i in range(3):
        for j in range(n):
            for kk in range(k):
                g = kk // gs
                w = (int(codes[j, kk]) - int(w_z[g, j])) * float(w_s[g, j])
                want[i, j] += float(a[i, kk]) * w
    got = builder.cpu_reference(w_q, w_s, w_z, a).astype(np.float64)
    # one rounding to bf16 of an f32 sum: within half a bf16 step (2^-8 relative) of the exact sum
    assert np.allclose(got, want, rtol=2**-8, atol=1e-6)


def test_pack_inputs_names_the_operand_that_is_wrong():
    import numpy as np
    import pytest

    w_q, w_s, w_z, _, _ = upstream_operands(3, 16, 128, 16, 128)
    with pytest.raises(
        builder.ConfigError, match=r"^W_s: expected bfloat16 \[1, 16\], got float32"
    ):
        builder.pack_inputs(w_q, w_s.astype(np.float32), w_z, 16, 128, 16, 128, 16, 128)
    w_z[0, 0] = 16
    with pytest.raises(builder.ConfigError, match="zero points are 4-bit"):
        builder.pack_inputs(w_q, w_s, w_z, 16, 128, 16, 128, 16, 128)


def test_m_per_segment_walks_m_blocks_inside_the_segment():
    import pytest

    from int4_packed_record import GemmConfig

    args = (256, 256, 128, 128, 16, 256, 128, 16, 8, 4)
    one, two = (builder.build_module(*args, mps) for mps in (1, 2))
    assert str(one).count("scf.for") + 1 == str(two).count("scf.for")
    cfg = GemmConfig(*args[:4], 16, 16, 128, 256, 8, 4, m_per_segment=2)
    assert cfg.launch_grid == (1, 2)
    with pytest.raises(
        builder.ConfigError, match="2 M blocks is not a multiple of m_per_segment = 4"
    ):
        builder.build_module(*args, 4)


def _upstreams_call_on_the_emulator(m, k, n, gs, herd_m, m_per_segment=1):
    """The invoker of build_module at the tiles mlir-air's consumers call it with (16 x 16, K-chunks of
    128, tile_k_l2 = K, herd_m x 4), on the emulator."""
    from host.run import emulator_backend

    cfg = DesignConfig(
        m=m,
        k=k,
        n=n,
        gs=gs,
        tile_m=16,
        tile_n=16,
        tile_k_l1=128,
        tile_k_l2=k,
        herd_m=herd_m,
        herd_n=4,
        m_per_segment=m_per_segment,
    )
    module = builder.build_module(
        m, k, n, gs, 16, k, 128, 16, herd_m, 4, m_per_segment=m_per_segment
    )
    return emulator_backend(cfg).compile_and_load(module)


def test_upstreams_operands_run_through_the_module_on_the_emulator():
    import numpy as np
    from ml_dtypes import bfloat16

    m, k, n, gs = 128, 256, 128, 128
    w_q, w_s, w_z, a, _ = upstream_operands(4, m, k, n, gs)
    packed = builder.pack_inputs(w_q, w_s, w_z, m, k, n, gs, 16, 128)
    invoke = _upstreams_call_on_the_emulator(m, k, n, gs, herd_m=2, m_per_segment=2)
    c = np.asarray(invoke(a, packed, np.zeros((m, n), bfloat16))[2]).reshape(m, n)
    ref = builder.cpu_reference(w_q, w_s, w_z, a).astype(np.float32)
    # the kernel rounds A to bfp16 blocks (8-bit mantissas): within 1 % of the largest output
    assert np.abs(c.astype(np.float32) - ref).max() <= 0.01 * np.abs(ref).max()


def test_upstreams_down_proj_call_is_built_with_a_refill_the_a_read_can_chain(capsys):
    """llama32_1b_int4's o_ffn_int4_multi.py asks its down_proj of tile_k_l2 = K = 8192 at K-chunks of
    128: 64 memtile BDs on each A read stream, which aircc refuses for this design ("'aie.memtile_dma' op
    has more than 48 blocks"). build_module builds it with tile_k_l2 = 1024 (8 chunks, ping-ponged: 16),
    says so in one line, and computes upstream's product (here at M = 32, N = 64)."""
    import numpy as np
    from ml_dtypes import bfloat16

    from host.run import emulator_backend

    m, k, n, gs = 32, 8192, 64, 128
    module = builder.build_module(m, k, n, gs, 16, k, 128, 16, 2, 4)
    line = capsys.readouterr().err.strip()
    assert line == (
        "matmul_int4_packed: tile_k_l2 = 8192 would chain 64 memtile BDs on each A read stream "
        "(at most 16): built with tile_k_l2 = 1024, K refilled 8 times, the same result"
    )
    with pytest.raises(
        builder.ConfigError, match="64 memtile BDs on each A read stream"
    ):
        DesignConfig(m, k, n, gs, 16, 16, 128, k, 2, 4)  # the rule itself stands
    cfg = DesignConfig(m, k, n, gs, 16, 16, 128, 1024, 2, 4)
    assert str(module) == str(builder.build_module(**cfg.builder_args()))
    w_q, w_s, w_z, a, _ = upstream_operands(5, m, k, n, gs)
    packed = builder.pack_inputs(w_q, w_s, w_z, m, k, n, gs, 16, 128)
    invoke = emulator_backend(cfg).compile_and_load(module)
    c = np.asarray(invoke(a, packed, np.zeros((m, n), bfloat16))[2]).reshape(m, n)
    ref = builder.cpu_reference(w_q, w_s, w_z, a).astype(np.float32)
    assert np.abs(c.astype(np.float32) - ref).max() <= 0.01 * np.abs(ref).max()


def test_a_weight_buffer_sized_by_upstreams_record_is_refused_by_its_size():
    # mlir-air's record at (16, 128, 128) is 1072 bytes, ours 1280: a consumer that sizes the weight
    # buffer by hand gets an error naming the sizes, never a run on misread records
    import numpy as np
    from ml_dtypes import bfloat16

    from air.emu import ExecutionError

    m, k, n, gs = 128, 128, 64, 128
    assert builder.packed_tile_bytes(16, 128, 128)[3] == 1280
    invoke = _upstreams_call_on_the_emulator(m, k, n, gs, herd_m=8)
    by_hand = np.zeros((n // 16, k // 128, 1072), np.uint8)
    a = np.zeros((m, k), bfloat16)
    with pytest.raises(ExecutionError, match=r"has 4288 bytes.*needs 5120"):
        invoke(a, by_hand, np.zeros((m, n), bfloat16))


def test_importing_the_builders_loads_nothing_of_the_tools():
    import subprocess

    code = (
        "import sys; sys.path[:0] = ['emulator', '.']; import matmul_int4_packed, matvec_int4_packed; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'int4awq', 'host'}))"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


def test_compile_only_on_the_emulators_air_is_one_line_and_exit_2(capsys):
    """compile-only needs mlir-air's aircc; with the emulator's air package the builder says so."""
    assert builder.main(SMALL + ["--compile-mode", "compile-only"]) == 2
    err = capsys.readouterr().err
    assert (
        err
        == "error: compile-only needs mlir-air's aircc (this is the emulator's air package)\n"
    )


def test_an_abbreviated_option_is_not_taken_for_another():
    """matvec_int4_packed.py's --m is W's rows (mlir-air's); an old `--n 2048` is refused by argparse, not
    read as --n-cores."""
    import subprocess

    res = subprocess.run(
        [
            sys.executable,
            os.path.join(REPO, "matvec_int4_packed.py"),
            "--m",
            "1",
            "--k",
            "2048",
            "--n",
            "2048",
            "-p",
        ],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert (
        res.returncode == 2 and "unrecognized arguments: --n 2048" in res.stderr
    ), res.stderr


# ------------------------------------------------------------------ A resident across N blocks
# q_proj's tiles at a small shape: 2 N blocks of 512 columns, 8 slices of K (tile_k_l2 256)
RESIDENT = dict(
    m=512, k=2048, n=1024, gs=128, tile_m=64, tile_n=128, tile_k_l1=32, tile_k_l2=256
)


def resident(**over):
    return DesignConfig(**{**RESIDENT, "herd_m": 8, "herd_n": 4, **over})


def test_n_per_segment_1_is_the_default_module():
    """The default emits none of the resident A's constructs: the module is the one before the option
    existed (checked byte for byte against main's builder when it landed)."""
    cfg = resident()
    default = str(builder.build_module(**cfg.builder_args()))
    args = cfg.builder_args()
    del args["n_per_segment"]
    assert str(builder.build_module(**args)) == default
    for construct in ("a_fill", "a_send", "air.memtile_col", "air.channel"):
        assert construct not in default
    two = str(builder.build_module(**resident(n_per_segment=2).builder_args()))
    # per herd row and slice a pinned buffer, filled on a_fill and re-sent on a_send
    assert two.count("air.memtile_col") == 8 * 8
    assert "@a_send" in two and "@a_fill" in two


def test_n_per_segment_rules():
    with pytest.raises(
        builder.ConfigError,
        match="^N / \\(tile_n \\* herd_n\\) = 2 N blocks is not a multiple of n_per_segment = 4",
    ):
        resident(n_per_segment=4)
    with pytest.raises(builder.ConfigError, match="^m_per_segment and n_per_segment"):
        resident(n_per_segment=2, m=1024, m_per_segment=2)
    # the count is a 6-bit lock value: 63 re-sends, not 64 (64-column N blocks, launch [1, 1])
    small = dict(
        m=128, k=256, gs=128, tile_m=16, tile_n=16, tile_k_l1=128, tile_k_l2=256
    )
    assert DesignConfig(**small, n=63 * 64, herd_m=8, herd_n=4, n_per_segment=63)
    with pytest.raises(
        builder.ConfigError,
        match="^n_per_segment = 64: .* an NPU2 lock holds at most 63$",
    ):
        DesignConfig(**small, n=64 * 64, herd_m=8, herd_n=4, n_per_segment=64)
    # down_proj at the default tiles: 64 rows over K = 8192 are 1 MiB, twice a memtile
    with pytest.raises(
        builder.ConfigError,
        match="^A resident over K = 8192 needs 1157120 bytes of a herd row's memtile .* 524288",
    ):
        resident(k=8192, n=2048, n_per_segment=4)
    # 20 slices at tile_m 32: a fill and a re-send BD each, 25 on a memtile's 24 even-channel BDs
    # (the resource model's rule, as for every buffer; 16 slices compiled and agreed with it)
    assert (
        resident(k=5120, n=2048, tile_m=32, n_per_segment=4).resource_problem()
        == "resources: memtile 0: BDs even channels 25 > 24"
    )


def test_n_per_segment_moves_a_once_per_m_block():
    """q_proj 2048^3 at nps 4: A crosses DDR once per M block, 27.79 MB instead of 52.95 MB."""
    q = dict(m=2048, k=2048, n=2048, herd_m=8, herd_n=4)
    one, four = resident(**q), resident(**q, n_per_segment=4)
    assert four.launch_grid == (4, 1) and one.launch_grid == (4, 4)
    a = 2048 * 2048 * 2
    assert one.ddr_bytes() - four.ddr_bytes() == 3 * a
    assert (round(one.ddr_bytes() / 1e6, 2), round(four.ddr_bytes() / 1e6, 2)) == (
        52.95,
        27.79,
    )
    # the memtile a herd row's A is pinned to, as the emulator's resource model places it
    assert four.resident_column_bytes() == 362 * 1024
