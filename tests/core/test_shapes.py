"""`lcsb_core.models.shapes`: the one parameter count from a config.json, checked against the tiny
Llama built in the test (torch's own count) and against SmolLM2-135M's published count."""

from __future__ import annotations

from lcsb_core.models.shapes import parameter_count, projection_shapes
from tests.core.tiny import tiny_base

SMOLLM2 = {"hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
           "num_key_value_heads": 3, "vocab_size": 49152, "tie_word_embeddings": True}


def test_smollm2_count_and_shapes():
    linear, other = parameter_count(SMOLLM2)
    assert linear + other == 134_515_008
    assert projection_shapes(SMOLLM2)["k_proj"] == (576, 192) and projection_shapes(SMOLLM2)["down_proj"] == (1536, 576)


def test_count_matches_torch_on_a_tiny_model():
    model = tiny_base()
    config = model.config.to_dict()
    assert sum(parameter_count(config)) == sum(p.numel() for p in model.parameters())
