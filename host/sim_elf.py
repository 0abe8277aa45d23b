# SPDX-License-Identifier: MIT
"""What the simulator shows of the ELF flow's second dispatch (issue 51, "What it shows", last part;
write-up: docs/sim_shows.md, section 3).

mlir-air's `programming_examples/llms/smolvla/docs/profile.md` (e972f29, section 2.1 and the appendix's
first trap) reports that a single-launch ELF whose launch runs several M iterations returns the right
output on its first call and stale rows on every later call, while the multi-launch ELFs are right, with
no mechanism pinned. This script takes the project's own module of several launches as the ELF flow
compiles it (o_gemv_ffn_int4.py at host/sim_check.py's small layer: eleven launches, a device each, and a
main device whose runtime sequence configures and runs them in turn) and:

1. checks that aircc's ELF lowering (`--output-format elf`, the flag XRTBackend passes for
   output_format="elf": `airrt-to-npu{output-elf=true}`) gives the same npu.air.mlir as the project's
   compile (`--output-format=none`), so the streams simulated are the ELF flow's;
2. decodes the main instruction stream: each load_pdi (byte offset, PDI id, the device it loads), and per
   launch the ops and the registers they write;
3. runs dispatch 1 launch by launch and lists what each launch leaves on its array when its last sync
   returns (locks away from their initial value, cores mid-loop, tile DMAs mid-chain): what the next
   load_pdi has to reset for the simulator's "fresh array per launch" to be the device's;
4. runs the module for 2 and 3 dispatches (aiesim.simulate) in the deterministic order and under seeds,
   each dispatch's outputs compared with the first's bit for bit;
5. a what-if outside the simulator's rules: every launch finds its tiles as it left them on the dispatch
   before (no reset at load_pdi, as if the firmware elided each reload), to see whether the module
   depends on the reset at all.

    python3 host/sim_elf.py                    # all of it (about a minute; the ELF lowering cached)
    python3 host/sim_elf.py --no-lowering      # skip the aircc --output-format elf comparison

Exit status: 0 ran (whatever it shows), 2 no compiler here, 1 a step could not be run.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMULATOR_DIR = os.path.join(REPO, "emulator")
for _p in (REPO, EMULATOR_DIR):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import numpy as np  # noqa: E402

from int4awq.design import compiler  # noqa: E402

CACHE = os.path.join(REPO, "build", "sim-shows")
SEEDS = (None, 0)


def _seed_name(seed) -> str:
    return "deterministic order" if seed is None else f"seed {seed}"


def layer_case():
    """host/sim_check.py's decoder layer case (o_gemv_ffn_int4.py, hidden 512, eleven launches)."""
    from host import sim_check

    [case] = [
        c
        for c in sim_check.cases()
        if c.name.startswith("decoder layer") and "attention" not in c.name
    ]
    return case


def compiled(case) -> tuple[str, str, str]:
    """(the module's text, the compiler's output folder, input_physical.mlir in generic form)."""
    os.environ["AIR_EMU_LIB_PATH"] = case.library_dir()
    text = str(case.build())
    _, outdir = compiler.compile_first(
        case.name, text, case.options, os.path.join(REPO, "build", "aircc-runs")
    )
    return (
        text,
        outdir,
        compiler.generic_form(os.path.join(outdir, "input_physical.mlir")),
    )


# -- 1. the ELF lowering ------------------------------------------------------------------------------


def _no_locations(path: str) -> list[str]:
    with open(path) as f:
        return [
            re.sub(r"\s*loc\([^)]*\)", "", line)
            for line in f
            if not line.startswith("#loc")
        ]


def _env() -> dict:
    """The compiler's environment as compiler.compile_module sets it."""
    env = dict(os.environ)
    aiecc = compiler.find_tool("aiecc")
    env["PATH"] = os.path.dirname(aiecc) + os.pathsep + env.get("PATH", "")
    if not os.path.isdir(env.get("PEANO_INSTALL_DIR", "")):
        env.pop("PEANO_INSTALL_DIR", None)
    return env


