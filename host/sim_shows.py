# SPDX-License-Identifier: MIT
"""What the simulator of the compiled design shows of two failures mlir-air documents on NPU2 (issue 51,
"What it shows"; write-up: docs/sim_shows.md). Each case is compiled by aircc + aiecc and simulated from
the NPU instruction stream aiecc wrote (emulator/aiesim, `insts=`), deterministic order and seeded schedules.

1. **The small-herd `[2, 2]` fold** (mlir-air `matrix_multiplication/bfp16/run.py`: under
   runtime_loop_tiling_sizes [2, 2], a herd of fewer than 8 cores with several launch iterations writes only
   the first launch iteration's C). The project's GEMM at a small herd and a launch grid of several
   iterations, compiled under [2, 2] and under [1, 1] (the project's own rule refuses the first and more
   than 2 iterations of the second: both are lifted here, for this probe only). C is filled with a sentinel
   first, so a launch iteration's block that nothing writes shows; the [2, 2] output is also compared bit
   for bit with the [1, 1] one. The report decodes both instruction streams: per shim channel, each task
   pushed (BD id, length, dimensions, repeat count, token) and each sync.
2. **An odd trip count of a ping-ponged loop** (mlir-air `kernel_registry/details/EltwiseAdd_bf16.md`, 15
   trips; `fused_decode/fused_decode_qwen.py`, 11 trips padded to 12): emulator/tests/designs/odd_trips.py,
   out = a + b over `trips` rows of 16 words, one row a trip, on one PE. The report gives the rows that
   come back wrong (or the race the simulator names) and the compiled ring: each DMA channel's BD chain
   (the buffer each BD moves) against the order in which the core's body uses the buffers.

    python3 host/sim_shows.py                      # both cases, the default shapes
    python3 host/sim_shows.py --small-herd 256 256 2 2 --odd-trips 3 5 11 12

The default small-herd shapes are herd 2x2 over a [2, 2] launch grid (bfp16/run.py's documented shape), herd
1x2 over [2, 1], and for comparison herd 4x2 over [2, 2], which mlir-air calls safe under [2, 2].

Exit status: 0 the cases ran (whatever they show), 2 no compiler here, 1 a case could not be run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import types

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMULATOR_DIR = os.path.join(REPO, "emulator")
DESIGNS_DIR = os.path.join(EMULATOR_DIR, "tests", "designs")
for _p in (REPO, EMULATOR_DIR, DESIGNS_DIR):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import numpy as np  # noqa: E402
from ml_dtypes import bfloat16  # noqa: E402

from int4awq.design import compiler  # noqa: E402

CACHE = os.path.join(REPO, "build", "sim-shows")
SEEDS = (None, 0, 1)
# C's sentinel: a bf16 bit pattern (about 1.5e16) the simulator never fills a buffer with and the kernel
# does not produce from these inputs
SENTINEL = 0x5A5A
TILE = 64  # the GEMM's tile_m = tile_n


def _seed_name(seed) -> str:
    return "deterministic order" if seed is None else f"seed {seed}"


# -- the instruction stream, decoded -----------------------------------------------------------------


def stream_summary(outdir: str) -> list[str]:
    """Each task push and sync of the instruction streams in a compiler output folder, one line each:
    `@offset (col, row) DIR ch: BD n (len words, d0 wrap/step, d1 wrap/step, d2 step, iteration
    wrap/step), repeat r, token t` and `@offset sync (col, row) DIR ch`."""
    from aiesim import insts as I

    lines = []
    for name in sorted(f for f in os.listdir(outdir) if f.startswith("insts_")):
        stream = I.load(os.path.join(outdir, name))
        lines.append(f"{name}: {len(stream.instrs)} ops, {stream.header['size']} bytes")
        regs: dict = {}
        patches: dict = {}
        for ins in stream.instrs:
            if ins.op == I.TCT:
                w2, w3 = ins.words[2], ins.words[3]
                d = "S2MM" if (w2 & 0xFF) == I.S2MM else "MM2S"
                col, row = (w2 >> 16) & 0xFF, (w2 >> 8) & 0xFF
                lines.append(f"  @{ins.offset:<5} sync ({col}, {row}) {d} {w3 >> 24}")
                continue
            if ins.op == I.DDR_PATCH:
                col, row, off = I.split(ins.words[6])
                bd = (off - I.SHIM_BD_BASE) // 0x20
                patches[(col, row, bd)] = (ins.words[8], ins.words[10])
                continue
            if ins.op == I.BLOCKWRITE:
                writes = [
                    (ins.words[2] + 4 * k, v) for k, v in enumerate(ins.words[4:])
                ]
            elif ins.op in (I.WRITE, I.MASKWRITE):
                writes = [(ins.words[2], ins.words[4])]
            else:
                continue
            for address, value in writes:
                col, row, off = I.split(address)
                regs.setdefault((col, row), {})[off] = value
                kind = I.SHIM_CHANNEL_REGS.get(off)
                if row != 0 or kind is None or kind[1] != "queue":
                    continue
                _, _, direction, ch = kind
                bd = I.field(value, 3, 0)
                base = I.SHIM_BD_BASE + 0x20 * bd
                w = [regs[(col, row)].get(base + 4 * k, 0) for k in range(8)]
                arg, plus = patches.get((col, row, bd), ("?", 0))
                dims = (
                    f"d0 {I.field(w[3], 29, 20)}/{I.field(w[3], 19, 0) + 1}, "
                    f"d1 {I.field(w[4], 29, 20)}/{I.field(w[4], 19, 0) + 1}, "
                    f"d2 step {I.field(w[5], 19, 0) + 1}, "
                    f"iteration {I.field(w[6], 25, 20) + 1}/{I.field(w[6], 19, 0) + 1}"
                    f" from {I.field(w[6], 31, 26)}"
                )
                lines.append(
                    f"  @{ins.offset:<5} push ({col}, {row}) {'S2MM' if direction == I.S2MM else 'MM2S'} "
                    f"{ch}: BD {bd} (arg {arg} + {plus} bytes, {w[0]} words, {dims}), "
                    f"repeat {I.field(value, 23, 16)}, token {I.field(value, 31, 31)}"
                )
    return lines


# -- 1. the small-herd [2, 2] fold -------------------------------------------------------------------


@contextlib.contextmanager
def _limits_lifted():
    """The project refuses a herd under 8 cores with more than 2 launch iterations (and [2, 2] there): this
    probe builds such a module on purpose, so GemmConfig's proven-limit check is lifted while it builds.
    """
    import int4_packed_record as ipr

    saved = ipr.GemmConfig._check_proven_limits
    ipr.GemmConfig._check_proven_limits = lambda self: None
    try:
        yield
    finally:
        ipr.GemmConfig._check_proven_limits = saved


def _gemm_base():
    from int4awq.design.design import DesignConfig

    # the small-herd configuration test_aircc.py holds the fold to (herd 1x2, launch [2, 1], K one L2 tile)
    return DesignConfig(
        m=128,
        k=256,
        n=128,
        gs=128,
        tile_m=TILE,
        tile_n=TILE,
        tile_k_l1=64,
        tile_k_l2=256,
        herd_m=1,
        herd_n=2,
    )


def _kernel_dir(base):
    """The host kernel library's folder, or None when it does not build here (then the cores' calls are
    charged, not computed, and only which blocks of C get written is checked)."""
    from int4awq.errors import ConfigError
    from host.run import build_host_kernel

    try:
        return str(build_host_kernel(base))
    except (ConfigError, OSError) as e:
        print(
            f"  (the host kernel does not build here: {str(e).splitlines()[0][:120]}; C's values are not "
            f"computed, only which blocks are written)",
            flush=True,
        )
        return None


def _sequence_args(outdir: str):
    """The runtime sequence's host arguments as (shape, dtype), read from input_physical.mlir."""
    text = open(os.path.join(outdir, "input_physical.mlir")).read()
    sig = re.search(r"aie\.runtime_sequence @\w+\((.*?)\)\s*\{", text).group(1)
    out = []
    for dims, ty in re.findall(r"memref<([\dx]+)x(\w+)>", sig):
        out.append(
            (
                tuple(int(d) for d in dims.split("x")),
                {"bf16": bfloat16, "i8": np.int8, "i32": np.int32}[ty],
            )
        )
    return out


