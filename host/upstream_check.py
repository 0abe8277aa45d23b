# SPDX-License-Identifier: MIT
"""Run mlir-air's own hardware-tested examples, unchanged, on this emulator: the acceptance corpus.

    python3 host/upstream_check.py --air-src <mlir-air checkout> [--aie-src <mlir-aie checkout>]
    make upstream-check AIR_SRC=<mlir-air checkout> [AIE_SRC=<mlir-aie checkout>]

Each case is an example's own builder script, run as its Makefile and lit test run it (same options), with
its kernel built for the host by g++ against the emulator's aie_api with the same -D flags its Makefile
gives Peano, in a scratch directory (build/upstream/<case>). A case passes when the script prints PASS!
(or, compile-only, finishes its compile). The documented failures are configurations mlir-air documents
as failing on NPU2 (its kernel registry, programming_examples/kernel_registry/, and the examples' own
notes): each must be refused here for the documented reason. The consumers are mlir-air's own users of its
int4 GEMM example's API (llms/llama32_1b_int4), run unchanged on this project's builder
(host/upstream_consumers.py). Nothing of mlir-air or mlir-aie is copied into this repository: the sources
are read from the given checkouts.

The last line is `upstream examples: P/T PASS, R/F documented failures rejected`; the exit code is 0 when
every case that could run passed and every documented failure was rejected, 1 otherwise, 2 on bad input.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMULATOR_DIR = os.path.join(
    REPO, "emulator"
)  # the emulator's air package and host aie_api
EX = "programming_examples"


@dataclass(frozen=True)
class Kernel:
    source: (
        str | tuple
    )  # path(s) in the checkout; several are linked into one object, as their Makefile does
    root: str | tuple  # "air" or "aie" (one per source): which checkout holds it
    lib: str  # link_with name without .o: the host build is <lib>.so
    flags: tuple[str, ...] = ()

    def parts(self):
        sources = (self.source,) if isinstance(self.source, str) else self.source
        roots = (self.root,) * len(sources) if isinstance(self.root, str) else self.root
        return list(zip(sources, roots))


@dataclass(frozen=True)
class Case:
    name: str
    script: str  # path in the mlir-air checkout
    args: tuple[str, ...]
    kernels: tuple[Kernel, ...]
    refused: str | None = None  # a documented failure: the regex its error must match
    note: str = (
        ""  # where the configuration comes from, and any change made for the emulator
    )
    env: dict = field(default_factory=dict)
    ours: bool = (
        False  # script is this checkout's (host/), given --air-src: a consumer of upstream's API
    )
    # under --sim: the kernel state the example carries into its next dispatch, which the device keeps too
    # (the simulator's second dispatch must differ, and says so; docs/sim_shows.md)
    carries: str | None = None


INT4_GEMM = f"{EX}/matrix_multiplication/int4_awq/matmul_int4_packed.py"
INT4_KERNEL = f"{EX}/matrix_vector_multiplication/int4_awq/mv_int4_bf16.cc"
GEMV = f"{EX}/matrix_vector_multiplication/int4_awq/matvec_int4_packed.py"
GEMV_ADD = f"{EX}/matrix_vector_multiplication/int4_awq/matvec_int4_packed_add.py"
F32OUT = f"{EX}/matrix_multiplication/bf16_in_fp32_out/run.py"
BF16OUT = f"{EX}/matrix_multiplication/bf16_in_bf16_out/run.py"
BFP16X = f"{EX}/matrix_multiplication/bf16_x_bfp16/matmul_bf16_x_bfp16.py"


def int4_gemm_kernel(tm, tn, tk):
    return Kernel(
        INT4_KERNEL,
        "air",
        "mv_int4_bf16",
        (
            f"-DDIM_M={tm}",
            f"-DDIM_N={tn}",
            f"-DDIM_K_CHUNK={tk}",
            "-DDIM_GS=128",
            "-DAIE_API_EMULATE_BFLOAT16_MMUL_WITH_BFP16",
        ),
    )


def gemv_kernel(m_tile=8, k_chunk=2048):
    return Kernel(
        INT4_KERNEL,
        "air",
        "mv_int4_bf16",
        (f"-DDIM_M={m_tile}", f"-DDIM_K={k_chunk}", "-DDIM_GS=128"),
    )


def dense_kernel(example, tm, tn, tk):
    """mm_aie2p.cc of the bf16 dense GEMMs, with their Makefile's -D flags."""
    return Kernel(
        f"{EX}/matrix_multiplication/{example}/mm_aie2p.cc",
        "air",
        "mm",
        (
            "-DBIT_WIDTH=8",
            f"-DDIM_M={tm}",
            f"-DDIM_N={tn}",
            f"-DDIM_K={tk}",
            f"-DDIM_N_DIV_4={tn // 4}",
            f"-DDIM_M_DIV_4={tm // 4}",
            f"-DDIM_N_DIV_8={tn // 8}",
            f"-DDIM_M_DIV_8={tm // 8}",
            "-DAIE_API_EMULATE_BFLOAT16_MMUL_WITH_BFP16",
        ),
    )


