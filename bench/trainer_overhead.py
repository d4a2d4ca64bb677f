"""What the loop around a step costs: the bare step against the same steps through `lcsb_core.training.trainer.Trainer`
(issue 14, item 2), interleaved in one process on the same model, batch, schedule and optimizer.

    # the full measurement (CPU, SmolLM2-135M-Instruct NF4, batch 4 x 256, all cores), once per schedule:
    python bench/trainer_overhead.py --schedule topfull/4 --warmup-rounds 1 --rounds 8 \
        --json bench/results/trainer_overhead_topfull.json
    python bench/trainer_overhead.py --schedule full --warmup-rounds 1 --rounds 16 \
        --json bench/results/trainer_overhead_full.json
    # where the difference goes (cProfile over 8 trainer steps after 2 untimed ones; no interleaving):
    python bench/trainer_overhead.py --schedule topfull/4 --profile 8
    # a smoke run (seconds; says nothing about speed):
    OMP_NUM_THREADS=1 python bench/trainer_overhead.py --batch 1 --seq 64 --rounds 1 --warmup-rounds 0 --threads 1

Modes (each round runs one whole cycle of each, order rotated: bench/step_time.py `interleave`):

- (a) `bare`: `lcsb_core.training.step.run_step` alone (what bench/step_time.py times): forward, loss, backward,
  clipping, AdamW step.
- (b) `trainer`: `Trainer.train()` with its callbacks, run in a helper thread that pauses inside the
  step callback (`on_step`, the last thing of a step's reporting) until the main thread asks for the next
  step; only one thread runs at a time. A step's time is one whole pass of the loop: the previous step's
  `malloc_trim`, the cancel check, the next batch (collated from the dataset), the learning rate, the
  peak-RSS reset, the update-norm snapshot, `run_step`, and the reporting (history and metrics appends,
  update norms, the peak read, the callbacks). (a) runs on the Trainer's own model, selective-backprop
  wrapper and optimizer, so the two differ only by the loop.
- (c) `job`: the same loop with the worker child's own callbacks, as `worker.training.child.train` builds them
  (`DivergenceWatch`, `JobReporter`), reporting a `running` job row in the embedded default's backends:
  a SQLite database migrated with `alembic upgrade head` and local storage, in a temporary folder.
  Each step thus also writes the job's progress, heartbeat and `metrics` event and reads its status
  (the cancel check), as in a service job. The child process itself adds nothing per step (it runs
  this same loop), so it is not interleaved here: in-process steps cannot be interleaved with another
  process's. (c) has its own copy of the model, loaded the same way.

The batch: `--batch` examples of `--seq` uniform random tokens, every token a target; the Trainer's
dataset is those examples (one batch per epoch, so every trainer step trains the same rows, shuffled),
and (a) trains their collated batch.

Prints (stdout) a markdown table: per mode the step time in seconds (median over rounds of the per-cycle
mean), its min-max over rounds, the per-round ratio to (a) (median over rounds: (b)/(a), (c)/(a)), and
the peak resident set over idle in MiB (as bench/step_time.py). `--json` also writes every round's times.
`--no-job` leaves (c) out. `--profile N` instead runs `Trainer.train()` for N + 2 steps and prints
cProfile's top functions by own time over the last N steps, then the lcsb_core functions outside
`run_step` (the loop's own cost) by cumulative time, each in seconds per step and as a share of the
profiled time (cProfile's tracing slows Python-heavy code, so shares of Python-side work are upper bounds).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common.bare_step import bare_cycle, schedule_of
from bench.common.timing import add_interleaved_bench_args, interleave, round_ratio
from lcsb_core.data import EncodedExample, TokenizedDataset, ValidationReport
from lcsb_core.data.batching import collate
from lcsb_core.models.loading import load_base_model, resolve_model_path
from lcsb_core.training.callbacks import StepReport, TrainerCallback
from lcsb_core.training.config import LoraSettings, TrainConfig
from lcsb_core.training.lora import apply_lora
from lcsb_core.training.memory_probe import current_mib, release_free_memory
from lcsb_core.training.trainer import Trainer
from lcsb_service import transitions
from lcsb_service.db import Database
from lcsb_service.devserver import migrate
from lcsb_service.models import Job, Owner
from lcsb_service.storage import Storage
from worker.training.divergence import DivergenceWatch  # the worker child's callbacks: what mode (c) measures
from worker.training.reporter import JobReporter


class SteppedLoop(TrainerCallback):
    """Runs `Trainer.train()` in a helper thread that stops after every optimizer step (in `on_step`) until
    `step()` is called: the loop becomes a callable that runs exactly one pass. Put it last among the
    trainer's callbacks, so the others' `on_step` is inside the pass. `finish()` lets the loop run to its
    end (final adapter, plots) and returns the summary."""

    def __init__(self) -> None:
        self.trainer: Trainer | None = None
        self._go, self._paused = threading.Semaphore(0), threading.Semaphore(0)
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.summary: dict | None = None
        self.reports: list[StepReport] = []
        self.threads_in_loop = 0
        self._finishing = False

    def _run(self) -> None:
        self._go.acquire()
        try:
            self.threads_in_loop = torch.get_num_threads()
            if self.trainer is None:
                raise RuntimeError("SteppedLoop: set .trainer before the first step")
            self.summary = self.trainer.train()
        except BaseException as exc:  # noqa: BLE001  # handed to the main thread by step()/finish()
            self.error = exc
        finally:
            self._paused.release()

    def on_step(self, report: StepReport) -> None:
        self.reports.append(report)
        if self._finishing:
            return
        self._paused.release()
        self._go.acquire()

    def step(self) -> None:
        """Run the loop for one optimizer step (the first call starts `train()`)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="trainer-loop", daemon=True)
            self._thread.start()
        self._go.release()
        self._paused.acquire()
        if self.error is not None:
            raise self.error

    def finish(self) -> dict | None:
        """Let the loop run its remaining steps without pausing, wait for it, and return its summary."""
        self._finishing = True
        if self._thread is not None and self._thread.is_alive():
            self._go.release()
            self._thread.join()
        if self.error is not None:
            raise self.error
        return self.summary


