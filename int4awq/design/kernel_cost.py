# SPDX-License-Identifier: MIT
"""Cycles of one kernel call on the AIE2P core: a model of what the call issues, calibrated on published
NPU2 measurements of public kernels.

    python3 -m int4awq.design.kernel_cost --tile-m 64 --tile-n 64 --tile-k 64 --gs 128   one call of our kernel
    python3 -m int4awq.design.kernel_cost --calibration                                  the calibration table
    python3 -m int4awq.design.kernel_cost --write-table                                  regenerate kernel_cycles.json

The counts come from executing the kernel against the host aie_api's profiling build (int4awq.design.kernel_profile:
instructions per AIE2P slot class per marked software-pipelined loop, element moves to the scalar unit,
live block streams). From them, per call:

    cycles = LOOP    * sum over marked loops of ResMII * (iterations + entries): II = LOOP * ResMII per
                       iteration, ResMII the busiest slot of one iteration (its instructions / its units
                       per cycle), and one II per entry to fill and drain two stages (a loop whose
                       profile records its accumulator chain would take II = max(LOOP * ResMII, chain *
                       MAC_CHAIN_LATENCY + CHAIN_FIXED), LoopSchedule; no profile records one yet); for a loop the
                       post-pipeliner leaves alone (an iteration past its largest II, a remainder or an
                       out-of-line call in the loop: MAX_II, unpipelined) 2 * ResMII per iteration
           + SPILL   * memory accesses for values that find no register: block-stream accesses beyond the
                       FIFO registers (2 load, 1 store; in a loop with p > 2 input streams live, (p - 2) / p
                       of its loads, likewise stores), and a store and a reload per 512 accumulator bits
                       beyond the five accumulator registers
           + OUTSIDE * vector instructions outside marked loops
           + SCALAR  * element moves between vector registers and the scalar unit

The four constants are fitted (non-negative least squares on the relative error of cycles per call) to
measured whole-design times of Peano-built public kernels and to the II Peano published for a loop
(kernel_calibration.json: kernels, schedules), combined with the DDR model of
int4awq/design/model.py: design time = max(DDR time, calls per core * cycles / clock) + fixed cost. A point whose
DDR time explains 90 % of its measurement bounds the kernel from above only: it joins the fit when the
model would exceed that bound. A point built with chess is predicted, never fitted. Every figure this
produces is MODELLED; docs/performance.md has the table, the error per kernel family and against the
published II, and the leave-one-out error.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import re
import itertools
import json
import os
import sys
from dataclasses import dataclass

import numpy as np

from . import model
from ..kernel.record import FORMAT_GS, FORMATS
from .kernel_profile import (
    profile_attention_step,
    ACC_REGISTERS,
    KERNEL_FILES,
    LOAD_FIFOS,
    STORE_FIFOS,
    WIDTH,
    site_hazards,
)

HERE = os.path.dirname(os.path.abspath(__file__))
from ..errors import REPO

CALIBRATION = os.path.join(HERE, "kernel_calibration.json")
TABLE = os.path.join(HERE, "kernel_cycles.json")
# The kernel's sources: the shared header, the GEMM's entries, the GEMV's (kernel_profile.KERNEL_FILES), and
# what the host build adds to them (its profiling hooks, the stand-in of mlir-aie's loop macros)
KERNEL_SOURCES = [os.path.join(REPO, "kernels", f) for f in KERNEL_FILES] + [
    os.path.join(REPO, "kernels", "host_hooks.h"),
    os.path.join(REPO, "emulator", "include", "aie_kernel_utils.h"),
]
KERNEL_MAKEFILE = os.path.join(REPO, "kernels", "Makefile")
HOST_AIE_API = os.path.join(REPO, "emulator", "include", "aie_api")
CACHE = os.path.join(REPO, "build", "kernel_cycles_cache.json")

# The NPU2 core clock assumed for every cycle <-> time conversion: no mlir-air figure states it; a public
# single-tile bfp16 measurement of 1760 GFLOPS at 96 % VMAC utilisation is consistent with 1.8 GHz.
CLOCK_HZ = 1.8e9
VECTOR = ("MAC", "LOAD", "STORE", "SHUFFLE", "CONVERT", "ALU")
TERMS = ("LOOP", "SPILL", "OUTSIDE", "SCALAR")
DDR_BOUND_SHARE = 0.9


# llvm-aie's post-pipeliner tries initiation intervals up to -aie-postpipeliner-maxii: 60 in the Peano that
# built mlir-aie PR #3650's ATB kernels, whose loop (ResMII 68) needed it raised to 120; the published
# kernels the model is calibrated on were built with the default (MAX_II). This kernel is built with PR
# #3650's flags (kernels/Makefile PEANO_FLAGS: maxii 120, maxtry-ii 50), so its loops are priced against
# KERNEL_MAX_II. A loop whose iteration needs more, or that holds a remainder or an out-of-line call
# (kernel_profile.loop_hazards), is not software-pipelined: its iterations run one after another, each
# priced as UNPIPELINED_STAGES times its busiest slot (the span of one iteration in a two-stage schedule:
# PR #3650's loop runs at II 77 in 2 stages). A reading of the sources, not a measurement:
# docs/performance.md#the-kernel-cost-model.
MAX_II = 60
KERNEL_MAX_II = 120
UNPIPELINED_STAGES = 2
PIPELINE_STAGES = 2  # PR #3650's loop: NS=2

# The chain term (issue 52): a loop whose iteration carries a chain of `chain` dependent accumulator
# operations (mac / mmul into the accumulator the previous one wrote) cannot start iterations faster than
# chain * MAC_CHAIN_LATENCY + CHAIN_FIXED cycles apart (post-RA pipelined: its accumulator registers are
# reused by the next iteration, so an accumulator's whole chain, from its init to its last read, fits in
# one II). MAC_CHAIN_LATENCY is read, not fitted: llvm-aie's AIE2PGenSchedule.td (Xilinx/llvm-aie @
# 1b54f072) gives the floating-point accumulating VMAC (II_VMAC_f_vmac_bf_* and II_VMAC_f_vmac_bfp_*: the
# bf16 mac and the bfp16 8x8x8 mmul) its result at operand cycle 6 (no bypass) and reads the accumulator
# input (acc1) at cycle 4; AIEBaseInstrInfo::getSignedOperandLatency makes a data edge def - use + 1 = 3
# cycles. CHAIN_FIXED is the rest of the recurrence (accumulator init, the conversion that reads the
# result, the store): no public source pins it, so it is FITTED as the largest value that keeps the chain
# term at or under every published loop II / bundle count of PUBLISHED_LOOPS (chain_fixed_bound(): the
# slack value - chain * 3 is 29, 18, 17, 256, 41, 43; PR #3650's II 41 loop sets it, so that figure is a
# fit, not a check). Fitted on PR #3650's RecMII 77 alone it would be 29, which puts the II 42 / 41 loops'
# floor above their published II (53).
MAC_CHAIN_LATENCY = 3
CHAIN_FIXED = 17


def chain_ii(chain: int) -> float:
    """The shortest II a chain of `chain` dependent accumulator operations per iteration allows (0: none)."""
    return chain * MAC_CHAIN_LATENCY + CHAIN_FIXED if chain else 0.0


def loop_bound(loop: dict) -> float:
    """Cycles of a marked loop at its busiest slot."""
    return max(loop["ops"][s] / WIDTH.get(s, 1) for s in VECTOR)


def unpipelined(loop: dict, max_ii: int = MAX_II) -> str | None:
    """Why the post-pipeliner leaves this loop alone, or None. Loops whose iterations the profile does not
    see (upstream kernels marked before their `for`, iterations 0) count as pipelined; a loop of one
    iteration per entry has nothing to overlap."""
    if loop.get("hazards"):
        return ", ".join(loop["hazards"])
    iterations = loop.get("iterations", 0)
    if iterations > loop.get("entries", iterations):
        ii = loop_bound(loop) / iterations
        if ii > max_ii:
            return f"II {ii:.0f} > {max_ii}"
    return None


@dataclass(frozen=True)
class LoopSchedule:
    """A marked loop as the model schedules it: II = max(LOOP x res_mii, chain_ii(chain)) per iteration
    (LOOP, fitted, is the ratio of Peano's II to the busiest slot; the chain term, MAC_CHAIN_LATENCY per
    dependent accumulator operation plus CHAIN_FIXED, bounds it from below when the iteration carries a
    long accumulator chain), plus, when pipelined, one II per entry to fill and drain its PIPELINE_STAGES
    stages; unpipelined, each iteration takes UNPIPELINED_STAGES times res_mii (or its chain, if longer).
    """

    res_mii: float  # the busiest slot's cycles per iteration (host counts)
    trips: int  # iterations, over all entries; 0: not seen (priced as the busiest slot over the loop)
    entries: int
    pipelined: bool
    # dependent accumulator operations per iteration; 0: not known (no chain term)
    chain: int = 0

    @property
    def units(self) -> float:
        """Cycles at LOOP = 1, slots only (the LOOP feature of the fit: a loop with a chain is priced by
        cycles(), not by a linear term)."""
        if not self.trips:
            return self.res_mii * (1 if self.pipelined else UNPIPELINED_STAGES)
        if not self.pipelined:
            return UNPIPELINED_STAGES * self.res_mii * self.trips
        return self.res_mii * (self.trips + (PIPELINE_STAGES - 1) * self.entries)

    def slot_ii(self, loop: float) -> float:
        return loop * self.res_mii

    @property
    def chain_ii(self) -> float:
        return chain_ii(self.chain)

    def ii(self, loop: float) -> float:
        """Cycles per iteration: the larger of the slot term (LOOP x res_mii) and the chain term."""
        return max(self.slot_ii(loop), self.chain_ii)

    def bound_by(self, loop: float) -> str:
        return "chain" if self.chain_ii > self.slot_ii(loop) else "slots"

    def cycles(self, loop: float) -> float:
        """Cycles of the whole loop at the fitted LOOP: units() with the chain term in each iteration's II."""
        if not self.chain:
            return loop * self.units
        if not self.trips:
            raise ValueError(
                "a chain term needs the loop's iterations (trips 0: not seen)"
            )
        if not self.pipelined:
            return self.trips * max(
                UNPIPELINED_STAGES * loop * self.res_mii, self.chain_ii
            )
        return self.ii(loop) * (self.trips + (PIPELINE_STAGES - 1) * self.entries)


