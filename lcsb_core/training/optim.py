"""AdamW over every LoRA parameter from step 0, the learning-rate schedule, and the gradients given
to non-selected layers.

Layers switch every step, so the optimizer must hold all LoRA parameters from the start (one built
from the parameters that require grad at step 0 would never update the others).
`momentum_for_skipped` (DESIGN.md, method point 3): PyTorch's AdamW skips a parameter whose `.grad`
is None but steps one whose grad is a zero tensor (m <- b1 m, v <- b2 v, update m_hat/(sqrt(v_hat)+eps)
plus decoupled weight decay): the paper's "implicit updates" of non-selected layers.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from lcsb_core.training.config import OptimSettings


def layer_lr_scales(update_shares: dict[int, float], num_layers: int, scaling: str) -> dict[int, float]:
    """Per decoder layer, the factor its learning rate is multiplied by, from its update share
    (`Schedule.update_shares`: the share of a cycle's step-examples that back-propagate into it):
    `none` gives 1.0 to every layer; `frequency` 1 / share, so a layer trained once every N steps takes N
    times the step size when it trains and, with `momentum_for_skipped` off (no update in between), moves
    per cycle about what an every-step layer moves under Adam's normalised updates; `sqrt` 1 / sqrt(share),
    the 1/sqrt(N) slowdown of a layer whose Adam moments decay through N - 1 zero-gradient steps
    (`momentum_for_skipped`), or whose gradient comes from a share f of the batch (`split`: noise up by
    1/sqrt(f), Adam's normalised step down by about as much) (issue 30). A layer with share 1 gets exactly
    1.0; a layer no step trains gets 1.0 (it has no update).

    Raises:
        ValueError: an unknown `scaling`.
    """
    if scaling == "none":
        return dict.fromkeys(range(num_layers), 1.0)
    if scaling not in ("frequency", "sqrt"):
        raise ValueError(f"unknown layer_lr_scaling {scaling!r}")
    power = 1.0 if scaling == "frequency" else 0.5
    return {i: (1.0 / update_shares[i]) ** power if i in update_shares else 1.0 for i in range(num_layers)}


def build_optimizer(params: list[nn.Parameter], settings: OptimSettings,
                    param_scales: list[float] | None = None) -> torch.optim.AdamW:
    """AdamW over `params` (all LoRA parameters), decoupled weight decay. `param_scales` (parallel to
    `params`; None: all 1.0) are learning-rate factors (`layer_lr_scales`): one parameter group per
    distinct factor, holding it as `lr_scale` for `set_lr`; with every factor 1.0 that is a single group,
    the plain optimizer.

    Raises:
        ValueError: `param_scales` is not as long as `params`, or `settings.learning_rate` is None (not
            resolved: `TrainConfig` fills in the rule's value for the run's schedule).
    """
    if settings.learning_rate is None:
        raise ValueError("settings.learning_rate is None: resolve it first (TrainConfig applies "
                         "lcsb_core.training.learning_rate.default_learning_rate)")
    if param_scales is None:
        param_scales = [1.0] * len(params)
    if len(param_scales) != len(params):
        raise ValueError(f"param_scales has {len(param_scales)} entries for {len(params)} parameters")
    groups: dict[float, list[nn.Parameter]] = {}
    for p, scale in zip(params, param_scales, strict=True):
        groups.setdefault(scale, []).append(p)
    param_groups = [{"params": ps, "lr_scale": scale} for scale, ps in groups.items()]
    return torch.optim.AdamW(param_groups, lr=settings.learning_rate, betas=settings.betas, eps=settings.eps,
                             weight_decay=settings.weight_decay)


def lr_multiplier(step: int, *, total_steps: int, warmup_steps: int, schedule: str) -> float:
    """Multiplier of the peak learning rate at optimizer step `step` (0-based): linear warmup over
    `warmup_steps` (step 0 already gets 1/warmup), then `linear` decay to 0 at `total_steps`, `cosine`
    decay to 0, or `constant`."""
    if warmup_steps and step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    span = max(1, total_steps - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / span)
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    return 1.0 - progress


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set each parameter group's learning rate to `lr` times its `lr_scale` (1.0 when absent; a factor
    of exactly 1.0 leaves `lr` bit-identical)."""
    for group in optimizer.param_groups:
        scale = group.get("lr_scale", 1.0)
        group["lr"] = lr if scale == 1.0 else lr * scale


def prepare_skipped_grads(skipped: list[nn.Parameter], momentum_for_skipped: bool) -> None:
    """Before `optimizer.step()`: zero gradients (moved by momentum and weight decay) or None (not
    touched at all) for the LoRA parameters of non-selected layers."""
    for p in skipped:
        if momentum_for_skipped:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            else:
                p.grad.zero_()
        else:
            p.grad = None
