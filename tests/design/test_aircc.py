# SPDX-License-Identifier: MIT
"""The real compiler on every design (issue 29): mlir-air's air-opt and aircc, mlir-aie's aiecc.

* int4awq.design.compiler builds aircc's AIR pipeline: it equals the pipeline aircc itself prints it runs;
* every module the project prints parses and runs the pipeline; the emulator's L2 splits and ping-pong
  decisions equal what aircc's passes decide, design by design (host/aircc_check.py);
* the make targets' designs, the decode GEMV and the probes compile with aircc + aiecc to insts.bin;
* the sinking that decides ping-pong, both ways: a scratch only the compute herd takes is sunk into its
  chunk loop (one buffer, aircc and the emulator agree), anchored at herd scope it is not (doubled).

Needs the compiler (air-opt, aircc, aiecc: ../shared/tools/aircc beside the checkout, or AIRCC_BIN, or
PATH) and its runtime (Debian's mlir-22-tools, which .ci/run installs); skipped with the reason without,
failed in CI (tests/compiler_tools.py). The session's summary counts the designs compiled.
"""

import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "emulator", "tests", "designs"))
import emu_testlib  # noqa: E402,F401  (the emulated `air` first on sys.path)

from host import aircc_check  # noqa: E402
from int4awq.design import compiled, compiler, runtime_sequence  # noqa: E402

import compiler_tools  # noqa: E402

MISSING = compiler_tools.MISSING
# skipped without the compiler, naming what is missing; failed in CI (CI=true), where it must run
needs_compiler = pytest.mark.usefixtures("compiler_required")

# the heavy ones (a token's dispatches of several layers: minutes and gigabytes each) are make aircc-check's
DESIGNS = [d for d in aircc_check.designs() if not d.heavy] if MISSING is None else []


def _names(passes):
    return [compiler._pass_name(p) for p in passes]


@needs_compiler
def test_the_pipeline_is_the_one_aircc_runs(tmp_path):
    """aircc -v prints the pipeline it runs, every option spelled out: the same passes in the same order,
    and every option we give is one aircc gives (its line, not our reading of aircc.cpp, decides).
    """
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


# Compiled here: every design but the format variants, down_proj (q_proj's structure with more K
# refills), the layer module's other forms and, in `make test`, the bring-up probes and the smaller GEMM
# herds (a cold clone compiles each: tens of seconds), which `make aircc-check` compiles; aircc's passes
# decide for all of them here.
COMPILED_HERE = [
    d.name
    for d in DESIGNS
    if ("FORMAT=" not in d.name or d.name.endswith("FORMAT=awq"))
    and d.name != "make run_llama_down"
    and not d.name.endswith(("Q4_K_M", "q, k, v", "LM head"))
    and not d.name.startswith(("bring-up probe", "make run2x4", "make run1x1 M="))
]


# `make test` keeps the small ones, one of each kind (the decode GEMV, a module of two launches, the probes);
# the decoder layer modules and the Llama prefill shapes are `slow` (make test-all, make aircc-check)
SLOW_DESIGNS = ("decoder layer", "make run_llama_qproj", "m_per_segment")


