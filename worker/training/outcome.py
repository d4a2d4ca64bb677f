"""How a training run ended, and which public `error.code` that is. Pure: no torch, no database.

    succeeded                       -> the job succeeds (unless it was cancelled meanwhile)
    cancelled                       -> nothing to change: the job already left `running`
    failed, with error.code:
        DataError                   invalid_file   (param: the file's request field, `err.field`,
                                                    else training_file)
        DivergenceError             nan_loss       (the public codes are the core errors' `code`s)
        finite divergence with      diverged       (worker.training.divergence; without the option
        method.stop_on_divergence                   the job succeeds with a `diverged` warning)
        time limit                  timeout        (soft: asked to stop; hard: killed)
        MemoryError, CUDA OOM,      oom            (with the measured peak)
        a kernel OOM kill
        other SIGKILL / signal      worker_lost
        anything else               internal_error: the public message has no stack trace; the
                                                    exception's type and text go to the events
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lcsb_service.status import JobStatus

INTERNAL_MESSAGE = "The job failed because of an internal error in the training process"
OOM_MARKERS = ("can't allocate memory", "out of memory", "cannot allocate memory")


@dataclass
class Outcome:
    """`status` succeeded / cancelled / failed; for failed: `code`, public `message`, `param`, and
    `detail` (kept in the job's events only). `summary` is the trainer's; `steps` the last step done;
    `result` the job's `result` (`reporter.job_result`: selected checkpoint, early stop) when it succeeded."""

    status: str
    code: str | None = None
    message: str | None = None
    param: str | None = None
    detail: str | None = None
    steps: int = 0
    peak_memory_mib: float | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    result: dict[str, Any] | None = None

    @classmethod
    def failed(cls, code: str, message: str, **kw: Any) -> Outcome:
        return cls(JobStatus.FAILED, code=code, message=message, **kw)

    def to_json(self) -> str:
        return json.dumps(asdict(self), default=str)

    @classmethod
    def from_json(cls, text: str) -> Outcome:
        return cls(**json.loads(text))


def _is_oom(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":  # torch.cuda.OutOfMemoryError
        return True
    return isinstance(exc, RuntimeError) and any(m in str(exc).lower() for m in OOM_MARKERS)


def classify(exc: BaseException, *, cap_mib: int | None = None, peak_mib: float | None = None,
             steps: int = 0) -> Outcome:
    """The failed outcome for an exception raised while training (not TrainingCancelled)."""
    from lcsb_core.errors import DataError, DivergenceError, LCSBError  # torch-free module

    common: dict[str, Any] = {"steps": steps, "peak_memory_mib": peak_mib}
    code, field_ = (exc.code, exc.field) if isinstance(exc, LCSBError) else (None, None)
    if code == DataError.code:
        return Outcome.failed(code, str(exc), param=field_ or "training_file", **common)
    if code == DivergenceError.code:
        return Outcome.failed(code, str(exc), **common)
    if _is_oom(exc):
        return Outcome.failed("oom", oom_message(cap_mib, peak_mib, how="ran out of memory"),
                              detail=f"{type(exc).__name__}: {exc}"[:2000], **common)
    if code is not None:  # ModelLoadError, ConfigError: not public codes, but their messages say what to do
        return Outcome.failed("internal_error", str(exc), detail=f"{type(exc).__name__}: {exc}"[:2000], **common)
    return Outcome.failed("internal_error", INTERNAL_MESSAGE, detail=f"{type(exc).__name__}: {exc}"[:2000],
                          **common)


def oom_message(cap_mib: int | None, peak_mib: float | None, how: str = "was killed by the kernel") -> str:
    cap = f" of {cap_mib} MiB" if cap_mib else ""
    peak = f" (measured peak {peak_mib:.0f} MiB)" if peak_mib is not None else ""
    return (f"The training process exceeded its memory cap{cap}{peak} and {how}; lower batch_size, "
            "max_seq_len, lcsb.k or lora.rank, or enable lcsb.recompute_deep (topfull, tail, split: the same "
            "gradients) or lcsb.gradient_checkpointing")


def write_outcome(path: Path, outcome: Outcome) -> None:
    """Write atomically (a reader never sees half a file)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(outcome.to_json())
    os.replace(tmp, path)


def read_outcome(path: Path) -> Outcome | None:
    try:
        return Outcome.from_json(path.read_text())
    except (OSError, ValueError, TypeError):
        return None
