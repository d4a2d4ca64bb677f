"""Tables (Markdown) and plots (PNG) from the run files that `bench/quality.py` writes.

    python bench/quality_report.py gsm8k bench/results/gsm8k --steps 50 --plots bench/plots
    python bench/quality_report.py wikitext bench/results/wikitext --steps 50 --plots bench/plots
    python bench/quality_report.py stability bench/results/stability --steps 50 --plots bench/plots
    python bench/quality_report.py step-time bench/results/step_time_cpu.json --plots bench/plots
    python bench/quality_report.py decision bench/results/schedules --steps 24 \
        --step-time bench/results/step_time_schedules_cpu.json          # the product-default rule
    python bench/quality_report.py confirm bench/results/schedules_confirm/gsm8k bench/results/schedules_decision \
        --steps 32 --step-time bench/results/step_time_schedules_cpu_avx512_b.json   # the rule's view over seeds
    python bench/quality_report.py paper bench/results/paper_setting --steps 1000   # the paper's own setting

Equal steps: each schedule's eval at `--steps` (the cyclic runs that went on longer are read at that
step; with a constant learning rate after warmup their first `--steps` steps are the shorter run's).
Equal time: the training seconds (sum of optimizer-step times, evaluation excluded) a schedule needed
to reach full backprop's final eval loss (same seed), by linear interpolation between evaluations.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common.curves import curve, eval_at, eval_of, load_runs, mean_sd, seconds_at, time_to_reach, value_at_time
from bench.common.results import read_rows
from bench.schedule_decision import (
    SPEED_RULE,
    confirmation,
    confirmation_table,
    decision,
    decision_table,
    paper_claim,
    paper_table,
    train_curve_table,
)

ORDER = ["full", "freeze", "cyclic", "random"]
LABEL = {"full": "full backprop", "freeze": "freeze (cyclic blocks, exact gradient)", "cyclic": "LCSB cyclic",
         "random": "LCSB random"}


def by_schedule(runs: list[dict], *, momentum: bool = True) -> dict[str, list[dict]]:
    groups = defaultdict(list)
    for r in runs:
        if r["spec"]["momentum"] == momentum and not r["spec"]["repacking"]:
            groups[r["spec"]["schedule"]].append(r)
    return groups


def equal_steps_table(runs: list[dict], steps: int, *, perplexity: bool = False) -> str:
    """Per schedule, over seeds: eval loss (or perplexity) at `steps`, vs full, token accuracy, seconds
    per step, peak memory, and exact match where decoded."""
    groups = by_schedule(runs)
    decoded = any("exact_match" in e for r in runs for e in r["evals"])
    full = {r["spec"]["seed"]: eval_of(r, steps)["eval_loss"] for r in groups.get("full", [])}
    metric = "held-out perplexity" if perplexity else "eval loss (nats/token)"
    out = [f"| schedule | k/L | seeds | {metric} at step {steps} | eval loss vs full (same seed) | token accuracy | "
           "train s/step (mean) | train s/step (median) | step peak RSS, median / max (MiB) |"
           + (" exact match (greedy, seed 0) |" if decoded else ""),
           "|---" * (9 + decoded) + "|"]
    base = next((e for r in runs for e in r["evals"] if e["step"] == 0), None)
    if base:
        em = next((e for r in runs for e in r["evals"] if e["step"] == 0 and "exact_match" in e), None)
        out.append(f"| base model (no training) | | | {_metric(base['eval_loss'], perplexity)} | | "
                   f"{base['eval_token_accuracy']:.4f} | | | |" + (f" {_em(em)} |" if decoded else ""))
    for name in ORDER:
        rs = [r for r in groups.get(name, []) if eval_at(r, steps)]
        if not rs:
            continue
        evs = [eval_of(r, steps) for r in rs]
        rel = [e["eval_loss"] / full[r["spec"]["seed"]] - 1 for r, e in zip(rs, evs, strict=True)
               if r["spec"]["seed"] in full]
        em = next((e for e in evs if "exact_match" in e), None)
        out.append("| " + " | ".join([
            LABEL[name],
            f"{rs[0]['k'] if name != 'full' else rs[0]['num_layers']}/{rs[0]['num_layers']}",
            str(len(rs)),
            mean_sd([math.exp(e["eval_loss"]) if perplexity else e["eval_loss"] for e in evs],
                    "{:.3f}" if perplexity else "{:.4f}"),
            "" if name == "full" else mean_sd([100 * x for x in rel], "{:+.2f} %"),
            mean_sd([e["eval_token_accuracy"] for e in evs]),
            mean_sd([seconds_at(r, steps) / steps for r in rs], "{:.3f}"),
            mean_sd([statistics.median(x["step_time_s"] for x in r["steps"][:steps]) for r in rs], "{:.3f}"),
            f"{statistics.median(x['peak_mib'] for r in rs for x in r['steps'][:steps]):.0f} / "
            f"{max(x['peak_mib'] for r in rs for x in r['steps'][:steps]):.0f}",
        ] + ([_em(em)] if decoded else [])) + " |")
    return "\n".join(out)


def _metric(loss: float, perplexity: bool) -> str:
    return f"{math.exp(loss):.3f}" if perplexity else f"{loss:.4f}"


def _em(e: dict | None) -> str:
    return f"{e['exact_match']:.1%} ({e['exact_match_correct']}/{e['exact_match_n']})" if e else ""


def equal_time_table(runs: list[dict], steps: int) -> str:
    """Per seed: full backprop's final eval loss and training time; for each other schedule the time it
    took to reach that loss (and the ratio), and its eval loss at full backprop's training time."""
    groups = by_schedule(runs)
    out = [f"| seed | full: eval loss at step {steps} | full: train s | schedule | steps run | step time vs full "
           "| reached full's loss at (s) | time vs full | eval loss at full's train time |",
           "|---|---|---|---|---|---|---|---|---|"]
    for full_run in sorted(groups.get("full", []), key=lambda r: r["spec"]["seed"]):
        seed = full_run["spec"]["seed"]
        target, t_full = eval_of(full_run, steps)["eval_loss"], seconds_at(full_run, steps)
        for name in ORDER[1:]:
            for r in (r for r in groups.get(name, []) if r["spec"]["seed"] == seed):
                t = time_to_reach(curve(r), target)
                at = value_at_time(curve(r), t_full)
                n = min(steps, len(r["steps"]))
                speed = (t_full / steps) / (seconds_at(r, n) / n)
                out.append(f"| {seed} | {target:.4f} | {t_full:.0f} | {LABEL[name]} | {len(r['steps'])} | "
                           f"{speed:.2f}x faster | "
                           f"{'not reached' if t is None else f'{t:.0f}'} | "
                           f"{'' if t is None else f'{t / t_full:.2f}x'} | "
                           f"{'' if at is None else f'{at:.4f}'} |")
    return "\n".join(out)


