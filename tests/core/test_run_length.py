"""`planned_steps` is the trainer's real count: the partial last batch is kept (no drop_last), packing does
not change the number of micro-batches, accumulation leaves a remainder untrained, `max_steps` caps; and
a tiny run makes exactly that many optimizer steps, drawing only micro-batches the epochs hold."""

from __future__ import annotations

import pytest

from lcsb_core.data import iter_batches
from lcsb_core.data.run_length import batches_per_epoch, planned_steps
from lcsb_core.training.callbacks import TrainerCallback
from lcsb_core.training.config import TrainConfig
from lcsb_core.training.trainer import Trainer
from tests.core.test_trainer import dataset
from tests.core.tiny import tiny_lora


@pytest.mark.parametrize("n, bs, ga, epochs, max_steps, steps", [
    (12, 4, 1, 1, None, 3),
    (10, 4, 1, 1, None, 3),      # 4 + 4 + 2: the partial batch is a step
    (13, 4, 1, 3, None, 12),
    (10, 4, 2, 1, None, 1),      # 3 micro-batches: one step of 2, one left over
    (4, 4, 2, 1, None, 1),       # less than one step still makes one
    (10, 4, 1, 2.5, None, 7),    # int(2.5 x 3)
    (10, 4, 1, None, 7, 7),      # max_steps alone: the data repeats
    (10, 4, 1, None, None, 3),   # neither: one epoch
    (10, 4, 1, 3, 5, 5),         # max_steps caps the epochs
    (10, 4, 1, 1, 50, 3),        # the epochs end first
])
def test_planned_steps(n, bs, ga, epochs, max_steps, steps):
    assert planned_steps(n, bs, ga, epochs, max_steps) == steps


def test_planned_steps_refuses_nonsense():
    for args in [(10, 0, 1, 1, None), (10, 4, 0, 1, None), (0, 4, 1, 1, None), (10, 4, 1, 0, None),
                 (10, 4, 1, None, 0)]:
        with pytest.raises(ValueError):
            planned_steps(*args)


class _Counter(TrainerCallback):
    def __init__(self) -> None:
        self.steps: list[int] = []

    def on_step(self, report) -> None:
        self.steps.append(report.step)


@pytest.mark.parametrize("n, bs, ga, epochs, max_steps, pack", [
    (10, 4, 1, 1, None, False),
    (10, 4, 2, 2, None, False),
    (9, 4, 2, 1, None, True),
    (10, 3, 1, None, 4, False),
    (10, 3, 1, 3, 5, True),
])
def test_a_tiny_run_makes_exactly_the_planned_steps(tmp_path, monkeypatch, n, bs, ga, epochs, max_steps, pack):
    cfg = TrainConfig.from_dict({"data": {"train_file": "synthetic", "pack": pack, "max_seq_len": 64},
                                 "output_dir": str(tmp_path / "run"), "batch_size": bs,
                                 "gradient_accumulation_steps": ga, "epochs": epochs, "max_steps": max_steps,
                                 "lcsb": {"schedule": "full"}, "lora": {"rank": 2, "alpha": 4}})
    data = dataset(n, 1)
    one_epoch = list(iter_batches(data, bs, seed=0, epoch=0, pad_token_id=0, pack=pack, max_seq_len=64))
    assert len(one_epoch) == batches_per_epoch(n, bs) and sum(b["labels"].shape[0] for b in one_epoch) >= 1
    drawn = [0]
    real_batches = Trainer._batches

    def counting(self, dataset, *, epoch, shuffle):
        for b in real_batches(self, dataset, epoch=epoch, shuffle=shuffle):
            drawn[0] += 1
            yield b

    monkeypatch.setattr(Trainer, "_batches", counting)
    counter = _Counter()
    summary = Trainer(cfg, model=tiny_lora(0, rank=2), train_dataset=data, callbacks=[counter]).train()
    planned = planned_steps(n, bs, ga, epochs, max_steps)
    assert counter.steps == list(range(1, planned + 1)) and summary["steps"] == planned
    consumed = planned * ga
    assert drawn[0] == consumed  # the micro-batches the trainer read
    if epochs is not None and (max_steps is None or planned < max_steps):  # the epochs ended the run
        held = int(epochs * batches_per_epoch(n, bs))
        assert consumed <= held < consumed + ga or planned == 1  # no further whole step fits
