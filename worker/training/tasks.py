"""The training worker's tasks (registered by name; arguments are ids only).

    TaskName.RUN_TRAINING_JOB ("lcsb.run_job", job_id)   claim and run one job
                                                          (`worker.training.supervisor.run_job`)

Exports (`TaskName.RUN_EXPORT`) run on the export worker (`worker.export`), not here.
"""

from __future__ import annotations

from celery import shared_task
from celery.signals import worker_shutting_down

from lcsb_service.tasks import TaskName
from worker.context import worker_context
from worker.training import admission, supervisor


@shared_task(name=TaskName.RUN_TRAINING_JOB.value, bind=True, acks_late=True, ignore_result=True)
def run_job(self, job_id: str) -> str:
    """Run the job `job_id` once; a repeated delivery returns "skipped"."""
    ctx = worker_context(self.app)
    return supervisor.run_job(ctx, job_id, worker=self.request.hostname or ctx.hostname)


@worker_shutting_down.connect
def _stop_admitting(**_kwargs) -> None:
    """A stopping worker starts no new job: the ones waiting for memory give up and stay queued (the
    sweeper sends them again); running ones finish (warm shutdown) or die with the worker (cold)."""
    admission.close_ledger()
