"""Selective backpropagation over decoder layers (LCSB, arXiv 2602.13073, Sec. 3).

Each decoder layer's `forward` is wrapped (the module tree and state-dict names stay as they are, so
the PEFT adapter saves normally). Per step, `SelectiveBackprop.select(layers)` sets each layer's mode:

- TRAIN: ordinary forward with autograd; LoRA parameters require grad. With gradient checkpointing
  the layer is recomputed in backward via non-reentrant `torch.utils.checkpoint` (reentrant
  checkpointing drops parameter gradients when the layer input does not require grad).
- SKIP (LCSB): the layer runs under `torch.no_grad()` (no stored activations, no backward work, no
  4-bit dequantization in backward) and returns `h_in + stop_gradient(f(h_in) - h_in)`: the forward
  value is f(h_in) and in backward the layer is the identity (its residual path). Computed as
  `f(h_in).detach() + (h_in - h_in.detach())`, which is bit-exactly f(h_in) in any dtype.
- FROZEN (freeze / LISA-style peer): ordinary forward with autograd, LoRA parameters frozen, so the
  gradient passes through the layer exactly.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from lcsb_core.models.modules import decoder_layers
from lcsb_core.training.lora import lora_parameters_by_layer


class LayerMode(enum.Enum):
    """How one decoder layer behaves in the current step."""

    TRAIN = "train"
    SKIP = "skip"
    FROZEN = "frozen"


def passthrough(h_in: torch.Tensor, h_out: torch.Tensor) -> torch.Tensor:
    """`h_in + stop_gradient(h_out - h_in)`, exact in value: returns `h_out`'s values, with gradient
    identity to `h_in`. Shapes [batch, seq, hidden], equal."""
    if not h_in.requires_grad:
        return h_out.detach()
    return h_out.detach() + (h_in - h_in.detach())


def recompute_below_top(selected: frozenset[int], k: int) -> frozenset[int]:
    """The layers of `selected` below its top `k` (the `k` highest indices, nearest the LM head): those a
    step that back-propagates more than `k` layers recomputes with `LCSBSettings.recompute_deep`, so its
    autograd state is `k` layers' activations plus the inputs of the others (`lcsb_core.training.memory`); empty
    when `selected` has at most `k` layers."""
    ordered = sorted(selected)
    return frozenset(ordered[:-k] if 0 < k < len(ordered) else ())


class SelectiveBackprop:
    """Installs per-layer modes on the decoder layers of a PEFT LoRA model.

    Args:
        model: a `peft.PeftModel` around a transformers causal LM.
        skip_mode: LayerMode.SKIP for LCSB schedules, LayerMode.FROZEN for the `freeze` schedule
            (`full` selects every layer, so the mode is unused).
        gradient_checkpointing: recompute TRAIN layers in backward (non-reentrant).

    `recompute` (set per step, e.g. by `run_step`): further TRAIN layers that recompute their activations
    in backward this step, with `gradient_checkpointing` off (`recompute_below_top`).
    """

    def __init__(self, model: nn.Module, *, skip_mode: LayerMode, gradient_checkpointing: bool = False):
        self.layers = decoder_layers(model)
        self.params_by_layer = lora_parameters_by_layer(model)
        self.skip_mode = skip_mode
        self.gradient_checkpointing = gradient_checkpointing
        self.recompute: frozenset[int] = frozenset()
        self.modes = [LayerMode.TRAIN] * len(self.layers)
        self.selected: frozenset[int] = frozenset(range(len(self.layers)))
        for idx, layer in enumerate(self.layers):
            layer.forward = self._wrap(idx, layer.forward)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def select(self, layers: Iterable[int]) -> None:
        """Make `layers` TRAIN and all others `skip_mode`; sets `requires_grad` on LoRA parameters."""
        self.selected = frozenset(layers)
        for idx in range(self.num_layers):
            train = idx in self.selected
            self.modes[idx] = LayerMode.TRAIN if train else self.skip_mode
            for p in self.params_by_layer[idx]:
                p.requires_grad_(train)

    def skipped_parameters(self) -> list[nn.Parameter]:
        """LoRA parameters of the layers not selected this step."""
        return [p for i, ps in self.params_by_layer.items() if i not in self.selected for p in ps]

    def _wrap(self, idx: int, forward):
        def selective_forward(hidden_states, *args, **kwargs):
            mode = self.modes[idx]
            if not torch.is_grad_enabled():  # evaluation: plain forward
                return forward(hidden_states, *args, **kwargs)
            if mode is LayerMode.SKIP:
                with torch.no_grad():
                    out = forward(hidden_states, *args, **kwargs)
                return passthrough(hidden_states, out)
            if mode is LayerMode.TRAIN and (self.gradient_checkpointing or idx in self.recompute):
                return checkpoint(forward, hidden_states, *args, use_reentrant=False, **kwargs)
            return forward(hidden_states, *args, **kwargs)

        return selective_forward
