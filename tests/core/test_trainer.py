"""The trainer loop on the tiny model: resume, NaN guard, adapter round trip, history, callbacks."""

import json
import math

import pytest
import torch
from peft import PeftModel

from lcsb_core.data import EncodedExample, TokenizedDataset, ValidationReport
from lcsb_core.errors import CheckpointError, DivergenceError, TrainingCancelled
from lcsb_core.training.callbacks import TrainerCallback
from lcsb_core.training.config import LoraSettings, TrainConfig
from lcsb_core.training.history import read_history
from lcsb_core.training.lora import apply_lora
from lcsb_core.training.trainer import Trainer
from tests.core.tiny import NUM_LAYERS, VOCAB, tiny_base, tiny_lora


def dataset(n: int, seed: int) -> TokenizedDataset:
    gen = torch.Generator().manual_seed(seed)
    examples = []
    for i in range(n):
        length = int(torch.randint(6, 20, (1,), generator=gen))
        ids = torch.randint(1, VOCAB, (length,), generator=gen).tolist()
        labels = [-100] * 3 + ids[3:]
        examples.append(EncodedExample(input_ids=ids, labels=labels, line=i + 1))
    return TokenizedDataset(examples=examples, report=ValidationReport(path="synthetic", file_type="jsonl"))


def config(tmp_path, **over) -> TrainConfig:
    raw = {"data": {"train_file": "synthetic"}, "output_dir": str(tmp_path / "run"), "batch_size": 4,
           "gradient_accumulation_steps": 2, "max_steps": 8, "eval_every": 4, "save_every": 4, "seed": 3,
           "lcsb": {"schedule": "cyclic", "k": 1}, "lora": {"rank": 4, "alpha": 8, "dropout": 0.1},
           "optim": {"learning_rate": 1e-2, "warmup_steps": 2, "lr_schedule": "cosine"}}
    for key, value in over.items():
        if isinstance(value, dict):
            raw[key] = {**raw.get(key, {}), **value}
        else:
            raw[key] = value
    return TrainConfig.from_dict(raw)


def trainer(cfg, callbacks=()):
    return Trainer(cfg, model=tiny_lora(0, rank=cfg.lora.rank, dropout=cfg.lora.dropout), train_dataset=dataset(40, 1),
                   eval_dataset=dataset(8, 2), callbacks=callbacks)


def lora_tensors(t: Trainer):
    return [p.detach().clone() for p in t.params]


def test_history_has_one_row_per_step_with_the_scheduled_layers(tmp_path):
    t = trainer(config(tmp_path))
    summary = t.train()
    rows = read_history(t.files.history)
    assert [r["step"] for r in rows] == list(range(8))
    assert [r["selected"] for r in rows] == [[s % NUM_LAYERS] for s in range(8)]
    for r in rows:
        assert len(r["grad_norm"]) == NUM_LAYERS and len(r["update_norm"]) == NUM_LAYERS
        assert all((g is None) == (i not in r["selected"]) for i, g in enumerate(r["grad_norm"]))
        assert r["grad_norm"][r["selected"][0]] > 0
        assert r["update_norm"][r["selected"][0]] > 0  # the optimizer holds every layer from step 0
    assert all(r["update_norm"][i] > 0 for r in rows[1:] for i in range(NUM_LAYERS))  # momentum moves the rest
    assert len(t.optimizer.param_groups[0]["params"]) == sum(len(v) for v in t.selective.params_by_layer.values())
    assert summary["steps"] == 8 and summary["eval_loss_before"] is not None
    assert (t.files.plots / "loss.png").stat().st_size > 1000
    assert (t.files.plots / "selection_heatmap.png").stat().st_size > 1000
    metrics = [json.loads(line) for line in t.files.metrics.read_text().splitlines()]
    assert [m["step"] for m in metrics if m["split"] == "eval"] == [0, 4, 8]
    assert len([m for m in metrics if m["split"] == "train"]) == 8
    assert t.files.metrics_csv.read_text().splitlines()[0].startswith("split,step")


