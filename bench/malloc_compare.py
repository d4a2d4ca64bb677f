"""Compare two README main jobs that differ only in the training process's C allocator
(`LCSB_WORKER_MALLOC=glibc` and `=jemalloc`, BENCHMARKS.md 1h): per-step time and step-peak ratios over
the same 100 batches, `topfull`'s full steps and top-k steps apart, the eval losses, and whether the
train losses are identical. Reads main_job_<malloc>_{metrics.csv,summary.json} in `--dir`.

    python bench/malloc_compare.py --dir bench/results/malloc_main_job
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics as st
from pathlib import Path

MALLOCS = ("glibc", "jemalloc")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default="bench/results/malloc_main_job", type=Path)
    d = ap.parse_args().dir
    rows = {m: list(csv.DictReader(open(d / f"main_job_{m}_metrics.csv"))) for m in MALLOCS}
    train = {m: [r for r in rows[m] if r["split"] == "train"] for m in MALLOCS}
    g, j = train["glibc"], train["jemalloc"]
    if [r["step"] for r in g] != [r["step"] for r in j]:
        raise SystemExit("the two jobs trained different steps")
    for m in MALLOCS:
        t = [float(r["step_time_s"]) for r in train[m]]
        p = [float(r["peak_memory_mib"]) for r in train[m]]
        s = json.loads((d / f"main_job_{m}_summary.json").read_text())
        print(f"{m}: {len(t)} steps, median step {st.median(t):.3f} s, step peak median {st.median(p):.0f} MiB, "
              f"max {max(p):.0f} MiB; train_seconds {s['train_seconds']:.0f}, eval loss {s['eval_loss_after']:.4f}")
    time_ratio = [float(a["step_time_s"]) / float(b["step_time_s"]) for a, b in zip(g, j, strict=True)]
    peak_ratio = [float(b["peak_memory_mib"]) / float(a["peak_memory_mib"]) for a, b in zip(g, j, strict=True)]
    for label, x in (("glibc / jemalloc step time", time_ratio), ("jemalloc / glibc step peak", peak_ratio)):
        q = st.quantiles(x, n=4)
        print(f"{label}, per step: median {st.median(x):.3f}, IQR {q[0]:.3f}-{q[2]:.3f}")
    layers = [len(r["selected_layers"].split()) for r in g]
    full = {i for i, n in enumerate(layers) if n == max(layers)}  # topfull's steps over every decoder layer
    for label, idx in (("full steps", sorted(full)), ("top-k steps", [i for i in range(len(g)) if i not in full])):
        med = {m: (st.median(float(train[m][i]["step_time_s"]) for i in idx),
                   st.median(float(train[m][i]["peak_memory_mib"]) for i in idx)) for m in MALLOCS}
        print(f"{label} ({len(idx)}): " + "; ".join(f"{m} {t:.3f} s, peak {p:.0f} MiB" for m, (t, p) in med.items()))
    evals = {m: [round(float(r["eval_loss"]), 6) for r in rows[m] if r["split"] == "eval"] for m in MALLOCS}
    print(f"eval losses: {evals}")
    print(f"train losses identical: {all(a['loss'] == b['loss'] for a, b in zip(g, j, strict=True))}")


if __name__ == "__main__":
    main()
