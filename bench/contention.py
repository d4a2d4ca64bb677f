"""The training step beside other work (issue 36, item 1): the README main job's step timed quiet and beside
a competing process, for several thread and OpenMP settings ("knobs"), side by side in one run.

    # the full measurement, on an otherwise quiet machine (about 2 h on 2 cores, 40 min a round; BENCHMARKS.md
    # "Training beside other work"):
    python bench/contention.py --rounds 3 --out bench/results/contention
    # a smoke run (minutes; says nothing about speed):
    nice -n 10 python bench/contention.py --rounds 1 --steps 2 --warmup 1 --conditions quiet,busy-nice \\
        --knobs "default;auto"

The step: SmolLM2-135M-Instruct (the catalog's) in NF4, LoRA r16 on the seven projections, the default
schedule `topfull/4` (`--schedule`), AdamW, `lcsb_core.training.step.run_step` on batches of `--batch` x `--seq`
tokens: the first GSM8K training examples (`../shared/data/gsm8k/train.jsonl`) as chat, loss on the
answers, truncated to `--seq` tokens and padded to exactly `--seq`. A timed chunk is `--steps` steps (4: one
whole `topfull/4` cycle, three top-quarter steps and one full), always the same steps on the same batches,
after `--warmup` untimed steps; between steps the trainer's `FreeMemoryReleaser`. The training process runs
with the worker child's C allocator (jemalloc when installed, `worker.training.allocator`).

Conditions (`--conditions`), each the same chunk while another process runs:
    quiet      nothing else
    busy       a pure-Python busy loop (one core), at this process's priority
    busy-nice  the same loop under `nice -n 19`
    infer      an inference stream: `lcsb_core.inference.InferenceEngine` (fp32, the serving default) answering
               a GSM8K question, 128 new tokens greedy, over and over, with torch's and OpenMP's defaults
               (what an inference worker runs today); its tokens/s are recorded
    train2     a second training process, the same step with the same knob (a second worker configured
               the same way); its steps/s are recorded

Knobs (`--knobs`, `;`-separated), each run in a fresh training process (OpenMP reads its environment when
it loads): `default` (nothing set: torch's threads = cores, libgomp's default spin of 300,000), `auto`
(the worker's own policy, `worker.threads.thread_policy`: threads from the CPU quota and affinity,
PASSIVE; `auto,slots=2` as for a worker running two jobs), or `key=value` pairs: `t=<n|cores|cores-1>`
(OMP_NUM_THREADS), `wait=passive|active` (OMP_WAIT_POLICY), `spin=<n>` (GOMP_SPINCOUNT: torch 2.13's CPU
wheel links libgomp, `ldd torch/lib/libtorch_cpu.so`), `interop=<n>` (`torch.set_num_interop_threads`);
they also modify `auto` (`auto,interop=1`). Knobs that resolve to the same settings run once.

Interleaving: each of `--rounds` rounds runs every knob (order rotated per round); a knob's training
process times one chunk under each condition (order rotated per round and knob), starting the busy loops
afresh and resuming the inference and second training processes (kept stopped with SIGSTOP in between, so
they load once), `--settle` seconds before timing. Results: per knob and condition the median over rounds of
the chunk's mean step time, its ratio to the same knob's quiet time and to the quiet time of `default`
(medians of per-round ratios, bench/common/timing.py `round_ratio`), and whether a knob meets issue 36's
targets (quiet no more than 5 % slower than `default`'s, beside a CPU-bound process at most 2.2x its own quiet
time).

Resumable: every finished (round, knob) is appended to `<out>/contention.partial.jsonl`; a rerun with the same
options skips those. At the end `<out>/contention.json` (bench/common/results.py: commit, machine, config)
and the tables on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common.paths import DATA
from bench.common.results import write_result
from bench.common.timing import round_ratio
from worker.threads import thread_policy
from worker.training.allocator import child_malloc

CONDITIONS = ("quiet", "busy", "busy-nice", "infer", "train2")
DEFAULT_KNOBS = ("default;auto;t=cores,wait=passive;t=cores,wait=active;t=cores-1;t=cores-1,wait=passive;t=1;"
                 "t=cores,spin=10000;auto,interop=1;auto,slots=2")
OMP_VARS = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "MKL_NUM_THREADS", "LCSB_THREAD_POLICY")
BUSY = "while True: pass"
QUESTION_ROWS = 1  # the inference stream's prompt: the first GSM8K test question


@dataclass(frozen=True)
class Knob:
    """One setting of the training process: `threads` (OMP_NUM_THREADS; None: torch's default), `wait`
    (OMP_WAIT_POLICY), `spin` (GOMP_SPINCOUNT), `interop` (torch.set_num_interop_threads); `names` the
    specs that resolved to it (the first names it)."""

    names: tuple[str, ...]
    threads: int | None = None
    wait: str | None = None
    spin: int | None = None
    interop: int | None = None

    @property
    def name(self) -> str:
        return self.names[0]

    def key(self, cores: int) -> tuple:
        """What the process runs with on `cores` usable cores (torch's default threads: one per core)."""
        return self.threads or cores, self.wait, self.spin, self.interop

    def env(self) -> dict[str, str]:
        """The environment variables this knob sets (besides them, none of `OMP_VARS` is passed on)."""
        pairs = (("OMP_NUM_THREADS", self.threads), ("OMP_WAIT_POLICY", self.wait), ("GOMP_SPINCOUNT", self.spin))
        return {k: str(v) for k, v in pairs if v is not None}


def parse_knob(spec: str, cores: int) -> Knob:
    """A knob spec (see the module docstring) -> Knob, for a machine of `cores` usable cores.
    Raises SystemExit naming the spec for an unknown key or value."""
    knob = Knob(names=(spec,))
    for part in [p.strip() for p in spec.split(",") if p.strip()]:
        key, _, value = part.partition("=")
        try:
            if part == "default":
                continue
            if part == "auto" or key == "slots":
                slots = int(value) if key == "slots" else 1
                policy = thread_policy(slots=slots)
                knob = replace(knob, threads=policy.threads, wait=policy.wait_policy)
            elif key == "t":
                named = {"cores": cores, "cores-1": cores - 1}.get(value)
                knob = replace(knob, threads=max(1, int(value) if named is None else named))
            elif key == "wait" and value.upper() in ("PASSIVE", "ACTIVE"):
                knob = replace(knob, wait=value.upper())
            elif key == "spin":
                knob = replace(knob, spin=int(value))
            elif key == "interop":
                knob = replace(knob, interop=int(value))
            else:
                raise ValueError(part)
        except ValueError:
            raise SystemExit(f"--knobs: cannot read {part!r} in {spec!r}") from None
    return knob


def parse_knobs(text: str, cores: int) -> list[Knob]:
    """The `;`-separated knob specs, those resolving to the same settings merged (their names kept);
    `default` always among them (the reference of the "x quiet default" ratio)."""
    out: list[Knob] = []
    for spec in ["default"] + [s.strip() for s in text.split(";") if s.strip()]:
        knob = parse_knob(spec, cores)
        same = next((i for i, k in enumerate(out) if k.key(cores) == knob.key(cores)), None)
        if same is None:
            out.append(knob)
        elif spec not in out[same].names:
            out[same] = replace(out[same], names=out[same].names + (spec,))
    return out


# ---- the processes ------------------------------------------------------------------------------------

def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any of `OMP_VARS`, plus `extra` (and quiet loading: no progress bars)."""
    return {**{k: v for k, v in os.environ.items() if k not in OMP_VARS}, "PYTHONUNBUFFERED": "1",
            "HF_HUB_DISABLE_PROGRESS_BARS": "1", "TRANSFORMERS_VERBOSITY": "error", **extra}


def role_command(role: str, args, knob: Knob | None = None) -> list[str]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--role", role, "--model", args.model,
           "--batch", str(args.batch), "--seq", str(args.seq), "--schedule", args.schedule,
           "--steps", str(args.steps), "--warmup", str(args.warmup)]
    return cmd + (["--knob", json.dumps(asdict(knob))] if knob else [])


class Process:
    """A child process whose stdout lines are read by a thread: `ready` (set at a line starting with
    "ready"), `ticks` ((monotonic time, units) of each "tick <units>" line: tokens or steps done) and the
    other lines (answers) queued in `lines`."""

    def __init__(self, cmd: list[str], env: dict[str, str], *, nice: int = 0, stdin: bool = False,
                 ready_at_start: bool = False) -> None:
        self.proc = subprocess.Popen(cmd, env=env, text=True, stdout=subprocess.PIPE,
                                     stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                     preexec_fn=(lambda: os.nice(nice)) if nice else None)
        self.ready = threading.Event()
        self.ticks: list[tuple[float, float]] = []
        self.lines: list[str] = []
        self.got_line = threading.Condition()
        if ready_at_start:
            self.ready.set()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("tick "):
                self.ticks.append((time.monotonic(), float(line.split()[1])))
            else:
                with self.got_line:
                    self.lines.append(line.removeprefix("ready").strip())
                    self.got_line.notify_all()
                if line.startswith("ready"):
                    self.ready.set()
        with self.got_line:
            self.got_line.notify_all()

    def wait_ready(self, what: str) -> None:
        while not self.ready.wait(1.0):
            if self.proc.poll() is not None:
                raise SystemExit(f"{what} exited with status {self.proc.returncode} before it was ready")

    def ask(self, command: str) -> str:
        """Send one command line and return the answer line (raises SystemExit if the process ends)."""
        assert self.proc.stdin is not None
        with self.got_line:
            seen = len(self.lines)
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
            while len(self.lines) == seen:
                if self.proc.poll() is not None:
                    raise SystemExit(f"the training process exited with status {self.proc.returncode}")
                self.got_line.wait(1.0)
            return self.lines[-1]

    def rate(self, t0: float, t1: float) -> float:
        """Units per second reported between t0 and t1 (monotonic)."""
        return sum(u for t, u in self.ticks if t0 <= t <= t1) / (t1 - t0)

    def pause(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait()


def measure_knob(args, knob: Knob, conditions: list[str], infer: Process | None, malloc_env) -> dict[str, Any]:
    """One knob's training process: its chunk under each condition in `conditions`' order. Returns the
    record of this (round, knob): per condition the step times and the competitor's rate."""
    env = malloc_env(clean_env(**knob.env()))
    step = Process(role_command("step", args, knob), env, stdin=True)
    train2 = Process(role_command("train", args, knob), env) if "train2" in conditions else None
    busy: Process | None = None
    try:
        step.wait_ready("the training process")
        seen = json.loads(step.lines[-1])
        if train2 is not None:
            train2.wait_ready("the second training process")
            train2.pause()
        out: dict[str, Any] = {}
        for cond in conditions:
            competitor = None
            if cond in ("busy", "busy-nice"):
                competitor = busy = Process([sys.executable, "-c", BUSY], clean_env(),
                                            nice=19 if cond == "busy-nice" else 0, ready_at_start=True)
            elif cond in ("infer", "train2"):
                competitor = infer if cond == "infer" else train2
                assert competitor is not None
                competitor.resume()
            if competitor is not None:
                time.sleep(args.settle)
            t0 = time.monotonic()
            times = json.loads(step.ask("time"))
            t1 = time.monotonic()
            rate = competitor.rate(t0, t1) if competitor is not None and cond in ("infer", "train2") else None
            if cond in ("busy", "busy-nice") and competitor is not None:
                competitor.close()
            elif competitor is not None:
                competitor.pause()
            out[cond] = {"step_s": times, "mean_s": statistics.fmean(times), "competitor_per_s": rate}
            print(f"  {knob.name} / {cond}: {out[cond]['mean_s']:.2f} s a step"
                  + (f", competitor {rate:.2f}/s" if rate is not None else ""), file=sys.stderr, flush=True)
        step.ask("quit")
        return {"knob": knob.name, "settings": asdict(knob), "seen": seen, "conditions": out}
    finally:
        for p in (step, train2, busy):  # a busy loop is left running only when timing failed
            if p is not None:
                p.close()


# ---- the roles run in the child processes ------------------------------------------------------------

def gsm8k_batches(tokenizer, batch: int, seq: int, count: int) -> list[dict]:
    """`count` batches [batch, seq] of the first batch x count GSM8K training examples as chat (loss on
    the answer), truncated to `seq` tokens and padded to exactly `seq`."""
    from lcsb_core.data import build_dataset, collate, gsm8k_to_chat

    need = batch * count
    with tempfile.TemporaryDirectory() as tmp, open(DATA / "gsm8k" / "train.jsonl") as f:
        path = Path(tmp) / "train.jsonl"
        rows = [json.dumps(gsm8k_to_chat(json.loads(next(f)))) for _ in range(need)]
        path.write_text("\n".join(rows) + "\n")
        ds = build_dataset(path, tokenizer, max_seq_len=seq, min_examples=need)
    ex = ds.examples
    return [collate(ex[i * batch:(i + 1) * batch], tokenizer.pad_token_id, pad_to_multiple_of=seq)
            for i in range(count)]


def train_role(args, *, forever: bool) -> None:
    """The measured training process (`forever=False`: after the warm-up prints `ready {threads...}`, then
    answers each `time` line on stdin with the JSON list of `--steps` step times, until `quit`) or the
    competing one (`forever=True`: steps without end, a `tick 1` line after each)."""
    import torch

    knob = Knob(**{**json.loads(args.knob), "names": ("",)})
    if knob.interop:
        torch.set_num_interop_threads(knob.interop)
    from bench.common.bare_step import bare_model, schedule_of
    from lcsb_core.models.loading import load_tokenizer, resolve_model_path
    from lcsb_core.training.memory_probe import FreeMemoryReleaser
    from lcsb_core.training.step import run_step

    device = torch.device("cpu")
    folder = resolve_model_path(args.model)
    model, sel, opt = bare_model(folder, "nf4", 16, device)
    batches = gsm8k_batches(load_tokenizer(folder), args.batch, args.seq, args.steps)
    sched = schedule_of(args.schedule, sel.num_layers)
    releaser = FreeMemoryReleaser(device)

    def step(t: int) -> float:
        t0 = time.perf_counter()
        run_step(model, sel, opt, [batches[t % len(batches)]], sched.layers_for_step(t), step=t,
                 momentum_for_skipped=True, max_grad_norm=1.0, deep_fraction=sched.deep_fraction,
                 shallow=sched.shallow_layers(t))
        seconds = time.perf_counter() - t0
        releaser.after_step()
        return seconds

    for t in range(args.warmup):
        step(t)
    print("ready " + json.dumps({"threads": torch.get_num_threads(), "interop": torch.get_num_interop_threads(),
                                 "omp": {k: os.environ.get(k) for k in OMP_VARS[:3]},
                                 "malloc": os.environ.get("LD_PRELOAD", "") or "glibc"}), flush=True)
    if forever:
        for t in range(10**9):
            step(t)
            print("tick 1", flush=True)
    for line in sys.stdin:
        if line.strip() == "quit":
            print("bye", flush=True)
            return
        print(json.dumps([round(step(t), 4) for t in range(args.steps)]), flush=True)


def infer_role(args) -> None:
    """The inference stream: one GSM8K question answered over and over (128 new tokens, greedy), a
    `tick 1` line per piece of text; `ready` after the first answer."""
    from lcsb_core.inference import InferenceEngine, SamplingParams
    from lcsb_core.models.loading import resolve_model_path

    engine = InferenceEngine(resolve_model_path(args.model), precision="fp32")
    with open(DATA / "gsm8k" / "test.jsonl") as f:
        question = json.loads(next(f))["question"]
    ids = engine.chat_prompt([{"role": "user", "content": question}], engine.template_of(None))
    for n in range(10**9):
        for _ in engine.stream(ids, None, SamplingParams(max_new_tokens=128, temperature=0.0)):
            print("tick 1", flush=True)
        if n == 0:
            print("ready", flush=True)


# ---- the summary --------------------------------------------------------------------------------------

def summarise(records: list[dict], knobs: list[Knob], conditions: list[str]) -> list[dict]:
    """Rows (knob, condition): `step_s` (median over rounds of the chunk's mean), `rounds` (each round's),
    `vs_own_quiet` and `vs_default_quiet` (medians of per-round ratios; None without a quiet chunk),
    `competitor_per_s` (median)."""
    by = {(r["round"], r["knob"]): r["conditions"] for r in records}
    rounds = sorted({r["round"] for r in records})
    rows = []
    for knob in knobs:
        done = [r for r in rounds if (r, knob.name) in by]
        for cond in conditions:
            times = [by[(r, knob.name)][cond]["mean_s"] for r in done]
            if not times:
                continue
            own = [by[(r, knob.name)]["quiet"]["mean_s"] for r in done] if "quiet" in conditions else None
            both = [r for r in done if (r, "default") in by]
            ref = [by[(r, "default")]["quiet"]["mean_s"] for r in both] if "quiet" in conditions else None
            comp = [c for r in done if (c := by[(r, knob.name)][cond]["competitor_per_s"]) is not None]
            rows.append({"knob": knob.name, "aliases": list(knob.names[1:]), "settings": asdict(knob),
                         "condition": cond, "step_s": statistics.median(times), "rounds": times,
                         "vs_own_quiet": round_ratio(times, own) if own else None,
                         "vs_default_quiet": round_ratio([by[(r, knob.name)][cond]["mean_s"] for r in both], ref)
                         if ref else None,
                         "competitor_per_s": statistics.median(comp) if comp else None})
    return rows


def tables(rows: list[dict], conditions: list[str]) -> str:
    """Markdown: the matrix (knob x condition: step s, x own quiet, x quiet default) and the verdict per
    knob against issue 36's targets."""
    fmt = lambda v, f: f.format(v) if v is not None else "-"  # noqa: E731
    knobs = list(dict.fromkeys(r["knob"] for r in rows))
    cell = {(r["knob"], r["condition"]): r for r in rows}
    out = ["| knob | " + " | ".join(conditions) + " |", "|---|" + "---|" * len(conditions)]
    for k in knobs:
        first = next(r for r in rows if r["knob"] == k)
        label = k + (f" (= {', '.join(first['aliases'])})" if first["aliases"] else "")
        cells = []
        for c in conditions:
            r = cell.get((k, c))
            comp = r and r["competitor_per_s"]
            cells.append("" if r is None else f"{r['step_s']:.2f} s, {fmt(r['vs_own_quiet'], '{:.2f}x')} own, "
                         f"{fmt(r['vs_default_quiet'], '{:.2f}x')} default"
                         + (f"; {'tok' if c == 'infer' else 'steps'}/s {comp:.2f}" if comp else ""))
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    cpu_bound = [c for c in ("busy", "busy-nice") if c in conditions]
    if "quiet" in conditions and cpu_bound:
        out += ["", "| knob | quiet vs default (<= 1.05x) | worst beside a CPU-bound process (x own quiet, <= 2.2x) "
                "| meets issue 36 |",
                "|---|---|---|---|"]
        for k in knobs:
            quiet = cell[(k, "quiet")]["vs_default_quiet"] if (k, "quiet") in cell else None
            worst = max((cell[(k, c)]["vs_own_quiet"] for c in cpu_bound if (k, c) in cell), default=None)
            ok = quiet is not None and worst is not None and quiet <= 1.05 and worst <= 2.2
            out.append(f"| {k} | {fmt(quiet, '{:.3f}x')} | {fmt(worst, '{:.2f}x')} | {'yes' if ok else 'no'} |")
    return "\n".join(out)


# ---- main ---------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="SmolLM2-135M-Instruct")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--schedule", default="topfull/4", help="schedule token name[/full_every]")
    ap.add_argument("--steps", type=int, default=4, help="timed steps per chunk (4: one topfull/4 cycle)")
    ap.add_argument("--warmup", type=int, default=4, help="untimed steps after the model loads")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--settle", type=float, default=3.0, help="seconds a competitor runs before timing starts")
    ap.add_argument("--conditions", default=",".join(CONDITIONS), help=f"comma list of {', '.join(CONDITIONS)}")
    ap.add_argument("--knobs", default=DEFAULT_KNOBS, help="';'-separated knob specs (module docstring)")
    ap.add_argument("--out", default="bench/results/scratch/contention", type=Path)
    ap.add_argument("--role", default="run", choices=["run", "step", "train", "infer"], help=argparse.SUPPRESS)
    ap.add_argument("--knob", default="{}", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.role in ("step", "train"):
        return train_role(args, forever=args.role == "train")
    if args.role == "infer":
        return infer_role(args)
    conditions = [c.strip() for c in args.conditions.split(",") if c.strip()]
    if unknown := [c for c in conditions if c not in CONDITIONS]:
        raise SystemExit(f"--conditions: unknown {unknown}; known: {', '.join(CONDITIONS)}")
    cores = len(os.sched_getaffinity(0))
    knobs = parse_knobs(args.knobs, cores)
    config = {k: getattr(args, k) for k in ("model", "batch", "seq", "schedule", "steps", "warmup", "settle")}
    config |= {"conditions": conditions, "knobs": [asdict(k) for k in knobs], "cores": cores}
    config = json.loads(json.dumps(config))  # as a partial file holds it (tuples become lists)
    partial = args.out / "contention.partial.jsonl"
    records = [json.loads(line) for line in partial.read_text().splitlines()] if partial.is_file() else []
    if records and records[0]["config"] != config:
        raise SystemExit(f"{partial} holds a run with other options; choose another --out or remove it")
    done = {(r["round"], r["knob"]) for r in records}
    started, load_before = datetime.now(UTC), list(os.getloadavg())
    malloc = child_malloc("jemalloc")
    print(f"{len(knobs)} knobs x {len(conditions)} conditions x {args.rounds} rounds; {len(done)} (round, knob) "
          f"done; knobs: " + "; ".join(f"{k.name} {k.env() or '(torch default)'}"
                                       + (f" interop {k.interop}" if k.interop else "") for k in knobs),
          file=sys.stderr, flush=True)
    infer, infer_alone = None, None
    try:
        if "infer" in conditions and len(done) < len(knobs) * args.rounds:
            infer = Process(role_command("infer", args), clean_env())
            infer.wait_ready("the inference stream")
            t0 = time.monotonic()
            time.sleep(10.0)
            infer_alone = infer.rate(t0, time.monotonic())  # its tokens/s with nothing else running
            print(f"inference stream alone: {infer_alone:.1f} tok/s", file=sys.stderr, flush=True)
            infer.pause()
        args.out.mkdir(parents=True, exist_ok=True)
        for rnd in range(args.rounds):
            for i in [(rnd + j) % len(knobs) for j in range(len(knobs))]:
                if (rnd, knobs[i].name) in done:
                    continue
                shift = (rnd + i) % len(conditions)
                order = conditions[shift:] + conditions[:shift]
                print(f"round {rnd + 1}/{args.rounds}, knob {knobs[i].name}: {', '.join(order)}", file=sys.stderr,
                      flush=True)
                record = {"round": rnd, **measure_knob(args, knobs[i], order, infer, malloc.env), "config": config}
                with partial.open("a") as f:
                    f.write(json.dumps(record) + "\n")
                records.append(record)
    finally:
        if infer is not None:
            infer.close()
    rows = summarise(records, knobs, conditions)
    path = write_result(args.out / "contention.json", {"rows": rows, "records": records,
                                                       "infer_alone_per_s": infer_alone}, config,
                        started=started, load_before=load_before)
    print(f"{args.model} NF4 {args.schedule} {args.batch} x {args.seq}, {args.steps} steps a chunk, {args.rounds} "
          f"rounds, {cores} cores, malloc {malloc.describe()}"
          + (f"; the inference stream alone {infer_alone:.1f} tok/s" if infer_alone else "") + f"; {path}")
    print(tables(rows, conditions))


if __name__ == "__main__":
    main()
