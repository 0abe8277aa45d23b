# SPDX-License-Identifier: MIT
"""The runtime sequence run from the NPU instruction stream aiecc wrote (emulator/aiesim/insts.py, issue
51 item 1).

Without the compiler: the decoder on streams written here (each op's layout, a truncated stream, an
unknown opcode, a header that does not add up), each refused with the byte offset of the word.

With the compiler: every stream of the small designs decodes completely; the register layout copied into
insts.py is the compiler's register database's; the small designs (run1x1, a GEMV probe, the two GEMVs
chained in one module) give the same output from their instruction streams as from the dialect-level
sequence; bad input (a register outside any the simulator knows, a stream for another device, a
truncated stream, a tile the device does not use) is refused with the offset, one line, exit 2 through
sim_costs.simulate_compiled; and a mutation of a real stream trips each rule: five pushes onto one
channel before a sync (the fifth dropped, reported), four (the limit, same output), a sync on the wrong
channel (a hang naming the sync), no sync at all (the early return), a BD rewritten while its task is in
flight.
"""

import os
import shutil
import struct
import sys

import numpy as np
import pytest

import compiler_tools

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "emulator"))
import aiesim  # noqa: E402
from aiesim import insts  # noqa: E402

NPU2_HEADER = [0x06040100, 0x00000108]


def stream(*ops) -> bytes:
    words = [w for op in ops for w in op]
    head = NPU2_HEADER + [len(ops), 4 * (4 + len(words))]
    return struct.pack(f"<{len(head) + len(words)}I", *head, *words)


def write32(addr, value):
    return [0, 0, addr, 0, value, 24]


def blockwrite(addr, data):
    return [1, 0, addr, 16 + 4 * len(data), *data]


def patch(addr, arg, plus):
    return [0x81, 48, 0, 0, 0, 0, addr, 0, arg, 0, plus, 0]


def sync(col, row, direction, channel):
    return [
        0x80,
        16,
        direction | row << 8 | col << 16,
        1 << 8 | 1 << 16 | channel << 24,
    ]


def maskwrite(addr, value, mask):
    return [3, 0, addr, 0, value, mask, 28]


# -- the decoder, without the compiler -------------------------------------------------------------------


def test_each_op_decodes_with_its_offset():
    s = insts.decode(
        stream(
            blockwrite(0x1D000, [64, 0, 0, 0, 0, 0, 0, 1 << 25]),
            patch(0x1D004, 1, 128),
            maskwrite(0x1D200, 0xF00, 0x1F00),
            write32(0x1D204, 0x80000000),
            sync(0, 0, 0, 0),
        )
    )
    assert [(i.offset, i.name) for i in s.instrs] == [
        (16, "blockwrite"),
        (64, "address_patch"),
        (112, "maskwrite"),
        (140, "write32"),
        (164, "sync"),
    ]
    assert s.header["generation"] == 4 and s.header["columns"] == 8
    assert insts.encode(s.header, s.instrs) == stream(
        blockwrite(0x1D000, [64, 0, 0, 0, 0, 0, 0, 1 << 25]),
        patch(0x1D004, 1, 128),
        maskwrite(0x1D200, 0xF00, 0x1F00),
        write32(0x1D204, 0x80000000),
        sync(0, 0, 0, 0),
    )


def test_an_unknown_opcode_is_refused_with_its_offset():
    with pytest.raises(
        insts.InstsError, match=r"unknown opcode 77 .* at byte offset 40"
    ):
        insts.decode(stream(write32(0x1D204, 0), [77, 0, 0, 0]))


def test_a_known_opcode_the_simulator_does_not_run_is_named():
    with pytest.raises(
        insts.InstsError, match=r"maskpoll \(opcode 4\) at byte offset 16"
    ):
        insts.decode(stream([4, 0, 0x1D220, 0, 0, 0, 28]))


