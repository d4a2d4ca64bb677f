"""The product-default rule of the schedules issue, applied to `bench/quality.py` runs and a
`bench/step_time.py` table: each schedule at its best learning rate, its share of full backprop's gain,
its eval loss at full backprop's wall-clock time, and the default the rule picks. Run through
`bench/quality_report.py decision` (see that module's usage); the curve arithmetic is quality_report's.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.quality_report import eval_at, time_to_reach, value_at_time

SPEED_RULE = 1.35
"""The product default must be at least this much faster per step than full backprop (issue: schedules)."""


def label_of(run: dict) -> str:
    """A run's schedule token (`topfull/4`, `cyclic@0.5`, ...); older result files have only `schedule`."""
    return run.get("label", run["spec"]["schedule"])


def speed_vs_full(step_rows: list[dict], label: str) -> float | None:
    """full's step time / the schedule's, from `bench/step_time.py` rows (k/L = 0.25 unless the label
    says `@fraction`); None if the table lacks the row."""
    name, _, frac = label.partition("@")
    full = next((r for r in step_rows if r["schedule"] == "full"), None)
    k_of = lambda r: r["k"] / r["layers"]  # noqa: E731
    want = float(frac) if frac else 0.25
    row = next((r for r in step_rows if r["schedule"] == name
                and (name == "full" or abs(k_of(r) - want) < 0.5 / r["layers"] + 1e-9)), None)
    return full["step_s"] / row["step_s"] if full and row else None


def decision(runs: list[dict], steps: int, step_rows: list[dict]) -> tuple[list[dict], str | None]:
    """Each schedule at its own best learning rate (lowest eval loss at `steps`), with the share of full
    backprop's gain it recovers at `steps` (full also at its best lr), its speed per step, and two
    equal-time views anchored at full backprop's *last* evaluation (step F, its final eval loss):
    - `eval_loss_at_full_time`: the schedule's eval loss at F * speed of its own steps (linear between
      evaluations; None past the run's end);
    - `time_to_full_loss`: the time it needs to reach full's final loss, as a fraction of full's F
      steps (its interpolated step / speed / F; None if never reached within the run).
    Time is counted in steps times the side-by-side step-time ratio, not in the runs' own seconds, so
    other jobs sharing the machine during the grid do not enter. Returns the rows and the default by
    the rule: lowest equal-time eval loss among schedules >= `SPEED_RULE`x faster (a schedule without
    an equal-time value cannot be chosen)."""
    by_label: dict[str, dict[float, dict]] = defaultdict(dict)
    for r in runs:
        if r["spec"]["momentum"] and not r["spec"]["repacking"] and eval_at(r, steps):
            prev = by_label[label_of(r)].get(r["spec"]["lr"])
            if prev is None or r["spec"]["steps"] > prev["spec"]["steps"]:  # the longer run has both views
                by_label[label_of(r)][r["spec"]["lr"]] = r
    base = next(e["eval_loss"] for rs in by_label.values() for r in rs.values() for e in r["evals"] if e["step"] == 0)
    rows = []
    for label, per_lr in by_label.items():
        losses = {lr: eval_at(r, steps)["eval_loss"] for lr, r in per_lr.items()}
        best_lr = min(losses, key=lambda lr: losses[lr])
        rows.append({"schedule": label, "best_lr": best_lr, "losses": losses, "eval_loss": losses[best_lr],
                     "speed": speed_vs_full(step_rows, label), "run": per_lr[best_lr],
                     "steps_run": per_lr[best_lr]["spec"]["steps"]})
    full = next((r for r in rows if r["schedule"] == "full"), None)
    final_step = full["run"]["evals"][-1]["step"] if full else steps
    final_loss = full["run"]["evals"][-1]["eval_loss"] if full else None
    for r in rows:
        r["recovered"] = (base - r["eval_loss"]) / (base - full["eval_loss"]) if full else None
        curve = [(e["step"], e["eval_loss"]) for e in r.pop("run")["evals"]]
        r["eval_loss_at_full_time"] = value_at_time(curve, final_step * r["speed"]) if r["speed"] else None
        reach = time_to_reach(curve, final_loss) if final_loss is not None and r["speed"] else None
        r["time_to_full_loss"] = reach / r["speed"] / final_step if reach is not None else None
    ok = [r for r in rows if r["speed"] and r["speed"] >= SPEED_RULE and r["eval_loss_at_full_time"] is not None]
    default = min(ok, key=lambda r: r["eval_loss_at_full_time"])["schedule"] if ok else None
    return rows, default


def decision_table(rows: list[dict], default: str | None, steps: int) -> str:
    """Markdown of `decision`'s rows."""
    lrs = sorted({lr for r in rows for lr in r["losses"]})
    out = ["| schedule | " + " | ".join(f"eval loss @{steps}, lr {lr:g}" for lr in lrs)
           + " | best lr | gain recovered | step speed vs full | eval loss at full's time "
             "| time to full's loss (x full's) |",
           "|---|" + "---|" * (len(lrs) + 5)]
    show = lambda v, f: f.format(v) if v is not None else "n/a"  # noqa: E731
    for r in sorted(rows, key=lambda r: r["eval_loss"]):
        out.append(f"| {r['schedule']}{' (default)' if r['schedule'] == default else ''} | "
                   + " | ".join(show(r["losses"].get(lr), "{:.4f}") for lr in lrs)
                   + f" | {r['best_lr']:g} | {show(r['recovered'], '{:.0%}')} | {show(r['speed'], '{:.2f}x')} | "
                   + f"{show(r['eval_loss_at_full_time'], '{:.4f}')} | {show(r['time_to_full_loss'], '{:.2f}')} |")
    return "\n".join(out)
