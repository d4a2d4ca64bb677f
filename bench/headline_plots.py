"""The two headline pictures of BENCHMARKS.md's summary, drawn from result files already recorded (nothing is
run): speed against quality per schedule, and serving throughput against concurrency.

    .venv/bin/python bench/headline_plots.py        # the defaults below; writes the two PNGs into bench/plots/
    .venv/bin/python bench/headline_plots.py --quality bench/results/default_quality_100steps --steps 100 \
        --step-time bench/results/step_time_schedules_cpu_avx512_b.json \
        --step-time bench/results/step_time_split_cpu.json \
        --serving bench/results/serving_concurrency_batched.json \
        --batched bench/results/batched_decode/smollm2.json --out bench/plots

1. `headline_speed_quality.png`: per dataset folder of `--quality` (the `bench/quality.py` runs of "`auto`: time
   to quality per job"), each schedule's share of full backprop's eval-loss gain at `--steps` (each run from its
   own step-0 loss against full backprop's run of the same seed, as `bench/auto_rule.py`'s `gain_kept`; mean
   over the seeds measured) against its speed-up: full backprop's time for `--steps` steps over the
   schedule's, each step counted at the schedule's quiet step time from the `bench/step_time.py` tables (the
   first table that has the schedule, k = 1/4 of the layers). `auto` runs: a run whose recorded probe share is
   at or above `--auto-threshold` stays at full depth (full backprop's run: 100 %, 1.00x); below it, the run
   itself, its probe steps at full's time and the rest at its decision's.
2. `headline_serving.png`: left, one inference worker of the service (`bench/serving_concurrency.py`'s
   result): aggregate tokens/s of 8 concurrent streams on one adapter and of one stream, per number of
   slots (`inference_max_sequences`), with issue 49's target (2.5x one stream); right, the batch decoder
   alone (`bench/batched_decode.py`'s result): tokens/s per number of sequences decoded together, with issue
   46's target (4x one at a time).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common.curves import eval_at, eval_of, load_runs
from bench.common.results import read_rows
from lcsb_core.training.default_schedule import SWITCH_THRESHOLD
from lcsb_core.training.schedules.checks import DEFAULT_FRACTION

SCHEDULES = ("full", "tail", "topfull/4", "split")
"""The fixed schedules of the time-to-quality grid, in the order they are drawn."""
AUTO_THRESHOLD = SWITCH_THRESHOLD["SmolLM2-135M-Instruct"]
"""The product's switch threshold for SmolLM2-135M (BENCHMARKS.md "`auto`: time to quality per job"), the
default of `--auto-threshold`."""
ROOT = Path(__file__).resolve().parents[1]
_CHUNK = re.compile(r"\+chunk\d+$")


@dataclass(frozen=True)
class Point:
    """One schedule on one dataset: its share of full backprop's gain and its speed-up over full backprop."""

    dataset: str
    schedule: str
    kept: float
    speedup: float
    seeds: int


def label_of(run: dict[str, Any]) -> str:
    """A run's schedule token (`topfull/4`, `auto`, ...); older result files have only `spec.schedule`."""
    return str(run.get("label", run["spec"]["schedule"]))


def step_fractions(paths: list[Path]) -> dict[str, float]:
    """Schedule -> quiet step time as a fraction of full backprop's, from `bench/step_time.py` tables (each
    schedule from the first table that has it, at k = 1/4 of the layers; full = 1)."""
    out: dict[str, float] = {"full": 1.0}
    for path in paths:
        rows = read_rows(path)
        base = {_CHUNK.sub("", str(r["schedule"])): r for r in rows
                if r["schedule"] == "full" or abs(r["k"] / r["layers"] - DEFAULT_FRACTION) < 0.5 / r["layers"] + 1e-9}
        full = base.get("full")
        if full is None:
            continue
        for name, row in base.items():
            if name not in out and name != "forward":
                out[name] = row["step_s"] / full["step_s"]
    return out


def gain_kept(run: dict[str, Any], full: dict[str, Any], steps: int) -> float:
    """(the run's step-0 eval loss - its loss at `steps`) / (the same for full backprop's run)."""
    return ((eval_of(run, 0)["eval_loss"] - eval_of(run, steps)["eval_loss"])
            / (eval_of(full, 0)["eval_loss"] - eval_of(full, steps)["eval_loss"]))


