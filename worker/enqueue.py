"""The Celery-backed `Enqueuer` (`LCSB_ENQUEUER=worker.enqueue:CeleryEnqueuer`, the default): sends
`TaskName.RUN_TRAINING_JOB` (`lcsb.run_job(job_id)`) to the job's queue. Imports Celery, not torch
(the API process uses it).

The API calls it after the job row is committed; a broker that does not answer within a few seconds
raises here, the API logs it, and the job stays `queued` until the reaper re-sends it
(`Settings.resend_queued_after_s`).
"""

from __future__ import annotations

from celery import Celery

from lcsb_service.settings import Settings
from lcsb_service.tasks import TaskName
from worker.app import create_app

SEND_RETRY = {"max_retries": 2, "interval_start": 0.2, "interval_step": 0.5, "interval_max": 1.0}


class CeleryEnqueuer:
    """`enqueue(job_id, queue)` -> one `TaskName.RUN_TRAINING_JOB` message on `queue` (safe to repeat: the worker's
    claim makes a second delivery a no-op)."""

    def __init__(self, settings: Settings, app: Celery | None = None) -> None:
        self.settings = settings
        self.app = app or create_app(settings)

    def enqueue(self, job_id: str, queue: str) -> None:
        self.send(TaskName.RUN_TRAINING_JOB.value, job_id, queue)

    def send(self, task: str, arg: str, queue: str) -> None:
        """One message of `task` (a `TaskName`) with the id `arg` on `queue` (e.g. `lcsb.generate(request_id)`)."""
        self.app.send_task(task, args=[arg], queue=queue, retry=True, retry_policy=SEND_RETRY)
