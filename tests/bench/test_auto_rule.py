"""bench/auto_rule.py's arithmetic (issue 47): the threshold fit stated in its docstring, the probe share
(the product's own `SwitchSchedule.lower_share`), the share of full backprop's gain and the time to 95 %
of it, on hand-made result files."""

from __future__ import annotations

import pytest

from bench.auto_rule import fit_threshold, fit_threshold_bounded, gain_kept, probe_share, time_to_keep


def test_the_fit_puts_the_threshold_between_the_two_kinds_or_above_what_switched():
    shares = {"a": 0.70, "b": 0.90}
    assert fit_threshold(shares, {"a": 0.97, "b": 0.90}) == pytest.approx(0.80)  # midway to the one that failed
    assert fit_threshold(shares, {"a": 0.97, "b": 0.96}) == pytest.approx(0.92)  # above the highest that held
    assert fit_threshold(shares, {"a": 0.90, "b": 0.90}) == 0.0  # none held: never switch
    # one that failed below one that held: no threshold separates them; above the highest that held
    assert fit_threshold({"a": 0.88, "b": 0.92}, {"a": 0.93, "b": 0.97}) == pytest.approx(0.94)


def test_the_second_rule_switches_only_below_every_share_that_failed():
    shares = {"a": 0.70, "b": 0.90}
    assert fit_threshold_bounded(shares, {"a": 0.97, "b": 0.90}) == pytest.approx(0.80)  # midway, as the first
    assert fit_threshold_bounded(shares, {"a": 0.97, "b": 0.96}) == pytest.approx(0.72)  # none failed: lowest held
    assert fit_threshold_bounded(shares, {"a": 0.90, "b": 0.90}) == 0.0  # none held: never switch
    # one that failed below one that held (Code Alpaca under GSM8K): below the one that failed
    assert fit_threshold_bounded({"a": 0.88, "b": 0.92}, {"a": 0.93, "b": 0.97}) == pytest.approx(0.86)
    # the three datasets' seed 0-1 means (BENCHMARKS.md): midway between WikiText-2 and Code Alpaca
    three = {"code_alpaca": 0.8765, "gsm8k": 0.919, "wikitext": 0.739}
    assert fit_threshold_bounded(three, {"code_alpaca": 0.936, "gsm8k": 0.973, "wikitext": 0.968}) == pytest.approx(
        (0.739 + 0.8765) / 2)


def run(label: str, losses: list[float], norms=None, steps: int = 100) -> dict:
    return {"label": label, "spec": {"schedule": label, "steps": steps, "seed": 0, "fraction": 0.25},
            "num_layers": 8, "name": label, "layer_grad_norms": norms or [],
            "evals": [{"step": 25 * i, "eval_loss": v} for i, v in enumerate(losses)]}


def test_probe_share_is_the_lower_layers_share_of_the_squared_norm_of_the_first_steps():
    rows = [[1.0] * 6 + [2.0, 2.0]] * 3 + [[0.0] * 6 + [1.0, 1.0]]  # below the top 2: 6 of 14, then 0
    assert probe_share(run("full", [2.0], rows)) == pytest.approx((3 * 6 / 14 + 0.0) / 4)
    assert probe_share(run("tail", [2.0], rows)) is None and probe_share(run("full", [2.0], rows[:3])) is None


def test_gain_kept_and_time_to_95_percent_of_full_backprops_gain():
    full = run("full", [2.0, 1.5, 1.2, 1.05, 1.0])
    tail = run("tail", [2.0, 1.6, 1.3, 1.1, 1.04])
    assert gain_kept(tail, full, 100) == pytest.approx(0.96)
    step_s = {"full": 1.0, "tail": 0.75}
    # 95 % of full's gain is loss 1.05: full reaches it at step 75 (0.75 of its time); tail between step 75
    # (1.1) and 100 (1.04), at step 75 + 25 * (0.05 / 0.06), times 0.75 of full's step
    assert time_to_keep(full, full, 100, step_s) == pytest.approx(0.75)
    assert time_to_keep(tail, full, 100, step_s) == pytest.approx((75 + 25 * 0.05 / 0.06) * 0.75 / 100)
    assert time_to_keep(run("tail", [2.0, 1.8, 1.6, 1.5, 1.4]), full, 100, step_s) is None
    # a run on the other compute path starts 0.002 higher: its gain counts from its own step-0 loss
    shifted = run("tail", [2.002, 1.602, 1.302, 1.102, 1.042])
    assert gain_kept(shifted, full, 100) == pytest.approx(0.96)
    assert time_to_keep(shifted, full, 100, step_s) == pytest.approx(time_to_keep(tail, full, 100, step_s))
