# SPDX-License-Identifier: MIT
"""Profile the public NPU2 kernels whose whole-design times were measured, for the kernel cost model.

    make calibrate AIR_SRC=<mlir-air clone> AIE_SRC=<mlir-aie clone>

Each kernel below is built at the commit that was measured, against the host aie_api's profiling build
(-DAIE_HOST_PROFILE), and called once at the measured tile; what it issued (per slot class, per marked
loop, live block streams) is written with the measurement to int4awq/design/kernel_calibration.json, which
int4awq/design/kernel_cost.py fits. Sources are taken by their git blob id (any clone that holds the object:
`git cat-file`), or from the working tree at the same path when its blob id matches; nothing of them is
kept. Buffers are filled with one byte value (0x3c: bf16 and f32 ~0.0115, small int codes): the kernels'
instruction streams do not depend on data.

Beside the measured designs, the published loop schedules (SCHEDULES): a Peano-built kernel whose source
states the initiation interval Peano reached for a loop, profiled the same way with that loop marked
(host/profile_include/aie_kernel_utils.h stands in for upstream's loop annotations), so that the cost
model's II per loop can be checked against Peano's. `--schedules-only` rewrites just those (it needs only
the clones that hold them).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from host.upstream_check import Kernel, build  # noqa: E402

TABLE = os.path.join(REPO, "int4awq", "design", "kernel_calibration.json")
EX = "programming_examples"
INT4 = f"{EX}/matrix_vector_multiplication/int4_awq/mv_int4_bf16.cc"


@dataclass(frozen=True)
class Measured:
    name: str
    repo: str  # "mlir-air" or "mlir-aie": which clone holds the files
    commit: str  # the commit whose kernel was measured
    files: tuple  # (path, git blob id); the first is compiled, the others are what it includes
    flags: tuple
    entry: str
    args: tuple  # bytes of each pointer argument, in order
    tile: str  # the per-call tile, m x n x k
    shape: tuple  # M, K, N of the measured GEMM
    cores: int
    calls_per_core: int
    measured_s: float
    ddr_bytes: int  # the design's DDR traffic as int4awq/design/model.py counts it

    ddr_note: str
    figure: str  # where the measurement is published
    compiler: str  # the compiler of the measured build
    scalars: tuple = ()  # uint32 arguments the entry takes before its pointers
    family: str = (
        "bfp16 block mmul GEMM"  # kernels built alike, whose model error is reported together
    )


@dataclass(frozen=True)
class Schedule:
    """A loop whose Peano schedule the kernel's source publishes."""

    name: str
    repo: str
    commit: str
    files: tuple  # (path, git blob id), as Measured's
    flags: tuple
    entry: str
    args: tuple  # bytes of each pointer argument
    loop_line: int  # the marked loop's line in files[0]
    trips: int  # its iterations per entry (from the source)
    res_mii: int  # Peano's resource-bound II for it, as published
    ii: int  # the II Peano reached
    stages: int
    figure: str  # where the schedule is published


