"""Job events and progress, written by the API (created, cancelled) and the worker (started, steps,
evals, checkpoints, finished), and read back as pages and as a stream. Nothing here commits: the
caller's transaction does.

    add_event(session, job_id, "Step 10/100: training loss=1.234", type="metrics",
              data={"step": 10, "train_loss": 1.234, ...})
    record_progress(session, job_id, steps_completed=10, total_steps=100, trained_tokens=40960,
                    peak_memory_mib=812.5, elapsed_s=30.2)
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from lcsb_service.ids import looks_like_id, new_id, utcnow
from lcsb_service.models import Job, JobEvent
from lcsb_service.pagination import keyset_page, missing_cursor
from lcsb_service.status import JobStatus

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
                    elapsed_s: float | None = None, steps_timed: int | None = None) -> None:
    """Update a running job's progress and heartbeat; `estimated_finish` extrapolates the measured step
    rate, `elapsed_s` seconds over `steps_timed` steps (default: all `steps_completed`), over the
    remaining steps. Only a `running` job is updated."""
    now = utcnow()
    values: dict[str, Any] = {"steps_completed": steps_completed, "total_steps": total_steps,
                              "heartbeat_at": now, "updated_at": now}
    if trained_tokens is not None:
        values["trained_tokens"] = trained_tokens
    if peak_memory_mib is not None:
        values["peak_memory_mib"] = peak_memory_mib
    timed = steps_completed if steps_timed is None else steps_timed
    if elapsed_s is not None and timed > 0 and total_steps:
        remaining = max(0, total_steps - steps_completed) * elapsed_s / timed
        values["estimated_finish"] = now + timedelta(seconds=remaining)
    session.execute(update(Job).where(Job.id == job_id, Job.status == JobStatus.RUNNING).values(**values))


def add_warning(session: Session, job_id: str, entry: dict[str, Any]) -> None:
    """Append `entry` (a dict with at least `code` and `message`) to the job's `warnings`, keeping the
    ones already there (the row is locked for the read-modify-write on PostgreSQL)."""
    job = session.execute(select(Job).where(Job.id == job_id).with_for_update()).scalar_one()
    job.warnings = [*(job.warnings or []), entry]
    session.flush()


def heartbeat(session: Session, job_id: str) -> None:
    """Mark a running job alive (the reaper fails jobs whose heartbeat is too old)."""
    now = utcnow()
    session.execute(update(Job).where(Job.id == job_id, Job.status == JobStatus.RUNNING)
                    .values(heartbeat_at=now, updated_at=now))


def event_seq(session: Session, job_id: str, event_id: str) -> int | None:
    """The `seq` of the job's event `event_id` (a page cursor or an SSE `Last-Event-ID`), or None when
    the job has no such event."""
    if not looks_like_id(event_id):
        return None
    return session.scalar(select(JobEvent.seq).where(JobEvent.id == event_id, JobEvent.job_id == job_id))


def list_events(session: Session, job_id: str, *, after: str | None = None,
                limit: int = 20) -> tuple[list[JobEvent], bool]:
    """The job's events, newest first, after the event `after`. Returns (events, has_more).

    Raises:
        InvalidRequest: `after` is not an event of this job (`invalid_cursor`).
    """
    cursor = None
    if after:
        seq = event_seq(session, job_id, after)
        if seq is None:
            raise missing_cursor(after)
        cursor = (seq,)
    return keyset_page(session, select(JobEvent).where(JobEvent.job_id == job_id), sort=(JobEvent.seq,),
                       cursor=cursor, limit=limit)


def events_since(session: Session, job_id: str, after_seq: int, limit: int) -> tuple[str | None, list[JobEvent]]:
    """(the job's status, its next `limit` events after `after_seq`, oldest first). The status is read
    first, so every event committed before it is in this or a later call (a stream may end once the
    status is terminal and no event is left). The status is None for an unknown job."""
    status = session.scalar(select(Job.status).where(Job.id == job_id))
    rows = session.execute(select(JobEvent).where(JobEvent.job_id == job_id, JobEvent.seq > after_seq)
                           .order_by(JobEvent.seq).limit(limit)).scalars().all()
    return status, list(rows)
