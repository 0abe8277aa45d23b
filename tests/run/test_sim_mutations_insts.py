# SPDX-License-Identifier: MIT
"""Broken compiled designs at the levels issue 51 added (host/sim_mutations.py, the rows of
docs/verification.md's "Broken compiled designs"): `make run1x1`'s instruction stream mutated in a copy of
the compiler's output folder (four and five tasks pushed onto one channel before its sync, the sync moved
onto another channel, the wrong task awaited, a BD id reused while its task is in flight), each caught by
the rule the table names; the decode GEMV (`make run_llama_decode` at K 1024, N 512) with each of its first
core's AcquireGreaterEqual removed in turn, each a race; and what a dispatch's instruction stream costs
over the control path (int4awq/run/sim_costs.py, MODELLED).
"""

import hashlib
import os
import re
import sys
import types

import pytest

import compiler_tools

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "emulator"))
from aiesim import insts  # noqa: E402

STREAM_ROWS = ("four tasks", "five tasks", "a sync on", "the wrong task", "a BD id")


def _digests(folder):
    return {
        f: hashlib.sha256(open(os.path.join(folder, f), "rb").read()).hexdigest()
        for f in os.listdir(folder)
        if f.startswith("insts") or f == "input_physical.mlir"
    }


@pytest.fixture(scope="module")
def run1x1():
    compiler_tools.require()
    from host import sim_mutations

    text, arrays, out, outdir = sim_mutations.run1x1_case(folder=True)
    [name] = [f for f in os.listdir(outdir) if f.startswith("insts_")]
    with open(os.path.join(outdir, name), "rb") as f:
        data = f.read()
    return sim_mutations, outdir, data


def _queue_writes(stream):
    return [
        (i, x)
        for i, x in enumerate(stream.instrs)
        if x.op == insts.WRITE
        and (insts.register_name(*insts.split(x.address)) or "").endswith("Queue")
    ]


def test_each_stream_mutation_is_caught_by_its_rule(run1x1):
    m, outdir, _ = run1x1
    before = _digests(outdir)
    rows = {name: (expect, got) for name, expect, got in m.table(only=STREAM_ROWS)}
    assert len(rows) == len(STREAM_ROWS)
    # the mutations work on copies: the compiler's folder is as it wrote it
    assert _digests(outdir) == before
    for name, (expect, got) in rows.items():
        if expect.startswith("harmless"):
            assert got == "same C", (name, got)
        else:
            assert got.startswith(expect.split(":")[0] + ": "), (name, expect, got)
    got = {name.split(" (")[0]: g for name, (_, g) in rows.items()}
    stream = "insts_gemm_seg_matmul_int4_packed.bin"
    # the fifth push is dropped by name (the queue holds the four before it); the sync then waits for the
    # token only the dropped task would have issued
    five = got["five tasks pushed onto one channel before a sync"]
    assert re.match(
        rf"dropped: {stream} byte offset \d+: the push onto tile \(0, 0\) S2MM 0 "
        r"\(DMA_S2MM_0_Task_Queue\) finds its task queue full \(4 tasks not completed: ",
        five,
    ), five
    assert "the hardware drops it and its transfer never runs; then hang: " in five
    assert (
        "sync waits for a task-completion token of tile (0, 0) S2MM 0; no task that issues one is "
        "queued there" in five
    )
    # the sync on A's channel waits for ever (its tasks issue no token)
    wrong = got["a sync on the wrong channel"]
    assert wrong.startswith("hang: ") and (
        f"at {stream} byte offset 404: sync waits for a task-completion token of tile (0, 0) MM2S 0; "
        "no task that issues one is queued there" in wrong
    ), wrong
    # awaiting A's task returns early: C's task still writes host memory
    early = got["the wrong task awaited"]
    assert (
        "while the task pushed at byte offset 140 on tile (0, 0) S2MM 0 still writes host memory: "
        "the host would read its output too soon" in early
    ), early
    # the second piece written into BD 0 while the first runs on it
    reused = got["a BD id reused while a task using it is in flight"]
    assert re.search(
        r"byte offset \d+: blockwrite rewrites DMA_BD0_0 of tile \(0, 0\) while the task pushed at "
        r"byte offset \d+ on tile \(0, 0\) S2MM 0, which uses BD 0, is still in flight",
        reused,
    ), reused


