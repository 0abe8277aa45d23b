#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The hardware bring-up ladder: one risk per step, from the toolchain to repeated dispatch (docs/bringup.md).

    host/bringup.py --backend npu          on an NPU2 machine (aircc, Peano, XRT)
    host/bringup.py --backend emu          the same steps on the emulator (part of `make test`)
    host/bringup.py --keep-going           run every step even after a FAIL
    host/bringup.py --steps 2,3            only these steps

Each step prints one line: what it isolates, PASS / FAIL / DIFFERS (the hardware works but differs from what
the host model assumes), its figures, and on FAIL what to look at next. Exit codes: 0 every step passed, 1 a
step failed or differs (the summary names the first), 2 bad input or environment.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

HOST_DIR = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HOST_DIR)
sys.path.insert(0, REPO)
sys.path.insert(0, HOST_DIR)

from int4awq.errors import ConfigError, missing_module_line  # noqa: E402

try:
    import numpy as np
    from ml_dtypes import bfloat16

    import kernel_probe as kp
    import run as host_run
    from int4awq.design import compiler
    from int4awq.kernel import record
    from int4awq.run.reference import check, reference_gemm
except ModuleNotFoundError as _missing:
    print(missing_module_line(_missing), file=sys.stderr)
    sys.exit(2)

EMULATOR_DIR = os.path.join(REPO, "emulator")
BUILD_ROOT = os.path.join(REPO, "build", "bringup")

PROBE_GEMM, PROBE_GEMM_K16 = kp.PROBE_GEMM, kp.PROBE_GEMM_K16
PROBE_GEMV, PROBE_GEMV_FLOOR = kp.PROBE_GEMV, kp.PROBE_GEMV_FLOOR
PROBE_OBJECTS, GEMV_PROBE_ROWS = kp.PROBE_OBJECTS, kp.GEMV_PROBE_ROWS
NUMERICS_ROWS = 8  # one full band: the A line then holds all 8 rows' blocks
REPEATS = 3  # dispatches of one loaded design in step 9

MAKE_TILES = (
    " --tile-m 64 --tile-n 64 --tile-k-l1 64 --tile-k-l2 512"  # the Makefile's defaults
)
# (step, host/run.py arguments): the GEMM and GEMV designs of steps 4 to 9, the shapes of the make targets
# named beside them.
DESIGN_RUNS = {
    4: "--m 64 --k 512 --n 64 --herd-m 1 --herd-n 1" + MAKE_TILES,  # make run1x1
    5: "--m 128 --k 512 --n 256 --herd-m 2 --herd-n 4" + MAKE_TILES,  # make run2x4
    6: "--m 512 --k 1024 --n 256 --herd-m 8 --herd-n 4" + MAKE_TILES,  # make run8x4
    7: "--m 2048 --k 2048 --n 2048 --herd-m 8 --herd-n 4 --tile-m 64 --tile-n 128 --tile-k-l1 32 --tile-k-l2 256",  # make run_llama_qproj
    8: "--design gemv --m 1 --k 2048 --n 2048",  # make run_llama_decode
}
REPEAT_RUN = 5  # step 9 dispatches step 5's design


@dataclass
class Outcome:
    status: str  # PASS, FAIL, DIFFERS, SKIP
    figures: str = ""
    lines: list[str] = field(default_factory=list)  # detail printed under the step line


@dataclass(frozen=True)
class Step:
    number: int
    name: str
    isolates: str
    on_fail: str  # what a FAIL most likely means, where to look next
    run: Callable[["Ladder"], Outcome]


class Ladder:
    """What the steps share: the backend, the probe runner, build directories."""

    def __init__(self, backend: str, build_root: str, seed: int):
        self.backend, self.build_root, self.seed = backend, build_root, seed
        self.probes = kp.ProbeRunner(backend, os.path.join(build_root, "probes"))
        if backend == "emu":
            sys.path.insert(
                0, EMULATOR_DIR
            )  # `import air` now resolves to the emulator

    @property
    def npu(self) -> bool:
        return self.backend == "npu"


# ------------------------------------------------------------------------------------------ step 1
def _version(dist: str) -> str:
    for name in (dist, dist.replace("_", "-")):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return "not installed"


