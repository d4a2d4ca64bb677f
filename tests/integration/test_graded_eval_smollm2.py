"""Integration: graded evaluation on the real SmolLM2-135M-Instruct (NF4, CPU) and real GSM8K prompts.
The base model (adapter disabled) and a changed adapter answer differently, and the reported scores are
the graders applied to the answers written to the samples file."""

import json
from pathlib import Path

import pytest
import torch

from lcsb_core.data import gsm8k_to_chat
from lcsb_core.eval.graded import GradedEvaluator
from lcsb_core.eval.graders import grade_all
from lcsb_core.eval.samples import read_samples
from lcsb_core.training.config import TrainConfig
from lcsb_core.training.setup import load_components

pytestmark = pytest.mark.integration
GSM8K = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "gsm8k"


def test_base_and_changed_adapter_answer_differently_and_scores_are_the_graders(tmp_path):
    rows = (GSM8K / "test.jsonl").read_text().splitlines()[:4]
    valid = tmp_path / "valid.jsonl"
    valid.write_text("".join(json.dumps(gsm8k_to_chat(json.loads(r))) + "\n" for r in rows))
    cfg = TrainConfig.from_dict({
        "data": {"train_file": str(valid), "validation_file": str(valid), "max_seq_len": 256},
        "model": {"name_or_path": "SmolLM2-135M-Instruct", "quantization": "nf4", "device": "cpu"},
        "eval": {"graders": [{"type": "numeric"}, {"type": "regex", "pattern": r"\d"},
                             {"type": "contains", "value": "eggs", "case_sensitive": False}],
                 "n_samples": 4, "max_new_tokens": 6},
        "output_dir": str(tmp_path / "run")})
    model, tokenizer, _ = load_components(cfg)
    evaluator = GradedEvaluator(cfg.eval, read_samples(valid, 4), tokenizer, tmp_path / "run")
    with model.disable_adapter():
        base_scores = evaluator.evaluate(model, 0, base=True)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # a changed adapter: LoRA B away from zero, as training moves it
        for name, p in model.named_parameters():
            if ".lora_B." in name:
                p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    scores = evaluator.evaluate(model, 1)
    run = tmp_path / "run"
    base_rows = [json.loads(x) for x in (run / "eval_samples" / "step-000000.jsonl").read_text().splitlines()]
    rows = [json.loads(x) for x in (run / "eval_samples.jsonl").read_text().splitlines()]
    assert [r["base_answer"] for r in rows] == [r["answer"] for r in base_rows]
    assert any(r["answer"] != r["base_answer"] for r in rows), rows
    assert all(r["answer"].strip() for r in rows)  # the model answered (a template or stop-id bug gives "")
    assert rows[0]["prompt"].endswith("<|im_start|>assistant\n") and "Janet" in rows[0]["prompt"]
    refs = [r["reference"] for r in rows]
    for answers, got, written in (([r["answer"] for r in base_rows], base_scores, base_rows),
                                  ([r["answer"] for r in rows], scores, rows)):
        grades, means = grade_all(cfg.eval.parsed, answers, refs)
        assert means == got and [r["grades"] for r in written] == grades
    assert model.training  # back in train mode, as the trainer left it
