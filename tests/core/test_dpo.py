"""DPO (lcsb_core.training.dpo) on a tiny Llama: the loss equals a direct computation with the adapter switched off
as the reference, the chunked head gives the same values and gradients, a partial schedule gives the
selected layers full backprop's gradients of the DPO loss, the depth split keeps pairs whole, and a
continued adapter is its own frozen reference."""

import math

import pytest
import torch
import torch.nn.functional as F

from lcsb_core.data.pairs import iter_pair_batches, num_pairs
from lcsb_core.data.tokenization import EncodedExample
from lcsb_core.training.config import OptimSettings
from lcsb_core.training.dpo import (
    AdapterOffReference,
    DPOObjective,
    FrozenAdapterReference,
    PairTotals,
    answer_logps,
    dpo_losses,
)
from lcsb_core.training.optim import build_optimizer
from lcsb_core.training.schedules import make_schedule
from lcsb_core.training.selective import LayerMode, SelectiveBackprop
from lcsb_core.training.step import run_step
from tests.core.tiny import VOCAB, tiny_lora

L = 6
BETA = 0.1


def pair_batch(seed: int = 0, pairs: int = 2, prompt: int = 5, answer: int = 6) -> dict[str, torch.Tensor]:
    """[2 x pairs, T] rows in the pair layout: each pair shares its prompt; the rejected answer is one
    token shorter (right padding), labels -100 on the prompt and the padding."""
    gen = torch.Generator().manual_seed(seed)
    rows, labels, masks = [], [], []
    for _ in range(pairs):
        p = torch.randint(1, VOCAB, (prompt,), generator=gen)
        for length in (answer, answer - 1):
            a = torch.randint(1, VOCAB, (length,), generator=gen)
            pad = answer - length
            ids = torch.cat([p, a, torch.zeros(pad, dtype=torch.long)])
            lab = torch.cat([torch.full((prompt,), -100), a, torch.full((pad,), -100)])
            rows.append(ids)
            labels.append(lab)
            masks.append((torch.arange(prompt + answer) < prompt + length).long())
    return {"input_ids": torch.stack(rows), "attention_mask": torch.stack(masks), "labels": torch.stack(labels)}


