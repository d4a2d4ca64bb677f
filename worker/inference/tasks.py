"""`lcsb.generate(request_id)` (`TaskName.GENERATE`): answer one chat or completions request.

Acknowledged when received (not late): a request the API stopped waiting for is worth nothing when
redelivered, and the API answers 503 when no worker starts it in time. The work is
`worker.inference.serving.serve`; torch loads on the first request, not when Celery imports this.
"""

from __future__ import annotations

from celery import current_app, shared_task

from lcsb_service.tasks import TaskName
from worker.context import worker_context


@shared_task(name=TaskName.GENERATE.value, ignore_result=True, acks_late=False)
def generate(request_id: str) -> None:
    """Read the request's payload from its stream, generate, append the records (`lcsb_service.streams`)."""
    from worker.inference.serving import serve

    serve(worker_context(current_app), request_id)