def small_herd(m=256, n=256, herd_m=2, herd_n=2, seeds=SEEDS, kernels=True) -> dict:
    """Compile the GEMM at (m, n, herd) under [2, 2] and [1, 1] and simulate each from its instruction stream.

    Returns {"launch": (lm, ln), "tiling": {(2, 2) | (1, 1): {"outdir", "streams", "runs": {seed: result}}},
    "same_device": bool, "equal": {seed: bool}} where a result is {"unwritten": [[elements of block
    (i, j) still holding the sentinel]], "leftovers": [...], "hazards": [...]} or {"error": text}.
    """
    import aiesim
    import matmul_int4_packed as mm

    base = _gemm_base()
    with _limits_lifted():
        args = dict(base.builder_args(), m=m, n=n, herd_m=herd_m, herd_n=herd_n)
        module = str(mm.build_module(**args))
    lib = _kernel_dir(base) if kernels else None
    if lib:
        os.environ["AIR_EMU_LIB_PATH"] = lib
    lm, ln = m // (TILE * herd_m), n // (TILE * herd_n)
    bm, bn = TILE * herd_m, TILE * herd_n
    report = {"launch": (lm, ln), "kernels": bool(lib), "tiling": {}}
    inputs = None
    for tiling in ((2, 2), (1, 1)):
        options = dict(mm.backend_options(base), runtime_loop_tiling_sizes=list(tiling))
        _, outdir = compiler.compile_first(
            f"small herd {herd_m}x{herd_n} {list(tiling)}", module, options, CACHE
        )
        text = compiler.generic_form(os.path.join(outdir, "input_physical.mlir"))
        shapes = _sequence_args(outdir)
        if inputs is None:
            inputs = _gemm_inputs(base, m, n, shapes, lib)
        runs = {}
        for seed in seeds:
            bufs = [b.copy() for b in inputs]
            bufs[-1].view(np.uint16)[...] = SENTINEL
            try:
                outs, sim = aiesim.simulate(
                    text, bufs, insts=outdir, seed=seed, run_kernels=bool(lib)
                )
            except (
                aiesim.SimError
            ) as e:  # a hang, a race, a dropped push: the simulator names it
                runs[seed] = {"error": f"{type(e).__name__}: {e}"}
                continue
            c = np.asarray(outs[-1]).view(np.uint16).reshape(m, n)
            runs[seed] = {
                "c": c.copy(),
                "unwritten": [
                    [
                        int(
                            (
                                c[i * bm : (i + 1) * bm, j * bn : (j + 1) * bn]
                                == SENTINEL
                            ).sum()
                        )
                        for j in range(ln)
                    ]
                    for i in range(lm)
                ],
                "leftovers": list(aiesim.leftovers(sim)),
                "hazards": list(aiesim.hazards(sim)),
            }
        report["tiling"][tiling] = {
            "outdir": outdir,
            "streams": stream_summary(outdir),
            "runs": runs,
        }

    def device(t):
        text = open(
            os.path.join(report["tiling"][t]["outdir"], "input_physical.mlir")
        ).read()
        return text.split("aie.runtime_sequence")[0]

    report["same_device"] = device((2, 2)) == device((1, 1))
    report["equal"] = {
        seed: (
            "c" in report["tiling"][(2, 2)]["runs"][seed]
            and "c" in report["tiling"][(1, 1)]["runs"][seed]
            and bool(
                np.array_equal(
                    report["tiling"][(2, 2)]["runs"][seed]["c"],
                    report["tiling"][(1, 1)]["runs"][seed]["c"],
                )
            )
        )
        for seed in seeds
    }
    return report