def test_a_truncated_stream_is_refused_with_the_offset():
    whole = stream(write32(0x1D204, 0), sync(0, 0, 0, 0))
    # the header still says the whole size: the last op is cut
    with pytest.raises(
        insts.InstsError, match="header .* gives 56 bytes, the stream has 52"
    ):
        insts.decode(whole[:-4])
    # a cut op with a header that agrees
    cut = bytearray(whole[:-4])
    cut[12:16] = struct.pack("<I", len(cut))
    with pytest.raises(insts.InstsError, match="sync at byte offset 40 truncated"):
        insts.decode(bytes(cut))
    with pytest.raises(insts.InstsError, match="truncated word at byte offset 52"):
        insts.decode(whole[:-2])
    with pytest.raises(insts.InstsError, match="truncated at byte 8"):
        insts.decode(whole[:8])


def test_an_op_whose_size_field_disagrees_is_refused():
    bad = write32(0x1D204, 0)
    bad[5] = 28
    with pytest.raises(
        insts.InstsError,
        match=r"write32 at byte offset 16 gives a size of 28 bytes \(byte offset 36\)",
    ):
        insts.decode(stream(bad))


def test_a_header_that_miscounts_its_ops_is_refused():
    raw = bytearray(stream(write32(0x1D204, 0)))
    raw[8:12] = struct.pack("<I", 2)
    with pytest.raises(
        insts.InstsError, match=r"header \(byte offset 8\) counts 2 ops"
    ):
        insts.decode(bytes(raw))


# -- without the compiler: test_sim.py's tiny design run from a stream written here ---------------------