def momentum_table(runs: list[dict], steps: int) -> str:
    """LCSB cyclic with momentum_for_skipped on and off, at `steps`, seeds paired."""
    on = {r["spec"]["seed"]: r for r in by_schedule(runs, momentum=True).get("cyclic", [])}
    off = {r["spec"]["seed"]: r for r in by_schedule(runs, momentum=False).get("cyclic", [])}
    out = [f"| momentum_for_skipped | seeds | eval loss at step {steps} | token accuracy | train s/step | "
           "off - on (same seed) |", "|---|---|---|---|---|---|"]
    for label, group in (("on (default)", on), ("off", off)):
        seeds = sorted(s for s in group if s in on and s in off)
        if not seeds:
            continue
        evs = [eval_of(group[s], steps) for s in seeds]
        diff = [eval_of(off[s], steps)["eval_loss"] - eval_of(on[s], steps)["eval_loss"] for s in seeds]
        out.append(f"| {label} | {','.join(map(str, seeds))} | {mean_sd([e['eval_loss'] for e in evs])} | "
                   f"{mean_sd([e['eval_token_accuracy'] for e in evs])} | "
                   f"{mean_sd([seconds_at(group[s], steps) / steps for s in seeds], '{:.3f}')} | "
                   f"{mean_sd(diff, '{:+.4f}') if label == 'off' else ''} |")
    return "\n".join(out)


