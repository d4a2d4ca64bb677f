"""What a worker reads from and writes to a job row while it runs the job (the worker itself holds no
SQL: docs/ARCHITECTURE.md). Every function takes an open session; the caller commits (the session
context of `lcsb_service.db.Database.session`).

    inputs = job_inputs(s, job_id)              # the job and its uploads, readable after the session
    record_data_report(s, job_id, report)       # what training will see of each file
    record_peak(s, job_id, 1530.25)             # peak memory in MiB, rounded to 0.1
    queued_estimate(s, job_id)                  # its memory estimate while it is queued, else None
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from lcsb_service.errors import NotFound
from lcsb_service.models import File, Job, Owner
from lcsb_service.status import JobStatus


@dataclass(frozen=True)
class JobInputs:
    """A job row and its uploads, detached from their session (read-only snapshots)."""

    job: Job
    training_file: File
    validation_file: File | None
    eval_file: File | None = None  # the graded evaluation's `method.eval.eval_file`; not a training input

    def uploads(self) -> dict[str, File]:
        """The uploads by request field: `training_file`, and `validation_file` when the job has one."""
        found = {"training_file": self.training_file, "validation_file": self.validation_file}
        return {role: row for role, row in found.items() if row is not None}


def job_inputs(session: Session, job_id: str) -> JobInputs:
    """The job `job_id` and its training, validation and graded-evaluation (`method.eval.eval_file`) file
    rows, expunged from `session` so they stay readable after it closes.

    Raises:
        NotFound: no such job, or its training file or eval file row is gone.
    """
    job = session.get(Job, job_id)
    if job is None:
        raise NotFound(f"job {job_id!r} not found")
    train = session.get(File, job.training_file)
    if train is None:
        raise NotFound(f"training file {job.training_file!r} of job {job_id} not found")
    valid = session.get(File, job.validation_file) if job.validation_file else None
    eval_id = ((job.train_config or {}).get("eval") or {}).get("eval_file")
    graded = session.get(File, eval_id) if eval_id else None
    if eval_id and graded is None:
        raise NotFound(f"eval file {eval_id!r} of job {job_id} not found")
    for row in (job, train, valid, graded):
        if row is not None:
            session.expunge(row)
    return JobInputs(job, train, valid, graded)


def job_method(session: Session, job_id: str) -> dict[str, Any]:
    """The job's `method` options (e.g. `stop_on_divergence`); {} when it has none.

    Raises:
        NotFound: no such job.
    """
    job = session.get(Job, job_id)
    if job is None:
        raise NotFound(f"job {job_id!r} not found")
    return dict(job.method or {})


def owner_name(session: Session, owner_id: str) -> str:
    """The owner's name (part of a fine-tuned model's name); "" when the owner row is gone."""
    owner = session.get(Owner, owner_id)
    return owner.name if owner is not None else ""


def record_data_report(session: Session, job_id: str, report: dict[str, Any]) -> None:
    """Store the job's `data_report`: per request field (`training_file`, `validation_file`), the
    dataset check's report as JSON (`lcsb_core.data.report.ValidationReport.to_dict` with the upload's
    name and id)."""
    session.execute(update(Job).where(Job.id == job_id).values(data_report=report))


def training_data_format(report: dict[str, Any] | None) -> str | None:
    """The training file's data format (`chat`, `prompt_completion`, `text`) from a job's `data_report`
    (per request field, as `record_data_report` stores it); None before the worker checked the data."""
    training = (report or {}).get("training_file")
    return training.get("format") if isinstance(training, dict) else None


def record_auto_decision(session: Session, job_id: str, decision: dict[str, Any]) -> None:
    """Store what `auto`'s probe decided (`lcsb_core.training.schedules.SwitchSchedule.decision`) in the job's
    resolved `method`, as `method.lcsb.auto.decision` (the row is locked for the read-modify-write)."""
    job = session.execute(select(Job).where(Job.id == job_id).with_for_update()).scalar_one()
    method = dict(job.method or {})
    lcsb = dict(method.get("lcsb") or {})
    lcsb["auto"] = {**(lcsb.get("auto") or {}), "decision": decision}
    job.method = {**method, "lcsb": lcsb}
    session.flush()


def record_peak(session: Session, job_id: str, peak_mib: float) -> None:
    """Store the run's measured peak memory (MiB, rounded to 0.1 MiB) on the job."""
    session.execute(update(Job).where(Job.id == job_id).values(peak_memory_mib=round(peak_mib, 1)))


def queued_estimate(session: Session, job_id: str) -> dict[str, Any] | None:
    """The job's recorded `memory_estimate` (MiB by component, `total_mib`; `lcsb_service.routing.route`)
    while it is `queued`; None when it is not queued (claimed, cancelled, ended) or does not exist. A
    worker reads it to size the job's memory reservation, and again while the job waits for one."""
    row = session.execute(select(Job.status, Job.memory_estimate).where(Job.id == job_id)).one_or_none()
    if row is None or row.status != JobStatus.QUEUED:
        return None
    return dict(row.memory_estimate or {})