BFP16 = f"{EX}/matrix_multiplication/bfp16/run.py"
BFP16_TILES = (
    "--tile-m",
    "64",
    "--tile-k-l2",
    "128",
    "--tile-k-l1",
    "64",
    "--tile-n",
    "64",
    "--arch",
    "aie2p",
)
BFP16_LLAMA = (
    "--tile-m",
    "32",
    "--tile-k-l2",
    "128",
    "--tile-k-l1",
    "64",
    "--tile-n",
    "64",
    "--arch",
    "aie2p",
)


BFP16_SMALL_HERD = (
    "--herd-m",
    "2",
    "--herd-n",
    "2",
    "--m",
    "256",
    "--n",
    "256",
    "--k",
    "128",
) + BFP16_TILES


def bf16_x_bfp16_kernel(tm, tn, tk):
    return Kernel(
        f"{EX}/matrix_multiplication/bf16_x_bfp16/mm_bf16_x_bfp16.cc",
        "air",
        "mm_bf16_x_bfp16",
        (f"-DDIM_M={tm}", f"-DDIM_N={tn}", f"-DDIM_K={tk}"),
    )


# bfp16 cases whose kernels leave a core's state changed for its next dispatch (docs/sim_shows.md, section 4)
BFP16_CARRIES = {
    "512^3, herd 4x4, bf16 out": "bfp_cvt.cc's bfp16_to_bf16_mn sets the core's rounding mode to conv_even "
    "and never restores it, and mm_bfp.cc re-quantises its accumulator under that mode: each core's first "
    "launch iteration runs under floor (the reset value), every later one under conv_even",
}


def bfp16_kernel(tm, tk, tn):
    return Kernel(
        ("aie_kernels/aie2p/mm_bfp.cc", f"{EX}/matrix_multiplication/bfp16/bfp_cvt.cc"),
        ("aie", "air"),
        "mm_bfp",
        (f"-DDIM_M={tm}", f"-DDIM_K={tk}", f"-DDIM_N={tn}"),
    )


def gemv_args(m, k):
    """The int4 GEMV scripts' options as their Makefile passes them (M_TILE 8, K_CHUNK 2048)."""
    return (
        "--output-format",
        "elf",
        "--m",
        str(m),
        "--k",
        str(k),
        "--gs",
        "128",
        "--m-tile",
        "8",
        "--k-chunk",
        "2048",
    )


def gemm_args(m, k, n, tm, tn, tk1, tk2, hm, hn):
    return (
        "--m",
        str(m),
        "--k",
        str(k),
        "--n",
        str(n),
        "--tile-m",
        str(tm),
        "--tile-n",
        str(tn),
        "--tile-k-l1",
        str(tk1),
        "--tile-k-l2",
        str(tk2),
        "--herd-m",
        str(hm),
        "--herd-n",
        str(hn),
    )


def f32out(m, k, n, tm=64, tk2=256, tk1=32, tn=128, mode="compile-and-run"):
    return (
        "--arch",
        "aie2p",
        "--codegen",
        "external",
        "--m",
        str(m),
        "--k",
        str(k),
        "--n",
        str(n),
        "--tile-m",
        str(tm),
        "--tile-k-l2",
        str(tk2),
        "--tile-k-l1",
        str(tk1),
        "--tile-n",
        str(tn),
        "--herd-m",
        "8",
        "--herd-n",
        "4",
        "--compile-mode",
        mode,
        "--perf-iters",
        "0",
    )


