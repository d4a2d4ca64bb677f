"""Job events: cursor pages (newest first, like OpenAI) and a server-sent-event stream of the same
events (oldest first) that resumes after `Last-Event-ID` and ends with an `event: done` once the job
has finished and every event was sent. Uses FastAPI's own SSE support (`fastapi.sse`).

A stream holds no database connection while open: each poll is a short session of its own, and the
polls of all open streams share `Settings.sse_poll_concurrency` connections."""

from __future__ import annotations

import time
from collections.abc import AsyncIterable
from typing import Annotated

import anyio
from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.sse import EventSourceResponse, ServerSentEvent

from api.deps import DatabaseDep, JobDep, SessionDep, SettingsDep
from api.pagination import AfterQuery, LimitQuery, page
from api.schemas.common import Page, errors
from api.schemas.events import EventObject
from lcsb_service import events
from lcsb_service.db import Database
from lcsb_service.errors import InvalidRequest
from lcsb_service.models import JobEvent
from lcsb_service.status import TERMINAL_STATUSES

router = APIRouter(prefix="/v1/fine_tuning/jobs/{fine_tuning_job_id}", tags=["fine-tuning"])
BATCH = 200


@router.get("/events", response_model=Page[EventObject], responses=errors(400, 401, 404))
def list_events(job: JobDep, session: SessionDep, limit: LimitQuery = 20, after: AfterQuery = None) -> dict:
    """The job's events, newest first; `after` is the id of the last event of the previous page."""
    rows, more = events.list_events(session, job.id, after=after, limit=limit)
    return page([EventObject.of(r) for r in rows], more)


def resume_point(job: JobDep, db: DatabaseDep,
                 last_event_id: Annotated[str | None, Header(alias="Last-Event-ID", max_length=64)] = None,
                 after: Annotated[str | None, Query(max_length=64, description="like Last-Event-ID")] = None) -> int:
    """The `seq` after which to stream: that of `Last-Event-ID` (or `after`), 0 without one.
    Raises InvalidRequest (400) for an id that is not an event of this job."""
    event_id = last_event_id or after
    if not event_id:
        return 0
    with db.read_session() as session:
        seq = events.event_seq(session, job.id, event_id)
    if seq is None:
        raise InvalidRequest(f"Last-Event-ID: no event {event_id!r} in job {job.id}", code="invalid_last_event_id",
                             param="Last-Event-ID")
    return seq


def _poll(db: Database, job_id: str, after_seq: int) -> tuple[str | None, list[JobEvent]]:
    with db.read_session() as s:
        return events.events_since(s, job_id, after_seq, BATCH)


@router.get("/events/stream", response_class=EventSourceResponse, responses=errors(400, 401, 404))
async def stream_events(job: JobDep, db: DatabaseDep, settings: SettingsDep, request: Request,
                        after_seq: Annotated[int, Depends(resume_point)]) -> AsyncIterable[ServerSentEvent]:
    """Server-sent events: each `data` is a `fine_tuning.job.event` object and each `id` its event id
    (send it back as `Last-Event-ID` to resume). Ends with `event: done` (data: the final status) after
    the job finished, or after `LCSB_SSE_MAX_DURATION_S` (reconnect to go on)."""
    job_id, deadline = job.id, time.monotonic() + settings.sse_max_duration_s
    limiter = request.app.state.sse_limiter  # open streams share `sse_poll_concurrency` connections
    while True:
        status, rows = await anyio.to_thread.run_sync(_poll, db, job_id, after_seq, limiter=limiter)
        for row in rows:
            yield ServerSentEvent(data=EventObject.of(row).model_dump(mode="json"), id=row.id)
            after_seq = row.seq
        if status is None or (status in TERMINAL_STATUSES and not rows):
            yield ServerSentEvent(event="done", data={"status": status})
            return
        if time.monotonic() > deadline:
            return
        if len(rows) < BATCH:
            await anyio.sleep(settings.sse_poll_interval_s)
