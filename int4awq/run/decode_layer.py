# SPDX-License-Identifier: MIT
"""The attention-free part of one decoder layer of a checkpoint at decode, as one module
(o_gemv_ffn_int4.py): host/run.py --weights F --decoder-layer L --layer-module (make run_llama_decode_layer).

The layer's input x (the residual stream, one token) is seeded random activations. The attention comes
from the reference on the host, at position 0: with one key, softmax is 1 and each query head's output is
its key/value head's value (RoPE and q . k do not enter), so attn = repeat(rms_norm(x) * attn_norm x
dequant(W_v)) over each group of query heads. The module then computes, on the NPU or the emulator,
h = x + attn x W_o, and out = h + down(silu(gate(n)) * up(n)) with n = rms_norm(h) * ffn_norm, gate and up
fused along N at load time (int4awq.formats.fuse).

With --next-qkv the module ends with layer L + 1's attention RMSNorm and its q, k, v GEMVs (one per run of
parts that fuse), read from the file as well.

Everything is checked against float64, each weight its own tensor's dequantisation, a line each: every
launch against float64 of the inputs it read (a single GEMV's tolerances), then the layer's output, and
the next q, k, v, against the float chain from x (the GEMVs in series compose the tolerances:
series_tolerance).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field

import numpy as np
from ml_dtypes import bfloat16

from ..design import compiler, layer
from ..errors import ConfigError, emulator_failure
from ..formats.fuse import fusable_runs, fuse_columns, offsets
from ..formats.quant import random_activations
from ..formats.rope import rotate_f64
from ..kernel import record
from ..kernel.eltwise_model import RMS_EPSILON
from ..kernel.kernel_model import ELTWISE_OBJECT
from .air_run import compiled_key, peano_object
from .reference import check, dequantize

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

RAN = {"emu": "emulated", "sim": "simulated", "npu": "on the NPU"}
# o_proj, v_proj (the host's attention) and the FFN's three, as decoder_layer_names orders the seven
V, O, GATE, UP, DOWN = 2, 3, 4, 5, 6


def rms_norm_f64(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return x / np.sqrt(np.mean(x * x) + float(RMS_EPSILON)) * w.astype(np.float64)


def attention_at_position_0(x, attn_norm, w_v, heads: int, kv_heads: int) -> np.ndarray:
    """The attention's output for a token alone in its context: each query head's value, [1, heads * d]."""
    values = rms_norm_f64(x[0], attn_norm) @ _f64(w_v)
    d = w_v.n // kv_heads
    if w_v.n % kv_heads or heads % kv_heads:
        raise ConfigError(
            f"v_proj N = {w_v.n} with {kv_heads} key/value heads and {heads} query heads: not whole heads"
        )
    per_kv = values.reshape(kv_heads, d)
    return np.repeat(per_kv, heads // kv_heads, axis=0).reshape(1, heads * d)


def silu_f64(g: np.ndarray) -> np.ndarray:
    return g / (1 + np.exp(-g))


def _f64(w) -> np.ndarray:
    return dequantize(w).astype(np.float64)


@dataclass
class Weights:
    """What the module computes with: the layer's (o_proj, gate, up, down, the FFN norm) and, to end with
    the next layer's attention, that layer's norm and its q, k, v parts in runs (one GEMV each).
    """

    o: object
    gate: object
    up: object
    down: object
    ffn_norm: np.ndarray
    next_norm: np.ndarray | None = None
    next_runs: list = field(default_factory=list)  # [[part, ...], ...]
    # (head_dim, the position's [cos | sin] row) to rotate the next q and k
    rope: tuple = ()
    head: object = None  # the LM head's weights, ending the last layer's module
    final_norm: np.ndarray | None = None


def layer_reference(x, attn, wt: Weights) -> dict[str, np.ndarray]:
    """The layer's output, and the next layer's q, k, v parts, in float64 from the module's bf16 inputs,
    each weight its own tensor's dequantisation."""
    h = x.astype(np.float64) + attn.astype(np.float64) @ _f64(wt.o)
    n = rms_norm_f64(h[0], wt.ffn_norm)[None]
    out = h + (silu_f64(n @ _f64(wt.gate)) * (n @ _f64(wt.up))) @ _f64(wt.down)
    ref = {"layer": out}
    if wt.next_runs:
        nn = rms_norm_f64(out[0], wt.next_norm)[None]
        for label, part in zip("qkv", (p for run in wt.next_runs for p in run)):
            ref[f"layer>{label}"] = nn @ _f64(part)
    if wt.rope:
        for label in "qk":
            ref[f"layer>{label}_roped"] = rotate_f64(
                ref[f"layer>{label}"], wt.rope[1], wt.rope[0]
            )
    if wt.head is not None:
        ref["layer>logits"] = rms_norm_f64(out[0], wt.final_norm)[None] @ _f64(wt.head)
    return ref