def _make_kernels(target: str, obj: record.KernelObject) -> tuple[int, str]:
    proc = subprocess.run(
        ["make", "-s", "-C", os.path.join(REPO, "kernels"), target, *obj.make_args()],
        capture_output=True,
        text=True,
    )
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def step_environment(ladder: Ladder) -> Outcome:
    lines = [
        f"python {platform.python_version()}, numpy {np.__version__}, ml_dtypes {_version('ml_dtypes')}"
    ]
    if not ladder.npu:
        if shutil.which(os.environ.get("HOST_CXX", "g++")) is None:
            return Outcome(
                "FAIL", "no host C++ compiler (g++) for the kernel's host build", lines
            )
        for obj in PROBE_OBJECTS:
            code, out = _make_kernels("host", obj)
            if code:
                return Outcome(
                    "FAIL",
                    f"host build of {obj.stem} failed",
                    lines + out.splitlines()[-5:],
                )
        return Outcome("PASS", "emulator: host build of the probe objects", lines)
    from int4awq.run.npu import npu2_present

    found, why = npu2_present()
    lines.append(why)
    if not found:
        return Outcome("FAIL", "no NPU2", lines)
    lines.append(
        f"mlir_air {_version('mlir_air')}, mlir_aie {_version('mlir_aie')} (the code follows mlir-air e972f29)"
    )
    try:
        import pyxrt  # noqa: F401
        import air.backend.xrt  # noqa: F401
    except ImportError as e:
        return Outcome("FAIL", f"cannot import {e.name}", lines)
    code, out = _make_kernels("peano-version", PROBE_GEMM)
    lines.extend(out.splitlines())  # the minimum / pin check's own lines
    if code:
        return Outcome("FAIL", "Peano (llvm-aie) missing or below the minimum", lines)
    for obj in PROBE_OBJECTS:
        code, out = _make_kernels("size", obj)
        lines.extend(out.splitlines()[-1:])
        if code:
            return Outcome(
                "FAIL", f"{obj.stem}: over 16 KB of program memory, or not built", lines
            )
    return Outcome(
        "PASS",
        f"NPU2, pyxrt, mlir-air, Peano; {len(PROBE_OBJECTS)} kernel objects within 16 KB",
        lines,
    )


# ------------------------------------------------------------------------------------------ step 2
def _same_bits(got: np.ndarray, want: np.ndarray) -> tuple[bool, str]:
    g, w = got.reshape(-1).view(np.uint8), want.reshape(-1).view(np.uint8)
    bad = np.nonzero(g != w)[0]
    if not bad.size:
        return True, ""
    return False, f"{bad.size} of {g.size} bytes differ, first at byte {bad[0]}"


def _probe_checks(
    ladder: Ladder, obj: record.KernelObject, rows: int
) -> list[tuple[str, bool, str]]:
    """(what, ok, detail) of each check of one kernel object's three probes."""
    checks = []
    tn, tk = obj.tile_n, obj.tile_k

    p = kp.Probe(obj, rows, "zero")
    acc = ladder.probes.run(p, [])[0]
    checks.append(
        ("zero", not acc.any(), f"{np.count_nonzero(acc)} nonzero of {acc.size}")
    )

    p = kp.Probe(obj, rows, "accumulate")
    inputs, a, w = kp.accumulate_inputs(p, ladder.seed)
    acc, scratch = ladder.probes.run(p, inputs)
    host_acc, host_scratch = kp.host_outputs(p, inputs)
    e, v = kp.w_lines(scratch, tn, tk)
    want = kp.w_lines_expected(w, tn, tk)
    # the line image's exponent is 133 throughout; dense codes take the conversion's (checked against the
    # host build's scratch below)
    ok = np.array_equal(v, want) and (obj.dense or bool((e == kp.BFP16_BIAS).all()))
    checks.append(
        (
            "dequantised W = q - z exactly",
            ok,
            f"{np.count_nonzero(v != want)} values wrong",
        )
    )
    vectors = tk // 8 * (1 if p.gemv else 2)
    ae, am = kp.a_line(scratch, tn, tk, vectors)
    want_a = kp.a_line_expected(p, a)
    got_a = kp.block_values(ae, am)
    checks.append(
        (
            "A to bfp16 blocks",
            np.array_equal(got_a, want_a),
            f"{np.count_nonzero(got_a != want_a)} values differ",
        )
    )
    defined = tn // 16 * record.w_pair_line_bytes(tk) + vectors * 8 * kp.BLOCK_BYTES
    ok, why = _same_bits(scratch[:defined], host_scratch[:defined])
    checks.append(("scratch = host build", ok, why))
    ok, why = _same_bits(acc, host_acc)
    checks.append(("accumulator = host build", ok, why))
    c = kp.bf16_rne(kp.acc_to_rows(p, acc)).astype(bfloat16)
    ok, why = _same_bits(c, kp.expected_c(p, a, w))
    checks.append(("bf16(accumulator) = numpy model", ok, why))

    p = kp.Probe(obj, rows, "drain")
    acc_in = kp.drain_input(p, ladder.seed + 2)
    c = ladder.probes.run(p, p.drain_inputs(acc_in))[0]
    ok, why = _same_bits(c, kp.drain_expected(p, acc_in))
    checks.append(("drain = bf16 round to nearest even", ok, why))
    return checks


