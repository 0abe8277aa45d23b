# SPDX-License-Identifier: MIT
"""The real compiler: mlir-air's aircc and air-opt, mlir-aie's aiecc, run on the modules this project prints.

What the compiler decides (L2 splits, ping-pong, alloc sinking, placement, buffer addresses, BDs, locks, the
runtime sequence) is the truth the emulator is checked against. This module finds the tools, runs aircc's
AIR pipeline with air-opt (stopping where asked, so a pass's decision can be read), and compiles a module
the way mlir-air's XRTBackend would (aircc, then aiecc), down to the NPU instruction stream. The cores'
code needs Peano, so no xclbin is made: everything else is.

Where the tools are found, in order: air-opt from $AIR_OPT; every tool from the folder $AIRCC_BIN; from
PATH; else from a folder of prebuilt binaries beside the checkout (../shared/tools/aircc, whose `unpack`
prints where they are). A missing tool is a ToolMissing naming what was looked for. INT4AWQ_NO_COMPILER=1
hides every tool, so a checkout that has the compiler beside it runs as a clone without one does (`make
test` runs the tests whose behaviour depends on it both ways).

Sources (mlir-air e972f29): tools/aircc/aircc.cpp builds the pipeline (lines cited below);
python/air/backend/xrt.py (XRTBackend.compile, ~370-550) turns backend options into aircc's flags.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import subprocess
import tempfile
import time

from ..errors import REPO, ConfigError

PREBUILT_UNPACK = os.path.join(
    os.path.dirname(REPO), "shared", "tools", "aircc", "unpack"
)


class ToolMissing(Exception):
    """A compiler binary is not installed here: tests skip with this reason."""


class CompileError(Exception):
    """aircc, aiecc or air-opt refused the module: the message is the tool's first error."""


@functools.lru_cache(maxsize=None)
def _prebuilt() -> str | None:
    """The folder the prebuilt binaries unpack to (looked up once per process), or None."""
    if not os.access(PREBUILT_UNPACK, os.X_OK):
        return None
    r = subprocess.run([PREBUILT_UNPACK], capture_output=True, text=True, check=False)
    out = r.stdout.strip()
    return out if r.returncode == 0 and os.path.isdir(out) else None


HIDDEN = "INT4AWQ_NO_COMPILER"


def hidden() -> bool:
    """Whether the compiler is hidden on purpose (INT4AWQ_NO_COMPILER=1): runs and tests then behave as on
    a clone without it."""
    return os.environ.get(HIDDEN, "") not in ("", "0")


def find_tool(name: str) -> str:
    """The path of `name` (air-opt, aircc, aiecc), or ToolMissing with where it was looked for."""
    if hidden():
        raise ToolMissing(f"{name} hidden by {HIDDEN}=1")
    if name == "air-opt" and os.environ.get("AIR_OPT"):
        return os.environ["AIR_OPT"]
    candidates = []
    if os.environ.get("AIRCC_BIN"):
        candidates.append(os.path.join(os.environ["AIRCC_BIN"], name))
    on_path = shutil.which(name)
    if on_path:
        candidates.append(on_path)
    for c in candidates:
        if os.access(c, os.X_OK):
            return c
    pre = _prebuilt()
    if pre and os.access(os.path.join(pre, name), os.X_OK):
        return os.path.join(pre, name)
    raise ToolMissing(f"{name} not found ($AIRCC_BIN, PATH, ../shared/tools/aircc)")


def tools_missing(*names: str) -> str | None:
    """Why the named tools cannot run here, in at most 70 characters (a run prints it on one line beside
    its result), or None: for runs to say so and tests to skip with the reason."""
    try:
        for n in names or ("air-opt", "aircc", "aiecc"):
            tool = find_tool(n)
            try:
                r = subprocess.run(
                    [tool, "--version"], capture_output=True, text=True, check=False
                )
            except OSError as e:
                return f"{n} does not run ({e.strerror})"
            if r.returncode != 0:
                err = (r.stderr or r.stdout).strip()
                # the binaries load Debian's LLVM 22 libraries (libllvm22, libz3): name the package
                # when a library is what is missing
                if "shared librar" in err:
                    return (
                        f"{n} cannot load its libraries (apt-get install mlir-22-tools)"
                    )
                first = err.splitlines()[0] if err else ""
                return f"{n} does not run (exit {r.returncode}: {first[:32]})"
    except ToolMissing as e:
        return str(e)
    return None


