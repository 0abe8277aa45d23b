# SPDX-License-Identifier: MIT
"""XRTBackend for the CPU emulator.

Same constructor, `compile` / `load` / `compile_and_load` / `unload` and
invoker contract as mlir-air's air.backend.xrt.XRTBackend: the invoker takes the
numpy arrays (inputs, then outputs) and returns a tuple with one flat array per
argument, in that argument's dtype.  Instead of aircc and an NPU, `compile`
traces nothing new -- it checks the design statically (budgets, herd shape,
DMA limits, call signatures, kernel libraries) and compiles it into closures;
the invoker interprets it.

Emulator extras:
    AIR_EMU_RUN_WITH=module:function runs the compiled module with another executor (see _runner)
    backend.emu_budget   BudgetReport of the last compile (L1 per PE, L2 per segment)
    backend.emu_resources ResourceReport of the last compile (DMA channels, BDs, locks, memtiles)
    backend.emu_stats    Stats of the last run (bytes per level pair, DMAs, calls, herds)
    backend.emu_progress None = progress line on stderr when it is a TTY; True / False force it
"""

import os

from .abc import AirBackend, AirBackendError

# NPU generations and the device names `xrt-smi examine` reports for them.
NPU_MODELS = {
    "npu1": ("npu1", "Phoenix"),
    "npu2": ("npu4", "npu5", "npu6", "Strix", "Krackan"),
}


def detect_target_device(verbose=False, default="npu2"):
    """AIR_TARGET_DEVICE if set, else the emulator's default, npu2."""
    override = os.environ.get("AIR_TARGET_DEVICE", "").strip()
    if override:
        if override not in NPU_MODELS:
            raise ValueError(
                f"AIR_TARGET_DEVICE={override!r} is not a known NPU generation; "
                f"expected one of {sorted(NPU_MODELS)}"
            )
        return override
    return default


def _omit_pingpong_mode(omit_pingpong):
    """omit_pingpong as the mode string aircc takes: a bool means "all" (True) or "" (False)."""
    if isinstance(omit_pingpong, bool):
        return "all" if omit_pingpong else ""
    return omit_pingpong


RUN_WITH = "AIR_EMU_RUN_WITH"


def _runner():
    """AIR_EMU_RUN_WITH=package.module:function names another executor of a compiled module: the invoker
    then calls function(module text, the backend's options, arrays) and returns what it returns (one flat
    array per argument), after the emulator's own static checks. The host's simulator of the design
    aircc + aiecc compile is one (host/sim_invoke.py), so mlir-air's own scripts run through it unchanged.
    """
    spec = os.environ.get(RUN_WITH, "").strip()
    if not spec:
        return None
    import importlib

    name, _, func = spec.partition(":")
    try:
        return getattr(importlib.import_module(name), func or "run")
    except (ImportError, AttributeError) as e:
        raise AirBackendError(f"{RUN_WITH}={spec!r}: {e}") from None


class XRTCompileArtifact:
    def __init__(self, output_binary, kernel, insts, txn_header=None, program=None):
        self.output_binary = output_binary
        self.kernel = kernel
        self.insts = insts
        self.txn_header = txn_header
        self.program = program