def elf_lowering(
    module_text: str, options: dict, outdir: str, with_insts: bool = False
) -> dict:
    """aircc with `--output-format elf` (XRTBackend's flag for output_format="elf") down to npu.air.mlir,
    compared with the project's compile (`--output-format=none`) line by line, locations dropped.
    aircc's own aiecc step then stops (no Peano here to build the cores); the lowering is done by then.
    with_insts: aiecc then places it and writes every sequence's instructions there too (as the project's
    compile does). Cached in build/sim-shows/elf-<key>."""
    flags = compiler.aircc_flags(options)
    key = hashlib.sha256((module_text + "\0" + " ".join(flags)).encode()).hexdigest()[
        :16
    ]
    work = os.path.join(CACHE, f"elf-{key}")
    npu = os.path.join(work, "npu.air.mlir")
    if not os.path.exists(npu):
        os.makedirs(work, exist_ok=True)
        with open(os.path.join(work, "air.mlir"), "w") as f:
            f.write(module_text)
        r = subprocess.run(
            [
                compiler.find_tool("aircc"),
                *flags,
                "--tmpdir",
                "aircc_tmp",
                "--output-format",
                "elf",
                "--emit-txn-cpp",
                "air.mlir",
            ],
            cwd=work,
            capture_output=True,
            text=True,
            env=_env(),
            check=False,
        )
        with open(os.path.join(work, "aircc.log"), "w") as f:
            f.write(r.stdout + r.stderr)
        made = os.path.join(work, "aircc_tmp", "npu.air.mlir")
        if not os.path.exists(made):
            raise compiler.CompileError(
                f"aircc --output-format elf: {compiler.first_error(r.stdout + r.stderr)}"
            )
        shutil.copy(made, npu)
        shutil.rmtree(os.path.join(work, "aircc_tmp"), ignore_errors=True)
    if with_insts and not os.path.exists(os.path.join(work, "input_physical.mlir")):
        # aiecc as compiler.compile_module runs it: the placed design and every sequence's instructions
        r = subprocess.run(
            [
                compiler.find_tool("aiecc"),
                "--no-progress",
                "--tmpdir",
                "aiecc_tmp",
                "-O",
                "3",
                "-j",
                "0",
                "--get-npu-insts",
                "--npu-insts-name=insts_{0}.bin",
                "--get=input_physical.mlir",
                "npu.air.mlir",
            ],
            cwd=work,
            capture_output=True,
            text=True,
            env=_env(),
            check=False,
        )
        with open(os.path.join(work, "aiecc.log"), "w") as f:
            f.write(r.stdout + r.stderr)
        physical = os.path.join(work, "aiecc_tmp", "input_physical.mlir")
        if os.path.exists(physical):
            shutil.copy(physical, os.path.join(work, "input_physical.mlir"))
        if r.returncode != 0 or not os.path.exists(
            os.path.join(work, "input_physical.mlir")
        ):
            raise compiler.CompileError(
                f"aiecc (ELF lowering): {compiler.first_error(r.stdout + r.stderr)}"
            )
        shutil.rmtree(os.path.join(work, "aiecc_tmp"), ignore_errors=True)
    a = _no_locations(os.path.join(outdir, "npu.air.mlir"))
    b = _no_locations(npu)
    differ = sum(x != y for x, y in zip(a, b)) + abs(len(a) - len(b))
    return {
        "work": work,
        "folder": os.path.relpath(work, REPO),
        "main_device": "aiex.configure" in "".join(b)
        and "aiex.configure" not in "".join(a),
        "lines": len(b),
        "differ": differ,
        "load_pdi": sum("load_pdi" in x for x in b),
        "reset_devices": sorted(
            set(re.findall(r"aie\.device\(npu2\) @(\w+_reset)\b", "".join(b)))
        ),
    }


# -- 2. the main stream -------------------------------------------------------------------------------