@needs_compiler
@pytest.mark.parametrize(
    "design",
    [
        pytest.param(
            d,
            id=d.name,
            marks=[pytest.mark.slow] if any(s in d.name for s in SLOW_DESIGNS) else [],
        )
        for d in DESIGNS
    ],
)
def test_every_design_through_aircc(design, tmp_path, record_property):
    """aircc's passes and the emulator decide alike; aircc + aiecc compile it to NPU instructions, and
    the placed design's per-tile resources equal the emulator's table; the compiled runtime sequence
    writes every element of C once and moves what the model counts."""
    compile_it = design.name in COMPILED_HERE
    r = aircc_check.check(design, str(tmp_path), compile_it=compile_it)
    record_property("aircc_compiled" if compile_it else "air_opt_only", design.name)
    assert r.error is None, r.error
    assert r.disagree == [], r.disagree
    assert r.traffic == [], r.traffic
    if compile_it:
        assert r.compiled.insts and all(n > 0 for n in r.compiled.insts.values())
    # every design ping-pongs its chunk loop in L1 (the A chunk and the record), in each of its launches,
    # unless it has none (the bring-up probes, the two-launch copy module)
    # (the attention's loop has one buffer to double: its chunk of cache rows, 32 key rows and 32 value
    # rows of 64)
    doubled = {t: n for (space, t), n in r.decisions.doubled.items() if space == 2}
    rows = "memref<64x64xbf16, 2 : i32>"
    if design.name.startswith("decode attention"):
        assert doubled == {rows: 1}, r.decisions.doubled
    elif not any(w in design.name for w in ("probe", "two launches")):
        # each launch with a chunk loop doubles its two buffers (the element-wise launches have none),
        # and a module ending with the attention its rows
        attention = "attention" in design.name
        assert sum(doubled.values()) == 2 * design.chunk_loops + attention
        assert doubled.get(rows, 0) == attention
        assert r.decisions.split_warnings == 0


@needs_compiler
def test_a_module_the_compiler_refuses_names_its_error(tmp_path):
    d = next(d for d in DESIGNS if d.name == "make run1x1")
    broken = d.text().replace("func.call @f32_to_bf16_mn", "func.call @no_such_entry")
    with pytest.raises(compiler.CompileError, match="aircc: .*no_such_entry"):
        compiler.compile_module(broken, d.options, str(tmp_path))


# -- the sinking that decides ping-pong, on a small design ---------------------------------------------


def _scratch_design(anchored):
    """A segment-level L1 scratch passed to a compute herd whose chunk loop DMAs a buffer in and calls a
    kernel with both; `anchored`: the zero phase (a same-named herd) writes the scratch first.
    """
    from air.dialects import arith
    from air.dialects.air import MemorySpace, T, dma_memcpy_nd, herd, launch
    from air.dialects.air import module_builder, segment
    from air.dialects.func import CallOp, FuncOp
    from air.dialects.memref import AllocOp, store
    from air.dialects.scf import for_, yield_
    from air.ir import IntegerAttr, IntegerType, MemRefType, StringAttr

    @module_builder
    def build():
        i8 = IntegerType.get_signless(8)
        l1 = IntegerAttr.get(T.i32(), MemorySpace.L1)
        src = MemRefType.get([4, 256], i8)
        buf_t = MemRefType.get([256], i8, memory_space=l1)
        scratch_t = MemRefType.get([1024], i8, memory_space=l1)
        k = FuncOp("kern", ([buf_t, scratch_t], []), visibility="private")
        k.attributes["link_with"] = StringAttr.get("k.o")

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


@needs_compiler
@pytest.mark.parametrize("anchored", [False, True])
def test_a_scratch_sunk_into_the_loop_stops_ping_pong(anchored):
    module = _scratch_design(anchored)
    dec = compiled.air_decisions(str(module))
    emu = aircc_check.emulator_decisions(
        aircc_check.emulator_program(module, dict(target_device="npu2"))
    )
    assert compiled.disagreements(dec, emu) == []
    want = {(2, "memref<256xi8, 2 : i32>"): 1} if anchored else {}
    assert dict(dec.doubled) == want
    # not anchored: aircc sinks the scratch into the chunk loop, beside the buffer
    assert ("memref<1024xi8, 2 : i32>" in dec.sunk_l1) == (not anchored)


def test_the_emulator_says_why_the_loop_is_single():
    from air.emu.engine import Options, Program

    program = Program(_scratch_design(False), Options(link=False), check=False)
    [herd] = program.budget.herds
    notes = " ".join(e.note for e in herd.entries)
    assert "sunk into this herd by air-fuse-alloc-dealloc" in notes
    assert "first access to the herd operand sunk here" in notes
    assert all(e.factor == 1 for e in herd.entries)


# -- the runtime sequence against DDR ---------------------------------------------------------------------


