# SPDX-License-Identifier: MIT
"""`make aircc-check`: every design this project builds, through the real compiler.

For each design (the GEMM at every make target and format, the decode GEMV, the bring-up probes, and with
--all every configs.json default), the printed module goes through

1. aircc's AIR pipeline in air-opt (int4awq/design/compiler.py): what the passes decided (L2 splits, ping-pong,
   allocs sunk into loops), compared with what the emulator decided for the same module; and
2. aircc + aiecc with the design's own XRTBackend options, down to the NPU instruction stream: a design
   that does not compile fails here, naming the tool's first error; the runtime sequence aircc wrote is
   run against DDR (int4awq/design/runtime_sequence.py): every element of C written once, A and W read as the
   design means.

Exit status: 0 when every design compiles and agrees, 1 when one does not, 2 when the tools are missing.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import subprocess
import sys
import time
from collections import Counter
from typing import Callable

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMULATOR_DIR = os.path.join(REPO, "emulator")
if REPO not in sys.path:
    sys.path.insert(0, REPO)

import numpy as np  # noqa: E402

from int4_packed_record import TokenConfig  # noqa: E402
from int4awq.design import compiled, compiler, runtime_sequence  # noqa: E402
from int4awq.errors import ConfigError  # noqa: E402

# q_proj's configuration with A resident (n_per_segment), which this check and host/bench.py --sim run
RESIDENT_NPS = 4
RESIDENT_QPROJ = f"N_PER_SEGMENT={RESIDENT_NPS}"
# The GEMM's make targets, and the host/run.py option -> DesignConfig field of the line each runs.
MAKE_TARGETS = [
    "run1x1",
    "run2x4",
    "run8x4",
    "run_llama_qproj",
    "run_llama_qproj_seq32",
    "run_llama_down",
]
_INT_OPTIONS = {
    "--m": "m",
    "--k": "k",
    "--n": "n",
    "--gs": "gs",
    "--tile-m": "tile_m",
    "--tile-n": "tile_n",
    "--tile-k-l1": "tile_k_l1",
    "--tile-k-l2": "tile_k_l2",
    "--herd-m": "herd_m",
    "--herd-n": "herd_n",
    "--n-per-segment": "n_per_segment",
}


def make_target_config(target: str, *variables: str):
    """The DesignConfig a make target runs, from the host/run.py line of `make -n` (nothing is run)."""
    from int4awq.design.design import DesignConfig

    res = subprocess.run(
        ["make", "-n", "-C", REPO, target, "BACKEND=emu", *variables],
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        raise ConfigError(f"make -n {target}: {res.stdout + res.stderr}")
    [line] = [ln for ln in res.stdout.splitlines() if "host/run.py" in ln]
    words = shlex.split(line)
    pairs = list(zip(words, words[1:]))
    fields = {_INT_OPTIONS[w]: int(v) for w, v in pairs if w in _INT_OPTIONS}
    fields.update({"format": v for w, v in pairs if w == "--format"})
    return DesignConfig(**fields)


@dataclasses.dataclass
class Design:
    name: str
    build: Callable[[], object]  # the AIR module
    options: dict  # XRTBackend keyword arguments
    outputs: tuple[int, ...] = (2,)  # the host arguments the design writes (C)
    # host arguments the design writes in part, the rest the host's (the attention launch's q buffer)
    inouts: tuple[int, ...] = ()
    ddr_bytes: int | None = None  # what the performance model counts per dispatch
    launch_iterations: int = 1
    # the launches with a chunk loop aircc should ping-pong (the GEMM's or a GEMV's; 0: none)
    chunk_loops: int = 1
    # minutes and gigabytes to compile: make aircc-check runs it, tests/design/test_aircc.py does not
    heavy: bool = False

    def text(self) -> str:
        return str(self.build())


def _written(cfg, first: str) -> dict:
    """A module's outputs (every buffer from `first` on: intermediates and results) and in-outs (the
    attention launch's q buffer, whose ctx the host writes), as Design takes them."""
    names = [n for n, _ in cfg.buffers()]
    after = range(names.index(first), len(names))
    # the attention's q buffer (ctx), and a token module's hidden rows and attention outputs (row 0 the
    # host's: the embedding, or the previous dispatch's rows)
    host_rows = (
        ("q_attn", "hidden", "attn_next")
        if isinstance(cfg, TokenConfig)
        else ("q_attn",)
    )
    inouts = tuple(i for i in after if names[i] in host_rows)
    return dict(outputs=tuple(i for i in after if i not in inouts), inouts=inouts)