def main_stream(outdir: str, text: str) -> dict:
    """The main instruction stream decoded: each load_pdi (offset, PDI id, device) and per launch its ops,
    the tiles and registers they write, its syncs; `same`: each launch's ops are its own stream's word for
    word (insts.check_main)."""
    import aiesim
    from aiesim import insts as I

    designs = aiesim.load(aiesim.parse(text))
    runs = aiesim._main_runs(designs)
    main_dev, main_seq = I.main_of(designs)
    path = I.stream_path(outdir, main_dev, main_seq)
    stream = I.load(path)
    by_name = {d.name: d for d in designs}
    own = [
        I.for_sequence(outdir, by_name[dev], aiesim._sequence(by_name[dev], seq))
        for dev, seq, _ in runs
    ]
    I.check_main(outdir, main_dev, main_seq, own)  # InstsError if any launch differs
    pdis = [ins for ins in stream.instrs if ins.op == I.LOAD_PDI]
    launches = []
    for (dev, _, _), ins, seg in zip(runs, pdis, I.main_segments(stream)):
        regs, tiles, syncs, counts = set(), set(), [], {}
        for op in seg:
            counts[op.name] = counts.get(op.name, 0) + 1
            if op.op == I.TCT:
                w2, w3 = op.words[2], op.words[3]
                d = "S2MM" if (w2 & 0xFF) == I.S2MM else "MM2S"
                syncs.append(
                    (op.offset, (w2 >> 16) & 0xFF, (w2 >> 8) & 0xFF, d, w3 >> 24)
                )
                continue
            address = op.words[6] if op.op == I.DDR_PATCH else op.words[2]
            col, row, off = I.split(address)
            tiles.add((col, row))
            name = I.register_name(col, row, off) or hex(off)
            if op.op == I.BLOCKWRITE:
                name += f"..+{len(op.words) - 5}"
            regs.add(("patch " if op.op == I.DDR_PATCH else "") + name)
        launches.append(
            {
                "device": dev,
                "offset": ins.offset,
                "pdi_id": ins.words[0] >> 16,
                "pdi_words": list(ins.words[1:]),
                "ops": len(seg),
                "counts": counts,
                "tiles": sorted(tiles),
                "registers": sorted(regs),
                "syncs": syncs,
                "end": seg[-1].offset + 4 * len(seg[-1].words) if seg else ins.offset,
            }
        )
    return {
        "path": os.path.relpath(path, REPO),
        "ops": len(stream.instrs),
        "size": stream.header["size"],
        "launches": launches,
    }


# -- 3. what each launch leaves behind ----------------------------------------------------------------


def _state(sim) -> dict:
    from aiesim.design import S2MM

    locks = [
        f"{lk.describe()}: {lk.value} (init {lk.init})"
        for lk in sim.design.locks
        if lk.value != lk.init
    ]
    cores = [f"{c.name}: {c.waiting or 'ready'}" for c in sim.cores if not c.done]
    dmas = []
    for a in sim.dma.values():
        ch = a.ch
        if ch.first is None or a.done:  # shim channels: their tasks; ended chains
            continue
        if a.bd is not ch.first or a.stage != "acquire" or a.received:
            d = "S2MM" if ch.direction == S2MM else "MM2S"
            dmas.append(
                f"{ch.tile.name} {d} {ch.index}: on BD {a.bd.bd_id} of a chain starting at BD "
                f"{ch.first.bd_id} ({a.waiting or a.stage})"
            )
    return {"locks": locks, "cores": cores, "dmas": dmas}


def _launch_sims(text, arrays, outdir, seed=None):
    """The main sequence's launches, each on a Simulator of its own device (as aiesim.simulate builds
    them): [(device, sequence index, argmap, stream, Simulator)]."""
    import aiesim
    from aiesim import insts as I

    designs = aiesim.load(aiesim.parse(text))
    by_name = {d.name: d for d in designs}
    out = []
    for dev, seq, argmap in aiesim._main_runs(designs):
        design = by_name[dev]
        index = next(i for i, q in enumerate(design.sequences) if q.name == seq)
        stream = I.for_sequence(outdir, design, design.sequences[index])
        sim = aiesim.Simulator(design, aiesim.host_kernels, seed=seed)
        out.append((dev, index, argmap, stream, sim))
    return out


