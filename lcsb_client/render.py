"""What the commands print (rich): file reports, job tables and details, checkpoints, errors, and the
live display of `lcsb jobs follow` (a progress bar fed by the job's metrics events).

Results go to stdout, progress and errors to stderr; messages from the service are printed as plain
text (never parsed as rich markup).
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table
from rich.text import Text

from lcsb_client.errors import ClientError

STATUS_STYLES = {"succeeded": "green", "failed": "red", "cancelled": "yellow", "running": "cyan",
                 "queued": "blue", "validating_files": "blue", "processed": "green", "error": "red"}
LEVEL_STYLES = {"warn": "yellow", "error": "red"}


NON_TERMINAL_WIDTH = 1000  # columns of output that is not a terminal: tables keep their natural width


def consoles() -> tuple[Console, Console]:
    """(stdout console for results, stderr console for progress and errors), built at call time so
    they follow the current streams and terminal width. A stream that is not a terminal (`lcsb jobs
    list | cat`, a log file) gets a fixed width of `NON_TERMINAL_WIDTH` unless `COLUMNS` is set, so
    tables are printed at their full width instead of wrapped to rich's default of 80 columns."""
    return _console(stderr=False), _console(stderr=True)


def _console(*, stderr: bool) -> Console:
    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal and not os.environ.get("COLUMNS", "").isdigit():
        console.width = NON_TERMINAL_WIDTH
    return console


def print_error(console: Console, err: ClientError) -> None:
    """`error (<code>): <message> [param]`, in red on a terminal."""
    console.print(Text(str(err), style="red"), soft_wrap=True)


def print_json(console: Console, obj: object) -> None:
    console.print_json(json.dumps(obj), highlight=False)


def when(ts: int | None) -> str:
    """Unix seconds as local time, or '-'."""
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts else "-"


def status_text(status: str | None) -> Text:
    return Text(status or "-", style=STATUS_STYLES.get(status or "", ""))


def _size(count: int | None) -> str:
    n = float(count or 0)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _grid(rows: list[tuple[str, str | Text]]) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for key, value in rows:
        grid.add_row(key, value if isinstance(value, Text) else Text(str(value)))
    return grid


# files

def file_rejection(f: dict) -> ClientError:
    """The error of an uploaded file that failed validation, with each reason on its own line."""
    report = f.get("validation") or {}
    reasons = [f"  file: {e}" for e in report.get("file_errors") or []]
    for e in report.get("errors") or []:
        where = f"line {e['line']}" if e.get("line") is not None else "file"
        reasons.append(f"  {where}" + (f" ({e['field']})" if e.get("field") else "") + f": {e['message']}")
    invalid, total = report.get("invalid_examples") or 0, report.get("num_examples") or 0
    if invalid > len(report.get("errors") or []):
        reasons.append(f"  ... {invalid} of {total} lines are invalid in all")
    detail = "\n".join(reasons) or f"  {f.get('status_details')}"
    return ClientError("invalid_file", f"{f.get('filename')} ({f['id']}) was rejected by validation:\n{detail}",
                       "file")


def file_summary(f: dict) -> Table:
    report = f.get("validation") or {}
    examples = (f"{report.get('num_examples', 0)} ({report.get('valid_examples', 0)} valid, "
                f"{report.get('invalid_examples', 0)} invalid, {report.get('duplicates', 0)} duplicates)")
    rows: list[tuple[str, str | Text]] = [
        ("id", f["id"]), ("filename", f.get("filename", "")), ("bytes", f"{f.get('bytes', 0):,}"),
        ("status", status_text(f.get("status"))), ("format", report.get("format") or report.get("file_type") or "-"),
        ("examples", examples), ("sha256", f.get("sha256", "-"))]
    for w in report.get("warnings") or []:
        rows.append(("warning", Text(w, style="yellow")))
    return _grid(rows)


# jobs

def _steps(job: dict) -> str:
    p = job.get("progress") or {}
    done, total = p.get("steps_completed") or 0, p.get("total_steps")
    return f"{done}/{total}" if total else (str(done) if done else "-")


