# SPDX-License-Identifier: MIT
"""The attention-free part of one decoder layer of a checkpoint at decode, as one module
(o_gemv_ffn_int4.py): host/run.py --weights F --decoder-layer L --layer-module (make run_llama_decode_layer).

The layer's input x (the residual stream, one token) is seeded random activations. The attention comes
from the reference on the host, at position 0: with one key, softmax is 1 and each query head's output is
its key/value head's value (RoPE and q . k do not enter), so attn = repeat(rms_norm(x) * attn_norm x
dequant(W_v)) over each group of query heads. The module then computes, on the NPU or the emulator,
h = x + attn x W_o, and out = h + down(silu(gate(n)) * up(n)) with n = rms_norm(h) * ffn_norm, gate and up
fused along N at load time (int4awq.formats.fuse).

It is checked against a float64 reference of the same layer from the same bf16 inputs, each weight its own
tensor's dequantisation: the o_proj output, the FFN's output (down) and the layer's output, a line each.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
from ml_dtypes import bfloat16

from ..design import compiler, layer
from ..errors import ConfigError
from ..formats.fuse import fuse_columns
from ..formats.quant import random_activations
from ..kernel import record
from ..kernel.eltwise_model import RMS_EPSILON
from ..kernel.kernel_model import ELTWISE_OBJECT, build_eltwise_kernel
from .reference import check, dequantize

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KERNELS = os.path.join(REPO, "kernels")

# o_proj, v_proj (the host's attention) and the FFN's three, as decoder_layer_names orders the seven
V, O, GATE, UP, DOWN = 2, 3, 4, 5, 6


def rms_norm_f64(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return x / np.sqrt(np.mean(x * x) + float(RMS_EPSILON)) * w.astype(np.float64)


def attention_at_position_0(x, attn_norm, w_v, heads: int, kv_heads: int) -> np.ndarray:
    """The attention's output for a token alone in its context: each query head's value, [1, heads * d]."""
    values = rms_norm_f64(x[0], attn_norm) @ dequantize(w_v).astype(np.float64)
    d = w_v.n // kv_heads
    if w_v.n % kv_heads or heads % kv_heads:
        raise ConfigError(
            f"v_proj N = {w_v.n} with {kv_heads} key/value heads and {heads} query heads: not whole heads"
        )
    per_kv = values.reshape(kv_heads, d)
    return np.repeat(per_kv, heads // kv_heads, axis=0).reshape(1, heads * d)


def silu_f64(g: np.ndarray) -> np.ndarray:
    return g / (1 + np.exp(-g))


def layer_reference(x, attn, w_o, ffn_norm, w_gate, w_up, w_down) -> np.ndarray:
    """The layer's output in float64 from the module's bf16 inputs, each weight its own tensor's
    dequantisation."""
    h = x.astype(np.float64) + attn.astype(np.float64) @ _f64(w_o)
    n = rms_norm_f64(h[0], ffn_norm)[None]
    act = silu_f64(n @ _f64(w_gate)) * (n @ _f64(w_up))
    return h + act @ _f64(w_down)


def _f64(w) -> np.ndarray:
    return dequantize(w).astype(np.float64)


def launch_references(buf, ffn_norm, w_o, w_gate, w_up, w_down) -> list:
    """(name, the module's output, float64 reference) of each launch, from the inputs that launch read
    (the module's own buffers: attn, x, proj, h, normed, gu, act, d, out at 0, 1, 6 .. 12): a broken launch
    shows as its own line, at a single GEMV's tolerances."""
    f = {
        i: np.asarray(buf[i], np.float64).reshape(1, -1)
        for i in (0, 1, 6, 7, 8, 9, 10, 11)
    }
    inter = w_gate.n
    gu = np.asarray(buf[9]).reshape(1, -1)
    return [
        ("o_proj", buf[6], f[0] @ _f64(w_o)),
        ("residual", buf[7], f[1] + f[6]),
        ("rms_norm", buf[8], rms_norm_f64(f[7][0], ffn_norm)[None]),
        ("gate", gu[:, :inter], f[8] @ _f64(w_gate)),
        ("up", gu[:, inter:], f[8] @ _f64(w_up)),
        ("swiglu", buf[10], silu_f64(f[9][:, :inter]) * f[9][:, inter:]),
        ("down", buf[11], f[10] @ _f64(w_down)),
        ("residual2", buf[12], f[7] + f[11]),
    ]


# The layer's output against the float layer: three GEMVs in series, each allowed a single GEMV check's
# budget (reference.check: rtol 5 %, atol 5 % of the reference's RMS, mean relative L1 3 %; the bfp16
# conversion of A dominates it), and each one's error carried into the next one's input, so three times
# those; the correlation bound stays the GEMV's
LAYER_TOLERANCE = dict(rtol=0.15, atol_of_rms=0.15, max_mean_rel_l1=0.09)


def _peano_objects(cfg, build_dir: str) -> None:
    """Every kernel object the module links, built with Peano and linked into build_dir (aircc resolves
    link_with there)."""
    os.makedirs(build_dir, exist_ok=True)
    made = {g.kernel.lib_name(): g.kernel.make_args() for g in cfg.gemvs}
    made[ELTWISE_OBJECT] = ["ENTRIES=eltwise"]
    for name, args in made.items():
        obj = os.path.join(KERNELS, "build", name)
        if not os.path.isfile(obj):
            proc = subprocess.run(["make", "-C", KERNELS, "peano", *args])
            if proc.returncode or not os.path.isfile(obj):
                raise ConfigError(
                    f"kernel object {obj} could not be built (make -C kernels peano {' '.join(args)})"
                )
        link = os.path.join(build_dir, name)
        if not os.path.exists(link):
            os.symlink(obj, link)


def run_module(
    cfg, buffers: list[np.ndarray], backend: str, compile_first: bool
) -> list[np.ndarray]:
    """One dispatch of the module on the emulator ("emu") or the NPU ("npu", mlir-air's XRTBackend, the
    ELF flow): every buffer back, flat, in argument order. On the emulator, compile_first: aircc + aiecc
    compile the module first where they are installed, and what they refuse is refused.
    """
    if backend == "emu":
        sys.path.insert(
            0, os.path.join(REPO, "emulator")
        )  # `import air` is the emulator's
        from ..design.design import build_host_kernel

        dirs = {build_host_kernel(g) for g in cfg.gemvs} | {
            str(build_eltwise_kernel().parent)
        }
        os.environ["AIR_EMU_LIB_PATH"] = os.pathsep.join(sorted(dirs))
    import o_gemv_ffn_int4 as builder
    from air.backend.xrt import XRTBackend

    options = builder.backend_options(cfg)
    module = builder.build_module(cfg)
    if backend == "emu":
        if compile_first:
            try:
                line, _ = compiler.compile_first(
                    "o_gemv_ffn_int4",
                    str(module),
                    options,
                    os.path.join(REPO, "build", "aircc-runs"),
                )
            except compiler.CompileError as e:
                raise ConfigError(str(e)) from None
            print(line)
        return list(XRTBackend(**options).compile_and_load(module)(*buffers))
    build_dir = os.path.join(REPO, "build", "npu", "o_gemv_ffn_int4")
    _peano_objects(cfg, build_dir)
    cwd = os.getcwd()
    os.chdir(build_dir)
    try:
        return list(XRTBackend(**options).compile_and_load(module)(*buffers))
    finally:
        os.chdir(cwd)


def run_decode_layer(args, backend: str) -> bool:
    """Layer args.decoder_layer of args.awq through the module; True if every check passes."""
    from ..formats.weights_file import (
        attention_heads,
        decoder_layer_names,
        layer_norms,
        load,
    )

    path, index = args.awq, args.decoder_layer
    names = decoder_layer_names(path, index)
    w = {
        i: load(path, names[i], fmt=args.format_given)[0]
        for i in (V, O, GATE, UP, DOWN)
    }
    w_gate_up = fuse_columns([w[GATE], w[UP]])
    attn_norm, ffn_norm = layer_norms(path, index)
    heads, kv_heads = attention_heads(path)
    hidden, inter = w[O].n, w[DOWN].k
    for name, vec in (("attention norm", attn_norm), ("FFN norm", ffn_norm)):
        if vec.shape != (hidden,):
            raise ConfigError(
                f"layer {index}'s {name} has {vec.size} weights; the layer's hidden size is {hidden}"
            )
    gemv_weights = (w[O], w_gate_up, w[DOWN])
    cfg = layer.default_layer(
        hidden,
        inter,
        tuple(x.format for x in gemv_weights),
        tuple(x.gs for x in gemv_weights),
    )
    x = random_activations(1, hidden, args.seed)
    attn = attention_at_position_0(x, attn_norm, w[V], heads, kv_heads).astype(bfloat16)

    packed = [
        record.padded_operands(g, np.zeros((1, g.k), bfloat16), wt)[1]
        for g, wt in zip(cfg.gemvs, gemv_weights)
    ]
    buffers = [
        attn,
        x,
        packed[0],
        ffn_norm.astype(bfloat16)[None],
        packed[1],
        packed[2],
    ]
    buffers += [
        np.zeros((1, n), bfloat16)
        for n in (hidden, hidden, hidden, 2 * inter, inter, hidden, hidden)
    ]
    for g, name in zip(cfg.gemvs, ("o_proj", "gate_up", "down")):
        print(f"{name:<8} {g.summary()}")
    t0 = time.perf_counter()
    out = run_module(cfg, buffers, backend, compile_first=not args.no_compile)
    took = time.perf_counter() - t0
    checks = [
        (name, got, want, {})
        for name, got, want in launch_references(
            out, ffn_norm, w[O], w[GATE], w[UP], w[DOWN]
        )
    ]
    want = layer_reference(x, attn, w[O], ffn_norm, w[GATE], w[UP], w[DOWN])
    checks.append(("layer", out[12], want, LAYER_TOLERANCE))
    ok = True
    for stage, got, want, tolerance in checks:
        tolerance = dict(tolerance)
        if "atol_of_rms" in tolerance:
            tolerance["atol"] = tolerance.pop("atol_of_rms") * float(
                np.sqrt(np.mean(want * want))
            )
        res = check(np.asarray(got).reshape(want.shape), want, **tolerance)
        ok &= res.passed
        print(
            f"layer {index} {stage:<9} N={want.shape[1]:<5} corr {res.correlation:.6f}  mean rel L1 "
            f"{res.mean_rel_l1:.2e}  {'PASS' if res.passed else 'FAIL: ' + '; '.join(res.failures)}"
        )
    est = layer.modelled(cfg)
    print(
        f"one dispatch of 7 launches ({'emulated' if backend == 'emu' else 'on the NPU'} in {took:.1f} s); "
        f"MODELLED on NPU2: {est.seconds * 1e6:.1f} us, {est.ddr_bytes / 1e6:.2f} MB of DDR"
    )
    print("PASS!" if ok else "FAIL!")
    return ok
