"""Issue 47: `auto`'s rule from the time-to-quality grid (bench/grids/time_to_quality.yaml): per dataset
the lower-layer share of the first full-depth steps, each schedule's share of full backprop's gain and its
time to 95 % of that gain, the switch threshold fitted with each dataset left out in turn, and one picture
per dataset (eval loss against seconds, one line per schedule).

    python bench/auto_rule.py bench/results/default_quality_100steps --steps 100 \
        --step-time bench/results/step_time_schedules_cpu_avx512_b.json \
        --step-time bench/results/step_time_split_cpu.json --plots bench/plots

Each folder under the results folder is one dataset (its runs: `bench/quality.py` result files). The
lower-layer share is the product's own arithmetic (`lcsb_core.training.schedules.SwitchSchedule.lower_share` over
the first `PROBE_STEPS` steps' per-layer gradient norms, which a full-depth run's result file records).
Time is counted as steps times each schedule's quiet step time from the `bench/step_time.py` tables (full
backprop = 1; an `auto` run: its probe steps at full's time, the rest at the time of the schedule it chose),
not the runs' own seconds, so other work beside the grid does not enter.

The threshold rule, stated before it was tested: among the training datasets, those where `SWITCH_TO`
kept >= `KEEP` of full backprop's gain at `--steps` (mean over seeds) are the ones to switch on. The
threshold is the midpoint between the highest share of a dataset to switch on and the lowest share of one
not to (above every share to switch on, when there is none not to, by `MARGIN`); with no dataset to
switch on, 0 (never switch). That rule's left-out test failed on Code Alpaca (seeds 0-1): its share lies
between two datasets where `SWITCH_TO` held, so the share is not monotone in what `SWITCH_TO` keeps.

The second rule (`fit_threshold_bounded`), stated 2026-12-06 after that failure and before seed 2 and the
fourth dataset (hh-sft) ran, so those are its test: switch only below every share where `SWITCH_TO`
failed. The threshold is the midpoint between the lowest share of a dataset not to switch on and the
highest share to switch on below it (that share minus `MARGIN` when none lies below it); with no dataset
not to switch on, the lowest share to switch on plus `MARGIN` (a share that held says little about a higher
one); with none to switch on, 0. The report prints both rules' left-out tests.

A held-out dataset passes when the rule's decision keeps >= `KEEP`: staying at
full depth always does (the run is full backprop's); switching does when `SWITCH_TO` kept >= `KEEP` there.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common.curves import eval_at, eval_of, load_runs
from bench.common.results import read_rows
from bench.schedule_decision import label_of, speed_vs_full
from lcsb_core.training.default_schedule import PROBE_STEPS, SWITCH_THRESHOLD, SWITCH_TO
from lcsb_core.training.schedules import DEFAULT_FRACTION, PureSchedule, SwitchSchedule, make_schedule

KEEP = 0.95
"""The share of full backprop's eval-loss gain `auto` must keep (issue 47)."""
MARGIN = 0.02
"""How far above the highest share seen to switch on the threshold lies when no dataset says where to stop."""


def probe_share(run: dict, probe_steps: int = PROBE_STEPS) -> float | None:
    """The mean lower-layer share of a full-depth run's first `probe_steps` steps (None when its result
    file has no per-layer norms or fewer steps)."""
    rows = run.get("layer_grad_norms") or []
    if label_of(run) != "full" or len(rows) < probe_steps:
        return None
    layers = run["num_layers"]
    then = make_schedule(SWITCH_TO, num_layers=layers, fraction=run["spec"].get("fraction", DEFAULT_FRACTION))
    assert isinstance(then, PureSchedule)
    switch = SwitchSchedule(layers, then.k, then, probe_steps, threshold=0.0)
    return statistics.fmean(switch.lower_share(dict(enumerate(r))) for r in rows[:probe_steps])


