"""Arithmetic on the quality runs' curves (the result files of bench/quality.py: every evaluation with
the training seconds spent so far): reading a run folder, a run's evaluation at a step, the time a
piecewise-linear curve first reaches a loss, its value at a time, and `mean ± sd` cells. Used by
bench/quality_report.py and bench/schedule_decision.py."""

from __future__ import annotations

import json
import statistics
from pathlib import Path


def load_runs(folder: Path) -> list[dict]:
    """Every run result (`*.json`) in `folder`. A run marked `clean_steps` (its later steps were timed
    while another process shared the CPU; see its `note`) is cut to its first `clean_steps` steps. A
    `<name>.partial.json` (the evaluations so far of a run stopped by a time limit; marked `partial`) is
    read only when its run has no complete file."""
    paths = sorted(Path(folder).glob("*.json"))
    done = {p.name for p in paths if not p.name.endswith(".partial.json")}
    runs = [json.loads(p.read_text()) for p in paths
            if not p.name.endswith(".partial.json") or p.name.replace(".partial.json", ".json") not in done]
    for r in runs:
        if "clean_steps" in r:
            n = r["clean_steps"]
            r["steps"] = r["steps"][:n]
            r["evals"] = [e for e in r["evals"] if e["step"] <= n]
    return runs


def eval_at(run: dict, step: int) -> dict | None:
    """The run's evaluation after exactly `step` optimizer steps, or None."""
    return next((e for e in run["evals"] if e["step"] == step), None)


def eval_of(run: dict, step: int) -> dict:
    """The run's evaluation after exactly `step` optimizer steps; raises ValueError naming the run and the
    step when it has none (a table that needs that evaluation cannot be made from this run)."""
    found = eval_at(run, step)
    if found is None:
        raise ValueError(f"run {run.get('name', '?')} has no evaluation at step {step}")
    return found


def seconds_at(run: dict, step: int) -> float:
    """Training seconds spent by the end of `step` (sum of step times)."""
    return sum(s["step_time_s"] for s in run["steps"][:step])


def time_to_reach(curve: list[tuple[float, float]], target: float) -> float | None:
    """First time a piecewise-linear (seconds, eval loss) curve reaches `target` or below; None if never.

    >>> time_to_reach([(0, 2.0), (10, 1.0)], 1.5)
    5.0
    """
    for (t0, y0), (t1, y1) in zip(curve, curve[1:], strict=False):
        if y0 <= target:
            return t0
        if y1 <= target:
            return t0 + (t1 - t0) * (y0 - target) / (y0 - y1)
    return curve[-1][0] if curve and curve[-1][1] <= target else None


def value_at_time(curve: list[tuple[float, float]], t: float) -> float | None:
    """The curve's value at time `t` by linear interpolation; None past its end."""
    for (t0, y0), (t1, y1) in zip(curve, curve[1:], strict=False):
        if t0 <= t <= t1:
            return y0 + (y1 - y0) * (t - t0) / (t1 - t0) if t1 > t0 else y1
    return None


def mean_sd(values: list[float], fmt: str = "{:.4f}") -> str:
    """`mean ± sd` (sample sd) or the single value."""
    if not values:
        return ""
    if len(values) == 1:
        return fmt.format(values[0])
    return f"{fmt.format(statistics.fmean(values))} ± {fmt.replace('+', '').format(statistics.stdev(values))}"


def curve(run: dict) -> list[tuple[float, float]]:
    """The run's (training seconds, eval loss) points, one per evaluation, in step order."""
    return [(e["train_s"], e["eval_loss"]) for e in run["evals"]]