def _gemm_inputs(base, m, n, shapes, lib):
    """A, W (packed) and C for the sequence's shapes: random activations and weights when the kernel runs,
    else any bytes (the calls are not computed)."""
    if lib:
        from int4awq.formats.quant import random_activations
        from int4awq.formats.weights_file import random_format_weights
        from int4awq.kernel import record

        w = random_format_weights(base.format, base.k, n, base.gs, seed=1)
        a = random_activations(m, base.k, 2)
        cfg = types.SimpleNamespace(
            m=m,
            k=base.k,
            n=n,
            tile_n=base.tile_n,
            tile_k_l1=base.tile_k_l1,
            format=base.format,
        )
        a_p, w_p = record.padded_operands(cfg, a, w)
        return [a_p, w_p.reshape(shapes[1][0]), np.zeros(shapes[2][0], bfloat16)]
    return [np.zeros(shape, dtype) for shape, dtype in shapes]


# -- 2. an odd trip count of a ping-ponged loop ------------------------------------------------------


def odd_trips(trips: int, seeds=SEEDS) -> dict:
    """Compile odd_trips.build(trips) and simulate it from its instruction stream.

    Returns {"outdir", "runs": {seed: {"wrong_rows": [...], "hazards": n} | {"error": text}},
    "unchecked": {"wrong_rows": [...], "rows": {t: the row t that came back}} (the deterministic order with
    the lock-ownership check off: what the compiled design computes), "ring": compiled_ring(outdir)}.
    """
    import aiesim
    import odd_trips as design

    module = str(design.build(trips))
    _, outdir = compiler.compile_first(
        f"odd trips {trips}", module, {"omit_while_true_loop": False}, CACHE
    )
    text = compiler.generic_form(os.path.join(outdir, "input_physical.mlir"))
    a, b = design.inputs(trips)
    expected = (a + b).reshape(trips, design.ROW)
    runs = {}
    for seed in seeds:
        try:
            outs, sim = aiesim.simulate(
                text, [a.copy(), b.copy(), np.full_like(a, -1)], insts=outdir, seed=seed
            )
        except aiesim.SimError as e:
            runs[seed] = {"error": f"{type(e).__name__}: {e}"}
            continue
        got = np.asarray(outs[2]).reshape(trips, design.ROW)
        runs[seed] = {
            "wrong_rows": [
                t for t in range(trips) if not np.array_equal(got[t], expected[t])
            ],
            "hazards": len(aiesim.hazards(sim)),
        }
    return {
        "outdir": outdir,
        "runs": runs,
        "unchecked": _unchecked(text, outdir, a, b, expected),
        "ring": compiled_ring(outdir),
    }


