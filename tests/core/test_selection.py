"""The best checkpoint and early stopping (`lcsb_core.training.selection`, the trainer's use of it) on the tiny
model: `best` delivers the weights of the mid-run best evaluation, bit for bit those of the checkpoint
saved at that step; early stopping ends the run after `patience` evaluations without a gain; the
config's checks; the watch's counting on scripted evaluations."""

import json
import math

import pytest
import torch
from safetensors.torch import load_file

from lcsb_core.data import EncodedExample, TokenizedDataset, ValidationReport
from lcsb_core.errors import ConfigError, TrainingCancelled
from lcsb_core.training.callbacks import EvalReport, TrainerCallback
from lcsb_core.training.config import TrainConfig
from lcsb_core.training.history import read_history
from lcsb_core.training.selection import SelectCheckpointSettings, SelectionWatch
from lcsb_core.training.trainer import Trainer
from tests.core.test_trainer import config
from tests.core.tiny import VOCAB, tiny_lora

STEPS = 16


def counting(n: int, seed: int) -> TokenizedDataset:
    """Examples that count up by one from a random start (mod the vocabulary): learnable by the tiny model."""
    gen = torch.Generator().manual_seed(seed)
    examples = []
    for i in range(n):
        start = int(torch.randint(1, VOCAB, (1,), generator=gen))
        ids = [1 + (start + j) % (VOCAB - 1) for j in range(16)]
        examples.append(EncodedExample(input_ids=ids, labels=[-100] * 3 + ids[3:], line=i + 1))
    return TokenizedDataset(examples=examples, report=ValidationReport(path="synthetic", file_type="jsonl"))


def peaking_config(tmp_path, **over) -> TrainConfig:
    """A run whose eval loss falls, then rises: the learning rate warms up over the whole run to 0.05
    (constant schedule, no clipping), too high for the last steps. Evaluated and saved every 2 steps."""
    return config(tmp_path, max_steps=STEPS, eval_every=2, save_every=2, lcsb={"schedule": "full", "k": None},
                  lora={"dropout": 0.0}, optim={"learning_rate": 0.05, "warmup_steps": STEPS,
                                                "lr_schedule": "constant", "max_grad_norm": 0.0}, **over)


class Steps(TrainerCallback):
    def __init__(self):
        self.steps: list[int] = []

    def on_step(self, report):
        self.steps.append(report.step)


def run(cfg: TrainConfig, callbacks=()) -> Trainer:
    t = Trainer(cfg, model=tiny_lora(0, rank=4), train_dataset=counting(40, 1), eval_dataset=counting(8, 2),
                callbacks=callbacks)
    t.summary = t.train()  # type: ignore[attr-defined]
    return t


def eval_losses(t: Trainer) -> dict[int, float]:
    rows = [json.loads(line) for line in t.files.metrics.read_text().splitlines()]
    return {r["step"]: r["eval_loss"] for r in rows if r["split"] == "eval"}


def adapter(folder) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "adapter_model.safetensors"))


def test_best_delivers_the_mid_run_best_checkpoint_bit_for_bit(tmp_path):
    t = run(peaking_config(tmp_path, select_checkpoint={"mode": "best", "metric": "eval_loss"}))
    losses = eval_losses(t)
    assert sorted(losses) == list(range(0, STEPS + 1, 2))
    best = min((s for s in losses if s > 0), key=lambda s: losses[s])
    assert 2 < best < STEPS and losses[STEPS] > losses[best] + 0.02  # the run really peaks mid-run
    chosen = t.summary["selected_checkpoint"]
    assert chosen == {"mode": "best", "metric": "eval_loss", "step": best, "value": losses[best]}
    assert t.summary["eval_loss_after"] == losses[best] and t.summary["steps"] == STEPS
    final, at_best = adapter(t.files.adapter), adapter(t.files.checkpoint_dir(best))
    assert final.keys() == at_best.keys() and len(final) > 0
    assert all(torch.equal(final[k], at_best[k]) for k in final)
    later = adapter(t.files.checkpoint_dir(STEPS - 2))
    assert any(not torch.equal(final[k], later[k]) for k in final)
    summary = json.loads((t.files.root / "summary.json").read_text())
    assert summary["selected_checkpoint"]["step"] == best
    # the last step's adapter is kept too: the last checkpoint, not the delivered one
    assert summary["final_checkpoint"] == str(t.files.checkpoint_dir(STEPS))
    last = adapter(t.files.checkpoint_dir(STEPS))
    assert last.keys() == final.keys() and any(not torch.equal(final[k], last[k]) for k in final)


