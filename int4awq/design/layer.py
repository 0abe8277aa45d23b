# SPDX-License-Identifier: MIT
"""A decoder layer's o_proj + FFN as one module (o_gemv_ffn_int4.py): its default configuration, its DDR
traffic and its modelled time.

time = FIXED_S (one dispatch) + the sum over its seven launches of max(DDR, compute)
       + LAUNCH_BOUNDARY_S per launch after the first

MODELLED, never measured. The GEMV launches are matvec_int4_packed's, priced by gemv.modelled without its
fixed cost; the element-wise launches move their operands once at model.DDR_BYTES_PER_S and are
DDR-bound by the estimate below. A launch boundary inside one dispatch is taken as free: mlir-air #1653
measured one fused launch at 1,375 us against the same work as three launches of one ELF at 1,340 us.
"""

from __future__ import annotations

from dataclasses import dataclass

from int4_packed_record import COLUMNS, PES, ConfigError, LayerConfig

from . import gemv, model
from .llama import PROJECTIONS
from ..kernel.record import FORMAT_GS, GEMV_TILE_NS

LAUNCH_BOUNDARY_S = (
    0.0  # mlir-air #1653: three launches of one ELF no slower than one fused launch
)
# Element-wise compute, estimated (not profiled): per 16 lanes about 8 vector operations (SwiGLU's loads,
# tanh, add, three multiplies, store) at one per cycle of the core clock, on each PE's share
ELTWISE_OPS_PER_VECTOR = 8


def eltwise_launches(hidden: int, intermediate: int) -> list[tuple[str, int, int]]:
    """(name, DDR bytes, elements of the busiest PE) of each element-wise launch, in module order."""
    e, h = hidden, intermediate
    return [
        ("residual", 2 * 3 * e, e // COLUMNS),
        ("rms_norm", 2 * 3 * e, 2 * e),  # one PE, two passes over the row
        ("swiglu", 2 * 3 * h, h // COLUMNS),
        ("residual2", 2 * 3 * e, e // COLUMNS),
    ]


def default_layer(hidden: int, intermediate: int, formats=("awq",) * 3, gss=None):
    """The LayerConfig of the shapes: each GEMV at its own default configuration (gemv.default_config) for
    its format and group size (formats, gss: o_proj, gate_up, down; gss None: each format's).
    """
    gss = gss or tuple(FORMAT_GS[f] for f in formats)
    # the GEMV spreads N over its 32 PEs, 16 columns each at least; padding N would break the chain
    least = PES * min(GEMV_TILE_NS)
    if hidden % least or 2 * intermediate % least:
        raise ConfigError(
            f"hidden size {hidden}, intermediate size {intermediate}: the layer module's GEMVs spread N over "
            f"{PES} PEs of at least {min(GEMV_TILE_NS)} columns, so the hidden size and twice the "
            f"intermediate size must be multiples of {least}"
        )
    shapes = ((hidden, hidden), (hidden, 2 * intermediate), (intermediate, hidden))
    return LayerConfig.named(
        *(
            gemv.default_config(1, k, n, gs, fmt)
            for (k, n), fmt, gs in zip(shapes, formats, gss)
        )
    )


def llama_layer(formats=("awq",) * 3, gss=None):
    """Llama-3.2-1B's layer (hidden 2048, intermediate 8192)."""
    return default_layer(
        PROJECTIONS["o_proj"][0], PROJECTIONS["down_proj"][0], formats, gss
    )


def ddr_bytes(cfg) -> int:
    """Bytes one dispatch of the module moves: the GEMVs' and the element-wise launches'."""
    return sum(g.ddr_bytes() for g in cfg.gemvs) + sum(
        b for _, b, _ in eltwise_launches(cfg.hidden, cfg.intermediate)
    )


@dataclass(frozen=True)
class LayerEstimate:
    launches: tuple[
        tuple[str, float], ...
    ]  # (name, seconds) in module order, no fixed cost
    ddr_bytes: int
    seconds: float  # one dispatch: FIXED_S + the launches + their boundaries

    @property
    def gbps(self) -> float:
        return self.ddr_bytes / self.seconds / 1e9


def modelled(cfg) -> LayerEstimate:
    """The module's modelled time (MODELLED): the module docstring's sum."""
    o, gu, d = (gemv.modelled(g) for g in cfg.gemvs)
    gemvs = {
        name: est.seconds - model.FIXED_S
        for name, est in zip(("o_proj", "gate_up", "down"), (o, gu, d))
    }
    elt = {
        name: max(
            b / model.DDR_BYTES_PER_S,
            per_pe / 16 * ELTWISE_OPS_PER_VECTOR / gemv.CLOCK_HZ,
        )
        for name, b, per_pe in eltwise_launches(cfg.hidden, cfg.intermediate)
    }
    order = ("o_proj", "residual", "rms_norm", "gate_up", "swiglu", "down", "residual2")
    launches = tuple((n, (gemvs | elt)[n]) for n in order)
    seconds = (
        model.FIXED_S
        + sum(s for _, s in launches)
        + (len(launches) - 1) * LAUNCH_BOUNDARY_S
    )
    return LayerEstimate(launches, ddr_bytes(cfg), seconds)
