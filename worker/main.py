"""The worker process: `python -m worker` (or `celery -A worker.main:app worker ...` with the same
options; `celery -A worker.main:app beat` for a beat-scheduled reaper).

    LCSB_DATABASE_URL=postgresql+psycopg://... LCSB_BROKER_URL=redis://redis:6379/0 \
    LCSB_WORKER_CLASSES='[{"queue":"cpu-8g","memory_mib":8192},{"queue":"cpu-32g","memory_mib":32768}]' \
    LCSB_WORKER_QUEUE=cpu-32g python -m worker

The worker consumes the queue of its class (`LCSB_WORKER_QUEUE`), one job at a time (solo pool: the
training runs in its own child process anyway), and runs each job under the class's memory cap.
This module reads the settings when it is imported: it is a process entry point.
"""

from __future__ import annotations

import os
import sys

from lcsb_service.settings import Settings
from worker.app import create_app

settings = Settings()
app = create_app(settings)


def worker_argv(extra: list[str] | None = None) -> list[str]:
    """Celery worker options for this worker's class."""
    queue = settings.worker_class.queue
    return ["worker", "--queues", queue, "--pool", "solo", "--concurrency", "1", "--without-mingle",
            "--without-gossip", "--without-heartbeat", "--hostname", f"{queue}-{os.getpid()}@%h",
            "--loglevel", settings.log_level, *(extra or [])]


def main(argv: list[str] | None = None) -> None:
    """Run the Celery worker with this worker's options plus `argv` (default: the command line's)."""
    app.worker_main(worker_argv(sys.argv[1:] if argv is None else argv))