# The one rule of the core's accfloat -> bfp16ebs8 conversion that the nibble formats' dequantisation stands
# on: a block's exponent byte E is its largest magnitude's biased exponent, so that largest magnitude's
# mantissa lies in 64 .. 127 (-64 .. -127). The AWQ zero-point pattern (eight copies of bf16 0x5D80 + 2z per
# block: mantissas 64 + z under E 187) and the MXFP4 exponent pattern (eight copies of a power of two:
# mantissas 64) are exact only under it. Each block below: (what, its 8 values as bf16 bits, the exponent
# byte and mantissas the rule gives, written out by hand). Two other rules a block converter might follow are
# told apart: E one higher (mantissas 32 .. 63, headroom for rounding) halves every mantissa below, and using
# -128 for a negative power of two gives block "max -1.0" E 126 and mantissa -128.
def _bf16_bits(*values: float) -> tuple[int, ...]:
    return tuple(
        int(b) for b in np.array(values, np.float32).astype(bfloat16).view(np.uint16)
    )


CONVERSION_RULE_BLOCKS = (
    ("zero point 0 (0x5D80 x 8)", (0x5D80,) * 8, 187, (64,) * 8),
    ("zero point 15 (0x5D9E x 8)", (0x5D9E,) * 8, 187, (79,) * 8),
    ("zero point 7 (0x5D8E x 8)", (0x5D8E,) * 8, 187, (71,) * 8),
    ("MXFP4 scale 2^-20 (x 8)", _bf16_bits(*[2.0**-20] * 8), 107, (64,) * 8),
    ("MXFP4 scale 2^100 (x 8)", _bf16_bits(*[2.0**100] * 8), 227, (64,) * 8),
    (
        "max 1.0",
        _bf16_bits(1.0, 0.5, -0.25, 0.125, 0.75, -0.5, 0.0, 0.015625),
        127,
        (64, 32, -16, 8, 48, -32, 0, 1),
    ),
    (
        "max 1.984375",
        _bf16_bits(1.984375, -1.0, 0.5, 0.0, -1.984375, 1.5, 0.25, -0.015625),
        127,
        (127, -64, 32, 0, -127, 96, 16, -1),
    ),
    (
        "max -1.0",
        _bf16_bits(-1.0, 0.5, 0.25, 0.0, -0.5, 0.125, 0.0, 0.0),
        127,
        (-64, 32, 16, 0, -32, 8, 0, 0),
    ),
)


def conversion_rule_rows() -> np.ndarray:
    """[8, tile_k] bf16 for the GEMV probe: K block 0 of row r is CONVERSION_RULE_BLOCKS[r], the rest 0."""
    a = np.zeros((8, PROBE_GEMV.tile_k), np.uint16)
    for r, (_, bits, _, _) in enumerate(CONVERSION_RULE_BLOCKS):
        a[r, :8] = bits
    return a.view(bfloat16)


