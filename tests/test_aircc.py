# SPDX-License-Identifier: MIT
"""The real compiler on every design (issue 29): mlir-air's air-opt and aircc, mlir-aie's aiecc.

* int4awq.compiler builds aircc's AIR pipeline: it equals the pipeline aircc itself prints it runs;
* every module the project prints parses and runs the pipeline; the emulator's L2 splits and ping-pong
  decisions equal what aircc's passes decide, design by design (host/aircc_check.py);
* the make targets' designs, the decode GEMV and the probes compile with aircc + aiecc to insts.bin;
* the sinking that decides ping-pong, both ways: a scratch only the compute herd takes is sunk into its
  chunk loop (one buffer, aircc and the emulator agree), anchored at herd scope it is not (doubled).

Needs the compiler (air-opt, aircc, aiecc: ../shared/tools/aircc beside the checkout, or AIRCC_BIN, or
PATH) and its runtime (Debian's mlir-22-tools, which .ci/run installs); skipped with the reason without.
"""

import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "emulator", "tests", "designs"))
import emu_testlib  # noqa: E402,F401  (the emulated `air` first on sys.path)

from host import aircc_check  # noqa: E402
from int4awq import compiled, compiler  # noqa: E402

MISSING = compiler.tools_missing()
needs_compiler = pytest.mark.skipif(MISSING is not None, reason=str(MISSING))

DESIGNS = aircc_check.designs() if MISSING is None else []


def _names(passes):
    return [compiler._pass_name(p) for p in passes]


