"""A job's GGUF / Ollama exports (issue 33; the files are made by `lcsb_core.export` on a worker).

    row = request_export(session, enqueuer, job, formats=["adapter"], checkpoint_step=None,
                         queue=settings.export_queue)                     # queued
    rows = list_exports(session, job.id); row = find_export(session, job.id, "ftexp-...")
    row = claim_export(session, export_id)            # queued -> running, None when not queued
    # lost messages and workers: `lcsb_service.sweeper.resend_queued_exports` / `reap_lost_exports`
    finish_export(session, export_id, files=[...], manifest={...}); fail_export(session, export_id, code, msg)

Request-time checks (nothing is queued when one fails): 409 for a job that has not succeeded; 400
naming an unknown format; 404 for a checkpoint step the job does not have; 400 saying why for what the
format cannot hold (`lcsb_core.export.formats.refusals` on the job's LoRA settings: this service trains
plain LoRA, so lm_head or embed_tokens targets on a tied base are what it can meet). The task
(`TaskName.RUN_EXPORT`) goes to the export queue (`Settings.export_queue`), which the torch-free export
workers consume (`python -m worker --kind export`), after the commit.

A failed export's `error_code` (`EXPORT_ERROR_CODES`; the worker's `worker.export.failures` picks it):
`adapter_missing`, `adapter_corrupt`, `base_gguf_missing`, `base_gguf_mismatch`, `unsupported_export`,
`worker_lost` (the sweeper) and `internal_error` (anything else; the details stay in the worker's log).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from lcsb_core.errors import ExportError
from lcsb_core.export.formats import parse_formats, refusals
from lcsb_core.models.catalog import catalog_entry
from lcsb_service.db import after_commit
from lcsb_service.enqueue import TaskSender
from lcsb_service.errors import Conflict, InvalidRequest, NotFound
from lcsb_service.ids import looks_like_id, new_id, utcnow
from lcsb_service.models import Checkpoint, Job, JobExport
from lcsb_service.status import JobStatus
from lcsb_service.tasks import TaskName

log = logging.getLogger(__name__)
QUEUED, RUNNING, SUCCEEDED, FAILED = "queued", "running", "succeeded", "failed"
EXPORT_ERROR_CODES = ("adapter_missing", "adapter_corrupt", "base_gguf_missing", "base_gguf_mismatch",
                      "unsupported_export", "worker_lost", "internal_error")


def peft_config(train_config: dict[str, Any]) -> dict[str, Any]:
    """The `adapter_config.json` facts the trainer writes for a job's `lora` settings (PEFT LoRA, no bias,
    no DoRA, one alpha): what `refusals` reads."""
    lora = train_config.get("lora") or {}
    return {"peft_type": "LORA", "r": lora.get("rank", 16), "lora_alpha": lora.get("alpha", 32.0),
            "target_modules": list(lora.get("target_modules") or []), "bias": "none"}


def request_export(session: Session, enqueuer: object, job: Job, *, formats: list[str] | None,
                   checkpoint_step: int | None, queue: str) -> JobExport:
    """Check the request, store a queued export and send it to the export queue `queue` after the commit.

    Raises:
        Conflict: the job has not succeeded (`job_not_succeeded`).
        InvalidRequest: an unknown format (param `formats`, the format named), or what the format
            cannot hold (`unsupported_export`).
        NotFound: no checkpoint at `checkpoint_step` (`checkpoint_not_found`).
    """
    if job.status != JobStatus.SUCCEEDED:
        raise Conflict(f"job {job.id} is {job.status}; only a succeeded job's adapter exports",
                       code="job_not_succeeded")
    try:
        asked = parse_formats(formats)
    except ExportError as exc:
        raise InvalidRequest(str(exc), code="invalid_format", param="formats") from None
    entry = catalog_entry(job.model)
    problems = refusals(peft_config(job.train_config), asked,
                        tied_embeddings=entry.tied_embeddings if entry else True)
    if entry is None:
        problems.append(f"the base model {job.model!r} is not a catalog model with a shipped GGUF")
    if problems:
        raise InvalidRequest("; ".join(problems), code="unsupported_export", param="formats")
    if checkpoint_step is not None and session.execute(
            select(Checkpoint.id).where(Checkpoint.job_id == job.id, Checkpoint.step_number == checkpoint_step)
    ).first() is None:
        raise NotFound(f"job {job.id} has no checkpoint at step {checkpoint_step} (GET .../checkpoints lists them)",
                       code="checkpoint_not_found", param="checkpoint_step")
    now = utcnow()
    row = JobExport(id=new_id("ftexp"), job_id=job.id, status=QUEUED, formats=list(asked),
                    checkpoint_step=checkpoint_step, files=[], created_at=now, sent_at=now)
    session.add(row)
    session.flush()
    export_id = row.id
    if isinstance(enqueuer, TaskSender):
        after_commit(session, lambda: enqueuer.send(TaskName.RUN_EXPORT, export_id, queue))
    else:
        log.info("export %s stored; the enqueuer %s cannot send it", export_id, type(enqueuer).__name__)
    return row


def list_exports(session: Session, job_id: str) -> list[JobExport]:
    """The job's exports, newest first."""
    return list(session.execute(select(JobExport).where(JobExport.job_id == job_id)
                                .order_by(JobExport.created_at.desc(), JobExport.id)).scalars())