class Saved(TrainerCallback):
    def __init__(self):
        self.steps: list[int] = []

    def on_checkpoint(self, step, path):
        self.steps.append(step)


def test_every_run_saves_its_last_step_once(tmp_path):
    """`save_every` 2 of 16 steps: the last step is saved once, by the end; `save_every` 0: the last step
    only; a run resumed from its last checkpoint (nothing left to train) saves nothing again."""
    saved = Saved()
    t = run(peaking_config(tmp_path / "a"), callbacks=[saved])
    assert saved.steps == list(range(2, STEPS + 1, 2))
    final, last = adapter(t.files.adapter), adapter(t.files.checkpoint_dir(STEPS))
    assert all(torch.equal(final[k], last[k]) for k in final)  # `last`: the delivered adapter is that step's
    saved = Saved()
    run(config(tmp_path / "b", max_steps=STEPS, eval_every=0, save_every=0), callbacks=[saved])
    assert saved.steps == [STEPS]
    saved = Saved()
    again = Trainer(peaking_config(tmp_path / "a"), model=tiny_lora(0, rank=4), train_dataset=counting(40, 1),
                    eval_dataset=counting(8, 2), callbacks=[saved])
    summary = again.train(resume_from="latest")
    assert saved.steps == [] and summary["steps"] == STEPS
    resumed = adapter(again.files.adapter)
    assert all(torch.equal(final[k], resumed[k]) for k in final)


def test_last_delivers_the_last_step(tmp_path):
    best = run(peaking_config(tmp_path / "best", select_checkpoint={"mode": "best"}))
    last = run(peaking_config(tmp_path / "last"))
    assert last.summary["selected_checkpoint"] == {"mode": "last", "metric": None, "step": STEPS, "value": None}
    assert last.summary["eval_loss_after"] == eval_losses(last)[STEPS]
    a, b = adapter(last.files.adapter), adapter(best.files.adapter)
    assert any(not torch.equal(a[k], b[k]) for k in a)


