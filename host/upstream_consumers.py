# SPDX-License-Identifier: MIT
"""mlir-air's own users of its int4 GEMM example, unchanged, on this project's builder: the test that the
example keeps upstream's API (matmul_int4_packed: build_module, pack_inputs, packed_tile_bytes,
cpu_reference).

    python3 host/upstream_consumers.py --air-src <mlir-air checkout> --consumer NAME
    (make upstream-check AIR_SRC=... runs every consumer)

Each consumer's module is imported from the checkout as it is. This checkout's matmul_int4_packed is
imported first, as a drop-in replacement of upstream's file would be found, so the consumer's own
`from matmul_int4_packed import ...` (after it puts upstream's directory on sys.path) takes ours. The module
the consumer builds runs on the emulator; its output is checked against the consumer's own reference. The
last line is PASS! or the figures that failed (exit 1); bad input exits 2.

Consumers (programming_examples/llms/llama32_1b_int4 at e972f29):
* gemm_builder: `_build_int4_gemm_module`, as the prefill stitchers call it (tile_k_l2 = K), with
  m_per_segment; reference: cpu_reference.
* awq_pack: `awq_pack_for_npu` of a synthetic AutoAWQ layer (int32 qweight / qzeros in AutoAWQ's nibble
  order, fp16 scales); reference: its own `awq_dequant_layer`, times A in f32.
* o_ffn, rms_gemms_rope: the calls `o_ffn_int4_multi.py` and `rms_gemms_rope_int4_multi.py` make of the
  example for each GEMM (packed_tile_bytes for the weight argument's type, pack_inputs(W_q, W_s, W_z, SEQ,
  K, N, GS, 16, 128), cpu_reference), at their tiles and herds and Llama-3.2-1B's shapes at seq 2048
  (--shape small: a smaller model); each GEMM a line, PASS or the reason. Their
  stitched multi-launch modules are not built: the emulator runs one launch per module (issue 44), and
  their stitching keeps upstream's kernel symbols unprefixed (EXTERNS), which this kernel names otherwise.
* gemv_api: each user of upstream's int4 GEMV (GEMV_CONSUMERS) run unchanged as a script at its own
  shapes, this checkout's matvec_int4_packed (mlir-air's build_module, pack_inputs, cpu_reference) in place
  of upstream's; a line each, PASS or the reason (a call this GEMV refuses is named with the rule).
"""

from __future__ import annotations

import argparse
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LLMS = os.path.join("programming_examples", "llms")

# The shapes the consumers run: Llama-3.2-1B's at a prefill of 2048 (theirs: seq 2048, emb 2048, kv 512,
# hidden 8192), or a small model for a quick look (--shape small).
SHAPES = {"llama": (2048, 2048, 512, 8192), "small": (128, 256, 128, 512)}
# Each consumer's file and its GEMMs: (name, K, N, herd_m, herd_n) in units of the model's dimensions, at the
# consumers' tiles (tile_m = tile_n = 16, tile_k_l1 = 128, tile_k_l2 = K)
FILES = {
    "o_ffn": "multi_launch_builder/o_ffn_int4_multi.py",
    "rms_gemms_rope": "multi_launch_builder/rms_gemms_rope_int4_multi.py",
    "gemm_builder": "gemm_builder.py",
    "awq_pack": "awq_pack.py",
    "gemv_api": "the users of matrix_vector_multiplication/int4_awq/matvec_int4_packed.py",
}


def calls(which: str, shape: str):
    seq, emb, kv, hidden = SHAPES[shape]
    return {
        "o_ffn": [
            ("o", emb, emb, 8, 4),
            ("gate", emb, hidden, 8, 4),
            ("up", emb, hidden, 8, 4),
            ("down", hidden, emb, 2, 4),
        ],
        "rms_gemms_rope": [
            ("q", emb, emb, 8, 4),
            ("k", emb, kv, 8, 4),
            ("v", emb, kv, 8, 4),
        ],
    }[which]


TILE, K_CHUNK, GS = 16, 128, 128


