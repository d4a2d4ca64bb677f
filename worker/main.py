"""The worker process: `python -m worker [--kind training]` (or `celery -A worker.main:app worker ...`
with the same options, which registers every kind's tasks; `celery -A worker.main:app beat` for a
beat-scheduled sweeper).

    LCSB_DATABASE_URL=postgresql+psycopg://... LCSB_BROKER_URL=redis://redis:6379/0 \
    LCSB_WORKER_CLASSES='[{"queue":"cpu-8g","memory_mib":8192},{"queue":"cpu-32g","memory_mib":32768}]' \
    LCSB_WORKER_QUEUE=cpu-32g python -m worker --kind training

`--kind` (a `lcsb_service.tasks.WorkerKind`, default `training`, today the only one) picks the tasks
the worker registers: the shared ones (`worker.tasks`) and its kind's (`worker.<kind>.tasks`).
The worker consumes the queue of its class (`LCSB_WORKER_QUEUE`), one job at a time (solo pool: the
training runs in its own child process anyway), and runs each job under the class's memory cap.
This module reads the settings when it is imported: it is a process entry point.
"""

from __future__ import annotations

import argparse
import os
import sys

from lcsb_service.settings import Settings
from lcsb_service.tasks import WorkerKind
from worker.app import create_app, task_modules

settings = Settings()
app = create_app(settings)


def worker_argv(extra: list[str] | None = None) -> list[str]:
    """Celery worker options for this worker's class."""
    queue = settings.worker_class.queue
    return ["worker", "--queues", queue, "--pool", "solo", "--concurrency", "1", "--without-mingle",
            "--without-gossip", "--without-heartbeat", "--hostname", f"{queue}-{os.getpid()}@%h",
            "--loglevel", settings.log_level, *(extra or [])]


def parse_kind(argv: list[str]) -> tuple[WorkerKind, list[str]]:
    """(`--kind`, the other options for Celery) from the command line. Exits with a usage error naming
    the kinds when `--kind` is not one of them."""
    parser = argparse.ArgumentParser(prog="python -m worker", add_help=False)
    parser.add_argument("--kind", choices=[k.value for k in WorkerKind], default=WorkerKind.TRAINING.value,
                        help="the kind of worker (which tasks it registers)")
    known, rest = parser.parse_known_args(argv)
    return WorkerKind(known.kind), rest


def main(argv: list[str] | None = None) -> None:
    """Run the Celery worker of `--kind` with this worker's options plus the other options of `argv`
    (default: the command line's)."""
    kind, rest = parse_kind(sys.argv[1:] if argv is None else argv)
    app.conf.include = task_modules(kind)  # read when the worker starts and imports its task modules
    app.worker_main(worker_argv(rest))
