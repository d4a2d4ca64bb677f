"""`lcsb_core.training.loss.evaluate_batches`, the one evaluation loop (the trainer's and the benches'): a mean
over target tokens, not over batches; dropout off while it runs; train mode back afterwards, also when
a batch fails."""

from __future__ import annotations

import pytest
import torch

from lcsb_core.training.loss import evaluate_batches, lm_loss_sums
from tests.core.tiny import batch, tiny_lora


def test_mean_is_over_target_tokens_of_all_batches_with_dropout_off():
    model = tiny_lora(0, dropout=0.5)  # train mode: dropout would make two forwards differ
    batches = [batch(1, bsz=2, seq=12, pad_last=3), batch(2, bsz=1, seq=20, pad_last=0)]
    totals = evaluate_batches(model, batches)
    assert model.training
    model.eval()
    with torch.no_grad():
        sums = [lm_loss_sums(model, b, with_accuracy=True) for b in batches]
    targets = sum(s.num_targets for s in sums)
    assert totals.num_targets == targets == 9 + 6 + 17  # labels of positions 3.. (not padding)
    assert totals.mean_loss == pytest.approx(sum(float(s.loss_sum) for s in sums) / targets, rel=1e-6)
    assert totals.num_correct == sum(s.num_correct for s in sums)
    assert totals.token_accuracy == pytest.approx(totals.num_correct / targets)


def test_train_mode_comes_back_when_a_batch_fails():
    model = tiny_lora(0)
    bad = {"input_ids": torch.zeros(1, 4, dtype=torch.long)}  # no labels
    with pytest.raises(KeyError):
        evaluate_batches(model, [bad])
    assert model.training