def loop_schedule(loop: dict, max_ii: int = MAX_II) -> LoopSchedule:
    trips = loop.get("iterations", 0)
    entries = loop.get("entries", 1)
    pipelined = unpipelined(loop, max_ii) is None
    chain = loop.get("chain", 0)
    if trips <= entries:  # iterations not seen, or one per entry: nothing to overlap
        return LoopSchedule(loop_bound(loop), 0, entries, pipelined, chain)
    return LoopSchedule(loop_bound(loop) / trips, trips, entries, pipelined, chain)


def loop_cycles(loop: dict, max_ii: int = MAX_II) -> float:
    """The loop's LOOP feature (cycles at LOOP = 1). A profile that records a chain (loop["chain"]) has
    no linear feature: its II is max(LOOP x ResMII, chain term), LoopSchedule.cycles. No profile records
    one today (the host aie_api profile counts slots, not dependences), so this refuses rather than drop it.
    """
    if loop.get("chain"):
        raise ValueError(
            "a loop with a chain term is priced by LoopSchedule.cycles(LOOP), not by a linear feature"
        )
    return loop_schedule(loop, max_ii).units


def spilled_accesses(loop: dict) -> float:
    """Memory accesses a loop makes for values that find no register: block-stream accesses beyond the
    FIFO registers (its streams share them in turn: in a loop with p > 2 input streams live, (p - 2) / p of
    its loads; likewise stores), and per accumulator bit beyond the five registers a 512-bit store and a
    reload."""
    n = 2 * loop.get("acc_spill_bits", 0) / 512
    p_in, p_out = loop.get("peak_in", 0), loop.get("peak_out", 0)
    if p_in > LOAD_FIFOS:
        n += loop["ops"]["LOAD"] * (p_in - LOAD_FIFOS) / p_in
    if p_out > STORE_FIFOS:
        n += loop["ops"]["STORE"] * (p_out - STORE_FIFOS) / p_out
    return n


