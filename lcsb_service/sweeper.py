"""The job sweeper (the "reaper"): ends jobs whose worker is gone, and re-sends jobs whose message may
be lost. Service code: it imports only `lcsb_service`, and both the API and the workers run it.

    reap_lost(db, heartbeat_timeout_s)        running, heartbeat older than the bound -> failed worker_lost
    resend_queued(db, enqueuer, after_s)      queued, last sent over `after_s` ago -> sent to its queue again
    reap_lost_exports(db, lost_after_s)       export running since over `lost_after_s` -> failed worker_lost
    resend_queued_exports(db, sender, after_s, queue)  export queued, last sent over `after_s` ago -> sent
                                              again to the export queue

It runs in every API process (started with the app, `api.main`), so it does not depend on any worker
being alive, and in every worker (when it starts, then every `Settings.reaper_interval_s` in a thread,
`start_reaper`); Celery beat can run it too (task `TaskName.SWEEP`, `worker.tasks.reap`). Several
sweepers at once are safe: `fail` is a guarded transition and the heartbeat is re-checked under the row
lock; a re-send is a guarded UPDATE of the job's clock. A job whose worker was killed therefore ends
`failed` within heartbeat_timeout_s + reaper_interval_s of its last heartbeat, and a job whose message
was lost (Redis restarted without persistence, or down when the job was created) is sent again within
resend_queued_after_s + reaper_interval_s of its last send once the broker answers. A lost job's
message, never acknowledged, may come back after the broker's visibility timeout and is then a no-op
(the claim sees `failed`).
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import cast

from sqlalchemy import CursorResult, select, update

from lcsb_service import transitions
from lcsb_service.db import Database, after_commit
from lcsb_service.enqueue import Enqueuer, TaskSender, enqueue_after_commit
from lcsb_service.events import add_event
from lcsb_service.exports import QUEUED, RUNNING, fail_export
from lcsb_service.ids import utcnow
from lcsb_service.models import Job, JobEvent, JobExport
from lcsb_service.settings import Settings
from lcsb_service.status import JobStatus
from lcsb_service.tasks import TaskName

log = logging.getLogger(__name__)


def _aware(ts: datetime | None) -> datetime | None:
    return ts.replace(tzinfo=UTC) if ts is not None and ts.tzinfo is None else ts  # SQLite returns naive UTC


def reap_lost(db: Database, heartbeat_timeout_s: float) -> list[str]:
    """Fail every running job whose heartbeat is older than `heartbeat_timeout_s`; returns their ids."""
    cutoff = utcnow() - timedelta(seconds=heartbeat_timeout_s)
    with db.session() as s:
        candidates = list(s.scalars(select(Job.id).where(Job.status == JobStatus.RUNNING, Job.heartbeat_at < cutoff)))
    reaped = []
    for job_id in candidates:
        with db.session() as s:
            job = transitions.lock_job(s, job_id)
            beat = _aware(job.heartbeat_at) or cutoff
            if job.status != JobStatus.RUNNING or beat >= cutoff:
                continue  # finished or beat again meanwhile
            silent = (utcnow() - beat).total_seconds()
            transitions.fail(s, job_id, "worker_lost",
                             f"The worker running this job stopped reporting (no heartbeat for {silent:.0f} s, "
                             f"limit {heartbeat_timeout_s:.0f} s); the job did not finish")
            reaped.append(job_id)
            log.warning("job %s: no heartbeat for %.0f s, failed as worker_lost", job_id, silent)
    return reaped


RESENT = "Re-sent to queue"


def resend_queued(db: Database, enqueuer: Enqueuer, after_s: float) -> list[str]:
    """Send again every job still `queued` whose last send (`updated_at`) is older than `after_s`
    seconds: its message may have been lost (a broker restart without persistence, a send that failed
    while the broker was down). Returns the ids sent.

    A job that legitimately waits behind others is sent again at most once per `after_s` (the guarded
    UPDATE moves its clock, so several sweepers at once send it once); the worker's exactly-once
    `claim` makes the extra deliveries no-ops. The first re-send of a job adds an event; later ones
    are only logged. A failed send is logged and retried on a later pass.
    """
    cutoff = utcnow() - timedelta(seconds=after_s)
    with db.session() as s:
        stale = list(s.execute(select(Job.id, Job.queue)
                               .where(Job.status == JobStatus.QUEUED, Job.updated_at < cutoff)))
    sent = []
    for job_id, queue in stale:
        with db.session() as s:
            moved = cast(CursorResult, s.execute(
                update(Job).where(Job.id == job_id, Job.status == JobStatus.QUEUED, Job.updated_at < cutoff)
                .values(updated_at=utcnow()))).rowcount
            if not moved:
                continue  # claimed, cancelled or re-sent by another sweeper meanwhile
            first = s.scalar(select(JobEvent.id).where(JobEvent.job_id == job_id,
                                                       JobEvent.message.startswith(RESENT)).limit(1)) is None
            if first:
                add_event(s, job_id, f"{RESENT} {queue}: still queued after {after_s:.0f} s (sent again every "
                                     f"{after_s:.0f} s while it waits, in case its message was lost)")
            enqueue_after_commit(s, enqueuer, job_id, queue)
        log.info("job %s: still queued, re-sent to %s", job_id, queue)
        sent.append(job_id)
    return sent


def reap_lost_exports(db: Database, lost_after_s: float) -> list[str]:
    """Fail every export still `running` more than `lost_after_s` seconds after a worker claimed it
    (`started_at`), with code `worker_lost` and a message that says to request it again; returns their ids.

    An export runs in its task's own process for seconds and has no heartbeat: one running this long lost
    its worker (killed, out of memory, the machine gone). Its redelivered message finds it `running` and
    does nothing, so without this it would stay `running` forever. The transition is guarded (`running`
    and `started_at` still old), so several sweepers at once fail it once, and a worker that finishes
    meanwhile wins.
    """
    cutoff = utcnow() - timedelta(seconds=lost_after_s)
    with db.session() as s:
        stale = list(s.execute(select(JobExport.id, JobExport.started_at)
                               .where(JobExport.status == RUNNING, JobExport.started_at < cutoff)))
    reaped = []
    for export_id, started in stale:
        silent = (utcnow() - (_aware(started) or cutoff)).total_seconds()
        with db.session() as s:
            moved = fail_export(s, export_id, "worker_lost",
                                f"The worker making this export stopped before it finished (running for "
                                f"{silent:.0f} s, limit {lost_after_s:.0f} s); request the export again",
                                started_before=cutoff)
        if moved:
            log.warning("export %s: running for %.0f s, failed as worker_lost", export_id, silent)
            reaped.append(export_id)
    return reaped


def resend_queued_exports(db: Database, sender: object, after_s: float, queue: str) -> list[str]:
    """Send again (`TaskName.RUN_EXPORT`, to the export queue `queue`) every export still `queued` whose
    last send (`sent_at`) is older than `after_s` seconds; returns the ids sent ([] when `sender` cannot
    send tasks).

    As for jobs: a guarded UPDATE of `sent_at` makes several sweepers send it once per period, and the
    worker's `claim_export` makes the extra deliveries no-ops. This also moves an export whose message
    went to a queue no export worker reads (one requested before exports had their own queue) onto
    `queue`.
    """
    if not isinstance(sender, TaskSender):
        return []
    cutoff = utcnow() - timedelta(seconds=after_s)
    with db.session() as s:
        stale = list(s.scalars(select(JobExport.id).where(JobExport.status == QUEUED, JobExport.sent_at < cutoff)))
    sent = []
    for export_id in stale:
        with db.session() as s:
            moved = cast(CursorResult, s.execute(
                update(JobExport).where(JobExport.id == export_id, JobExport.status == QUEUED,
                                        JobExport.sent_at < cutoff).values(sent_at=utcnow()))).rowcount
            if not moved:
                continue  # claimed or re-sent by another sweeper meanwhile
            after_commit(s, partial(sender.send, TaskName.RUN_EXPORT, export_id, queue))
        log.info("export %s: still queued, re-sent to %s", export_id, queue)
        sent.append(export_id)
    return sent


def sweep(db: Database, enqueuer: Enqueuer, settings: Settings) -> None:
    """One reaper pass (jobs, then exports); errors are logged (the next pass retries)."""
    try:
        reap_lost(db, settings.heartbeat_timeout_s)
        resend_queued(db, enqueuer, settings.resend_queued_after_s)
        reap_lost_exports(db, settings.export_lost_after_s)
        resend_queued_exports(db, enqueuer, settings.resend_queued_after_s, settings.export_queue)
    except Exception:
        log.warning("reaper pass failed", exc_info=True)


def start_reaper(db: Database, enqueuer: Enqueuer, settings: Settings, stop: threading.Event) -> threading.Thread:
    """A daemon thread: one pass now, then every `settings.reaper_interval_s` until `stop` is set."""

    def loop() -> None:
        while True:
            sweep(db, enqueuer, settings)
            if stop.wait(settings.reaper_interval_s):
                return

    thread = threading.Thread(target=loop, name="lcsb-reaper", daemon=True)
    thread.start()
    return thread
