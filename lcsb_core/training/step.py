"""One optimizer step of selective backprop: select layers, forward/backward each micro-batch with the
loss averaged over the target tokens of the whole accumulation window, check for divergence, clip,
give skipped LoRA parameters zero (or no) gradients, AdamW step.

With a depth split (`split` schedule, `deep_fraction` set) the window's first rows (`deep_rows`, defined in
`lcsb_core.training.schedules`) are back-propagated through every selected layer and the others through the
`shallow` layers only, as two passes one after the other, each a forward and backward per micro-batch
(`lcsb_core.training.memory.DepthSplit` sizes them); the layers below the shallow ones then hold the gradient of
the deep rows alone, rescaled to the mean over the deep rows' target tokens (`split_rows`, `_rescale`).

`run_step` is the function the trainer loop calls and the tests check against plain PEFT LoRA.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

import torch

from lcsb_core.errors import DivergenceError
from lcsb_core.models.modules import autocast_for
from lcsb_core.training.history import l2_norm
from lcsb_core.training.loss import IGNORE_INDEX, lm_loss_sums
from lcsb_core.training.optim import prepare_skipped_grads
from lcsb_core.training.schedules import deep_rows
from lcsb_core.training.selective import SelectiveBackprop, recompute_below_top

if TYPE_CHECKING:
    from lcsb_core.training.dpo import DPOObjective


@dataclass
class StepStats:
    """Result of one step: mean `loss` over `target_tokens` (nats), global LoRA `grad_norm` before
    clipping, per-layer LoRA gradient L2 norms of the selected layers, `tokens` (non-padding inputs)."""

    loss: float
    grad_norm: float
    layer_grad_norms: dict[int, float]
    tokens: int
    target_tokens: int
    rewards: dict[str, float] = field(default_factory=dict)


def count_targets(batch: dict[str, torch.Tensor]) -> int:
    """Target tokens in a batch: labels [B, T] != -100 after the one-position shift."""
    return int((batch["labels"][:, 1:] != IGNORE_INDEX).sum())


def count_tokens(batch: dict[str, torch.Tensor]) -> int:
    """Non-padding input tokens of a batch (all tokens when there is no 2-D attention mask)."""
    mask = batch.get("attention_mask")
    if mask is not None and mask.dim() == 2:
        return int(mask.sum())
    return int(batch["input_ids"].numel())


def split_rows(micro_batches: list[dict[str, torch.Tensor]], deep: int) -> tuple[list[dict], list[dict]]:
    """The window's first `deep` rows (in micro-batch order) and the rest, as two lists of batches; every
    tensor of a batch is sliced on its first (row) dimension. Empty parts are left out."""
    deep_part, shallow_part = [], []
    for batch in micro_batches:
        rows = batch["input_ids"].shape[0]
        take = min(deep, rows)
        if take:
            deep_part.append({k: v[:take] for k, v in batch.items()})
        if take < rows:
            shallow_part.append({k: v[take:] for k, v in batch.items()})
        deep -= take
    return deep_part, shallow_part


def run_step(model: torch.nn.Module, selective: SelectiveBackprop, optimizer: torch.optim.Optimizer,
             micro_batches: list[dict[str, torch.Tensor]], selected: frozenset[int], *, step: int,
             momentum_for_skipped: bool, max_grad_norm: float, deep_fraction: float | None = None,
             shallow: frozenset[int] | None = None, loss_chunk_bytes: int = 0,
             recompute_top: int | None = None, objective: DPOObjective | None = None) -> StepStats:
    """Train one optimizer step on `micro_batches` with `selected` decoder layers back-propagated; with
    `deep_fraction` (a depth split), only `deep_rows` of the window's rows back-propagate through all of
    `selected`, the others through `shallow` (a subset of `selected`), and the gradients of the layers
    in `selected` but not in `shallow` are rescaled to the deep rows' mean. `loss_chunk_bytes`: the
    LM head's chunk size for `lm_loss_sums` (bytes of fp32 logits; 0: no chunks). `recompute_top`: with
    `LCSBSettings.recompute_deep`, the schedule's k: the layers of `selected` below its top k recompute
    their activations in backward this step (`recompute_below_top`; none when it trains at most k); the
    gradients are the same, the step keeps less autograd state and runs their forward twice. None: off.
    `objective`: None trains the language-model loss (a mean over the window's target tokens); a
    `lcsb_core.training.dpo.DPOObjective` trains DPO (a mean over the window's preference pairs, each micro-batch
    [2P] rows in the pair layout; a depth split cuts the window by whole pairs), and its step rewards are
    in `StepStats.rewards`.

    Raises:
        DivergenceError: the loss or the gradient norm is NaN/Inf (the optimizer has not stepped, so
            the parameters are still the last finite ones).
        ValueError: the window has no target token.
    """
    optimizer.zero_grad(set_to_none=True)
    target_tokens = sum(count_targets(b) for b in micro_batches)
    if target_tokens == 0:
        raise ValueError(f"step {step + 1}: no target token in the batch (every label is -100)")
    count = count_targets if objective is None else objective.count
    total = sum(count(b) for b in micro_batches)  # the loss's denominator: target tokens, or pairs
    passes = [(selected, micro_batches)]
    if deep_fraction is not None and shallow is not None and shallow != selected:
        rows = sum(b["input_ids"].shape[0] for b in micro_batches)
        deep = deep_rows(rows, deep_fraction) if objective is None else 2 * deep_rows(rows // 2, deep_fraction)
        deep_part, shallow_part = split_rows(micro_batches, deep)
        passes = [(selected, deep_part), (shallow, shallow_part)]
    loss_total = 0.0
    if objective is not None:
        objective.reset()
    selective.recompute = frozenset() if recompute_top is None else recompute_below_top(selected, recompute_top)
    try:
        for layers, batches in passes:
            selective.select(layers)
            loss_total += _forward_backward(model, batches, total, step, loss_chunk_bytes, objective)
    finally:
        selective.recompute = frozenset()
    selective.select(selected)
    if len(passes) == 2:
        _rescale(selective, selected - passes[1][0], total, sum(count(b) for b in passes[0][1]))
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
                     target_tokens, {} if objective is None else objective.totals.metrics())


def _forward_backward(model: torch.nn.Module, batches: list[dict[str, torch.Tensor]], total: int,
                      step: int, chunk_bytes: int, objective: DPOObjective | None) -> float:
    """Forward and backward each batch with its loss sum over `total` (target tokens, or pairs for an
    objective); returns the summed loss."""
    loss_total = 0.0
    for batch in batches:
        if objective is None:
            with autocast_for(model):
                loss_sum = lm_loss_sums(model, batch, chunk_bytes=chunk_bytes).loss_sum
        else:
            loss_sum = objective.loss_sum(model, batch, chunk_bytes)
        loss = loss_sum / total
        if not torch.isfinite(loss):
            raise DivergenceError(f"loss became {loss.item()} at step {step + 1}; lower the learning rate "
                                  "or check the data")
        loss.backward()
        loss_total += loss.item()
    return loss_total


def _rescale(selective: SelectiveBackprop, deep_only: frozenset[int], total_targets: int, deep_targets: int) -> None:
    """Turn the deep-only layers' gradients (a sum over the deep rows' targets / `total_targets`) into the
    mean over the deep rows' targets; with no deep target they have none (left as None). For DPO the
    counts are pairs."""
    for i in deep_only:
        for p in selective.params_by_layer[i]:
            if p.grad is None:
                continue
            if deep_targets == 0:
                p.grad = None
            else:
                p.grad.mul_(total_targets / deep_targets)


def _layer_grad_norms(selective: SelectiveBackprop, selected: frozenset[int]) -> dict[int, float]:
    norms = {}
    for i in sorted(selected):
        grads = [p.grad for p in selective.params_by_layer[i] if p.grad is not None]
        norms[i] = l2_norm(grads)
    return norms