def features(profile: dict, max_ii: int = MAX_II) -> np.ndarray:
    """The model's terms for one call (TERMS order), its loops priced against the post-pipeliner limit
    max_ii of the build."""
    loops = profile["loops"]
    scalar = profile["outside"].get("SCALAR", 0) + sum(
        lp["ops"].get("SCALAR", 0) for lp in loops
    )
    return np.array(
        [
            sum(loop_cycles(lp, max_ii) for lp in loops),
            sum(spilled_accesses(lp) for lp in loops)
            + 2 * profile.get("outside_acc_spill_bits", 0) / 512,
            sum(profile["outside"][s] for s in VECTOR),
            scalar,
        ]
    )


@dataclass(frozen=True)
class Point:
    name: str
    tile: str
    calls: int
    measured_s: float
    ddr_s: float
    x: np.ndarray
    family: str = ""
    compiler: str = "Peano"

    @property
    def fitted(self) -> bool:
        return self.ddr_s + model.FIXED_S < DDR_BOUND_SHARE * self.measured_s

    @property
    def implied_cycles(self) -> float:
        return (self.measured_s - model.FIXED_S) * CLOCK_HZ / self.calls

    def predict_s(self, c: np.ndarray) -> float:
        return (
            max(self.ddr_s, self.calls * float(self.x @ c) / CLOCK_HZ) + model.FIXED_S
        )


def load_points(path: str = CALIBRATION) -> list[Point]:
    with open(path) as f:
        rows = json.load(f)["kernels"]
    return [
        Point(
            r["name"],
            r["tile"],
            r["calls_per_core"],
            r["measured_s"],
            r["ddr_bytes"] / model.DDR_BYTES_PER_S,
            features(r["profile"]),
            r["family"],
            r["compiler"],
        )
        for r in rows
    ]


@dataclass(frozen=True)
class PublishedSchedule:
    """A Peano loop schedule its kernel's source publishes, beside the host profile of that loop."""

    name: str
    figure: str
    res_mii: int  # Peano's
    ii: int  # the II Peano reached
    stages: int
    loop: dict  # the loop's profile (ops, entries, iterations)

    @property
    def x(self) -> np.ndarray:
        """The model's terms of one iteration: its busiest slot, for LOOP."""
        x = np.zeros(len(TERMS))
        x[TERMS.index("LOOP")] = loop_schedule(self.loop, KERNEL_MAX_II).res_mii
        return x

    def model_ii(self, c: np.ndarray) -> float:
        """The model's II for this loop: LOOP times the busiest slot per iteration."""
        return float(self.x @ c)


def load_schedules(path: str = CALIBRATION) -> list[PublishedSchedule]:
    with open(path) as f:
        rows = json.load(f).get("schedules", [])
    return [
        PublishedSchedule(
            r["name"], r["figure"], r["res_mii"], r["ii"], r["stages"], r["loop"]
        )
        for r in rows
    ]


def _nnls(X: np.ndarray) -> np.ndarray:
    """min |X c - 1|^2 over c >= 0 (X: rows already divided by their targets): every active set of the
    few terms tried, the feasible one with the least residual kept."""
    best, best_res = np.zeros(X.shape[1]), np.inf
    for r in range(1, X.shape[1] + 1):
        for cols in itertools.combinations(range(X.shape[1]), r):
            if len(cols) > len(X):
                continue
            sol, *_ = np.linalg.lstsq(X[:, cols], np.ones(len(X)), rcond=None)
            if (sol < 0).any():
                continue
            c = np.zeros(X.shape[1])
            c[list(cols)] = sol
            res = float(((X @ c - 1) ** 2).sum())
            if res < best_res - 1e-12:
                best, best_res = c, res
    return best


def fit(points: list[Point], schedules: list = ()) -> np.ndarray:
    """The constants: fitted on the compute-bound points, plus each bound-only point the fit would exceed;
    each published loop schedule adds a row of its own, its II against LOOP times the busiest slot.
    """
    rows = [p.x / p.implied_cycles for p in points]
    rows += [s.x / s.ii for s in schedules]
    X = np.array(rows)
    use = np.array([p.fitted for p in points] + [True] * len(schedules))
    while True:
        c = _nnls(X[use])
        over = ~use & (X @ c > 1)
        if not over.any():
            return c
        use |= over


# The model is fitted on Peano builds only (this kernel is built with Peano); a point built with another
# compiler is predicted with that fit and reported, labelled, never fitted.
FIT_COMPILER = "Peano"


@dataclass(frozen=True)
class Calibration:
    constants: np.ndarray
    points: list  # every measured point; those of FIT_COMPILER are fitted
    errors: dict  # name -> relative error of the design time, fitted on all the Peano points
    loo: dict  # name -> the same, fitted on all the other Peano points (leave-one-out; Peano points only)
    schedules: (
        list  # PublishedSchedule: the model's II per loop checked against Peano's
    )

    @property
    def loo_error(self) -> float:
        """Mean absolute leave-one-out error of the fitted points' design times."""
        return float(np.mean([abs(e) for e in self.loo.values()]))

    def family_errors(self) -> dict:
        """family -> (points, mean |error| fitted, mean |leave-one-out error|; None for a family not fitted)."""
        out = {}
        for fam in dict.fromkeys(p.family for p in self.points):
            names = [p.name for p in self.points if p.family == fam]
            loo = [abs(self.loo[n]) for n in names if n in self.loo]
            out[fam] = (
                len(names),
                float(np.mean([abs(self.errors[n]) for n in names])),
                float(np.mean(loo)) if loo else None,
            )
        return out

    def ii_errors(self) -> dict:
        """schedule name -> relative error of the model's II against the II Peano published."""
        return {s.name: s.model_ii(self.constants) / s.ii - 1 for s in self.schedules}

    def summary(self) -> str:
        fitted = sum(p.compiler == FIT_COMPILER for p in self.points)
        ii = "".join(f", loop II {100 * e:+.0f} %" for e in self.ii_errors().values())
        return (
            f"kernel model: {fitted} published Peano NPU2 measurements, leave-one-out error "
            f"{100 * self.loo_error:.0f} %{ii}"
        )


_CALIBRATION: Calibration | None = None


