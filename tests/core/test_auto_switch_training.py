"""`auto`'s probe-then-switch schedule in the real training loop on the tiny model (issue 47): the probe
steps train every layer and report their per-layer gradient norms; with the threshold above the share
the run switches to `tail`, with it at 0 it stays at full depth; the callback hears the decision once,
the summary keeps it, and a run resumed from a checkpoint taken inside the probe decides the same and
trains the same weights."""

from __future__ import annotations

import pytest
import torch

from lcsb_core.errors import TrainingCancelled
from lcsb_core.training.callbacks import TrainerCallback
from lcsb_core.training.history import read_history
from lcsb_core.training.schedules import SwitchSchedule, make_schedule
from tests.core.test_trainer import config, lora_tensors, trainer
from tests.core.tiny import NUM_LAYERS

PROBE = 3


def auto(tmp_path, threshold: float, **over):
    plan = {"schedule": "auto", "reason": "test", "probe_steps": PROBE, "then": "tail", "threshold": threshold}
    return config(tmp_path, lcsb={"schedule": "auto", "k": 1, "auto": plan},
                  optim={"learning_rate": 1e-2, "warmup_steps": 2, "lr_schedule": "constant"}, **over)


class Decisions(TrainerCallback):
    def __init__(self, stop_at: int | None = None):
        self.decisions: list[dict] = []
        self.steps, self.stop_at = 0, stop_at

    def on_schedule_decision(self, decision: dict) -> None:
        self.decisions.append(decision)

    def on_step(self, report) -> None:
        self.steps = report.step

    def should_cancel(self) -> bool:
        return self.stop_at is not None and self.steps >= self.stop_at


@pytest.mark.parametrize("threshold, chosen", [(1.0, "tail"), (0.0, "full")])
def test_the_probe_trains_every_layer_then_the_run_follows_the_decision(tmp_path, threshold, chosen):
    heard = Decisions()
    t = trainer(auto(tmp_path, threshold), callbacks=[heard])
    summary = t.train()
    assert isinstance(t.schedule, SwitchSchedule)
    rows = read_history(t.files.history)
    assert all(r["selected"] == list(range(NUM_LAYERS)) for r in rows[:PROBE])
    assert all(g is not None and g > 0 for r in rows[:PROBE] for g in r["grad_norm"])
    tail = make_schedule("tail", num_layers=NUM_LAYERS, k=1)
    expected = [sorted(tail.layers_for_step(s - PROBE)) if chosen == "tail" else list(range(NUM_LAYERS))
                for s in range(PROBE, 8)]
    assert [r["selected"] for r in rows[PROBE:]] == expected
    assert len(heard.decisions) == 1
    decision = heard.decisions[0]
    assert (decision["schedule"], decision["probe_steps"], decision["from_step"], decision["threshold"]) == (
        chosen, PROBE, PROBE + 1, threshold)
    # the share the schedule computed is the history's own gradient norms' (lower = below the top k = 1)
    norms = [r["grad_norm"] for r in rows[:PROBE]]
    shares = [sum(g * g for g in n[:-1]) / sum(g * g for g in n) for n in norms]
    assert decision["lower_share_per_step"] == pytest.approx(shares, abs=1e-4)
    assert 0 < decision["lower_share"] < 1
    assert summary["schedule_decision"] == decision and summary["schedule"] == "auto"


def test_a_resume_inside_the_probe_decides_and_trains_the_same(tmp_path):
    whole = trainer(auto(tmp_path / "a", 1.0))
    whole.train()
    stopper = Decisions(stop_at=2)
    first = trainer(auto(tmp_path / "b", 1.0, save_every=2), callbacks=[stopper])
    with pytest.raises(TrainingCancelled):
        first.train()
    assert first.files.latest_checkpoint().name == "step-000002" and stopper.decisions == []
    heard = Decisions()
    resumed = trainer(auto(tmp_path / "b", 1.0, save_every=2), callbacks=[heard])
    resumed.train(resume_from="latest")
    assert [d["schedule"] for d in heard.decisions] == ["tail"]  # the third probe step ran after the resume
    assert resumed.schedule.decision() == whole.schedule.decision()
    for a, b in zip(lora_tensors(whole), lora_tensors(resumed), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