def operands(rng, k, n, gs):
    """mlir-air's int4 operands, as its examples' main() draws them: W_q [N, K/2], W_s, W_z, A."""
    import numpy as np
    from ml_dtypes import bfloat16

    codes = rng.integers(0, 16, (n, k), np.uint8)
    w_q = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    w_s = rng.uniform(0.005, 0.02, (k // gs, n)).astype(bfloat16)
    w_z = rng.integers(7, 9, (k // gs, n)).astype(np.uint8)
    return w_q, w_s, w_z


def run_gemm(build, m, k, n, herd_m, herd_n, packed, a, m_per_segment=1):
    """C of the module `build` makes with the consumers' argument order, run on the emulator (ConfigError
    when the configuration is one this example refuses)."""
    import numpy as np
    from ml_dtypes import bfloat16

    from host.run import emulator_backend
    from int4awq.design.design import DesignConfig

    args = (m, k, n, GS, TILE, k, K_CHUNK, TILE, herd_m, herd_n)
    named = dict(
        zip("m k n gs tile_m tile_k_l2 tile_k_l1 tile_n herd_m herd_n".split(), args)
    )
    # the configuration build_module makes of the call (a refill the A read can chain, as it builds)
    cfg = DesignConfig.with_chainable_refill(
        named.pop("tile_k_l2"), **named, m_per_segment=m_per_segment
    )
    module = build(*args, m_per_segment) if m_per_segment > 1 else build(*args)
    invoke = emulator_backend(cfg).compile_and_load(module)
    out = invoke(a, packed, np.zeros((m, n), bfloat16))[2]
    return np.asarray(out).reshape(m, n).astype(np.float32)


def verdict(name, c, ref) -> str | None:
    """None when C is within 1 % of the largest reference output everywhere (the kernel takes A as bfp16
    blocks of 8-bit mantissas, the references in f32), else the failing figures."""
    import numpy as np

    err = float(np.abs(c - ref).max())
    bound = 0.01 * float(np.abs(ref).max())
    return None if err <= bound else f"{name}: max |C - ref| {err:.4g} > {bound:.4g}"


def consumer_gemm_builder(air_src, rng, shape):
    import numpy as np
    from ml_dtypes import bfloat16

    from llama32_1b_int4.gemm_builder import _build_int4_gemm_module

    import matmul_int4_packed as ours

    # its m_per_segment keyword at the q projection's K and N
    m, k, n = (256, 256, 128) if shape == "small" else (2048, 2048, 2048)
    w_q, w_s, w_z = operands(rng, k, n, GS)
    a = rng.standard_normal((m, k)).astype(bfloat16)
    packed = ours.pack_inputs(w_q, w_s, w_z, m, k, n, GS, TILE, K_CHUNK)
    c = run_gemm(_build_int4_gemm_module, m, k, n, 8, 4, packed, a, m_per_segment=2)
    ref = np.asarray(ours.cpu_reference(w_q, w_s, w_z, a), np.float32)
    return [verdict(f"gemm_builder m_per_segment=2 (M {m}, K {k}, N {n})", c, ref)]


def autoawq_layer(rng, k, n, gs):
    """A synthetic AutoAWQ GEMM layer: qweight int32 [K, N/8], qzeros int32 [K/gs, N/8] (nibble i of word c
    holds column 8c + AWQ_ORDER[i]) and fp16 scales [K/gs, N]."""
    import numpy as np

    from int4awq.formats.checkpoints import AWQ_ORDER

    def pack(v):  # [rows, N] of 0..15 -> int32 [rows, N/8]
        words = np.zeros((v.shape[0], v.shape[1] // 8), np.uint32)
        for i, col in enumerate(AWQ_ORDER):
            words |= v[:, col::8].astype(np.uint32) << np.uint32(4 * i)
        return words.view(np.int32)

    q = rng.integers(0, 16, (k, n))
    z = rng.integers(0, 16, (k // gs, n))
    s = rng.uniform(0.002, 0.02, (k // gs, n)).astype(np.float16)
    return pack(q), pack(z), s


def consumer_awq_pack(air_src, rng, shape):
    import numpy as np
    from ml_dtypes import bfloat16

    from llama32_1b_int4.awq_pack import awq_dequant_layer, awq_pack_for_npu
    from llama32_1b_int4.gemm_builder import _build_int4_gemm_module

    # a q projection's layer at a prefill of 2048
    m, k, n = (128, 256, 128) if shape == "small" else (2048, 2048, 2048)
    qw, qz, sc = autoawq_layer(rng, k, n, GS)
    packed = awq_pack_for_npu(qw, qz, sc, gs=GS, n_tile=TILE, k_chunk=K_CHUNK, M_seq=m)
    a = rng.standard_normal((m, k)).astype(bfloat16)
    c = run_gemm(_build_int4_gemm_module, m, k, n, 8, 4, packed, a)
    w = np.asarray(awq_dequant_layer(qw, qz, sc, gs=GS), np.float32)
    return [verdict(f"awq_pack (M {m}, K {k}, N {n})", c, a.astype(np.float32) @ w)]


def consumer_calls(which):
    def run(air_src, rng, shape):
        import numpy as np
        from ml_dtypes import bfloat16

        from llama32_1b_int4.gemm_builder import _build_int4_gemm_module as build

        from int4awq.errors import ConfigError
        from matmul_int4_packed import cpu_reference, pack_inputs, packed_tile_bytes

        SEQ = SHAPES[shape][0]
        out = []
        for name, k, n, herd_m, herd_n in calls(which, shape):
            what = f"{which} {name} (M {SEQ}, K {k}, N {n}, herd {herd_m}x{herd_n})"
            w_q, w_s, w_z = operands(rng, k, n, GS)
            tile_bytes = packed_tile_bytes(TILE, K_CHUNK, GS)[3]
            packed = pack_inputs(w_q, w_s, w_z, SEQ, k, n, GS, TILE, K_CHUNK)
            # the stitchers type the weight argument memref<{N/tile_n}x{K/tile_k_l1}x{tile_bytes}xi8>
            want = f"memref<{n // TILE}x{k // K_CHUNK}x{tile_bytes}xi8>"
            try:
                text = str(build(SEQ, k, n, GS, TILE, k, K_CHUNK, TILE, herd_m, herd_n))
            except ConfigError as e:
                out.append(f"{what}: refused: {e}")
                continue
            if (
                packed.shape != (n // TILE, k // K_CHUNK, tile_bytes)
                or want not in text
            ):
                out.append(f"{what}: the weight argument is not {want}")
                continue
            a = rng.standard_normal((SEQ, k)).astype(bfloat16)
            try:
                c = run_gemm(build, SEQ, k, n, herd_m, herd_n, packed, a)
            except ConfigError as e:
                out.append(f"{what}: refused: {e}")
                continue
            ref = np.asarray(cpu_reference(w_q, w_s, w_z, a), np.float32)
            out.append(verdict(what, c, ref))
            if out[-1] is None:
                print(f"{what}: PASS", flush=True)
        return out

    return run


# mlir-air's users of its int4 GEMV (matrix_vector_multiplication/int4_awq/matvec_int4_packed.py at
# e972f29) and what each takes from it; upstream's GEMV is y = W x, W [M, K] row-major, packed per kernel
# tile as [Q | S | Z] (pack_inputs), built by build_module(M, K, GS, M_TILE, K_CHUNK, N_CORES,
# M_PER_LAUNCH) and linked with mv_int4_bf16.o (KERNEL_OBJ_NAME)
# The users of upstream's int4 GEMV (mlir-air e972f29) and the command line each is run with: its own
# defaults, which are its lit test's shapes, Llama-3.2-1B's (emb 2048, hidden 8192; awq_repacker's
# self-test its own K 512, N 128). None: a library with no entry point of its own.
GEMV_CONSUMERS = {
    "matrix_vector_multiplication/int4_awq/matvec_int4_packed_add.py": [],
    "decode_ffn_swiglu/matvec_int4_swiglu_rms.py": [],
    "llms/llama32_1b_int4/multi_launch_builder/o_gemv_ffn_int4_multi.py": [],
    "llms/llama32_1b_int4/multi_launch_builder/o_gemv_ffn_int4_fused.py": [],
    "llms/llama32_1b_int4/multi_launch_builder/rms_qkv_int4_rope_multi.py": [],
    "llms/llama32_1b_int4/llama32_1b_int4_weights.py": None,
    "llms/llama32_1b_int4/awq_repacker.py": [],
}
# the last line each prints when it passes
GEMV_PASS = ("PASS!", "All self-tests PASSED.")


def run_gemv_consumer(path: str, argv: list[str] | None) -> str:
    """A GEMV user run unchanged as a script, this checkout's matvec_int4_packed standing in for upstream's
    (already in sys.modules, so its own `from matvec_int4_packed import ...` takes ours): PASS, refused
    (this checkout's rule that its call broke, by name), not modelled by the emulator (what it needs
    that the emulator refuses to model, as the emulator's UnsupportedError names it), or failed (the
    first line of what it raised or printed)."""
    import contextlib
    import io
    import runpy

    from air.emu.errors import UnsupportedError
    from int4awq.errors import ConfigError

    if argv is None:
        runpy.run_path(path)  # a library: its imports and definitions
        return "its imports resolve (a library: its calls need an AutoAWQ checkpoint)"
    out, saved = io.StringIO(), (sys.argv, list(sys.path))
    sys.argv = [path, *argv]
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(path, run_name="__main__")
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except ConfigError as e:
        return f"refused: {e}"
    except UnsupportedError as e:  # what the emulator does not model, which it names
        return f"not modelled by the emulator: {e}"
    except Exception as e:  # the consumer's own failure, reported as it is
        return f"failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    finally:
        sys.argv, sys.path[:] = saved
    lines = out.getvalue().strip().splitlines()
    if code == 0 and lines and lines[-1] in GEMV_PASS:
        return "PASS"
    return f"failed: exit {code}: {lines[-1] if lines else 'no output'}"


def consumer_gemv_api(air_src, rng, shape):
    """One line per user of upstream's GEMV present in the checkout, run unchanged on this checkout's
    matvec_int4_packed (mlir-air's build_module, pack_inputs and cpu_reference, run_gemv_consumer): the
    file, the command line, PASS or the reason. The consumers run at their own shapes (shape is not theirs
    to take)."""
    import matvec_int4_packed  # noqa: F401  ours, before any consumer looks for upstream's

    out = []
    for path, argv in GEMV_CONSUMERS.items():
        full = os.path.join(air_src, "programming_examples", path)
        if not os.path.isfile(full):
            out.append(f"{path}: not in this checkout")
            continue
        how = "imported" if argv is None else " ".join([os.path.basename(path), *argv])
        verdict = run_gemv_consumer(full, argv)
        line = f"{path} ({how}): {verdict}"
        print(line, flush=True)
        if verdict.startswith(("refused", "not modelled", "failed")):
            out.append(line)
    return out


CONSUMERS = {
    "gemv_api": consumer_gemv_api,
    "gemm_builder": consumer_gemm_builder,
    "awq_pack": consumer_awq_pack,
    "o_ffn": consumer_calls("o_ffn"),
    "rms_gemms_rope": consumer_calls("rms_gemms_rope"),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--air-src", required=True, help="a checkout of Xilinx/mlir-air")
    ap.add_argument("--consumer", required=True, choices=sorted(CONSUMERS))
    ap.add_argument(
        "--shape",
        choices=sorted(SHAPES),
        default="llama",
        help="llama: the consumers' own shapes (seq 2048, emb 2048, kv 512, hidden 8192); small: a quick look",
    )
    args = ap.parse_args(argv)
    llms = os.path.join(args.air_src, LLMS)
    if not os.path.isdir(os.path.join(llms, "llama32_1b_int4")):
        print(
            f"error: {llms}/llama32_1b_int4 not found: give a checkout of mlir-air",
            file=sys.stderr,
        )
        return 2
    sys.path[:0] = [os.path.join(REPO, "emulator"), REPO]
    import matmul_int4_packed  # noqa: F401  ours, before any consumer looks for upstream's

    sys.path.append(llms)
    import numpy as np

    print(f"{FILES[args.consumer]} at the {args.shape} shapes", flush=True)
    failed = [
        f
        for f in CONSUMERS[args.consumer](
            args.air_src, np.random.default_rng(0), args.shape
        )
        if f
    ]
    for f in failed:
        print(f)
    if failed:
        return 1
    print("PASS!")
    return 0


if __name__ == "__main__":
    sys.exit(main())