def check_conversion_rule(ladder: Ladder) -> tuple[str, bool, str]:
    """One accumulate call of the GEMV probe on conversion_rule_rows(): the A line's first 8 blocks (K
    block 0, rows 0 .. 7) against the rule's exponent bytes and mantissas."""
    p = kp.Probe(PROBE_GEMV, 8, "accumulate")
    inputs, _, _ = kp.accumulate_inputs(p, ladder.seed, a_rows=conversion_rule_rows())
    _, scratch = ladder.probes.run(p, inputs)
    exps, mants = kp.a_line(scratch, PROBE_GEMV.tile_n, PROBE_GEMV.tile_k, 1)
    for r, (what, _, e, m) in enumerate(CONVERSION_RULE_BLOCKS):
        if exps[r] != e or tuple(mants[r]) != m:
            return (
                CONVERSION_RULE,
                False,
                f"block '{what}': exponent byte {exps[r]}, mantissas {mants[r].tolist()}; the rule gives {e}, "
                f"{list(m)}: the nibble formats' dequantisation is wrong on this core (docs/kernel.md"
                "#the-conversion-rule-the-nibble-formats-stand-on)",
            )
    return CONVERSION_RULE, True, ""


CONVERSION_RULE = "conversion rule: E = the block maximum's biased exponent"


def step_kernel_harness(ladder: Ladder) -> Outcome:
    checks = [check_conversion_rule(ladder)]  # first: every nibble format stands on it
    for obj, rows in (
        (PROBE_GEMM, PROBE_GEMM.tile_m),
        (PROBE_GEMM_K16, PROBE_GEMM_K16.tile_m),
        (PROBE_GEMV, GEMV_PROBE_ROWS),
    ):
        checks += [
            (f"{obj.entries}_int4 {obj.tile_n}x{obj.tile_k}: {what}", ok, detail)
            for what, ok, detail in _probe_checks(ladder, obj, rows)
        ]
    lines = [
        f"{'ok  ' if ok else 'FAIL'} {name}" + ("" if ok else f" ({detail})")
        for name, ok, detail in checks
    ]
    failed = [name for name, ok, _ in checks if not ok]
    if failed:
        return Outcome(
            "FAIL",
            f"{len(failed)} of {len(lines)} checks failed, first: {failed[0]}",
            lines,
        )
    return Outcome("PASS", f"{len(lines)} checks, all bit-exact", lines)


# ------------------------------------------------------------------------------------------ step 3
S = 2.0**-6  # one mantissa step of a block whose largest magnitude is in [1, 2)
ROUNDING_BLOCKS = (  # each with its largest magnitude 1.0, so the mantissa step is S
    (1.0, 0.5 * S, 1.5 * S, 2.5 * S, -0.5 * S, -1.5 * S, -2.5 * S, 0.75 * S),
    (1.0, 0.25 * S, -0.25 * S, -0.75 * S, 3.5 * S, -3.5 * S, 1.25 * S, -1.25 * S),
)
SATURATION_BLOCK = (1.9921875,) + (
    0.0,
) * 7  # 127.5 steps: rounds up to 128 unless floored
NEGATIVE_FULL_BLOCK = (-1.9921875,) + (0.0,) * 7  # -127.5 steps: -128 fits
ZERO_BLOCK = (0.0,) * 8
SUBNORMAL_BLOCK = tuple(2.0**-130 * (i + 1) for i in range(8))  # bf16 subnormals

# aie_api's ten rounding modes as functions of x = value / step (aie::rounding_mode).
ROUNDING_MODES = {
    "floor": np.floor,
    "ceil": np.ceil,
    "symmetric_floor": np.trunc,
    "symmetric_ceil": lambda x: np.sign(x) * np.ceil(np.abs(x)),
    "positive_inf": lambda x: np.floor(x + 0.5),
    "negative_inf": lambda x: np.ceil(x - 0.5),
    "symmetric_inf": lambda x: np.sign(x) * np.floor(np.abs(x) + 0.5),
    "symmetric_zero": lambda x: np.sign(x) * np.ceil(np.abs(x) - 0.5),
    "conv_even": np.rint,
    "conv_odd": lambda x: np.where(
        x - np.floor(x) == 0.5,
        np.where(np.floor(x) % 2 == 1, np.floor(x), np.ceil(x)),
        np.rint(x),
    ),
}