def _dispatch(launches, arrays):
    """One dispatch of the main sequence over the launches' Simulators (each run again if run before),
    the host arrays carried from launch to launch; the arrays after the last launch."""
    arrays = list(arrays)
    for dev, index, argmap, stream, sim in launches:
        outs = sim.run([arrays[a] for a in argmap], sequence=index, insts=stream)
        for a, out in zip(argmap, outs):
            arrays[a] = np.array(out)
    return arrays


def end_states(text, arrays, outdir) -> list[tuple[str, dict]]:
    """Dispatch 1 in the deterministic order, launch by launch: what each launch leaves on its array when
    its stream's last sync returns."""
    launches = _launch_sims(text, arrays, outdir)
    _dispatch(launches, arrays)
    return [(dev, _state(sim)) for dev, _, _, _, sim in launches]


def summary(lines: list[str]) -> list[tuple[str, int]]:
    """The lines with tiles, SSA names, buffers and offsets abstracted (a core tile, a memtile), each
    pattern with how many lines have it, in first-seen order."""
    out: dict[str, int] = {}
    for x in lines:
        x = re.sub(r"tile \(\d+, 1\)", "memtile (c, 1)", x)
        x = re.sub(r"tile \(\d+, [2-9]\)", "tile (c, r)", x)
        x = re.sub(r" \(%\d+\)", "", x)
        x = re.sub(r"line \d+", "line L", x)
        x = re.sub(r"\bbuf\d+", "bufN", x)
        x = re.sub(r"(word|byte) offset \d+", r"\1 offset O", x)
        out[x] = out.get(x, 0) + 1
    return list(out.items())


# -- 4. several dispatches ----------------------------------------------------------------------------


def _differ(a, b) -> int:
    a = np.asarray(a).view(np.uint8).reshape(-1)
    b = np.asarray(b).view(np.uint8).reshape(-1)
    return int((a != b).sum())


def dispatches(text, arrays, outdir, outputs, n: int, seeds=SEEDS) -> dict:
    """aiesim.simulate(..., dispatches=n) under each schedule: per seed, the bytes of the outputs each
    later dispatch gives other than the first's (a list of n - 1 counts), the leftovers and hazards; or
    the error."""
    import aiesim

    res = {}
    for seed in seeds:
        try:
            _, sim = aiesim.simulate(
                text,
                [a.copy() for a in arrays],
                insts=outdir,
                seed=seed,
                dispatches=n,
            )
        except (aiesim.Hang, aiesim.SimError) as e:
            res[seed] = {"error": str(e).splitlines()[0]}
            continue
        first = sim.dispatch_outputs[0]
        res[seed] = {
            "dispatches": len(sim.dispatch_outputs),
            "differ": [
                sum(_differ(first[i], later[i]) for i in outputs)
                for later in sim.dispatch_outputs[1:]
            ],
            "leftovers": aiesim.leftovers(sim),
            "hazards": aiesim.hazards(sim),
            "first": [np.array(first[i]) for i in outputs],
        }
    return res


# -- 5. the what-if: no reset at load_pdi -------------------------------------------------------------


def carried(text, arrays, outdir, outputs, n: int, seed=None) -> dict:
    """NOT the simulator's rule: every launch runs again on its own Simulator, finding its tiles (locks,
    cores mid-loop, BD chains, shim registers and tokens) as it left them on the dispatch before, as if
    each load_pdi configured nothing. Per later dispatch, the output bytes other than the first's; or the
    error."""
    import aiesim

    launches = _launch_sims(text, arrays, outdir, seed)
    per = []
    try:
        for _ in range(n):
            per.append(_dispatch(launches, [a.copy() for a in arrays]))
    except (aiesim.Hang, aiesim.SimError) as e:
        return {
            "error": f"dispatch {len(per) + 1}: {str(e).splitlines()[0]}",
            "differ": [],
        }
    left = [
        f"{dev}: {x}"
        for dev, _, _, _, sim in launches
        for x in sim.leftovers() + sim.main.leftovers()
    ]
    return {
        "differ": [
            sum(_differ(per[0][i], later[i]) for i in outputs) for later in per[1:]
        ],
        "leftovers": left,
    }