def _unchecked(text, outdir, a, b, expected):
    """The deterministic order with the lock-ownership check off: the output the compiled protocol
    computes when nothing stops it at the first overlap."""
    import aiesim
    from aiesim import insts as I

    design = aiesim.load(aiesim.parse(text))[0]
    sim = aiesim.Simulator(design, aiesim.host_kernels)
    sim.check_ownership = False
    stream = I.for_sequence(outdir, design, design.sequences[0])
    try:
        outs = sim.run([a.copy(), b.copy(), np.full_like(a, -1)], insts=stream)
    except aiesim.SimError as e:
        return {"error": f"{type(e).__name__}: {e}"}
    got = np.asarray(outs[2]).reshape(expected.shape)
    wrong = [t for t in range(len(expected)) if not np.array_equal(got[t], expected[t])]
    # which input row each wrong row's first word came from, where it is a + b of some row
    sums = {int(v): t for t, v in enumerate(expected[:, 0])}
    return {
        "wrong_rows": wrong,
        "came_from": {t: sums.get(int(got[t, 0]), None) for t in wrong},
    }


def _region(text: str, head: str) -> str:
    """The op that starts at `head` (an aie.mem or aie.core of input_physical.mlir), to its closing brace
    (the first line after it indented as deep as the op)."""
    start = text.index(head)
    line_start = text.rindex("\n", 0, start) + 1
    line = text[line_start:start]
    indent = len(line) - len(line.lstrip(" "))
    end = text.index("\n" + " " * indent + "}", start)
    return text[start:end]


def compiled_ring(outdir: str) -> dict:
    """The compute tile's ping-pong as aiecc placed it: each DMA channel's BD chain (BD id -> buffer, in
    chain order, with the locks it acquires / releases), the locks' initial values, and the buffers the
    core's body touches in program order (each loop body and the epilogue), with its lock operations.
    """
    text = open(os.path.join(outdir, "input_physical.mlir")).read()
    inits = dict(
        re.findall(r"%(lock_0_2\w*) = aie\.lock\(%tile_0_2, \d+\) \{init = (\d+)", text)
    )
    ids = dict(re.findall(r"%(lock_0_2\w*) = aie\.lock\(%tile_0_2, (\d+)\)", text))
    mem = _region(text, "aie.mem(%tile_0_2)")
    chains = {}
    channel = None
    pending = []
    for line in mem.splitlines():
        s = re.search(r"aie\.dma_start\((\w+), (\d+)", line)
        if s:
            channel = f"{s.group(1)} {s.group(2)}"
            chains[channel] = []
            continue
        u = re.search(r"aie\.use_lock\(%(\w+), (\w+), ", line)
        if u and channel:
            pending.append(
                f"{'acq' if u.group(2).startswith('Acquire') else 'rel'} {ids[u.group(1)]}"
            )
            continue
        d = re.search(r"aie\.dma_bd\(%(\w+) .*\{bd_id = (\d+)", line)
        if d and channel:
            chains[channel].append((int(d.group(2)), d.group(1), list(pending)))
            pending = []
        if "next_bd" in line and channel and chains[channel]:
            bd, buf, locks = chains[channel][-1]
            chains[channel][-1] = (bd, buf, locks + pending)
            pending = []
    core = _region(text, "aie.core(%tile_0_2)")
    order = []
    for line in core.splitlines():
        u = re.search(r"aie\.use_lock\(%(\w+), (\w+), ", line)
        if u:
            order.append(
                f"{'acq' if u.group(2).startswith('Acquire') else 'rel'} {ids[u.group(1)]}"
            )
        m = re.search(r"memref\.(load|store) .*?%(buf\d+)\[", line)
        if m:
            tag = f"{m.group(1)} {m.group(2)}"
            if tag not in order[-3:]:
                order.append(tag)
        if "cf.cond_br" in line:
            order.append("|")
    return {
        "locks": {ids[k]: int(v) for k, v in inits.items()},
        "chains": chains,
        "core": order,
    }


