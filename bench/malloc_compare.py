"""Compare two README main jobs that differ only in the training process's C allocator or its settings
(`LCSB_WORKER_MALLOC=glibc` and `=jemalloc`; jemalloc with and without `MALLOC_CONF`; BENCHMARKS.md 1h),
or the code before and after a change (1i):
per-step time and step-peak ratios over the same 100 batches, `topfull`'s full steps and top-k steps
apart, the eval losses, and whether the train losses are identical. Reads
main_job_<run>_{metrics.csv,summary.json} in `--dir` for the two names of `--runs` (before, after).

    python bench/malloc_compare.py --dir bench/results/malloc_main_job
    python bench/malloc_compare.py --dir bench/results/malloc_main_job_retain --runs jemalloc,jemalloc-retain
    python bench/malloc_compare.py --dir bench/results/main_job_issue14_before_after --runs before,after  # 1i
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics as st
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default="bench/results/malloc_main_job", type=Path)
    ap.add_argument("--runs", default="glibc,jemalloc", help="the two run names, before,after")
    args = ap.parse_args()
    d, runs = args.dir, tuple(args.runs.split(","))
    if len(runs) != 2:
        raise SystemExit(f"--runs: two names, got {args.runs!r}")
    before, after = runs
    rows = {m: list(csv.DictReader(open(d / f"main_job_{m}_metrics.csv"))) for m in runs}
    train = {m: [r for r in rows[m] if r["split"] == "train"] for m in runs}
    g, j = train[before], train[after]
    if [r["step"] for r in g] != [r["step"] for r in j]:
        raise SystemExit("the two jobs trained different steps")
    for m in runs:
        t = [float(r["step_time_s"]) for r in train[m]]
        p = [float(r["peak_memory_mib"]) for r in train[m]]
        s = json.loads((d / f"main_job_{m}_summary.json").read_text())
        print(f"{m}: {len(t)} steps, median step {st.median(t):.3f} s, step peak median {st.median(p):.0f} MiB, "
              f"max {max(p):.0f} MiB; train_seconds {s['train_seconds']:.0f}, eval loss {s['eval_loss_after']:.4f}")
    time_ratio = [float(a["step_time_s"]) / float(b["step_time_s"]) for a, b in zip(g, j, strict=True)]
    peak_ratio = [float(b["peak_memory_mib"]) / float(a["peak_memory_mib"]) for a, b in zip(g, j, strict=True)]
    for label, x in ((f"{before} / {after} step time", time_ratio), (f"{after} / {before} step peak", peak_ratio)):
        q = st.quantiles(x, n=4)
        print(f"{label}, per step: median {st.median(x):.3f}, IQR {q[0]:.3f}-{q[2]:.3f}")
    layers = [len(r["selected_layers"].split()) for r in g]
    full = {i for i, n in enumerate(layers) if n == max(layers)}  # topfull's steps over every decoder layer
    for label, idx in (("full steps", sorted(full)), ("top-k steps", [i for i in range(len(g)) if i not in full])):
        med = {m: (st.median(float(train[m][i]["step_time_s"]) for i in idx),
                   st.median(float(train[m][i]["peak_memory_mib"]) for i in idx)) for m in runs}
        print(f"{label} ({len(idx)}): " + "; ".join(f"{m} {t:.3f} s, peak {p:.0f} MiB" for m, (t, p) in med.items()))
    evals = {m: [round(float(r["eval_loss"]), 6) for r in rows[m] if r["split"] == "eval"] for m in runs}
    print(f"eval losses: {evals}")
    print(f"train losses identical: {all(a['loss'] == b['loss'] for a, b in zip(g, j, strict=True))}")


if __name__ == "__main__":
    main()