def jobs_table(jobs: list[dict]) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for name in ("id", "status", "model", "steps", "created", "fine-tuned model"):
        table.add_column(name, no_wrap=name in ("id", "status", "steps", "created"), overflow="fold")
    for job in jobs:
        table.add_row(job["id"], status_text(job.get("status")), job.get("model", ""), _steps(job),
                      when(job.get("created_at")), job.get("fine_tuned_model") or "-")
    return table


def _method(job: dict) -> str:
    m = job.get("method") or {}
    lora, lcsb = m.get("lora") or {}, m.get("lcsb") or {}
    parts = [str(m.get("quantization") or "-")]
    if lora:
        parts.append(f"LoRA r{lora.get('rank')} alpha {lora.get('alpha')}")
    if lcsb:
        per_step = lcsb.get("layers_per_step")
        parts.append(f"LCSB {lcsb.get('schedule')}" + (f", {per_step} layers/step" if per_step else ""))
    if m.get("max_seq_len"):
        parts.append(f"max_seq_len {m['max_seq_len']}")
    return " | ".join(parts)


def job_details(job: dict) -> Table:
    p = job.get("progress") or {}
    progress = _steps(job) + (f" ({p['percent']}%)" if p.get("percent") is not None else "")
    if p.get("peak_memory_mib"):
        progress += f", peak {p['peak_memory_mib']:,.0f} MiB"
    est = job.get("memory_estimate") or {}
    hp = job.get("hyperparameters") or {}
    rows: list[tuple[str, str | Text]] = [
        ("id", job["id"]), ("status", status_text(job.get("status"))), ("model", job.get("model", "")),
        ("training_file", job.get("training_file", "")), ("validation_file", job.get("validation_file") or "-"),
        ("hyperparameters", " ".join(f"{k}={v}" for k, v in hp.items() if v is not None) or "-"),
        ("method", _method(job)), ("progress", progress),
        ("queue", f"{job.get('queue', '-')}" + (f" (estimated peak {est['total_mib']:,.0f} MiB)"
                                                if est.get("total_mib") else "")),
        ("created", when(job.get("created_at"))), ("finished", when(job.get("finished_at")))]
    if job.get("fine_tuned_model"):
        rows.append(("fine_tuned_model", job["fine_tuned_model"]))
    if job.get("result_files"):
        rows.append(("result_files", ", ".join(job["result_files"])))
    if job.get("metadata"):
        rows.append(("metadata", " ".join(f"{k}={v}" for k, v in job["metadata"].items())))
    if job.get("error"):
        rows.append(("error", Text(str(job_error(job)), style="red")))
    return _grid(rows)


def job_error(job: dict) -> ClientError:
    """The job's error object as a ClientError (`error (oom): ...`)."""
    e = job.get("error") or {}
    return ClientError(e.get("code") or "failed", e.get("message") or "the job failed", e.get("param"))


def _number(value: object) -> str:
    return f"{value:.4f}" if isinstance(value, (int, float)) else "-"


def checkpoints_table(checkpoints: list[dict]) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for name in ("id", "step", "train loss", "valid loss", "size", "created", "checkpoint model"):
        table.add_column(name, no_wrap=name != "checkpoint model", overflow="fold")
    for c in checkpoints:
        m = c.get("metrics") or {}
        table.add_row(c["id"], str(c["step_number"]), _number(m.get("train_loss")), _number(m.get("valid_loss")),
                      _size(c.get("bytes")), when(c.get("created_at")), c.get("fine_tuned_model_checkpoint", ""))
    return table


class DownloadProgress:
    """Download bars, one per file; shown from the first file on (an error before any download
    prints alone). `track(name, bytes)` returns the per-chunk callback of `Service.download`."""

    def __init__(self, console: Console) -> None:
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                                 TransferSpeedColumn(), console=console)
        self.started = False

    def __enter__(self) -> DownloadProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.started:
            self.progress.stop()

    def track(self, name: str, size: int) -> Callable[[int], None]:
        if not self.started:
            self.progress.start()
            self.started = True
        task = self.progress.add_task(name, total=size or None)
        return lambda n: self.progress.advance(task, n)


