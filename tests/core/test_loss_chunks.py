"""The chunked LM-head loss (`lm_loss_sums(..., chunk_bytes=...)`, `HeadLossSum`): the same loss, gradients and
accuracy as the head over all target positions at once, with at most one chunk's [positions, vocab] logits
recorded for backward at a time."""

from __future__ import annotations

import pytest
import torch
from torch.autograd.graph import saved_tensors_hooks

from lcsb_core.training import loss as loss_module
from lcsb_core.training.loss import lm_loss_sums
from tests.core.tiny import VOCAB, tiny_lora

BATCH, SEQ, PROMPT = 3, 20, 6
TARGETS = BATCH * (SEQ - PROMPT)  # 42 target positions
HIDDEN = 32  # tiny_base's hidden size


def _batch() -> dict[str, torch.Tensor]:
    ids = torch.randint(1, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(3))
    labels = ids.clone()
    labels[:, :PROMPT] = -100
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}


def _loss_and_grads(chunk_bytes: int) -> tuple[float, list[torch.Tensor], int]:
    """Loss sum, every LoRA gradient, and the most positions of [positions, vocab] logits (or their softmax)
    that autograd saved for backward in one tensor."""
    model = tiny_lora(seed=0)
    largest = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal largest
        if t.ndim == 2 and t.shape[-1] == VOCAB and t.shape[0] != HIDDEN:  # not the LM head's [32, 128] weight
            largest = max(largest, t.shape[0])
        return t

    with saved_tensors_hooks(pack, lambda t: t):
        sums = lm_loss_sums(model, _batch(), chunk_bytes=chunk_bytes)
    assert sums.num_targets == TARGETS
    sums.loss_sum.backward()
    grads = [p.grad.clone() for p in model.parameters() if p.requires_grad]
    assert grads and all(g is not None for g in grads)
    return float(sums.loss_sum), grads, largest


def test_chunks_give_the_whole_loss_and_gradients_without_saving_the_logits():
    whole_loss, whole_grads, whole_saved = _loss_and_grads(0)
    chunk_loss, chunk_grads, chunk_saved = _loss_and_grads(5 * VOCAB * 4)  # 5 positions a chunk: 9
    assert chunk_loss == pytest.approx(whole_loss, rel=1e-6)
    for a, b in zip(whole_grads, chunk_grads, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)  # float summation order only
    assert whole_saved == TARGETS  # the unchunked head keeps all [42, 128] logits' softmax for backward
    assert chunk_saved == 5  # one chunk's softmax at a time, freed once the chunk's gradient is taken


def test_chunked_evaluation_counts_the_same_hits():
    model = tiny_lora(seed=0)
    results = []
    for chunk_bytes in (0, 4 * VOCAB * 4):
        with torch.no_grad():
            sums = lm_loss_sums(model, _batch(), with_accuracy=True, chunk_bytes=chunk_bytes)
        results.append((float(sums.loss_sum), sums.num_targets, sums.num_correct))
    assert results[0][1:] == results[1][1:]
    assert results[1][0] == pytest.approx(results[0][0], rel=1e-6)


def test_a_batch_without_targets_gives_a_zero_loss_that_backward_accepts():
    model = tiny_lora(seed=0)
    batch = _batch()
    batch["labels"][:] = -100
    sums = lm_loss_sums(model, batch)
    assert (sums.num_targets, float(sums.loss_sum)) == (0, 0.0)
    sums.loss_sum.backward()
    assert all(float(p.grad.abs().sum()) == 0.0 for p in model.parameters() if p.requires_grad)


def test_a_negative_chunk_size_is_refused_naming_the_parameter():
    with pytest.raises(ValueError, match="chunk_bytes"):
        lm_loss_sums(tiny_lora(seed=0), _batch(), chunk_bytes=-1)


def _head_case(peaked: bool) -> tuple[torch.nn.Linear, torch.Tensor, torch.Tensor]:
    """A frozen [128, 32] head, 12 hidden states and targets among the first 64 tokens. `peaked`: the
    hidden states share a direction u and the upper 64 rows of the head point away from it (their
    logits about 15 lower), so the upper blocks' probabilities are ~1e-7; else a flat softmax."""
    gen = torch.Generator().manual_seed(5)
    head = torch.nn.Linear(HIDDEN, VOCAB, bias=False).requires_grad_(False)
    u = torch.nn.functional.normalize(torch.randn(HIDDEN, generator=gen), dim=0)
    head.weight.copy_(torch.randn(VOCAB, HIDDEN, generator=gen) * (0.3 if peaked else 0.01))
    hidden = torch.randn(12, HIDDEN, generator=gen) * (0.3 if peaked else 0.1)
    if peaked:
        head.weight[VOCAB // 2:] -= 3 * u
        hidden += 5 * u
    return head, hidden, torch.randint(0, VOCAB // 2, (12,), generator=gen)


def _exact(head, hidden, tgt) -> tuple[torch.Tensor, torch.Tensor]:
    h = hidden.clone().requires_grad_(True)
    loss = torch.nn.functional.cross_entropy(head(h), tgt, reduction="sum")
    return loss.detach(), torch.autograd.grad(loss, h)[0]


def test_filtered_chunk_skips_small_blocks_within_its_bound(monkeypatch):
    """Blocks whose |softmax - onehot| is below the threshold at every position are skipped, the loss is
    unchanged, and each position's gradient error is at most threshold x the skipped rows' norms."""
    monkeypatch.setattr(loss_module, "VOCAB_BLOCK", 8)  # 16 blocks of the tiny 128-token vocabulary
    head, hidden, tgt = _head_case(peaked=True)
    threshold = 2.0 ** -10
    exact_loss, exact_grad = _exact(head, hidden, tgt)
    loss, grad, skipped = loss_module.filtered_chunk(hidden, tgt, head, None, threshold)
    g = torch.softmax(head(hidden), -1)
    g[torch.arange(12), tgt] -= 1
    small = g.abs().view(12, -1, 8).amax(dim=(0, 2)) < threshold  # [16] blocks under the threshold everywhere
    assert 0 < int(small.sum()) < 16 and skipped == pytest.approx(float(small.float().mean()))
    rows = small.repeat_interleave(8)
    bound = threshold * head.weight[rows].norm(dim=1).sum()
    assert float(loss) == pytest.approx(float(exact_loss), rel=1e-6)
    assert float((grad - exact_grad).norm(dim=1).max()) <= float(bound)
    assert float((grad - exact_grad).abs().max()) > 0  # something was skipped


def test_filtered_chunk_with_nothing_below_the_threshold_is_the_exact_gradient(monkeypatch):
    monkeypatch.setattr(loss_module, "VOCAB_BLOCK", 8)
    head, hidden, tgt = _head_case(peaked=False)  # every probability ~1/128
    exact_loss, exact_grad = _exact(head, hidden, tgt)
    loss, grad, skipped = loss_module.filtered_chunk(hidden, tgt, head, None, 2.0 ** -20)
    assert skipped == 0.0
    assert float(loss) == pytest.approx(float(exact_loss), rel=1e-6)
    torch.testing.assert_close(grad, exact_grad, rtol=1e-5, atol=1e-6)
