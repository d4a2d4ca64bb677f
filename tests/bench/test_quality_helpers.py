"""The benchmark's GSM8K scoring (the product's graders) and curve arithmetic (bench/quality.py,
bench/common/curves.py, bench/quality_report.py, bench/schedule_decision.py)."""

from __future__ import annotations

import math

import pytest

from bench import quality
from bench import quality_report as report
from bench import schedule_decision as decide
from bench.common import curves
from bench.common.paths import DATA
from lcsb_core.eval import graders

JANET = "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\nShe makes 9 * 2 = $<<9*2=18>>18 every day.\n#### 18"


@pytest.mark.parametrize("answer, reference, correct", [
    ("She has 16 - 3 - 4 = 9 eggs.\n#### 18", JANET, True),
    ("#### 1,234", "#### 1234", True),
    ("so -5 left\n####-5", "#### -5", True),
    ("#### 18.0 dollars", JANET, True),
    ("#### 17", JANET, False),
    ("The answer is 18.", JANET, False),  # no `####` line: the numeric grader alone would give 1.0
    ("", JANET, False),
    ("#### 18\n\nQuestion: And on Sunday?\nAnswer: #### 5", JANET, True),  # graded on its first `####`
    # where the product's graders read differently from the benchmark's own regex before 2026-12-06
    # (bench/LOG.md): a `$` or U+2212 before the number, grouping that is no grouping, a fraction
    ("#### $18", JANET, True),
    ("#### \u22125", "#### -5", True),
    ("#### 1,0000", "#### 10000", False),
    ("#### 3/4", "#### 3", False),
])
def test_gsm8k_exact_match_is_the_product_graders_score(answer, reference, correct):
    oks, means = quality.gsm8k_grades([answer], [reference])
    assert oks == [correct]
    product = graders.grade_all(quality.GSM8K_GRADERS, [quality.first_final_answer(answer)], [reference])[1]
    assert means == product
    assert set(means) == {"grader/final_line", "grader/numeric"}
    assert correct == (min(means.values()) == 1.0)


def test_gsm8k_exact_match_follows_the_product_numeric_grader(monkeypatch):
    """The benchmark has no number reading of its own: change the product's and its scores change."""
    assert quality.gsm8k_grades(["#### 17"], [JANET])[0] == [False]
    monkeypatch.setattr(graders, "extract_number", lambda text: 42.0)
    assert quality.gsm8k_grades(["#### 17"], [JANET]) == ([True], {"grader/final_line": 1.0, "grader/numeric": 1.0})
    assert quality.gsm8k_grades(["The answer is 17."], [JANET])[1] == {"grader/final_line": 0.0,
                                                                         "grader/numeric": 1.0}


def test_the_product_grader_reads_real_gsm8k_references():
    import json

    lines = (DATA / "gsm8k" / "test.jsonl").read_text().splitlines()[:50]
    rows = [json.loads(line) for line in lines]
    numbers = [graders.extract_number(r["answer"]) for r in rows]
    assert all(n is not None for n in numbers)
    assert numbers[0] == 18.0  # Janet's ducks: (16 - 3 - 4) * 2
    assert quality.gsm8k_grades([r["answer"] for r in rows], [r["answer"] for r in rows])[0] == [True] * 50


def test_time_to_reach_interpolates_first_crossing():
    curve = [(0.0, 2.0), (10.0, 1.6), (20.0, 1.2), (30.0, 1.3)]
    assert curves.time_to_reach(curve, 1.4) == pytest.approx(15.0)
    assert curves.time_to_reach(curve, 2.5) == 0.0
    assert curves.time_to_reach(curve, 1.0) is None
    assert curves.time_to_reach([(0.0, 2.0), (5.0, 1.0)], 1.0) == pytest.approx(5.0)


def test_value_at_time_and_mean_sd():
    curve = [(0.0, 2.0), (10.0, 1.0)]
    assert curves.value_at_time(curve, 2.5) == pytest.approx(1.75)
    assert curves.value_at_time(curve, 11.0) is None
    assert curves.mean_sd([1.0, 3.0], "{:.1f}") == f"2.0 ± {math.sqrt(2):.1f}"
    assert curves.mean_sd([1.5], "{:.2f}") == "1.50"


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


def _lr_run(label, lr, evals, steps):
    run = _run(label.split("/")[0].split("@")[0], 0, evals, 1.0, steps)
    run["spec"]["lr"], run["label"] = lr, label
    return run


STEP_ROWS = [{"schedule": "forward", "k": 30, "layers": 30, "step_s": 1.0},
             {"schedule": "full", "k": 30, "layers": 30, "step_s": 3.0},
             {"schedule": "top", "k": 8, "layers": 30, "step_s": 1.5},      # 2.0x
             {"schedule": "topfull/4", "k": 8, "layers": 30, "step_s": 2.0},  # 1.5x
             {"schedule": "freeze", "k": 8, "layers": 30, "step_s": 2.5}]     # 1.2x: below the rule