def _sequence(tasks, args="%arg0: memref<4x8xbf16>, %arg1: memref<4x8xbf16>"):
    """An npu.air.mlir fragment: two shim allocations, tasks given as (symbol, bd, attrs)."""
    body = []
    for k, (sym, bd, attrs) in enumerate(tasks):
        body += [
            f"      %{k} = aiex.dma_configure_task_for @{sym} {{",
            f"        aie.dma_bd({bd})",
            "        aie.end",
            f"      }}{attrs}",
            f"      aiex.dma_start_task(%{k})",
        ]
    return "\n".join(
        [
            "    aie.shim_dma_allocation @in(%shim_noc_tile_0_0, MM2S, 0)",
            "    aie.shim_dma_allocation @out(%shim_noc_tile_0_0, S2MM, 0)",
            f"    aie.runtime_sequence @seq({args}) {{",
            *body,
            "    }",
        ]
    )


def test_a_task_runs_repeat_count_plus_one_times():
    bd = "%arg0 : memref<4x8xbf16> offset = 8 len = 16 sizes = [2, 8] strides = [8, 1]"
    [t] = runtime_sequence.interpret(
        _sequence([("in", bd, " {repeat_count = 2 : i32}")])
    )
    assert t.reads[0].reshape(4, 8).tolist() == [[0] * 8, [3] * 8, [3] * 8, [0] * 8]
    assert t.bytes_read(0) == 3 * 16 * 2 and not t.writes[0].any()


def test_the_fourth_dimension_steps_the_offset_per_execution():
    # [2, 1, 1, 8] stride 16: execution 0 at row 0, execution 1 at row 2, execution 2 wraps to row 0
    bd = "%arg1 : memref<4x8xbf16> offset = 0 len = 8 sizes = [2, 1, 1, 8] strides = [16, 0, 0, 1]"
    [t] = runtime_sequence.interpret(
        _sequence([("out", bd, " {repeat_count = 2 : i32}")])
    )
    assert t.writes[1].reshape(4, 8)[:, 0].tolist() == [2, 0, 1, 0]


def test_len_must_be_the_inner_product():
    bd = "%arg0 : memref<4x8xbf16> offset = 0 len = 16 sizes = [2, 2, 8] strides = [16, 8, 1]"
    with pytest.raises(
        runtime_sequence.NotInterpreted, match="len 16 is not the product"
    ):
        runtime_sequence.interpret(_sequence([("in", bd, "")]))


def test_a_word_walk_with_a_gap_is_not_guessed():
    bd = "%arg0 : memref<4x8xbf16> offset = 0 len = 4 sizes = [4] strides = [2]"
    with pytest.raises(runtime_sequence.NotInterpreted, match="innermost stride 2"):
        runtime_sequence.interpret(_sequence([("in", bd, "")]))


def _design(outputs=(1,), ddr=None, launches=1):
    return aircc_check.Design(
        "d", None, {}, outputs=outputs, ddr_bytes=ddr, launch_iterations=launches
    )


def test_an_output_written_twice_or_not_at_all_is_named():
    whole_in = "%arg0 : memref<4x8xbf16> offset = 0 len = 32 sizes = [32] strides = [1]"
    whole_out = (
        "%arg1 : memref<4x8xbf16> offset = 0 len = 32 sizes = [32] strides = [1]"
    )
    half_out = "%arg1 : memref<4x8xbf16> offset = 0 len = 16 sizes = [16] strides = [1]"
    ok = _sequence([("in", whole_in, ""), ("out", whole_out, "")])
    assert aircc_check.traffic_problems(_design(ddr=128), ok) == []
    # each piece given the whole buffer (what aircc made of the GEMV's C drain with x second)
    twice = _sequence(
        [("in", whole_in, ""), ("out", whole_out, ""), ("out", whole_out, "")]
    )
    [p] = aircc_check.traffic_problems(_design(launches=2), twice)
    assert "0 elements never written, 32 written more than once (at most 2 times)" in p
    half = _sequence([("in", whole_in, ""), ("out", half_out, "")])
    [p] = aircc_check.traffic_problems(_design(), half)
    assert "16 elements never written" in p
    [p] = aircc_check.traffic_problems(_design(ddr=129), ok)
    assert "moves 128 bytes, the model counts 129" in p