def test_best_survives_a_resume(tmp_path):
    full = run(peaking_config(tmp_path / "a", select_checkpoint={"mode": "best"}))

    class StopAt13(TrainerCallback):
        def __init__(self):
            self.step = 0

        def on_step(self, report):
            self.step = report.step

        def should_cancel(self):
            return self.step >= 13

    cfg = peaking_config(tmp_path / "b", select_checkpoint={"mode": "best"})
    with pytest.raises(TrainingCancelled):
        run(cfg, callbacks=[StopAt13()])
    resumed = Trainer(cfg, model=tiny_lora(0, rank=4), train_dataset=counting(40, 1), eval_dataset=counting(8, 2))
    summary = resumed.train(resume_from="latest")
    assert summary["selected_checkpoint"] == full.summary["selected_checkpoint"]
    a, b = adapter(full.files.adapter), adapter(resumed.files.adapter)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_early_stopping_ends_the_run_at_the_patience(tmp_path):
    steps = Steps()
    # no evaluation improves eval_loss by more than 10 nats: the first trained evaluation (step 2) sets the
    # mark, steps 4 and 6 are the two without a gain, and the run ends after step 6 of 20
    t = run(config(tmp_path, max_steps=20, eval_every=2, save_every=2,
                   early_stopping={"metric": "eval_loss", "patience": 2, "min_delta": 10.0}), callbacks=[steps])
    assert steps.steps == [1, 2, 3, 4, 5, 6]
    assert [r["step"] for r in read_history(t.files.history)] == list(range(6))
    assert sorted(eval_losses(t)) == [0, 2, 4, 6]  # no second evaluation of step 6 at the end
    s = t.summary
    assert s["steps"] == 6 and s["planned_steps"] == 20
    stop = s["stopped_early"]
    assert stop["step"] == 6 and stop["best_step"] == 2 and stop["patience"] == 2 and stop["min_delta"] == 10.0
    assert stop["reason"].startswith("eval_loss did not improve by more than 10 in 2 evaluations (best ")
    assert s["selected_checkpoint"]["step"] == 6
    # the stop step is saved too (once), as the last checkpoint: the delivered adapter is its weights
    assert [p.name for p in sorted(t.files.root.glob("checkpoints/*"))] == ["step-000002", "step-000004",
                                                                             "step-000006"]
    final, last = adapter(t.files.adapter), adapter(t.files.checkpoint_dir(6))
    assert all(torch.equal(final[k], last[k]) for k in final)
    assert json.loads((t.files.root / "summary.json").read_text())["stopped_early"]["step"] == 6


def test_early_stopping_waits_while_the_metric_improves(tmp_path):
    steps = Steps()
    t = run(peaking_config(tmp_path, early_stopping={"patience": 2}), callbacks=[steps])
    losses = eval_losses(t)
    # where the run stops follows from its evaluations: the first step after which two evaluations in a
    # row did not beat the best so far
    best, waited, expected = math.inf, 0, STEPS
    for step in range(2, STEPS + 1, 2):
        best, waited = (losses[step], 0) if losses[step] < best else (best, waited + 1)
        if waited == 2:
            expected = step
            break
    assert 4 < expected < STEPS  # it does stop, after some improving evaluations
    assert steps.steps == list(range(1, expected + 1)) and t.summary["stopped_early"]["step"] == expected


def report(step: int, loss: float, accuracy: float = 0.5) -> EvalReport:
    return EvalReport(step=step, eval_loss=loss, eval_token_accuracy=accuracy, eval_target_tokens=10)


def test_watch_counts_patience_from_the_best_and_ignores_the_base_model(tmp_path):
    cfg = config(tmp_path, eval_every=1, early_stopping={"patience": 2, "min_delta": 0.05},
                 select_checkpoint={"mode": "best"})
    watch = SelectionWatch(cfg.select_checkpoint, cfg.early_stopping)
    params = [torch.zeros(2)]
    # step 0 (the base model) is no candidate; 3 gains 0.03 on 2's 1.0 (not more than 0.05: one without a gain),
    # 4 gains 0.1 (the count starts again), 5 gains 0.02, 6 is NaN: two without a gain after 4, so stop at 6
    for step, loss in [(0, 0.1), (1, 2.0), (2, 1.0), (3, 0.97), (4, 0.9), (5, 0.88), (6, float("nan"))]:
        assert watch.stop is None
        params[0].fill_(step)
        watch.observe(report(step, loss), params)
    assert watch.stop is not None and watch.stop["step"] == 6 and watch.stop["best_step"] == 4
    assert watch.best == (5, 0.88)  # best keeps the smallest value, whatever min_delta
    assert watch.stopped_early(total_steps=6) is None and watch.stopped_early(total_steps=7) == watch.stop
    assert watch.stops_run(6, 7) and not watch.stops_run(6, 6)
    chosen = watch.restore(params, steps_run=6)
    assert chosen == {"mode": "best", "metric": "eval_loss", "step": 5, "value": 0.88}
    assert params[0].tolist() == [5.0, 5.0]


