"""The chunked LM-head loss (`lm_loss_sums(..., chunk_bytes=...)`, `HeadLossSum`): the same loss, gradients and
accuracy as the head over all target positions at once, with at most one chunk's [positions, vocab] logits
recorded for backward at a time."""

from __future__ import annotations

import pytest
import torch
from torch.autograd.graph import saved_tensors_hooks

from lcsb_core.loss import lm_loss_sums
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