# -- the report --------------------------------------------------------------------------------------


def print_small_herd(r: dict, herd) -> None:
    lm, ln = r["launch"]
    print(
        f"== small herd {herd[0]}x{herd[1]}, launch grid [{lm}, {ln}] ({lm * ln} launch iterations), "
        f"{'kernels computed' if r['kernels'] else 'kernels charged, not computed'}"
    )
    print(
        "   the device (everything but the runtime sequence) is "
        + ("identical" if r["same_device"] else "DIFFERENT")
        + " under [2, 2] and [1, 1]"
    )
    for tiling, t in r["tiling"].items():
        print(
            f"-- runtime_loop_tiling_sizes {list(tiling)} ({os.path.relpath(t['outdir'], REPO)})"
        )
        for line in t["streams"]:
            print("   " + line)
        for seed, res in t["runs"].items():
            if "error" in res:
                print(f"   {_seed_name(seed)}: {res['error'][:400]}")
                continue
            print(
                f"   {_seed_name(seed)}: sentinel elements left per launch-iteration block "
                f"{res['unwritten']}, leftovers {res['leftovers'] or 'none'}, "
                f"hazards {len(res['hazards'])}"
            )
    print(
        "   [2, 2] output equal to [1, 1] bit for bit: "
        + ", ".join(f"{_seed_name(s)} {v}" for s, v in r["equal"].items())
    )


def print_odd(trips: int, r: dict) -> None:
    print(
        f"== ping-ponged loop of {trips} trips ({os.path.relpath(r['outdir'], REPO)})"
    )
    for seed, res in r["runs"].items():
        if "error" in res:
            print(f"   {_seed_name(seed)}: {res['error'][:300]}")
        else:
            print(
                f"   {_seed_name(seed)}: wrong rows {res['wrong_rows'] or 'none'}"
                + (f", {res['hazards']} hazard(s)" if res["hazards"] else "")
            )
    u = r["unchecked"]
    if "error" in u:
        print(f"   ownership check off: {u['error'][:300]}")
    else:
        print(
            f"   ownership check off, deterministic order: wrong rows {u['wrong_rows'] or 'none'}"
            + (
                f"; row <- the a + b of row: {u['came_from']}"
                if u["wrong_rows"]
                else ""
            )
        )
    ring = r["ring"]
    print(f"   locks (id: init) {ring['locks']}")
    for ch, bds in ring["chains"].items():
        print(
            f"   {ch}: "
            + " -> ".join(
                f"BD {bd} {buf} [{', '.join(locks)}]" for bd, buf, locks in bds
            )
        )
    print("   core: " + " ".join(ring["core"]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--small-herd",
        nargs=4,
        type=int,
        metavar=("M", "N", "HERD_M", "HERD_N"),
        action="append",
        help="the GEMM's M, N and herd (K 256, 64x64 tiles); default 256 256 2 2, 128 128 1 2 and 512 256 4 2 "
        "(8 cores: the size mlir-air calls safe under [2, 2], for comparison)",
    )
    ap.add_argument(
        "--odd-trips", nargs="+", type=int, help="trip counts; default 3 4 5 11 12 15"
    )
    ap.add_argument(
        "--no-kernels",
        action="store_true",
        help="charge the GEMM's kernel calls instead of computing them (only which blocks are written)",
    )
    args = ap.parse_args(argv)
    missing = compiler.tools_missing()
    if missing:
        print(f"sim-shows: needs aircc + aiecc: {missing}", file=sys.stderr)
        return 2
    herds = args.small_herd or [[256, 256, 2, 2], [128, 128, 1, 2], [512, 256, 4, 2]]
    for m, n, hm, hn in herds:
        print_small_herd(
            small_herd(m, n, hm, hn, kernels=not args.no_kernels), (hm, hn)
        )
    for trips in args.odd_trips or [3, 4, 5, 11, 12, 15]:
        print_odd(trips, odd_trips(trips))
    return 0


if __name__ == "__main__":
    sys.exit(main())
