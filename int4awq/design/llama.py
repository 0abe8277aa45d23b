# SPDX-License-Identifier: MIT
"""Llama-3.2-1B's projections, the shapes the default configurations, benchmarks and decode figures use."""

# name -> (K = in_features, N = out_features), per decoder layer (meta-llama/Llama-3.2-1B config.json:
# hidden_size 2048, intermediate_size 8192, 32 heads of 64 with 8 key/value heads)
PROJECTIONS = {
    "q_proj": (2048, 2048),
    "k_proj": (2048, 512),
    "v_proj": (2048, 512),
    "o_proj": (2048, 2048),
    "gate_proj": (2048, 8192),
    "up_proj": (2048, 8192),
    "down_proj": (8192, 2048),
}
LAYERS = 16  # num_hidden_layers
VOCAB = 128256  # vocab_size: the LM head's N (tied to the token embedding)

# The projections that read the same input, fused along N into one GEMV (int4awq.formats.fuse): their
# outputs side by side in one C, in this order
FUSED = {
    "qkv_proj": ("q_proj", "k_proj", "v_proj"),
    "gate_up_proj": ("gate_proj", "up_proj"),
}
# One decoder layer's projections as the fused decode dispatches them
FUSED_DISPATCHES = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")


def shape_of(name: str) -> tuple[int, int]:
    """(K, N) of a projection or of a fused one (its parts' N summed)."""
    if name in FUSED:
        parts = [PROJECTIONS[p] for p in FUSED[name]]
        return parts[0][0], sum(n for _, n in parts)
    return PROJECTIONS[name]