def _config_design(name: str, cfg) -> Design:
    if type(cfg).__name__ == "GemvConfig":
        import matvec_int4_packed as builder
    else:
        import matmul_int4_packed as builder
    return Design(
        name,
        lambda: builder.build_module(**cfg.builder_args()),
        builder.backend_options(cfg),
        ddr_bytes=cfg.ddr_bytes(),
        launch_iterations=(
            cfg.launch_n if hasattr(cfg, "launch_n") else int(np.prod(cfg.launch_grid))
        ),
    )


# The chained-GEMV module both checks build (this one and host/sim_check.py): its build_chained_module
# arguments, and the decode configuration of each of its two launches
CHAINED_NAME = "two decode GEMVs chained in one module (build_chained_module)"
CHAINED = dict(m=1, k=512, n1=2048, n2=1024, gs=128, tile_n=32, tile_k_l1=128)


def chained_configs():
    """(first, second) GemvConfig of the CHAINED module's launches: K -> n1, then n1 -> n2."""
    from int4awq.design import gemv

    c = CHAINED
    return tuple(
        gemv.GemvConfig(
            m=c["m"], k=k, n=n, gs=c["gs"], tile_n=c["tile_n"], tile_k_l1=c["tile_k_l1"]
        )
        for k, n in ((c["k"], c["n1"]), (c["n1"], c["n2"]))
    )


