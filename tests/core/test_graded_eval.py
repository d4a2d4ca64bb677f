"""Graded evaluation in the trainer on the tiny model (SmolLM2's tokenizer and chat template, random
weights: `lcsb_core.models.tiny`): generation leaves training bit-identical; reports, events, summary
and the samples file agree with the graders applied to the answers."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from lcsb_core.data import gsm8k_to_chat
from lcsb_core.eval.graders import grade_all
from lcsb_core.models.tiny import TINY, build_tiny_models
from lcsb_core.training.callbacks import TrainerCallback
from lcsb_core.training.config import TrainConfig
from lcsb_core.training.trainer import Trainer

GSM8K = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "gsm8k"
GRADERS = [{"type": "numeric"}, {"type": "regex", "pattern": r"\d"}, {"type": "json_valid"}]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("graded")
    models = build_tiny_models(tmp / "models")
    rows = (GSM8K / "train.jsonl").read_text().splitlines()
    for name, start, count in (("train.jsonl", 0, 24), ("valid.jsonl", 100, 6)):
        (tmp / name).write_text("".join(json.dumps(gsm8k_to_chat(json.loads(r))) + "\n"
                                        for r in rows[start:start + count]))
    return tmp, models / TINY


def config(files, out: str, graded: bool) -> TrainConfig:
    tmp, model = files
    raw = {"data": {"train_file": str(tmp / "train.jsonl"), "validation_file": str(tmp / "valid.jsonl"),
                    "max_seq_len": 128, "min_examples": 1},
           "model": {"name_or_path": str(model), "quantization": "fp32", "device": "cpu"},
           "lora": {"rank": 4, "alpha": 8, "dropout": 0.1}, "lcsb": {"schedule": "cyclic", "k": 1},
           "optim": {"learning_rate": 1e-2}, "batch_size": 4, "max_steps": 4, "eval_every": 2, "seed": 5,
           "output_dir": str(tmp / out)}
    if graded:
        raw["eval"] = {"graders": GRADERS, "n_samples": 5, "max_new_tokens": 6}
    return TrainConfig.from_dict(raw)


class Recorder(TrainerCallback):
    def __init__(self):
        self.evals, self.progress = [], []

    def on_eval(self, report):
        self.evals.append(report)

    def on_eval_progress(self, progress):
        self.progress.append(progress)


def test_graded_eval_leaves_training_bit_identical(files):
    plain = Trainer(config(files, "plain", graded=False))
    plain.train()
    graded = Trainer(config(files, "graded", graded=True))
    graded.train()
    a = load_file(plain.files.adapter / "adapter_model.safetensors")
    b = load_file(graded.files.adapter / "adapter_model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert graded.model.training and all(m.training for m in graded.model.modules())
    assert graded.model.get_base_model().config.use_cache is False


def test_scores_are_the_graders_on_the_written_answers(files):
    rec = Recorder()
    t = Trainer(config(files, "report", graded=True), callbacks=[rec])
    summary = t.train()
    assert [r.step for r in rec.evals] == [0, 2, 4]
    # generation reports each decoding step (what keeps a worker's heartbeat through a long evaluation)
    graded_ticks = [(p.step, p.batches_done, p.batches_total) for p in rec.progress if p.phase == "graded"]
    assert {s for s, _, _ in graded_ticks} == {0, 2, 4} and all(1 <= n <= of == 6 for _, n, of in graded_ticks)
    assert [n for s, n, _ in graded_ticks if s == 4] == list(range(1, len([1 for s, *_ in graded_ticks if s == 4]) + 1))
    graders = t.config.eval.parsed
    for report in rec.evals:
        rows = [json.loads(line) for line in
                (t.files.root / "eval_samples" / f"step-{report.step:06d}.jsonl").read_text().splitlines()]
        assert len(rows) == 5 and {r["step"] for r in rows} == {report.step}
        grades, means = grade_all(graders, [r["answer"] for r in rows], [r["reference"] for r in rows])
        assert [r["grades"] for r in rows] == grades and report.graded == means
        base_grades, _ = grade_all(graders, [r["base_answer"] for r in rows], [r["reference"] for r in rows])
        assert [r["base_grades"] for r in rows] == base_grades  # the same graders on the base model's answers
        assert set(means) == {"grader/numeric", "grader/regex", "grader/json_valid"}
        assert report.to_dict()["grader/numeric"] == means["grader/numeric"] and "graded" not in report.to_dict()
        if report.step == 0:
            assert all(r["answer"] == r["base_answer"] for r in rows)
    final = [json.loads(line) for line in (t.files.root / "eval_samples.jsonl").read_text().splitlines()]
    assert {r["step"] for r in final} == {4} and final[0]["reference"].endswith("#### " + final[0]["reference"]
                                                                               .rsplit("#### ", 1)[1])
    assert final[0]["prompt"].startswith("<|im_start|>") and final[0]["prompt"].endswith("<|im_start|>assistant\n")
    assert summary["graded_before"] == rec.evals[0].graded and summary["graded_after"] == rec.evals[-1].graded
    metrics = [json.loads(line) for line in t.files.metrics.read_text().splitlines()]
    assert [m["grader/regex"] for m in metrics if m["split"] == "eval"] == [r.graded["grader/regex"] for r in rec.evals]


def test_without_a_step_0_evaluation_the_first_one_grades_the_base_answers_too(files):
    cfg = config(files, "no-start", graded=True)
    cfg.eval_at_start = False
    t = Trainer(cfg)
    t.train()
    written = sorted(p.name for p in (t.files.root / "eval_samples").iterdir())
    assert written == ["step-000002.jsonl", "step-000004.jsonl"]
    rows = [json.loads(line) for line in (t.files.root / "eval_samples.jsonl").read_text().splitlines()]
    graders, references = t.config.eval.parsed, [r["reference"] for r in rows]
    assert len(rows) == 5 and all(r["base_answer"] for r in rows)  # generated with the adapter disabled at step 2
    assert [r["base_grades"] for r in rows] == grade_all(graders, [r["base_answer"] for r in rows], references)[0]
    assert [r["grades"] for r in rows] == grade_all(graders, [r["answer"] for r in rows], references)[0]
