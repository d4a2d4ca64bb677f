"""The target-only loss equals transformers' own causal-LM loss on a tiny random Gemma-2 (final logit
soft-capping 30) and Gemma-3 (none): no Llama-only assumption in the LM-head shortcut."""

from __future__ import annotations

import pytest
import torch

from lcsb_core.training.loss import lm_loss_sums


@pytest.mark.parametrize("model_type, cap", [("gemma2", 30.0), ("gemma2", 0.5), ("gemma3_text", None)])
def test_target_only_loss_equals_the_models_loss(model_type, cap):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(model_type, vocab_size=128, hidden_size=32, intermediate_size=64,
                                  num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                                  final_logit_softcapping=cap, attn_implementation="eager",
                                  initializer_range=0.5)  # logits of several units: the cap matters
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    ids = torch.randint(0, 128, (2, 12), generator=torch.Generator().manual_seed(0))
    labels = ids.clone()
    labels[:, :5] = -100
    with torch.no_grad():
        sums = lm_loss_sums(model, {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels})
        reference = model(input_ids=ids, labels=labels).loss
    assert sums.num_targets == 2 * (12 - 5)
    assert float(sums.loss_sum) / sums.num_targets == pytest.approx(float(reference), rel=1e-5)