def random_dataset(vocab_size: int, batch: int, seq: int, seed: int = 0) -> TokenizedDataset:
    """`batch` examples of `seq` uniform random tokens, every token a target."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab_size - 1, (batch, seq), generator=gen).tolist()
    return TokenizedDataset([EncodedExample(input_ids=row, labels=list(row), line=i + 1) for i, row in enumerate(ids)],
                            ValidationReport(path="random", file_type="jsonl"))


def trainer_for(args, token: str, steps: int, out_dir: str, device: torch.device, callbacks=()) -> Trainer:
    """A Trainer on a freshly loaded model (NF4 as `--quant`, LoRA r 16 / alpha 32 on the seven
    projections, seed 0) and `random_dataset`, running schedule `token` for `steps` steps at lr 1e-5
    (constant), no evaluation, no checkpoints, a metrics row every step."""
    folder = resolve_model_path(args.model)
    model = apply_lora(load_base_model(folder, quantization=args.quant, device=device), LoraSettings(rank=args.rank),
                       seed=0)
    name, _, every = token.partition("/")
    lcsb: dict[str, str | float | int] = {"schedule": name} if name == "full" else {"schedule": name, "fraction": 0.25}
    if name == "topfull" and every:
        lcsb["full_every"] = int(every)
    cfg = TrainConfig.from_dict({
        "data": {"train_file": "random", "max_seq_len": args.seq}, "output_dir": out_dir, "batch_size": args.batch,
        "max_steps": steps, "eval_every": 0, "save_every": 0, "log_every": 1, "seed": 0, "lcsb": lcsb,
        "lora": {"rank": args.rank}, "model": {"quantization": args.quant, "device": str(device)},
        "optim": {"learning_rate": 1e-5, "lr_schedule": "constant"}})
    return Trainer(cfg, callbacks=callbacks, model=model, train_dataset=random_dataset(
        model.config.vocab_size, args.batch, args.seq), device=device)


def service_job_callbacks(folder: Path, model: str) -> list[TrainerCallback]:
    """Mode (c)'s callbacks: the worker child's `DivergenceWatch` and `JobReporter` (as `worker.training.child.train`
    builds them) on a job row set `running` by `transitions.claim`, in a SQLite database at
    `folder/lcsb.sqlite3` migrated with `alembic upgrade head`, with local storage at `folder/storage`."""
    url = f"sqlite:///{folder / 'lcsb.sqlite3'}"
    migrate(url)
    db, job_id = Database(url), "ftjob-bench"
    with db.session() as s:
        s.add(Owner(id="owner-bench", name="bench"))
        s.flush()
        s.add(Job(id=job_id, owner_id="owner-bench", model=model, training_file="file-bench", seed=0,
                  hyperparameters={}, method={}, train_config={}, memory_estimate={}, queue="bench"))
    with db.session() as s:
        if transitions.claim(s, job_id, worker="bench") is None:
            raise RuntimeError("could not claim the benchmark's job row")
    return [DivergenceWatch(db, job_id, folder / "run"),
            JobReporter(db, Storage(str(folder / "storage")), job_id, "ft:bench", threading.Event())]


def measure(args, device: torch.device) -> dict:
    """Interleaved (a) bare, (b) trainer and, unless `--no-job`, (c) job steps; returns the result dict
    (see the module docstring)."""
    layers = json.loads((resolve_model_path(args.model) / "config.json").read_text())["num_hidden_layers"]
    cycle = schedule_of(args.schedule, layers).cycle_length
    steps = (args.warmup_rounds + args.rounds) * cycle
    loops = [SteppedLoop()] + ([] if args.no_job else [SteppedLoop()])
    with tempfile.TemporaryDirectory() as tmp:
        trainer = trainer_for(args, args.schedule, steps, f"{tmp}/b", device, callbacks=[loops[0]])
        loops[0].trainer = trainer
        trainer.setup()
        batch = {k: v.to(device) for k, v in collate(trainer.train_dataset.examples, 0).items()}
        head = f"+chunk{trainer.config.loss_chunk_mib}" if trainer.config.loss_chunk_mib else ""  # its LM head
        bare = bare_cycle(trainer.model, trainer.selective, trainer.optimizer, batch, args.schedule + head)
        names = ["bare (a)", "trainer (b)"]
        cycles: list[list[Callable[[], object]]] = [bare, [loops[0].step] * cycle]
        if not args.no_job:
            (Path(tmp) / "c").mkdir()
            job = service_job_callbacks(Path(tmp) / "c", Path(args.model).name)
            loops[1].trainer = trainer_for(args, args.schedule, steps, f"{tmp}/c/run", device,
                                           callbacks=[*job, loops[1]])
            loops[1].trainer.setup()
            names.append("job (c)")
            cycles.append([loops[1].step] * cycle)
        release_free_memory(device)
        idle = current_mib(device)
        times, peaks = interleave(cycles, names, device, rounds=args.rounds, warmup_rounds=args.warmup_rounds)
        for loop in loops:
            loop.finish()
    rows = [dict(mode=name, step_s=statistics.median(times[i]), step_s_rounds=times[i],
                 over_bare=round_ratio(times[i], times[0]), peak_mib=peaks[i],
                 peak_over_idle_mib=peaks[i] - idle if device.type == "cpu" else peaks[i])
            for i, name in enumerate(names)]
    return dict(schedule=args.schedule, cycle_length=cycle, idle_mib=idle, threads=torch.get_num_threads(),
                threads_in_trainer_thread=loops[0].threads_in_loop, rows=rows)


class ProfileWindow(TrainerCallback):
    """Turns `profiler` on after step `start` and off after step `end` (both 1-based step numbers)."""

    def __init__(self, profiler: cProfile.Profile, start: int, end: int) -> None:
        self.profiler, self.start, self.end = profiler, start, end

    def on_step(self, report: StepReport) -> None:
        if report.step == self.start:
            self.profiler.enable()
        elif report.step == self.end:
            self.profiler.disable()


def profile(args, device: torch.device) -> None:
    """cProfile over `args.profile` trainer steps after 2 untimed ones; prints the tables described in the
    module docstring."""
    prof = cProfile.Profile()
    warm, n = 2, args.profile
    with tempfile.TemporaryDirectory() as tmp:
        trainer = trainer_for(args, args.schedule, warm + n, tmp, device,
                              callbacks=[ProfileWindow(prof, warm, warm + n)])
        trainer.train()
    stats = pstats.Stats(prof, stream=io.StringIO())
    table = stats.stats  # type: ignore[attr-defined]  # pstats' raw table: not in typeshed
    total = sum(tt for (_, _, tt, _, _) in table.values())  # own times add up to the profiled time
    rows = [(func, cc, nc, tt, ct) for func, (cc, nc, tt, ct, _) in table.items()]

    def label(func) -> str:
        path, line, name = func
        return f"{name} ({Path(path).name}:{line})" if path != "~" else name

    print(f"profiled {n} trainer steps ({args.schedule}, batch {args.batch} x {args.seq}): "
          f"{total / n:.3f} s per step under cProfile")
    print("\ntop functions by own time (s per step, share of profiled time, calls per step):")
    for func, _, nc, tt, _ in sorted(rows, key=lambda r: -r[3])[:args.top]:
        print(f"  {tt / n:8.4f} s  {tt / total:6.1%}  {nc / n:8.1f}  {label(func)}")
    run_step = next((ct for func, _, _, _, ct in rows if func[2] == "run_step"), 0.0)
    print(f"\nrun_step: {run_step / n:.3f} s per step ({run_step / total:.1%}); the loop outside it: "
          f"{(total - run_step) / n:.3f} s per step ({1 - run_step / total:.1%})")
    print("lcsb_core functions outside run_step, by cumulative time (s per step, share, calls per step):")
    step_internal = {"run_step", "_layer_grad_norms", "lm_loss_sums", "autocast_for", "prepare_skipped_grads",
                     "count_targets", "count_tokens", "select", "selective_forward", "passthrough", "causal_lm",
                     "skipped_parameters"}
    core = [r for r in rows if "lcsb_core" in r[0][0] and r[0][2] not in step_internal
            and r[0][2] not in ("train", "_emit", "on_step")]
    for func, _, nc, _, ct in sorted(core, key=lambda r: -r[4])[:args.top]:
        print(f"  {ct / n:8.4f} s  {ct / total:6.1%}  {nc / n:8.1f}  {label(func)}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_interleaved_bench_args(ap, schedule_help="schedule token: topfull/4 (the default), full, ...",
                               rounds_help="timed rounds (each runs one whole cycle of every mode)",
                               json_help="also write the result to this JSON file")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="instead of timing, cProfile N trainer steps and print where the time goes")
    ap.add_argument("--top", type=int, default=25, help="rows per profile table")
    ap.add_argument("--no-job", action="store_true", help="leave out mode (c), the service job's callbacks")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if args.profile:
        profile(args, device)
        return
    result = measure(args, device)
    print(f"model={Path(args.model).name} quant={args.quant} device={args.device} batch={args.batch} seq={args.seq} "
          f"schedule={args.schedule} (cycle {result['cycle_length']}) warmup_rounds={args.warmup_rounds} "
          f"rounds={args.rounds} threads={result['threads']} (trainer thread {result['threads_in_trainer_thread']}) "
          f"idle={result['idle_mib']:.0f}MiB torch={torch.__version__}")
    print("| mode | step (s) | rounds min-max (s) | / bare (round median) | peak over idle (MiB) |")
    print("|---|---|---|---|---|")
    for r in result["rows"]:
        print(f"| {r['mode']} | {r['step_s']:.3f} | {min(r['step_s_rounds']):.2f}-{max(r['step_s_rounds']):.2f} | "
              f"{r['over_bare']:.3f}x | {r['peak_over_idle_mib']:.0f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(dict(args=vars(args), **result), indent=1))


if __name__ == "__main__":
    main()