def launch_references(buf: dict, wt: Weights) -> list:
    """(name, the module's output, float64 reference) of each launch, from the inputs that launch read
    (the module's own buffers, by name): a broken launch shows as its own line, at a single GEMV's
    tolerances."""
    f = {k: np.asarray(v, np.float64).reshape(1, -1) for k, v in buf.items()}
    inter = wt.gate.n
    gu = np.asarray(buf["gate_up"]).reshape(1, -1)
    out = [
        ("o_proj", buf["proj"], f["attn"] @ _f64(wt.o)),
        ("residual", buf["h"], f["x"] + f["proj"]),
        ("rms_norm", buf["normed"], rms_norm_f64(f["h"][0], wt.ffn_norm)[None]),
        ("gate", gu[:, :inter], f["normed"] @ _f64(wt.gate)),
        ("up", gu[:, inter:], f["normed"] @ _f64(wt.up)),
        (
            "swiglu",
            buf["act"],
            silu_f64(f["gate_up"][:, :inter]) * f["gate_up"][:, inter:],
        ),
        ("down", buf["down"], f["act"] @ _f64(wt.down)),
        ("residual2", buf["out"], f["h"] + f["down"]),
    ]
    if wt.next_runs:
        out.append(
            (
                "next_norm",
                buf["next_normed"],
                rms_norm_f64(f["out"][0], wt.next_norm)[None],
            )
        )
    labels = iter("qkv")  # the parts, in order over the runs
    for i, run in enumerate(wt.next_runs):
        c = np.asarray(buf[f"qkv{i}"]).reshape(1, -1)
        for part, off in zip(run, offsets(run)):
            out.append(
                (
                    f"next_{next(labels)}",
                    c[:, off : off + part.n],
                    f["next_normed"] @ _f64(part),
                )
            )
    if (
        wt.head is not None
    ):  # the final norm and the head, each from what its launch read
        out.append(
            (
                "final_norm",
                buf["final_normed"],
                rms_norm_f64(f["out"][0], wt.final_norm)[None],
            )
        )
        logits = np.asarray(buf["logits"]).reshape(1, -1)[:, : wt.head.n]
        out.append(("head", logits, f["final_normed"] @ _f64(wt.head)))
    if wt.rope:  # each rotation from the q and k the module wrote
        d, tab = wt.rope
        parts = [p for run in wt.next_runs for p in run]
        q_n, k_n = parts[0].n, parts[1].n
        flat = np.concatenate(
            [
                np.asarray(buf[f"qkv{i}"], np.float64).reshape(-1)
                for i in range(len(wt.next_runs))
            ]
        )
        for label, start, n in (("q", 0, q_n), ("k", q_n, k_n)):
            out.append(
                (
                    f"rope_{label}",
                    buf[f"{label}_roped"],
                    rotate_f64(flat[start : start + n], tab, d)[None],
                )
            )
    return out


def series_tolerance(gemvs: int, want: np.ndarray) -> dict:
    """reference.check's tolerances for a result against float64 through gemvs GEMVs in series (1: its
    defaults): each GEMV allowed a single GEMV check's budget (rtol 5 %, atol 5 % of the reference's RMS,
    mean relative L1 3 %, correlation 0.999; the bfp16 conversion of A dominates it), each one's error
    carried into the next one's input, so the budgets add: that many times each. A correlation c allows a
    relative RMS error of about sqrt(2 (1 - c)), so n times that error is a correlation of 1 - n^2 (1 - c).
    """
    return dict(
        rtol=0.05 * gemvs,
        atol=0.05 * gemvs * float(np.sqrt(np.mean(want * want))),
        max_mean_rel_l1=0.03 * gemvs,
        min_correlation=1 - 0.001 * gemvs**2,
    )