def test_decision_takes_each_schedule_at_its_best_lr_and_applies_the_speed_rule():
    runs = [_lr_run("full", 2e-4, [(0, 2.0), (12, 1.2)], 12), _lr_run("full", 8e-4, [(0, 2.0), (12, 1.0)], 12),
            _lr_run("top", 2e-4, [(0, 2.0), (12, 1.5), (24, 1.3)], 24),
            _lr_run("top", 8e-4, [(0, 2.0), (12, 1.4), (24, 1.2)], 24),
            _lr_run("topfull/4", 8e-4, [(0, 2.0), (12, 1.1), (24, 0.9)], 24),
            _lr_run("freeze", 8e-4, [(0, 2.0), (12, 1.05), (24, 0.5)], 24)]
    rows, default = decide.decision(runs, 12, STEP_ROWS)
    by = {r["schedule"]: r for r in rows}
    assert by["full"]["best_lr"] == 8e-4 and by["top"]["best_lr"] == 8e-4
    assert by["top"]["recovered"] == pytest.approx((2.0 - 1.4) / (2.0 - 1.0))
    assert by["top"]["speed"] == pytest.approx(2.0) and by["top"]["eval_loss_at_full_time"] == pytest.approx(1.2)
    # topfull/4 at 1.5x: full's 12-step time is 18 of its steps, halfway from 1.1 to 0.9
    assert by["topfull/4"]["eval_loss_at_full_time"] == pytest.approx(1.0)
    assert by["freeze"]["speed"] == pytest.approx(1.2)
    assert default == "topfull/4"  # freeze is better at that time but slower than the 1.35x rule allows
    table = decide.decision_table(rows, default, 12)
    assert "| topfull/4 (default) | n/a | 1.1000 | 0.0008 | 90% | 1.50x | 1.0000 | 1.00 |" in table
    # it reaches full's final loss (1.0) at its step 18, i.e. 18 / 1.5 = 12 full steps: 1.00x full's time
    assert by["topfull/4"]["time_to_full_loss"] == pytest.approx(1.0)
    assert by["top"]["time_to_full_loss"] is None  # never reaches 1.0 within its 24 steps


def test_where_no_schedule_reaches_the_bar_the_rule_ranks_those_faster_than_full():
    slow = [{**r, "step_s": {"top": 2.5, "topfull/4": 2.8, "freeze": 3.5}.get(r["schedule"], r["step_s"])}
            for r in STEP_ROWS]  # top 1.2x, topfull/4 1.07x, freeze 0.86x: none >= 1.35x
    runs = [_lr_run("full", 8e-4, [(0, 2.0), (12, 1.0)], 12),
            _lr_run("top", 8e-4, [(0, 2.0), (12, 1.4), (24, 1.2)], 24),
            _lr_run("topfull/4", 8e-4, [(0, 2.0), (12, 1.1), (24, 0.9)], 24),
            _lr_run("freeze", 8e-4, [(0, 2.0), (12, 0.5), (24, 0.4)], 24)]
    rows, default = decide.decision(runs, 12, slow)
    by = {r["schedule"]: r for r in rows}
    assert by["top"]["eval_loss_at_full_time"] > by["topfull/4"]["eval_loss_at_full_time"]
    assert by["freeze"]["eval_loss_at_full_time"] < by["topfull/4"]["eval_loss_at_full_time"]
    assert default == "topfull/4"  # freeze is best at that time but slower than full backprop
    assert decide.decision(runs[:1], 12, slow)[1] is None  # full alone: nothing to choose


def test_step_rows_with_options_after_a_plus_read_as_their_schedule():
    chunked = [{**r, "schedule": r["schedule"] + "+chunk16"} for r in STEP_ROWS]
    assert [decide.speed_vs_full(chunked, s) for s in ("full", "top", "topfull/4", "freeze", "split")] == \
        [decide.speed_vs_full(STEP_ROWS, s) for s in ("full", "top", "topfull/4", "freeze", "split")] == \
        [1.0, 2.0, 1.5, 1.2, None]
    recompute = [{**STEP_ROWS[3], "schedule": "topfull/4+chunk16+recompute", "step_s": 9.0}, *chunked]
    assert decide.speed_vs_full(recompute, "topfull/4") == 1.5  # another configuration, not topfull/4


def _seed_run(label, seed, evals, steps):
    run = _lr_run(label, 8e-4, evals, steps)
    run["spec"]["seed"] = seed
    return run


