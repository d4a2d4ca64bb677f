"""The worker process: `python -m worker [--kind training]` (or `celery -A worker.main:app worker ...`
with the same options, which registers every kind's tasks; `celery -A worker.main:app beat` for a
beat-scheduled sweeper).

    LCSB_DATABASE_URL=postgresql+psycopg://... LCSB_BROKER_URL=redis://redis:6379/0 \
    LCSB_WORKER_CLASSES='[{"queue":"cpu-8g","memory_mib":8192},{"queue":"cpu-32g","memory_mib":32768}]' \
    LCSB_WORKER_QUEUE=cpu-32g python -m worker --kind training

`--kind` (a `lcsb_service.tasks.WorkerKind`, default `training`) picks the tasks the worker registers:
the shared ones (`worker.tasks`) and its kind's (`worker.<kind>.tasks`). A training worker consumes
the queue of its class (`LCSB_WORKER_QUEUE`) and runs each job in its own child process: one job at a
time under the class's memory cap (solo pool), or, with the class's `max_concurrent_jobs` N > 1, up to
N at once (threads pool, N threads), each under its own memory reservation (`worker.training.admission`).
An inference worker (`--kind inference`) consumes `LCSB_INFERENCE_QUEUE`, up to `LCSB_INFERENCE_MAX_SEQUENCES`
requests at once (threads pool; the llama.cpp engine decodes them together), and
caps its own process at `LCSB_INFERENCE_MEMORY_MIB` (`worker.limits`: a cgroup of its own, else an
address-space limit) before anything loads a model. An export worker (`--kind export`) does the same
with `LCSB_EXPORT_QUEUE` and `LCSB_EXPORT_MEMORY_MIB`, one export at a time, and never imports torch
(`lcsb_service.tasks.KIND_QUEUE_SETTING` names each kind's two settings).
This module reads the settings when it is imported: it is a process entry point.
"""

from __future__ import annotations

import argparse
import os
import sys

from lcsb_service.settings import Settings
from lcsb_service.tasks import KIND_QUEUE_SETTING, WorkerKind
from worker.app import create_app, task_modules

settings = Settings()
app = create_app(settings)


def pool_options(slots: int) -> list[str]:
    """Celery's pool for a worker running `slots` jobs at once: `solo` for one (the task runs in the
    worker's main thread, as before slots existed), else `threads` with one thread per slot (each task
    thread supervises its own training process; `worker.training.admission` shares the memory)."""
    return ["--pool", "solo" if slots == 1 else "threads", "--concurrency", str(slots)]


def worker_argv(extra: list[str] | None = None, kind: WorkerKind = WorkerKind.TRAINING) -> list[str]:
    """Celery worker options for this worker's class (an inference worker: its queue, up to
    `inference_max_sequences` requests at once, one thread each; an export worker: its queue, one
    export at a time)."""
    own = KIND_QUEUE_SETTING.get(kind)
    queue = getattr(settings, own[0]) if own else settings.worker_class.queue
    slots = (settings.inference_max_sequences if kind == WorkerKind.INFERENCE else 1) if own \
        else settings.worker_class.max_concurrent_jobs
    return ["worker", "--queues", queue, *pool_options(slots), "--without-mingle",
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
    app.lcsb_kind = kind
    if kind in KIND_QUEUE_SETTING:
        cap_own_process(kind)
    app.worker_main(worker_argv(rest, kind))


def cap_own_process(kind: WorkerKind) -> None:
    """Put this worker process under its kind's memory setting (`inference_memory_mib`,
    `export_memory_mib`; see `worker.limits`). On CUDA an inference engine is what allocates, and the
    cap is logged only; an export worker runs on the CPU."""
    import logging

    from worker.limits import create_cage, enter_cage

    device = settings.inference_device if kind == WorkerKind.INFERENCE else "cpu"
    cage = create_cage(kind.value, getattr(settings, KIND_QUEUE_SETTING[kind][1]), device=device,
                       configured_parent=settings.cgroup_parent,
                       address_space_slack_mib=settings.address_space_slack_mib)
    try:
        enter_cage(cage.to_spec())
        app.lcsb_cap = f"{cage.cap_mib} MiB by {cage.describe()}"   # logged when the worker is ready
    except OSError as exc:
        logging.getLogger(__name__).warning("cannot cap the %s worker's memory (%s)", kind.value, exc)
        app.lcsb_cap = f"not capped ({exc})"