# -- 6. a single-launch module in the ELF flow ---------------------------------------------------------


def single_launch(n: int = 2, seeds=SEEDS) -> dict:
    """The project's GEMM at herd 1x2 over a launch grid [2, 1] (two M launch iterations, one launch:
    host/sim_shows.py's small-herd shape) under runtime_loop_tiling_sizes [1, 1], compiled twice: as the
    project compiles it (one device, its own runtime sequence: no load_pdi, so n dispatches run on one
    array, everything carried) and in the ELF flow (aircc --output-format elf adds a main device whose
    sequence configures the one device and runs it: a load_pdi of the same PDI at the start of every
    dispatch, which the simulator takes to reset the array). Each simulated for n dispatches; per
    (form, seed) the output bytes each later dispatch gives other than the first's, or the error, and
    whether the two forms' first dispatches agree."""
    import aiesim
    import matmul_int4_packed as mm
    from host import sim_shows

    base = sim_shows._gemm_base()
    with sim_shows._limits_lifted():
        module = str(
            mm.build_module(
                **dict(base.builder_args(), m=256, n=128, herd_m=1, herd_n=2)
            )
        )
    lib = sim_shows._kernel_dir(base)
    if lib:
        os.environ["AIR_EMU_LIB_PATH"] = lib
    options = dict(mm.backend_options(base), runtime_loop_tiling_sizes=[1, 1])
    _, plain = compiler.compile_first(
        "small herd 1x2 [1, 1]", module, options, sim_shows.CACHE
    )
    lo = elf_lowering(module, options, plain, with_insts=True)
    shapes = sim_shows._sequence_args(plain)
    inputs = sim_shows._gemm_inputs(base, 256, 128, shapes, lib)
    out = {"lowering": lo, "runs": {}, "main_stream": None}
    from aiesim import insts as I

    mains = [f for f in os.listdir(lo["work"]) if f.startswith("insts_main")]
    if mains:
        st = I.load(os.path.join(lo["work"], mains[0]))
        out["main_stream"] = {
            "file": mains[0],
            "ops": len(st.instrs),
            "load_pdi": [
                (i.offset, i.words[0] >> 16) for i in st.instrs if i.op == I.LOAD_PDI
            ],
        }
    firsts = {}
    for form, folder in (("one device", plain), ("ELF main", lo["work"])):
        text = compiler.generic_form(os.path.join(folder, "input_physical.mlir"))
        for seed in seeds:
            try:
                _, sim = aiesim.simulate(
                    text,
                    [b.copy() for b in inputs],
                    insts=folder,
                    seed=seed,
                    dispatches=n,
                    run_kernels=bool(lib),
                )
            except (aiesim.Hang, aiesim.SimError) as e:
                out["runs"][(form, seed)] = {"error": str(e).splitlines()[0]}
                continue
            first = sim.dispatch_outputs[0]
            firsts[(form, seed)] = np.array(first[-1])
            out["runs"][(form, seed)] = {
                "differ": [
                    _differ(first[-1], later[-1]) for later in sim.dispatch_outputs[1:]
                ],
                "leftovers": aiesim.leftovers(sim),
            }
    vals = list(firsts.values())
    out["c_nonzero"] = int(np.count_nonzero(vals[0].view(np.uint16))) if vals else 0
    out["forms_agree"] = all(_differ(vals[0], v) == 0 for v in vals[1:])
    return out


