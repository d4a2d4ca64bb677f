"""Causal-LM loss summed over target tokens, computing the LM head only where a label exists.

The LM head of a small model is a large share of its compute (SmolLM2-135M: 49,152 x 576, about 21 %
of the FLOPs of a forward), and only target positions need logits; slicing the hidden states to those
positions before the head saves that work for prompt tokens and padding, in forward and backward.
Sums (not means) are returned so the trainer can divide by the target-token count of the whole
gradient-accumulation window (the loss is a mean over target tokens, not a mean of micro-batch means).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from lcsb_core.lora import causal_lm

IGNORE_INDEX = -100


@dataclass
class LossSums:
    """Per-batch sums: `loss_sum` (nats, 0-dim tensor, differentiable), `num_targets` and `num_correct`
    (tokens whose argmax prediction equals the label)."""

    loss_sum: torch.Tensor
    num_targets: int
    num_correct: int


def lm_loss_sums(model: nn.Module, batch: dict[str, torch.Tensor]) -> LossSums:
    """Forward `batch` (input_ids/labels [B, T] long, attention_mask [B, T] or a 4-D mask, optional
    position_ids [B, T]) and return the summed next-token cross-entropy over positions whose label is
    not -100. Labels are unshifted (label t is predicted from position t-1), as in transformers."""
    lm = causal_lm(model)
    kwargs = {k: batch[k] for k in ("attention_mask", "position_ids") if k in batch}
    hidden = lm.get_decoder()(input_ids=batch["input_ids"], use_cache=False, **kwargs).last_hidden_state
    targets = batch["labels"][:, 1:]
    mask = targets != IGNORE_INDEX
    picked = hidden[:, :-1][mask]  # [N, hidden]
    tgt = targets[mask]  # [N]
    logits = lm.get_output_embeddings()(picked).float()  # [N, vocab]
    loss_sum = F.cross_entropy(logits, tgt, reduction="sum")
    num_correct = int((logits.detach().argmax(-1) == tgt).sum())
    return LossSums(loss_sum, int(tgt.numel()), num_correct)