CASES = (
    # The int4 GEMM and GEMV: their lit tests' configurations (run_packed_npu2_*_peano.lit).
    Case(
        "int4 GEMM 64x128x128, herd 2x4",
        INT4_GEMM,
        ("--m", "64", "--k", "128", "--n", "128", "--gs", "128")
        + gemm_args(64, 128, 128, 16, 16, 128, 128, 2, 4)[6:],
        (int4_gemm_kernel(16, 16, 128),),
        note="run_packed_npu2_small_peano.lit",
    ),
    Case(
        "int4 GEMM 32x2048x2048, herd 2x4",
        INT4_GEMM,
        ("--m", "32", "--k", "2048", "--n", "2048", "--gs", "128")
        + gemm_args(32, 2048, 2048, 16, 16, 128, 2048, 2, 4)[6:],
        (int4_gemm_kernel(16, 16, 128),),
        note="run_packed_npu2_llama_qproj_seq32_peano.lit",
    ),
    Case(
        "int4 GEMV 2048x2048",
        GEMV,
        gemv_args(2048, 2048),
        (gemv_kernel(),),
        note="run_packed_npu2_2048x2048_peano.lit",
    ),
    Case(
        "int4 GEMV 2048x8192",
        GEMV,
        gemv_args(2048, 8192),
        (gemv_kernel(),),
        note="run_packed_npu2_2048x8192_peano.lit",
    ),
    Case(
        "int4 GEMV + residual add 2048x2048",
        GEMV_ADD,
        gemv_args(2048, 2048),
        (gemv_kernel(),),
        note="run_packed_add_npu2_2048x2048_peano.lit",
    ),
    # RMSNorm in vector and math ops inside the herd (no external kernel): its two lit configurations
    # (run_makefile_peano.lit: one tile; run_makefile_peano_multi_tile.lit: the Makefile's herd).
    *(
        Case(
            f"weighted RMSNorm 2048x2048, herd {x}x1",
            f"{EX}/weighted_rms_norm/weighted_rms_norm.py",
            ("--herd-x", str(x)),
            (),
            note=lit,
        )
        for x, lit in (
            (1, "run_makefile_peano.lit"),
            (8, "run_makefile_peano_multi_tile.lit"),
        )
    ),
    # The dense bf16 GEMM with f32 out, external kernel, its Makefile's default tiles (64/256/32/128, 8x4).
    Case(
        "bf16-in f32-out GEMM 2048x8192x2048, external",
        F32OUT,
        f32out(2048, 8192, 2048),
        (dense_kernel("bf16_in_fp32_out", 64, 128, 32),),
        note="run_npu2_external_peano.lit",
    ),
    Case(
        "bf16-in f32-out GEMM 2048x2048x11008, tile_n 64, tile_k_l2 128 (builds)",
        F32OUT,
        f32out(2048, 2048, 11008, tn=64, tk2=128, mode="compile-only"),
        (dense_kernel("bf16_in_fp32_out", 64, 64, 32),),
        note="kernel registry: the Qwen2.5-3B gate/up shape builds at tile_k_l2 = 128",
    ),
    # The dense bf16 GEMM with bf16 out: the drain method at its lit's tile_m 32.
    Case(
        "bf16-in bf16-out GEMM 2048x8192x2048, drain, tile_m 32",
        BF16OUT,
        (
            "--m",
            "2048",
            "--k",
            "8192",
            "--n",
            "2048",
            "--tile-m",
            "32",
            "--high-precision",
            "true",
            "--method",
            "drain",
        ),
        (dense_kernel("bf16_in_bf16_out", 32, 128, 32),),
        note="run_npu2_high_precision_drain_peano.lit",
    ),
    # bf16 x bfp16: its two lit configurations.
    Case(
        "bf16 x bfp16 GEMM 64x64x64, herd 1x1",
        BFP16X,
        gemm_args(64, 64, 64, 64, 64, 64, 64, 1, 1),
        (bf16_x_bfp16_kernel(64, 64, 64),),
        note="run_packed_npu2_small_peano.lit",
    ),
    Case(
        "bf16 x bfp16 GEMM 2048^3, herd 8x4",
        BFP16X,
        gemm_args(2048, 2048, 2048, 64, 64, 128, 2048, 8, 4),
        (bf16_x_bfp16_kernel(64, 64, 128),),
        note="run_packed_npu2_llama_qproj_peano.lit",
    ),
    # bfp16 x bfp16 with mlir-aie's reference kernel aie_kernels/aie2p/mm_bfp.cc, linked with the example's
    # bfp_cvt.cc into one object as its Makefile does. Its script refuses to run without PEANO_INSTALL_DIR
    # (a guard for the NPU build); the emulator needs no Peano, so the variable names a placeholder.
    *(
        Case(
            f"bfp16 GEMM {label}",
            BFP16,
            args,
            (bfp16_kernel(*tiles),),
            note=lit,
            env={"PEANO_INSTALL_DIR": "/nonexistent/peano-not-needed-by-the-emulator"},
            carries=BFP16_CARRIES.get(label),
        )
        for label, args, tiles, lit in (
            (
                "64^3, herd 1x1",
                (
                    "--herd-m",
                    "1",
                    "--herd-n",
                    "1",
                    "--m",
                    "64",
                    "--n",
                    "64",
                    "--k",
                    "64",
                    "--tile-m",
                    "64",
                    "--tile-k-l2",
                    "64",
                    "--tile-k-l1",
                    "64",
                    "--tile-n",
                    "64",
                    "--arch",
                    "aie2p",
                ),
                (64, 64, 64),
                "run_npu2_makefile_peano_1x1.lit",
            ),
            (
                "512^3, herd 4x4",
                (
                    "--herd-m",
                    "4",
                    "--herd-n",
                    "4",
                    "--m",
                    "512",
                    "--n",
                    "512",
                    "--k",
                    "512",
                )
                + BFP16_TILES,
                (64, 64, 64),
                "run_npu2_makefile_peano.lit",
            ),
            (
                "512^3, herd 4x4, bf16 out",
                (
                    "--herd-m",
                    "4",
                    "--herd-n",
                    "4",
                    "--m",
                    "512",
                    "--n",
                    "512",
                    "--k",
                    "512",
                )
                + BFP16_TILES
                + ("--output-dtype", "bf16"),
                (64, 64, 64),
                "run_npu2_makefile_peano_bf16_output.lit",
            ),
            (
                "1024x512x512, herd 8x4",
                (
                    "--herd-m",
                    "8",
                    "--herd-n",
                    "4",
                    "--m",
                    "1024",
                    "--n",
                    "512",
                    "--k",
                    "512",
                )
                + BFP16_TILES,
                (64, 64, 64),
                "run_npu2_makefile_peano_8x4.lit",
            ),
            (
                "128x2048x2048, herd 4x4",
                (
                    "--herd-m",
                    "4",
                    "--herd-n",
                    "4",
                    "--m",
                    "128",
                    "--k",
                    "2048",
                    "--n",
                    "2048",
                )
                + BFP16_LLAMA,
                (32, 64, 64),
                "run_npu2_llama_4x4_qo_peano.lit",
            ),
            (
                "128x2048x512, herd 4x4",
                (
                    "--herd-m",
                    "4",
                    "--herd-n",
                    "4",
                    "--m",
                    "128",
                    "--k",
                    "2048",
                    "--n",
                    "512",
                )
                + BFP16_LLAMA,
                (32, 64, 64),
                "run_npu2_llama_4x4_kv_peano.lit",
            ),
        )
    ),
    # bfp16 on a small herd with several launch iterations: the script's own choice, [1, 1], runs; its
    # documented failure, [2, 2] there (only the first launch iteration's C written), is refused.
    Case(
        "bfp16 GEMM 256x128x256, herd 2x2, 4 launch iterations",
        BFP16,
        BFP16_SMALL_HERD,
        (bfp16_kernel(64, 64, 64),),
        note="bfp16/run.py's [1, 1] branch (no lit test runs it)",
        env={"PEANO_INSTALL_DIR": "/nonexistent/peano-not-needed-by-the-emulator"},
    ),
    Case(
        "bfp16 GEMM 256x128x256, herd 2x2, --runtime-loop-tiling 2",
        BFP16,
        BFP16_SMALL_HERD + ("--runtime-loop-tiling", "2"),
        (bfp16_kernel(64, 64, 64),),
        refused=r"only the first launch iteration's output is written",
        note="bfp16/run.py: [2, 2] on herds 2x2 / 2x1 / 1x2 writes only the first launch iteration's output",
        env={"PEANO_INSTALL_DIR": "/nonexistent/peano-not-needed-by-the-emulator"},
    ),
    # Documented failures (mlir-air programming_examples/kernel_registry/).
    Case(
        "bf16-in f32-out GEMM 2048x2048x11008, tile_n 64, tile_k_l2 256",
        F32OUT,
        f32out(2048, 2048, 11008, tn=64, tk2=256, mode="compile-only"),
        (dense_kernel("bf16_in_fp32_out", 64, 64, 32),),
        refused=r"Stride 2818048 exceeds the \[1:1048576\] range",
        note="supported_kernels.md, Qwen2.5-3B gate/up: 'aie.dma_bd op Stride 2818048 exceeds the [1:1048576] range'",
    ),
    Case(
        "bf16-in bf16-out GEMM 2048x8192x2048, drain, tile_m 64",
        BF16OUT,
        (
            "--m",
            "2048",
            "--k",
            "8192",
            "--n",
            "2048",
            "--tile-m",
            "64",
            "--high-precision",
            "true",
            "--method",
            "drain",
            "--compile-mode",
            "compile-only",
        ),
        (dense_kernel("bf16_in_bf16_out", 64, 128, 32),),
        refused=r"per-PE L1 \(allocations \+ stack\) needs \d+ bytes, the limit is 65536",
        note="details/GEMM_bf16_in_bf16_out.md: at tile_m = 64 the drain needs 72 KB > 64 KB of L1",
    ),
) + tuple(
    # mlir-air's users of its int4 GEMM's API, run unchanged on this project's builder
    # (host/upstream_consumers.py says what each runs and checks)
    Case(
        f"llama32_1b_int4 {consumer} on our matmul_int4_packed",
        "host/upstream_consumers.py",
        ("--consumer", consumer),
        (),
        note=f"llms/llama32_1b_int4: {what}",
        ours=True,
    )
    for consumer, what in (
        ("gemm_builder", "gemm_builder._build_int4_gemm_module, m_per_segment 2"),
        ("awq_pack", "awq_pack.awq_pack_for_npu of a synthetic AutoAWQ layer"),
        ("o_ffn", "o_ffn_int4_multi.py's calls, per GEMM (o, gate, up, down)"),
        ("rms_gemms_rope", "rms_gemms_rope_int4_multi.py's calls, per GEMM (q, k, v)"),
        (
            "gemv_api",
            "the GEMV's users, each named with what it needs of matvec_int4_packed",
        ),
    )
)