# -- aircc's AIR pipeline --------------------------------------------------------------------------


def device_columns(device: str, num_cols: int | None = None) -> int:
    """aircc's column count for a device name (aircc.cpp ~1001-1011): npu1* and npu2_4col 4, other npu2*
    8 (npu2_3col included: aircc matches the name, not the count), else 10."""
    if num_cols is not None and num_cols >= 0:
        return num_cols
    if "npu1" in device or device == "npu2_4col":
        return 4
    if "npu2" in device:
        return 8
    return 10


def optimisation_pipeline(
    device: str = "npu2",
    num_cols: int | None = None,
    omit_pingpong: str = "",
    air_loop_fusion: bool = False,
    omit_auto_broadcast: bool = False,
) -> list[str]:
    """aircc's buildOptimizationPipeline (aircc.cpp ~905-993), pass by pass (channel multiplexing and
    linalg-to-func, which no design here uses, left at their defaults)."""
    p = ["air-dependency", "air-annotate-packet-ids{assign=true}"]  # ~909, ~917
    p += ["air-hoist-dma-in-accum-pattern"]  # ~918
    if not omit_auto_broadcast:
        p += ["air-broadcast-detection", "air-specialize-dma-broadcast"]  # ~920-922
    p += ["air-dma-to-channel", "canonicalize", "cse"]  # ~924
    p += ["air-dependency-canonicalize", "canonicalize", "cse"]  # ~925
    p += ["air-isolate-async-dma-loop-nests{scope=launch}", "canonicalize", "cse"]
    p += ["air-fuse-channels", "canonicalize", "cse"]  # ~938-941
    if (
        "npu_1col" not in device
    ):  # ~944-956: the L2 split, capped at 2 channels per column
        cols = device_columns(device, num_cols)
        cap = cols * 2 if cols > 0 else 0
        p += [
            "func.func(air-split-l2-memref{"
            f"max-launch-channels-mm2s={cap} max-launch-channels-s2mm={cap}}})",
            "canonicalize",
            "cse",
            "air-isolate-async-dma-loop-nests{scope=launch}",
            "canonicalize",
            "cse",
        ]
    if air_loop_fusion:  # ~958-964
        p += ["func.func(air-loop-fusion)"]
    else:
        p += [
            "func.func(air-fuse-alloc-dealloc)",
            "func.func(air-shrink-memref-sizes-by-access)",
        ]
    if omit_pingpong in ("", "L1", "L2"):  # ~966-981; "all" omits both passes
        opt = f"{{omit-memory-space={omit_pingpong}}}" if omit_pingpong else ""
        p += [
            f"air-label-scf-for-to-ping-pong{opt}",
            f"air-ping-pong-transform{opt}",
            "canonicalize",
            "cse",
        ]
    p += ["func.func(convert-linalg-to-loops)"]  # ~987
    p += [
        f"func.func(air-opt-memtile-dma-bds{{device={device}}})",
        "canonicalize",
        "cse",
    ]
    return p


def air_pipeline(
    device: str = "npu2", num_cols: int | None = None, omit_pingpong: str = "", **opt
) -> list[str]:
    """aircc's placement pipeline (aircc.cpp ~1118-1170) and the launch split after it (~1191)."""
    p = ["air-annotate-refeed", "air-annotate-append-barrier"]  # ~1130, ~1134
    npu = "npu" in device
    p += [
        "air-annotate-packet-ids{assign=true"
        + (" emit-headers=false" if npu else "")
        + "}"
    ]  # ~1141-1144
    p += [
        "air-rank-to-launch",
        "air-insert-launch-around-herd{insert-segment=true}",
        "func.func(air-lower-herd-parallel)",
        "scf-forall-to-parallel",
    ]  # ~1145-1148
    if npu:  # ~1151-1153
        p += optimisation_pipeline(device, num_cols, omit_pingpong, **opt)
    cols = device_columns(device, num_cols)
    p += [
        f"air-place-herds{{num-rows=6 num-cols={cols} row-anchor=2 col-anchor=0}}",
        "canonicalize",
        "cse",
        "air-enforce-channel-fifo-order",
        "func.func(air-renumber-dma)",
    ]  # ~1155-1168
    p += ["air-split-launch-for-padding{pad-location=memtile}"]  # ~1191-1194
    return p


