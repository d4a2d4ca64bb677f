"""How a committed job reaches a worker: the `Enqueuer` protocol.

The API calls `enqueue(job_id, queue)` only after the job row is committed (`enqueue_after_commit`), so a
worker never receives a job id it cannot read. The Celery implementation is in the worker package,
`worker.enqueue:CeleryEnqueuer` (the default). `Settings.enqueuer` names the class to use
("module:Class", built with the settings as its only argument).

    enqueuer = load_enqueuer(settings)
    enqueue_after_commit(session, enqueuer, job.id, job.queue)   # sent once the commit succeeded
"""

from __future__ import annotations

import importlib
import logging
from typing import Protocol, runtime_checkable

from sqlalchemy.orm import Session

from lcsb_service.db import after_commit
from lcsb_service.settings import Settings

log = logging.getLogger(__name__)


@runtime_checkable
class Enqueuer(Protocol):
    """Sends a job to the worker queue `queue`. Must be safe to call twice for one job (the worker's
    `claim` makes the second delivery a no-op)."""

    def enqueue(self, job_id: str, queue: str) -> None: ...


@runtime_checkable
class TaskSender(Protocol):
    """Sends one task by name with one id argument (`lcsb_service.tasks.TaskName`) to `queue`: what the
    API uses for job exports (`TaskName.RUN_EXPORT`, an export id; the receiving task makes a repeated
    delivery a no-op) and inference requests (`TaskName.GENERATE`, a request id). An enqueuer without
    it serves no chat and no export."""

    def send(self, task: str, arg: str, queue: str) -> None: ...


class LoggingEnqueuer:
    """Logs the job and leaves it `queued` (an API without workers)."""

    def __init__(self, settings: object | None = None) -> None:
        self.settings = settings

    def enqueue(self, job_id: str, queue: str) -> None:
        log.info("job %s queued on %s (no worker enqueuer configured)", job_id, queue)

    def send(self, task: str, arg: str, queue: str) -> None:
        log.info("task %s(%s) on %s not sent (no worker enqueuer configured)", task, arg, queue)


class RecordingEnqueuer:
    """Keeps the calls, for tests: `calls` is a list of (job_id, queue), `sent` of (task, id, queue)."""

    def __init__(self, settings: object | None = None) -> None:
        self.calls: list[tuple[str, str]] = []
        self.sent: list[tuple[str, str, str]] = []

    def enqueue(self, job_id: str, queue: str) -> None:
        self.calls.append((job_id, queue))

    def send(self, task: str, arg: str, queue: str) -> None:
        self.sent.append((str(task), arg, queue))
        self.calls.append((f"{task}:{arg}", queue))


def load_enqueuer(settings: Settings) -> Enqueuer:
    """Build the class named by `settings.enqueuer` ("package.module:Class").

    Raises:
        ValueError: the name is malformed or does not name an Enqueuer.
    """
    module_name, _, attr = settings.enqueuer.partition(":")
    if not attr:
        raise ValueError(f"LCSB_ENQUEUER must look like 'package.module:Class', got {settings.enqueuer!r}")
    instance = getattr(importlib.import_module(module_name), attr)(settings)
    if not isinstance(instance, Enqueuer):
        raise ValueError(f"{settings.enqueuer} has no enqueue(job_id, queue) method")
    return instance


def enqueue_after_commit(session: Session, enqueuer: Enqueuer, job_id: str, queue: str) -> None:
    """Send (job_id, queue) once the session has committed. A broker failure then is logged, not raised:
    the job row exists and stays `queued` (a sweeper can send it again)."""

    def send() -> None:
        enqueuer.enqueue(job_id, queue)

    after_commit(session, send)
