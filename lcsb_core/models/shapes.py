"""A decoder's weight shapes and parameter count from its Hugging Face `config.json` alone (no torch):
the one place that counts parameters, for the service's model list and the memory estimate.

    projection_shapes(cfg)["q_proj"]    # (in_features, out_features) of one layer's q projection
    parameter_count(cfg)                # 134,515,008 for SmolLM2-135M-Instruct
"""

from __future__ import annotations

from typing import Any


def projection_shapes(config: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """(in_features, out_features) of each linear projection of one decoder layer (Llama/Qwen2/Gemma
    style: grouped-query attention, gated MLP).

    Raises:
        KeyError: `hidden_size`, `intermediate_size` or `num_attention_heads` is missing.
    """
    h, i = config["hidden_size"], config["intermediate_size"]
    heads = config["num_attention_heads"]
    kv = config.get("num_key_value_heads") or heads
    hd = config.get("head_dim") or h // heads
    return {"q_proj": (h, heads * hd), "k_proj": (h, kv * hd), "v_proj": (h, kv * hd), "o_proj": (heads * hd, h),
            "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}


def parameter_count(config: dict[str, Any]) -> tuple[int, int]:
    """(parameters of the decoder layers' linear projections, all other parameters: two RMSNorms per
    layer, the final norm, the embeddings and, unless tied, the LM head).

    Raises:
        KeyError: a required config field is missing (also `num_hidden_layers`, `vocab_size`).
    """
    layers, h, v = config["num_hidden_layers"], config["hidden_size"], config["vocab_size"]
    linear = layers * sum(a * b for a, b in projection_shapes(config).values())
    embeddings = v * h * (1 if config.get("tie_word_embeddings", True) else 2)
    return linear, layers * 2 * h + h + embeddings