@needs_compiler
def test_the_pipeline_is_the_one_aircc_runs(tmp_path):
    """aircc -v prints the pipeline it runs, every option spelled out: the same passes in the same order,
    and every option we give is one aircc gives (its line, not our reading of aircc.cpp, decides)."""
    d = next(d for d in DESIGNS if d.name == "make run1x1")
    (tmp_path / "air.mlir").write_text(d.text())
    env = dict(
        os.environ,
        PATH=os.path.dirname(compiler.find_tool("aiecc"))
        + os.pathsep
        + os.environ["PATH"],
    )
    r = subprocess.run(
        [
            compiler.find_tool("aircc"),
            "-v",
            "--device",
            "npu2",
            "--tmpdir",
            "t",
            "--output-format=none",
            "--emit-txn-cpp",
            "air.mlir",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
    )
    runs = re.findall(r"Running pipeline: builtin\.module\((.*)\)$", r.stdout, re.M)
    assert len(runs) >= 2, r.stdout[-2000:] + r.stderr[-2000:]

    def split(text):  # top-level passes: commas outside braces and parentheses
        out, depth, cur = [], 0, ""
        for ch in text:
            depth += ch in "{(" and 1 or (ch in "})" and -1 or 0)
            if ch == "," and depth == 0:
                out.append(cur)
                cur = ""
            else:
                cur += ch
        return out + [cur]

    theirs = split(runs[0]) + split(runs[1])
    ours = compiler.air_pipeline("npu2")
    assert _names(theirs) == _names(ours)
    for mine, real in zip(ours, theirs):
        for opt in re.findall(r"[\w-]+=[\w-]+", mine):
            assert opt in real, (mine, real)


def test_the_device_column_count_is_aircc_s():
    """aircc.cpp ~1001-1011 matches names, not counts: npu2_3col gets npu2's 8 columns."""
    assert compiler.device_columns("npu2") == 8
    assert compiler.device_columns("npu2_4col") == 4
    assert compiler.device_columns("npu2_3col") == 8
    assert compiler.device_columns("npu1_2col") == 4
    split = [p for p in compiler.air_pipeline("npu2_4col") if "split-l2" in p]
    assert split == [
        "func.func(air-split-l2-memref{max-launch-channels-mm2s=8 max-launch-channels-s2mm=8})"
    ]
    # aircc skips the split for names containing "npu_1col" (~944), which npu1_1col does not: split there
    assert [p for p in compiler.air_pipeline("npu1_1col") if "split-l2" in p]
    assert not [p for p in compiler.air_pipeline("npu_1col") if "split-l2" in p]


def test_backend_options_become_aircc_s_flags():
    flags = compiler.aircc_flags(
        dict(
            target_device="npu2",
            runtime_loop_tiling_sizes=[2, 2],
            omit_pingpong=True,
            stack_size=4096,
            num_device_cols=4,
        )
    )
    assert flags == [
        "--device",
        "npu2_4col",
        "--air-runtime-loop-tiling-sizes=2",
        "--air-runtime-loop-tiling-sizes=2",
        "--omit-ping-pong-transform=all",
        "--stack-size",
        "4096",
    ]
    # XRTBackend passes no --stack-size at its default of 1024 (xrt.py ~546)
    assert compiler.aircc_flags(dict(stack_size=1024)) == ["--device", "npu2"]


@needs_compiler
@pytest.mark.parametrize("design", DESIGNS, ids=[d.name for d in DESIGNS])
def test_aircc_s_passes_and_the_emulator_decide_alike(design):
    r = aircc_check.check(design, None, compile_it=False)
    assert r.error is None, r.error
    assert r.disagree == [], r.disagree
    # every design ping-pongs its chunk loop in L1 (the A chunk and the record) unless it has none
    if "probe" not in design.name:
        assert sum(n for (space, _), n in r.decisions.doubled.items() if space == 2) == 2
        assert r.decisions.split_warnings == 0


@needs_compiler
@pytest.mark.parametrize(
    "design",
    [d for d in DESIGNS if "probe_zero" not in d.name],
    ids=[d.name for d in DESIGNS if "probe_zero" not in d.name],
)
def test_every_design_compiles_to_npu_instructions(design, tmp_path):
    r = compiler.compile_module(design.text(), design.options, str(tmp_path))
    assert r.insts and all(n > 0 for n in r.insts.values())
    assert "aie.runtime_sequence" in r.text("npu.air.mlir")


@needs_compiler
def test_a_module_the_compiler_refuses_names_its_error(tmp_path):
    d = next(d for d in DESIGNS if d.name == "make run1x1")
    broken = d.text().replace("func.call @gemm_int4_drain", "func.call @no_such_entry")
    with pytest.raises(compiler.CompileError, match="aircc: .*no_such_entry"):
        compiler.compile_module(broken, d.options, str(tmp_path))


# -- the sinking that decides ping-pong, on a small design ---------------------------------------------


def _scratch_design(anchored):
    """A segment-level L1 scratch passed to a compute herd whose chunk loop DMAs a buffer in and calls a
    kernel with both; `anchored`: the zero phase (a same-named herd) writes the scratch first."""
    from air.dialects import arith
    from air.dialects.air import MemorySpace, T, dma_memcpy_nd, herd, launch
    from air.dialects.air import module_builder, segment
    from air.dialects.func import CallOp, FuncOp
    from air.dialects.memref import AllocOp, store
    from air.dialects.scf import for_, yield_
    from air.ir import IntegerAttr, IntegerType, MemRefType

    @module_builder
    def build():
        i8 = IntegerType.get_signless(8)
        l1 = IntegerAttr.get(T.i32(), MemorySpace.L1)
        src = MemRefType.get([4, 256], i8)
        buf_t = MemRefType.get([256], i8, memory_space=l1)
        scratch_t = MemRefType.get([1024], i8, memory_space=l1)
        k = FuncOp("kern", ([buf_t, scratch_t], []), visibility="private")
        k.attributes["link_with"] = aircc_check_string("k.o")

        @FuncOp.from_py_func(src)
        def f(a):
            @launch(operands=[a])
            def lb(la):
                @segment(name="seg", operands=[la])
                def sb(sa):
                    scratch = AllocOp(scratch_t, [], [])
                    if anchored:

                        @herd(name="h", sizes=[1, 1], operands=[scratch])
                        def hz(_x, _y, _sx, _sy, s):
                            z = arith.ConstantOp.create_index(0)
                            store(arith.ConstantOp(i8, 0), s, [z])

                    @herd(name="h", sizes=[1, 1], operands=[sa, scratch])
                    def hc(_x, _y, _sx, _sy, ha, s):
                        buf = AllocOp(buf_t, [], [])
                        for c in for_(0, 4):
                            dma_memcpy_nd(
                                buf,
                                ha,
                                src_offsets=[c, 0],
                                src_sizes=[1, 256],
                                src_strides=[256, 1],
                            )
                            CallOp(k, [buf, s])
                            yield_([])

    return build()


def aircc_check_string(s):
    from air.ir import StringAttr

    return StringAttr.get(s)


@needs_compiler
@pytest.mark.parametrize("anchored", [False, True])
def test_a_scratch_sunk_into_the_loop_stops_ping_pong(anchored):
    module = _scratch_design(anchored)
    dec = compiled.air_decisions(str(module))
    l2, doubled = aircc_check.emulator_decisions(module, dict(target_device="npu2"))
    assert aircc_check.disagreements(dec, l2, doubled) == []
    want = {(2, "memref<256xi8, 2 : i32>"): 1} if anchored else {}
    assert dict(dec.doubled) == want
    # not anchored: aircc sinks the scratch into the chunk loop, beside the buffer
    assert ("memref<1024xi8, 2 : i32>" in dec.sunk_l1) == (not anchored)


def test_the_emulator_says_why_the_loop_is_single():
    from air.emu.engine import Options, Program

    program = Program(
        _scratch_design(False), Options(link=False), check=False
    )
    [herd] = program.budget.herds
    notes = " ".join(e.note for e in herd.entries)
    assert "sunk into this herd by air-fuse-alloc-dealloc" in notes
    assert "first access to the herd operand sunk here" in notes
    assert all(e.factor == 1 for e in herd.entries)