def designs(all_configs: bool = False) -> list[Design]:
    """Every design the project builds: make targets (each format at run8x4), the decode GEMV, the bring-up
    probes, and with all_configs every configs.json default."""
    from int4awq.design import gemv
    from int4awq.kernel import record
    from host import kernel_probe as kp
    from host.kernel_probe import GEMV_PROBE_ROWS, PROBE_GEMM, PROBE_GEMV

    out = []
    for target, variables in (
        [(t, ()) for t in MAKE_TARGETS]
        + [("run1x1", ("M=128",))]
        + [("run8x4", (f"FORMAT={fmt}",)) for fmt in record.FORMATS if fmt != "awq"]
    ):
        name = " ".join(["make", target, *variables])
        out.append(_config_design(name, make_target_config(target, *variables)))
    # mlir-air's int4 GEMM API: its consumers' tiles (16 x 16 x 128, herd 8 x 4, tile_k_l2 = K) with the
    # segment walking two M blocks (m_per_segment, unproven on NPU2: docs/design.md#provenance)
    from int4awq.design.design import DesignConfig

    upstream_api = DesignConfig(
        m=256,
        k=256,
        n=128,
        gs=128,
        tile_m=16,
        tile_n=16,
        tile_k_l1=128,
        tile_k_l2=256,
        herd_m=8,
        herd_n=4,
        m_per_segment=2,
    )
    out.append(_config_design("build_module(..., m_per_segment=2)", upstream_api))
    # q_proj with A resident across 4 N blocks, re-sent by the refeed primitive (novel, unproven on NPU2:
    # docs/design.md#a-resident-across-n-blocks-n_per_segment)
    name = f"make run_llama_qproj {RESIDENT_QPROJ}"
    out.append(
        _config_design(name, make_target_config("run_llama_qproj", RESIDENT_QPROJ))
    )
    # a multi-launch module: one device per launch, a main sequence running them in turn, an
    # intermediate through DDR (the shape of issue 44's decoder-layer module)
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "two_launches",
        os.path.join(REPO, "emulator", "tests", "designs", "two_launches.py"),
    )
    two = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(two)
    out.append(
        Design(
            "two launches in one module (emulator/tests/designs/two_launches.py)",
            two.build_module,
            dict(target_device="npu2", omit_while_true_loop=False),
            outputs=(1, 2),
            ddr_bytes=4 * 1024 * 4,  # a read, mid written and read back, out written
        )
    )
    # two of the decode GEMVs chained in one module, the second reading the first's C through DDR, one
    # kernel object (matvec_int4_packed.build_chained_module: issue 44's layer module's GEMV launches)
    import matvec_int4_packed

    first, second = chained_configs()
    out.append(
        Design(
            CHAINED_NAME,
            lambda: matvec_int4_packed.build_chained_module(**CHAINED),
            matvec_int4_packed.backend_options(first),
            outputs=(2, 4),
            # the second reads the first's C back: what each GEMV's model counts, C1 once more
            ddr_bytes=first.ddr_bytes() + second.ddr_bytes(),
            chunk_loops=2,
        )
    )
    # a decoder layer's o_proj + FFN at decode as one module of seven launches (o_gemv_ffn_int4.py, issue
    # 44), Llama-3.2-1B's shapes: AWQ (two kernel objects), and Q4_K_M's types (Q4_K fast mode, Q6_K down)
    import o_gemv_ffn_int4
    from int4awq.design import layer, llama

    layer_designs = []
    for what, formats, next_qkv, head in (
        ("AWQ", ("awq",) * 3, None, None),
        ("Q4_K_M", ("int4_min_bf16", "int4_min_bf16", "int8_triple"), None, None),
        ("AWQ, ending with the next layer's q, k, v", ("awq",) * 3, "awq", None),
        ("AWQ, the last layer, ending with the LM head", ("awq",) * 3, None, "awq"),
    ):
        cfg = layer.llama_layer(formats, next_qkv_format=next_qkv, head_format=head)
        layer_designs.append((what, cfg))
    # Q4_K_M's types (bench.Q4_K_M_MIX), ending with the next layer's q, k (Q4_K) and v (Q6_K) GEMVs and
    # their RoPE, and the last layer's with a Q6_K head
    q4_k_m = (("int4_min_bf16",) * 2 + ("int8_triple",), (32, 32, 16))
    nxt = ((2560, "int4_min_bf16", 32), (512, "int8_triple", 16))
    layer_designs += [
        (
            "Q4_K_M, ending with the next layer's q, k, v",
            layer.default_layer(2048, 8192, *q4_k_m, nxt, layer.LLAMA_ROPE),
        ),
        (
            "Q4_K_M, the last layer, ending with a Q6_K LM head",
            layer.default_layer(2048, 8192, *q4_k_m, head=(128256, "int8_triple", 16)),
        ),
    ]
    # ending with the next layer's attention launch over a cache of 1,024 positions (the token's dispatch
    # as generate runs it)
    layer_designs.append(
        (
            "AWQ, ending with the next layer's q, k, v and attention at context 1024",
            layer.default_layer(
                2048,
                8192,
                ("awq",) * 3,
                next_qkv=((3072, "awq", 128),),
                rope=layer.LLAMA_ROPE,
                context=1024,
            ),
        )
    )
    for what, cfg in layer_designs:
        out.append(
            Design(
                f"decoder layer o_proj + FFN module (o_gemv_ffn_int4.py), {what}",
                lambda c=cfg: o_gemv_ffn_int4.build_module(c),
                o_gemv_ffn_int4.backend_options(cfg),
                # the intermediates and the outputs: every buffer after the inputs
                **_written(cfg, "proj"),
                ddr_bytes=layer.ddr_bytes(cfg),
                chunk_loops=len(
                    cfg.launch_gemvs
                ),  # the element-wise launches have none
            )
        )
    # the module that starts a token: layer 0's norm, q, k, v (fused, N 3072) and RoPE, Llama-3.2-1B's
    # heads; and Q4_K_M's (q and k in Q4_K fast mode, v in Q6_K)
    for what, runs, context in (
        ("AWQ", ((3072, "awq", 128),), 0),
        ("Q4_K_M", ((2560, "int4_min_bf16", 32), (512, "int8_triple", 16)), 0),
        ("AWQ, ending with the attention at context 1024", ((3072, "awq", 128),), 1024),
    ):
        cfg = layer.default_qkv(2048, runs, layer.LLAMA_ROPE, context)
        out.append(
            Design(
                f"the token's first module (o_gemv_ffn_int4.build_qkv_module), {what}",
                lambda c=cfg: o_gemv_ffn_int4.build_qkv_module(c),
                o_gemv_ffn_int4.backend_options(cfg),
                **_written(cfg, "normed"),
                ddr_bytes=layer.ddr_bytes(cfg),
                chunk_loops=len(cfg.qkv),
            )
        )
    # a token's dispatches as generate runs them (generate.LAYERS_PER_DISPATCH layers each): Llama-3.2-1B's
    # 16 layers, the attention over 1,024 positions; in AWQ with an AWQ head, and in Q4_K_M's types
    # (q4_k_m and nxt above) with a Q6_K head; the three distinct modules of each (the first with layer 0's q, k, v
    # and attention, a middle one, the last with the head). Minutes each (make aircc-check only:
    # tests/design/test_aircc.py leaves the heavy designs out)
    from int4awq.run.generate import LAYERS_PER_DISPATCH as PER

    for fmt, types in (
        ("AWQ", dict(qkv=((3072, "awq", 128),), head=(llama.VOCAB, "awq", 128))),
        (
            "Q4_K_M",
            dict(
                formats=q4_k_m[0],
                gss=q4_k_m[1],
                qkv=nxt,
                head=(llama.VOCAB, "int8_triple", 16),
            ),
        ),
    ):
        whole = layer.default_token(2048, 8192, 16, **types)
        groups = TokenConfig.split(whole.first, whole.layers, PER)
        for what, cfg in (
            (f"the first, with layers 0-{PER - 1}", groups[0]),
            (f"a middle one, layers {PER}-{2 * PER - 1}", groups[1]),
            (f"the last, layers {16 - PER}-15 and the LM head", groups[-1]),
        ):
            out.append(
                Design(
                    f"a token's dispatch of {PER} layers (o_gemv_ffn_int4.build_token_module), {fmt}, "
                    f"Llama-3.2-1B, context 1024: {what}",
                    lambda c=cfg: o_gemv_ffn_int4.build_token_module(c),
                    o_gemv_ffn_int4.backend_options(cfg),
                    **_written(cfg, "hidden"),
                    ddr_bytes=layer.ddr_bytes(cfg),
                    chunk_loops=len(cfg.launch_gemvs),
                    heavy=True,
                )
            )
    # decode attention at Llama-3.2-1B's heads (32 over 8 key/value heads of 64), a cache of 1,024 and of
    # 4,096 positions
    for context in (1024, 4096):
        out.append(
            Design(
                f"decode attention (o_gemv_ffn_int4.build_attention_module), 32 / 8 heads of 64, "
                f"context {context}",
                lambda c=context: o_gemv_ffn_int4.build_attention_module(32, 8, 64, c),
                o_gemv_ffn_int4.attention_backend_options(),
                outputs=(2,),
                ddr_bytes=o_gemv_ffn_int4.attention_ddr_bytes(32, 8, 64, context),
            )
        )
    for fmt, gs in record.FORMAT_GS.items():
        cfg = gemv.default_config(1, 2048, 2048, gs, fmt)
        out.append(_config_design(f"make run_llama_decode FORMAT={fmt}", cfg))
    for obj, rows in ((PROBE_GEMM, PROBE_GEMM.tile_m), (PROBE_GEMV, GEMV_PROBE_ROWS)):
        for stage in kp.STAGES:
            probe = kp.Probe(obj, rows, stage)
            args = probe.args()
            out.append(
                Design(
                    f"bring-up probe {probe.name}",
                    lambda p=probe: kp.build_module(p),
                    kp.backend_options(probe),
                    outputs=tuple(range(probe.n_inputs, len(args))),
                    # every buffer crosses DDR once
                    ddr_bytes=sum(
                        int(np.prod(s)) * np.dtype(t).itemsize for _, s, t in args
                    ),
                )
            )
    if all_configs:
        from int4awq.design.sweep import TILE_OPTIONS, load_table

        for row in load_table():
            if row.get("none"):
                continue
            tiles = {k: row[k] for k in TILE_OPTIONS}
            cfg = DesignConfig.padded(
                row["m"], row["k"], row["n"], row["gs"], **tiles, format=row["format"]
            )
            out.append(
                _config_design(
                    f"configs.json {row['projection']} M={row['m']} {row['format']}",
                    cfg,
                )
            )
    return out


