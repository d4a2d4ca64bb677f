"""What the commands print (rich): file reports, job tables and details, checkpoints, errors, and
download progress. The live display of `lcsb jobs follow` is `lcsb_client.progress`.

Results go to stdout, progress and errors to stderr; messages from the service are printed as plain
text (never parsed as rich markup).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import datetime

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TransferSpeedColumn,
)
from rich.table import Table
from rich.text import Text

from lcsb_client.errors import ClientError

STATUS_STYLES = {"succeeded": "green", "failed": "red", "cancelled": "yellow", "running": "cyan",
                 "queued": "blue", "validating_files": "blue", "processed": "green", "error": "red"}


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
    """`obj` as indented JSON; escaped as `\\uXXXX` when the output is not UTF-8, so no character is lost."""
    console.print_json(json.dumps(obj), highlight=False, ensure_ascii=not console.encoding.lower().startswith("utf"))


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
    """"dpo (beta 0.1) | nf4 | LoRA r16 alpha 32 | LCSB ... | max_seq_len 512 | batches grouped by length" (the
    type first, supervised by default; the last part only where `method.group_by_length` is on)."""
    m = job.get("method") or {}
    lora, lcsb = m.get("lora") or {}, m.get("lcsb") or {}
    kind = str(m.get("type") or "supervised")
    beta = ((m.get(kind) or {}).get("hyperparameters") or {}).get("beta")
    parts = [kind + (f" (beta {beta:g})" if isinstance(beta, (int, float)) else ""), str(m.get("quantization") or "-")]
    if lora:
        parts.append(f"LoRA r{lora.get('rank')} alpha {lora.get('alpha')}")
    if lcsb:
        per_step = lcsb.get("layers_per_step")
        parts.append(f"LCSB {lcsb.get('schedule')}" + (f", {per_step} layers/step" if per_step else ""))
    if m.get("max_seq_len"):
        parts.append(f"max_seq_len {m['max_seq_len']}")
    if m.get("group_by_length"):
        parts.append("batches grouped by length")
    return " | ".join(parts)


def _auto(job: dict) -> list[tuple[str, str]]:
    """The `auto` row: what it chose for the job and why, and its probe's decision once made."""
    auto = ((job.get("method") or {}).get("lcsb") or {}).get("auto")
    if not auto:
        return []
    d = auto.get("decision")
    decided = (f"; after {d['probe_steps']} steps the lower {d['lower_layers']} layers carried "
               f"{d['lower_share']:.1%} of the gradient (threshold {d['threshold']:.1%}): "
               f"{d['schedule'] if d.get('switched') else 'all layers'} from step {d['from_step']}") if d else ""
    return [("auto", auto["reason"] + decided)]


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
        ("method", _method(job)), *_auto(job), ("progress", progress),
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