def _peano_objects(gemvs, build_dir: str, kernels=None) -> list[str]:
    """Every kernel object a module links (its GEMVs' and the element-wise one; or kernels', KernelObjects),
    built with Peano each time (as mlir-air's Makefiles rebuild theirs: an object never outlives a source
    edit) and linked into build_dir, where aiecc resolves link_with; their paths."""
    os.makedirs(build_dir, exist_ok=True)
    if kernels is None:
        made = {g.kernel.lib_name(): g.kernel.make_args() for g in gemvs}
        made[ELTWISE_OBJECT] = ["ENTRIES=eltwise"]
    else:
        made = {k.lib_name(): k.make_args() for k in kernels}
    objects = []
    for name, args in made.items():
        obj = peano_object(name, args)
        link = os.path.join(build_dir, name)
        if not os.path.exists(link):
            os.symlink(obj, link)
        objects.append(obj)
    return objects


def module_of(builder, cfg):
    """The module of a LayerConfig, a QkvConfig (the token's first) or a TokenConfig (a whole token)."""
    from int4_packed_record import QkvConfig, TokenConfig

    if isinstance(cfg, TokenConfig):
        return builder.build_token_module(cfg)
    if isinstance(cfg, QkvConfig):
        return builder.build_qkv_module(cfg)
    return builder.build_module(cfg)


def run_module(
    cfg,
    buffers: list[np.ndarray],
    backend: str,
    compile_first: bool,
    dispatches: int = 1,
    timed: list | None = None,
) -> list[np.ndarray]:
    """One dispatch of the module (a LayerConfig's, a QkvConfig's: the token's first, or a TokenConfig's:
    a whole token), every buffer back
    (flat, in argument order): on the emulator ("emu"),
    the simulator of the compiled module ("sim": emulator/aiesim, timed with sim_costs.layer_costs; it
    prints the launches' simulated times; dispatches: the instruction stream run that many times, every
    dispatch's buffers equal to the first's bit for bit or a RunFailure), or the NPU ("npu", mlir-air's
    XRTBackend, the ELF flow). On the emulator, compile_first: aircc + aiecc compile the module first
    where they are installed, and what they refuse is refused. A failed run is a RunFailure (exit 1).
    """
    if backend in ("emu", "sim"):
        sys.path.insert(
            0, os.path.join(REPO, "emulator")
        )  # `import air` is the emulator's
        os.environ["AIR_EMU_LIB_PATH"] = layer.host_libraries(cfg)
    import o_gemv_ffn_int4 as builder
    from air.backend.xrt import XRTBackend

    options = builder.backend_options(cfg)
    module = module_of(builder, cfg)
    if backend == "emu":
        from air.emu import EmulatorError

        if compile_first:
            compiler.compile_before_run(options["instance_name"], str(module), options)
        try:
            return list(XRTBackend(**options).compile_and_load(module)(*buffers))
        except EmulatorError as e:
            raise emulator_failure(e) from None
    if backend == "sim":
        from . import sim_costs

        return _simulate(
            sim_costs.layer_costs(cfg), module, options, buffers, dispatches, timed
        )
    build_dir = os.path.join(REPO, "build", "npu", "o_gemv_ffn_int4")
    backend, invoke = load_on_npu(module, options, build_dir, cfg.launch_gemvs)
    try:
        return list(invoke(*buffers))
    finally:
        backend.unload()