def stability_table(runs: list[dict], steps: int) -> str:
    """One row per run (its first `steps` steps): learning rate, schedule, bitsandbytes CPU repacking,
    eval losses, train loss."""
    out = ["| lr | schedule | bnb CPU repacking | seed | eval loss by step | last-10-step train loss "
           "| max train loss |",
           "|---|---|---|---|---|---|---|"]
    key = lambda r: (r["spec"]["lr"], r["spec"]["repacking"], ORDER.index(r["spec"]["schedule"]), r["spec"]["seed"])  # noqa: E731
    for r in sorted(runs, key=key):
        s = r["spec"]
        losses = [x["loss"] for x in r["steps"][:steps]]
        evals = ", ".join(f"{e['step']}: {e['eval_loss']:.3f}" for e in r["evals"] if e["step"] <= steps)
        out.append(f"| {s['lr']:g} | {LABEL[s['schedule']]} | {'on (bug)' if s['repacking'] else 'off (fixed)'} | "
                   f"{s['seed']} | {evals} | {statistics.fmean(losses[-10:]):.3f} | {max(losses):.2f} |")
    return "\n".join(out)


# ---- plots -------------------------------------------------------------------------------------
def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt, fig, out: Path) -> Path:
    """Lay out, write `out` as PNG (110 dpi), close the figure."""
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_eval_curves(runs: list[dict], out: Path, title: str) -> Path:
    """Eval loss vs optimizer step (left) and vs training seconds (right), one line per run."""
    plt = _plt()
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    colors = {"full": "C0", "freeze": "C1", "cyclic": "C2", "random": "C3"}
    for name, rs in by_schedule(runs).items():
        for i, r in enumerate(sorted(rs, key=lambda r: r["spec"]["seed"])):
            steps = [e["step"] for e in r["evals"]]
            losses = [e["eval_loss"] for e in r["evals"]]
            kw = dict(color=colors[name], marker="o", ms=3, alpha=0.85, label=LABEL[name] if i == 0 else None)
            a.plot(steps, losses, **kw)
            b.plot([e["train_s"] for e in r["evals"]], losses, **kw)
    a.set_xlabel("optimizer step")
    b.set_xlabel("training time (s, evaluation excluded)")
    for ax in (a, b):
        ax.set_ylabel("eval loss (nats/token)")
        ax.grid(alpha=0.3)
    a.legend()
    fig.suptitle(title)
    return _save(plt, fig, out)