# -- what the emulator decided, in the compiler's terms -----------------------------------------------


def emulator_program(module, options: dict):
    """The emulator's static compile of a module with XRTBackend's options: its decisions
    (air/emu/decisions.py) and its NPU2 resource report, built once."""
    from air.emu.engine import Options, Program

    return Program(
        module,
        Options(
            stack_size=options.get("stack_size", 1024),
            omit_pingpong=options.get("omit_pingpong", ""),
            runtime_loop_tiling_sizes=options.get("runtime_loop_tiling_sizes", ()),
            target_device=options.get("target_device", "npu2"),
            num_device_cols=options.get("num_device_cols", 0),
            link=False,
        ),
        check=False,
    )


def emulator_decisions(program) -> dict:
    """The emulator's split and ping-pong decisions, in the form compiled.disagreements compares."""
    from air.emu.decisions import decisions

    return decisions(program)


def traffic_problems(design: Design, npu_text: str) -> list[str]:
    """What the compiled runtime sequence does to DDR against what the design means: every element of an
    output written exactly once per dispatch (in a multi-launch module over all its launches, an output a
    later launch reads written before it is read), every input element read and none written, the bytes moved
    equal to the performance model's count, and no output drained through one shim task that folds
    several launch iterations into one await on a single channel (mlir-air bfp16/run.py ~548-575 reports
    that NPU2 then writes only the first launch iteration's output)."""
    out = []
    sequences = runtime_sequence.interpret(npu_text)
    for t in sequences:
        if t.inner:
            continue  # a launch of a multi-launch module: counted in the main sequence that runs it
        # in a multi-launch module an output may be an intermediate a later launch reads, once written
        order = runtime_sequence.order_problems(t, sequences) if t.runs else None
        out += order or []
        moved = 0
        for i, (name, shape, _) in enumerate(t.args):
            r, w = t.reads[i], t.writes[i]
            moved += t.bytes_read(i) + t.bytes_written(i)
            if i in design.inouts:
                if (w > 1).any() or ((w == 0) & (r == 0)).any():
                    out.append(
                        f"{t.name}: in-out {name} {list(shape)}: {int((w > 1).sum())} elements written "
                        f"more than once, {int(((w == 0) & (r == 0)).sum())} neither written nor read"
                    )
            elif i in design.outputs:
                if r.any() and order is None:
                    out.append(f"{t.name}: output {name} is read from DDR")
                if (w != 1).any():
                    out.append(
                        f"{t.name}: output {name} {list(shape)}: {int((w == 0).sum())} elements never "
                        f"written, {int((w > 1).sum())} written more than once (at most {int(w.max())} times)"
                    )
                tasks = t.started.get(name, 0)
                if (
                    len(t.channels.get(name, ())) == 1
                    and tasks < design.launch_iterations
                ):
                    out.append(
                        f"{t.name}: output {name} drains {design.launch_iterations} launch iterations "
                        f"through one shim channel in {tasks} task(s): the shim-BD fold mlir-air's "
                        f"bfp16/run.py (~548-575) reports writes only the first launch iteration's "
                        f"output on NPU2 (herds 2x2, 2x1, 1x2 under [2, 2])"
                    )
            else:
                if w.any():
                    out.append(f"{t.name}: input {name} is written")
                if (r == 0).any():
                    out.append(
                        f"{t.name}: input {name} {list(shape)}: {int((r == 0).sum())} elements never read"
                    )
        if design.ddr_bytes is not None and moved != design.ddr_bytes:
            out.append(
                f"{t.name}: the runtime sequence moves {moved} bytes, the model counts {design.ddr_bytes}"
            )
    return out