def gain_kept(run: dict, full: dict, steps: int) -> float:
    """(the run's step-0 loss - its eval loss at `steps`) / (full's step-0 loss - full's at `steps`). Each
    run's gain is measured from its own step-0 loss, so a run on the other compute path (fp32 on an AVX2-only
    CPU, bf16 autocast on AVX512-BF16: the same base model's step-0 loss differs by about 1e-3) is compared
    by its gain, not by an offset it carries from its first evaluation."""
    return ((eval_of(run, 0)["eval_loss"] - eval_of(run, steps)["eval_loss"])
            / (eval_of(full, 0)["eval_loss"] - eval_of(full, steps)["eval_loss"]))


def seed_and_path(run: dict) -> str:
    """"0 bf16": the run's seed and its compute path (bf16 autocast or fp32, by the CPU it ran on)."""
    dtype = str(run.get("compute_dtype") or "?")
    return f"{run['spec']['seed']} {PATHS.get(dtype, dtype)}"


PATHS = {"bfloat16": "bf16", "float32": "fp32"}


def seconds_curve(run: dict, step_s: dict[str, float]) -> list[tuple[float, float]]:
    """(seconds, eval loss) per evaluation, seconds = steps x the schedule's quiet step time (`auto`:
    `PROBE_STEPS` at full's, the rest at its decision's)."""
    label = label_of(run)
    if label == "auto":
        after = step_s[(run.get("schedule_decision") or {}).get("schedule", "full")]
        at = lambda n: min(n, PROBE_STEPS) * step_s["full"] + max(0, n - PROBE_STEPS) * after  # noqa: E731
    else:
        at = lambda n: n * step_s[label]  # noqa: E731
    return [(at(e["step"]), e["eval_loss"]) for e in run["evals"]]


def time_to_keep(run: dict, full: dict, steps: int, step_s: dict[str, float]) -> float | None:
    """Seconds the run needs to reach `KEEP` of full backprop's gain at `steps` (from its own step-0 loss, as
    `gain_kept`), as a fraction of full's seconds for `steps` (linear between evaluations); None if it never
    does within its run."""
    full_base = eval_of(full, 0)["eval_loss"]
    target = eval_of(run, 0)["eval_loss"] - KEEP * (full_base - eval_of(full, steps)["eval_loss"])  # its own base
    curve = seconds_curve(run, step_s)
    for (t0, y0), (t1, y1) in zip(curve, curve[1:], strict=False):
        if y1 <= target:
            return (t0 + (t1 - t0) * (y0 - target) / (y0 - y1) if y0 > target else t0) / (steps * step_s["full"])
    return None


def fit_threshold(shares: dict[str, float], keeps: dict[str, float]) -> float:
    """The module docstring's rule on the datasets in `shares` (dataset -> lower-layer share) with
    `keeps` (dataset -> `SWITCH_TO`'s share of full's gain)."""
    on = [shares[d] for d in shares if keeps[d] >= KEEP]
    off = [shares[d] for d in shares if keeps[d] < KEEP]
    if not on:
        return 0.0
    above = [s for s in off if s > max(on)]
    return (max(on) + min(above)) / 2 if above else max(on) + MARGIN


def fit_threshold_bounded(shares: dict[str, float], keeps: dict[str, float]) -> float:
    """The module docstring's second rule on the datasets in `shares` (dataset -> lower-layer share) with
    `keeps` (dataset -> `SWITCH_TO`'s share of full's gain): switch only below every share where it failed."""
    on = [shares[d] for d in shares if keeps[d] >= KEEP]
    off = [shares[d] for d in shares if keeps[d] < KEEP]
    if not on:
        return 0.0
    if not off:
        return min(on) + MARGIN
    below = [s for s in on if s < min(off)]
    return (max(below) + min(off)) / 2 if below else min(off) - MARGIN


RULES = {"first (monotone)": fit_threshold, "second (bounded by failures)": fit_threshold_bounded}
"""The fits the report tests, in the order they were stated."""