def find_export(session: Session, job_id: str, export_id: str) -> JobExport:
    """The job's export `export_id`.

    Raises:
        NotFound: no such export in this job (`export_not_found`).
    """
    row = session.execute(select(JobExport).where(JobExport.id == export_id, JobExport.job_id == job_id)
                          ).scalar_one_or_none() if looks_like_id(export_id) else None
    if row is None:
        raise NotFound(f"no export {export_id} in job {job_id}", code="export_not_found", param="export_id")
    return row


def find_export_file(session: Session, job_id: str, export_id: str, name: str) -> dict[str, Any]:
    """One file entry (`name`, `bytes`, `storage_key`, ...) of a succeeded export.

    Raises:
        NotFound: no such export or file (`file_not_found`).
    """
    row = find_export(session, job_id, export_id)
    entry = next((f for f in row.files if f.get("name") == name), None)
    if entry is None:
        raise NotFound(f"export {export_id} has no file {name!r}", code="file_not_found", param="name")
    return entry


def export_job(session: Session, export_id: str) -> tuple[JobExport, Job] | None:
    """(export, its job) for the worker, or None when the export is gone."""
    found = session.execute(select(JobExport, Job).join(Job, Job.id == JobExport.job_id)
                            .where(JobExport.id == export_id)).first()
    return None if found is None else (found[0], found[1])


def checkpoint_key(session: Session, job_id: str, step: int) -> str | None:
    """The storage key of the job's checkpoint adapter at `step`, or None."""
    return session.execute(select(Checkpoint.storage_key).where(Checkpoint.job_id == job_id,
                                                               Checkpoint.step_number == step)).scalar_one_or_none()


def _move(session: Session, export_id: str, allowed: tuple[str, ...], status: str, *guards: Any,
          **values: Any) -> JobExport | None:
    stmt = (update(JobExport).where(JobExport.id == export_id, JobExport.status.in_(allowed), *guards)
            .values(status=status, **values).returning(JobExport).execution_options(populate_existing=True))
    return session.execute(stmt).scalar_one_or_none()


def claim_export(session: Session, export_id: str) -> JobExport | None:
    """queued -> running, `started_at` now; None when it is not queued (a repeated delivery: do nothing)."""
    return _move(session, export_id, (QUEUED,), RUNNING, started_at=utcnow())


def finish_export(session: Session, export_id: str, *, files: list[dict[str, Any]], manifest: dict[str, Any]) -> None:
    """running -> succeeded with its files and manifest."""
    _move(session, export_id, (RUNNING,), SUCCEEDED, files=files, manifest=manifest, finished_at=utcnow())


def fail_export(session: Session, export_id: str, code: str, message: str, *,
                started_before: datetime | None = None) -> bool:
    """queued | running -> failed with an error code and a plain message; with `started_before`, only a
    `running` export claimed before then (the sweeper's guard). True when it moved."""
    if started_before is None:
        return _move(session, export_id, (QUEUED, RUNNING), FAILED, error_code=code, error_message=message,
                     finished_at=utcnow()) is not None
    return _move(session, export_id, (RUNNING,), FAILED, JobExport.started_at < started_before,
                 error_code=code, error_message=message, finished_at=utcnow()) is not None