def calibration() -> Calibration:
    global _CALIBRATION
    if _CALIBRATION is None:
        pts, sch = load_points(), load_schedules()
        peano = [p for p in pts if p.compiler == FIT_COMPILER]
        c = fit(peano, sch)
        errors = {p.name: p.predict_s(c) / p.measured_s - 1 for p in pts}
        loo = {
            p.name: p.predict_s(fit(peano[:i] + peano[i + 1 :], sch)) / p.measured_s - 1
            for i, p in enumerate(peano)
        }
        _CALIBRATION = Calibration(c, pts, errors, loo, sch)
    return _CALIBRATION


# ---------------------------------------------------------------------------------------------------------
# Our kernel's calls per tile: kernel_cycles.json (committed, keyed by the kernel source's hash) holds, per
# call, the model's terms (TERMS order) and the live block streams; a call the table lacks is profiled now
# (kernels/Makefile host-profile, about a second per new tile) and cached in build/.


_CODE = re.compile(r'"(?:\\.|[^"\\\n])*"|//[^\n]*|/\*.*?\*/', re.S)


def code_tokens(text: str) -> str:
    """C++ source as its code alone: comments dropped, whitespace runs made one space (string literals
    kept), so that a comment or a reformatting does not change what the hash keys."""
    text = _CODE.sub(lambda m: m.group(0) if m.group(0).startswith('"') else " ", text)
    return " ".join(text.split())


def kernel_hash() -> str:
    """The hash of the code (code_tokens) of the kernel sources and of the host aie_api (whose profiling
    layer counts), and the Makefile's FORMAT_DEFS lines (each record format's -D flags: what a format's
    objects compile): a comment or whitespace edit keeps the table valid, a code edit does not.
    """
    h = hashlib.sha256()
    for path in KERNEL_SOURCES + sorted(
        glob.glob(os.path.join(HOST_AIE_API, "**", "*.hpp"), recursive=True)
    ):
        with open(path, encoding="utf-8") as f:
            h.update(code_tokens(f.read()).encode())
    with open(KERNEL_MAKEFILE, "rb") as f:
        h.update(b"".join(line for line in f if b"FORMAT_DEFS :=" in line))
    return h.hexdigest()[:16]


# A call: (tm, tn, tk, gs) of matmul_int4_bf16_packed_f32, or (None, tn, tk, gs, m) of gemv_int4_accumulate with m
# rows (the GEMV object has no tile_m).
def _key(
    tm: int | None, tn: int, tk: int, gs: int, m: int | None = None, fmt: str = "awq"
) -> str:
    key = f"{tm}x{tn}x{tk}/gs{gs}" if m is None else f"gemv/{tn}x{tk}/gs{gs}/m{m}"
    return key if fmt == "awq" else f"{fmt}/{key}"


def call_gs(tk: int, gs: int, fmt: str = "awq") -> int:
    """The group size as one call sees it: a group spanning whole chunks (gs >= tk) gives the call of one fold
    span per chunk whatever its size (the kernel's SPAN is min(tk, gs)), so those calls are one entry; MXFP4
    has no fold. Every such pair in kernel_cycles.json has the same terms (tests/design/test_kernel_cost.py).
    """
    return gs if fmt == "mxfp4" or gs < tk else tk


def _call(tm: int | None, tn: int, tk: int, gs: int, m: int | None, fmt: str) -> tuple:
    return (tm, tn, tk, call_gs(tk, gs, fmt), m, fmt)


def _parse_key(key: str) -> tuple:
    """_key's inverse: (tm, tn, tk, gs, m, fmt)."""
    head, _, rest = key.partition("/")
    fmt, rest = (head, rest) if head in FORMATS else ("awq", key)
    parts = rest.split("/")
    if parts[0] == "gemv":
        tn, tk = map(int, parts[1].split("x"))
        return None, tn, tk, int(parts[2][2:]), int(parts[3][1:]), fmt
    tm, tn, tk = map(int, parts[0].split("x"))
    return tm, tn, tk, int(parts[1][2:]), None, fmt


def _profile_dict(p) -> dict:
    """A host profile (kernel_profile.Profile) as the model's terms read it, each marked loop with its
    hazards read from its source file."""
    return {
        "loops": [
            {
                "ops": lp.ops,
                "entries": lp.entries,
                "iterations": lp.iterations,
                "hazards": site_hazards(lp.line),
                "peak_in": lp.peak_in,
                "peak_out": lp.peak_out,
                "acc_spill_bits": lp.acc_spill_bits,
            }
            for lp in p.loops
        ],
        "outside": p.outside,
        "outside_acc_spill_bits": p.outside_acc_spill_bits,
    }


def measure_tile_ends(tm: int, tn: int) -> list[float]:
    """The model's terms of the zero and drain calls of one tm x tn C tile (kernel_profile.profile_tile_ends)."""
    from .kernel_profile import profile_tile_ends

    prof = _profile_dict(profile_tile_ends(tm, tn))
    return [round(float(v), 3) for v in features(prof, KERNEL_MAX_II)]


def measure(
    tm: int | None, tn: int, tk: int, gs: int, m: int | None = None, fmt: str = "awq"
) -> dict:
    """Profile one call (matmul_int4_bf16_packed_f32, or gemv_int4_accumulate of m rows) of a format's kernel object
    into a table entry."""
    from .kernel_profile import profile_accumulate, profile_gemv

    p = (
        profile_accumulate(tm, tn, tk, gs, fmt)
        if m is None
        else profile_gemv(tn, tk, gs, m, fmt)
    )
    prof = _profile_dict(p)
    return {
        "x": [round(float(v), 3) for v in features(prof, KERNEL_MAX_II)],
        "unpipelined": sorted(
            {
                why
                for why in (unpipelined(lp, KERNEL_MAX_II) for lp in prof["loops"])
                if why is not None
            }
        ),
        "streams": [p.peak_in, p.peak_out],
        "fills": list(p.fills),
        "acc_registers": p.acc_registers,
    }


_ENTRIES: dict | None = None
_TILE_ENDS: dict = (
    {}
)  # "tm x tn" -> the zero and drain calls' terms, read with _ENTRIES
_TOLD = False  # the on-demand profiling note is printed once per process