def load_on_npu(module, options: dict, build_dir: str, gemvs=(), kernels=None):
    """(mlir-air's XRTBackend, its invoker) of a module compiled for NPU2 (the ELF flow as options say) and
    loaded, its kernel objects (gemvs', the element-wise one; or kernels') built with Peano first; the
    caller unloads the backend when done. The compile is kept: its ELF goes to
    build_dir/compiled/<air_run.compiled_key>/, and a later call with the same module, options, kernel
    objects and toolchain loads it without compiling (a token's modules take minutes each to compile at
    Llama's shapes)."""
    from air.backend.xrt import XRTBackend, XRTCompileArtifact

    objects = _peano_objects(gemvs, build_dir, kernels)
    os.makedirs(build_dir, exist_ok=True)
    text = str(module)
    kept = os.path.join(build_dir, "compiled", compiled_key(text, options, objects))
    meta = os.path.join(kept, "artifact.json")
    backend = XRTBackend(**options)
    try:
        if not os.path.isfile(meta):
            # a compile's leftovers corrupt the next one (mlir-air's llms/shared/infra/cache.py clears them)
            shutil.rmtree(os.path.join(build_dir, "air_project"), ignore_errors=True)
            for stale in ("air.elf", "air.mlir"):
                if os.path.exists(os.path.join(build_dir, stale)):
                    os.remove(os.path.join(build_dir, stale))
            cwd = os.getcwd()
            os.chdir(build_dir)
            try:
                artifact = backend.compile(module)
            finally:
                os.chdir(cwd)
            os.makedirs(kept, exist_ok=True)
            info = {"kernel": artifact.kernel}
            # the ELF (which carries its instructions), and an insts.bin beside it where one was made
            for field, path in (
                ("binary", artifact.output_binary),
                ("insts", artifact.insts),
            ):
                path = path and os.path.join(build_dir, path)
                if path and (field == "binary" or os.path.isfile(path)):
                    shutil.copy2(path, kept)
                    info[field] = os.path.basename(path)
            # written last: a kept folder without it is compiled again
            with open(meta, "w") as f:
                json.dump(info, f)
        with open(meta) as f:
            info = json.load(f)
        artifact = XRTCompileArtifact(
            os.path.join(kept, info["binary"]),
            info["kernel"],
            os.path.join(kept, info["insts"]) if "insts" in info else None,
        )
        return backend, backend.load(artifact)
    except BaseException:
        backend.unload()
        raise


def _simulate(
    costs, module, options, buffers, dispatches: int = 1, timed: list | None = None
) -> list[np.ndarray]:
    """The module as aircc + aiecc compiled it, in the simulator of the compiled design, timed with its
    launches' costs (sim_costs.layer_costs, sim_costs.costs); run
    `dispatches` times, each dispatch's buffers equal to the first's bit for bit (else a RunFailure).
    timed: a list the dispatch's MODELLED seconds as compiled go to (its launches and the fixed cost),
    instead of the lines that print them."""
    from ..errors import RunFailure
    from . import sim_costs

    outdir = compiler.compile_before_run(
        options["instance_name"], str(module), options, quiet=timed is not None
    )
    _, sim = sim_costs.simulate_compiled(outdir, buffers, costs, dispatches=dispatches)
    outs = sim.dispatch_outputs[0]
    for k, later in enumerate(sim.dispatch_outputs[1:], 2):
        for i, (a, b) in enumerate(zip(outs, later)):
            a, b = (np.asarray(x).view(np.uint8).reshape(-1) for x in (a, b))
            if not np.array_equal(a, b):
                raise RunFailure(
                    f"the compiled module's buffer {i} differs: dispatch {k} of {dispatches} gives "
                    f"{int((a != b).sum())} of {a.size} bytes other than the first dispatch"
                )
    us = sim_costs.seconds(sim) * 1e6
    if timed is not None:
        timed.append(us / 1e6 + sim_costs.model.FIXED_S)
        return outs
    print(
        f"simulated: {os.path.relpath(sim.stream_file, REPO) if sim.stream_file else 'the dialect'}, "
        f"{dispatches} "
        f"dispatch{'es' if dispatches > 1 else ''}, the deterministic order (timed)"
    )
    launches = ", ".join(
        f"{dev.removesuffix('_seg')} {c / sim_costs.CLOCK_HZ * 1e6:.1f}"
        for dev, c in sim.launch_cycles
    )
    print(
        f"simulated the compiled module: MODELLED NPU2 time {us:.1f} us for its launches as compiled "
        f"({launches} us; + {sim_costs.model.FIXED_S * 1e6:.0f} us for the dispatch: "
        f"{us + sim_costs.model.FIXED_S * 1e6:.1f} us)"
    )
    return outs


