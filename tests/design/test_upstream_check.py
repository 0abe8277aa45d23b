# SPDX-License-Identifier: MIT
"""The harness of `make upstream-check` (host/upstream_check.py), on stand-in examples of our own:
it reports a pass, a failure, a documented failure rejected and one not rejected, and refuses bad input.
"""

import os
import sys

import pytest

from host import upstream_check as uc  # noqa: E402


@pytest.fixture(autouse=True)
def no_provenance(monkeypatch):
    """The harness tests run stand-in examples: the provenance check has its own test below."""
    monkeypatch.setattr(uc, "PROVENANCE", None)


@pytest.fixture
def checkout(tmp_path):
    ex = tmp_path / "programming_examples" / "demo"
    ex.mkdir(parents=True)
    (ex / "k.cc").write_text('extern "C" int answer() { return 42; }\n')
    (ex / "ok.py").write_text(
        "import ctypes, os\n"
        "assert ctypes.CDLL(os.path.abspath('k.so')).answer() == 42\nprint('PASS!')\n"
    )
    (ex / "bad.py").write_text("print('failed.')\n")
    (ex / "refuse.py").write_text(
        "import sys\nprint('error: Stride 99 exceeds the [1:8] range', file=sys.stderr)\n"
        "sys.exit(2)\n"
    )
    return tmp_path


def case(script, refused=None):
    k = uc.Kernel("programming_examples/demo/k.cc", "air", "k")
    return uc.Case(
        script,
        f"programming_examples/demo/{script}.py",
        (),
        (k,),
        refused=refused,
        note="demo",
    )


