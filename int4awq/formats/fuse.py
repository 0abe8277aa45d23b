# SPDX-License-Identifier: MIT
"""Projections fused along N at load time: a decoder layer's q, k and v (and its gate and up) as one weight,
so one GEMV (or GEMM) computes all their outputs, side by side in one C.

    fused = fuse_columns([w_q, w_k, w_v])      # [K, N_q + N_k + N_v]
    C[:, offsets[i] : offsets[i] + parts[i].n] is part i's output

The parts must share the weight's class, K, the group size and the record format: one kernel object reads
the fused records. A file whose projections have different types cannot fuse them all: a Q4_K_M file keeps
attn_v in Q6_K in some layers while attn_q and attn_k are Q4_K (llama.cpp's llama-quant.cpp, use_more_bits),
so fusable_runs() groups the parts into runs of one format, in order.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from .gguf_quants import BlockIntWeights
from .mxfp4 import Mxfp4Weights
from .quant import AwqWeights


def _key(w) -> tuple:
    """What two parts must share to fuse (a GGUF block type validates its own value range: the same
    type, not only the same record format)."""
    return (type(w).__name__, w.k, w.gs, w.format, getattr(w, "type_name", None))


def fusable_runs(parts: list) -> list[list[int]]:
    """The parts' indices grouped into runs of consecutive parts that fuse (one format, K and group)."""
    runs: list[list[int]] = []
    for i, w in enumerate(parts):
        if runs and _key(parts[runs[-1][-1]]) == _key(w):
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def offsets(parts: list) -> list[int]:
    """The first column of each part's output in the fused C."""
    return [int(x) for x in np.cumsum([0] + [w.n for w in parts[:-1]])]


def fuse_columns(parts: list):
    """One validated weight holding the parts side by side along N (ConfigError when two do not fuse)."""
    if not parts:
        raise ConfigError("nothing to fuse")
    first = _key(parts[0])
    for w in parts[1:]:
        if _key(w) != first:
            raise ConfigError(
                f"cannot fuse a {first[4] or first[3]} weight (K {first[1]}, group {first[2]}) with a "
                f"{getattr(w, 'type_name', None) or w.format} one (K {w.k}, group {w.gs}): one kernel "
                "object reads the fused records"
            )
    if len(parts) == 1:
        return parts[0]

    def cat(arrays):
        return np.ascontiguousarray(np.concatenate(arrays, axis=1))

    w0 = parts[0]
    if isinstance(w0, AwqWeights):
        lo = [w.s_lo for w in parts]
        if any(x is None for x in lo) and not all(x is None for x in lo):
            raise ConfigError(
                "cannot fuse weights with bf16 scales and with scale pairs"
            )
        fused = AwqWeights(
            cat([w.q for w in parts]),
            cat([w.z for w in parts]),
            cat([w.s for w in parts]),
            w0.gs,
            None if lo[0] is None else cat(lo),
        )
    elif isinstance(w0, BlockIntWeights):
        if (
            len({w.bf16_scales for w in parts}) > 1
            or len({w.m is None for w in parts}) > 1
        ):
            raise ConfigError("cannot fuse block weights of different scale modes")
        fused = BlockIntWeights(
            cat([w.v for w in parts]),
            w0.gs,
            cat([w.s for w in parts]),
            None if w0.m is None else cat([w.m for w in parts]),
            w0.type_name,
            w0.bf16_scales,
        )
    elif isinstance(w0, Mxfp4Weights):
        fused = Mxfp4Weights(
            cat([w.codes for w in parts]), cat([w.scales for w in parts])
        )
    else:
        raise ConfigError(f"cannot fuse weights of type {type(w0).__name__}")
    return fused.validate()