def _pass_name(p: str) -> str:
    return p.split("{")[0].replace("func.func(", "").rstrip(")")


def run_air_pipeline(
    module_text: str, until: str | None = None, **pipeline_options
) -> tuple[str, str]:
    """Run aircc's AIR pipeline on a module with air-opt, up to and including the first pass named
    `until` (the whole pipeline when None). Returns (module text, air-opt's diagnostics).
    """
    passes = air_pipeline(**pipeline_options)
    if until is not None:
        names = [_pass_name(p) for p in passes]
        if until not in names:
            raise ValueError(f"no pass {until!r} in aircc's pipeline")
        passes = passes[: names.index(until) + 1]
    pipeline = "builtin.module(" + ",".join(passes) + ")"
    r = subprocess.run(
        [find_tool("air-opt"), "-", f"--pass-pipeline={pipeline}"],
        input=module_text,
        capture_output=True,
        text=True,
        check=False,
    )
    if r.returncode != 0:
        raise CompileError(f"air-opt: {first_error(r.stderr)}")
    return r.stdout, r.stderr


CRASHED = "crashed"


def first_error(log: str) -> str:
    """The tool's first error line; a crash (LLVM's stack dump, no error line) says so."""
    for line in log.splitlines():
        if "error" in line.lower():
            return line.strip()
    if "PLEASE submit a bug report" in log or "Stack dump" in log:
        return f"{CRASHED} (no error message; LLVM printed a stack dump)"
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    return lines[0] if lines else "(no message)"


# -- compiling as XRTBackend does ------------------------------------------------------------------


def target_device(options: dict) -> str:
    """XRTBackend's device name: target_device, with `_<n>col` when num_device_cols is set (xrt.py ~388-402)."""
    device = options.get("target_device") or "npu2"
    cols = options.get("num_device_cols", 0)
    return f"{device}_{cols}col" if cols else device


def aircc_flags(options: dict) -> list[str]:
    """aircc's command-line flags for XRTBackend keyword arguments, as XRTBackend.compile builds them
    (xrt.py ~440-550), less what needs Peano or names an xclbin (no binary is made here).
    """
    flags = ["--device", target_device(options)]
    flags += [
        f"--air-runtime-loop-tiling-sizes={s}"
        for s in options.get("runtime_loop_tiling_sizes", [])
    ]
    if options.get("omit_while_true_loop"):
        flags.append("--omit-while-true-loop")
    pp = options.get("omit_pingpong", "")
    if pp:
        flags.append(f"--omit-ping-pong-transform={'all' if pp is True else pp}")
    if options.get("air_loop_fusion"):
        flags.append("--air-loop-fusion")
    if options.get("omit_auto_broadcast"):
        flags.append("--omit-auto-broadcast")
    flags += [
        f"--air-channel-multiplexing={c}"
        for c in options.get("channel_multiplexing", [])
    ]
    if options.get("use_lock_race_condition_fix"):
        flags.append("--use-lock-race-condition-fix")
    stack = options.get("stack_size", 1024)
    if stack != 1024:
        flags += ["--stack-size", str(stack)]
    return flags


@dataclasses.dataclass
class Compiled:
    """What the compiler left in `outdir`: each file's text is read on demand."""

    outdir: str
    flags: list[str]

    def path(self, name: str) -> str:
        return os.path.join(self.outdir, name)

    def text(self, name: str) -> str:
        with open(self.path(name)) as f:
            return f.read()

    @property
    def insts(self) -> dict[str, int]:
        """Each runtime sequence's NPU instruction stream: name -> bytes."""
        return {
            f[len("insts_") : -len(".bin")]: os.path.getsize(self.path(f))
            for f in sorted(os.listdir(self.outdir))
            if f.startswith("insts_") and f.endswith(".bin")
        }


