"""The product-default rule of the schedules issue, applied to `bench/quality.py` runs and a
`bench/step_time.py` table: each schedule at its best learning rate, its share of full backprop's gain,
its eval loss at full backprop's wall-clock time, and the default the rule picks. Run through
`bench/quality_report.py decision` (see that module's usage); the curve arithmetic is `bench.common.curves`.
"""

from __future__ import annotations

import math
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common.curves import eval_at, eval_of, mean_sd, time_to_reach, value_at_time

_CHUNK = re.compile(r"\+chunk\d+$")

SPEED_RULE = 1.35
"""The product default must be at least this much faster per step than full backprop (issue: schedules)."""


def label_of(run: dict) -> str:
    """A run's schedule token (`topfull/4`, `cyclic@0.5`, ...); older result files have only `schedule`."""
    return run.get("label", run["spec"]["schedule"])


def speed_vs_full(step_rows: list[dict], label: str) -> float | None:
    """full's step time / the schedule's, from `bench/step_time.py` rows (k/L = 0.25 unless the label
    says `@fraction`; a row's `+chunkN` option is not part of its name, so one table should hold one
    chunk size; a row with other options, such as `+recompute`, is another configuration and never
    matches); None if the table lacks the row."""
    name, _, frac = label.partition("@")
    base = lambda r: _CHUNK.sub("", r["schedule"])  # noqa: E731  `full+chunk16` is `full`
    full = next((r for r in step_rows if base(r) == "full"), None)
    k_of = lambda r: r["k"] / r["layers"]  # noqa: E731
    want = float(frac) if frac else 0.25
    row = next((r for r in step_rows if base(r) == name
                and (name == "full" or abs(k_of(r) - want) < 0.5 / r["layers"] + 1e-9)), None)
    return full["step_s"] / row["step_s"] if full and row else None


def decision(runs: list[dict], steps: int, step_rows: list[dict],
             anchor: int | None = None) -> tuple[list[dict], str | None]:
    """Each schedule at its own best learning rate (lowest eval loss at `steps`), with the share of full
    backprop's gain it recovers at `steps` (full also at its best lr), its speed per step, and two
    equal-time views anchored at full backprop's *last* evaluation (step F, its final eval loss):
    - `eval_loss_at_full_time`: the schedule's eval loss at F * speed of its own steps (linear between
      evaluations; None past the run's end);
    - `time_to_full_loss`: the time it needs to reach full's final loss, as a fraction of full's F
      steps (its interpolated step / speed / F; None if never reached within the run).
    `anchor` moves the equal-time anchor from full's last evaluation to its evaluation at step `anchor`.
    Time is counted in steps times the side-by-side step-time ratio, not in the runs' own seconds, so
    other jobs sharing the machine during the grid do not enter. Returns the rows and the default by
    the rule: lowest equal-time eval loss among schedules >= `SPEED_RULE`x faster; on a model where none
    is (Gemma-3-270M, whose LM head every schedule runs in full), among the schedules faster than full
    backprop (`lcsb_core.training.default_schedule`). A schedule without an equal-time value cannot be chosen."""
    by_label: dict[str, dict[float, dict]] = defaultdict(dict)
    for r in runs:
        if r["spec"]["momentum"] and not r["spec"]["repacking"] and eval_at(r, steps):
            prev = by_label[label_of(r)].get(r["spec"]["lr"])
            if prev is None or r["spec"]["steps"] > prev["spec"]["steps"]:  # the longer run has both views
                by_label[label_of(r)][r["spec"]["lr"]] = r
    base = next(e["eval_loss"] for rs in by_label.values() for r in rs.values() for e in r["evals"] if e["step"] == 0)
    rows = []
    for label, per_lr in by_label.items():
        losses = {lr: eval_of(r, steps)["eval_loss"] for lr, r in per_lr.items()}
        best_lr = min(losses, key=lambda lr: losses[lr])
        rows.append({"schedule": label, "best_lr": best_lr, "losses": losses, "eval_loss": losses[best_lr],
                     "speed": speed_vs_full(step_rows, label), "run": per_lr[best_lr],
                     "steps_run": per_lr[best_lr]["spec"]["steps"]})
    full = next((r for r in rows if r["schedule"] == "full"), None)
    anchor_eval = (eval_at(full["run"], anchor) if anchor is not None else full["run"]["evals"][-1]) if full else None
    final_step = anchor_eval["step"] if anchor_eval else steps
    final_loss = anchor_eval["eval_loss"] if anchor_eval else None
    for r in rows:
        r["recovered"] = (base - r["eval_loss"]) / (base - full["eval_loss"]) if full else None
        curve = [(e["step"], e["eval_loss"]) for e in r.pop("run")["evals"]]
        r["eval_loss_at_full_time"] = value_at_time(curve, final_step * r["speed"]) if r["speed"] else None
        reach = time_to_reach(curve, final_loss) if final_loss is not None and r["speed"] else None
        r["time_to_full_loss"] = reach / r["speed"] / final_step if reach is not None else None
    timed = [r for r in rows if r["schedule"] != "full" and r["speed"] and r["eval_loss_at_full_time"] is not None]
    ok = [r for r in timed if r["speed"] >= SPEED_RULE] or [r for r in timed if r["speed"] > 1.0]
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