def _int4(name, commit, blob, entry, c_bytes, measured_s, figure, extra=()):
    # mlir-air's int4-AWQ GEMM at M = N = K = 2048, tiles 16 x 16 x 128, herd 8 x 4 (PR #1639's runs)
    return Measured(
        name,
        "mlir-air",
        commit,
        ((INT4, blob),),
        ("-DDIM_M=16", "-DDIM_N=16", "-DDIM_GS=128", *extra),
        entry,
        (16 * 128 // 2 + 16 * 2 + 16, 16 * 128 * 2, c_bytes),
        "16x16x128",
        (2048, 2048, 2048),
        32,
        (2048 // 16 // 8) * (2048 // 16 // 4) * (2048 // 128),
        measured_s,
        2048 * 2048 * 2 * 32 + (2048 * 1024 + 2048 * 16 * 3) * 16 + 2048 * 2048 * 2,
        "A once per N block of 64 (32x), weight records once per M block of 128 (16x), bf16 C once",
        figure,
        "Peano",
        (),
        "int4 dequantising GEMM",
    )


KERNELS = (
    _int4(
        "mlir-air int4 GEMM, aie::mac per row and group",
        "48ca85e4e5dc5660be3cad687d9a2925131b084d",
        "e52bc60dea97c81f139f32a21309b6943c80b011",
        "matmul_int4_bf16_packed",
        16 * 16 * 2,
        0.198,
        "mlir-air dbf24d66d commit message: 198 ms before that change, 2048^3 herd 8x4",
        ("-DDIM_K=128",),
    ),
    _int4(
        "mlir-air int4 GEMM, dequantise to L1 + 1x1 bf16 mmul",
        "dbf24d66d0dae59b9aa0f85f89df74889ca47b69",
        "78060e02a75f6318191d698a2a049d900e7468f2",
        "matmul_int4_bf16_packed",
        16 * 16 * 2,
        0.117,
        "mlir-air dbf24d66d commit message: 117 ms, 2048^3 herd 8x4",
        ("-DDIM_K=128",),
    ),
    _int4(
        "mlir-air int4 GEMM, 1x1 bf16 mmul, f32 C, vector scale fold",
        "e87d1b35e54ec661ef2c0899e7866930fc874467",
        "57cbbb8ad1fe48f9337893065b4dd3dc2c7416ff",
        "matmul_int4_bf16_packed_f32",
        16 * 16 * 4,
        0.117,
        "mlir-air e87d1b35e commit message: 117 ms, 2048^3 herd 8x4",
        ("-DDIM_K_CHUNK=128",),
    ),
    _int4(
        "mlir-air int4 GEMM, 2x2 bf16 mmul, contiguous dequantisation",
        "5391abacbc4e935fffff138ad07d6cd5fa07c939",
        "6f68345e5b683096ba257fe13c378f942b206207",
        "matmul_int4_bf16_packed_f32",
        16 * 16 * 4,
        0.0395,
        "mlir-air 5391abacb commit message: 39.5 ms, 2048^3 herd 8x4",
        ("-DDIM_K_CHUNK=128",),
    ),
    Measured(
        "mlir-air bf16 x bfp16ebs8 GEMM, 2x2 block mmul",
        "mlir-air",
        "ae55d05359cf02960e5f07b859a1274df80245e4",
        (
            (
                f"{EX}/matrix_multiplication/bf16_x_bfp16/mm_bf16_x_bfp16.cc",
                "49152dedd1ce5afc3707de15a2c309a043fcc7bc",
            ),
        ),
        ("-DDIM_M=64", "-DDIM_N=64", "-DDIM_K=128"),
        "matmul_bf16_x_bfp16_packed_f32",
        (64 * 128 * 2, 128 * 64 * 9 // 8, 64 * 64 * 4),
        "64x64x128",
        (2048, 2048, 2048),
        32,
        (2048 // 64 // 8) * (2048 // 64 // 4) * (2048 // 128),
        3163e-6,
        2048 * 2048 * 2 * 8 + 2048 * 2048 * 9 // 8 * 4 + 2048 * 2048 * 2,
        "A once per N block of 256 (8x), bfp16 B (9 bytes per 8 values) once per M block of 512 (4x), bf16 C",
        "mlir-air ae55d05 (PR #1656) commit message: 3163 us mean, 2048^3 herd 8x4, tile 64x64",
        "Peano",
    ),
    Measured(
        "mlir-air bf16-in f32-out GEMM mm_aie2p, bf16 mmul through bfp16",
        "mlir-air",
        "2520a0afa66a7b28ac48fff7d4dfb27496605e91",
        (
            (
                f"{EX}/matrix_multiplication/bf16_in_fp32_out/mm_aie2p.cc",
                "d506355ee54e84c56291879c67f2feab6a4a3dcf",
            ),
            (f"{EX}/matrix_multiplication/bf16_in_fp32_out/zero.cc", None),
        ),
        (
            "-DBIT_WIDTH=8",
            "-DDIM_M=64",
            "-DDIM_N=128",
            "-DDIM_K=32",
            "-DDIM_M_DIV_4=16",
            "-DDIM_N_DIV_4=32",
            "-DDIM_M_DIV_8=8",
            "-DDIM_N_DIV_8=16",
            "-DAIE_API_EMULATE_BFLOAT16_MMUL_WITH_BFP16",
        ),
        "op_has_no_registered_library_name",
        (64 * 32 * 2, 32 * 128 * 2, 64 * 128 * 4),
        "64x128x32",
        (2048, 8192, 2048),
        32,
        (2048 // 64 // 8) * (2048 // 128 // 4) * (8192 // 32),
        2 * 2048 * 8192 * 2048 / 9797e9,
        2048 * 8192 * 2 * 4 + 8192 * 2048 * 2 * 4 + 2048 * 2048 * 4,
        "A once per N block of 512 (4x), B once per M block of 512 (4x), f32 C once",
        "mlir-air 2520a0a programming_examples/kernel_registry/details/GEMM_bf16_in_fp32_out.md: "
        "9797 GFLOPS at 2048x8192x2048, tile 64x128",
        "Peano",
    ),
    Measured(
        "mlir-aie bfp16ebs8 GEMM matmul_vectorized_2x2_bfp16 (block_datatypes mm.cc)",
        "mlir-aie",
        "076fddb47a35a1a6081d125cd69a2a95747ecbe1",
        (
            (
                f"{EX}/ml/block_datatypes/matrix_multiplication/mm.cc",
                "730c6ac0767960fbde78dad93486ad2be4276ff9",
            ),
        ),
        ("-DDIM_M=96", "-DDIM_K=128", "-DDIM_N=64"),
        "matmul_vectorized_bfp16",
        (96 * 128 * 9 // 8, 128 * 64 * 9 // 8, 96 * 64 * 9 // 8),
        "96x64x128",
        (7680, 4096, 8192),
        32,
        (7680 // 96) * (8192 // 64) * (4096 // 128) // 32,
        2 * 7680 * 4096 * 8192 / 10.2e12,
        7680 * 4096 * 9 // 8 * 16 + 4096 * 8192 * 9 // 8 * 20 + 7680 * 8192 * 9 // 8,
        "bfp16 A once per N block of 512 (16x), B once per M block of 384 (20x), bfp16 C once",
        "mlir-aie programming_examples/ml/block_datatypes/matrix_multiplication/README.md: 10.2 TFLOPS "
        "at 7680x4096x8192, m x k x n = 96x128x64, 8 columns",
        "chess",
    ),
    Measured(
        "mlir-air bf16 GEMV matvec_vectorized (vector MAC, reduce per row)",
        "mlir-air",
        "0181826388bd553755248a2acd082dcbb16a21c0",
        (
            (
                f"{EX}/matrix_vector_multiplication/bf16/mv.cc",
                "f0ea54cd6a65b936f3e69c9309c5f80c5332be36",
            ),
            (f"{EX}/matrix_vector_multiplication/bf16/zero.cc", None),
        ),
        (),
        "matvec_vectorized_bf16_bf16",
        (8 * 2048 * 2, 2048 * 2, 8 * 2),
        "8x1x2048",
        (2048, 2048, 1),
        8,
        2048 // (8 * 8),
        330e-6,
        2048 * 2048 * 2 + (2048 // 64) * 8 * 2048 * 2 + 2048 * 2,
        "A once, B once per PE per launch iteration (32 x 8, L3 -> L1), C once",
        "mlir-air 018182638 programming_examples/kernel_registry/details/GEMV_bf16.md: 330 us at "
        "2048x2048, herd_m 8, tile_m 8, m_input 8 (memory-bound by its own account)",
        "Peano",
        (8, 2048, 0),
        "bf16 GEMV",
    ),
)

# m = 192, k = 128, n = 96, rho = 6: one call computes a 32 x 96 stripe of C, 12 blocks of 16 x 16
BFP_BLOCK = 72  # bytes of one 64-value bfp16ebs8 block
SCHEDULES = (
    Schedule(
        "mlir-aie PR #3650 ATB kernel mm_bfp_mixed.cc, 64 bfp16 mmuls per iteration",
        "mlir-aie",
        "52bf74a03a2d9430ff0bcf7c65970602abf616cf",
        (
            (
                "aie_kernels/aie2p/mm_bfp_mixed.cc",
                "4108cff8cec756b4b85d33f6fdede3c1839cad22",
            ),
        ),
        ("-DMATMUL_ONLY",),
        "matmul_vectorized_bfp16",
        # A sub-tile 32 x 128, B 128 x 96, C 192 x 96 (the last prefetch reads 4 blocks past a stripe)
        (
            32 * 128 // 64 * BFP_BLOCK,
            128 * 96 // 64 * BFP_BLOCK,
            192 * 96 // 64 * BFP_BLOCK,
        ),
        107,
        12,
        68,
        77,
        2,
        "mlir-aie aie_kernels/aie2p/mm_bfp_mixed.cc @ 52bf74a, its head comment: measured II=77 (= RecMII), "
        "NS=2, ResMII=68",
    ),
)
PROFILE_INCLUDE = os.path.join(REPO, "host", "profile_include")


def git_blob_id(data: bytes) -> str:
    import hashlib

    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def source_bytes(root: str, path: str, blob: str | None, commit: str) -> bytes:
    """The file as measured: by blob id from the clone's objects, else the working tree's if it matches."""
    for cmd in (
        ["git", "-C", root, "cat-file", "blob", blob] if blob else None,
        ["git", "-C", root, "show", f"{commit}:{path}"],
    ):
        if cmd is None:
            continue
        res = subprocess.run(cmd, capture_output=True)
        if res.returncode == 0:
            return res.stdout
    full = os.path.join(root, path)
    if os.path.isfile(full):
        data = open(full, "rb").read()
        if blob is None or git_blob_id(data) == blob:
            return data
        raise LookupError(
            f"{path} in {root} is not the measured version (blob {blob[:10]}, commit {commit[:10]})"
        )
    raise LookupError(f"{path} at {commit[:10]} is not in {root}")


def _run(k, root: str, work: str, flags: tuple):
    """Build k's sources into a host profiling library, call its entry once on 0x3c-filled buffers, and
    return what the call issued (kernel_profile.Profile)."""
    from int4awq.design.kernel_profile import read_profile

    base = os.path.join(work, k.commit[:10])
    for path, blob in k.files:
        dst = os.path.join(base, path)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        with open(dst, "wb") as f:
            f.write(source_bytes(root, path, blob, k.commit))
    # the acceptance corpus's g++ build of an upstream kernel, with the profiling layer on
    kernel = Kernel(k.files[0][0], "src", "kernel", ("-DAIE_HOST_PROFILE", *flags))
    problem = build(kernel, {"src": base}, base)
    if problem:
        raise RuntimeError(problem)
    lib = os.path.join(base, "kernel.so")
    dll = ctypes.CDLL(lib)
    import numpy as np

    bufs = [np.full(n + 64, 0x3C, np.uint8) for n in k.args]
    ptrs = [ctypes.c_void_p(b.ctypes.data + (-b.ctypes.data) % 64) for b in bufs]
    dll.aie_host_profile_reset()
    getattr(dll, k.entry)(
        *[ctypes.c_uint32(v) for v in getattr(k, "scalars", ())], *ptrs
    )
    return read_profile(dll)


def profile(k: Measured, root: str, work: str) -> dict:
    p = _run(k, root, work, k.flags)
    return {
        "loops": [asdict(lp) for lp in p.loops],
        "outside": p.outside,
        "outside_fills": [p.outside_fills_static, p.outside_fills_dynamic],
        "outside_acc_spill_bits": p.outside_acc_spill_bits,
        "peak_in": p.peak_in,
        "peak_out": p.peak_out,
        "peak_acc_bits": p.peak_acc_bits,
    }


def profile_schedule(k: Schedule, root: str, work: str) -> dict:
    """The published loop's profile: what one entry issued, per slot class, with its trips."""
    p = _run(k, root, work, (f"-I{PROFILE_INCLUDE}", *k.flags))
    loop = next((lp for lp in p.loops if lp.line == k.loop_line), None)
    if loop is None:
        raise RuntimeError(f"no marked loop at line {k.loop_line} of {k.files[0][0]}")
    row = asdict(k)
    for f in ("files", "flags", "args", "loop_line"):
        row.pop(f)
    row["sources"] = [f"Xilinx/{k.repo} {p} @ {k.commit[:10]}" for p, _ in k.files]
    row["loop"] = {
        "ops": loop.ops,
        "entries": loop.entries,
        "iterations": k.trips * loop.entries,
        "peak_in": loop.peak_in,
        "peak_out": loop.peak_out,
        "acc_spill_bits": loop.acc_spill_bits,
    }
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--air-src", help="a clone of Xilinx/mlir-air")
    ap.add_argument("--aie-src", help="a clone of Xilinx/mlir-aie")
    ap.add_argument(
        "--schedules-only",
        action="store_true",
        help="profile only the published loop schedules; keep the table's measured kernels",
    )
    ap.add_argument("--out", default=TABLE)
    args = ap.parse_args(argv)
    roots = {"mlir-air": args.air_src, "mlir-aie": args.aie_src}
    wanted = (() if args.schedules_only else KERNELS) + SCHEDULES
    missing = sorted({k.repo for k in wanted if not roots[k.repo]})
    if missing:
        print(f"calibrate: give the clone of {' and '.join(missing)}", file=sys.stderr)
        return 2
    old = {}
    if os.path.isfile(args.out):
        with open(args.out) as f:
            old = json.load(f)
    rows, schedules = [], []
    with tempfile.TemporaryDirectory() as work:
        try:
            for k in () if args.schedules_only else KERNELS:
                row = asdict(k)
                for f in ("files", "flags", "args", "scalars"):
                    row.pop(f)
                row["sources"] = [
                    f"Xilinx/{k.repo} {p} @ {k.commit[:10]}" for p, _ in k.files
                ]
                row["profile"] = profile(k, roots[k.repo], work)
                rows.append(row)
                print(f"profiled {k.name} ({k.tile})")
            for k in SCHEDULES:
                schedules.append(profile_schedule(k, roots[k.repo], work))
                print(f"profiled {k.name}")
        except (LookupError, RuntimeError, AttributeError, OSError) as e:
            print(f"calibrate: {k.name}: {e}", file=sys.stderr)
            return 2
    with open(args.out, "w") as f:
        json.dump(
            {
                "note": "Published NPU2 measurements of public kernels and what each kernel issues per call, "
                "and published Peano loop schedules with what the loop issues (host aie_api profiling "
                "build, host/calibrate_kernels.py); fitted and checked by int4awq/design/kernel_cost.py.",
                "kernels": old.get("kernels", []) if args.schedules_only else rows,
                "schedules": schedules,
            },
            f,
            indent=1,
        )
        f.write("\n")
    print(f"wrote {args.out}: {len(rows)} kernels, {len(schedules)} loop schedules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