def compile_module(
    module_text: str, options: dict, outdir: str | None = None
) -> Compiled:
    """Compile a module for NPU2 as XRTBackend(**options).compile would, through aircc and aiecc, down to
    the placed, routed design and the NPU instruction stream (insts_<sequence>.bin). The cores' code is
    not compiled (no Peano). CompileError carries the first error of the tool that failed.
    """
    aircc, aiecc = find_tool("aircc"), find_tool("aiecc")
    outdir = outdir or tempfile.mkdtemp(prefix="aircc-")
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "air.mlir"), "w") as f:
        f.write(module_text)
    env = dict(os.environ)
    # no core code is built here: a PEANO_INSTALL_DIR that names no folder (upstream's bfp16 script wants
    # the variable set) would only make aiecc stop ("--peano directory does not exist")
    if not os.path.isdir(env.get("PEANO_INSTALL_DIR", "")):
        env.pop("PEANO_INSTALL_DIR", None)
    # aircc looks aiecc up on PATH before it does anything else (aircc.cpp ~1043-1052)
    env["PATH"] = os.path.dirname(aiecc) + os.pathsep + env.get("PATH", "")
    flags = aircc_flags(options)
    # --output-format=none makes no binary; --emit-txn-cpp makes aircc's own aiecc call ask only for the
    # lowered runtime sequence (aircc.cpp ~1403-1419), which needs no core ELF (no Peano here).
    r = subprocess.run(
        [
            aircc,
            *flags,
            "--tmpdir",
            "aircc_tmp",
            "--output-format=none",
            "--emit-txn-cpp",
            "air.mlir",
        ],
        cwd=outdir,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    for name in ("placed.air.mlir", "aie.air.mlir", "npu.air.mlir"):
        src = os.path.join(outdir, "aircc_tmp", name)
        if os.path.exists(src):
            shutil.copy(src, os.path.join(outdir, name))
    log = r.stdout + r.stderr
    with open(os.path.join(outdir, "aircc.log"), "w") as f:
        f.write(log)
    npu = os.path.join(outdir, "npu.air.mlir")
    # With several runtime sequences aircc's own instruction step cannot choose one; the lowering is
    # done, and aiecc below builds every sequence's instructions.
    several = "runtime sequences and cannot choose" in log
    if r.returncode != 0 and not (several and os.path.exists(npu)):
        raise CompileError(f"aircc: {first_error(log)}")
    r = subprocess.run(
        [
            aiecc,
            "--no-progress",
            "--tmpdir",
            "aiecc_tmp",
            "-O",
            "3",
            "-j",
            "0",
            "--get-npu-insts",
            "--npu-insts-name=insts_{0}.bin",
            "--get=input_physical.mlir",
            "npu.air.mlir",
        ],
        cwd=outdir,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    with open(os.path.join(outdir, "aiecc.log"), "w") as f:
        f.write(r.stdout + r.stderr)
    physical = os.path.join(outdir, "aiecc_tmp", "input_physical.mlir")
    if os.path.exists(physical):
        shutil.copy(physical, os.path.join(outdir, "input_physical.mlir"))
    if r.returncode != 0:
        raise CompileError(f"aiecc: {first_error(r.stdout + r.stderr)}")
    return Compiled(outdir, flags)


# -- runs compile first ------------------------------------------------------------------------------


def compile_first(
    name: str, module_text: str, options: dict, cache_dir: str
) -> tuple[str, str | None]:
    """Compile a design with aircc + aiecc before it is emulated or simulated, as a run on NPU2 would:
    (the line to print, the folder of the compiler's outputs) when it compiles, (the line, None) when
    the compiler is not installed here, CompileError naming the design when it does not compile. A
    module compiled before (same text, same flags) is not compiled again: its folder under cache_dir
    keeps the outputs."""
    missing = tools_missing()
    if missing:
        # one line of at most 100 columns (the run's report keeps to that width)
        return f"not compiled with aircc + aiecc: {missing}", None
    import hashlib

    flags = aircc_flags(options)
    key = hashlib.sha256((module_text + "\0" + " ".join(flags)).encode()).hexdigest()
    outdir = os.path.join(cache_dir, key[:16])
    done = os.path.join(outdir, "compiled")
    # the folder relative to where we run when inside it: short wherever the checkout lies
    shown = os.path.relpath(outdir)
    shown = outdir if shown.startswith("..") else shown
    if os.path.exists(done):
        return f"compiled with aircc + aiecc (earlier, same module: {shown})", outdir
    t0 = time.perf_counter()
    try:
        compile_module(module_text, options, outdir)
    except CompileError as e:
        raise CompileError(f"{name}: the compiler refuses it: {e}") from None
    open(done, "w").close()
    return (
        f"compiled with aircc + aiecc in {time.perf_counter() - t0:.1f} s ({shown})",
        outdir,
    )


# What the compiler's warnings mean, for the ones this project's designs meet (make aircc-check prints
# each with its line here).
WARNING_MEANINGS = {
    "Bank-aware allocation failed": (
        "aiecc's buffer placement (AIEAssignBufferAddresses, mlir-aie) first starts each buffer in a "
        "memory bank of its own, round the 16 KiB banks of a core (64 KiB of a memtile); when that "
        "leaves a buffer no room it falls back to placing them one after the other: the design fits, "
        "and buffers then share banks, where a core's loads and a DMA meet (cycles, not correctness)"
    ),
    "Not all requested buffers fit": "the same fallback's first line",
    "Failed to allocate buffer": "the same fallback: the buffer the bank-by-bank placement found no room for",
    "auto-upgrading": (
        "air-dma-to-channel turns the named channels into packet flows (more herd <-> L3 channels one "
        "way than a shim column's 2)"
    ),
}


def warnings_in(outdir: str) -> dict[str, int]:
    """The distinct warnings aircc and aiecc printed for a compile in outdir (buffer names and sizes
    dropped), with how many places of the design (a tile op's line) each was printed for: aircc's own
    aiecc step and the aiecc run print the same ones, counted once."""
    import re

    places = {}
    for log in ("aircc.log", "aiecc.log"):
        path = os.path.join(outdir, log)
        if not os.path.exists(path):
            continue
        for line in open(path):
            if "warning:" not in line:
                continue
            where, text = line.split("warning:", 1)
            text = re.sub(r'"[^"]*"', '"..."', text.strip())
            text = re.sub(r"\d+ bytes", "N bytes", text)
            at = re.search(r"[\w.]+\.mlir:\d+:\d+", where)
            places.setdefault(text, set()).add(at.group(0) if at else where.strip())
    return {text: len(p) for text, p in places.items()}


def warning_meaning(text: str) -> str:
    return next((m for k, m in WARNING_MEANINGS.items() if k in text), "")


def generic_form(path: str) -> str:
    """An MLIR file of the compiler's, printed in MLIR's generic op form by aie-opt (what the simulator
    reads)."""
    r = subprocess.run(
        [find_tool("aie-opt"), "--mlir-print-op-generic", path],
        capture_output=True,
        text=True,
        check=False,
    )
    if r.returncode != 0:
        raise CompileError(f"aie-opt: {first_error(r.stderr)}")
    return r.stdout


def compile_before_run(
    name: str, module_text: str, options: dict, quiet: bool = False
) -> str | None:
    """compile_first into build/aircc-runs, its line printed unless quiet: the folder of the compiler's
    outputs (None without the compiler); what the compiler refuses is a ConfigError (exit 2) naming the
    design and the compiler's first error."""
    try:
        line, outdir = compile_first(
            name, module_text, options, os.path.join(REPO, "build", "aircc-runs")
        )
    except CompileError as e:
        raise ConfigError(str(e)) from None
    if not quiet:
        print(line)
    return outdir
