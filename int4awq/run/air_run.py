# SPDX-License-Identifier: MIT
"""What the builders' command lines do after building the module, as mlir-air's examples do: compile it
with aircc (compile-only), or run it on seeded operands through XRTRunner.run_test and check it against
the reference (compile-and-run), on NPU2 or, with PYTHONPATH=emulator, on the emulator. One home for both
builders (matmul_int4_packed.py, matvec_int4_packed.py): a configuration brings its tiles, its kernel
object name and its build-directory name.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

from ..errors import REPO

KERNEL_BUILD = os.path.join(REPO, "kernels", "build")


def add_action_arguments(parser) -> None:
    """What a builder's command line does with its module, in mlir-air's examples' conventions."""
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="compile-and-run: XRTRunner also prints the module and the expected and actual "
        "outputs (default off)",
    )
    parser.add_argument(
        "-p",
        "--print-module-only",
        action="store_true",
        help="print the AIR module and stop",
    )
    parser.add_argument(
        "--print-resources",
        action="store_true",
        help="print the DMA channels, BDs, locks and memtile space the design needs on NPU2 "
        "(the emulator's model of aircc's lowering) and stop; exit 2 if over a limit",
    )
    parser.add_argument(
        "--compile-mode",
        choices=["compile-only", "compile-and-run"],
        default="compile-and-run",
        help="compile-only: aircc for npu2 into --build-dir; compile-and-run (default): run on "
        "seeded operands and check, on NPU2 or (PYTHONPATH=emulator) the emulator",
    )
    parser.add_argument(
        "--build-dir",
        default=None,
        help="compile-only output (default: build/npu/<configuration>)",
    )


def act(args, cfg, module, backend_options: dict) -> int:
    """Print the module or the resource table, compile, or compile and run, as args say; the exit code."""
    if args.print_module_only:
        print(module)
        return 0
    if args.print_resources:
        report = cfg.resources()
        print(report.table())
        return 0 if report.summary() == "resources: within limits" else 2
    if args.compile_mode == "compile-only":
        return compile_only(cfg, module, backend_options, args.build_dir)
    return compile_and_run(cfg, module, backend_options, args.verbose)


def compile_only(cfg, module, backend_options: dict, build_dir: str | None) -> int:
    """aircc for npu2 in build_dir, where the Peano kernel object is linked (aircc resolves link_with in
    the working directory, entered for the compile and left after); the object is built first when it is
    missing."""
    from air.backend.xrt import XRTBackend

    build_dir = build_dir or os.path.join(REPO, "build", "npu", cfg.name)
    obj = os.path.join(KERNEL_BUILD, cfg.kernel_object)
    if not os.path.isfile(obj):
        dims = cfg.kernel.make_args()
        made = (
            subprocess.run(
                ["make", "-C", os.path.join(REPO, "kernels"), "peano", *dims]
            ).returncode
            == 0
        )
        if not made or not os.path.isfile(obj):
            print(
                f"error: kernel object {obj} could not be built (make -C kernels peano {' '.join(dims)}; "
                "its output is above)",
                file=sys.stderr,
            )
            return 2
    os.makedirs(build_dir, exist_ok=True)
    link = os.path.join(build_dir, cfg.kernel_object)
    if not os.path.exists(link):
        os.symlink(obj, link)
    cwd = os.getcwd()
    os.chdir(build_dir)
    try:
        XRTBackend(**backend_options).compile(module)
    finally:
        os.chdir(cwd)
    print(f"compiled: {os.path.join(build_dir, 'air.xclbin')} and air.insts.bin")
    return 0


def compile_once(cfg, build_module, backend_options: dict, build_dir: str) -> None:
    """compile_only into build_dir unless it already holds air.xclbin (build_module() makes the module only
    then); a failed compile is a ConfigError."""
    from ..errors import ConfigError

    if os.path.isfile(os.path.join(build_dir, "air.xclbin")):
        return
    if compile_only(cfg, build_module(), backend_options, build_dir):
        raise ConfigError(f"compiling {cfg.name} failed (its output is above)")


def compile_and_run(cfg, module, backend_options: dict, verbose: bool) -> int:
    """Seeded operands, XRTRunner.run_test against the reference: PASS! or failed (exit 0 or 1). host/run.py
    is the full host program (checkpoints, exact mode, padding, reports)."""
    from air.backend.xrt_runner import XRTRunner

    from ..design.design import build_host_kernel
    from ..formats.quant import random_activations
    from ..kernel.record import padded_operands
    from ..formats.weights_file import random_format_weights
    from .reference import reference_gemm

    w = random_format_weights(cfg.format, cfg.k, cfg.n, cfg.gs, seed=0)
    a = random_activations(cfg.m, cfg.k, seed=1)
    expected = reference_gemm(a, w)[1]
    if getattr(sys.modules["air"], "EMULATED", False):
        os.environ["AIR_EMU_LIB_PATH"] = build_host_kernel(cfg)
    else:
        os.chdir(KERNEL_BUILD)  # where `make -C kernels peano` put the object
    rms = float(np.sqrt(np.mean(expected.astype(np.float32) ** 2)))
    # in the order and shapes of the design's function (the GEMV's is mlir-air's: PACKED, B, D)
    *inputs, expected = cfg.call_buffers(*padded_operands(cfg, a, w), expected)
    runner = XRTRunner(verbose=verbose, **backend_options)
    code = runner.run_test(
        module,
        inputs=inputs,
        expected_outputs=[expected],
        rtol=0.05,
        atol=0.05 * rms,
        max_mismatch_percentage=0.1,
        min_correlation=0.999,
    )
    return 0 if code == 0 else 1
