"""The benchmark's scoring and curve arithmetic (bench/quality.py, bench/quality_report.py)."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


quality = _load("quality")
report = _load("quality_report")


@pytest.mark.parametrize("text, expected", [
    ("She has 16 - 3 - 4 = 9 eggs.\n#### 18", "18"),
    ("#### 1,234", "1234"),
    ("so -5 left\n####-5", "-5"),
    ("#### 3.50 dollars", "3.50"),
    ("The answer is 18.", None),
    ("", None),
])
def test_extract_answer_reads_the_number_after_hashes(text, expected):
    assert quality.extract_answer(text) == expected


def test_answers_match_compares_numbers_not_strings():
    assert quality.answers_match("18", "18.0")
    assert quality.answers_match("1234", quality.extract_answer("#### 1,234"))
    assert not quality.answers_match("17", "18")
    assert not quality.answers_match(None, "18")


def test_extract_answer_on_real_gsm8k_rows():
    import json

    rows = [json.loads(line) for line in (BENCH.parents[1] / "shared/data/gsm8k/test.jsonl").read_text().splitlines()[:50]]
    answers = [quality.extract_answer(r["answer"]) for r in rows]
    assert all(a is not None for a in answers)
    assert answers[0] == "18"  # Janet's ducks: (16 - 3 - 4) * 2


def test_time_to_reach_interpolates_first_crossing():
    curve = [(0.0, 2.0), (10.0, 1.6), (20.0, 1.2), (30.0, 1.3)]
    assert report.time_to_reach(curve, 1.4) == pytest.approx(15.0)
    assert report.time_to_reach(curve, 2.5) == 0.0
    assert report.time_to_reach(curve, 1.0) is None
    assert report.time_to_reach([(0.0, 2.0), (5.0, 1.0)], 1.0) == pytest.approx(5.0)


def test_value_at_time_and_mean_sd():
    curve = [(0.0, 2.0), (10.0, 1.0)]
    assert report.value_at_time(curve, 2.5) == pytest.approx(1.75)
    assert report.value_at_time(curve, 11.0) is None
    assert report.mean_sd([1.0, 3.0], "{:.1f}") == f"2.0 ± {math.sqrt(2):.1f}"
    assert report.mean_sd([1.5], "{:.2f}") == "1.50"


def _run(schedule, seed, evals, step_time, steps):
    return {"spec": {"schedule": schedule, "seed": seed, "momentum": True, "repacking": False, "steps": steps,
                     "lr": 2e-4},
            "k": 8 if schedule != "full" else 30, "num_layers": 30, "peak_memory_mib": 1000.0,
            "evals": [{"step": s, "train_s": s * step_time, "eval_loss": loss, "eval_token_accuracy": 0.6}
                      for s, loss in evals],
            "steps": [{"step": i + 1, "loss": 1.0, "step_time_s": step_time, "peak_mib": 900.0} for i in range(steps)]}


def test_equal_steps_and_equal_time_tables_compare_against_full_of_the_same_seed():
    runs = [_run("full", 0, [(0, 1.8), (10, 1.5)], 2.0, 10),
            _run("cyclic", 0, [(0, 1.8), (10, 1.53), (20, 1.4)], 1.0, 20)]
    steps_table = report.equal_steps_table(runs, 10)
    assert "| LCSB cyclic | 8/30 | 1 | 1.5300 | +2.00 % |" in steps_table
    assert "| 1.000 |" in steps_table  # seconds per step of the cyclic run
    time_table = report.equal_time_table(runs, 10)
    # full reaches 1.5 after 20 s; cyclic crosses 1.5 at 10 + 10 * (1.53 - 1.5) / (1.53 - 1.4) s
    assert f"| {10 + 10 * 0.03 / 0.13:.0f} | {(10 + 10 * 0.03 / 0.13) / 20:.2f}x | 1.4000 |" in time_table