def _two_launch_sequences(order=("first", "second")):
    """npu.air.mlir of a two-launch module: launch `first` copies arg0 into arg1, `second` arg1 into arg2;
    the main sequence configures and runs them in `order` (aircc's form, air_multi_launch_npu.mlir).
    """
    args = "%arg0: memref<32xi32>, %arg1: memref<32xi32>, %arg2: memref<32xi32>"
    out = []
    for name, src, dst in (("first", 0, 1), ("second", 1, 2)):
        out += [
            f"    aie.shim_dma_allocation @in_{name}(%shim_noc_tile_0_0, MM2S, 0)",
            f"    aie.shim_dma_allocation @out_{name}(%shim_noc_tile_0_0, S2MM, 0)",
            f"    aie.runtime_sequence @seq_{name}({args}) {{",
        ]
        for k, (sym, arg) in enumerate(((f"in_{name}", src), (f"out_{name}", dst))):
            out += [
                f"      %{k} = aiex.dma_configure_task_for @{sym} {{",
                f"        aie.dma_bd(%arg{arg} : memref<32xi32> offset = 0 len = 32 sizes = [32] strides = [1])",
                "        aie.end",
                "      }",
                f"      aiex.dma_start_task(%{k})",
            ]
        out.append("    }")
    out.append(f"    aie.runtime_sequence @main({args}) {{")
    for name in order:
        out += [
            f"      aiex.configure @dev_{name} {{",
            f"        aiex.run @seq_{name}(%arg0, %arg1, %arg2) : (memref<32xi32>, memref<32xi32>, memref<32xi32>)",
            "      }",
        ]
    out.append("    }")
    return "\n".join(out)


def test_a_multi_launch_module_is_checked_over_its_launches_in_order():
    """The main sequence's traffic is its runs': the intermediate arg1 written by the first launch and read
    by the second, arg2 written once; run the other way round, the second launch reads arg1 before any
    launch wrote it."""
    text = _two_launch_sequences()
    seqs = runtime_sequence.interpret(text)
    main = next(t for t in seqs if t.runs)
    assert [t.inner for t in seqs if not t.runs] == [True, True]
    assert [int(r.sum()) for r in main.reads] == [32, 32, 0]
    assert [int(w.sum()) for w in main.writes] == [0, 32, 32]
    assert (
        aircc_check.traffic_problems(_design(outputs=(1, 2), ddr=4 * 32 * 4), text)
        == []
    )
    backwards = _two_launch_sequences(("second", "first"))
    [p] = aircc_check.traffic_problems(_design(outputs=(1, 2)), backwards)
    assert (
        "launch 0 (seq_second) reads 32 elements of %arg1 [32] no earlier launch wrote"
        in p
    )


def _small_herd(tiling):
    from int4awq.design.design import DesignConfig

    # a 1x2 herd over a [2, 1] launch grid: the project runs it at [1, 1] (2 launch iterations)
    cfg = DesignConfig(
        m=128,
        k=256,
        n=128,
        gs=128,
        tile_m=64,
        tile_n=64,
        tile_k_l1=64,
        tile_k_l2=256,
        herd_m=1,
        herd_n=2,
    )
    d = aircc_check._config_design("small herd", cfg)
    d.options = dict(d.options, runtime_loop_tiling_sizes=tiling)
    return cfg, d


@needs_compiler
def test_the_small_herd_drain_fold_shows_in_the_compiled_sequence(tmp_path):
    """mlir-air's bfp16/run.py: under [2, 2] a small herd's drain folds every launch iteration into one
    task on one shim channel (NPU2 then writes only the first iteration's output); the project's [1, 1]
    gives each launch iteration its own task."""
    cfg, d = _small_herd([2, 2])
    assert cfg.runtime_loop_tiling == (1, 1)
    r = aircc_check.check(d, str(tmp_path / "folded"))
    assert r.error is None and len(r.traffic) == 1, r.traffic
    assert (
        "drains 2 launch iterations through one shim channel in 1 task(s)"
        in r.traffic[0]
    )
    cfg, d = _small_herd(list(cfg.runtime_loop_tiling))
    r = aircc_check.check(d, str(tmp_path / "project"))
    assert r.ok, (r.error, r.traffic, r.disagree)


