"""Job status transitions: the only code that changes `jobs.status`.

    queued  --claim-->  running  --finish-->  succeeded
    queued | running  --fail-->    failed
    queued | running  --cancel-->  cancelled

Each transition locks the row (`SELECT ... FOR UPDATE` on PostgreSQL; SQLite serializes writers) and
then runs one guarded `UPDATE ... WHERE status IN (<allowed>)`, so two racing callers cannot both
apply: a second Celery delivery's `claim` sees `running` and returns None; a late `finish` after a
cancel sees `cancelled` and returns None (a cancelled job never becomes `succeeded`). Each applied
transition adds an event. Nothing commits here: the caller's transaction does (worker: one short
transaction per call; API: the request's commit).

Cancel is immediate in the database: the training loop polls `should_stop(session, job_id)` between
steps and stops within one step; its late `finish` is then refused.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from lcsb_service.db import is_postgresql
from lcsb_service.errors import Conflict, NotFound
from lcsb_service.events import add_event
from lcsb_service.ids import utcnow
from lcsb_service.models import Job
from lcsb_service.status import JobStatus


def lock_job(session: Session, job_id: str) -> Job:
    """The job row, re-read from the database and row-locked on PostgreSQL until the transaction ends.

    Raises:
        NotFound: no such job.
    """
    stmt = select(Job).where(Job.id == job_id).execution_options(populate_existing=True)
    if is_postgresql(session):
        stmt = stmt.with_for_update()
    job = session.execute(stmt).scalar_one_or_none()
    if job is None:
        raise NotFound(f"no fine-tuning job {job_id}", code="job_not_found", param="fine_tuning_job_id")
    return job


def _apply(session: Session, job_id: str, allowed: tuple[str, ...], new_status: str, **values: Any) -> Job | None:
    job = lock_job(session, job_id)
    if job.status not in allowed:
        return None
    now = utcnow()
    stmt = (update(Job).where(Job.id == job_id, Job.status.in_(allowed))
            .values(status=new_status, updated_at=now, **values).returning(Job)
            .execution_options(populate_existing=True))
    return session.execute(stmt).scalar_one_or_none()


def claim(session: Session, job_id: str, *, worker: str | None = None, placement: str | None = None,
          placement_data: dict[str, Any] | None = None) -> Job | None:
    """queued -> running. Returns the job, or None when it is not queued (already claimed, cancelled,
    finished): the caller must then do nothing. The event names the worker and, when given, where on
    it the job runs ("Fine-tuning job started on w1, slot 2 of 3, 3,840 MiB reserved of 8,192"), with
    `placement_data` beside `worker` in its data.

    Raises:
        NotFound: no such job.
    """
    now = utcnow()
    job = _apply(session, job_id, (JobStatus.QUEUED,), JobStatus.RUNNING, started_at=now, heartbeat_at=now)
    if job is not None:
        where = "".join(part for part in (f" on {worker}" if worker else "", f", {placement}" if placement else ""))
        data = {**({"worker": worker} if worker else {}), **(placement_data or {})}
        add_event(session, job_id, f"Fine-tuning job started{where}", data=data or None)
    return job


def finish(session: Session, job_id: str, *, fine_tuned_model: str, trained_tokens: int | None = None,
           result_files: list[str] | None = None, result: dict[str, Any] | None = None) -> Job | None:
    """running -> succeeded, with `result` (the run's selected checkpoint and early stop, the job object's
    `result`). Returns None (and changes nothing) when the job is no longer running, e.g. cancelled while
    its last step ran.

    Raises:
        NotFound: no such job.
    """
    values: dict[str, Any] = {"fine_tuned_model": fine_tuned_model, "finished_at": utcnow(),
                              "estimated_finish": None}
    if trained_tokens is not None:
        values["trained_tokens"] = trained_tokens
    if result_files is not None:
        values["result_files"] = list(result_files)
    if result is not None:
        values["result"] = result
    job = _apply(session, job_id, (JobStatus.RUNNING,), JobStatus.SUCCEEDED, **values)
    if job is not None:
        add_event(session, job_id, "The job has successfully completed",
                  data={"fine_tuned_model": fine_tuned_model})
    return job


def fail(session: Session, job_id: str, code: str, message: str, param: str | None = None) -> Job | None:
    """queued | running -> failed with `error = {code, message, param}` (codes such as `invalid_file`,
    `oom`, `nan_loss`, `worker_lost`, `timeout`). Returns None when the job already ended.

    Raises:
        NotFound: no such job.
    """
    job = _apply(session, job_id, (JobStatus.QUEUED, JobStatus.RUNNING), JobStatus.FAILED, error_code=code,
                 error_message=message, error_param=param, finished_at=utcnow(), estimated_finish=None)
    if job is not None:
        add_event(session, job_id, f"Fine-tuning job failed: {message}", level="error",
                  data={"code": code, "param": param})
    return job


def cancel(session: Session, job_id: str) -> Job:
    """queued | running -> cancelled; cancelling a cancelled job returns it unchanged.

    Raises:
        NotFound: no such job.
        Conflict: the job already succeeded or failed.
    """
    job = _apply(session, job_id, (JobStatus.QUEUED, JobStatus.RUNNING), JobStatus.CANCELLED,
                 finished_at=utcnow(), estimated_finish=None)
    if job is not None:
        add_event(session, job_id, "Fine-tuning job cancelled")
        return job
    current = lock_job(session, job_id)
    if current.status == JobStatus.CANCELLED:
        return current
    raise Conflict(f"job {job_id} has already {current.status} and cannot be cancelled",
                   code="job_not_cancellable", param="fine_tuning_job_id")


def should_stop(session: Session, job_id: str) -> bool:
    """True when the job is no longer `running`: cancelled by its owner (or failed by a reaper). The
    worker's `TrainerCallback.should_cancel` calls this between optimizer steps."""
    status = session.execute(select(Job.status).where(Job.id == job_id)).scalar_one_or_none()
    return status != JobStatus.RUNNING
