# SPDX-License-Identifier: MIT
"""What the builders' command lines do with their module, as mlir-air's examples' mains do: print it (-p),
compile it with aircc (--compile-mode compile-only), or compile and run it through XRTRunner.run_test
against the builder's cpu_reference (the default), in the working directory's build/.

numpy, ml_dtypes, mlir-air (or, where it is not installed, the emulator's air package beside this file)
and this example's kernels/Makefile only: the tools in int4awq/ and host/ import the example, never the
other way. host/run.py is the richer host (every format, checkpoints, the simulator, reports).
"""

from __future__ import annotations

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.abspath(__file__))
KERNELS = os.path.join(REPO, "kernels")


def add_arguments(parser) -> None:
    """mlir-air's examples' options: -v, -p, --compile-mode."""
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="XRTRunner prints more"
    )
    parser.add_argument(
        "-p",
        "--print-module-only",
        action="store_true",
        help="print the AIR module and stop",
    )
    parser.add_argument(
        "--compile-mode",
        choices=["compile-and-run", "compile-only"],
        default="compile-and-run",
        dest="compile_mode",
        help="compile-only: aircc into ./build; compile-and-run (default): run on seeded operands and "
        "check against cpu_reference (on NPU2 with mlir-air and XRT, else on the emulator)",
    )


def seeded_operands(rows: int, k: int, gs: int, seed: int = 42):
    """mlir-air's examples' int4 operands of a W with `rows` output rows: (W_q [rows, K / 2] uint8, two
    uniform codes a byte along K, the even k low; W_s [K / GS, rows] bf16 in [0.005, 0.02); W_z [K / GS,
    rows] uint8, 7 or 8) and the generator, for the activations."""
    import numpy as np
    from ml_dtypes import bfloat16

    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 16, (rows, k), dtype=np.uint8)
    w_q = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    w_s = rng.uniform(0.005, 0.02, (k // gs, rows)).astype(bfloat16)
    w_z = rng.integers(7, 9, (k // gs, rows), dtype=np.uint8)
    return w_q, w_s, w_z, rng


def kernel_object(cfg, target: str) -> str:
    """`make -C kernels <target>` for the configuration's kernel object (peano: the AIE2P object; host: the
    library the emulator runs); its path, or a one-line error and exit 2."""
    make = ["make", "-s", "-C", KERNELS, target, *cfg.kernel.make_args()]
    proc = subprocess.run(make, capture_output=True, text=True)
    stem = os.path.splitext(cfg.kernel_object)[0]
    path = os.path.join(KERNELS, "build", stem + (".o" if target == "peano" else ".so"))
    if proc.returncode or not os.path.isfile(path):
        last = (proc.stderr or proc.stdout).strip().splitlines()
        print(
            f"error: {' '.join(make[3:])} failed: {last[-1] if last else 'no output'}",
            file=sys.stderr,
        )
        sys.exit(2)
    return path


def act(args, cfg, module, backend_options: dict, operands, tolerances: dict) -> int:
    """Print, compile, or compile and run the module as args say; operands() gives (inputs, expected
    output) in the order of the module's function. Compiles and runs in ./build, where the kernel object
    is linked (aircc resolves link_with in the working directory), as mlir-air's Makefiles run them.
    """
    if args.print_module_only:
        print(module)
        return 0
    import air
    from air.backend.xrt import XRTBackend
    from air.backend.xrt_runner import XRTRunner

    emulated = getattr(air, "EMULATED", False)
    if emulated:
        if args.compile_mode == "compile-only":
            print(
                "error: compile-only needs mlir-air's aircc (this is the emulator's air package)",
                file=sys.stderr,
            )
            return 2
        os.environ["AIR_EMU_LIB_PATH"] = os.path.dirname(kernel_object(cfg, "host"))
    else:
        obj = kernel_object(cfg, "peano")
        os.makedirs("build", exist_ok=True)
        link = os.path.join("build", cfg.kernel_object)
        if not os.path.exists(link):
            os.symlink(obj, link)
        os.chdir("build")
    if args.compile_mode == "compile-only":
        backend = XRTBackend(verbose=args.verbose, **backend_options)
        backend.compile(module)
        backend.unload()
        return 0
    inputs, expected = operands()
    runner = XRTRunner(verbose=args.verbose, **backend_options)
    code = runner.run_test(
        module, inputs=inputs, expected_outputs=[expected], **tolerances
    )
    return 0 if code == 0 else 1