# -- the emulator's own test designs ---------------------------------------------------------------------


def _emulator_designs():
    import add_2x2
    import gemm_structures
    import passthrough
    import synthetic_gemm
    import two_launches

    return {
        "add_2x2": add_2x2.build_module,
        "passthrough": passthrough.build_module,
        "two_launches": two_launches.build_module,
        "synthetic_gemm": synthetic_gemm.build_module,
        "gemm_structures proven": lambda: gemm_structures.build("proven"),
        "gemm_structures relaid_fill": lambda: gemm_structures.build("relaid_fill"),
        "gemm_structures resident": lambda: gemm_structures.build("resident"),
    }


@needs_compiler
@pytest.mark.parametrize("name", list(_emulator_designs()))
def test_the_emulator_s_test_designs_split_and_ping_pong_as_aircc_does(name):
    module = _emulator_designs()[name]()
    dec = compiled.air_decisions(str(module))
    program = aircc_check.emulator_program(module, dict(target_device="npu2"))
    emu = aircc_check.emulator_decisions(program)
    assert dec.doubled_by_level() == emu["doubled"]
    splits = program.resources.splits
    if name in ("gemm_structures relaid_fill", "gemm_structures resident"):
        # The fill re-lays A into 8x8 blocks: the emulator refuses the split, and aircc shows why: it
        # cuts the buffer into 8 pieces, each as large as the whole buffer (the fill has no dimension of
        # the split stride, so the pass falls back to tiling it differently)
        [(root, d)] = [(r, d) for r, d in splits if d.note.startswith("refused")]
        assert dec.l2_after_split[str(root.type)] == 8
    else:
        assert all(not d.note.startswith("refused") for _, d in splits)
        assert dict(dec.l2_after_split) == emu["l2"]


def _stored_first(first, opt_out=False):
    """A herd loop whose L1 buffer is first touched by a memref.store (`first` = "store") or by the kernel
    call (`first` = "call"), then passed to the call; opt_out: the loop carries air.disable_ping_pong, set
    as bf16_x_bfp16 sets it."""
    from air.dialects import arith
    from air.dialects.air import MemorySpace, T, herd, launch, module_builder, segment
    from air.dialects.func import CallOp, FuncOp
    from air.dialects.memref import AllocOp, store
    from air.dialects.scf import ForOp, yield_
    from air.ir import (
        InsertionPoint,
        IntegerAttr,
        IntegerType,
        MemRefType,
        StringAttr,
        UnitAttr,
    )

    @module_builder
    def build():
        i8 = IntegerType.get_signless(8)
        l1 = IntegerAttr.get(T.i32(), MemorySpace.L1)
        buf_t = MemRefType.get([256], i8, memory_space=l1)
        k = FuncOp("kern", ([buf_t], []), visibility="private")
        k.attributes["link_with"] = StringAttr.get("k.o")

        @FuncOp.from_py_func(MemRefType.get([256], i8))
        def f(a):
            @launch(operands=[a])
            def lb(la):
                @segment(name="seg", operands=[la])
                def sb(sa):
                    @herd(name="h", sizes=[1, 1], operands=[])
                    def hc(_x, _y, _sx, _sy):
                        loop = ForOp(
                            *(arith.ConstantOp.create_index(v) for v in (0, 4, 1))
                        )
                        if opt_out:
                            loop.operation.attributes["air.disable_ping_pong"] = (
                                UnitAttr.get()
                            )
                        with InsertionPoint(loop.body):
                            buf = AllocOp(buf_t, [], [])
                            if first == "store":
                                z = arith.ConstantOp.create_index(0)
                                store(arith.ConstantOp(i8, 1), buf, [z])
                            CallOp(k, [buf])
                            yield_([])

    return build()


