# SPDX-License-Identifier: MIT
"""What the host program does with a configuration's module short of running it: print it, table its
NPU2 resources, or compile it with aircc (host/run.py -p, --print-resources, --compile-only; make print,
make compile), and compile_once for the tools that run compiled designs. A configuration brings its tiles,
its kernel object name and its build-directory name. The builders' own command lines (mlir-air's
examples' options) are example_main.py's.
"""

from __future__ import annotations

import os
import subprocess
import sys

from ..errors import REPO

KERNEL_BUILD = os.path.join(REPO, "kernels", "build")


def act(args, cfg, module, backend_options: dict) -> int:
    """host/run.py's -p, --print-resources and --compile-only: print the module or the resource table, or
    compile it, the exit code. Running is host/run.py's own path (and the builders'
    main(), example_main.act)."""
    if args.print_module_only:
        print(module)
        return 0
    if args.print_resources:
        report = cfg.resources()
        print(report.table())
        return 0 if report.summary() == "resources: within limits" else 2
    return compile_only(cfg, module, backend_options, args.build_dir)


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