def confirmation(runs: list[dict], steps: int, step_rows: list[dict]) -> list[dict]:
    """The confirmation view of the decision, over seeds: `decision` applied to each seed's runs alone
    (each seed's gain is measured against full backprop of the *same* seed; equal time is anchored at
    full's evaluation at `steps`), then, per schedule present for every seed, the per-seed values in
    seed order. Seeds whose full backprop run has no evaluation at `steps` are left out. Returns rows
    with `schedule`, `seeds`, `eval_loss`, `recovered`, `eval_loss_at_full_time`, `full_at_full_time`
    (full's eval loss at `steps`, the equal-time anchor), `time_to_full_loss` and `covers` (the share
    of full's time that the run's steps cover), each a list over seeds (an entry is None where a seed
    lacks the value)."""
    by_seed: dict[int, list[dict]] = defaultdict(list)
    for r in runs:
        by_seed[r["spec"]["seed"]].append(r)
    # a seed counts once its full backprop run has reached `steps` (an unfinished grid leaves partial runs)
    by_seed = defaultdict(list, {s: rs for s, rs in by_seed.items()
                                 if any(label_of(r) == "full" and eval_at(r, steps) for r in rs)})
    out: dict[str, dict] = {}
    keys = ("eval_loss", "recovered", "eval_loss_at_full_time", "time_to_full_loss", "covers")
    for seed in sorted(by_seed):
        rows, _ = decision(by_seed[seed], steps, step_rows, anchor=steps)
        for row in rows:  # how much of full's time the run covers: its `time_to_full_loss` if never reached
            row["covers"] = row["steps_run"] / row["speed"] / steps if row["speed"] else None
        full_final = next((e["eval_loss"] for r in by_seed[seed] if label_of(r) == "full"
                           for e in [eval_at(r, steps)] if e), None)
        for row in rows:
            agg = out.setdefault(row["schedule"], {"schedule": row["schedule"], "seeds": [],
                                                   "full_at_full_time": [], **{k: [] for k in keys}})
            agg["seeds"].append(seed)
            agg["full_at_full_time"].append(full_final)
            for k in keys:
                agg[k].append(row[k])
    everywhere = [r for r in out.values() if len(r["seeds"]) == len(by_seed)]
    return sorted(everywhere, key=lambda r: (r["schedule"] != "full", r["schedule"]))


def confirmation_table(rows: list[dict], steps: int) -> str:
    """Markdown of `confirmation`'s rows: mean ± sd over seeds (sample sd), with the per-seed values."""
    def cell(values: list, fmt: str, scale: float = 1.0) -> str:
        vals = [v * scale for v in values if v is not None]
        missing = len(values) - len(vals)
        if not vals:
            return "n/a"
        per_seed = ", ".join(fmt.format(v) for v in vals)
        return mean_sd(vals, fmt) + (f" ({per_seed})" if len(vals) > 1 else "") + (
            f"; {missing} seed(s) n/a" if missing else "")

    def reach_cell(reach: list, covers: list) -> str:
        # a seed that never reached full's loss within its run: the time is more than the run covered
        never = [c for t, c in zip(reach, covers, strict=True) if t is None and c is not None]
        unknown = sum(t is None and c is None for t, c in zip(reach, covers, strict=True))
        reached = [t for t in reach if t is not None]
        parts = [cell(reached, "{:.2f}")] if reached else []
        if never:
            parts.append("not reached in " + ", ".join(f"> {c:.2f}" for c in never))
        if unknown:
            parts.append(f"{unknown} seed(s) n/a")
        return "; ".join(parts) or "n/a"

    out = [f"| schedule | seeds | eval loss @{steps} | gain recovered @{steps} | eval loss at full's time "
           "| vs full's final loss | time to full's loss (x full's) |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        gap = [None if a is None or f is None else a / f - 1
               for a, f in zip(r["eval_loss_at_full_time"], r["full_at_full_time"], strict=True)]
        out.append(f"| {r['schedule']} | {', '.join(map(str, r['seeds']))} | {cell(r['eval_loss'], '{:.4f}')} | "
                   f"{cell(r['recovered'], '{:.1f} %', 100)} | {cell(r['eval_loss_at_full_time'], '{:.4f}')} | "
                   f"{cell(gap, '{:+.1f} %', 100) if r['schedule'] != 'full' else ''} | "
                   f"{reach_cell(r['time_to_full_loss'], r['covers'])} |")
    return "\n".join(out)