def tiny_text(args=1):
    """test_sim.py's tiny design (a core fills 4 i32 words with 7, its DMA sends them to the shim's S2MM 0)
    with `args` host arguments of 8 i32 each."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import test_sim

    extra = "".join(f", %arg{k}: memref<8xi32>" for k in range(1, args))
    return test_sim.tiny().replace(
        "^bb0(%arg0: memref<8xi32>)", f"^bb0(%arg0: memref<8xi32>{extra})"
    )


def tiny_stream(arg=0, plus=0, pushes=1, token=True, sync_channel=0):
    """S2MM 0 of the shim: BD 0, 4 words, linear, into host argument `arg` plus `plus` bytes; pushed
    `pushes` times, the last with a token; one sync."""
    ops = [
        blockwrite(0x1D000, [4, 0, 0, 0, 0, 0, 0, 1 << 25]),
        patch(0x1D004, arg, plus),
        maskwrite(0x1D200, 0xF00, 0x1F00),
    ]
    for k in range(pushes):
        ops.append(write32(0x1D204, (1 << 31) * (token and k == pushes - 1)))
    ops.append(sync(0, 0, 0, sync_channel))
    return stream(*ops)


def run_tiny(tmp_path, data, args=1):
    (tmp_path / "insts_tiny_seq.bin").write_bytes(data)
    arrays = [np.zeros(8, np.int32) for _ in range(args)]
    return aiesim.simulate(tiny_text(args), arrays, insts=str(tmp_path))


def test_the_tiny_design_runs_from_a_stream_written_here(tmp_path):
    out, sim = run_tiny(tmp_path, tiny_stream())
    assert out[0].tolist() == [7, 7, 7, 7, 0, 0, 0, 0]
    assert isinstance(sim.main, insts.InstsAgent) and aiesim.leftovers(sim) == []
    out, _ = run_tiny(tmp_path, tiny_stream(plus=16))  # 16 bytes further
    assert out[0].tolist() == [0, 0, 0, 0, 7, 7, 7, 7]


def test_a_patch_past_the_fifth_argument_needs_the_ddr_aperture(tmp_path):
    # the firmware translates the first 5 arguments' addresses; the compiler folds 0x80000000 into the
    # offset of a later one's patch (aie-translate --aie-npu-fold-ddr-addr-offset)
    out, _ = run_tiny(tmp_path, tiny_stream(arg=5, plus=0x80000000 + 16), args=6)
    assert out[5].tolist() == [0, 0, 0, 0, 7, 7, 7, 7] and not out[0].any()
    with pytest.raises(
        aiesim.SimError, match="without the DDR aperture offset 0x80000000"
    ):
        run_tiny(tmp_path, tiny_stream(arg=5, plus=16), args=6)
    with pytest.raises(insts.InstsError, match="host argument 6; @seq takes 6"):
        run_tiny(tmp_path, tiny_stream(arg=6, plus=0x80000000), args=6)


def test_the_queue_rules_on_the_tiny_design(tmp_path):
    # a task with no token: the sync never gets one (a hang naming the sync)
    with pytest.raises(aiesim.Hang) as e:
        run_tiny(tmp_path, tiny_stream(token=False))
    assert (
        "byte offset 164: sync waits for a task-completion token of tile (0, 0) S2MM 0"
        in (e.value.report[0])
    )
    # a sync on S2MM 1: the same
    with pytest.raises(aiesim.Hang, match="token of tile \\(0, 0\\) S2MM 1"):
        run_tiny(tmp_path, tiny_stream(sync_channel=1))
    # five pushes of BD 0 before the sync: the fifth is dropped (the four before it wait for data that
    # come once: a hang whose report carries the dropped push)
    with pytest.raises((aiesim.Hang, aiesim.SimError)) as e:
        run_tiny(tmp_path, tiny_stream(pushes=5))
    assert (
        "byte offset 236: the push onto tile (0, 0) S2MM 0 (DMA_S2MM_0_Task_Queue) finds its task queue full"
        in str(e.value)
    )


# -- with the compiler: the small designs ----------------------------------------------------------------


def compiled(prefix):
    """(case, output folder, generic text, inputs) of a small design of host/sim_check.py."""
    compiler_tools.require()
    from host import sim_check
    from int4awq.design import compiler

    case = next(c for c in sim_check.cases() if c.name.startswith(prefix))
    os.environ["AIR_EMU_LIB_PATH"] = case.library_dir()
    _, outdir = compiler.compile_first(
        case.name,
        str(case.build()),
        case.options,
        os.path.join(REPO, "build", "aircc-runs"),
    )
    text = compiler.generic_form(os.path.join(outdir, "input_physical.mlir"))
    return case, outdir, text, case.inputs()


SMALL = (
    "make run1x1",
    "bring-up probe probe_accumulate_mv_int4_bf16_gemv",
    "two decode GEMVs chained",
)


def same(a, b) -> bool:
    return all(
        np.array_equal(np.asarray(x).view(np.uint8), np.asarray(y).view(np.uint8))
        for x, y in zip(a, b)
    )


@pytest.mark.parametrize(
    "prefix",
    [
        pytest.param(p, marks=[pytest.mark.slow] if "chained" in p else [])
        for p in SMALL
    ],
)
def test_the_instruction_stream_and_the_dialect_sequence_give_the_same_output(prefix):
    case, outdir, text, bufs = compiled(prefix)
    a, sa = aiesim.simulate(text, [b.copy() for b in bufs], insts=outdir)
    b, sb = aiesim.simulate(text, [b.copy() for b in bufs], insts=outdir, dialect=True)
    assert isinstance(sa.main, insts.InstsAgent)
    assert isinstance(sb.main, aiesim.engine.SequenceAgent)
    assert same(a, b)
    assert aiesim.leftovers(sa) == aiesim.leftovers(sb) == []
    # every stream of the folder decodes to its last word, the header's count and size agreeing
    for f in os.listdir(outdir):
        if f.startswith("insts_") and f.endswith(".bin"):
            s = insts.load(os.path.join(outdir, f))
            assert s.instrs and s.header["size"] == os.path.getsize(
                os.path.join(outdir, f)
            )


def test_the_register_layout_is_the_compilers_register_database():
    compiler_tools.require()
    import json

    from int4awq.design import compiler

    path = insts.regdb_path(compiler.find_tool("aie-opt"))
    assert path is not None
    with open(path) as f:
        db = json.load(f)

    def regs(module):
        return {r["name"]: r for r in db["modules"][module]["registers"]}

    shim, mem = regs("shim"), regs("memory_tile")
    for word, name, hi, lo in insts.SHIM_BD_FIELDS:
        r = shim[f"DMA_BD0_{word}"]
        assert int(r["offset"], 16) == insts.SHIM_BD_BASE + 4 * word
        bits = {b["name"]: b["bits"] for b in r["bit_fields"]}
        assert bits[name] == (f"{hi}" if hi == lo else f"{hi}:{lo}"), name
    assert int(shim[f"DMA_BD{insts.SHIM_BD_COUNT - 1}_0"]["offset"], 16) == (
        insts.SHIM_BD_BASE + 0x20 * (insts.SHIM_BD_COUNT - 1)
    )
    for word, name, hi, lo in insts.MEMTILE_BD_FIELDS:
        bits = {b["name"]: b["bits"] for b in mem[f"DMA_BD0_{word}"]["bit_fields"]}
        assert bits[name] == (f"{hi}" if hi == lo else f"{hi}:{lo}"), name
    for table, module in (
        (insts.SHIM_CHANNEL_REGS, shim),
        (insts.MEMTILE_CHANNEL_REGS, mem),
    ):
        for off, (name, kind, _, _) in table.items():
            assert int(module[name]["offset"], 16) == off, name
            if kind == "queue":
                bits = {b["name"]: b["bits"] for b in module[name]["bit_fields"]}
                for f, hi, lo in insts.QUEUE_FIELDS:
                    if f == "Start_BD_ID" and module is mem:
                        assert bits[f] == "5:0"
                    else:
                        assert bits[f] == (f"{hi}" if hi == lo else f"{hi}:{lo}")


# -- mutations of a real stream --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def run1x1():
    case, outdir, text, bufs = compiled("make run1x1")
    [name] = [f for f in os.listdir(outdir) if f.startswith("insts_")]
    s = insts.load(os.path.join(outdir, name))
    want, _ = aiesim.simulate(text, [b.copy() for b in bufs], insts=outdir)
    return outdir, text, bufs, name, s, want


def run_mutated(tmp_path, run1x1, instrs, header=None):
    outdir, text, bufs, name, s, _ = run1x1
    (tmp_path / name).write_bytes(insts.encode(header or s.header, instrs))
    return aiesim.simulate(text, [b.copy() for b in bufs], insts=str(tmp_path))


def Ins(words):
    return insts.Instr(0, words[0] & 0xFF, tuple(words))


def output_task(s):
    """The ops that set up and start the output task (S2MM 0 of the shim at column 0): its blockwrite,
    patch, controller maskwrite and start-queue write, and where the sync follows."""
    ops = s.instrs
    start = next(i for i, x in enumerate(ops) if x.op == insts.BLOCKWRITE)
    push = next(
        i
        for i, x in enumerate(ops)
        if x.op == insts.WRITE and insts.split(x.words[2])[2] == 0x1D204
    )
    return start, push


def split_output(s, pieces, extra_pushes=0):
    """The stream with run1x1's output task (one linear BD, BD 0) split into `pieces` tasks over BD ids
    0, 5, 6, ... each moving its share of the words to consecutive addresses, all pushed onto S2MM 0
    before the sync, the last one issuing the token; `extra_pushes` more pushes of the last piece.
    """
    ops = list(s.instrs)
    start, push = output_task(s)
    bw = ops[start].words
    data = list(bw[4:])
    assert insts.field(data[3], 29, 20) == 0, "run1x1's output BD is linear"
    length = data[0]
    assert length % pieces == 0
    n = length // pieces
    arg = ops[start + 1].words[8]
    new = []
    ids = [0] + list(range(5, 5 + pieces - 1))
    for k, bd in enumerate(ids):
        d = list(data)
        d[0], d[1] = n, 4 * n * k
        addr = insts.SHIM_BD_BASE + 0x20 * bd
        new.append(Ins(blockwrite(addr, d)))
        new.append(Ins(patch(addr + 4, arg, 4 * n * k)))
    new.append(ops[start + 2])  # the controller id maskwrite
    for k, bd in enumerate(ids):
        token = 1 << 31 if k == pieces - 1 else 0
        new.append(Ins(write32(0x1D204, token | bd)))
    for _ in range(extra_pushes):
        new.append(Ins(write32(0x1D204, ids[-1])))
    return ops[:start] + new + ops[push + 1 :]


def test_four_tasks_queued_on_one_channel_are_the_limit(tmp_path, run1x1):
    *_, s, want = run1x1
    out, sim = run_mutated(tmp_path, run1x1, split_output(s, 4))
    assert same(out, want)
    assert aiesim.leftovers(sim) == []


def test_a_fifth_push_before_a_sync_is_dropped_and_reported(tmp_path, run1x1):
    *_, s, _ = run1x1
    with pytest.raises((aiesim.SimError, aiesim.Hang)) as e:
        run_mutated(tmp_path, run1x1, split_output(s, 4, extra_pushes=1))
    msg = str(e.value)
    assert "finds its task queue full (4 tasks not completed" in msg
    assert "the hardware drops it" in msg and "tile (0, 0) S2MM 0" in msg


def test_a_sync_on_the_wrong_channel_hangs_naming_the_sync(tmp_path, run1x1):
    *_, s, _ = run1x1
    ops = list(s.instrs)
    k = next(i for i, x in enumerate(ops) if x.op == insts.TCT)
    w = list(ops[k].words)
    w[2] |= 1  # MM2S 0 of the same shim: its tasks issue no token
    ops[k] = insts.Instr(ops[k].offset, insts.TCT, tuple(w))
    with pytest.raises(aiesim.Hang) as e:
        run_mutated(tmp_path, run1x1, ops)
    first = e.value.report[0]
    assert (
        f"byte offset {ops[k].offset}: sync waits for a task-completion token of tile (0, 0) MM2S 0"
        in first
    )
    assert "no task that issues one is queued there" in first


def test_a_stream_without_its_sync_returns_early(tmp_path, run1x1):
    *_, s, _ = run1x1
    ops = [x for x in s.instrs if x.op != insts.TCT]
    with pytest.raises(
        aiesim.SimError, match="the host would read its output too soon"
    ):
        run_mutated(tmp_path, run1x1, ops)


def test_a_bd_rewritten_while_its_task_is_in_flight_is_reported(tmp_path, run1x1):
    *_, s, _ = run1x1
    ops = list(s.instrs)
    start, push = output_task(s)
    # write BD 0 again (unchanged) right after the push that starts the task using it
    ops.insert(push + 1, ops[start])
    with pytest.raises(aiesim.SimError) as e:
        run_mutated(tmp_path, run1x1, ops)
    assert (
        "rewrites DMA_BD0_0 of tile (0, 0) while the task pushed at byte offset"
        in str(e.value)
    )
    assert "which uses BD 0, is still in flight" in str(e.value)


# -- bad input -------------------------------------------------------------------------------------------


def test_a_write_outside_every_known_register_names_its_offset(tmp_path, run1x1):
    *_, s, _ = run1x1
    ops = list(s.instrs)
    ops.insert(0, Ins(write32(0x1D300, 1)))
    with pytest.raises(
        insts.InstsError,
        match=r"byte offset 16: write32 to address 0x0001d300 \(tile \(0, 0\), offset 0x1d300\)",
    ):
        run_mutated(tmp_path, run1x1, ops)


def test_a_stream_for_another_device_is_refused(tmp_path, run1x1):
    *_, s, _ = run1x1
    header = dict(s.header, generation=3)  # NPU1's
    with pytest.raises(
        insts.InstsError,
        match=r"header \(byte offset 0\) gives generation 3, NPU2's is 4",
    ):
        run_mutated(tmp_path, run1x1, s.instrs, header)
    # a write into a column the device does not use
    ops = list(s.instrs)
    w = list(ops[0].words)
    w[2] |= 7 << insts.COL_SHIFT
    ops[0] = insts.Instr(0, ops[0].op, tuple(w))
    with pytest.raises(
        insts.InstsError,
        match=r"byte offset 16: blockwrite to address 0x0e01d000, in tile \(7, 0\), which device @\w+ does not use",
    ):
        run_mutated(tmp_path, run1x1, ops)


def test_bad_input_is_one_line_and_exit_2_through_the_run_path(tmp_path, run1x1):
    from int4awq.errors import ConfigError
    from int4awq.run import sim_costs

    outdir, text, bufs, name, s, _ = run1x1
    shutil.copy(os.path.join(outdir, "input_physical.mlir"), tmp_path)
    (tmp_path / name).write_bytes(insts.encode(s.header, s.instrs)[:-4])
    with pytest.raises(ConfigError) as e:
        sim_costs.simulate_compiled(str(tmp_path), [b.copy() for b in bufs], None)
    msg = str(e.value)
    assert "\n" not in msg and f"{name}: the header (byte offset 12)" in msg
