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