class FollowDisplay:
    """A progress bar (steps done/total, loss, tokens/s, the highest step peak memory so far, in MiB)
    updated from the job's metrics events; other events (started, evaluations, checkpoints, warnings,
    errors) print as lines above it. Use as a context manager around the event loop; call `show(event)`
    per event.

    Without a terminal (a pipe, a log file, CI) the bar cannot redraw, so progress is also printed as
    plain lines (`progress_line`): at the first step event, then whenever `line_every_fraction` of the
    steps have passed or `line_every_s` seconds (by the events' timestamps) since the last line, and at
    the last step. Between events a clock thread calls `tick()` every second and when a line falls due,
    which prints the last step's progress line at the current time once `line_every_s` seconds have
    passed without any line (a slow step, an evaluation, the model load): so a line comes at least every
    `line_every_s` seconds however long a step takes. `clock` gives Unix seconds (tests pass their own)."""

    def __init__(self, console: Console, job: dict, *, line_every_fraction: float = 0.1,
                 line_every_s: float = 30.0, clock: Callable[[], float] = time.time) -> None:
        self.console = console
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("{task.fields[stats]}"),
                                 console=console)
        p = job.get("progress") or {}
        self.task = self.progress.add_task("train", total=p.get("total_steps"),
                                           completed=p.get("steps_completed") or 0, stats="")
        self.events_seen = 0
        # rich's Live redraws only on a terminal that is not dumb; elsewhere it prints the bar once at the end
        self.lines = not console.is_terminal or console.is_dumb_terminal
        self.line_every_fraction, self.line_every_s = line_every_fraction, line_every_s
        self.rate = StepRate()
        self.last_line: tuple[int, float] | None = None  # (step, event time) of the last progress line
        self.clock = clock
        self.last_printed = clock()  # when any line was last printed (clock seconds)
        self.last_step: dict | None = None  # the data of the latest step event
        self.peak_mib: float | None = None  # the highest step peak seen (MiB), as the job object's progress
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def __enter__(self) -> FollowDisplay:
        if self.lines:
            self._ticker = threading.Thread(target=self._tick_every_second, name="follow-clock", daemon=True)
            self._ticker.start()
        return self  # the bar starts with the first event: a stream refused at once prints only its error

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        if self.events_seen:
            self.progress.stop()

    def _tick_every_second(self) -> None:
        while not self._stop.wait(self.seconds_to_next_tick()):
            self.tick()

    def seconds_to_next_tick(self) -> float:
        """Seconds the clock thread waits before its next `tick`: a second, or less when a line falls
        due sooner (`line_every_s` after the last line), so no silence outlasts `line_every_s` by up to
        a second of polling; at least 0.05 s, and a second before any event (nothing to print yet)."""
        with self._lock:
            if not self.events_seen:
                return 1.0
            return min(1.0, max(0.05, self.last_printed + self.line_every_s - self.clock()))

    def tick(self) -> None:
        """When `line_every_s` seconds have passed since the last line of any kind (and some event was
        seen): print the latest step's progress line at the current time, its ETA counted down since
        that step's event, or `waiting for the first step` before any step; otherwise nothing."""
        with self._lock:
            now = self.clock()
            if not self.events_seen or now - self.last_printed < self.line_every_s:
                return
            if self.last_step is None:
                self._print(f"{_clock(now)} waiting for the first step", "dim")
                return
            step, total = self.last_step["step"], self.last_step.get("total_steps")
            eta = self.rate.eta_s(step, total)
            stepped_at = self.rate.latest[1] if self.rate.latest else now  # ETA counts down since that step
            self.last_line = (step, now)
            self._print(progress_line(self.last_step, now, None if eta is None else max(0.0, eta - (now - stepped_at))))

    def note(self, text: str, style: str = "dim") -> None:
        with self._lock:
            self._print(text, style)

    def _print(self, text: str, style: str = "") -> None:
        self.last_printed = self.clock()
        self.progress.console.print(Text(text, style=style), soft_wrap=True)

    def show(self, event: dict) -> None:
        if not self.events_seen:
            self.progress.start()
        self.events_seen += 1
        data = event.get("data") or {}
        if event.get("type") == "metrics" and "train_loss" in data and "step" in data:
            self._step(data, float(event.get("created_at") or 0))
            return
        if data.get("total_steps") and "step" not in data:  # "Training started: N steps, ..."
            self.progress.update(self.task, total=data["total_steps"])
        if data.get("step") == 0 and "valid_loss" in data:
            self.rate.restart(float(event.get("created_at") or 0))
        self.note(f"{_clock(event.get('created_at'))} {event.get('message', '')}",
                  LEVEL_STYLES.get(event.get("level", ""), ""))

    def _step(self, data: dict, at: float) -> None:
        stats = [f"loss {data['train_loss']:.4f}"]
        if data.get("tokens_per_s") is not None:
            stats.append(f"{data['tokens_per_s']:,.0f} tok/s")
        if data.get("peak_memory_mib") is not None:  # the highest so far, not this step's: a step's peak varies
            self.peak_mib = max(self.peak_mib or 0.0, float(data["peak_memory_mib"]))
        if self.peak_mib is not None:
            stats.append(f"peak {self.peak_mib:,.0f} MiB")
        self.progress.update(self.task, completed=data["step"], total=data.get("total_steps") or None,
                             stats="  ".join(stats))
        self.rate.add(data["step"], at, data.get("step_time_s"))
        self.last_step = data
        if self.lines and self._line_due(data["step"], data.get("total_steps"), at):
            self.last_line = (data["step"], at)
            self.note(progress_line(data, at, self.rate.eta_s(data["step"], data.get("total_steps"))), "")

    def _line_due(self, step: int, total: int | None, at: float) -> bool:
        if self.last_line is None or (total and step >= total):
            return True
        last_step, last_at = self.last_line
        every = max(1, math.ceil(total * self.line_every_fraction)) if total else None
        return (every is not None and step - last_step >= every) or at - last_at >= self.line_every_s


