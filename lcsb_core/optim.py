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

from lcsb_core.config import OptimSettings


def build_optimizer(params: list[nn.Parameter], settings: OptimSettings) -> torch.optim.AdamW:
    """AdamW over `params` (all LoRA parameters), decoupled weight decay."""
    return torch.optim.AdamW(params, lr=settings.learning_rate, betas=settings.betas, eps=settings.eps,
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
    """Set the learning rate of every parameter group."""
    for group in optimizer.param_groups:
        group["lr"] = lr


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
