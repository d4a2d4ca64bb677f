"""The reaper: ends jobs whose worker is gone, and re-sends jobs that never reached a queue.

    reap_lost(db, heartbeat_timeout_s)        running, heartbeat older than the bound -> failed worker_lost
    resend_queued(db, enqueuer, after_s)      queued and untouched for `after_s` -> sent to its queue again

Every worker runs both when it starts and then every `Settings.reaper_interval_s` in a thread
(`start_reaper`); Celery beat can run them too (task `lcsb.reap`). Several reapers at once are safe:
`fail` is a guarded transition and the heartbeat is re-checked under the row lock. A job whose worker
was killed therefore ends `failed` within heartbeat_timeout_s + reaper_interval_s of its last heartbeat
(as long as one worker is running). Its message, never acknowledged, comes back after the broker's
visibility timeout and is then a no-op (the claim sees `failed`).
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime, timedelta

from sqlalchemy import select, update

from lcsb_service import transitions
from lcsb_service.db import Database
from lcsb_service.enqueue import Enqueuer, enqueue_after_commit
from lcsb_service.events import add_event
from lcsb_service.ids import utcnow
from lcsb_service.models import QUEUED, RUNNING, Job

log = logging.getLogger(__name__)


def _aware(ts: datetime | None) -> datetime | None:
    return ts.replace(tzinfo=UTC) if ts is not None and ts.tzinfo is None else ts  # SQLite returns naive UTC


def reap_lost(db: Database, heartbeat_timeout_s: float) -> list[str]:
    """Fail every running job whose heartbeat is older than `heartbeat_timeout_s`; returns their ids."""
    cutoff = utcnow() - timedelta(seconds=heartbeat_timeout_s)
    with db.session() as s:
        candidates = list(s.scalars(select(Job.id).where(Job.status == RUNNING, Job.heartbeat_at < cutoff)))
    reaped = []
    for job_id in candidates:
        with db.session() as s:
            job = transitions.lock_job(s, job_id)
            if job.status != RUNNING or (_aware(job.heartbeat_at) or cutoff) >= cutoff:
                continue  # finished or beat again meanwhile
            silent = (utcnow() - _aware(job.heartbeat_at)).total_seconds()
            transitions.fail(s, job_id, "worker_lost",
                             f"The worker running this job stopped reporting (no heartbeat for {silent:.0f} s, "
                             f"limit {heartbeat_timeout_s:.0f} s); the job did not finish")
            reaped.append(job_id)
            log.warning("job %s: no heartbeat for %.0f s, failed as worker_lost", job_id, silent)
    return reaped


def resend_queued(db: Database, enqueuer: Enqueuer, after_s: float) -> list[str]:
    """Send again every job queued and not updated for `after_s` (its first send may have failed)."""
    cutoff = utcnow() - timedelta(seconds=after_s)
    with db.session() as s:
        stale = list(s.execute(select(Job.id, Job.queue).where(Job.status == QUEUED, Job.updated_at < cutoff)))
        for job_id, queue in stale:
            s.execute(update(Job).where(Job.id == job_id, Job.status == QUEUED).values(updated_at=utcnow()))
            add_event(s, job_id, f"Re-sent to queue {queue}: still queued after {after_s:.0f} s")
            enqueue_after_commit(s, enqueuer, job_id, queue)
    return [job_id for job_id, _ in stale]


def sweep(db: Database, enqueuer: Enqueuer, settings) -> None:  # noqa: ANN001 - Settings
    """One reaper pass; errors are logged (the next pass retries)."""
    try:
        reap_lost(db, settings.heartbeat_timeout_s)
        resend_queued(db, enqueuer, settings.resend_queued_after_s)
    except Exception:  # noqa: BLE001
        log.warning("reaper pass failed", exc_info=True)


def start_reaper(db: Database, enqueuer: Enqueuer, settings, stop: threading.Event) -> threading.Thread:  # noqa: ANN001
    """A daemon thread: one pass now, then every `settings.reaper_interval_s` until `stop` is set."""

    def loop() -> None:
        while True:
            sweep(db, enqueuer, settings)
            if stop.wait(settings.reaper_interval_s):
                return

    thread = threading.Thread(target=loop, name="lcsb-reaper", daemon=True)
    thread.start()
    return thread
