"""The export worker's task (registered by name; its argument is an id).

    TaskName.RUN_EXPORT ("lcsb.run_export", export_id)   make one export's GGUF files, torch-free
                                                          (`worker.export.run.run_export`)

Acknowledged late, like a job: a worker killed during an export leaves its message unacknowledged; the
export stays `running` until the sweeper fails it `worker_lost` (`Settings.export_lost_after_s`), and a
redelivered message then finds it no longer `queued` and does nothing.
"""

from __future__ import annotations

from celery import shared_task

from lcsb_service.tasks import TaskName
from worker.context import worker_context
from worker.export import run


@shared_task(name=TaskName.RUN_EXPORT.value, bind=True, acks_late=True, ignore_result=True)
def run_export(self, export_id: str) -> str:
    """Make the export `export_id`'s files once; a repeated delivery returns "skipped"."""
    return run.run_export(worker_context(self.app), export_id)