class StepRate:
    """Seconds per optimizer step as measured from the step events: the wall time between the first
    step event seen and the latest, over the steps between them (so evaluations and checkpoints between
    steps count, the model load and the step-0 evaluation do not: see `restart`); until two events are
    a second apart, the last step's own `step_time_s`."""

    def __init__(self) -> None:
        self.first: tuple[int, float] | None = None
        self.latest: tuple[int, float] | None = None
        self.step_time_s: float | None = None

    def add(self, step: int, at: float, step_time_s: float | None) -> None:
        """Record the step event of `step`, created at `at` (Unix seconds)."""
        if self.first is None:
            self.first = (step, at)
        self.latest = (step, at)
        if step_time_s is not None:
            self.step_time_s = float(step_time_s)

    def restart(self, at: float) -> None:
        """Measure from `at` (Unix seconds) on, from the latest step: the time before `at` was not a
        step's (the step-0 evaluation, which the trainer runs after the first step)."""
        if self.latest is not None:
            self.first = (self.latest[0], at)

    def seconds_per_step(self) -> float | None:
        """The measured seconds per step, or None before any step event."""
        if self.first and self.latest and self.latest[0] > self.first[0] and self.latest[1] > self.first[1]:
            return (self.latest[1] - self.first[1]) / (self.latest[0] - self.first[0])
        return self.step_time_s

    def eta_s(self, step: int, total: int | None) -> float | None:
        """Seconds left after `step` of `total` at the measured rate (None without a total or a rate)."""
        per_step = self.seconds_per_step()
        return None if not total or per_step is None else max(0, total - step) * per_step


def _clock(ts: float | None) -> str:
    return datetime.fromtimestamp(ts or 0).strftime("%H:%M:%S")


def progress_line(data: dict, at: float, eta_s: float | None) -> str:
    """One plain progress line from a step event's data: `12:03:04 step 20/100 (20%)  loss 1.2345
    1,235 tok/s  ETA 0:03:28` (fields the event lacks are left out; ETA `-` without a rate)."""
    step, total = data["step"], data.get("total_steps")
    parts = [f"{_clock(at)} step {step}/{total} ({100 * step / total:.0f}%)" if total else f"{_clock(at)} step {step}",
             f"loss {data['train_loss']:.4f}"]
    if data.get("tokens_per_s") is not None:
        parts.append(f"{data['tokens_per_s']:,.0f} tok/s")
    parts.append(f"ETA {timedelta(seconds=round(eta_s))}" if eta_s is not None else "ETA -")
    return "  ".join(parts)