def run_gemm(cfg, a: np.ndarray, w, backend: str, compile_first: bool) -> np.ndarray:
    """C [rows of a, w's N] bf16 of the GEMM design (matmul_int4_packed) at configuration cfg on a and the
    weights w, A padded to cfg.m rows and W to cfg.n columns: on the emulator ("emu"; compile_first as
    run_module's), the simulator of the compiled design ("sim": 2 dispatches, equal), or NPU2 ("npu":
    load_on_npu into build/npu/prefill/<its name>, its compile kept, run through mlir-air's XRTBackend).
    A failed run is a RunFailure (exit 1)."""
    from ..design.design import build_host_kernel
    from . import sim_costs

    if backend in ("emu", "sim"):
        sys.path.insert(0, os.path.join(REPO, "emulator"))
        os.environ["AIR_EMU_LIB_PATH"] = build_host_kernel(cfg)
    import matmul_int4_packed as builder
    from air.backend.xrt import XRTBackend

    options = builder.backend_options(cfg)
    bufs = cfg.call_buffers(*record.padded_operands(cfg, a, w))
    module = builder.build_module(**cfg.builder_args())
    if backend == "npu":
        loaded, invoke = load_on_npu(
            module,
            options,
            os.path.join(REPO, "build", "npu", "prefill", cfg.name),
            kernels=[cfg.kernel],
        )
        try:
            c = invoke(*bufs)[2]
        finally:
            loaded.unload()
    elif backend == "sim":
        c = _simulate(sim_costs.costs(cfg), module, options, bufs, 2, [])[2]
    else:
        from air.emu import EmulatorError

        if compile_first:
            compiler.compile_before_run(cfg.name, str(module), options, quiet=True)
        try:
            c = XRTBackend(**options).compile_and_load(module)(*bufs)[2]
        except EmulatorError as e:
            raise emulator_failure(e) from None
    return np.asarray(c).reshape(cfg.m, cfg.n)[: a.shape[0], : w.n]