def direct_logps(model, batch) -> torch.Tensor:
    """Summed answer log-probabilities [rows] from the model's own logits (transformers' forward)."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()
    logp = torch.log_softmax(logits[:, :-1], -1)
    tgt = batch["labels"][:, 1:]
    mask = tgt != -100
    picked = logp.gather(-1, tgt.clamp(min=0)[..., None])[..., 0]
    return (picked * mask).sum(-1)


def setup(schedule_name: str, **kw):
    sched = make_schedule(schedule_name, num_layers=L, **kw)
    model = tiny_lora(0, num_layers=L)
    sel = SelectiveBackprop(model, skip_mode=LayerMode.SKIP if sched.identity_skip else LayerMode.FROZEN)
    params = [p for i in range(L) for p in sel.params_by_layer[i]]
    return model, sel, build_optimizer(params, OptimSettings(learning_rate=1e-2)), sched, params


def test_loss_equals_direct_computation_with_the_adapter_off_as_reference():
    model = tiny_lora(0, num_layers=L)
    batch = pair_batch(0)
    objective = DPOObjective(BETA, AdapterOffReference())
    loss = objective.loss_sum(model, batch, chunk_bytes=0)
    with torch.no_grad():
        policy = direct_logps(model, batch)
        with model.disable_adapter():
            ref = direct_logps(model, batch)
    ratio = policy - ref
    expected = -F.logsigmoid(BETA * (ratio[0::2] - ratio[1::2]))
    assert abs(ref[0] - policy[0]) > 1e-3  # the adapter is not the identity: the reference differs
    torch.testing.assert_close(loss, expected.sum(), rtol=1e-5, atol=1e-6)
    metrics = objective.totals.metrics()
    assert metrics["rewards/chosen"] == pytest.approx(float(BETA * ratio[0::2].mean()), rel=1e-4)
    assert metrics["rewards/rejected"] == pytest.approx(float(BETA * ratio[1::2].mean()), rel=1e-4)
    assert metrics["rewards/margins"] == pytest.approx(metrics["rewards/chosen"] - metrics["rewards/rejected"])
    wins = float((ratio[0::2] > ratio[1::2]).float().mean())
    assert metrics["rewards/accuracies"] == pytest.approx(wins)


def test_policy_equal_to_reference_gives_log2_and_chance_accuracy():
    losses, chosen, rejected = dpo_losses(torch.tensor([-3.0, -4.0]), torch.tensor([-3.0, -4.0]), BETA)
    assert float(losses[0]) == pytest.approx(math.log(2))
    totals = PairTotals()
    totals.add(losses, chosen, rejected)
    assert totals.metrics()["rewards/accuracies"] == 0.5  # a tie counts one half
    assert totals.mean_loss == pytest.approx(math.log(2))
    with pytest.raises(ValueError, match="pair layout"):
        dpo_losses(torch.zeros(3), torch.zeros(3), BETA)


def test_chunked_head_gives_the_same_log_probs_and_gradients():
    batch = pair_batch(1, pairs=3)
    grads = []
    for chunk_bytes in (0, 4 * VOCAB * 3):  # all positions at once; 3 positions per chunk
        model = tiny_lora(0, num_layers=L)
        logps = answer_logps(model, batch, chunk_bytes=chunk_bytes)
        (logps * torch.arange(1.0, 7.0)).sum().backward()  # a different weight per row
        grads.append([p.grad.clone() for p in model.parameters() if p.requires_grad])
        if chunk_bytes == 0:
            plain = logps.detach()
        else:
            torch.testing.assert_close(logps.detach(), plain, rtol=1e-5, atol=1e-5)
    for a, b in zip(*grads, strict=True):
        # fp32 sums in another order (3 positions a chunk against all at once): an entry far below the
        # tensor's largest differs by a few 1e-6 of it on an AMX Xeon, so the absolute slack scales with it
        scale = float(b.abs().max())
        assert scale > 0
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5 * scale)


def step_grads(schedule_name: str, step: int, **kw) -> tuple[dict[int, list[torch.Tensor]], dict]:
    model, sel, opt, sched, _ = setup(schedule_name, **kw)
    objective = DPOObjective(BETA, AdapterOffReference())
    stats = run_step(model, sel, opt, [pair_batch(0), pair_batch(1)], sched.layers_for_step(step), step=step,
                     momentum_for_skipped=True, max_grad_norm=0, objective=objective,
                     deep_fraction=sched.deep_fraction, shallow=sched.shallow_layers(step))
    return {i: [p.grad.clone() if p.grad is not None else None for p in ps]
            for i, ps in sel.params_by_layer.items()}, stats


FULL, FULL_STATS = step_grads("full", 0)


@pytest.mark.parametrize("name,k", [("top", 2), ("tail", 2), ("topfull", 3)])
def test_partial_schedule_gives_selected_layers_full_backprops_dpo_gradient(name, k):
    model, sel, opt, sched, _ = setup(name, k=k)
    selected = sched.layers_for_step(0)
    assert len(selected) < L  # partial
    grads, stats = step_grads(name, 0, k=k)
    for i in selected:
        for g, ref in zip(grads[i], FULL[i], strict=True):
            torch.testing.assert_close(g, ref, rtol=1e-5, atol=1e-8)
    assert stats.loss == pytest.approx(FULL_STATS.loss, rel=1e-6)  # the same forward value
    assert stats.rewards == pytest.approx(FULL_STATS.rewards)
    assert set(stats.rewards) == {"rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies"}


def test_depth_split_cuts_the_window_by_whole_pairs():
    """split with deep_fraction 0.5 on 2 x 2 pairs: the deep pass holds pairs 0-1, the shallow pass the
    others; the top layers (in both passes) get full backprop's gradient of the mean over all pairs."""
    grads, stats = step_grads("split", 0, k=2, deep_fraction=0.5)
    for i in (L - 2, L - 1):
        for g, ref in zip(grads[i], FULL[i], strict=True):
            torch.testing.assert_close(g, ref, rtol=1e-5, atol=1e-8)
    assert stats.loss == pytest.approx(FULL_STATS.loss, rel=1e-6)
    assert stats.rewards["rewards/accuracies"] == FULL_STATS.rewards["rewards/accuracies"]


def test_frozen_adapter_reference_is_the_starting_adapter_not_the_base():
    model, sel, opt, sched, params = setup("full")
    reference = FrozenAdapterReference.snapshot(params)
    batch = pair_batch(2)
    start = reference(model, batch)
    with torch.no_grad():
        torch.testing.assert_close(start, direct_logps(model, batch), rtol=1e-5, atol=1e-5)
    objective = DPOObjective(BETA, reference)
    for step in range(3):
        run_step(model, sel, opt, [batch], sched.layers_for_step(step), step=step, momentum_for_skipped=True,
                 max_grad_norm=0, objective=objective)
    torch.testing.assert_close(reference(model, batch), start)  # frozen: the same after training
    with torch.no_grad():
        now = direct_logps(model, batch)
    assert (now - start).abs().max() > 1e-3  # the policy moved, and the swap put its weights back
    assert objective.totals.metrics()["rewards/margins"] > 0  # trained towards the chosen answers