@needs_compiler
@pytest.mark.parametrize("first", ["store", "call"])
def test_a_store_is_a_definite_write_and_a_call_is_not(first):
    # isDefiniteWrite (AIRDependencyScheduleOpt.cpp ~1645-1654): an op that writes a buffer without
    # reading it qualifies the loop; an opaque call does not
    module = _stored_first(first)
    dec = compiled.air_decisions(str(module))
    emu = aircc_check.emulator_decisions(
        aircc_check.emulator_program(module, dict(target_device="npu2"))
    )
    want = {(2, "memref<256xi8, 2 : i32>"): 1} if first == "store" else {}
    assert dict(dec.doubled) == want
    assert emu["doubled"] == ({"L1 memref<256xi8, 2 : i32>": 1} if want else {})


@needs_compiler
def test_a_channel_without_indices_prints_as_air_opt_parses_it():
    # mlir-air's int4 GEMV puts to an unindexed channel: printed `@inB[] (...)`, as AIR.td's format has it
    from air.dialects.air import Channel, ChannelGet, ChannelPut, MemorySpace, T, herd
    from air.ir import IntegerAttr, MemRefType
    from emu_testlib import in_segment, memref

    def seg(a):
        l1 = IntegerAttr.get(T.i32(), MemorySpace.L1)
        ChannelPut("c", a)

        @herd(name="h", sizes=[1, 1], operands=[])
        def hb(_x, _y, _sx, _sy):
            from air.dialects.memref import AllocOp

            ChannelGet(
                "c", AllocOp(MemRefType.get([64], T.i32(), memory_space=l1), [], [])
            )

    module = in_segment([memref([64])], seg, channels=lambda: Channel("c", size=[1]))
    assert "air.channel.put @c[] (" in str(module)
    compiled.air_decisions(str(module))  # parses and runs aircc's passes


@needs_compiler
def test_air_disable_ping_pong_prints_after_the_loop_and_opts_out():
    # scf.for's attributes follow its body; a loop that opts out is not labelled by aircc or the emulator
    module = _stored_first("store", opt_out=True)
    assert "} {air.disable_ping_pong}" in str(module)
    dec = compiled.air_decisions(str(module))
    emu = aircc_check.emulator_decisions(
        aircc_check.emulator_program(module, dict(target_device="npu2"))
    )
    assert dict(dec.doubled) == {} and emu["doubled"] == {}


@needs_compiler
@pytest.mark.slow
def test_the_resident_a_compiles_to_the_refeed_locks(tmp_path):
    """q_proj at n_per_segment 4 (docs/design.md#a-resident-across-n-blocks-n_per_segment): aircc's
    air-annotate-refeed writes air.refeed_count = 4 on each of the 64 slices (8 herd rows x 8 K
    refills), and air-to-aie primes each slice's fill to acquire and release 4 (its write lock starts
    at 4) while each re-send BD takes 1, the 8 re-send BDs of a memtile one ring."""
    [design] = [d for d in DESIGNS if aircc_check.RESIDENT_QPROJ in d.name]
    _, outdir = compiler.compile_first(
        design.name, design.text(), design.options, str(tmp_path)
    )
    placed = open(os.path.join(outdir, "placed.air.mlir")).read()
    assert placed.count("air.refeed_count = 4") == 64
    text = open(os.path.join(outdir, "input_physical.mlir")).read()
    slice_type = "memref<1x8x32x8x8xbf16, 1 : i32>"
    acquires = {"S2MM": [], "MM2S": []}
    direction = acquire = None
    for line in text.splitlines():
        if "aie.dma_start(" in line:
            direction = re.search(r"dma_start\((\w+),", line).group(1)
        elif "AcquireGreaterEqual" in line:
            acquire = int(re.search(r"%c(\d+)_i32", line).group(1))
        elif "aie.dma_bd(" in line and slice_type in line:
            acquires[direction].append(acquire)
    assert acquires == {"S2MM": [4] * 64, "MM2S": [1] * 64}
    inits = re.findall(r"aie\.lock\(%mem_tile_\d+_1, \d+\) \{init = (\d+)", text)
    assert inits.count("4") >= 64
