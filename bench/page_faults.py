"""What page faults cost a step on this machine, and what two ways of avoiding them save: the chunked LM-head
loss (`lcsb_core.loss.HeadLossSum`, `lcsb_core.memory.LOSS_CHUNK_BYTES`) and keeping freed memory in the C heap
(`lcsb_core.memory_probe.retain_freed_memory`).

    python bench/page_faults.py --schedule full --pairs 3 --steps 6 --json bench/results/page_faults_full_cpu.json
    python bench/page_faults.py --schedule topfull/4 --pairs 3 --steps 8 \
        --json bench/results/page_faults_topfull_cpu.json

Modes, one child process each (glibc settings are per process, and a fresh process gives each its own peak):
- `whole`: the loss over all target positions at once (`LOSS_CHUNK_BYTES` = 0), glibc as it comes: the
  product's step today;
- `chunked`: the LM head and cross-entropy in chunks of 16 MiB of logits, each chunk's gradient taken
  during the forward (`lcsb_core.loss.HeadLossSum`);
- `whole+retain`: `whole` with `retain_freed_memory` called before the model loads;
- `chunked+retain`: both, as the product's training processes would run once the memory estimate is
  refitted (`lcsb_core.memory.LOSS_CHUNK_BYTES`).
Each pair runs one child per mode, the order rotated between pairs so machine drift spreads over all
modes. Each child loads
SmolLM2-135M-Instruct NF4 with LoRA r16 (bench/trainer_overhead.py `trainer_for`), runs one untimed
whole cycle of the schedule, then `--steps` bare steps (`run_step` on one random 4 x 256 batch, every
token a target) and reports per step: seconds, minor page faults (`getrusage` `ru_minflt`) and the
resident set after the step; and its peak resident set (VmHWM) over the timed steps, MiB.

Prints a markdown table: per mode the step time (the mean over a child's timed steps, which are whole
cycles of the schedule, so a `topfull/4` child's mean weighs its full step as the schedule does; the
median over children), the median faults per step and the MiB they
map (4 KiB pages), the median resident set and the peak, and the per-pair ratio of `whole`'s step time
to the mode's (median over pairs); then the machine's cost per page fault from a separate probe (fault
in 1 GiB of anonymous memory against rewriting it; seconds per GiB).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PAGE_MIB = 4096 / 2**20
MODES = ("whole", "chunked", "whole+retain", "chunked+retain")
CHUNK_BYTES = 16 * 2**20  # the chunked modes' lcsb_core.memory.LOSS_CHUNK_BYTES


def fault_probe(gib: int = 1, reps: int = 3) -> dict:
    """Seconds to fault in and write `gib` GiB of fresh anonymous memory, against rewriting it once mapped
    (median of `reps`)."""
    n, first, again = gib << 30, [], []
    for _ in range(reps):
        m = mmap.mmap(-1, n)
        buf = (ctypes.c_char * n).from_buffer(m)
        for value, into in ((1, first), (2, again)):
            t = time.perf_counter()
            ctypes.memset(buf, value, n)
            into.append(time.perf_counter() - t)
        del buf
        m.close()
    return {"fault_s_per_gib": statistics.median(first) / gib, "rewrite_s_per_gib": statistics.median(again) / gib}


def child(args) -> dict:
    """One process of one mode: the measurement described in the module docstring."""
    import torch

    from bench.step_time import bare_cycle
    from bench.trainer_overhead import trainer_for
    from lcsb_core.data.batching import collate
    from lcsb_core.memory_probe import current_mib, peak_mib, reset_peak, retain_freed_memory

    device = torch.device("cpu")
    if args.threads:
        torch.set_num_threads(args.threads)
    from lcsb_core import memory

    applied = retain_freed_memory(device) if args.child.endswith("+retain") else False
    memory.LOSS_CHUNK_BYTES = 0 if args.child.startswith("whole") else CHUNK_BYTES
    with tempfile.TemporaryDirectory() as tmp:
        trainer = trainer_for(args, args.schedule, 1, tmp, device)
        trainer.setup()
        batch = {k: v.to(device) for k, v in collate(trainer.train_dataset.examples, 0).items()}
        cycle = bare_cycle(trainer.model, trainer.selective, trainer.optimizer, batch, args.schedule)
        for step in cycle:
            step()
        reset_peak(device)
        rows = []
        for i in range(args.steps):
            f0, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
            cycle[i % len(cycle)]()
            dt, f1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            rows.append({"step_s": dt, "faults": f1 - f0, "rss_mib": current_mib(device)})
        return {"mode": args.child, "applied": applied, "threads": torch.get_num_threads(), "steps": rows,
                "peak_mib": peak_mib(device)}


def main() -> None:
    from bench.step_time import add_interleaved_bench_args

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_interleaved_bench_args(ap, schedule_help="schedule token, e.g. full or topfull/4",
                               rounds_help="unused", json_help="write every child's rows here")
    ap.add_argument("--pairs", type=int, default=3, help="child processes per mode, alternating")
    ap.add_argument("--steps", type=int, default=8, help="timed steps per child (a multiple of the cycle)")
    ap.add_argument("--modes", default=",".join(MODES), help="comma list of " + ", ".join(MODES) + "; whole first")
    ap.add_argument("--report", default="", help="print the table of a saved --json run instead of measuring")
    ap.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    if args.report:
        saved = json.loads(Path(args.report).read_text())
        report(argparse.Namespace(**saved["args"]), saved["runs"], saved["probe"])
        return
    modes = tuple(args.modes.split(","))
    if modes[0] != "whole" or not set(modes) <= set(MODES):
        ap.error(f"--modes: a comma list of {', '.join(MODES)} starting with whole, got {args.modes!r}")
    runs: dict[str, list[dict]] = {m: [] for m in modes}
    for p in range(args.pairs):
        for mode in modes[p % len(modes):] + modes[:p % len(modes)]:
            cmd = [sys.executable, __file__, "--child", mode, "--schedule", args.schedule, "--steps", str(args.steps),
                   "--threads", str(args.threads), "--model", args.model, "--quant", args.quant,
                   "--batch", str(args.batch), "--seq", str(args.seq), "--rank", str(args.rank)]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            runs[mode].append(json.loads(out.strip().splitlines()[-1]))
            r = runs[mode][-1]
            print(f"pair {p + 1} {mode}: " + " ".join(f"{s['step_s']:.2f}" for s in r["steps"]), file=sys.stderr)
    probe = fault_probe()
    report(args, runs, probe)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "probe": probe, "runs": runs}, indent=1))


def report(args, runs: dict[str, list[dict]], probe: dict) -> None:
    """Print the module docstring's table for `runs` (mode -> one child result per pair)."""
    modes = tuple(runs)

    def med(mode: str, key: str) -> float:
        return statistics.median(statistics.median(s[key] for s in r["steps"]) for r in runs[mode])

    def step_mean(r: dict) -> float:  # a child's timed steps are whole cycles
        return statistics.fmean(s["step_s"] for s in r["steps"])

    ratios = {m: [step_mean(w) / step_mean(r) for w, r in zip(runs["whole"], runs[m], strict=True)] for m in modes}
    print(f"schedule={args.schedule} batch={args.batch}x{args.seq} threads={runs['whole'][0]['threads']} "
          f"pairs={args.pairs} steps={args.steps}; page-fault probe: {probe['fault_s_per_gib']:.2f} s/GiB to fault "
          f"in fresh memory, {probe['rewrite_s_per_gib']:.3f} s/GiB to rewrite mapped memory")
    print("| mode | step (s) | whole / mode (per pair) | page faults per step | MiB faulted per step "
          "| RSS after step (MiB) | peak (MiB) |")
    print("|---|---|---|---|---|---|---|")
    for mode in modes:
        step = statistics.median(step_mean(r) for r in runs[mode])
        print(f"| {mode} | {step:.3f} | {statistics.median(ratios[mode]):.3f}x "
              f"({', '.join(f'{x:.2f}' for x in ratios[mode])}) | {med(mode, 'faults'):.0f} "
              f"| {med(mode, 'faults') * PAGE_MIB:.0f} | {med(mode, 'rss_mib'):.0f} "
              f"| {statistics.median(r['peak_mib'] for r in runs[mode]):.0f} |")

if __name__ == "__main__":
    main()
