"""Job events and progress, written by the API (created, cancelled) and the worker (started, steps,
evals, checkpoints, finished). Nothing here commits: the caller's transaction does.

    add_event(session, job_id, "Step 10/100: training loss=1.234", type="metrics",
              data={"step": 10, "train_loss": 1.234, ...})
    record_progress(session, job_id, steps_completed=10, total_steps=100, trained_tokens=40960,
                    peak_memory_mib=812.5, elapsed_s=30.2)
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session

from lcsb_service.ids import new_id, utcnow
from lcsb_service.models import Job, JobEvent

LEVELS = ("info", "warn", "error")
TYPES = ("message", "metrics")


def add_event(session: Session, job_id: str, message: str, *, level: str = "info", type: str = "message",
              data: dict[str, Any] | None = None) -> JobEvent:
    """Append one event to a job (flushed, so `seq` is set).

    Raises:
        ValueError: `level` not in info/warn/error or `type` not in message/metrics.
    """
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    if type not in TYPES:
        raise ValueError(f"type must be one of {TYPES}, got {type!r}")
    event = JobEvent(id=new_id("ftevent"), job_id=job_id, level=level, type=type, message=message, data=data,
                     created_at=utcnow())
    session.add(event)
    session.flush()
    return event


def record_progress(session: Session, job_id: str, *, steps_completed: int, total_steps: int | None,
                    trained_tokens: int | None = None, peak_memory_mib: float | None = None,
                    elapsed_s: float | None = None) -> None:
    """Update a running job's progress and heartbeat; `estimated_finish` extrapolates the mean step time
    (`elapsed_s / steps_completed`) over the remaining steps. Only a `running` job is updated."""
    now = utcnow()
    values: dict[str, Any] = {"steps_completed": steps_completed, "total_steps": total_steps,
                              "heartbeat_at": now, "updated_at": now}
    if trained_tokens is not None:
        values["trained_tokens"] = trained_tokens
    if peak_memory_mib is not None:
        values["peak_memory_mib"] = peak_memory_mib
    if elapsed_s is not None and steps_completed > 0 and total_steps:
        remaining = max(0, total_steps - steps_completed) * elapsed_s / steps_completed
        values["estimated_finish"] = now + timedelta(seconds=remaining)
    session.execute(update(Job).where(Job.id == job_id, Job.status == "running").values(**values))


def heartbeat(session: Session, job_id: str) -> None:
    """Mark a running job alive (the reaper fails jobs whose heartbeat is too old)."""
    now = utcnow()
    session.execute(update(Job).where(Job.id == job_id, Job.status == "running")
                    .values(heartbeat_at=now, updated_at=now))