def test_resume_reproduces_uninterrupted_run(tmp_path):
    full = trainer(config(tmp_path / "a"))
    full.train()
    expected = lora_tensors(full)

    class StopAfter5(TrainerCallback):
        def __init__(self):
            self.steps = 0

        def on_step(self, report):
            self.steps = report.step

        def should_cancel(self):
            return self.steps >= 5

    first = trainer(config(tmp_path / "b"), callbacks=[StopAfter5()])
    with pytest.raises(TrainingCancelled):
        first.train()
    assert first.files.latest_checkpoint().name == "step-000004"
    resumed = trainer(config(tmp_path / "b"))
    resumed.train(resume_from="latest")
    for a, b in zip(expected, lora_tensors(resumed), strict=False):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert [r["step"] for r in read_history(resumed.files.history)] == list(range(8))
    hist_a = read_history(full.files.history)
    hist_b = read_history(resumed.files.history)
    assert hist_a == hist_b


def test_nan_guard_stops_and_never_saves_a_nonfinite_adapter(tmp_path):
    class Poison(TrainerCallback):
        def __init__(self, t):
            self.t = t

        def on_step(self, report):
            if report.step == 2:
                with torch.no_grad():
                    self.t.params[0].fill_(float("nan"))

    t = trainer(config(tmp_path, save_every=1, eval_every=0))
    t.callbacks.append(Poison(t))
    with pytest.raises(DivergenceError, match="step-000002: the LoRA weights hold NaN"):
        t.train()
    assert not t.files.adapter.exists()
    assert [p.name for p in t.files.checkpoints.iterdir() if (p / "trainer_state.pt").exists()] == ["step-000001"]

    t = trainer(config(tmp_path / "b", save_every=0, eval_every=0))
    t.callbacks.append(Poison(t))
    with pytest.raises(DivergenceError, match="loss became nan at step 3"):
        t.train()
    assert not t.files.adapter.exists()