def _entries() -> dict:
    """Profiled calls of this kernel, keyed by the call (_call): the committed table, then the cache; the
    table's tile ends (_TILE_ENDS) in the same read."""
    global _ENTRIES, _TILE_ENDS
    if _ENTRIES is None:
        _ENTRIES, _TILE_ENDS = {}, {}
        h = kernel_hash()
        for path in (TABLE, CACHE):
            if os.path.isfile(path):
                with open(path) as f:
                    d = json.load(f)
                if d.get("kernel") == h:
                    for key, e in d.get("calls", {}).items():
                        _ENTRIES[_call(*_parse_key(key))] = e
                    _TILE_ENDS.update(d.get("tile_ends", {}))
    return _ENTRIES


def known(
    tm: int | None, tn: int, tk: int, gs: int, m: int | None = None, fmt: str = "awq"
) -> bool:
    """Whether this call's profile is at hand (no profiling needed)."""
    return _call(tm, tn, tk, gs, m, fmt) in _entries()


_TILE_INDEX: tuple = (
    None,
    0,
    {},
)  # (the entries indexed, their count then, tile -> GEMM calls)


def _gemm_calls_of(tm: int, tn: int, tk: int) -> list[tuple]:
    """The profiled GEMM calls of one tile: an index of _entries(), rebuilt when they change (a sweep
    estimates thousands of calls from it)."""
    global _TILE_INDEX
    entries = _entries()
    if _TILE_INDEX[0] is not entries or _TILE_INDEX[1] != len(entries):
        index = {}
        for c in entries:
            if c[4] is None:
                index.setdefault(c[:3], []).append(c)
        _TILE_INDEX = (entries, len(entries), index)
    return _TILE_INDEX[2].get((tm, tn, tk), [])


def estimated_cycles(tm: int, tn: int, tk: int, gs: int, fmt: str = "awq") -> float:
    """Modelled cycles of a matmul_int4_bf16_packed_f32 call without profiling it: the call's own profile when at
    hand, else the profiled call of the same tile and format nearest in group size, else AWQ's (a ranking
    estimate for choosing which configurations to profile, never a reported figure)."""
    if known(tm, tn, tk, gs, None, fmt):
        return kernel_cycles(tm, tn, tk, gs, fmt)
    same = [c for c in _gemm_calls_of(tm, tn, tk) if c[5] in (fmt, "awq")]
    if not same:
        return kernel_cycles(tm, tn, tk, gs, fmt)  # nothing near: profile it
    best = min(same, key=lambda c: (c[5] != fmt, abs(c[3] - call_gs(tk, gs, fmt))))
    return float(np.array(_entries()[best]["x"]) @ calibration().constants)


def entry(
    tm: int | None, tn: int, tk: int, gs: int, m: int | None = None, fmt: str = "awq"
) -> dict:
    key = _call(tm, tn, tk, gs, m, fmt)
    entries = _entries()
    if key not in entries:
        global _TOLD
        if not _TOLD:
            _TOLD = True
            print(
                f"kernel cost model: profiling calls that {os.path.relpath(TABLE)} lacks (about a second "
                f"per new tile; cached in {os.path.relpath(CACHE)})",
                file=sys.stderr,
            )
        entries[key] = measure(tm, tn, tk, gs, m, fmt)
        cache = {"kernel": kernel_hash(), "calls": {}}
        if os.path.isfile(CACHE):
            with open(CACHE) as f:
                old = json.load(f)
            if old.get("kernel") == cache["kernel"] and "calls" in old:
                cache = old
        cache["calls"][_key(tm, tn, tk, gs, m, fmt)] = entries[key]
        os.makedirs(os.path.dirname(CACHE), exist_ok=True)
        tmp = f"{CACHE}.{os.getpid()}"  # whole or not at all: parallel test workers share the cache
        with open(tmp, "w") as f:
            json.dump(cache, f)
        os.replace(tmp, CACHE)
    return entries[key]


def kernel_cycles(tm: int, tn: int, tk: int, gs: int, fmt: str = "awq") -> float:
    """Modelled cycles of one matmul_int4_bf16_packed_f32 call at these tiles (MODELLED)."""
    return float(
        np.array(entry(tm, tn, tk, gs, None, fmt)["x"]) @ calibration().constants
    )


def gemv_cycles(tn: int, tk: int, gs: int, m: int, fmt: str = "awq") -> float:
    """Modelled cycles of one gemv_int4_accumulate call of m rows (MODELLED)."""
    return float(
        np.array(entry(None, tn, tk, gs, m, fmt)["x"]) @ calibration().constants
    )


def tile_end_cycles(tm: int, tn: int) -> float:
    """Modelled cycles of the zero and drain calls of one tm x tn C tile, once per tile per launch
    iteration (MODELLED; profiled on demand where the table lacks the tile)."""
    _entries()
    key = f"{tm}x{tn}"
    if key not in _TILE_ENDS:
        _TILE_ENDS[key] = measure_tile_ends(tm, tn)
    return float(np.array(_TILE_ENDS[key]) @ calibration().constants)


def attention_step_cycles(g: int, d: int, t: int) -> float:
    """Modelled cycles of one attn_step_bf16 call over a whole chunk of t positions that raises the
    maximum (g query heads of d; MODELLED: the same calibrated terms as the GEMM's, its code all outside
    marked loops). Profiled on demand (the element-wise library's profiling build)."""
    profile = _profile_dict(profile_attention_step(g, d, t))
    return float(features(profile) @ calibration().constants)


def int4_kernel_flops(
    tile_m: int,
    tile_n: int,
    tile_k: int,
    gs: int,
    pes: int = 32,
    fmt: str = "awq",
    estimate: bool = False,
    k: int | None = None,
) -> float:
    """Modelled compute rate of the int4 GEMM on `pes` compute tiles: each PE does one kernel call's
    2 * tile_m * tile_n * tile_k FLOPs in the calibrated model's cycles per call; with k, each call also
    carries its share (tile_k / k) of its C tile's zero and drain calls (tile_end_cycles). estimate: a call
    not yet profiled is estimated (estimated_cycles), not profiled."""
    per_call = 2 * tile_m * tile_n * tile_k
    cycles = (estimated_cycles if estimate else kernel_cycles)(
        tile_m, tile_n, tile_k, gs, fmt
    )
    if k is not None:
        cycles += tile_end_cycles(tile_m, tile_n) * tile_k / k
    return pes * per_call * CLOCK_HZ / cycles