class XRTBackend(AirBackend):
    """The xrt backend's interface, interpreted on the CPU."""

    def __init__(
        self,
        verbose: bool = False,
        target_device: str = None,
        omit_while_true_loop: bool = False,
        omit_pingpong: str = "",
        lower_linalg_to_func: str = None,
        derive_library_call: bool = False,
        air_loop_fusion: bool = False,
        runtime_loop_tiling_sizes: list = [],
        omit_auto_broadcast: bool = False,
        channel_multiplexing: list = [],
        use_lock_race_condition_fix: bool = False,
        use_lock_race_condition_fix_v2: bool = False,
        coalesce_shim_dma: bool = False,
        trace_offset: int = 0,
        trace_size: int = 0,
        output_format: str = "xclbin",
        kernel_name: str = "",
        instance_name: str = "",
        kernel_id: str = "",
        xclbin_input: str = "",
        num_device_cols: int = 0,
        debug_ir: bool = False,
        emit_txn_cpp: bool = False,
        bf16_emulation: bool = False,
        stack_size: int = 1024,
        n_perf_iters: int = 0,
        n_warmup_iters: int = 10,
    ):
        super().__init__()
        options = {
            name: value
            for name, value in locals().items()
            if name not in ("self", "__class__")
        }
        options["omit_pingpong"] = _omit_pingpong_mode(omit_pingpong)
        if options["omit_pingpong"] not in ("", "L1", "L2", "all"):
            raise AirBackendError(
                f"omit_pingpong={omit_pingpong!r}: expected '', 'L1', 'L2' or 'all'"
            )
        if use_lock_race_condition_fix and use_lock_race_condition_fix_v2:
            raise AirBackendError(
                "use_lock_race_condition_fix and use_lock_race_condition_fix_v2 "
                "cannot both be set"
            )
        for name in ("n_perf_iters", "n_warmup_iters"):
            if (
                isinstance(options[name], bool)
                or not isinstance(options[name], int)
                or options[name] < 0
            ):
                raise ValueError(f"{name}={options[name]!r}: expected an int >= 0")
        if (
            isinstance(stack_size, bool)
            or not isinstance(stack_size, int)
            or stack_size <= 0
        ):
            raise ValueError(
                f"stack_size={stack_size!r}: expected an int > 0 (bytes per core)"
            )
        self.__dict__.update(
            options
        )  # every option stays readable as an attribute, as in mlir-air
        self.currently_loaded = False
        self.last_latency_us = None  # no NPU, no latency
        self.emu_budget = None
        self.emu_resources = None
        self.emu_stats = None
        self.emu_progress = None
        self._program = None

    def __del__(self):
        try:
            self.unload()
        except Exception:
            pass

    def _resolved_target(self):
        target = (
            self.target_device
            if self.target_device is not None
            else detect_target_device(self.verbose)
        )
        if target not in NPU_MODELS:
            raise AirBackendError(
                f"target_device={target!r}: the emulator models {sorted(NPU_MODELS)}"
            )
        return target

    def compile(
        self,
        air_module,
        output_binary_name="air",
        kernel="MLIR_AIE",
        insts="air.insts.bin",
    ):
        """Check the design statically and compile it for the interpreter.

        Raises an air.emu.DesignError subclass for a design that cannot work on
        the NPU (budget, herd shape, DMA limits, call types, missing library)."""
        from ..emu.engine import Options, Program

        if self.currently_loaded:
            raise AirBackendError(
                "Cannot use XRTBackend to compile while the artifact is currently loaded. "
                "Call unload() first."
            )
        target = self._resolved_target()
        if self.output_format == "elf" and "npu1" in target:
            raise AirBackendError(
                f"output_format='elf' is not supported for {target} target."
            )
        if self.num_device_cols > 0:
            max_cols = 4 if target == "npu1" else 8
            if self.num_device_cols > max_cols - 1:
                raise AirBackendError(
                    f"Invalid num_device_cols value: {self.num_device_cols}. For {target}, "
                    f"valid values are 0 (entire device) or 1-{max_cols - 1}"
                )
        from ..ir import Module

        if not isinstance(air_module, Module):
            raise AirBackendError(
                f"compile expects an air.ir.Module (what @module_builder returns), got "
                f"{type(air_module).__name__}"
            )
        if self.verbose:
            print("AIR Module:")
            print(air_module)
        module = air_module
        opts = Options(
            stack_size=self.stack_size,
            omit_pingpong=self.omit_pingpong,
            runtime_loop_tiling_sizes=self.runtime_loop_tiling_sizes,
            target_device=target,
            num_device_cols=self.num_device_cols,
            progress=self.emu_progress,
            entry=self.instance_name or None,
        )
        # with another executor (AIR_EMU_RUN_WITH: the compiled design, simulated) the compiler decides
        # what builds; the emulator's own refusals are printed, not raised
        external = _runner() is not None
        program = Program(module, opts, check=not external)
        if external:
            import sys

            for line in program.resources.problems:
                print(
                    f"emulator (not enforced under {RUN_WITH}): {line[0]}",
                    file=sys.stderr,
                )
            if not program.budget.ok:
                print(
                    f"emulator (not enforced under {RUN_WITH}): a budget is over",
                    file=sys.stderr,
                )
        self.emu_budget = program.budget
        self.emu_resources = program.resources
        self._program = program
        from ..emu.decisions import write

        write(module, program)
        if self.verbose:
            print(program.budget.table())
            print(program.resources.table())
        ext = {"elf": "elf", "txn": "txn", "pdi": "pdi"}.get(
            self.output_format, "xclbin"
        )
        return XRTCompileArtifact(
            f"{output_binary_name}.{ext}", kernel, insts, program=program
        )

    def load(self, artifact):
        """Return the invoker: invoker(*arrays) -> tuple of flat arrays (one per argument)."""
        if self.currently_loaded:
            raise AirBackendError(
                "Cannot use XRTBackend to compile while the artifact is currently loaded. "
                "Call unload() first."
            )
        program = getattr(artifact, "program", None)
        if program is None:
            raise AirBackendError(
                "this artifact was not produced by the emulator's XRTBackend.compile"
            )
        xclbin_mode = not artifact.output_binary.endswith(".elf")

        runner = _runner()

        def invoker(*args):
            if xclbin_mode and len(args) > 5:
                raise ValueError("Too many arguments")
            if (
                runner is not None
            ):  # another executor of the same module (AIR_EMU_RUN_WITH)
                return runner(str(program.compiler.module), self.__dict__, args)
            program.options.progress = self.emu_progress
            outs = program.run(*args)
            self.emu_stats = program.stats
            invoker.emu_stats = program.stats
            return outs

        invoker.emu_budget = program.budget
        invoker.emu_resources = program.resources
        invoker.emu_stats = None
        invoker.emu_program = program
        self.currently_loaded = True
        return invoker

    def compile_and_load(self, module):
        return self.load(self.compile(module))

    def unload(self):
        self.currently_loaded = False