def run_decode_layer(args, backend: str) -> bool:
    """Layer args.decoder_layer of args.awq through the module; True if every check passes."""
    from ..formats import rope
    from ..formats.weights_file import (
        attention_heads,
        decoder_layer_names,
        final_norm,
        layer_norms,
        load,
        load_head,
        rope_frequencies,
    )

    path, index = args.awq, args.decoder_layer
    names = decoder_layer_names(path, index)
    w = {
        i: load(path, names[i], fmt=args.format_given)[0]
        for i in (V, O, GATE, UP, DOWN)
    }
    attn_norm, ffn_norm = layer_norms(path, index)
    heads, kv_heads = attention_heads(path)
    position = getattr(args, "position", None) or 0
    hidden, inter = w[O].n, w[DOWN].k
    wt = Weights(w[O], w[GATE], w[UP], w[DOWN], ffn_norm)
    norms = [("attention norm", attn_norm), ("FFN norm", ffn_norm)]
    if args.next_qkv:
        next_names = decoder_layer_names(path, index + 1)
        parts = [load(path, next_names[i], fmt=args.format_given)[0] for i in (0, 1, 2)]
        wt.next_norm = layer_norms(path, index + 1)[0]
        wt.next_runs = [[parts[j] for j in run] for run in fusable_runs(parts)]
        norms.append(("next layer's attention norm", wt.next_norm))
        d = parts[0].n // heads
        if parts[0].n != heads * d or parts[1].n != kv_heads * d:
            raise ConfigError(
                f"q_proj N = {parts[0].n}, k_proj N = {parts[1].n}: not whole heads of {heads} query and "
                f"{kv_heads} key/value heads"
            )
        wt.rope = (d, rope.table(rope_frequencies(path, d), position))
    for name, vec in norms:
        if vec.shape != (hidden,):
            raise ConfigError(
                f"layer {index}'s {name} has {vec.size} weights; the layer's hidden size is {hidden}"
            )
    if getattr(args, "head", False):
        wt.head, summary, _ = load_head(path, args.head_format, args.format_given)
        wt.final_norm = final_norm(path)
        print(summary)
        norms.append(("final norm", wt.final_norm))
    gemv_weights = [w[O], fuse_columns([w[GATE], w[UP]]), w[DOWN]]
    gemv_weights += [fuse_columns(run) for run in wt.next_runs]
    cfg = layer.default_layer(
        hidden,
        inter,
        tuple(x.format for x in gemv_weights[:3]),
        tuple(x.gs for x in gemv_weights[:3]),
        tuple((x.n, x.format, x.gs) for x in gemv_weights[3:]),
        (wt.rope[0], heads, kv_heads) if wt.rope else (),
        (wt.head.n, wt.head.format, wt.head.gs) if wt.head is not None else None,
    )
    x = random_activations(1, hidden, args.seed)
    attn = attention_at_position_0(x, attn_norm, w[V], heads, kv_heads).astype(bfloat16)
    given = {"attn": attn, "x": x, "ffn_norm": ffn_norm.astype(bfloat16)[None]}
    if wt.next_runs:
        given["next_norm"] = wt.next_norm.astype(bfloat16)[None]
        given["rope_table"] = wt.rope[1]
    if wt.head is not None:
        given["final_norm"] = wt.final_norm.astype(bfloat16)[None]
    weights = dict(
        zip(
            ["w_o", "w_gate_up", "w_down"]
            + [f"w_qkv{i}" for i in range(len(wt.next_runs))],
            gemv_weights,
        )
    )
    if wt.head is not None:
        weights["w_head"] = wt.head
    buffers = layer.module_buffers(cfg, weights, given)
    labels = (
        ["o_proj", "gate_up", "down"]
        + [f"next_qkv{i}" for i in range(len(wt.next_runs))]
        + (["head"] if wt.head is not None else [])
    )
    for g, name in zip(cfg.launch_gemvs, labels):
        print(f"{name:<9} {g.summary()}")
    t0 = time.perf_counter()
    dispatches = getattr(args, "dispatches", None) or 2  # host/run.py's SIM_DISPATCHES
    out = run_module(
        cfg, buffers, backend, compile_first=not args.no_compile, dispatches=dispatches
    )
    took = time.perf_counter() - t0
    buf = {name: out[i] for i, (name, _) in enumerate(cfg.buffers())}
    # (stage, result, reference, GEMVs in series from the inputs it is checked from; 1: a launch alone)
    checks = [(name, got, want, 1) for name, got, want in launch_references(buf, wt)]
    ref = layer_reference(x, attn, wt)
    checks.append(("layer", buf["out"], ref.pop("layer"), 3))
    next_parts = [
        (p, i, off)
        for i, run in enumerate(wt.next_runs)
        for p, off in zip(run, offsets(run))
    ]
    for (name, want), (part, i, off) in zip(
        list(ref.items())[: len(next_parts)], next_parts
    ):
        got = np.asarray(buf[f"qkv{i}"]).reshape(1, -1)[:, off : off + part.n]
        checks.append((name, got, want, 4))
    for label in "qk" if wt.rope else "":
        checks.append(
            (
                f"layer>{label}_roped",
                buf[f"{label}_roped"],
                ref[f"layer>{label}_roped"],
                4,
            )
        )
    if wt.head is not None:
        got = np.asarray(buf["logits"]).reshape(1, -1)[:, : wt.head.n]
        checks.append(("layer>logits", got, ref["layer>logits"], 4))
        same = got.astype(np.float32).argmax() == ref["layer>logits"].argmax()
        print(
            f"layer {index} top-1 token {'the same as' if same else 'NOT'} the float chain's"
        )
    ok = True
    for stage, got, want, series in checks:
        res = check(
            np.asarray(got).reshape(want.shape), want, **series_tolerance(series, want)
        )
        ok &= res.passed
        print(
            f"layer {index} {stage:<13} N={want.shape[1]:<5} corr {res.correlation:.6f}  mean rel L1 "
            f"{res.mean_rel_l1:.2e}  {'PASS' if res.passed else 'FAIL: ' + '; '.join(res.failures)}"
        )
    est = layer.modelled(cfg)
    print(
        f"one dispatch of {len(est.launches)} launches ({RAN[backend]} "
        f"in {took:.1f} s); MODELLED on NPU2: {est.seconds * 1e6:.1f} us, {est.ddr_bytes / 1e6:.2f} MB of DDR"
    )
    print("PASS!" if ok else "FAIL!")
    return ok
