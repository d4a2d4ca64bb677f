"""`/v1/fine_tuning/jobs`: create (idempotent with `Idempotency-Key`), list (cursor pages, metadata
filter `metadata[key]=value`), get, cancel."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Header, Request

from api.deps import EnqueuerDep, JobDep, MetricsDep, OwnerDep, SessionDep, SettingsDep
from api.pagination import AfterQuery, LimitQuery, page
from api.query import takes_query
from api.schemas.common import Page, errors
from api.schemas.jobs import JobCreate, JobObject
from lcsb_service import jobs as job_service
from lcsb_service import transitions
from lcsb_service.db import after_commit
from lcsb_service.errors import InvalidRequest
from lcsb_service.jobs import create_job

router = APIRouter(prefix="/v1/fine_tuning/jobs", tags=["fine-tuning"])
_METADATA_PARAM = re.compile(r"^metadata\[(.{1,64})\]$")


@router.post("", response_model=JobObject, responses=errors(400, 401, 404, 409, 422))
def create(body: JobCreate, session: SessionDep, owner: OwnerDep, settings: SettingsDep, enqueuer: EnqueuerDep,
           metrics: MetricsDep,
           idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key", min_length=1, max_length=255,
                                                         pattern=r"^[\x21-\x7e]+$")] = None) -> JobObject:
    """Create a job: validated against the model and the trainer's config (400), memory-estimated and
    routed to the smallest worker class that holds it (422 when none does), stored `queued`, and sent
    to the worker queue after the commit. The same `Idempotency-Key` returns the same job. A `model`
    that is one of the caller's `ft:` models or checkpoints continues it: 404 when it is not the caller's,
    409 when its job has not succeeded, 400 for another LoRA shape or quantization."""
    job, created = create_job(session, settings, enqueuer, owner_id=owner.id,
                              request=body.model_dump(mode="json", exclude_unset=True, exclude_none=True),
                              idempotency_key=idempotency_key)
    if created:
        queue = job.queue
        after_commit(session, lambda: metrics.jobs_created.labels(queue).inc())
    return JobObject.of(job)


@router.get("", response_model=Page[JobObject], responses=errors(400, 401))
@takes_query(re.compile("metadata"), "metadata[<key>]")  # read below, from the request
def list_jobs(request: Request, session: SessionDep, owner: OwnerDep, limit: LimitQuery = 20,
              after: AfterQuery = None) -> dict:
    """The caller's jobs, newest first. Filter by metadata with `metadata[key]=value` (all must match),
    or `metadata=null` for jobs without metadata."""
    metadata: list[tuple[str, str]] = []
    without_metadata = False
    for name, value in request.query_params.multi_items():
        if name == "metadata" and value == "null":
            without_metadata = True
        elif name.startswith("metadata"):
            match = _METADATA_PARAM.match(name)
            if match is None:
                raise InvalidRequest(f"{name}: filter metadata as metadata[<key>]=<value>", param=name)
            if "\x00" in name or "\x00" in value:
                raise InvalidRequest(f"{name}: NUL characters are not allowed", param=name)
            metadata.append((match.group(1), value))
    rows, more = job_service.list_jobs(session, owner.id, metadata=metadata, without_metadata=without_metadata,
                                       after=after, limit=limit)
    return page([JobObject.of(j) for j in rows], more)


@router.get("/{fine_tuning_job_id}", response_model=JobObject, responses=errors(401, 404))
async def get(job: JobDep) -> JobObject:  # async: no I/O here, so no second thread hop
    """Status, error, resolved hyperparameters and method, progress, memory estimate, result files."""
    return JobObject.of(job)


@router.post("/{fine_tuning_job_id}/cancel", response_model=JobObject, responses=errors(401, 404, 409))
def cancel(job: JobDep, session: SessionDep) -> JobObject:
    """Cancel a queued or running job (a running one stops within one training step); cancelling a
    cancelled job returns it; a finished one answers 409."""
    return JobObject.of(transitions.cancel(session, job.id))