def test_adapter_round_trip_gives_same_logits(tmp_path):
    t = trainer(config(tmp_path, lcsb={"schedule": "full"}))
    t.train()
    t.model.eval()
    ids = torch.randint(1, VOCAB, (2, 10), generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        expected = t.model(input_ids=ids).logits
    loaded = PeftModel.from_pretrained(tiny_base(0), t.files.adapter).eval()
    cfg = json.loads((t.files.adapter / "adapter_config.json").read_text())
    assert cfg["r"] == 4 and cfg["lora_alpha"] == 8 and len(cfg["target_modules"]) == 7
    with torch.no_grad():
        got = loaded(input_ids=ids).logits
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        base = tiny_base(0)(input_ids=ids).logits
    assert (base - expected).abs().max() > 1e-4  # the adapter changes the model


def test_callbacks_receive_progress(tmp_path):
    seen = []

    class Record(TrainerCallback):
        def on_step(self, r):
            seen.append(r)

    trainer(config(tmp_path, max_steps=3, eval_every=0), callbacks=[Record()]).train()
    assert [r.step for r in seen] == [1, 2, 3] and all(r.total_steps == 3 for r in seen)
    assert all(r.tokens > 0 and r.tokens_per_s > 0 and r.peak_memory_mib > 0 and math.isfinite(r.loss) for r in seen)
    assert seen[0].lr == pytest.approx(1e-2 / 2)  # warmup: step 1 of 2


@pytest.mark.parametrize("eval_at_start", [True, False])
def test_eval_at_start_decides_the_step_0_evaluation_only(tmp_path, eval_at_start):
    # tiny_lora's adapter is not the identity (B != 0): its step-0 evaluation runs before the first step
    events = []

    class Record(TrainerCallback):
        def on_step(self, r):
            events.append(("step", r.step))

        def on_eval(self, r):
            events.append(("eval", r.step))

    t = trainer(config(tmp_path, max_steps=4, eval_every=2, eval_at_start=eval_at_start), callbacks=[Record()])
    summary = t.train()
    later = [("step", 1), ("step", 2), ("eval", 2), ("step", 3), ("step", 4), ("eval", 4)]
    assert events == ([("eval", 0)] if eval_at_start else []) + later
    assert (summary["eval_loss_before"] is not None) == eval_at_start
    assert math.isfinite(summary["eval_loss_after"])


def fresh_adapter_trainer(cfg, callbacks=()):
    """A trainer on an adapter as `apply_lora` makes it (every LoRA B zero: the identity)."""
    model = apply_lora(tiny_base(0), LoraSettings(rank=cfg.lora.rank, alpha=cfg.lora.alpha, dropout=cfg.lora.dropout),
                       seed=0)
    return Trainer(cfg, model=model, train_dataset=dataset(40, 1), eval_dataset=dataset(8, 2), callbacks=callbacks)


def test_a_fresh_adapter_is_evaluated_at_step_0_after_the_first_step_with_the_same_numbers(tmp_path):
    events = []

    class Record(TrainerCallback):
        def on_step(self, r):
            events.append(("step", r.step))

        def on_eval(self, r):
            events.append(("eval", r.step, r.eval_loss, r.eval_token_accuracy, r.eval_target_tokens))

    before = fresh_adapter_trainer(config(tmp_path / "before", max_steps=4, eval_every=2))
    before.setup()
    before.files.create()
    at_start = before.evaluate(0)  # the step-0 model, evaluated before any step
    t = fresh_adapter_trainer(config(tmp_path / "run", max_steps=4, eval_every=2), callbacks=[Record()])
    summary = t.train()
    assert [e[:2] for e in events] == [("step", 1), ("eval", 0), ("step", 2), ("eval", 2), ("step", 3), ("step", 4),
                                       ("eval", 4)]
    assert events[1][2:] == (at_start.eval_loss, at_start.eval_token_accuracy, at_start.eval_target_tokens)
    assert events[3][2] != at_start.eval_loss  # the adapter is back on after the step-0 evaluation
    assert summary["eval_loss_before"] == at_start.eval_loss
    metrics = [json.loads(line) for line in t.files.metrics.read_text().splitlines()]
    assert [(m["split"], m["step"]) for m in metrics][:3] == [("train", 1), ("eval", 0), ("train", 2)]


def test_eval_progress_comes_after_every_validation_batch(tmp_path):
    seen = []

    class Record(TrainerCallback):
        def on_eval_progress(self, p):
            seen.append(p)

        def on_eval(self, r):
            seen.append(("eval", r.step))

    # 8 validation examples in batches of 3: 3 batches, the last one partial
    trainer(config(tmp_path, batch_size=3, max_steps=2, eval_every=2), callbacks=[Record()]).train()
    progress = [(p.step, p.batches_done, p.batches_total) if not isinstance(p, tuple) else p for p in seen]
    assert progress == [(0, 1, 3), (0, 2, 3), (0, 3, 3), ("eval", 0), (2, 1, 3), (2, 2, 3), (2, 3, 3), ("eval", 2)]
    elapsed = [p.elapsed_s for p in seen if not isinstance(p, tuple)]
    assert all(0 < a <= b for a, b in zip(elapsed[:2], elapsed[1:3], strict=True))  # within an evaluation


@pytest.mark.parametrize("make", [trainer, fresh_adapter_trainer], ids=["before the first step", "deferred"])
def test_eval_at_start_off_trains_the_same_weights(tmp_path, make):
    runs = []
    for flag in (True, False):
        t = make(config(tmp_path / str(flag), eval_at_start=flag))
        t.train()
        runs.append(lora_tensors(t))
    assert all(torch.equal(a, b) for a, b in zip(*runs, strict=True))
    assert any(p.any() for p in runs[0])  # it trained


@pytest.mark.parametrize("schedule", ["random", "importance", "freeze"])
def test_other_schedules_train(tmp_path, schedule):
    t = trainer(config(tmp_path, lcsb={"schedule": schedule, "k": 2, "importance_refresh_every": 3}))
    summary = t.train()
    rows = read_history(t.files.history)
    assert all(len(r["selected"]) == (NUM_LAYERS if schedule == "importance" and r["step"] % 3 == 0 else 2)
               for r in rows)
    assert math.isfinite(summary["eval_loss_after"])


def test_packed_batches_train_like_padded_ones(tmp_path):
    def first_loss(t):
        return [json.loads(line) for line in t.files.metrics.read_text().splitlines() if '"train"' in line][0]["loss"]

    common = dict(max_steps=2, eval_every=0, lora={"rank": 4, "alpha": 8, "dropout": 0.0})
    padded = trainer(config(tmp_path / "a", **common))
    packed = trainer(config(tmp_path / "b", **common,
                            data={"train_file": "synthetic", "pack": True, "max_seq_len": 64}))
    padded.train()
    packed.train()
    batch = next(packed._micro_batches(0))
    assert batch["attention_mask"].dim() == 4 and "position_ids" in batch
    assert batch["input_ids"].shape[0] < 4  # four examples packed into fewer rows
    # same examples and targets in the step: the loss before any update is the same
    assert first_loss(packed) == pytest.approx(first_loss(padded), rel=1e-4)


def test_setup_is_idempotent_and_train_after_setup_wraps_once(tmp_path):
    t = trainer(config(tmp_path))
    t.setup()
    optimizer, selective = t.optimizer, t.selective
    t.setup()
    assert t.optimizer is optimizer and t.selective is selective
    t.train()
    assert t.optimizer is optimizer
    # every LoRA parameter is in the one optimizer exactly once
    ids = [id(p) for g in t.optimizer.param_groups for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(t.params)


def test_checkpoint_stores_lora_by_name_and_refuses_other_layouts(tmp_path):
    t = trainer(config(tmp_path, max_steps=4, save_every=2))
    t.train()
    ckpt = t.files.checkpoint_dir(2)
    state = torch.load(ckpt / "trainer_state.pt", weights_only=False)
    assert state["format"] == 2
    assert sorted(state["lora"]) == sorted(t.param_names)
    assert all(".lora_A." in n or ".lora_B." in n for n in state["lora"])

    old = dict(state, lora=list(state["lora"].values()))
    old.pop("format")
    torch.save(old, ckpt / "trainer_state.pt")
    with pytest.raises(CheckpointError, match="older layout"):
        trainer(config(tmp_path)).train(resume_from=ckpt)

    wrong = dict(state, lora={f"x.{n}": v for n, v in state["lora"].items()})
    torch.save(wrong, ckpt / "trainer_state.pt")
    with pytest.raises(CheckpointError, match="does not match"):
        trainer(config(tmp_path)).train(resume_from=ckpt)


class _Tokenizer:
    """Just what the trainer reads of a tokenizer when saving: its chat template and pad id."""

    chat_template = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"
    pad_token_id = 0


@pytest.mark.parametrize("data_format", ["chat", "text"])
def test_a_chat_jobs_template_is_saved_beside_every_adapter_and_no_other_jobs(tmp_path, data_format):
    train = dataset(40, 1)
    train.report.format = data_format
    t = Trainer(config(tmp_path, max_steps=5, save_every=2, eval_every=0), model=tiny_lora(0, rank=4, dropout=0.1),
                tokenizer=_Tokenizer(), train_dataset=train, eval_dataset=dataset(8, 2))
    t.train()
    folders = [t.files.adapter, *sorted(p for p in t.files.checkpoints.iterdir() if p.is_dir())]
    assert len(folders) == 4  # the delivered adapter and the checkpoints of steps 2, 4 and 5 (the last)
    for folder in folders:
        template = folder / "chat_template.jinja"
        if data_format == "chat":
            assert template.read_text(encoding="utf-8") == _Tokenizer.chat_template
        else:
            assert not template.exists()


def test_an_evaluation_takes_the_validation_set_shortest_first_with_the_same_means(tmp_path):
    """`Trainer.evaluate` batches the validation set shortest first (less padding): the mean loss and token
    accuracy equal those of the file order's batches (`evaluate_batches` on the same model), and its batches
    hold fewer padded tokens."""
    from lcsb_core.data import iter_batches
    from lcsb_core.training.loss import evaluate_batches

    seen = []

    class Compare(TrainerCallback):
        def on_eval(self, r):
            file_order = list(iter_batches(t.eval_dataset, 3, seed=3, epoch=0, pad_token_id=0, shuffle=False))
            seen.append((r, evaluate_batches(t.model, iter(file_order)), file_order))

    t = trainer(config(tmp_path, batch_size=3, max_steps=1, eval_every=0), callbacks=[Compare()])
    t.train()
    assert [r.step for r, _, _ in seen] == [0, 1]
    for report, direct, _ in seen:
        assert report.eval_loss == pytest.approx(direct.mean_loss, rel=1e-5)
        assert report.eval_token_accuracy == pytest.approx(direct.token_accuracy, rel=1e-6)
        assert report.eval_target_tokens == direct.num_targets
    shortest_first = iter_batches(t.eval_dataset, 3, seed=3, epoch=0, pad_token_id=0, shuffle=False, by_length=True)
    file_order = seen[0][2]
    assert sum(b["input_ids"].numel() for b in shortest_first) < sum(b["input_ids"].numel() for b in file_order)