def step_times(paths: list[str]) -> dict[str, float]:
    """Schedule -> quiet step time as a fraction of full backprop's (the first table that has it)."""
    rows_per_file = [read_rows(p) for p in paths]
    out: dict[str, float] = {"full": 1.0}
    for label in ("tail", "topfull/4", "split", "topfull/2", "top", "freeze", "cyclic"):
        speed = next((s for rows in rows_per_file if (s := speed_vs_full(rows, label))), None)
        if speed:
            out[label] = 1.0 / speed
    return out


def report(root: Path, steps: int, step_s: dict[str, float], plots: Path | None,
           model: str = "SmolLM2-135M-Instruct") -> str:
    """The tables of the module docstring for the runs of `model` at `steps` under `root` (one folder per
    dataset; folders with no such runs, such as another model's or another length's, are left out)."""
    lines: list[str] = []
    shares: dict[str, float] = {}
    keeps: dict[str, float] = {}
    per_seed: list[tuple[str, int, float, str, float | None, float | None]] = []
    threshold = SWITCH_THRESHOLD.get(model)
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        runs = [r for r in load_runs(folder) if Path(str(r.get("model") or model)).name == model
                and (r["spec"]["steps"] in (steps, PROBE_STEPS) or label_of(r) == "auto")]
        fulls = {r["spec"]["seed"]: r for r in runs if label_of(r) == "full" and r["spec"]["steps"] == steps}
        seed_shares = {r["spec"]["seed"]: s for r in runs if (s := probe_share(r)) is not None}
        if not seed_shares:
            continue
        shares[folder.name] = statistics.fmean(seed_shares.values())
        lines.append(f"\n{folder.name}: lower-layer share of the first {PROBE_STEPS} steps "
                     + ", ".join(f"seed {s}: {v:.3f}" for s, v in sorted(seed_shares.items()))
                     + f"; mean {shares[folder.name]:.3f}" + ("\n" if fulls else f" (no {steps}-step run)"))
        if fulls:
            lines.append(f"| schedule | seeds (compute path) | share of full's gain @{steps} | time to {KEEP:.0%} of "
                         "full's gain (x full's time) | step time (x full's) |")
            lines.append("|---|---|---|---|---|")
        by_label: dict[str, list[dict]] = defaultdict(list)
        for r in runs:
            if r["spec"]["steps"] == steps and r["spec"]["seed"] in fulls and eval_at(r, steps):
                by_label[label_of(r)].append(r)
        def per_step(group: list[dict]) -> float:  # mean step time as a fraction of full's (auto: probe + rest)
            return statistics.fmean(seconds_curve(r, step_s)[-1][0] / (steps * step_s["full"]) for r in group)

        for label, group in sorted(by_label.items(), key=lambda kv: per_step(kv[1]), reverse=True):
            kept = [gain_kept(r, fulls[r["spec"]["seed"]], steps) for r in group]
            reach = [time_to_keep(r, fulls[r["spec"]["seed"]], steps, step_s) for r in group]
            if label == SWITCH_TO:
                keeps[folder.name] = statistics.fmean(kept)
            lines.append(f"| {label} | {', '.join(seed_and_path(r) for r in group)} | "
                         f"{', '.join(f'{k:.1%}' for k in kept)} (mean {statistics.fmean(kept):.1%}) | "
                         f"{', '.join('not reached' if t is None else f'{t:.2f}' for t in reach)} | "
                         f"{per_step(group):.2f} |")
        if plots and by_label:
            lines.append(f"\n{plot(folder.name, by_label, step_s, plots)}")
        switched = {r["spec"]["seed"]: r for r in by_label.get("auto", [])
                    if (r.get("schedule_decision") or {}).get("schedule") == SWITCH_TO}
        for seed, share in sorted(seed_shares.items()):
            if threshold is None:
                continue
            if share >= threshold:  # stays at full depth: the run is full backprop's, whether or not it ran
                per_seed.append((folder.name, seed, share, "full", 1.0, 1.0))
            else:
                run, full = switched.get(seed), fulls.get(seed)
                held, spent = (gain_kept(run, full, steps), per_step([run])) if run and full else (None, None)
                per_seed.append((folder.name, seed, share, SWITCH_TO, held, spent))
    if per_seed:
        lines.append(f"\n`auto` at the product's threshold ({threshold:.3f}, `SWITCH_THRESHOLD`), per dataset and "
                     "seed: the decision its probe share gives (the full run's first steps, which are `auto`'s own), "
                     f"and what that keeps (full depth: full backprop's run; {SWITCH_TO}: the `auto` run of "
                     "that seed that switched, where one ran):\n")
        lines.append("| dataset | seed | probe share | decision | share of full's gain | time (x full's) |")
        lines.append("|---|---|---|---|---|---|")
        for name, seed, share, decision, held, spent in per_seed:
            kept_cell = "not run" if held is None else f"{held:.1%}"
            time_cell = "-" if spent is None else f"{spent:.2f}"
            lines.append(f"| {name} | {seed} | {share:.3f} | {decision} | {kept_cell} | {time_cell} |")
        done = [(k, t) for *_, k, t in per_seed if k is not None and t is not None]
        if done:
            lines.append(f"\nOver the {len(done)} measured: lowest share kept {min(k for k, _ in done):.1%}, mean "
                         f"speed-up {statistics.fmean(1 / t for _, t in done):.2f}x (time measured as steps x each "
                         "schedule's quiet step time)")
    usable = [d for d in shares if d in keeps]
    for rule, fit in RULES.items():
        lines.append(f"\nThreshold fitted with each dataset left out, the {rule} rule (bench/auto_rule.py):\n")
        lines.append("| left out | fitted on | threshold | its share | decision | kept by the decision | passes |")
        lines.append("|---|---|---|---|---|---|---|")
        for out in usable:
            train = {d: shares[d] for d in usable if d != out}
            tau = fit(train, keeps)
            switch = shares[out] < tau
            held = keeps[out] if switch else 1.0
            lines.append(f"| {out} | {', '.join(train)} | {tau:.3f} | {shares[out]:.3f} | "
                         f"{SWITCH_TO if switch else 'full'} | {held:.1%} | {'yes' if held >= KEEP else 'no'} |")
        if usable:
            lines.append(f"\nFitted on all ({', '.join(usable)}): threshold "
                         f"{fit({d: shares[d] for d in usable}, keeps):.3f}")
    return "\n".join(lines)


