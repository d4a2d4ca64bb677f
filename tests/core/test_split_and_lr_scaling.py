"""Issue 30's two ways to keep the lower layers learning: the `split` schedule (a depth split over the
step's examples) and `layer_lr_scaling: frequency` (a layer's learning rate over its share of steps), on a
tiny 6-layer Llama, against plain backprop of the same examples."""

import pytest
import torch

from lcsb_core.errors import ConfigError
from lcsb_core.training.config import OptimSettings, TrainConfig
from lcsb_core.training.optim import build_optimizer, layer_lr_scales, set_lr
from lcsb_core.training.schedules import LCSBSettings, make_schedule
from lcsb_core.training.selective import LayerMode, SelectiveBackprop
from lcsb_core.training.step import deep_rows, run_step, split_rows
from tests.core.tiny import batch, tiny_lora

L, K = 6, 2


def grads_after(micro, *, schedule="full", **kw) -> dict[int, list[torch.Tensor]]:
    """LoRA gradients per layer after one unclipped `run_step` of `schedule` on `micro` (fresh tiny model,
    same seed every call)."""
    sched = make_schedule(schedule, num_layers=L, **kw)
    model = tiny_lora(0, num_layers=L)
    sel = SelectiveBackprop(model, skip_mode=LayerMode.FROZEN)
    opt = build_optimizer([p for i in range(L) for p in sel.params_by_layer[i]], OptimSettings(learning_rate=1e-2))
    run_step(model, sel, opt, micro, sched.layers_for_step(0), step=0, momentum_for_skipped=True, max_grad_norm=0,
             deep_fraction=sched.deep_fraction, shallow=sched.shallow_layers(0))
    return {i: [p.grad.clone() for p in ps] for i, ps in sel.params_by_layer.items()}