def test_watch_reads_accuracy_as_higher_is_better_and_keeps_the_earlier_tie():
    watch = SelectionWatch(SelectCheckpointSettings(mode="best", metric="eval_token_accuracy"), None)
    params = [torch.zeros(1)]
    for step, accuracy in [(1, 0.2), (2, 0.6), (3, 0.6), (4, 0.4)]:
        params[0].fill_(step)
        watch.observe(report(step, 1.0, accuracy), params)
    assert watch.best == (2, 0.6) and watch.stop is None
    watch.observe(EvalReport(step=5, eval_loss=1.0, eval_token_accuracy=0.9, eval_target_tokens=1), params)
    assert watch.best == (5, 0.9)


@pytest.mark.parametrize("over, field", [
    ({"select_checkpoint": {"mode": "best"}, "eval_every": 0}, "select_checkpoint.mode"),
    ({"select_checkpoint": {"mode": "best"}, "data": {"validation_file": None}, "eval_every": 0},
     "select_checkpoint.mode"),
    ({"early_stopping": {"patience": 1}, "eval_every": 0}, "early_stopping"),
    ({"select_checkpoint": {"mode": "best", "metric": "grader/exact"}}, "select_checkpoint.metric"),
    ({"early_stopping": {"metric": "grader/exact"}}, "early_stopping.metric"),
    ({"select_checkpoint": {"mode": "best"}, "eval_every": 8}, "select_checkpoint.mode"),
    ({"early_stopping": {"patience": 3}, "eval_every": 2}, "early_stopping.patience"),
])
def test_settings_that_cannot_take_effect_are_refused(tmp_path, over, field):
    cfg = config(tmp_path, max_steps=8, **{"data": {"validation_file": "valid.jsonl"}, **over})
    with pytest.raises(ConfigError) as caught:
        cfg.check_honoured()
    assert caught.value.field == field


def test_settings_that_can_take_effect_pass(tmp_path):
    cfg = config(tmp_path, max_steps=8, eval_every=2, data={"validation_file": "valid.jsonl"},
                 select_checkpoint={"mode": "best", "metric": "eval_token_accuracy"},
                 early_stopping={"patience": 2, "min_delta": 0.01})
    cfg.check_honoured()
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize("section, values, field", [
    ("select_checkpoint", {"mode": "first"}, "select_checkpoint.mode"),
    ("select_checkpoint", {"metric": "loss"}, "select_checkpoint.metric"),
    ("select_checkpoint", {"metric": "grader/"}, "select_checkpoint.metric"),
    ("early_stopping", {"patience": 0}, "early_stopping.patience"),
    ("early_stopping", {"min_delta": -0.1}, "early_stopping.min_delta"),
    ("early_stopping", {"min_delta": float("inf")}, "early_stopping.min_delta"),
    ("early_stopping", {"cooldown": 1}, "early_stopping.cooldown"),
])
def test_bad_values_name_their_field(tmp_path, section, values, field):
    with pytest.raises(ConfigError) as caught:
        config(tmp_path, **{section: values})
    assert caught.value.field == field


def test_the_final_evaluation_is_a_candidate(tmp_path):
    # 15 steps evaluated every 4: 4, 8, 12 in the loop, 15 at the end; a steady learning rate keeps improving
    cfg = config(tmp_path, max_steps=15, eval_every=4, save_every=4, lcsb={"schedule": "full", "k": None},
                 lora={"dropout": 0.0}, optim={"learning_rate": 0.01, "warmup_steps": 0, "lr_schedule": "constant"},
                 select_checkpoint={"mode": "best"})
    t = run(cfg)
    losses = eval_losses(t)
    assert sorted(losses) == [0, 4, 8, 12, 15] and losses[15] < min(losses[s] for s in (4, 8, 12))
    assert t.summary["selected_checkpoint"]["step"] == 15 and t.summary["eval_loss_after"] == losses[15]
    final, at_12 = adapter(t.files.adapter), adapter(t.files.checkpoint_dir(12))
    assert any(not torch.equal(final[k], at_12[k]) for k in final)