def test_confirmation_measures_each_seed_against_its_own_full_and_anchors_equal_time_at_steps():
    runs = [_seed_run("full", 0, [(0, 2.0), (12, 1.0), (16, 0.9)], 16),  # anchored at 12, not its last eval
            _seed_run("topfull/4", 0, [(0, 2.0), (12, 1.2), (24, 1.0)], 24),
            _seed_run("full", 1, [(0, 2.0), (12, 1.2)], 12),
            _seed_run("topfull/4", 1, [(0, 2.0), (12, 1.4), (24, 1.1)], 24),
            _seed_run("top", 0, [(0, 2.0), (12, 1.5)], 12)]  # seed 0 only: left out
    rows = decide.confirmation(runs, 12, STEP_ROWS)
    assert [r["schedule"] for r in rows] == ["full", "topfull/4"]
    tf = rows[1]
    assert tf["seeds"] == [0, 1]
    assert tf["recovered"] == pytest.approx([(2.0 - 1.2) / (2.0 - 1.0), (2.0 - 1.4) / (2.0 - 1.2)])
    # at 1.5x its steps, full's 12-step time is its step 18: halfway between the step-12 and step-24 evals
    assert tf["eval_loss_at_full_time"] == pytest.approx([1.1, 1.25])
    assert tf["full_at_full_time"] == pytest.approx([1.0, 1.2])
    # seed 0 reaches full's 1.0 at its step 24 = 16 full steps = 1.33x; seed 1 reaches full's 1.2 at step 20
    assert tf["time_to_full_loss"] == pytest.approx([24 / 1.5 / 12, (12 + 12 * 0.2 / 0.3) / 1.5 / 12])
    table = decide.confirmation_table(rows, 12)
    assert "| topfull/4 | 0, 1 | 1.3000 ± 0.1414 (1.2000, 1.4000) | 77.5 % ± 3.5 % (80.0 %, 75.0 %) |" in table
    assert "| 1.1750 ± 0.1061 (1.1000, 1.2500) | +7.1 % ± 4.1 % (+10.0 %, +4.2 %) | 1.22 ± 0.16 (1.33, 1.11) |" in table


def test_confirmation_table_bounds_the_time_of_a_seed_that_never_reaches_fulls_loss():
    runs = [_seed_run("full", 0, [(0, 2.0), (12, 1.0)], 12),
            _seed_run("topfull/4", 0, [(0, 2.0), (12, 1.2), (24, 1.1)], 24)]  # never reaches 1.0
    rows = decide.confirmation(runs, 12, STEP_ROWS)
    assert rows[1]["time_to_full_loss"] == [None] and rows[1]["covers"] == pytest.approx([24 / 1.5 / 12])
    assert "| not reached in > 1.33 |" in decide.confirmation_table(rows, 12)


def test_paper_claim_reports_the_papers_relative_gap_the_gain_share_and_the_paired_train_gap():
    full = _lr_run("full", 1e-4, [(0, 3.0), (4, 2.0)], 4)
    cyc = _lr_run("cyclic", 1e-4, [(0, 3.0), (4, 2.1)], 4)
    for i, (f, c) in enumerate(zip(full["steps"], cyc["steps"], strict=True)):
        f["loss"], c["loss"] = 2.5 - 0.1 * i, 2.6 - 0.1 * i  # cyclic 0.1 nats above full at every step
    rows = decide.paper_claim([cyc, full], 4, last=2)
    assert [r["schedule"] for r in rows] == ["full", "cyclic"]
    row = rows[1]
    assert row["relative_gap"] == pytest.approx(2.1 / 2.0 - 1)          # 5 %
    assert row["recovered"] == pytest.approx((3.0 - 2.1) / (3.0 - 2.0))  # 90 %
    assert row["train_gap"] == pytest.approx(0.1)                         # over the last 2 steps only
    assert row["train_gap_rel"] == pytest.approx(0.1 / 2.25)
    table = decide.paper_table(rows, 4, last=2)
    assert "| cyclic | 8/30 | 2.1000 (8.17) | +5.00% | 90.0% | 2.3500 | +0.1000 (+4.44%) |" in table
    stopped = _lr_run("cyclic@0.5", 1e-4, [(0, 3.0), (4, 2.5)], 5)  # a stopped run's partial file: no k, L
    del stopped["k"], stopped["num_layers"]
    stopped.update(partial=True, spec={**stopped["spec"], "fraction": 0.5})
    rows = decide.paper_claim([cyc, full, stopped], 4, last=2)
    table = decide.paper_table(rows, 4)
    assert "| cyclic@0.5 (stopped at step 5) | 0.5 L | 2.5000 (12.18) | +25.00% | 50.0% |" in table
    with pytest.raises(ValueError, match="step 4"):
        decide.paper_claim([cyc], 4)


def test_train_curve_table_averages_windows_and_leaves_a_stopped_runs_cells_empty():
    full = _lr_run("full", 1e-4, [(0, 3.0), (4, 2.0)], 4)
    for i, s in enumerate(full["steps"]):
        s["loss"] = 4.0 - i  # 4, 3, 2, 1
    short = _lr_run("cyclic", 1e-4, [(0, 3.0)], 2)
    table = decide.train_curve_table([short, full], width=2)
    assert "| schedule | 1-2 | 3-4 |" in table
    assert "| full | 3.50 | 1.50 |" in table and "| cyclic | 1.00 |  |" in table