# -- the resource model against the compiled design -----------------------------------------------------


# What each kind of tile is compared by: DMA channels in use, BDs (a memtile's by channel parity), locks,
# the largest lock value, and a memtile's buffer bytes.
RESOURCE_FIELDS = {
    "compute": ("S2MM", "MM2S", "BDs", "locks", "lock value"),
    "memtile": ("S2MM", "MM2S", "BDs even", "BDs odd", "locks", "lock value", "bytes"),
    "shim": ("S2MM", "MM2S"),
}


def emulator_tiles(report) -> dict[str, Counter]:
    """kind -> multiset of the emulator's per-tile figures (RESOURCE_FIELDS); a herd's row once."""
    out = {k: Counter() for k in RESOURCE_FIELDS}
    for t in report.tiles:
        if t.kind == "compute":
            row = (len(t.s2mm), len(t.mm2s), t.bds, t.locks, t.lock_value)
        elif t.kind == "memtile":
            row = (len(t.s2mm), len(t.mm2s), *t.parity, t.locks, t.lock_value, t.bytes)
        else:
            row = (len(t.s2mm), len(t.mm2s))
        out[t.kind][row] += 1
    return out


def compiler_tiles(physical_text: str) -> dict[str, Counter]:
    """kind -> multiset of the compiled design's per-tile figures (tiles in use; compute rows once)."""
    out = {k: Counter() for k in RESOURCE_FIELDS}
    for t in compiled.tile_resources(physical_text).values():
        if t.kind == "compute" and t.core:
            row = (
                len(t.s2mm),
                len(t.mm2s),
                len(t.bd_ids),
                t.locks,
                t.largest_lock_init,
            )
        elif t.kind == "memtile" and (t.buffers or t.bd_ids):
            row = (
                len(t.s2mm),
                len(t.mm2s),
                *t.bds_by_parity,
                t.locks,
                t.largest_lock_init,
                sum(n for _, n, _ in t.buffers),
            )
        elif t.kind == "shim" and (t.s2mm or t.mm2s):
            row = (len(t.s2mm), len(t.mm2s))
        else:
            continue
        out[t.kind][row] += 1
    return out