def build(kernel: Kernel, roots: dict, out_dir: str) -> str | None:
    """g++ of one kernel (its sources into one library) into out_dir/<lib>.so; None, or why not."""
    paths = []
    for source, root in kernel.parts():
        path = os.path.join(roots[root], source)
        if not os.path.isfile(path):
            return f"{source} is not in {roots[root]}"
        paths.append(path)
    cmd = [
        "g++",
        "-std=c++20",
        "-O2",
        "-fPIC",
        "-shared",
        "-w",
        "-I",
        os.path.join(EMULATOR_DIR, "include"),
        *kernel.flags,
        *paths,
        "-o",
        os.path.join(out_dir, kernel.lib + ".so"),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode:
        first = next(
            (ln for ln in res.stderr.splitlines() if "error" in ln),
            res.stderr.strip()[:300],
        )
        return f"g++ {' '.join(os.path.basename(p) for p in paths)}: {first}"
    return None


# --sim: the scripts' XRTBackend runs each module through aircc + aiecc and the simulator of the compiled
# design (host/sim_invoke.py) instead of the emulator's interpreter.
SIM_RUNNER = "host.sim_invoke:run"


def run_case(
    case: Case, air_src: str, aie_src: str | None, timeout: float, sim: bool = False
) -> tuple[str, str]:
    """(verdict, detail): verdict is PASS, FAIL, SKIP, REJECTED or NOT REJECTED; under sim a documented
    failure's case is SHOWN or NOT SHOWN by the simulator of its compiled design."""
    roots = {"air": air_src, "aie": aie_src}
    work = os.path.join(
        REPO,
        "build",
        "upstream",
        re.sub(r"[^a-z0-9]+", "_", case.name.lower()).strip("_"),
    )
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    for k in case.kernels:
        missing = [source for source, root in k.parts() if roots[root] is None]
        if missing:
            return "SKIP", f"needs {missing[0]} from mlir-aie: give AIE_SRC"
        err = build(k, roots, work)
        if err:
            return ("FAIL" if case.refused is None else "NOT REJECTED"), err
    script = os.path.join(REPO if case.ours else air_src, case.script)
    args = (*case.args, "--air-src", air_src) if case.ours else case.args
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([EMULATOR_DIR, os.path.dirname(script), REPO]),
        AIR_EMU_AIRCC_DIR=os.path.join(
            work, "aircc"
        ),  # the module and the emulator's decisions
        **case.env,
    )
    if sim:
        env["AIR_EMU_RUN_WITH"] = SIM_RUNNER
        env["AIR_SIM_BUILD"] = os.path.join(work, "compiled")
    t0 = time.monotonic()
    try:
        res = subprocess.run(
            [sys.executable, script, *args],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return "FAIL", f"no result within {timeout:.0f} s"
    out = res.stdout + res.stderr
    took = f"{time.monotonic() - t0:.0f} s"
    if case.refused is not None and sim:
        # under --sim the emulator's refusal is not enforced: the compiled design itself is run, and what
        # it does is the report (a documented hardware failure the simulator does not show is "NOT SHOWN")
        if res.returncode == 0 and "PASS!" in out:
            return (
                "NOT SHOWN",
                f"{took}: the compiled design, simulated, gives the right output: the failure mlir-air "
                f"documents is not in what the simulator models",
            )
        lines = [ln for ln in out.splitlines() if ln.strip()]
        said = (
            [ln for ln in lines if "refuses it" in ln or "hangs" in ln]
            or lines[-1:]
            or [""]
        )
        return "SHOWN", f"{took}: {said[0].strip()[:200]}"
    if case.refused is not None:
        if res.returncode and re.search(case.refused, out):
            return "REJECTED", f"{took}: {re.search(case.refused, out).group(0)}"
        return (
            "NOT REJECTED",
            f"{took}: exit {res.returncode}, expected /{case.refused}/",
        )
    if case.carries is not None and sim:
        said = re.search(r"differs on dispatch \d+ of \d+: [^(]*", out)
        if said:
            return "CARRIES", f"{took}: {said.group(0).strip()} ({case.carries})"
        return (
            "NOT CARRIED",
            f"{took}: expected a second dispatch that differs ({case.carries})",
        )
    compile_only = "compile-only" in case.args
    ok = res.returncode == 0 and (("PASS!" in out) or compile_only)
    tail = [ln for ln in out.splitlines() if ln.strip()][-1:] or [""]
    agree = aircc_agreement(os.path.join(work, "aircc")) if ok else ""
    if agree.startswith("aircc DISAGREES"):
        ok = False
    return ("PASS" if ok else "FAIL"), f"{took}: {tail[0][:160]}" + (
        f"; {agree}" if agree else ""
    )


def aircc_agreement(where: str) -> str:
    """The emulator's split and ping-pong decisions for the module it compiled last, against aircc's own
    passes (air-opt), when the compiler is installed: "aircc agrees", "aircc DISAGREES: ...", or why not
    compared."""
    sys.path.insert(0, REPO)
    from int4awq.design import compiled, compiler

    mlir, mine = os.path.join(where, "air.mlir"), os.path.join(
        where, "emu-decisions.json"
    )
    missing = compiler.tools_missing("air-opt")
    if missing or not os.path.exists(mlir):
        return f"not compared with aircc ({missing or 'no module compiled'})"
    import json

    with open(mlir) as f:
        text = f.read()
    with open(mine) as f:
        emu = json.load(f)
    try:
        dec = compiled.air_decisions(text)
    except compiler.CompileError as e:
        return f"aircc DISAGREES: the printed module does not go through aircc's passes: {e}"
    diffs = compiled.disagreements(dec, emu)
    return "aircc DISAGREES: " + "; ".join(diffs) if diffs else "aircc agrees"


# docs/design.md's provenance table names, for every construct of the designs, the mlir-air example that
# uses it and the NPU2 lit test that runs it: each must exist in the checkout, each lit test must require
# ryzen_ai_npu2.
PROVENANCE = os.path.join(REPO, "docs", "design.md")
_NAMED = re.compile(
    r"`((?:matrix_multiplication|matrix_vector_multiplication|llms|fused_decode|eltwise_add_with_l2|silu_and_mul|rope_halfsplit|attention_decode|flash_attention)/[^`\s]+?\.(?:py|lit|cc|md))`"
)


def check_provenance(doc: str, air_src: str) -> tuple[str, bool]:
    """(the report line, all good): the files the provenance table of `doc` names, in the checkout."""
    with open(doc) as f:
        text = f.read()
    start = text.index("## Provenance")
    end = text.index("\n#", text.index("\n", start) + 1)
    named = sorted(set(_NAMED.findall(text[start:end])))
    missing, untested = [], []
    for path in named:
        full = os.path.join(air_src, EX, path)
        if not os.path.isfile(full):
            missing.append(path)
        elif path.endswith(".lit"):
            with open(full) as f:
                if "ryzen_ai_npu2" not in f.read():
                    untested.append(path)
    lits = sum(p.endswith(".lit") for p in named)
    name = os.path.relpath(doc, REPO) if doc.startswith(REPO + os.sep) else doc
    line = (
        f"provenance: {len(named) - len(missing)}/{len(named)} files named in "
        f"{name} exist in the checkout, "
        f"{lits - len(untested) - sum(p.endswith('.lit') for p in missing)}/{lits} lit tests require ryzen_ai_npu2"
    )
    for path in missing:
        line += f"\n  missing: {EX}/{path}"
    for path in untested:
        line += f"\n  no REQUIRES: ryzen_ai_npu2: {EX}/{path}"
    return line, not (missing or untested)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--air-src",
        required=True,
        help="a checkout of Xilinx/mlir-air (programming_examples/ is used)",
    )
    p.add_argument(
        "--aie-src",
        help="a checkout of Xilinx/mlir-aie, or any tree holding its aie_kernels/",
    )
    p.add_argument("--only", help="run the cases whose name contains this text")
    p.add_argument(
        "--timeout", type=float, default=1800, help="seconds per case (default 1800)"
    )
    p.add_argument(
        "--sim",
        action="store_true",
        help="run each design as aircc + aiecc compile it, in the simulator of the compiled design, "
        "instead of the emulator's interpreter (needs the compiler)",
    )
    args = p.parse_args(argv)
    if not os.path.isdir(os.path.join(args.air_src, EX)):
        print(
            f"error: {args.air_src} has no {EX}/: give a checkout of mlir-air as --air-src / AIR_SRC",
            file=sys.stderr,
        )
        return 2
    if args.aie_src is not None and not os.path.isdir(
        os.path.join(args.aie_src, "aie_kernels")
    ):
        print(
            f"error: {args.aie_src} has no aie_kernels/: give a checkout of mlir-aie as --aie-src / AIE_SRC",
            file=sys.stderr,
        )
        return 2
    cases = [c for c in CASES if args.only is None or args.only in c.name]
    passed = total = rejected = failures = carried = 0
    bad = False
    if PROVENANCE:
        line, ok = check_provenance(PROVENANCE, args.air_src)
        print(line, flush=True)
        bad |= not ok
    for i, case in enumerate(cases, 1):
        # a case can run for minutes: say which one is running (stderr, so stdout stays the report)
        print(
            f"[{i}/{len(cases)}] running {case.name} ...", file=sys.stderr, flush=True
        )
        verdict, detail = run_case(
            case, args.air_src, args.aie_src, args.timeout, args.sim
        )
        print(f"{verdict:<13} {case.name}  [{case.note}]  {detail}", flush=True)
        if verdict == "SKIP":
            continue
        if case.refused is not None:
            failures += 1
            rejected += verdict in ("REJECTED", "SHOWN", "NOT SHOWN")
            bad |= verdict not in ("REJECTED", "SHOWN", "NOT SHOWN")
        elif verdict == "CARRIES":
            carried += 1
        else:
            total += 1
            passed += verdict == "PASS"
            bad |= verdict != "PASS"
    print(
        f"upstream examples: {passed}/{total} PASS, {rejected}/{failures} documented failures rejected"
        + (
            f", {carried} carrying kernel state into the next dispatch as the device would"
            if carried
            else ""
        )
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
