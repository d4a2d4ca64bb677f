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


def test_the_report_gives_auto_per_seed_at_the_products_threshold(tmp_path):
    """A probe share at or above `SWITCH_THRESHOLD` keeps `auto` at full depth (its run is full backprop's,
    100 %, whether or not a 100-step run exists); below it, the switched `auto` run of that seed is measured
    against full's run of that seed, from each run's own step-0 loss."""
    import json

    from bench.auto_rule import report
    from lcsb_core.training.default_schedule import SWITCH_THRESHOLD

    tau = SWITCH_THRESHOLD["SmolLM2-135M-Instruct"]
    high = [[1.0] * 22 + [0.1] * 8] * 4  # below the top 8 of 30: almost all of the squared norm
    low = [[0.1] * 22 + [1.0] * 8] * 4
    share_low = 22 * 0.01 / (22 * 0.01 + 8)
    assert share_low < tau < 22 / (22 + 8 * 0.01)

    def write(folder, name, label, seed, steps, losses, norms=None, decision=None, dtype="bfloat16"):
        (tmp_path / folder).mkdir(exist_ok=True)
        body = {"label": label, "spec": {"schedule": label, "steps": steps, "seed": seed, "fraction": 0.25},
                "num_layers": 30, "name": name, "layer_grad_norms": norms or [], "compute_dtype": dtype,
                "schedule_decision": decision, "model": "SmolLM2-135M-Instruct",
                "evals": [{"step": 25 * i, "eval_loss": v} for i, v in enumerate(losses)]}
        (tmp_path / folder / f"{name}.json").write_text(json.dumps(body))

    write("chat", "probe-s2", "full", 2, 4, [2.0], high)  # a probe alone: full depth
    write("text", "full-s0", "full", 0, 100, [2.0, 1.5, 1.2, 1.05, 1.0], low)
    write("text", "auto-s0", "auto", 0, 100, [2.002, 1.602, 1.302, 1.102, 1.042], decision={"schedule": "tail"},
          dtype="float32")
    out = report(tmp_path, 100, {"full": 1.0, "tail": 0.75}, None)
    assert "| chat | 2 | 0.996 | full | 100.0% | 1.00 |" in out
    assert f"| text | 0 | {share_low:.3f} | tail | 96.0% | 0.76 |" in out  # 4 steps at full's time, 96 at tail's
    assert "chat: lower-layer share of the first 4 steps seed 2: 0.996; mean 0.996 (no 100-step run)" in out
    assert "| auto | 0 fp32 | 96.0% (mean 96.0%)" in out
