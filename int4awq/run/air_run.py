# SPDX-License-Identifier: MIT
"""What the host program does with a configuration's module short of running it: print it, table its
NPU2 resources, or compile it with aircc (host/run.py -p, --print-resources, --compile-only; make print,
make compile), and compile_once for the tools that run compiled designs. A configuration brings its tiles,
its kernel object name and its build-directory name. The builders' own command lines (mlir-air's
examples' options) are example_main.py's.
"""

from __future__ import annotations

import glob
import hashlib
import json
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


def toolchain_stamp() -> str:
    """What identifies the compiler a kept compile came from, as mlir-air's KernelCache stamps its cache
    (llms/shared/infra/cache.py, _toolchain_id): mlir-air's compiled passes (air/_mlir_libs/_air*.so) and
    Peano's clang, each by size and modification time."""
    import air

    stamps = []
    for root in getattr(air, "__path__", []):
        for lib in sorted(glob.glob(os.path.join(root, "_mlir_libs", "_air*.so"))):
            st = os.stat(lib)
            stamps.append(f"{os.path.basename(lib)}:{st.st_size}:{int(st.st_mtime)}")
    clang = os.path.join(os.environ.get("PEANO_INSTALL_DIR", ""), "bin", "clang")
    if os.path.isfile(clang):
        st = os.stat(clang)
        stamps.append(f"clang:{st.st_size}:{int(st.st_mtime)}")
    return ";".join(stamps)


def compiled_key(module_text: str, options: dict, objects: list[str]) -> str:
    """The key of a kept compile: the module's text, the XRTBackend options, the bytes of the kernel
    objects it links and the toolchain's stamp; any of them changed is another key."""
    h = hashlib.sha256()
    h.update(module_text.encode())
    h.update(json.dumps(options, sort_keys=True, default=str).encode())
    for obj in objects:
        with open(obj, "rb") as f:
            h.update(f.read())
    h.update(toolchain_stamp().encode())
    return h.hexdigest()[:16]


def peano_object(name: str, make_args: list[str]) -> str:
    """kernels/build/<name>, built with Peano (`make -C kernels peano <make_args>`) every time it is asked
    for: make is incremental, so an object never outlives a source edit, as mlir-air's Makefiles rebuild
    theirs. A ConfigError when it cannot be built (make's output is above)."""
    from ..errors import ConfigError

    obj = os.path.join(KERNEL_BUILD, name)
    made = subprocess.run(
        ["make", "-C", os.path.join(REPO, "kernels"), "peano", *make_args]
    )
    if made.returncode or not os.path.isfile(obj):
        raise ConfigError(
            f"kernel object {obj} could not be built (make -C kernels peano {' '.join(make_args)}; "
            "its output is above)"
        )
    return obj


def compile_only(cfg, module, backend_options: dict, build_dir: str | None) -> int:
    """aircc for npu2 in build_dir, where the Peano kernel object is linked (aircc resolves link_with in
    the working directory, entered for the compile and left after); the object is built first.
    """
    from air.backend.xrt import XRTBackend

    from ..errors import ConfigError

    build_dir = build_dir or os.path.join(REPO, "build", "npu", cfg.name)
    try:
        peano_object(cfg.kernel_object, cfg.kernel.make_args())
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
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
    """compile_only into build_dir unless it holds the compile of this very module (air.xclbin, and beside
    it compiled.key: compiled_key of the module, the options, the kernel object and the toolchain); a failed
    compile is a ConfigError."""
    from ..errors import ConfigError

    module = build_module()
    obj = peano_object(cfg.kernel_object, cfg.kernel.make_args())
    key = compiled_key(str(module), backend_options, [obj])
    stamp = os.path.join(build_dir, "compiled.key")
    if os.path.isfile(os.path.join(build_dir, "air.xclbin")) and os.path.isfile(stamp):
        with open(stamp) as f:
            if f.read() == key:
                return
    if compile_only(cfg, module, backend_options, build_dir):
        raise ConfigError(f"compiling {cfg.name} failed (its output is above)")
    with open(stamp, "w") as f:
        f.write(key)