def test_pair_batches_keep_pairs_whole_in_a_seeded_order():
    examples = [EncodedExample([1, 2, 3 + i], [-100, 2, 3 + i], line=i // 2 + 1) for i in range(10)]

    class Data:
        pass

    data = Data()
    data.examples = examples
    assert num_pairs(data) == 5
    batches = list(iter_pair_batches(data, 2, seed=3, epoch=0, pad_token_id=0))
    assert [b["input_ids"].shape[0] for b in batches] == [4, 4, 2]
    seen = []
    for b in batches:
        for r in range(0, b["input_ids"].shape[0], 2):
            chosen, rejected = int(b["input_ids"][r, 2]) - 3, int(b["input_ids"][r + 1, 2]) - 3
            assert chosen % 2 == 0 and rejected == chosen + 1  # a pair, chosen first
            seen.append(chosen // 2)
    assert sorted(seen) == [0, 1, 2, 3, 4] and seen != [0, 1, 2, 3, 4]  # every pair once, shuffled
    again = [b["input_ids"] for b in iter_pair_batches(data, 2, seed=3, epoch=0, pad_token_id=0)]
    assert all(torch.equal(a, b["input_ids"]) for a, b in zip(again, batches, strict=True))
    # an evaluation's order: shortest pair first by its longer side, pairs whole
    data.examples = [EncodedExample([1] * n, [-100] + [2] * (n - 1), line=i // 2 + 1)
                     for i, n in enumerate([6, 3, 2, 2, 4, 5])]
    ordered = list(iter_pair_batches(data, 2, seed=3, epoch=0, pad_token_id=0, shuffle=False, by_length=True))
    assert [b["attention_mask"].sum(1).tolist() for b in ordered] == [[2, 2, 4, 5], [6, 3]]
    data.examples = examples[:3]
    with pytest.raises(ValueError, match="two examples per pair"):
        num_pairs(data)


class TwoForwards:
    """A reference that never claims to match the policy: `DPOObjective.evaluate` runs both forwards."""

    def __init__(self, inner: AdapterOffReference):
        self.inner = inner

    def matches(self, model) -> bool:
        return False

    def __call__(self, model, batch, chunk_bytes=0):
        return self.inner(model, batch, chunk_bytes)


def counted_evaluate(objective: DPOObjective, model, batches) -> tuple[PairTotals, int]:
    """`objective.evaluate` and the number of model forwards it ran (calls of the input embedding)."""
    calls = []
    hook = model.get_input_embeddings().register_forward_hook(lambda *_: calls.append(1))
    try:
        return objective.evaluate(model, batches), len(calls)
    finally:
        hook.remove()


@pytest.mark.parametrize("start", ["fresh adapter", "continued adapter"])
def test_evaluation_where_the_policy_is_its_reference_skips_the_reference_forward(start):
    """At a run's step 0 the policy is its reference (a fresh adapter is the identity; a continued run's
    reference is its starting adapter): `reference.matches`, and the evaluation gives the two-forward
    numbers (log 2, rewards 0, the same token accuracy) with one forward per batch."""
    from lcsb_core.training.config import LoraSettings
    from lcsb_core.training.lora import apply_lora
    from tests.core.tiny import tiny_base

    if start == "fresh adapter":
        model = apply_lora(tiny_base(0, L), LoraSettings(rank=4, alpha=8), seed=0)
        reference: AdapterOffReference = AdapterOffReference()
    else:
        model = tiny_lora(0, num_layers=L)
        reference = FrozenAdapterReference.snapshot([p for p in model.parameters() if p.requires_grad])
    assert reference.matches(model)
    batches = [pair_batch(3), pair_batch(4, pairs=3)]
    both, forwards_both = counted_evaluate(DPOObjective(BETA, TwoForwards(reference)), model, batches)
    one, forwards_one = counted_evaluate(DPOObjective(BETA, reference), model, batches)
    assert (forwards_both, forwards_one) == (4, 2)
    assert one.mean_loss == pytest.approx(math.log(2)) and both.mean_loss == pytest.approx(math.log(2), abs=1e-6)
    assert one.metrics() == pytest.approx(both.metrics(), abs=1e-6)
    assert one.metrics()["rewards/accuracies"] == 0.5
    assert (one.chosen_tokens, one.chosen_hits) == (both.chosen_tokens, both.chosen_hits)
    assert model.training  # back in train mode


@pytest.mark.parametrize("reference_kind", ["adapter off", "frozen start"])
def test_evaluation_where_the_policy_differs_runs_the_reference(reference_kind):
    """An adapter that is not the identity against the adapter-off reference, or one trained away from its
    frozen start: no match, both forwards, and the loss is not log 2."""
    model, sel, opt, sched, params = setup("full")  # tiny_lora: every LoRA B away from zero
    if reference_kind == "adapter off":
        reference: AdapterOffReference = AdapterOffReference()
    else:
        reference = FrozenAdapterReference.snapshot(params)
        with torch.no_grad():
            params[-1].add_(0.1)
    assert not reference.matches(model)
    totals, forwards = counted_evaluate(DPOObjective(BETA, reference), model, [pair_batch(3), pair_batch(4)])
    assert forwards == 4
    assert abs(totals.mean_loss - math.log(2)) > 1e-4
