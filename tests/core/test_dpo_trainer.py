"""A DPO run of the trainer on the tiny model: pairs batched whole, step and evaluation rewards in the
metrics, the summary's `dpo`, learning the preference, resume, a continued adapter as its own reference."""

import json
import math

import pytest
import torch

from lcsb_core.data import EncodedExample, TokenizedDataset, ValidationReport
from lcsb_core.errors import ConfigError, TrainingCancelled
from lcsb_core.training.callbacks import TrainerCallback
from lcsb_core.training.config import LoraSettings, TrainConfig
from lcsb_core.training.dpo import REWARD_KEYS, FrozenAdapterReference
from lcsb_core.training.learning_rate import DPO_LEARNING_RATE, default_learning_rate
from lcsb_core.training.lora import apply_lora
from lcsb_core.training.trainer import Trainer
from tests.core.tiny import VOCAB, tiny_base


def pairs(n: int, seed: int) -> TokenizedDataset:
    """`n` pairs: a random 4-token prompt; the chosen answer draws its 4 tokens from the vocabulary's lower
    eighth, the rejected one from its upper half (a preference a tiny model learns in a few steps)."""
    gen = torch.Generator().manual_seed(seed)
    examples = []
    for i in range(n):
        prompt = torch.randint(1, VOCAB, (4,), generator=gen).tolist()
        chosen = torch.randint(1, VOCAB // 8, (4,), generator=gen).tolist()
        for answer in (chosen, torch.randint(VOCAB // 2, VOCAB, (4,), generator=gen).tolist()):
            examples.append(EncodedExample(prompt + answer, [-100] * 4 + answer, line=i + 1))
    return TokenizedDataset(examples=examples, report=ValidationReport(path="pairs", file_type="jsonl"))


def config(tmp_path, **over) -> TrainConfig:
    raw = {"data": {"train_file": "pairs"}, "output_dir": str(tmp_path / "run"), "batch_size": 4,
           "max_steps": 24, "eval_every": 12, "save_every": 12, "seed": 3, "dpo": {"beta": 0.5},
           "lcsb": {"schedule": "tail", "k": 2}, "lora": {"rank": 4, "alpha": 8},
           "optim": {"learning_rate": 5e-2, "warmup_steps": 2}}
    return TrainConfig.from_dict({**raw, **over})


def trainer(cfg, callbacks=()):
    """A fresh adapter (every LoRA B zero: the policy starts as the reference) on the tiny base."""
    model = apply_lora(tiny_base(0), LoraSettings(rank=4, alpha=8), seed=0)
    return Trainer(cfg, model=model, train_dataset=pairs(32, 1), eval_dataset=pairs(12, 2),
                   callbacks=callbacks)


def rows(t: Trainer, split: str) -> list[dict]:
    return [r for r in map(json.loads, t.files.metrics.read_text().splitlines()) if r["split"] == split]


def test_dpo_run_learns_the_preference_and_reports_rewards(tmp_path):
    t = trainer(config(tmp_path))
    summary = t.train()
    assert t.total_steps == 24  # 32 pairs / 4 per step = 8 steps an epoch; max_steps 24
    train, evals = rows(t, "train"), rows(t, "eval")
    assert all(set(REWARD_KEYS) <= set(r) and "rewards" not in r for r in train)  # flat: one column each
    assert "rewards" not in t.files.metrics_csv.read_text().splitlines()[0].split(",")
    assert train[0]["loss"] == pytest.approx(math.log(2), abs=1e-6)  # a fresh adapter: policy = reference
    assert [e["step"] for e in evals] == [0, 12, 24]
    first, last = evals[0], evals[-1]
    assert first["eval_rewards/accuracies"] == 0.5 and first["eval_rewards/margins"] == 0.0  # policy = ref
    assert first["eval_loss"] == pytest.approx(math.log(2))
    assert last["eval_rewards/accuracies"] >= 0.75 and last["eval_rewards/margins"] > 0.1
    assert last["eval_loss"] < math.log(2) - 0.05
    assert summary["dpo"]["beta"] == 0.5
    assert summary["dpo"]["eval_rewards_after"]["eval_rewards/accuracies"] == last["eval_rewards/accuracies"]
    assert summary["eval_loss_before"] == pytest.approx(math.log(2))


def test_dpo_resume_continues_exactly(tmp_path):
    whole = trainer(config(tmp_path / "a"))
    whole.train()
    class StopAfter13(TrainerCallback):
        def __init__(self):
            self.steps = 0

        def on_step(self, report):
            self.steps = report.step

        def should_cancel(self):
            return self.steps >= 13

    half = trainer(config(tmp_path / "b"), callbacks=[StopAfter13()])
    with pytest.raises(TrainingCancelled):
        half.train()
    assert half.files.latest_checkpoint().name == "step-000012"
    again = trainer(config(tmp_path / "b"))
    again.train(resume_from="latest")
    assert rows(again, "train")[-1]["loss"] == pytest.approx(rows(whole, "train")[-1]["loss"], rel=1e-5)
    for a, b in zip(again.params, whole.params, strict=True):
        torch.testing.assert_close(a, b)


def test_continued_adapter_is_the_reference(tmp_path):
    first = trainer(config(tmp_path / "sft", dpo=None, max_steps=4, eval_every=0, save_every=0))
    first.train()  # a supervised run on the chosen answers stands for the SFT parent
    cfg = config(tmp_path / "dpo", init_adapter=str(first.files.adapter), max_steps=4, eval_every=0)
    t = trainer(cfg)
    t.setup()
    assert isinstance(t.objective.reference, FrozenAdapterReference)
    t.train()
    evals = rows(t, "eval")
    assert evals[0]["step"] == 0 and evals[0]["eval_rewards/margins"] == 0.0  # the start is the reference


def test_dpo_refuses_packing_and_train_on_inputs(tmp_path):
    with pytest.raises(ConfigError, match="data.pack"):
        config(tmp_path, data={"train_file": "pairs", "pack": True})
    with pytest.raises(ConfigError, match="data.train_on_inputs"):
        config(tmp_path, data={"train_file": "pairs", "train_on_inputs": True})


def test_a_dpo_run_that_names_no_rate_gets_dpos():
    cfg = TrainConfig.from_dict({"data": {"train_file": "pairs"}, "dpo": {}, "lcsb": {"schedule": "tail"}})
    sft = TrainConfig.from_dict({"data": {"train_file": "pairs"}, "lcsb": {"schedule": "tail"}})
    assert cfg.optim.learning_rate == cfg.peak_learning_rate == DPO_LEARNING_RATE
    assert sft.optim.learning_rate == default_learning_rate("tail") != DPO_LEARNING_RATE



def test_a_passed_in_adapter_that_is_not_the_identity_is_evaluated_against_the_adapter_off_reference(tmp_path):
    """Step 0 skips the reference forward only where the policy is its reference: a model passed in with
    LoRA B away from zero and no `init_adapter` starts away from its (adapter-off) reference, and its step-0
    evaluation says so (not log 2, not a tie)."""
    from tests.core.tiny import tiny_lora

    t = Trainer(config(tmp_path, max_steps=12), model=tiny_lora(0), train_dataset=pairs(32, 1),
                eval_dataset=pairs(12, 2))
    t.train()
    first = rows(t, "eval")[0]
    assert first["step"] == 0
    assert abs(first["eval_loss"] - math.log(2)) > 1e-3 and first["eval_rewards/margins"] != 0.0
