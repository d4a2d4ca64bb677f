"""Per-step selection history: for every optimizer step the selected decoder layers, the LoRA gradient
norm of each selected layer, and the L2 norm of each layer's LoRA update (parameters after minus
before the optimizer step; non-zero for skipped layers only through AdamW momentum/weight decay).

File: `selection_history.jsonl`, one JSON object per step:
`{"step": 0, "selected": [0, 1], "grad_norm": [g0, g1, null, ...], "update_norm": [u0, ...]}`
with one entry per decoder layer (null where the layer was not selected).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn


def l2_norm(tensors: Sequence[torch.Tensor]) -> float:
    """L2 norm of a list of tensors taken together (0.0 for an empty list)."""
    return float(torch.linalg.vector_norm(torch.stack(torch._foreach_norm(list(tensors))))) if tensors else 0.0


class UpdateTracker:
    """Snapshots LoRA parameters before a step and measures each layer's update norm after it.

    The snapshot buffers are allocated once, on the first `snapshot`, and refilled with one
    `_foreach_copy_` per step (no per-step allocation of a parameter copy; the memory estimate counts
    them: `lcsb_core.training.memory`)."""

    def __init__(self, params_by_layer: dict[int, list[nn.Parameter]]):
        self.params_by_layer = params_by_layer
        self._layers = sorted(params_by_layer)
        self._params = [p for i in self._layers for p in params_by_layer[i]]
        self._before: list[torch.Tensor] = []

    def snapshot(self) -> None:
        """Copy every tracked parameter into the snapshot buffers."""
        params = [p.detach() for p in self._params]
        if not self._before:
            self._before = [torch.empty_like(p) for p in params]
        if params:
            torch._foreach_copy_(self._before, params)

    def update_norms(self) -> list[float]:
        """L2 norm of (after - before) per layer, in layer order (0.0 for a layer without parameters)."""
        deltas = torch._foreach_sub([p.detach() for p in self._params], self._before) if self._params else []
        out, start = [], 0
        for i in self._layers:
            n = len(self.params_by_layer[i])
            out.append(l2_norm(deltas[start:start + n]))
            start += n
        return out


def history_row(step: int, num_layers: int, selected: frozenset[int], grad_norms: dict[int, float],
                update_norms: list[float]) -> dict:
    """One history row (see the module docstring)."""
    return {
        "step": step,
        "selected": sorted(selected),
        "grad_norm": [grad_norms.get(i) if i in selected else None for i in range(num_layers)],
        "update_norm": update_norms,
    }


def read_history(path: Path) -> list[dict]:
    """All rows of a `selection_history.jsonl`."""
    with open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]
