"""Does the trainer's resident set stay flat over many steps of varying shapes? (issue 14, item 2)

`malloc_trim` was added to the step loop because batches of varying shapes fragment glibc's heap and
the resident set (RSS) grew step after step. Issue 14 replaced the trim after every step with
`lcsb_core.training.memory_probe.FreeMemoryReleaser` (a trim only when RSS has grown past 1.25x the highest
level of the run's first 8 steps). This bench checks that the fix still holds, against the two
alternatives, side by side:

- `releaser`: the trainer as shipped;
- `every-step`: `malloc_trim(0)` after every step (the loop before issue 14);
- `never`: no trim at all (what the trim was added against);
- `jemalloc`: no trim, with jemalloc instead of glibc's malloc (`LD_PRELOAD`, Debian's `libjemalloc2`),
  which keeps freed pages for reuse and returns them after its own decay time (BENCHMARKS.md 1e);
- `jemalloc+releaser`: jemalloc with the shipped releaser (which purges jemalloc's arenas instead of
  `malloc_trim`): what the worker's training process runs since `Settings.worker_malloc`;
(The jemalloc-setting modes `jemalloc-retain`, `-decay30`, `-thp`, `-nooversize`, `-nooversize-decay30` and
`-chunk4` of BENCHMARKS.md 1h were a finished experiment: bench/LOG.md, last in commit f538568.)

Each mode is one child process of one torch thread (all modes run at once, so they share the machine
alike), training SmolLM2-135M-Instruct NF4 through `lcsb_core.training.trainer.Trainer` on real GSM8K chat
examples (batch 4, padded to the longest example of each batch, so the batch shape [4, tokens] changes
every step), the default schedule, lr 2e-4, no evaluation. After every optimizer step it records RSS
(MiB, /proc/self/status VmRSS), the step's peak RSS (the trainer's `peak_memory_mib`: VmHWM, reset
before each step) and the step's seconds.

Printed (stdout): one row per mode with RSS after steps 10, 50, 100, 150 and the last (MiB), the highest
RSS after any step and its ratio to the highest RSS of the first 8 steps (the releaser's reference,
which it should keep under 1.25x), the growth from the median of steps 11-30 to the median of the last
20 steps (MiB and ratio), trims done, the highest step peak, the process's peak virtual size (VmPeak,
what the worker's `RLIMIT_AS` fallback cage limits), and the median step seconds; the header line gives
the examples' token-length range. `--json` writes every step's RSS.

    python bench/rss_flat.py --steps 200 --json bench/results/rss_flat_cpu.json
    python bench/rss_flat.py --steps 12 --seq 128            # a smoke run (says nothing about memory)
    python bench/rss_flat.py --ratios bench/results/rss_flat_jemalloc_*.json   # ratios of saved runs

With two modes or more, it also prints each mode against the first: total seconds, the median (IQR) of
per-step time ratios (the same batches in the same order in every mode) and of per-step peak ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common.paths import DATA

MODES = ("releaser", "every-step", "never", "jemalloc", "jemalloc+releaser")
JEMALLOC = "libjemalloc.so.2"  # found by the dynamic linker's search path (Debian: libjemalloc2)


def child(args) -> None:
    """One mode: train `args.steps` steps and print one JSON line with the per-step RSS (MiB)."""
    import torch

    torch.set_num_threads(1)
    from lcsb_core.data import build_dataset, gsm8k_to_chat
    from lcsb_core.training import memory_probe
    from lcsb_core.training.callbacks import StepReport, TrainerCallback
    from lcsb_core.training.config import TrainConfig
    from lcsb_core.training.setup import load_components
    from lcsb_core.training.trainer import Trainer

    class Never(memory_probe.FreeMemoryReleaser):
        def after_step(self, rss_mib=None) -> bool:
            return False

    class EveryStep(memory_probe.FreeMemoryReleaser):
        def after_step(self, rss_mib=None) -> bool:
            memory_probe.release_free_memory(self.device)
            return True

    rows: list[dict] = []

    class Recorder(TrainerCallback):
        def on_step(self, report: StepReport) -> None:
            rows.append({"step": report.step, "rss_mib": memory_probe.current_mib(torch.device("cpu")),
                         "peak_mib": report.peak_memory_mib, "seconds": report.step_time_s})

    work = Path(args.work) / args.mode
    work.mkdir(parents=True, exist_ok=True)
    lines = (DATA / "gsm8k" / "train.jsonl").read_text().splitlines()[: args.steps * args.batch]
    train_file = work / "train.jsonl"
    train_file.write_text("".join(json.dumps(gsm8k_to_chat(json.loads(x))) + "\n" for x in lines))
    cfg = TrainConfig.from_dict({
        "data": {"train_file": str(train_file), "max_seq_len": args.seq},
        "model": {"name_or_path": args.model, "quantization": "nf4", "device": "cpu"},
        "lora": {"rank": 16, "alpha": 32, "dropout": 0.0},
        "lcsb": {"schedule": args.schedule},
        "optim": {"learning_rate": 2e-4, "warmup_steps": 0, "lr_schedule": "constant"},
        "batch_size": args.batch, "max_steps": args.steps, "seed": 0, "eval_every": 0, "save_every": 0,
        "eval_at_start": False, "log_every": 1, "output_dir": str(work / "run"),
    })
    model, tokenizer, device = load_components(cfg)
    train = build_dataset(train_file, tokenizer, max_seq_len=args.seq, min_examples=1)
    trainer = Trainer(cfg, callbacks=[Recorder()], model=model, tokenizer=tokenizer, device=device,
                      train_dataset=train)
    trainer.setup()
    trims = [0]
    base = {"releaser": memory_probe.FreeMemoryReleaser, "every-step": EveryStep, "never": Never,
            "jemalloc": Never, "jemalloc+releaser": memory_probe.FreeMemoryReleaser}[args.mode]

    class Counting(base):  # type: ignore[misc, valid-type]
        def after_step(self, rss_mib=None) -> bool:
            done = super().after_step(rss_mib)
            trims[0] += done
            return done

    trainer.releaser = Counting(device)
    lengths = [len(e.input_ids) for e in train.examples]
    trainer.train()
    vm_peak = memory_probe.status_mib("VmPeak")
    print(json.dumps({"mode": args.mode, "rows": rows, "trims": trims[0], "examples": len(lengths),
                      "min_len": min(lengths), "max_len": max(lengths), "malloc": memory_probe.c_allocator(),
                      "vm_peak_mib": vm_peak}), flush=True)


def summarize(result: dict) -> dict:
    """The printed row of one mode: RSS at fixed steps, the highest, growth settled -> end (MiB)."""
    rss = [r["rss_mib"] for r in result["rows"]]
    at = {s: rss[s - 1] for s in (10, 50, 100, 150) if s <= len(rss)}
    settled = statistics.median(rss[10:30]) if len(rss) >= 30 else statistics.median(rss)
    end = statistics.median(rss[-20:])
    return {"mode": result["mode"], "at": at, "last": rss[-1], "max": max(rss),
            "max_over_first8": max(rss[8:], default=float("nan")) / max(rss[:8]), "settled": settled, "end": end,
            "growth_mib": end - settled, "growth_ratio": end / settled, "trims": result["trims"],
            "peak": max((r.get("peak_mib") or 0.0) for r in result["rows"]),
            "vm_peak": result.get("vm_peak_mib", float("nan")),
            "step_s": statistics.median(r["seconds"] for r in result["rows"])}


def pair_ratios(base: dict, other: dict) -> str:
    """`other` against `base` (two modes' results over the same batches): total seconds and the
    median (IQR) of per-step time ratios base/other, on `topfull`'s full steps (every 4th) and the
    others apart, and of per-step peak ratios other/base."""
    tb, to = ([r["seconds"] for r in m["rows"]] for m in (base, other))
    time = [a / b for a, b in zip(tb, to, strict=True)]
    peak = [b["peak_mib"] / a["peak_mib"] for a, b in zip(base["rows"], other["rows"], strict=True)]
    full = [x for i, x in enumerate(time) if (i + 1) % 4 == 0]
    topk = [x for i, x in enumerate(time) if (i + 1) % 4]
    qt, qp = statistics.quantiles(time, n=4), statistics.quantiles(peak, n=4)
    return (f"{other['mode']} vs {base['mode']}: total {sum(tb):.0f} / {sum(to):.0f} s = {sum(tb) / sum(to):.3f}x; "
            f"per step {statistics.median(time):.3f}x (IQR {qt[0]:.3f}-{qt[2]:.3f}), full steps "
            f"{statistics.median(full):.3f}x, top-k {statistics.median(topk):.3f}x; step peak "
            f"{statistics.median(peak):.3f}x (IQR {qp[0]:.3f}-{qp[2]:.3f}); highest "
            f"{max(r['peak_mib'] for r in base['rows']):.0f} / {max(r['peak_mib'] for r in other['rows']):.0f} MiB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=200, help="optimizer steps per mode")
    ap.add_argument("--batch", type=int, default=4, help="examples per step")
    ap.add_argument("--seq", type=int, default=384, help="max_seq_len, tokens")
    ap.add_argument("--schedule", default="topfull", help="lcsb.schedule of every mode")
    ap.add_argument("--model", default="SmolLM2-135M-Instruct")
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma list of {MODES}")
    ap.add_argument("--work", default="runs/rss_flat", help="folder for each mode's data and run files")
    ap.add_argument("--json", default="", help="write every step's RSS here")
    ap.add_argument("--ratios", nargs="+", default=[], help="print the ratios of saved --json files, no run")
    ap.add_argument("--mode", default="", help=argparse.SUPPRESS)  # a child process
    args = ap.parse_args()
    if args.mode:
        return child(args)
    for saved in args.ratios:
        first, *others = json.loads(Path(saved).read_text())["results"]
        for other in others:
            print(pair_ratios(first, other))
    if args.ratios:
        return None
    modes = args.modes.split(",")
    for m in modes:
        if m not in MODES:
            raise SystemExit(f"--modes: unknown mode {m!r} ({', '.join(MODES)})")
    t0 = time.perf_counter()
    base = [sys.executable, __file__, "--steps", str(args.steps), "--batch", str(args.batch), "--seq", str(args.seq),
            "--schedule", args.schedule, "--model", args.model, "--work", args.work]
    def env(mode: str) -> dict[str, str]:
        preload = {"LD_PRELOAD": JEMALLOC} if mode.startswith("jemalloc") else {}
        return {**os.environ, "OMP_NUM_THREADS": "1", **preload}

    procs = {m: subprocess.Popen([*base, "--mode", m], stdout=subprocess.PIPE, text=True, env=env(m)) for m in modes}
    results = []
    for m, p in procs.items():
        out, _ = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"mode {m} failed with exit code {p.returncode}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    r0 = results[0]
    print(f"model={args.model} nf4 schedule={args.schedule} batch={args.batch} steps={args.steps} "
          f"GSM8K examples of {r0['min_len']}-{r0['max_len']} tokens, 1 thread per mode, "
          f"{len(modes)} modes side by side, {time.perf_counter() - t0:.0f} s")
    print("| mode | RSS @10 | @50 | @100 | @150 | last | max | max / first 8 | settled (11-30) | end (last 20) "
          "| growth (MiB) | end / settled | trims | step peak max | VM peak | step (s) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        s = summarize(r)
        cells = [f"{s['at'].get(k, float('nan')):.0f}" for k in (10, 50, 100, 150)]
        cells += [f"{s['last']:.0f}", f"{s['max']:.0f}", f"{s['max_over_first8']:.3f}x"]
        cells += [f"{s[k]:.0f}" for k in ("settled", "end")]
        print(f"| {s['mode']} | {' | '.join(cells)} | {s['growth_mib']:+.0f} | {s['growth_ratio']:.3f}x | "
              f"{s['trims']} | {s['peak']:.0f} | {s['vm_peak']:.0f} | {s['step_s']:.2f} |")
    for other in results[1:]:
        print(pair_ratios(results[0], other))
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": results}, indent=1))


if __name__ == "__main__":
    main()