def classify_rounding(mantissas: np.ndarray) -> list[str]:
    """The rounding modes consistent with the mantissas observed for ROUNDING_BLOCKS ([2, 8])."""
    x = np.asarray(ROUNDING_BLOCKS) / S
    return [
        name for name, f in ROUNDING_MODES.items() if np.array_equal(f(x), mantissas)
    ]


def numerics_rows() -> np.ndarray:
    """A [8, 64] bf16 whose 64 blocks (row r, K block kb) are the probe blocks, then seeded values."""
    blocks = [
        *ROUNDING_BLOCKS,
        SATURATION_BLOCK,
        NEGATIVE_FULL_BLOCK,
        ZERO_BLOCK,
        SUBNORMAL_BLOCK,
    ]
    rng = np.random.default_rng(7)
    a = rng.standard_normal((NUMERICS_ROWS, 64)).astype(np.float32)
    for i, blk in enumerate(blocks):  # block i = row i, K block 0
        a[i, :8] = blk
    return a.astype(bfloat16)


@dataclass
class Numerics:
    """What one probe measured of the A -> bfp16 conversion."""

    modes: list[str]  # rounding modes consistent with the rounding blocks
    saturation: str  # 127.5 steps -> "saturates to 127", "moves to the next exponent", "wraps to -128", ...
    negative_full: int  # mantissa of -127.5 steps
    zero_exponent: int  # exponent byte of an all-zero block
    subnormal: str  # how a block of bf16 subnormals converts
    other_blocks_match: (
        bool  # the seeded blocks against the host model (RNE); only for conv_even
    )

    def line(self) -> str:
        return (
            f"rounding {'/'.join(self.modes) or 'none of the ten modes'}; 127.5 steps {self.saturation}; "
            f"-127.5 steps -> {self.negative_full}; all-zero block exponent byte {self.zero_exponent}; "
            f"subnormal block {self.subnormal}"
        )