def test_the_harness_counts_passes_and_documented_failures(
    checkout, monkeypatch, capsys
):
    monkeypatch.setattr(
        uc,
        "CASES",
        (
            case("ok"),
            case("bad"),
            case("refuse", r"Stride \d+ exceeds"),
            case("ok", r"Stride \d+ exceeds"),
        ),
    )
    assert uc.main(["--air-src", str(checkout)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[0] for ln in lines[:2]] == ["PASS", "FAIL"]
    assert lines[2].startswith("REJECTED") and "Stride 99 exceeds" in lines[2]
    assert lines[3].startswith("NOT REJECTED")
    assert lines[-1] == "upstream examples: 1/2 PASS, 1/2 documented failures rejected"


def test_an_aie_kernel_without_aie_src_is_skipped(checkout, monkeypatch, capsys):
    k = uc.Kernel("aie_kernels/aie2p/x.cc", "aie", "x")
    monkeypatch.setattr(
        uc,
        "CASES",
        (
            uc.Case("needs aie", "programming_examples/demo/ok.py", (), (k,)),
            # a documented failure that needs mlir-aie is skipped too, not counted as not rejected
            uc.Case(
                "documented, needs aie",
                "programming_examples/demo/refuse.py",
                (),
                (k,),
                refused=r"Stride \d+ exceeds",
            ),
        ),
    )
    assert uc.main(["--air-src", str(checkout)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("SKIP") and "give AIE_SRC" in out
    assert out.splitlines()[1].startswith("SKIP")
    assert (
        out.splitlines()[-1]
        == "upstream examples: 0/0 PASS, 0/0 documented failures rejected"
    )


def test_a_directory_that_is_not_a_checkout_is_one_line_and_exit_2(tmp_path, capsys):
    assert uc.main(["--air-src", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no programming_examples/" in err


def test_the_provenance_table_is_checked_against_the_checkout(tmp_path, capsys):
    doc = tmp_path / "design.md"
    doc.write_text(
        "# x\n## Provenance\n| a | `matrix_multiplication/demo/ex.py` | "
        "`matrix_multiplication/demo/run_npu2.lit` |\n| b | `matrix_multiplication/demo/gone.py` | "
        "`matrix_multiplication/demo/run_cpu.lit` |\n## Next\n`matrix_multiplication/demo/later.py`\n"
    )
    demo = tmp_path / "src" / "programming_examples" / "matrix_multiplication" / "demo"
    demo.mkdir(parents=True)
    (demo / "ex.py").write_text("")
    (demo / "run_npu2.lit").write_text("// REQUIRES: ryzen_ai_npu2, peano\n")
    (demo / "run_cpu.lit").write_text("// REQUIRES: peano\n")
    line, ok = uc.check_provenance(str(doc), str(tmp_path / "src"))
    assert not ok and line.splitlines() == [
        f"provenance: 3/4 files named in {doc} exist in the checkout, 1/2 lit tests require "
        "ryzen_ai_npu2",
        "  missing: programming_examples/matrix_multiplication/demo/gone.py",
        "  no REQUIRES: ryzen_ai_npu2: programming_examples/matrix_multiplication/demo/run_cpu.lit",
    ]
    (demo / "gone.py").write_text("")
    (demo / "run_cpu.lit").write_text("// REQUIRES: ryzen_ai_npu2\n")
    assert uc.check_provenance(str(doc), str(tmp_path / "src")) == (
        f"provenance: 4/4 files named in {doc} exist in the checkout, 2/2 lit tests require "
        "ryzen_ai_npu2",
        True,
    )


def _compiled_by_the_emulator(where, monkeypatch):
    """A small design compiled by the emulator's XRTBackend with AIR_EMU_AIRCC_DIR set: it leaves the module
    and its decisions there, as it does for each upstream case."""
    sys.path.insert(0, os.path.join(uc.EMULATOR_DIR, "tests", "designs"))
    import emu_testlib  # noqa: F401  (the emulated air first)
    import passthrough
    from air.backend.xrt import XRTBackend

    monkeypatch.setenv("AIR_EMU_AIRCC_DIR", str(where))
    XRTBackend(target_device="npu2").compile(passthrough.build_module())
    assert sorted(os.listdir(where)) == ["air.mlir", "emu-decisions.json"]


def test_each_case_is_compared_with_aircc_s_passes(tmp_path, monkeypatch):
    sys.path.insert(0, uc.REPO)
    from int4awq.design import compiler

    _compiled_by_the_emulator(tmp_path, monkeypatch)
    if compiler.tools_missing("air-opt"):
        assert uc.aircc_agreement(str(tmp_path)).startswith("not compared with aircc (")
        return
    assert uc.aircc_agreement(str(tmp_path)) == "aircc agrees"
    # the emulator's record says a loop aircc ping-pongs is single: named, and the case fails
    import json

    path = tmp_path / "emu-decisions.json"
    mine = json.loads(path.read_text())
    mine["doubled"] = {}
    path.write_text(json.dumps(mine))
    verdict = uc.aircc_agreement(str(tmp_path))
    assert verdict.startswith(
        "aircc DISAGREES: ping-pong: aircc {'L1 memref<2048xi32, 2 : i32>': 1}"
    )


def test_a_consumer_takes_our_builder_where_it_looks_for_upstreams(tmp_path):
    """host/upstream_consumers.py imports this checkout's matmul_int4_packed before a consumer does, so a
    consumer that puts upstream's int4_awq directory first on sys.path still gets ours. The checkout
    here is a stand-in written for the test: its matmul_int4_packed.py fails if imported, and its
    gemm_builder passes its arguments to `matmul_int4_packed.build_module` as mlir-air's does.
    """
    import subprocess

    ex = tmp_path / "programming_examples"
    int4 = ex / "matrix_multiplication" / "int4_awq"
    pkg = ex / "llms" / "llama32_1b_int4"
    int4.mkdir(parents=True)
    pkg.mkdir(parents=True)
    (int4 / "matmul_int4_packed.py").write_text(
        "raise ImportError('upstream builder imported')\n"
    )
    (pkg / "__init__.py").write_text("")
    (pkg / "gemm_builder.py").write_text(
        "import os, sys\n"
        "sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', '..', "
        "'matrix_multiplication', 'int4_awq'))\n"
        "def _build_int4_gemm_module(*args):\n"
        "    from matmul_int4_packed import build_module\n"
        "    return build_module(*args)\n"
    )
    script = os.path.join(uc.REPO, "host", "upstream_consumers.py")
    res = subprocess.run(
        [
            sys.executable,
            script,
            "--air-src",
            str(tmp_path),
            "--consumer",
            "gemm_builder",
            "--shape",
            "small",
        ],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.strip().splitlines()[-1] == "PASS!"
    res = subprocess.run(
        [
            sys.executable,
            script,
            "--air-src",
            str(tmp_path / "nowhere"),
            "--consumer",
            "awq_pack",
        ],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1


def test_each_user_of_upstreams_gemv_runs_on_ours_a_line_each(tmp_path, capsys):
    """upstream_consumers' gemv_api runs each user of upstream's GEMV unchanged as a script, this
    checkout's matvec_int4_packed in place of upstream's: PASS when its check passes, refused with this
    GEMV's rule when its call breaks one, not in this checkout when absent. The checkout is a stand-in:
    small scripts at the users' paths that call the API as upstream's users do."""
    sys.path[:0] = [os.path.join(uc.REPO, d) for d in ("emulator", "host")]
    import upstream_consumers as cons

    passing, refused, unmodelled, *absent = list(cons.GEMV_CONSUMERS)
    scripts = {
        # awq_repacker's self-test: cpu_reference against a dense dequantisation
        passing: """
import numpy as np
from ml_dtypes import bfloat16
from matvec_int4_packed import cpu_reference
q = np.full((16, 32), 0x21, np.uint8)              # codes 1 (even k) and 2 (odd k)
s = np.full((1, 16), 0.5, bfloat16); z = np.zeros((1, 16), np.uint8)
d = cpu_reference(q, s, z, np.ones(64, bfloat16))  # 32 x (1 + 2) x 0.5
print("PASS!" if (d.astype(np.float32) == 48).all() else "FAIL")
""",
        # matvec_int4_packed_add's packing: mlir-air's own [8, 1] herd and tile
        refused: """
import numpy as np
from ml_dtypes import bfloat16
from matvec_int4_packed import pack_inputs
q = np.zeros((2048, 1024), np.uint8)
s = np.ones((16, 2048), bfloat16); z = np.zeros((16, 2048), np.uint8)
pack_inputs(q, s, z, 2048, 2048, 128, 8, 2048, 8, 2048)
print("PASS!")
""",
        # o_gemv_ffn_int4_multi's stitching: MLIR text parsed back, which the emulator does not model
        unmodelled: """
from air.ir import Context, Module
with Context() as ctx:
    Module.parse("module {\\n  func.func @f() {\\n    return\\n  }\\n}", ctx)
print("PASS!")
""",
    }
    for path, text in scripts.items():
        f = tmp_path / "programming_examples" / path
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    failed = cons.consumer_gemv_api(str(tmp_path), None, "llama")
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == f"{passing} ({os.path.basename(passing)}): PASS"
    assert printed[1].startswith(
        f"{refused} ({os.path.basename(refused)}): refused: N_CORES = 8"
    )
    assert printed[2].startswith(
        f"{unmodelled} ({os.path.basename(unmodelled)}): not modelled by the emulator: "
        f"Module.parse: not modelled: the emulator has no MLIR parser; this text uses 1 operation "
        f"names from the dialects (func)"
    )
    assert failed[:2] == printed[1:3]
    assert failed[2:] == [f"{a}: not in this checkout" for a in absent]