def test_the_stream_mutations_are_what_their_rows_say(run1x1):
    m, _, data = run1x1
    original = insts.decode(data)
    [(_, c_push)] = [
        (i, x) for i, x in _queue_writes(original) if insts.field(x.words[4], 31, 31)
    ]
    length = next(
        x.words[4]
        for x in original.instrs
        if x.op == insts.BLOCKWRITE and x.address == insts.SHIM_BD_BASE
    )
    for count in (4, 5):
        s = insts.decode(m.tasks_before_sync(count)(data))
        pushes = [x for _, x in _queue_writes(s) if x.address == c_push.address]
        ids = [insts.field(x.words[4], 3, 0) for x in pushes]
        tokens = [insts.field(x.words[4], 31, 31) for x in pushes]
        assert len(set(ids)) == count and tokens == [0] * (count - 1) + [1]
        # every push comes before the one sync, the pieces cover C's BD, end to end
        sync = next(i for i, x in enumerate(s.instrs) if x.op == insts.TCT)
        assert all(s.instrs.index(p) < sync for p in pushes)
        bds = {
            (x.address - insts.SHIM_BD_BASE) // 0x20: x.words[4]
            for x in s.instrs
            if x.op == insts.BLOCKWRITE
        }
        plus = {
            (x.address - 4 - insts.SHIM_BD_BASE) // 0x20: x.words[10]
            for x in s.instrs
            if x.op == insts.DDR_PATCH
        }
        assert sum(bds[b] for b in ids) == length
        assert [plus[b] for b in ids] == [
            4 * sum(bds[b] for b in ids[:k]) for k in range(count)
        ]
    # the BD reused: BD 0 written again after the first push and before the second
    s = insts.decode(m.bd_reused_insts(data))
    kinds = [
        "push" if x.op == insts.WRITE and x.address == c_push.address else "bd0"
        for x in s.instrs
        if (x.op == insts.WRITE and x.address == c_push.address)
        or (x.op == insts.BLOCKWRITE and x.address == insts.SHIM_BD_BASE)
    ]
    assert kinds == ["bd0", "push", "bd0", "push"]
    # the sync moved: onto MM2S 0 of the same shim, the original's on S2MM 0
    for mutate, token in (
        (m.sync_wrong_channel_insts, 0),
        (m.await_wrong_task_insts, 1),
    ):
        s = insts.decode(mutate(data))
        [sync] = [x for x in s.instrs if x.op == insts.TCT]
        assert sync.words[2] & 0xFF == 1 and sync.words[3] >> 24 == 0
        a_push = next(
            x
            for _, x in _queue_writes(s)
            if insts.register_name(*insts.split(x.address)) == "DMA_MM2S_0_Task_Queue"
        )
        assert insts.field(a_push.words[4], 31, 31) == token


def test_each_gemv_core_acquire_removed_is_a_race():
    compiler_tools.require()
    from host import sim_mutations

    text, _, _ = sim_mutations.gemv_case()
    assert sim_mutations.core_acquires(text) == sim_mutations.GEMV_CORE_ACQUIRES
    rows = sim_mutations.table("gemv")
    assert len(rows) == sim_mutations.GEMV_CORE_ACQUIRES
    touched = []
    for name, expect, got in rows:
        found = re.match(
            r"race: core tile \(0, 2\) at line \d+ \(func\.call @(\w+), argument (\w+)\) touches \2 "
            r"holding no lock that guards it \((lock \d+ / lock \d+) of tile \(0, 2\)\)",
            got,
        )
        assert found, (name, got)
        touched.append(found.groups())
    # the output chunk's free lock (the drain writes that chunk), then the activations' and the weights'
    # full locks for the first K chunk and for the second: each removal caught at the first call that
    # touches that buffer
    assert [(call, locks) for call, _, locks in touched] == [
        ("gemv_int4_drain", "lock 0 / lock 1"),
        ("gemv_int4_accumulate", "lock 2 / lock 3"),
        ("gemv_int4_accumulate", "lock 4 / lock 5"),
        ("gemv_int4_accumulate", "lock 2 / lock 3"),
        ("gemv_int4_accumulate", "lock 4 / lock 5"),
    ]
    assert (
        len({buf for _, buf, _ in touched}) == 5
    )  # five buffers: ping and pong of each input


# -- the instruction stream's cost over the control path (MODELLED) --------------------------------------


def test_the_stream_cost_is_its_words_at_the_modelled_rate(tmp_path):
    from int4awq.run import sim_costs

    path = tmp_path / "insts_x_seq.bin"
    path.write_bytes(bytes(420))  # run1x1's stream: 105 words
    sim = types.SimpleNamespace(stream_file=str(path))
    words, seconds = sim_costs.stream_cost(sim)
    assert words == 105
    assert seconds == pytest.approx(105 * sim_costs.CONTROL_NS_PER_WORD * 1e-9)
    assert sim_costs.stream_cost(types.SimpleNamespace(stream_file=None)) is None