def steps(tm: int, tn: int, tk: int) -> int:
    return (tm // 8) * (tn // 8) * (tk // 8)


def kernel_line(tm: int, tn: int, tk: int, gs: int, fmt: str = "awq") -> str:
    """The `kernel:` line of host/run.py --report."""
    cyc = kernel_cycles(tm, tn, tk, gs, fmt)
    e = entry(tm, tn, tk, gs, None, fmt)
    live_in, live_out = e["streams"]
    fs, fd = e["fills"]
    return (
        f"kernel: {cyc:.0f} cycles per call, {cyc / steps(tm, tn, tk):.2f} per 8x8x8 mmul step "
        f"(MODELLED), live streams in/out: {live_in}/{live_out}, FIFO fills static/dynamic: {fs}/{fd}, "
        f"accumulators: {e['acc_registers']:g} of {ACC_REGISTERS} (estimate)"
        + (
            f", unpipelined loops: {'; '.join(e['unpipelined'])}"
            if e["unpipelined"]
            else ""
        )
    )


def _measure_object(calls: list[tuple]) -> list[tuple[str, dict]]:
    return [(_key(*c), measure(*c)) for c in calls]


def write_table(calls) -> int:
    """Profile every call into TABLE, one process per core. The calls of one kernel object (a GEMV
    object serves every row count) go to one process, so no two build the same object at once.
    """
    from multiprocessing import Pool

    from tqdm import tqdm

    def object_of(c):  # calls are (tm, tn, tk, gs[, m, fmt])
        tm, tn, tk, gs, m, fmt = tuple(c) + (None, "awq")[len(c) - 4 :]
        return (tm if m is None else "gemv", tn, tk, gs, fmt)

    groups = [
        list(g)
        for _, g in itertools.groupby(
            sorted(calls, key=lambda c: str(object_of(c))), key=object_of
        )
    ]
    entries = {}
    with Pool(os.cpu_count()) as pool, tqdm(
        total=sum(map(len, groups)),
        desc="profiling kernel calls",
        unit="call",
        file=sys.stderr,
    ) as bar:
        for done in pool.imap_unordered(_measure_object, groups):
            entries.update(done)
            bar.update(len(done))
        tiles = tile_end_tiles()  # each its own object: no two processes build one
        ends = dict(zip(tiles, pool.starmap(measure_tile_ends, tiles)))
    with open(TABLE, "w") as f:
        json.dump(
            {
                "note": "per kernel call: the cost model's terms (int4awq/design/kernel_cost.py TERMS) and the live "
                "block streams, from the host aie_api profiling build; regenerate with `python3 -m "
                "int4awq.design.kernel_cost --write-table` when the kernel's code or the terms change",
                "kernel": kernel_hash(),
                "calls": entries,
                "tile_ends": {f"{tm}x{tn}": x for (tm, tn), x in ends.items()},
            },
            f,
            indent=0,
            sort_keys=True,
        )
        f.write("\n")
    return len(entries)


def tile_end_tiles() -> list[tuple[int, int]]:
    """Every C tile (record.GEMM_TILES squared) that some GEMM object takes: the tiles whose zero and drain
    calls the table prices."""
    from ..kernel.record import GEMM_TILES
    from .kernel_profile import tile_ends_chunk

    return [
        (tm, tn)
        for tm, tn in itertools.product(GEMM_TILES, GEMM_TILES)
        if tile_ends_chunk(tm, tn) is not None
    ]


TABLE_GROUP_SIZES = (
    32,
    64,
    128,
)  # AWQ / GPTQ checkpoints' group sizes; others are profiled on demand


def table_calls():
    """Per group size of TABLE_GROUP_SIZES: every GEMM tile the sweep can choose (record GEMM_TILES,
    GEMM_K_CHUNKS), and every GEMV record tile (record GEMV_TILE_NS, GEMV_TILE_KS) at 1 to GEMV_MAX_M rows;
    then the other formats' objects (_format_calls) at their usual group (record.FORMAT_GS: int8_triple,
    GGUF Q6_K, in every Q4_K_M file, at 16).
    """
    for gs in TABLE_GROUP_SIZES:
        yield from _table_calls(gs)
    for fmt in FORMATS[1:]:
        yield from _format_calls(fmt, FORMAT_GS[fmt])


def _format_calls(fmt: str, gs: int):
    """A format's objects beside AWQ's, at group size gs: every GEMM tile
    of the sweep its kernel takes, and every GEMV record tile at M = 1 (decode); other row counts and group
    sizes are profiled on demand."""
    from ..errors import ConfigError
    from ..kernel.record import GEMM_K_CHUNKS, GEMM_TILES, GEMV_TILE_KS, GEMV_TILE_NS
    from ..kernel.record import KernelObject, check_kernel_tiles, check_record_tile

    for tm, tn, tk in itertools.product(GEMM_TILES, GEMM_TILES, GEMM_K_CHUNKS):
        try:
            KernelObject("gemm", tn, tk, gs, tm, format=fmt)
            check_kernel_tiles(tm, tn, tk, gs, fmt=fmt)
        except ConfigError:
            continue
        yield tm, tn, tk, gs, None, fmt
    for tn, tk in itertools.product(GEMV_TILE_NS, GEMV_TILE_KS):
        try:
            KernelObject("gemv", tn, tk, gs, format=fmt)
            check_record_tile(tn, tk, gs, fmt)
        except ConfigError:
            continue
        yield None, tn, tk, gs, 1, fmt


def _table_calls(gs: int):
    from ..errors import ConfigError
    from ..kernel.kernel_model import GEMV_MAX_M
    from ..kernel.record import (
        GEMM_K_CHUNKS,
        GEMM_TILES,
        GEMV_TILE_KS,
        GEMV_TILE_NS,
        check_kernel_tiles,
        check_record_tile,
    )

    for tm, tn, tk in itertools.product(GEMM_TILES, GEMM_TILES, GEMM_K_CHUNKS):
        try:
            check_kernel_tiles(tm, tn, tk, gs)
        except ConfigError:
            continue
        yield tm, tn, tk, gs
    for tn, tk in itertools.product(GEMV_TILE_NS, GEMV_TILE_KS):
        try:
            check_record_tile(tn, tk, gs)
        except ConfigError:
            continue
        for m in range(1, GEMV_MAX_M + 1):
            yield None, tn, tk, gs, m


# ---------------------------------------------------------------------------------------------------------
# Published per-loop figures of Peano-built kernels beside the model's price of the same loop (issue 52):
# `python -m int4awq.design.kernel_cost --loops`. Nothing here joins the least-squares fit (LOOP, SPILL,
# OUTSIDE, SCALAR are unchanged); CHAIN_FIXED is derived from these figures (chain_fixed_bound). Per loop
# iteration, the slot counts (kernel_profile convention: instructions per 512-bit datapath word) come from the
# host aie_api profile where it can build the source, else from the source read by hand; `chain` is the
# longest chain of dependent accumulator operations one iteration carries (mac / mmul into the accumulator
# the previous one wrote), counted in the source: PR #3650's loops run k-steps of four mmuls into four
# accumulators (16 or 8 k-steps: each accumulator 16 or 8 deep), q4_k.h's body 32 macs into one local
# accumulator and the scale mac after them (33). The model prices the iteration at LoopSchedule's II,
# max(LOOP x ResMII, chain x MAC_CHAIN_LATENCY + CHAIN_FIXED); no prologue or epilogue beyond one II per
# entry.


@dataclass(frozen=True)
class PublishedLoop:
    name: str
    source: str  # where the figure is published
    figure: str  # "ResMII", "II" or "bundles" (static bundles of the loop body)
    value: int  # the published figure
    compiler: str
    ops: dict  # slot counts per iteration
    counted: str  # how ops were obtained
    chain: int  # dependent accumulator operations per iteration (from the source)

    def res_mii(self) -> float:
        return max(self.ops.get(s, 0) / WIDTH.get(s, 1) for s in VECTOR)

    def schedule(self) -> LoopSchedule:
        """One pipelined iteration as LoopSchedule prices it (the published figures are per iteration)."""
        return LoopSchedule(self.res_mii(), 1, 0, True, self.chain)

    def model(self, c: np.ndarray) -> float:
        """The model's figure for the published one: ResMII for ResMII, else the II of LoopSchedule,
        max(LOOP x ResMII, chain term)."""
        if self.figure == "ResMII":
            return self.res_mii()
        return self.schedule().ii(c[TERMS.index("LOOP")])


def chain_fixed_bound() -> float:
    """The largest CHAIN_FIXED under which the chain term stays at or under every published II and
    bundle count of PUBLISHED_LOOPS: min over them of value - chain x MAC_CHAIN_LATENCY (a ResMII is
    not a schedule length and bounds nothing)."""
    return min(
        lp.value - lp.chain * MAC_CHAIN_LATENCY
        for lp in PUBLISHED_LOOPS
        if lp.figure != "ResMII"
    )


_PR3650 = "mlir-aie PR #3650 aie_kernels/aie2p/mm_bfp_mixed.cc"
_Q4K = (
    "mlir-air programming_examples/fused_decode/kernels/q4_k.h @ e972f29 (from 97360495), "
    "Q4_0 inner loop, comment table 'bundles'"
)
# q4_k.h's Q4_0 sub_chunk body (pr = 16), by hand: loads b_col (bf16 x 32), a_scales (bf16 x 16), 4 x 64
# bytes of codes; 4 to_float of 128 codes (8 words each), 4 accum<accfloat,128> -> bf16 (4 each) and the
# local accumulator -> bf16 (1): CONVERT 49; 32 scalar x vector MACs + 1 scale MAC; 32 b_col.get() to the
# scalar unit, broadcast back for the MAC (SHUFFLE 32). Mode 0 adds ge, sub, select on 4 x float<128> (8
# words each: ALU 96, the objdump's vge 32 / vsel 32); mode 1 adds 4 xors and 4 subs (ALU 36); chess loads
# int4 and converts directly (no ALU).
_Q4K_BASE = {"MAC": 33, "LOAD": 6, "STORE": 0, "SHUFFLE": 32, "CONVERT": 49}
_ATB32 = {"MAC": 32, "LOAD": 58, "STORE": 8, "SHUFFLE": 0, "CONVERT": 16, "ALU": 0}
_HOST32 = (
    "host aie_api profile of the source (the blk loop marked; 2 entries x 8 iterations a call: "
    "MAC 512, LOAD 928, STORE 128, CONVERT 256)"
)

PUBLISHED_LOOPS = (
    PublishedLoop(
        "PR #3650 ATB all-bfp16, 64 mmuls/iteration",
        f"{_PR3650} @ 52bf74a, head comment: 'ResMII=68'",
        "ResMII",
        68,
        "Peano",
        {},  # from kernel_calibration.json "schedules"
        "kernel_calibration.json schedules (host profile, make calibrate)",
        16,
    ),
    PublishedLoop(
        "PR #3650 ATB all-bfp16, 64 mmuls/iteration",
        f"{_PR3650} @ 52bf74a, head comment: 'Measured II=77 (= RecMII), NS=2'",
        "II",
        77,
        "Peano",
        {},
        "kernel_calibration.json schedules (host profile, make calibrate)",
        16,
    ),
    PublishedLoop(
        "PR #3650 ATB bf16 A / bfp16 B / bf16 C, 32 mmuls/iteration",
        f"{_PR3650} (a version in PR #3650's history), head comment: 'Measured II=42, NS=2'",
        "II",
        42,
        "Peano",
        _ATB32,
        _HOST32,
        8,
    ),
    PublishedLoop(
        "PR #3650 ATB bf16-accumulated C, 32 mmuls/iteration",
        f"{_PR3650} (a version in PR #3650's history), head comment: 'Measured II=41, NS=2'",
        "II",
        41,
        "Peano",
        _ATB32,
        _HOST32,
        8,
    ),
    PublishedLoop(
        "fused_decode q4_k.h Q4_0, Q4_SFIX_MODE 0 (select)",
        _Q4K,
        "bundles",
        355,
        "Peano",
        {**_Q4K_BASE, "ALU": 96},
        "by hand from the source (host aie_api lacks to_float(uint4), bit_xor)",
        33,
    ),
    PublishedLoop(
        "fused_decode q4_k.h Q4_0, Q4_SFIX_MODE 1 (xor bias)",
        _Q4K,
        "bundles",
        140,
        "Peano",
        {**_Q4K_BASE, "ALU": 36},
        "by hand from the source (host aie_api lacks to_float(uint4), bit_xor)",
        33,
    ),
    PublishedLoop(
        "fused_decode q4_k.h Q4_0, chess",
        _Q4K,
        "bundles",
        142,
        "chess",
        {**_Q4K_BASE, "ALU": 0},
        "by hand from the source",
        33,
    ),
)


def published_loops(
    cal: Calibration | None = None,
) -> list[tuple[PublishedLoop, float, float]]:
    """(loop, model figure, relative error) per published loop figure. The 64-mmul loop's counts are the
    calibration file's profile of it."""
    cal = cal or calibration()
    recorded = {s.ii: s for s in cal.schedules}
    out = []
    for lp in PUBLISHED_LOOPS:
        if not lp.ops:
            s = recorded[77]
            per = s.loop["iterations"]
            ops = {k: v / per for k, v in s.loop["ops"].items()}
            lp = PublishedLoop(
                lp.name,
                lp.source,
                lp.figure,
                lp.value,
                lp.compiler,
                ops,
                lp.counted,
                lp.chain,
            )
        m = lp.model(cal.constants)
        out.append((lp, m, m / lp.value - 1))
    return out


def loops_table(cal: Calibration | None = None) -> str:
    cal = cal or calibration()
    loop = cal.constants[TERMS.index("LOOP")]
    rows = published_loops(cal)
    lines = [
        f"{'published loop':<58}{'figure':>9}{'published':>10}{'ResMII':>8}{'slots':>7}{'chain':>7}"
        f"{'model':>7}{'error':>7}  bound by",
    ]
    for lp, m, e in rows:
        sch = lp.schedule()
        bound = "-" if lp.figure == "ResMII" else sch.bound_by(loop)
        lines.append(
            f"{lp.name[:57]:<58}{lp.figure:>9}{lp.value:>10}{lp.res_mii():>8.0f}{sch.slot_ii(loop):>7.0f}"
            f"{sch.chain_ii:>7.0f}{m:>7.0f}{100 * e:>6.0f}%  {bound}"
            + (
                "  (chess: not what the fit is for)"
                if lp.compiler != FIT_COMPILER
                else ""
            )
        )
    within = sum(abs(e) <= 0.2 for _, _, e in rows)
    lines += [
        "",
        f"model = ResMII for a published ResMII, else II = max(slots, chain): slots = LOOP x ResMII (LOOP "
        f"{loop:.2f}, fitted), chain = dependent accumulator operations per iteration x {MAC_CHAIN_LATENCY} "
        f"(llvm-aie's VMAC.f itinerary) + {CHAIN_FIXED} (fitted: the largest value under every published "
        f"II, {chain_fixed_bound():.0f}; the II 41 loop sets it)",
        f"{within} of {len(rows)} within 20 %",
    ]
    lines += ["sources:"] + [
        f"  {lp.figure} {lp.value}: {lp.source}; counts: {lp.counted}"
        for lp, _, _ in rows
    ]
    return "\n".join(lines)


def calibration_table(cal: Calibration) -> str:
    names = dict(zip(TERMS, cal.constants))
    lines = [
        "constants: "
        + ", ".join(f"{t} {v:.3g}" for t, v in names.items())
        + f"  (clock {CLOCK_HZ / 1e9:.1f} GHz)",
        f"{'kernel':<66}{'tile':>11}{'measured':>11}{'predicted':>11}{'error':>7}{'LOO':>6}",
    ]
    for p in cal.points:
        pred = p.measured_s * (1 + cal.errors[p.name])
        loo = f"{100 * cal.loo[p.name]:>5.0f}%" if p.name in cal.loo else f"{'-':>6}"
        notes = [] if p.fitted else ["DDR-bound: an upper bound on the kernel"]
        if p.compiler != FIT_COMPILER:
            notes.append(f"built with {p.compiler}: predicted, not fitted")
        lines.append(
            f"{p.name[:65]:<66}{p.tile:>11}{p.measured_s * 1e3:>9.2f}ms{pred * 1e3:>9.2f}ms"
            f"{100 * cal.errors[p.name]:>6.0f}%{loo}"
            + (f"  ({'; '.join(notes)})" if notes else "")
        )
    lines += ["", f"{'family':<40}{'points':>7}{'|error|':>9}{'|LOO|':>7}"]
    for fam, (n, err, loo) in cal.family_errors().items():
        lines.append(
            f"{fam:<40}{n:>7}{100 * err:>8.0f}%"
            + (f"{100 * loo:>6.0f}%" if loo is not None else f"{'-':>7}")
        )
    lines += [
        "",
        f"{'published loop schedule (per iteration)':<66}{'busiest':>8}{'ResMII':>7}{'model II':>9}"
        f"{'II':>5}{'error':>7}",
    ]
    for s in cal.schedules:
        lines.append(
            f"{s.name[:65]:<66}{loop_schedule(s.loop, KERNEL_MAX_II).res_mii:>8.0f}{s.res_mii:>7}"
            f"{s.model_ii(cal.constants):>9.0f}{s.ii:>5}{100 * cal.ii_errors()[s.name]:>6.0f}%"
        )
    lines.append(cal.summary())
    return "\n".join(lines)


def main(argv=None) -> int:
    from ..errors import ConfigError
    from .kernel_profile import report, profile_accumulate

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in (("tile-m", 64), ("tile-n", 64), ("tile-k", 64), ("gs", 128)):
        ap.add_argument(f"--{name}", type=int, default=default)
    ap.add_argument(
        "--calibration", action="store_true", help="print the calibration table"
    )
    ap.add_argument(
        "--write-table", action="store_true", help="regenerate kernel_cycles.json"
    )
    ap.add_argument(
        "--loops",
        action="store_true",
        help="the published Peano loop figures beside the model's per-loop price",
    )
    args = ap.parse_args(argv)
    if args.loops:
        print(loops_table())
        return 0
    if args.calibration:
        print(calibration_table(calibration()))
        return 0
    if args.write_table:
        print(f"wrote {TABLE}: {write_table(list(table_calls()))} kernel calls")
        return 0
    try:
        p = profile_accumulate(args.tile_m, args.tile_n, args.tile_k, args.gs)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(report(p, args.tile_m, args.tile_n, args.tile_k, args.gs))
    print(kernel_line(args.tile_m, args.tile_n, args.tile_k, args.gs))
    print(calibration().summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