def resource_differences(emulator: dict, compiler_: dict) -> list[str]:
    """Where the emulator's resource table and the compiled design differ: compute tiles by the set of
    distinct rows (the emulator prints one row per herd), memtiles and shims tile by tile as multisets.
    """
    out = []
    for kind, fields in RESOURCE_FIELDS.items():
        e, c = emulator[kind], compiler_[kind]
        same = set(e) == set(c) if kind == "compute" else e == c
        if not same:
            fmt = lambda rows: "; ".join(  # noqa: E731
                f"{n} x ({', '.join(f'{f} {v}' for f, v in zip(fields, r))})"
                for r, n in sorted(rows.items())
            )
            out.append(f"{kind} tiles: compiler {fmt(c)}; emulator {fmt(e)}")
    return out


@dataclasses.dataclass
class Result:
    design: Design
    decisions: compiled.AirDecisions | None = None
    disagree: list[str] = dataclasses.field(default_factory=list)
    compiled: compiler.Compiled | None = None
    traffic: list[str] = dataclasses.field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and not self.disagree and not self.traffic


def check(
    design: Design, outdir: str | None, compile_it: bool = True, compare: bool = True
) -> Result:
    """One design through the compiler. compare: also set the emulator's decisions beside aircc's (needs
    the emulator's `air` package imported, not mlir-air's)."""
    t0 = time.perf_counter()
    res = Result(design)
    try:
        module = design.build()
        text = str(module)
        pp = design.options.get("omit_pingpong", "")
        res.decisions = compiled.air_decisions(
            text,
            device=compiler.target_device(design.options),
            omit_pingpong="all" if pp is True else pp,
        )
        program = emulator_program(module, design.options) if compare else None
        if compare:
            res.disagree = compiled.disagreements(
                res.decisions, emulator_decisions(program)
            )
        if compile_it:
            res.compiled = compiler.compile_module(text, design.options, outdir)
            res.traffic = traffic_problems(design, res.compiled.text("npu.air.mlir"))
            if compare:
                res.disagree += resource_differences(
                    emulator_tiles(program.resources),
                    compiler_tiles(res.compiled.text("input_physical.mlir")),
                )
    except (compiler.CompileError, ConfigError, runtime_sequence.NotInterpreted) as e:
        res.error = str(e)
    res.seconds = time.perf_counter() - t0
    return res


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "=_-" else "_" for c in name).strip("_")


def main(argv=None) -> int:
    sys.path.insert(
        0, EMULATOR_DIR
    )  # the emulator's air package: its decisions are compared
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--all", action="store_true", help="also every configs.json default"
    )
    ap.add_argument("--only", help="only the designs whose name contains this")
    ap.add_argument(
        "--no-compile", action="store_true", help="air-opt only: no aircc + aiecc"
    )
    ap.add_argument("--build-dir", default=os.path.join(REPO, "build", "aircc"))
    args = ap.parse_args(argv)
    missing = compiler.tools_missing(*(("air-opt",) if args.no_compile else ()))
    if missing:
        print(f"aircc-check: {missing}", file=sys.stderr)
        return 2
    todo = [d for d in designs(args.all) if not args.only or args.only in d.name]
    failed = 0
    for i, d in enumerate(todo, 1):
        r = check(d, os.path.join(args.build_dir, _slug(d.name)), not args.no_compile)
        status = "ok  " if r.ok else "FAIL"
        print(f"[{i}/{len(todo)}] {status} {d.name} ({r.seconds:.1f} s)")
        if r.decisions:
            print("  " + r.decisions.summary())
        if r.compiled:
            insts = ", ".join(f"{n} {b} B" for n, b in r.compiled.insts.items())
            print(f"  compiled ({' '.join(r.compiled.flags)}): insts {insts}")
        if r.compiled:
            for text, n in compiler.warnings_in(r.compiled.outdir).items():
                meaning = compiler.warning_meaning(text)
                print(
                    f"  warning ({n} place{'s' if n > 1 else ''} of the design): {text}"
                    + (f"\n    {meaning}" if meaning else "")
                )
        if r.compiled and not r.traffic:
            print(
                "  runtime sequence: every C element written once, inputs read as the model counts"
            )
        for line in r.disagree:
            print(f"  DISAGREES {line}")
        for line in r.traffic:
            print(f"  DDR {line}")
        if r.error:
            print(f"  ERROR {r.error}")
        failed += not r.ok
    print(f"{len(todo) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