def plot(name: str, by_label: dict[str, list[dict]], step_s: dict[str, float], out: Path) -> Path:
    """Eval loss against seconds (x full backprop's step), one line per schedule (mean over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for label, group in sorted(by_label.items()):
        curves = [seconds_curve(r, step_s) for r in group]
        n = min(len(c) for c in curves)
        xs = [curves[0][i][0] for i in range(n)]
        ys = [statistics.fmean(c[i][1] for c in curves) for i in range(n)]
        ax.plot(xs, ys, marker="o", label=f"{label} ({len(group)} seed{'s' * (len(group) > 1)})")
    ax.set_xlabel("training time (full backprop steps)")
    ax.set_ylabel("eval loss")
    ax.set_title(f"SmolLM2-135M NF4, {name}: eval loss vs time")
    ax.legend()
    path = out / f"time_to_quality_{name}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path, help="a results folder with one folder per dataset")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--step-time", action="append", default=[], help="bench/step_time.py --json output(s)")
    ap.add_argument("--plots", default="", help="folder for the PNG pictures")
    ap.add_argument("--model", default="SmolLM2-135M-Instruct", help="the base model whose runs count")
    args = ap.parse_args(argv)
    plots = Path(args.plots) if args.plots else None
    if plots:
        plots.mkdir(parents=True, exist_ok=True)
    step_s = step_times(args.step_time)
    print("step time (x full backprop's): " + ", ".join(f"{k} {v:.2f}" for k, v in step_s.items()))
    print(report(args.results, args.steps, step_s, plots, args.model))


if __name__ == "__main__":
    main()