def paper_claim(runs: list[dict], steps: int, last: int = 100) -> list[dict]:
    """The paper's claim at its own setting (issue 11 item 4; arXiv 2602.13073 reports LCSB within "< 2 %"
    of full backprop as a relative gap in final loss). For each run (one seed) that reached `steps`:
    `eval_loss` at `steps`; `relative_gap` = eval_loss / full's - 1 (the paper's metric); `recovered` =
    (base - eval_loss) / (base - full's), the share of full backprop's eval-loss gain, with `base` the
    step-0 evaluation; `train_gap` = the mean train loss (nats per target token) over the last `last`
    optimizer steps minus full backprop's over the same steps (the runs see the same batches in the same
    order, so the gap is paired step by step), and `train_gap_rel` that gap over full's mean. No speed:
    the runs' own step times depend on what shared the machine; speed comes from `bench/step_time.py`.
    Raises ValueError without a full backprop run that reached `steps`."""
    done = [r for r in runs if eval_at(r, steps) and len(r["steps"]) >= steps]
    full = next((r for r in done if label_of(r) == "full"), None)
    if full is None:
        raise ValueError(f"no full backprop run reached step {steps}")
    base = eval_of(full, 0)["eval_loss"]
    full_loss = eval_of(full, steps)["eval_loss"]
    tail = lambda r: [s["loss"] for s in r["steps"][steps - last:steps]]  # noqa: E731
    full_train = statistics.fmean(tail(full))
    rows = []
    for r in sorted(done, key=lambda r: (label_of(r) != "full", label_of(r))):
        loss = eval_of(r, steps)["eval_loss"]
        train = statistics.fmean(tail(r))
        # a stopped run's partial file lacks k and L: its fraction of L stands in
        k_of_l = (f"{r['k']}/{r['num_layers']}" if r.get("k") else "L" if label_of(r) == "full"
                  else f"{r['spec']['fraction']:g} L")
        stopped_at = len(r["steps"]) if r.get("partial") else None
        rows.append({"schedule": label_of(r), "k_of_l": k_of_l, "stopped_at": stopped_at,
                     "eval_loss": loss, "relative_gap": loss / full_loss - 1,
                     "recovered": (base - loss) / (base - full_loss), "train_loss_last": train,
                     "train_gap": train - full_train, "train_gap_rel": train / full_train - 1, "base": base})
    return rows


def paper_table(rows: list[dict], steps: int, last: int = 100) -> str:
    """Markdown of `paper_claim`'s rows."""
    out = [f"| schedule | k/L | eval loss @{steps} (perplexity) | relative gap vs full (paper's metric) "
           f"| gain recovered | train loss, last {last} steps | train-loss gap vs full |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        gaps = ("", "", "") if r["schedule"] == "full" else (
            f"{r['relative_gap']:+.2%}", f"{r['recovered']:.1%}", f"{r['train_gap']:+.4f} ({r['train_gap_rel']:+.2%})")
        stopped = f" (stopped at step {r['stopped_at']})" if r["stopped_at"] else ""
        out.append(f"| {r['schedule']}{stopped} | {r['k_of_l']} | "
                   f"{r['eval_loss']:.4f} "
                   f"({math.exp(r['eval_loss']):.2f}) | {gaps[0]} | {gaps[1]} | {r['train_loss_last']:.4f} | "
                   f"{gaps[2]} |")
    base = rows[0]["base"]
    out.append(f"\nbase model (step 0) eval loss {base:.4f} (perplexity {math.exp(base):.2f})")
    return "\n".join(out)


def train_curve_table(runs: list[dict], width: int = 100) -> str:
    """Markdown: each run's mean train loss (nats per target token) over consecutive windows of `width`
    optimizer steps, one column per window (a run stopped early leaves its later cells empty)."""
    runs = sorted(runs, key=lambda r: (label_of(r) != "full", label_of(r)))
    n = max(len(r["steps"]) for r in runs) // width
    out = ["| schedule | " + " | ".join(f"{i * width + 1}-{(i + 1) * width}" for i in range(n)) + " |",
           "|---|" + "---|" * n]
    for r in runs:
        losses = [s["loss"] for s in r["steps"]]
        cells = [f"{statistics.fmean(losses[i * width:(i + 1) * width]):.2f}" if len(losses) >= (i + 1) * width
                 else "" for i in range(n)]
        out.append(f"| {label_of(r)} | " + " | ".join(cells) + " |")
    return "\n".join(out)
