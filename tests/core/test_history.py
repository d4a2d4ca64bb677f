"""The selection history's update norms (lcsb_core/training/history.py): exact values, reused buffers."""

from __future__ import annotations

import torch
from torch import nn

from lcsb_core.training.history import UpdateTracker, history_row


def test_update_norms_are_each_layers_l2_norm_of_after_minus_before_and_buffers_are_reused():
    g = torch.Generator().manual_seed(0)
    layers = {0: [nn.Parameter(torch.randn(3, 4, generator=g)), nn.Parameter(torch.randn(4, generator=g))],
              1: [nn.Parameter(torch.randn(2, 2, generator=g))], 2: []}
    tracker = UpdateTracker(layers)
    first: list[int] = []
    for step in range(3):
        tracker.snapshot()
        buffers = [b.data_ptr() for b in tracker._before]
        deltas = {i: [torch.randn(p.shape, generator=g) * (step + 1) for p in ps] for i, ps in layers.items()}
        with torch.no_grad():
            for i, ps in layers.items():
                for p, d in zip(ps, deltas[i], strict=True):
                    p.add_(d)
        norms = tracker.update_norms()
        expected = [float(torch.cat([d.flatten() for d in deltas[i]]).norm()) if deltas[i] else 0.0 for i in (0, 1, 2)]
        assert norms[2] == 0.0
        assert torch.allclose(torch.tensor(norms), torch.tensor(expected), rtol=1e-5)
        if step:
            assert buffers == first  # the snapshot refills the same buffers every step
        else:
            first = buffers


def test_history_row_has_one_entry_per_layer_with_null_where_unselected():
    row = history_row(3, 4, frozenset({1, 2}), {1: 0.5, 2: 0.25, 3: 9.0}, [0.1, 0.2, 0.3, 0.0])
    assert row == {"step": 3, "selected": [1, 2], "grad_norm": [None, 0.5, 0.25, None],
                   "update_norm": [0.1, 0.2, 0.3, 0.0]}
