"""One optimizer step of selective backprop: select layers, forward/backward each micro-batch with the
loss averaged over the target tokens of the whole accumulation window, check for divergence, clip,
give skipped LoRA parameters zero (or no) gradients, AdamW step.

`run_step` is the function the trainer loop calls and the tests check against plain PEFT LoRA.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import torch

from lcsb_core.errors import DivergenceError
from lcsb_core.history import l2_norm
from lcsb_core.loss import IGNORE_INDEX, autocast_for, lm_loss_sums
from lcsb_core.optim import prepare_skipped_grads
from lcsb_core.selective import SelectiveBackprop


@dataclass
class StepStats:
    """Result of one step: mean `loss` over `target_tokens` (nats), global LoRA `grad_norm` before
    clipping, per-layer LoRA gradient L2 norms of the selected layers, `tokens` (non-padding inputs)."""

    loss: float
    grad_norm: float
    layer_grad_norms: dict[int, float]
    tokens: int
    target_tokens: int


def count_targets(batch: dict[str, torch.Tensor]) -> int:
    """Target tokens in a batch: labels [B, T] != -100 after the one-position shift."""
    return int((batch["labels"][:, 1:] != IGNORE_INDEX).sum())


def count_tokens(batch: dict[str, torch.Tensor]) -> int:
    """Non-padding input tokens of a batch (all tokens when there is no 2-D attention mask)."""
    mask = batch.get("attention_mask")
    if mask is not None and mask.dim() == 2:
        return int(mask.sum())
    return int(batch["input_ids"].numel())


def run_step(model: torch.nn.Module, selective: SelectiveBackprop, optimizer: torch.optim.Optimizer,
             micro_batches: list[dict[str, torch.Tensor]], selected: frozenset[int], *, step: int,
             momentum_for_skipped: bool, max_grad_norm: float) -> StepStats:
    """Train one optimizer step on `micro_batches` with `selected` decoder layers back-propagated.

    Raises:
        DivergenceError: the loss or the gradient norm is NaN/Inf (the optimizer has not stepped, so
            the parameters are still the last finite ones).
        ValueError: the window has no target token.
    """
    selective.select(selected)
    optimizer.zero_grad(set_to_none=True)
    total_targets = sum(count_targets(b) for b in micro_batches)
    if total_targets == 0:
        raise ValueError(f"step {step + 1}: no target token in the batch (every label is -100)")
    loss_total = 0.0
    for batch in micro_batches:
        with autocast_for(model):
            sums = lm_loss_sums(model, batch)
        loss = sums.loss_sum / total_targets
        if not torch.isfinite(loss):
            raise DivergenceError(f"loss became {loss.item()} at step {step + 1}; lower the learning rate "
                                  "or check the data")
        loss.backward()
        loss_total += loss.item()
    trained = [p for i in sorted(selected) for p in selective.params_by_layer[i] if p.grad is not None]
    layer_norms = _layer_grad_norms(selective, selected)
    grad_norm = math.sqrt(sum(v * v for v in layer_norms.values()))
    if not math.isfinite(grad_norm):
        raise DivergenceError(f"gradient norm became {grad_norm} at step {step + 1}; lower the learning "
                              "rate or enable clipping")
    if max_grad_norm > 0 and grad_norm > max_grad_norm:
        torch._foreach_mul_(cast(list[torch.Tensor], [p.grad for p in trained]), max_grad_norm / (grad_norm + 1e-6))
    prepare_skipped_grads(selective.skipped_parameters(), momentum_for_skipped)
    optimizer.step()
    return StepStats(loss_total, grad_norm, layer_norms, sum(count_tokens(b) for b in micro_batches),
                     total_targets)


def _layer_grad_norms(selective: SelectiveBackprop, selected: frozenset[int]) -> dict[int, float]:
    norms = {}
    for i in sorted(selected):
        grads = [p.grad for p in selective.params_by_layer[i] if p.grad is not None]
        norms[i] = l2_norm(grads)
    return norms