def auto_outcome(run: dict[str, Any], full: dict[str, Any], steps: int, fractions: dict[str, float],
                 threshold: float) -> tuple[float, float]:
    """(share of full's gain, time as a fraction of full's) of an `auto` run at `threshold`: full backprop's
    (1, 1) when its probe share is at or above it, else the run's own gain and its probe-then-decision time."""
    decision = run.get("schedule_decision") or {}
    if decision.get("lower_share", 1.0) >= threshold:
        return 1.0, 1.0
    probe = int(decision.get("probe_steps", 0))
    after = fractions[str(decision.get("schedule", "full"))]
    return gain_kept(run, full, steps), (min(probe, steps) + max(0, steps - probe) * after) / steps


def speed_quality_points(root: Path, steps: int, fractions: dict[str, float], threshold: float = AUTO_THRESHOLD,
                         model: str = "SmolLM2-135M-Instruct") -> list[Point]:
    """One `Point` per (dataset folder of `root`, schedule) with `steps`-step runs of `model` and full
    backprop's run of the same seed (means over seeds)."""
    points: list[Point] = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        runs = [r for r in load_runs(folder) if Path(str(r.get("model") or model)).name == model
                and r["spec"]["steps"] == steps and eval_at(r, steps) is not None and eval_at(r, 0) is not None]
        fulls = {r["spec"]["seed"]: r for r in runs if label_of(r) == "full"}
        for schedule in (*SCHEDULES, "auto"):
            group = [r for r in runs if label_of(r) == schedule and r["spec"]["seed"] in fulls]
            if not group or (schedule != "auto" and schedule not in fractions):
                continue
            if schedule == "auto":
                outcomes = [auto_outcome(r, fulls[r["spec"]["seed"]], steps, fractions, threshold) for r in group]
                kept = statistics.fmean(k for k, _ in outcomes)
                time = statistics.fmean(t for _, t in outcomes)
            else:
                kept = statistics.fmean(gain_kept(r, fulls[r["spec"]["seed"]], steps) for r in group)
                time = fractions[schedule]
            points.append(Point(folder.name, schedule, kept, 1.0 / time, len(group)))
    return points


def serving_series(path: Path) -> dict[int, tuple[float, float]]:
    """Slots (`inference_max_sequences`) -> (one stream's tokens/s, 8 streams' aggregate tokens/s on one
    adapter) from a `bench/serving_concurrency.py` result."""
    data = json.loads(path.read_text())
    return {int(slots): (float(v["one_stream_tokens_per_s"]), float(v["same_adapter_tokens_per_s"]))
            for slots, v in sorted(data["max_sequences"].items(), key=lambda kv: int(kv[0]))}


def batched_series(path: Path) -> dict[int, float]:
    """Sequences decoded together -> aggregate tokens/s (median over rounds) from a `bench/batched_decode.py`
    result."""
    data = json.loads(path.read_text())
    return {int(n): float(v) for n, v in sorted(data["tok_per_s"].items(), key=lambda kv: int(kv[0]))}


