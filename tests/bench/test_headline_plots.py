"""bench/headline_plots.py's reading of result files, on hand-made ones: each schedule's share of full
backprop's gain and speed-up (an `auto` run at or above the threshold counted as full backprop's, below it
its own gain at probe-then-decision time), and the serving and batch-decoder series."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.headline_plots import batched_series, serving_series, speed_quality_points, step_fractions


def _run(folder: Path, label: str, seed: int, losses: tuple[float, float], decision: dict | None = None) -> None:
    run = {"label": label, "spec": {"schedule": label, "seed": seed, "steps": 100}, "model": "SmolLM2-135M-Instruct",
           "evals": [{"step": 0, "eval_loss": losses[0]}, {"step": 100, "eval_loss": losses[1]}],
           "steps": [], "schedule_decision": decision}
    (folder / f"{label.replace('/', 'N')}-s{seed}.json").write_text(json.dumps(run))


def test_step_fractions_take_each_schedule_from_the_first_table_that_has_it(tmp_path: Path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps([{"schedule": "full", "k": 30, "layers": 30, "step_s": 6.0},
                             {"schedule": "tail", "k": 8, "layers": 30, "step_s": 4.8},
                             {"schedule": "forward", "k": 30, "layers": 30, "step_s": 3.0}]))
    b.write_text(json.dumps({"rows": [{"schedule": "full", "k": 30, "layers": 30, "step_s": 5.0},
                                      {"schedule": "tail", "k": 8, "layers": 30, "step_s": 1.0},
                                      {"schedule": "split", "k": 8, "layers": 30, "step_s": 4.0}]}))
    assert step_fractions([a, b]) == pytest.approx({"full": 1.0, "tail": 0.8, "split": 0.8})


def test_points_share_of_full_gain_and_speed_up_with_auto_at_the_threshold(tmp_path: Path):
    text, chat = tmp_path / "text", tmp_path / "chat"
    text.mkdir()
    chat.mkdir()
    for seed in (0, 1):
        _run(text, "full", seed, (4.0, 3.0))
        _run(chat, "full", seed, (2.0, 1.0))
    _run(text, "tail", 0, (4.0, 3.04))  # 96 %
    _run(text, "tail", 1, (4.0, 3.02))  # 98 %
    _run(text, "tail", 2, (4.0, 3.5))  # no full run of seed 2: left out
    _run(text, "auto", 0, (4.0, 3.05), {"lower_share": 0.73, "probe_steps": 4, "schedule": "tail"})
    _run(chat, "auto", 0, (2.0, 1.1), {"lower_share": 0.88, "probe_steps": 4, "schedule": "tail"})  # stays full
    points = {(p.dataset, p.schedule): p for p in speed_quality_points(tmp_path, 100, {"full": 1.0, "tail": 0.75},
                                                                        threshold=0.808)}
    assert points["text", "tail"].kept == pytest.approx(0.97)
    assert points["text", "tail"].speedup == pytest.approx(1 / 0.75)
    assert points["text", "tail"].seeds == 2
    assert points["text", "auto"].kept == pytest.approx(0.95)
    assert points["text", "auto"].speedup == pytest.approx(100 / (4 + 96 * 0.75))
    assert (points["chat", "auto"].kept, points["chat", "auto"].speedup) == (1.0, 1.0)
    assert points["chat", "full"].kept == 1.0


def test_serving_and_batched_series(tmp_path: Path):
    serving, batched = tmp_path / "serving.json", tmp_path / "batched.json"
    serving.write_text(json.dumps({"max_sequences": {
        "8": {"one_stream_tokens_per_s": 63.7, "same_adapter_tokens_per_s": 110.7},
        "1": {"one_stream_tokens_per_s": 58.8, "same_adapter_tokens_per_s": 65.3}}}))
    batched.write_text(json.dumps({"tok_per_s": {"16": 112.8, "1": 77.9, "4": 96.3}}))
    assert serving_series(serving) == {1: (58.8, 65.3), 8: (63.7, 110.7)}
    assert list(serving_series(serving)) == [1, 8]
    assert batched_series(batched) == {1: 77.9, 4: 96.3, 16: 112.8}
    assert list(batched_series(batched)) == [1, 4, 16]