# -- the report ---------------------------------------------------------------------------------------


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--no-lowering",
        action="store_true",
        help="skip the aircc --output-format elf comparison (about 25 s the first time)",
    )
    ap.add_argument(
        "--seeds",
        type=int,
        nargs="*",
        default=[0],
        help="seeds besides the deterministic order",
    )
    args = ap.parse_args(argv)
    missing = compiler.tools_missing()
    if missing:
        print(f"sim_elf: needs the compiler: {missing}", file=sys.stderr)
        return 2
    case = layer_case()
    module_text, outdir, text = compiled(case)
    arrays = case.inputs()
    print(f"{case.name}\n  compiled: {os.path.relpath(outdir, REPO)}")
    if not args.no_lowering:
        lo = elf_lowering(module_text, case.options, outdir)
        print(
            f"  aircc --output-format elf ({lo['folder']}): npu.air.mlir {lo['lines']} lines, "
            f"{lo['differ']} differ from the project's compile; load_pdi in it: {lo['load_pdi']}; "
            f"reset clones: {lo['reset_devices'] or 'none'}"
        )
    ms = main_stream(outdir, text)
    print(f"\nmain stream {ms['path']}: {ms['ops']} ops, {ms['size']} bytes")
    for k, ln in enumerate(ms["launches"], 1):
        print(
            f"  launch {k} @{ln['device']}: load_pdi at byte {ln['offset']} (PDI id {ln['pdi_id']}, "
            f"size/address words {ln['pdi_words']}), then {ln['ops']} ops {ln['counts']} up to byte "
            f"{ln['end']}, shims {ln['tiles']}"
        )
        print(f"      registers: {', '.join(ln['registers'])}")
        print(
            "      syncs: "
            + ", ".join(f"@{o} ({c}, {r}) {d} {ch}" for o, c, r, d, ch in ln["syncs"])
        )
    print(
        "\nleft on each launch's array when its last sync returns (dispatch 1, deterministic order):"
    )
    for dev, st in end_states(text, arrays, outdir):
        print(
            f"  @{dev}: {len(st['locks'])} locks off their initial value, {len(st['cores'])} cores "
            f"running, {len(st['dmas'])} tile DMAs mid-chain"
        )
        for x, k in summary(st["locks"] + st["cores"] + st["dmas"]):
            print(f"      {k:3d} x {x}")
    seeds = [None, *args.seeds]
    for n in (2, 3):
        print(f"\n{n} dispatches (aiesim.simulate):")
        for seed, r in dispatches(text, arrays, outdir, case.outputs, n, seeds).items():
            if "error" in r:
                print(f"  {_seed_name(seed)}: {r['error']}")
                continue
            print(
                f"  {_seed_name(seed)}: output bytes other than dispatch 1's on dispatches 2..{n}: "
                f"{r['differ']}; leftovers {r['leftovers'] or 'none'}; hazards {r['hazards'] or 'none'}"
            )
    print(
        "\nwhat-if, no reset at any load_pdi (each launch on its tiles as it left them):"
    )
    for seed in seeds:
        r = carried(text, arrays, outdir, case.outputs, 3, seed)
        print(
            f"  {_seed_name(seed)}, 3 dispatches: "
            + (
                r["error"]
                if "error" in r
                else f"output bytes other than dispatch 1's: {r['differ']}; leftovers "
                f"{r['leftovers'] or 'none'}"
            )
        )
    print(
        "\na single-launch module in the ELF flow (GEMM herd 1x2, launch [2, 1], tiling [1, 1]):"
    )
    r = single_launch(3, seeds)
    lo = r["lowering"]
    print(
        f"  aircc --output-format elf ({lo['folder']}): {lo['differ']} lines of npu.air.mlir differ; a main "
        f"device added: {lo['main_device']}; reset clones: {lo['reset_devices'] or 'none'}"
    )
    if r["main_stream"]:
        ms = r["main_stream"]
        print(f"  {ms['file']}: {ms['ops']} ops, load_pdi (byte, id): {ms['load_pdi']}")
    for (form, seed), x in r["runs"].items():
        print(
            f"  {form}, {_seed_name(seed)}, 3 dispatches: "
            + (
                x["error"]
                if "error" in x
                else f"C bytes other than dispatch 1's: {x['differ']}; leftovers {x['leftovers'] or 'none'}"
            )
        )
    print(
        f"  the two forms' first dispatches agree bit for bit: {r['forms_agree']} (C: {r['c_nonzero']} "
        f"nonzero elements)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