def measure_numerics(ladder: Ladder, obj: record.KernelObject) -> Numerics:
    p = kp.Probe(obj, NUMERICS_ROWS, "accumulate")
    a = numerics_rows()
    inputs, _, _ = kp.accumulate_inputs(p, ladder.seed, a_rows=a)
    _, scratch = ladder.probes.run(p, inputs)
    exps, mants = kp.a_line(scratch, obj.tile_n, obj.tile_k, obj.tile_k // 8)
    # A line order for the GEMV: K block kb, then row r: block (kb=0, r) is at index r.
    modes = classify_rounding(mants[0:2])  # blocks 0 and 1: rows 0 and 1, K block 0
    e, m = (
        exps[2],
        mants[2, 0],
    )  # largest magnitude in [1, 2): exponent byte 127 (step 2^-6)
    if e == 127 and m == 127:
        sat = "saturates to 127"
    elif e == 128 and m == 64:
        sat = "moves to the next exponent (64 x 2^-5)"
    elif e == 127 and m == -128:
        sat = "wraps to -128"
    else:
        sat = f"gives mantissa {m}, exponent byte {e}"
    sub_e, sub_m = exps[5], mants[5]
    subnormal = (
        "-> zero"
        if not sub_m.any()
        else f"-> exponent byte {sub_e}, mantissas {list(sub_m)}"
    )
    want = kp.a_line_expected(p, a)
    got = kp.block_values(exps, mants)
    others = np.array_equal(got[6:], want[6:]) if obj.rounding == "conv_even" else True
    return Numerics(modes, sat, int(mants[3, 0]), int(exps[4]), subnormal, others)


# What the host model assumes (the emulator's aie_api, docs/hardware.md#how-conversion-to-bfp16-rounds).
ASSUMED = {
    "conv_even": Numerics(["conv_even"], "saturates to 127", -128, 0, "-> zero", True),
    "floor": Numerics(["floor"], "saturates to 127", -128, 0, "-> zero", True),
}


def step_numerics(ladder: Ladder) -> Outcome:
    lines, differs = [], []
    for obj, label in (
        (PROBE_GEMV, "conv_even set (the kernel's)"),
        (PROBE_GEMV_FLOOR, "floor set (the reset mode)"),
    ):
        got = measure_numerics(ladder, obj)
        want = ASSUMED[obj.rounding]
        lines.append(f"{label}: {got.line()}")
        if obj.rounding not in got.modes:
            differs.append(
                f"{label}: rounds as {'/'.join(got.modes) or 'no aie_api mode'}, model assumes {obj.rounding}"
            )
        for what in ("saturation", "negative_full", "zero_exponent", "subnormal"):
            if obj.rounding == "floor" and what == "saturation":
                continue  # floor never rounds 127.5 up: saturation is not exercised
            if getattr(got, what) != getattr(want, what):
                differs.append(
                    f"{label}: {what} {getattr(got, what)}, model assumes {getattr(want, what)}"
                )
        if not got.other_blocks_match:
            differs.append(f"{label}: the seeded blocks differ from the host model")
    verdict = "differs from the host model" if differs else "as the host model assumes"
    save_numerics([f"{ladder.backend}: {verdict}"] + lines)
    if differs:
        return Outcome(
            "DIFFERS", differs[0], lines + [f"differs: {d}" for d in differs]
        )
    return Outcome("PASS", verdict, lines)


def save_numerics(lines: list[str]) -> None:
    """build/bringup/numerics.txt, which `make bench` and `host/run.py --report` print."""
    from int4awq.run.npu import NUMERICS_FILE

    os.makedirs(os.path.dirname(NUMERICS_FILE), exist_ok=True)
    with open(NUMERICS_FILE, "w") as f:
        f.write("\n".join(lines) + "\n")


# ------------------------------------------------------------------------------------------ steps 4 to 9
# The stack of a bring-up design where L1 leaves room for it (issue 50: Peano's own ATB GEMM frame reached
# 0x1640 bytes, more than the 4 KiB derived from our kernel's source); elsewhere the design's default.
BRINGUP_STACK = 8192


def _design_args(ladder: Ladder, number: int, build_dir: str, stack: int | None):
    argv = DESIGN_RUNS[number].split() + [
        "--backend",
        ladder.backend,
        "--build-dir",
        build_dir,
        "--seed",
        str(ladder.seed),
    ]
    return host_run.parse_args(
        argv + ([] if stack is None else ["--stack-size", str(stack)])
    )


def _compile(cfg, build_dir: str) -> None:
    """aircc for npu2 into build_dir (Peano object included), unless this very design is compiled there."""
    from int4awq.run.air_run import compile_once

    builder = host_run.builder_of(cfg)
    compile_once(
        cfg,
        lambda: builder.build_module(**cfg.builder_args()),
        builder.backend_options(cfg),
        build_dir,
    )


def _configured(ladder: Ladder, number: int):
    """(args, cfg, A, W, build directory) of a design step."""
    build_dir = os.path.join(ladder.build_root, f"step{number}")
    for stack in (BRINGUP_STACK, None):
        args = _design_args(ladder, number, build_dir, stack)
        a, w = host_run.load_inputs(args)
        try:
            cfg = host_run.configure(args, a.shape[0], w.k, w.n, w.gs)[0]
        except ConfigError:
            if stack is None:
                raise
            continue  # no room in L1 for 8 KiB: the design's default stack
        return args, cfg, a, w, build_dir


def design_step(number: int) -> Callable[[Ladder], Outcome]:
    def run(ladder: Ladder) -> Outcome:
        args, cfg, a, w, build_dir = _configured(ladder, number)
        if ladder.npu:
            _compile(cfg, build_dir)
        t0 = time.perf_counter()
        cfg, res, _ = host_run.run_gemm(args, a, w, quiet=True)
        figures = (
            f"{cfg.summary()}; corr {res.correlation:.6f}, mean rel L1 {res.mean_rel_l1:.2e}, "
            f"{time.perf_counter() - t0:.1f} s"
        )
        return Outcome(
            "PASS" if res.passed else "FAIL",
            figures,
            [] if res.passed else res.report().splitlines(),
        )

    return run


def step_repeated_dispatch(ladder: Ladder) -> Outcome:
    """Step 5's design, loaded once and dispatched REPEATS times with a different A each time, every result
    checked; then once more with the first A, which must give the first result bit for bit.
    """
    args, cfg, _, w, build_dir = _configured(ladder, REPEAT_RUN)
    from int4awq.formats.quant import random_activations

    a_sets = [
        random_activations(cfg.m, cfg.k, ladder.seed + 10 + i) for i in range(REPEATS)
    ]
    a_sets.append(a_sets[0])
    packed = [record.padded_operands(cfg, a, w) for a in a_sets]
    buffer_sets = [cfg.call_buffers(ap, wp) for ap, wp in packed]
    if ladder.npu:
        from int4awq.run.npu import run_compiled_each

        _compile(cfg, build_dir)
        outs = run_compiled_each(build_dir, buffer_sets)
    else:
        invoke = host_run.emulator_backend(cfg).compile_and_load(
            host_run.builder_of(cfg).build_module(**cfg.builder_args())
        )
        outs = [invoke(*bufs) for bufs in buffer_sets]
    lines, failed = [], []
    cs = [np.asarray(o[2]).view(bfloat16).reshape(cfg.m, cfg.n) for o in outs]
    for i, (a, c) in enumerate(zip(a_sets[:REPEATS], cs)):
        res = check(c, reference_gemm(a, w)[0])
        lines.append(
            f"dispatch {i + 1}: corr {res.correlation:.6f}, mean rel L1 {res.mean_rel_l1:.2e} {'ok' if res.passed else 'FAIL'}"
        )
        if not res.passed:
            failed.append(f"dispatch {i + 1}")
    same = np.array_equal(cs[0].view(np.uint16), cs[-1].view(np.uint16))
    lines.append(
        f"dispatch {REPEATS + 1} (dispatch 1's A again): {'bit-identical' if same else 'DIFFERS'} to dispatch 1"
    )
    if not same:
        failed.append(f"dispatch {REPEATS + 1}")
    if failed:
        return Outcome("FAIL", f"{', '.join(failed)} wrong", lines)
    return Outcome(
        "PASS", f"{REPEATS + 1} dispatches of one loaded design, each checked", lines
    )


def step_compile(ladder: Ladder) -> Outcome:
    """Every design the ladder dispatches, through aircc + aiecc down to the NPU instructions, its runtime
    sequence checked against DDR (host/aircc_check.py), before anything reaches a device. SKIP where the
    compiler is not installed."""
    from host import aircc_check

    missing = compiler.tools_missing()
    if missing:
        return Outcome("SKIP", missing)
    designs = [d for d in aircc_check.designs() if _ladder_runs(d.name)]
    lines, failed = [], []
    for d in designs:
        r = aircc_check.check(
            d,
            os.path.join(ladder.build_root, "compile", aircc_check._slug(d.name)),
            compare=not ladder.npu,
        )
        problem = r.error or "; ".join(r.disagree + r.traffic)
        if problem:
            failed.append(d.name)
        insts = sum(r.compiled.insts.values()) if r.compiled else 0
        lines.append(
            f"{'ok  ' if not problem else 'FAIL'} {d.name}"
            + (f": {problem}" if problem else f" ({insts} B of NPU instructions)")
        )
    if failed:
        return Outcome(
            "FAIL",
            f"{len(failed)} of {len(designs)} designs, first: {failed[0]}",
            lines,
        )
    return Outcome(
        "PASS", f"{len(designs)} designs compile, C written once each", lines
    )


def _ladder_runs(name: str) -> bool:
    """The designs steps 2 to 9 dispatch: the probes and the make targets of DESIGN_RUNS, AWQ format."""
    return name.startswith("bring-up probe") or name in (
        "make run1x1",
        "make run2x4",
        "make run8x4",
        "make run_llama_qproj",
        "make run_llama_decode FORMAT=awq",
    )


STEPS = (
    Step(
        0,
        "compile",
        "the designs through aircc + aiecc (no device), C's DDR writes from the runtime sequence",
        "the named compiler error, or `make aircc-check` for the design's full report",
        step_compile,
    ),
    Step(
        1,
        "environment",
        "toolchain and device",
        "install or source what the line names (docs/bringup.md#what-to-install)",
        step_environment,
    ),
    Step(
        2,
        "kernel harness",
        "the kernel's code generation (1x1 herd, plain DMAs)",
        "a Peano codegen problem in the named entry: compare with the host build, report it with the figures",
        step_kernel_harness,
    ),
    Step(
        3,
        "numerics probe",
        "the core's bfp16 conversion against the host model",
        "the host model's rounding assumption is wrong on this NPU: report the line; results stay within tolerance",
        step_numerics,
    ),
    Step(
        4,
        "GEMM 1x1",
        "the GEMM design's data movement on one PE",
        "L2 staging or the kernel's tile loop: run `make run1x1 BACKEND=npu RUN_ARGS=--exact`",
        design_step(4),
    ),
    Step(
        5,
        "GEMM 2x4",
        "multi-tile data movement: broadcasts, L2 splits across PEs",
        "multi-tile data movement (channels, air-split-l2-memref): compare with step 4",
        design_step(5),
    ),
    Step(
        6,
        "GEMM 8x4",
        "the full array at `make run8x4`'s shape",
        "resources at full scale (BDs, memtile space, shim channels): `make print` and --print-resources",
        design_step(6),
    ),
    Step(
        7,
        "Llama q_proj",
        "a Llama-3.2-1B projection at full scale (2048^3, several launches)",
        "launch iteration / runtime loop tiling: compare one launch (step 6) with many",
        design_step(7),
    ),
    Step(
        8,
        "GEMV decode",
        "the decode design (M = 1, all 32 PEs)",
        "the GEMV design's A broadcast or C drain: `make run_llama_decode BACKEND=npu`",
        design_step(8),
    ),
    Step(
        9,
        "repeated dispatch",
        "state left by one dispatch for the next (locks, BDs)",
        "stale lock / BD state between dispatches: a timed --iters loop of this design is not trustworthy",
        step_repeated_dispatch,
    ),
)


# ------------------------------------------------------------------------------------------ main
class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise ConfigError(f"{message} (see --help)")


def parse_args(argv):
    p = _Parser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=("auto", "npu", "emu"), default="auto")
    p.add_argument(
        "--keep-going", action="store_true", help="run every step even after a FAIL"
    )
    p.add_argument(
        "--steps", default=None, help="comma-separated step numbers (default: all)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--build-dir",
        default=BUILD_ROOT,
        help=f"where NPU builds go (default {BUILD_ROOT})",
    )
    args = p.parse_args(argv)
    numbers = [s.number for s in STEPS]
    if args.steps is None:
        args.steps = numbers
    else:
        try:
            args.steps = sorted({int(x) for x in args.steps.split(",")})
        except ValueError:
            raise ConfigError(
                f"--steps {args.steps!r}: give step numbers like 2,3"
            ) from None
        if not set(args.steps) <= set(numbers):
            raise ConfigError(f"--steps: steps are {numbers[0]} to {numbers[-1]}")
    return args