def plot_speed_quality(points: list[Point], steps: int, out: Path) -> Path:
    """Share of full backprop's gain (y) against speed-up (x), one colour per schedule, one marker per dataset."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"full": "black", "tail": "tab:blue", "topfull/4": "tab:orange", "split": "tab:green", "auto": "tab:red"}
    markers = ["o", "s", "^", "D", "v", "P"]
    datasets = sorted({p.dataset for p in points})
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.axhline(95, color="grey", linestyle="--", linewidth=1)
    ax.text(1.005, 95.3, "95 % of full backprop's gain (issue 47)", color="grey", fontsize=8)
    for p in points:
        ax.scatter(p.speedup, 100 * p.kept, color=colours.get(p.schedule, "grey"),
                   marker=markers[datasets.index(p.dataset) % len(markers)],
                   s=90 if p.schedule == "auto" else 50, facecolors="none" if p.schedule == "auto" else None,
                   linewidths=1.8 if p.schedule == "auto" else 1.0, zorder=3)
    for schedule in (*SCHEDULES, "auto"):
        if any(p.schedule == schedule for p in points):
            ax.scatter([], [], color=colours[schedule], marker="o", label=schedule,
                       facecolors="none" if schedule == "auto" else None)
    for name in datasets:
        ax.scatter([], [], color="grey", marker=markers[datasets.index(name) % len(markers)], label=name)
    ax.set_ylim(top=101.5)
    ax.set_xlabel(f"speed-up over full backprop ({steps} steps at each schedule's quiet step time)")
    ax.set_ylabel(f"share of full backprop's eval-loss gain at step {steps} (%)")
    ax.set_title(f"SmolLM2-135M NF4, {steps} steps: speed vs quality per schedule")
    ax.legend(fontsize=8, ncol=2, loc="lower left")
    ax.grid(alpha=0.3)
    path = out / "headline_speed_quality.png"
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_serving(serving: dict[int, tuple[float, float]], batched: dict[int, float], out: Path) -> Path:
    """Left: the service's one worker per slot count; right: the batch decoder per sequences together."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    slots = list(serving)
    left.plot(slots, [serving[s][1] for s in slots], marker="o", label="8 streams, one adapter")
    left.plot(slots, [serving[s][0] for s in slots], marker="s", label="one stream")
    left.plot(slots, [2.5 * serving[s][0] for s in slots], linestyle="--", color="grey",
              label="target: 2.5x one stream (issue 49)")
    for s in slots:
        left.annotate(f"{serving[s][1] / serving[s][0]:.2f}x", (s, serving[s][1]), textcoords="offset points",
                      xytext=(4, 6), fontsize=8)
    left.set_xscale("log", base=2)
    left.set_xticks(slots, [str(s) for s in slots])
    left.set_xlabel("slots of one inference worker (inference_max_sequences)")
    left.set_ylabel("aggregate decode tokens/s (prefill included)")
    left.set_title("service: one worker, SmolLM2 Q4_1", fontsize=10)
    left.legend(fontsize=8, loc="upper left")
    left.grid(alpha=0.3)
    seqs = list(batched)
    one = batched[seqs[0]]
    right.plot(seqs, [batched[n] for n in seqs], marker="o", label="64 prompts, N decoded together")
    right.axhline(4 * one, linestyle="--", color="grey", label="target: 4x one at a time (issue 46)")
    for n in seqs:
        right.annotate(f"{batched[n] / one:.2f}x", (n, batched[n]), textcoords="offset points", xytext=(4, 6),
                       fontsize=8)
    right.set_xscale("log", base=2)
    right.set_xticks(seqs, [str(n) for n in seqs])
    right.set_xlabel("sequences decoded together")
    right.set_title("graded evaluation's batch decoder, SmolLM2 Q4_1", fontsize=10)
    right.legend(fontsize=8, loc="center right")
    right.grid(alpha=0.3)
    right.set_ylim(0, 4.4 * one)
    right.margins(x=0.12)
    left.margins(x=0.12)
    fig.suptitle("Serving throughput vs concurrency (2 threads, 2-core Intel Xeon)", fontsize=11)
    path = out / "headline_serving.png"
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    results = ROOT / "bench" / "results"
    ap.add_argument("--quality", type=Path, default=results / "default_quality_100steps",
                    help="a results folder with one folder per dataset (bench/quality.py runs)")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--step-time", type=Path, action="append", default=[],
                    help="bench/step_time.py --json output(s); default: the two tables BENCHMARKS.md cites")
    ap.add_argument("--auto-threshold", type=float, default=AUTO_THRESHOLD)
    ap.add_argument("--serving", type=Path, default=results / "serving_concurrency_batched.json")
    ap.add_argument("--batched", type=Path, default=results / "batched_decode" / "smollm2.json")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "plots")
    args = ap.parse_args(argv)
    step_tables = args.step_time or [results / "step_time_schedules_cpu_avx512_b.json",
                                     results / "step_time_split_cpu.json"]
    fractions = step_fractions(step_tables)
    points = speed_quality_points(args.quality, args.steps, fractions, args.auto_threshold)
    args.out.mkdir(parents=True, exist_ok=True)
    print("| dataset | schedule | seeds | share of full's gain | speed-up |\n|---|---|---|---|---|")
    for p in points:
        print(f"| {p.dataset} | {p.schedule} | {p.seeds} | {p.kept:.1%} | {p.speedup:.2f}x |")
    print(plot_speed_quality(points, args.steps, args.out))
    serving, batched = serving_series(args.serving), batched_series(args.batched)
    print("slots: one stream / 8 streams tokens/s: "
          + ", ".join(f"{s}: {a:.1f} / {b:.1f}" for s, (a, b) in serving.items()))
    print("sequences together: tokens/s: " + ", ".join(f"{n}: {v:.1f}" for n, v in batched.items()))
    print(plot_serving(serving, batched, args.out))


if __name__ == "__main__":
    main()