def plot_stability(runs: list[dict], out: Path, steps: int) -> Path:
    """Train loss per step (moving mean of 5) for each stability run."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for r in sorted(runs, key=lambda r: (r["spec"]["lr"], r["spec"]["repacking"], r["spec"]["schedule"])):
        s = r["spec"]
        y = [x["loss"] for x in r["steps"][:steps]]
        y = [statistics.fmean(y[max(0, i - 4):i + 1]) for i in range(len(y))]
        ax.plot(range(1, len(y) + 1), y, ls="--" if s["repacking"] else "-",
                label=f"{LABEL[s['schedule']]}, lr {s['lr']:g}, repacking {'on' if s['repacking'] else 'off'}")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("train loss (moving mean of 5)")
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _save(plt, fig, out)


def plot_step_time(rows: list[dict], out: Path) -> Path:
    """Step time vs k/L for LCSB and freeze, with full backprop, forward and the ideal line, per quant."""
    plt = _plt()
    quants = sorted({r["quant"] for r in rows})
    fig, axes = plt.subplots(1, len(quants), figsize=(5.5 * len(quants), 4), squeeze=False)
    for ax, q in zip(axes[0], quants, strict=False):
        rs = [r for r in rows if r["quant"] == q and not r["checkpointing"]]
        full = next(r for r in rs if r["schedule"] == "full")
        fwd = next(r for r in rs if r["schedule"] == "forward")
        for name, style in (("lcsb", "o-"), ("freeze", "s-")):
            pts = sorted((r["k"] / r["layers"], r["step_s"]) for r in rs if r["schedule"] == name)
            ax.plot(*zip(*pts, strict=True), style, label=name if name == "freeze" else "LCSB cyclic")
        xs = [0, 1]
        ax.plot(xs, [fwd["step_s"] + x * (full["step_s"] - fwd["step_s"]) for x in xs], ":", color="gray",
                label="ideal: forward + (k/L) backward")
        ax.axhline(full["step_s"], color="C3", ls="--", label="full backprop")
        ax.axhline(fwd["step_s"], color="k", ls="-.", label="forward alone")
        ax.set_xlabel("k / L (decoder layers back-propagated per step)")
        ax.set_ylabel("step time (s)")
        ax.set_title(f"{rows[0]['model']} {q}")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return _save(plt, fig, out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("table", choices=["gsm8k", "wikitext", "stability", "step-time", "decision", "confirm",
                                          "paper"])
    ap.add_argument("source", nargs="+", help="results folder(s) (or the step-time JSON file)")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--plots", default="", help="folder for PNG plots")
    ap.add_argument("--step-time", default="", help="decision: bench/step_time.py --json output")
    args = ap.parse_args(argv)
    plots = Path(args.plots) if args.plots else None
    if plots:
        plots.mkdir(parents=True, exist_ok=True)
    if args.table == "step-time":
        rows = [r for src in args.source for r in read_rows(src)]
        if plots:
            print(plot_step_time(rows, plots / "step_time_vs_k.png"))
        return
    runs = [r for src in args.source for r in load_runs(Path(src))]
    if args.table == "decision":
        rows, default = decision(runs, args.steps, read_rows(args.step_time))
        print(decision_table(rows, default, args.steps))
        print(f"\ndefault by the rule (>= {SPEED_RULE}x faster per step, or faster than full where none is; "
              f"lowest eval loss at full's time): {default}")
        return
    if args.table == "confirm":
        step_rows = read_rows(args.step_time) if args.step_time else []
        print(confirmation_table(confirmation(runs, args.steps, step_rows), args.steps))
        return
    if args.table == "paper":
        print(paper_table(paper_claim(runs, args.steps), args.steps))
        print("\nmean train loss per 100 optimizer steps:\n")
        print(train_curve_table(runs))
        return
    if args.table == "stability":
        # reference runs from the quality grid: seed 0, momentum on, the same lr, full / cyclic / freeze
        runs = [r for r in runs if r["spec"]["seed"] == 0 and r["spec"]["momentum"]
                and r["spec"]["schedule"] in ("full", "cyclic", "freeze")]
        print(stability_table(runs, args.steps))
        if plots:
            print(plot_stability(runs, plots / "stability_train_loss.png", args.steps))
        return
    print(equal_steps_table(runs, args.steps, perplexity=args.table == "wikitext"))
    print()
    print(equal_time_table(runs, args.steps))
    if args.table == "gsm8k":
        print()
        print(momentum_table(runs, args.steps))
    if plots:
        print(plot_eval_curves(runs, plots / f"{args.table}_eval_loss.png",
                               f"SmolLM2-135M NF4, {args.table}: eval loss vs step and vs training time"))
        cyc = next((r for r in runs if r["spec"]["schedule"] == "cyclic" and r["spec"]["seed"] == 0), None)
        if cyc and (Path(cyc["run_dir"]) / "selection_history.jsonl").exists():
            from lcsb_core.training.plots import plot_selection_heatmap

            print(plot_selection_heatmap(Path(cyc["run_dir"]) / "selection_history.jsonl",
                                         plots / f"{args.table}_selection_heatmap.png"))


if __name__ == "__main__":
    main()
