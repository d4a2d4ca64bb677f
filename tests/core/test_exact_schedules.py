"""The exact-gradient schedules (`top`, `topfull`, `tail`) on a tiny 6-layer Llama: every trained layer
gets exactly full backprop's gradient, and no backward runs below the lowest trained layer."""

import pytest
import torch

from lcsb_core.training.config import OptimSettings
from lcsb_core.training.loss import lm_loss_sums
from lcsb_core.training.optim import build_optimizer
from lcsb_core.training.schedules import make_schedule
from lcsb_core.training.selective import LayerMode, SelectiveBackprop
from lcsb_core.training.step import run_step
from tests.core.tiny import batch, tiny_lora

L = 6


def setup(schedule_name: str, **kw):
    """Model, SelectiveBackprop in the schedule's own skip mode, optimizer, schedule."""
    sched = make_schedule(schedule_name, num_layers=L, **kw)
    model = tiny_lora(0, num_layers=L)
    sel = SelectiveBackprop(model, skip_mode=LayerMode.SKIP if sched.identity_skip else LayerMode.FROZEN)
    params = [p for i in range(L) for p in sel.params_by_layer[i]]
    return model, sel, build_optimizer(params, OptimSettings(learning_rate=1e-2)), sched


def step_grads(schedule_name: str, step: int, **kw) -> dict[int, list[torch.Tensor]]:
    """LoRA gradients per layer after one `run_step` of `schedule_name` at `step` (no clipping)."""
    model, sel, opt, sched = setup(schedule_name, **kw)
    run_step(model, sel, opt, [batch(0), batch(1)], sched.layers_for_step(step), step=step,
             momentum_for_skipped=True, max_grad_norm=0)
    return {i: [p.grad.clone() for p in ps] for i, ps in sel.params_by_layer.items()}


FULL = step_grads("full", 0)


def assert_exact(grads: dict[int, list[torch.Tensor]], layers) -> None:
    for i in layers:
        for g, ref in zip(grads[i], FULL[i], strict=True):
            torch.testing.assert_close(g, ref, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("k", [1, 2, 4])
def test_top_gradients_equal_full_backprop_for_its_layers(k):
    grads = step_grads("top", 3, k=k)
    top = range(L - k, L)
    assert_exact(grads, top)
    assert all(torch.count_nonzero(g) == 0 for i in range(L - k) for g in grads[i])  # untrained: zero


def test_topfull_full_step_equals_a_full_step_and_other_steps_are_top():
    assert_exact(step_grads("topfull", 2, k=2, full_every=3), range(L))  # 1-based step 3: full
    grads = step_grads("topfull", 0, k=2, full_every=3)
    assert_exact(grads, range(4, 6))
    assert all(torch.count_nonzero(g) == 0 for i in range(4) for g in grads[i])


@pytest.mark.parametrize("step", [0, 1, 2])
def test_tail_trained_layers_get_exact_gradients(step):
    sched = make_schedule("tail", num_layers=L, k=2)
    trained = sched.layers_for_step(step)
    assert trained == frozenset(range(L - 2 * (step + 1), L))
    assert_exact(step_grads("tail", step, k=2), trained)


def test_cyclic_surrogate_gradient_differs_from_exact_below_a_skipped_layer():
    """The control: the paper's identity skip does *not* give the block under skipped layers its
    true gradient, which is what the exact schedules fix."""
    grads = step_grads("cyclic", 0, k=2)  # layers 0-1 trained, 2-5 identity-skipped
    assert not torch.allclose(grads[0][0], FULL[0][0], rtol=1e-3, atol=1e-6)


def count_backward_calls(model, sel, selected) -> dict[int, int]:
    calls = {i: 0 for i in range(L)}
    handles = [mod.register_full_backward_hook(lambda m, gi, go, i=i: calls.__setitem__(i, calls[i] + 1))
               for i, layer in enumerate(sel.layers) for mod in (layer.self_attn, layer.mlp)]
    sel.select(selected)
    lm_loss_sums(model, batch(0)).loss_sum.backward()
    for h in handles:
        h.remove()
    return calls


@pytest.mark.parametrize("name,step,kw", [("top", 0, {"k": 2}), ("topfull", 0, {"k": 2, "full_every": 2}),
                                          ("topfull", 1, {"k": 2, "full_every": 2}), ("tail", 1, {"k": 2}),
                                          ("freeze", 1, {"k": 2})])
def test_no_backward_below_the_lowest_trained_layer(name, step, kw):
    model, sel, _, sched = setup(name, **kw)
    selected = sched.layers_for_step(step)
    calls = count_backward_calls(model, sel, selected)
    assert {i for i, n in calls.items() if n} == set(sched.backprop_layers(step)) == set(range(min(selected), L))
    assert all(calls[i] == 2 for i in sched.backprop_layers(step))  # attention and MLP, once each
