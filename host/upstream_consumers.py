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
* gemv_api: each user of upstream's int4 GEMV (GEMV_CONSUMERS), a line naming what it imports from
  matvec_int4_packed that this checkout's file does not provide with upstream's meaning.
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
GEMV_CONSUMERS = {
    "matrix_vector_multiplication/int4_awq/matvec_int4_packed_add.py": ("pack_inputs",),
    "decode_ffn_swiglu/matvec_int4_swiglu_rms.py": ("pack_inputs",),
    "llms/llama32_1b_int4/multi_launch_builder/o_gemv_ffn_int4_multi.py": (
        "pack_inputs",
    ),
    "llms/llama32_1b_int4/multi_launch_builder/o_gemv_ffn_int4_fused.py": (
        "pack_inputs",
    ),
    "llms/llama32_1b_int4/multi_launch_builder/rms_qkv_int4_rope_multi.py": (
        "build_module",
        "pack_inputs",
        "cpu_reference",
    ),
    "llms/llama32_1b_int4/llama32_1b_int4_weights.py": ("pack_inputs",),
    "llms/llama32_1b_int4/awq_repacker.py": ("pack_inputs", "cpu_reference"),
}
UPSTREAM_GEMV_BUILD = ("M", "K", "GS", "M_TILE", "K_CHUNK", "N_CORES", "M_PER_LAUNCH")


def consumer_gemv_api(air_src, rng, shape):
    """One line per user of upstream's GEMV: what it imports from matvec_int4_packed and whether this
    checkout's file has it with upstream's meaning. Ours computes C = A x dequant(W) on the GEMM's records
    (docs/decode.md), not upstream's y = W x on [Q | S | Z] tiles: every such user is named, not run.
    """
    import inspect

    import matvec_int4_packed as ours

    params = tuple(inspect.signature(ours.build_module).parameters)
    gaps = {
        "build_module": (
            None
            if params[: len(UPSTREAM_GEMV_BUILD)] == UPSTREAM_GEMV_BUILD
            else f"build_module({', '.join(params[:3])}, ...) is C = A x W, not upstream's "
            f"build_module({', '.join(UPSTREAM_GEMV_BUILD)})"
        ),
        "pack_inputs": (
            None
            if hasattr(ours, "pack_inputs")
            else "no pack_inputs (upstream's [Q | S | Z] tiles of W [M, K])"
        ),
        "cpu_reference": (
            None
            if hasattr(ours, "cpu_reference")
            else "no cpu_reference(A_q, A_s, A_z, B)"
        ),
    }
    out = []
    for path, names in GEMV_CONSUMERS.items():
        if not os.path.isfile(os.path.join(air_src, "programming_examples", path)):
            out.append(f"{path}: not in this checkout")
            continue
        missing = [gaps[n] for n in names if gaps[n]]
        if missing:
            out.append(f"{path}: not run: {'; '.join(missing)}")
        else:
            print(f"{path}: its imports are present (not run: no runner for it yet)")
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