def choose_backend(requested: str) -> str:
    if requested != "auto":
        return requested
    from int4awq.run.npu import npu2_present

    return "npu" if npu2_present()[0] else "emu"


def run_ladder(args) -> int:
    backend = choose_backend(args.backend)
    print(
        f"bring-up ladder on {'NPU2' if backend == 'npu' else 'the emulator (CPU; no NPU figures)'}"
    )
    ladder = Ladder(backend, args.build_dir, args.seed)
    first_bad, worst = None, 0
    for step in (s for s in STEPS if s.number in args.steps):
        t0 = time.perf_counter()
        try:
            out = step.run(ladder)
        except ConfigError as e:
            out = Outcome("FAIL", str(e).splitlines()[0])
        except (
            Exception
        ) as e:  # a device or emulator error inside a step is that step's failure
            out = Outcome(
                "FAIL",
                f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
            )
        print(
            f"step {step.number} {step.name:<18} {out.status:<7} {step.isolates}: {out.figures} ({time.perf_counter() - t0:.1f} s)",
            flush=True,
        )
        for line in out.lines:
            print(f"    {line}")
        if out.status in ("FAIL", "DIFFERS"):
            if out.status == "FAIL":
                print(f"    next: {step.on_fail}")
            first_bad = first_bad or f"step {step.number} ({step.name}) {out.status}"
            worst = 1
            if out.status == "FAIL" and not args.keep_going:
                break
    print(
        f"bring-up: {'every step passed' if first_bad is None else 'first problem at ' + first_bad}"
    )
    return worst


def main(argv=None) -> int:
    try:
        return run_ladder(parse_args(sys.argv[1:] if argv is None else argv))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