def close(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("fraction,deep", [(0.25, 1), (0.5, 2)])
def test_split_gradients_are_plain_backprop_of_the_whole_batch_on_top_and_of_the_deep_rows_below(fraction, deep):
    window = [batch(0, bsz=2), batch(1, bsz=2)]  # 4 rows in two micro-batches
    split = grads_after(window, schedule="split", k=K, deep_fraction=fraction)
    whole = grads_after(window)
    deep_part, _ = split_rows(window, deep)
    deep_only = grads_after(deep_part)
    for i in range(L - K, L):  # the top k: the exact gradient of all four rows
        close(split[i], whole[i])
    for i in range(L - K):  # below: the exact mean gradient of the deep rows alone
        close(split[i], deep_only[i])
        assert not all(torch.allclose(g, w) for g, w in zip(split[i], whole[i], strict=True))


def test_split_rows_takes_the_first_rows_across_micro_batches():
    window = [batch(0, bsz=2), batch(1, bsz=2)]
    deep, shallow = split_rows(window, 3)
    assert [b["input_ids"].shape[0] for b in deep] == [2, 1]
    assert [b["input_ids"].shape[0] for b in shallow] == [1]
    assert torch.equal(shallow[0]["labels"], window[1]["labels"][1:])
    assert [deep_rows(r, 0.25) for r in (1, 2, 4, 8, 16)] == [1, 1, 1, 2, 4]
    assert deep_rows(4, 0.9) == 3  # at least one row stays shallow


def test_split_describes_itself_and_its_facts():
    sched = make_schedule("split", num_layers=30, k=8)
    assert sched.deep_fraction == 0.25 and sched.layers_for_step(5) == frozenset(range(30))
    assert sched.shallow_layers(5) == frozenset(range(22, 30))
    assert sched.update_shares() == {**dict.fromkeys(range(22), 0.25), **dict.fromkeys(range(22, 30), 1.0)}
    sqrt = layer_lr_scales(sched.update_shares(), 30, "sqrt")  # the deep examples' noise: 1/sqrt(1/4) = 2x
    assert (sqrt[0], sqrt[21], sqrt[22], sqrt[29]) == (2.0, 2.0, 1.0, 1.0)
    assert "25% of each step's examples" in sched.describe()


def test_split_settings_are_checked_by_name():
    with pytest.raises(ConfigError, match=r"lcsb\.deep_fraction.*no effect.*topfull"):
        LCSBSettings(schedule="topfull", deep_fraction=0.5)
    with pytest.raises(ConfigError, match=r"lcsb\.deep_fraction.*\(0, 1\)"):
        LCSBSettings(schedule="split", deep_fraction=1.0)
    with pytest.raises(ConfigError, match=r"batch_size.*split"):
        TrainConfig.from_dict({"data": {"train_file": "x.jsonl"}, "lcsb": {"schedule": "split"}, "batch_size": 1})
    TrainConfig.from_dict({"data": {"train_file": "x.jsonl"}, "lcsb": {"schedule": "split"}, "batch_size": 1,
                           "gradient_accumulation_steps": 2})


def test_frequency_scales_are_one_over_each_layers_share_of_steps():
    topfull = make_schedule("topfull", num_layers=30, k=8, full_every=4)
    scales = layer_lr_scales(topfull.update_shares(), 30, "frequency")
    assert scales == {**dict.fromkeys(range(22), 4.0), **dict.fromkeys(range(22, 30), 1.0)}
    tail = make_schedule("tail", num_layers=30, k=8)  # cut moves 8 a step: 4 steps a cycle
    tail_scales = layer_lr_scales(tail.update_shares(), 30, "frequency")
    assert [tail_scales[i] for i in (29, 20, 10, 0)] == [1.0, 4 / 3, 2.0, 4.0]
    assert layer_lr_scales(topfull.update_shares(), 30, "none") == dict.fromkeys(range(30), 1.0)
    top = make_schedule("top", num_layers=30, k=8)  # never-trained layers: 1.0 (nothing to scale)
    assert layer_lr_scales(top.update_shares(), 30, "frequency")[0] == 1.0


@pytest.mark.parametrize("schedule", ["full", "importance"])
@pytest.mark.parametrize("scaling", ["frequency", "sqrt"])
def test_scaling_that_cannot_take_effect_is_refused(schedule, scaling):
    with pytest.raises(ConfigError, match=rf"lcsb\.layer_lr_scaling.*{scaling} has no effect"):
        LCSBSettings(schedule=schedule, layer_lr_scaling=scaling)
    with pytest.raises(ConfigError, match=r"lcsb\.layer_lr_scaling.*must be one of none, frequency, sqrt"):
        LCSBSettings(schedule="topfull", layer_lr_scaling="linear")


def test_sqrt_scaling_of_topfull_is_two_for_the_layers_trained_every_fourth_step():
    topfull = make_schedule("topfull", num_layers=30, k=8, full_every=4)
    scales = layer_lr_scales(topfull.update_shares(), 30, "sqrt")
    assert scales == {**dict.fromkeys(range(22), 2.0), **dict.fromkeys(range(22, 30), 1.0)}


def test_scaled_groups_leave_an_every_step_layer_bit_identical_and_scale_the_others():
    """Two steps with lr_scale groups: a layer with factor 1.0 ends bit-identical to the plain optimizer's;
    a layer with factor 4.0 moves as AdamW does at 4x the learning rate."""
    def train(scales: list[float] | None, lr: float) -> list[torch.Tensor]:
        torch.manual_seed(0)
        params = [torch.nn.Parameter(torch.randn(5, 3)) for _ in range(2)]
        opt = build_optimizer(params, OptimSettings(learning_rate=lr), scales)
        for step in range(2):
            set_lr(opt, lr)
            for p in params:
                p.grad = torch.full_like(p, 0.1 * (step + 1)) + p.detach() * 0.01
            opt.step()
        return [p.detach().clone() for p in params]

    plain, scaled, fourfold = train(None, 1e-3), train([1.0, 4.0], 1e-3), train(None, 4e-3)
    assert torch.equal(scaled[0], plain[0])
    torch.testing.assert_close(scaled[1], fourfold[1])
    assert not torch.allclose(scaled[1], plain[1])
