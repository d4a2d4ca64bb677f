"""The live display of `lcsb jobs follow`: a progress bar fed by the job's metrics events, plain
progress lines when there is no terminal, and the step rate behind their ETA.

Messages from the service are printed as plain text (never parsed as rich markup).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.text import Text

LEVEL_STYLES = {"warn": "yellow", "error": "red"}  # an event's level -> its line's style


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
            self._ticker = threading.Thread(target=self._tick_until_stopped, name="follow-clock", daemon=True)
            self._ticker.start()
        return self  # the bar starts with the first event: a stream refused at once prints only its error

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        if self.events_seen:
            self.progress.stop()

    def _tick_until_stopped(self) -> None:
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
