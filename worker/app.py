"""The Celery application, built from the service settings (no module-level app here: the API builds
one to send tasks, `worker.main` builds the worker's).

    app = create_app(settings)                       # Redis (`redis://...`) or the embedded broker
    app.send_task(TaskName.RUN_TRAINING_JOB, args=[job_id], queue=job.queue)
    app = create_app(settings, WorkerKind.TRAINING)   # a training worker's: registers its tasks

Settings for jobs that run for hours (see the cases' "Job queue"):

- late acknowledgement and prefetch 1 (`worker_disable_prefetch` as well): a worker holds only the
  message it is running, so a queued job is never stuck behind a long one on a busy worker; a worker
  that dies leaves its message unacknowledged;
- as many jobs at once as the worker class's `max_concurrent_jobs`: one in the `solo` pool (the
  default), N in a `threads` pool of N (`worker.main.pool_options`); each training runs in a fresh child
  process under its memory reservation (`worker.training.supervisor`, `worker.training.admission`);
  with prefetch disabled, a Redis worker takes a message only when a thread is free;
- Redis `visibility_timeout` above the longest allowed job (`Settings.resolved_visibility_timeout_s`),
  so a message is not delivered again while its job still runs; if it is anyway, the worker's guarded
  `claim` makes the second delivery a no-op;
- soft and hard time limits: enforced by the supervisor (the solo and threads pools do not enforce
  Celery's); Celery's own limits are set above them as a backstop for a prefork pool;
- task arguments are ids only (JSON); no result backend: job state lives in the database.
"""

from __future__ import annotations

from typing import Any

from celery import Celery

from lcsb_service.settings import Settings
from lcsb_service.tasks import TaskName, WorkerKind
from worker import fs_broker

SHARED_TASKS = "worker.tasks"   # the sweeper task and the start-up hook, registered by every kind
# The filesystem broker's poll of its folder (kombu's default is 1 s): a chat request waited up to 1 s
# for an idle inference worker to see it; a listing of a small folder 10 times a second costs nothing.
FILESYSTEM_POLL_S = 0.1


def task_modules(kind: WorkerKind | None) -> list[str]:
    """The modules whose tasks a worker of `kind` registers: the shared ones and `worker.<kind>.tasks`
    (every kind's when `kind` is None: an app that only sends)."""
    kinds = list(WorkerKind) if kind is None else [kind]
    return [SHARED_TASKS, *(f"worker.{k.value}.tasks" for k in kinds)]


def broker_options(settings: Settings) -> dict[str, Any]:
    """Transport options: the filesystem broker's folders, or Redis' visibility timeout; plus
    `Settings.broker_transport_options` (e.g. `global_keyprefix` to share one Redis)."""
    if settings.broker_url.startswith("filesystem://"):
        folder = settings.resolved_broker_folder.resolve()
        options: dict[str, Any] = {"data_folder_in": str(folder / "messages"),
                                   "data_folder_out": str(folder / "messages"),
                                   "control_folder": str(folder / "control"), "store_processed": False,
                                   "polling_interval": FILESYSTEM_POLL_S}
    else:
        options = {"visibility_timeout": settings.resolved_visibility_timeout_s}
    return {**options, **settings.broker_transport_options}


def create_app(settings: Settings, kind: WorkerKind | None = None) -> Celery:
    """A Celery app for these settings; a worker of `kind` registers the tasks of `task_modules(kind)`
    by their `TaskName`s (all kinds' modules when None)."""
    app = Celery("lcsb", broker=settings.broker_url, include=task_modules(kind))
    hard_backstop = settings.job_time_limit_s + 2 * settings.job_kill_grace_s
    embedded = settings.broker_url.startswith("filesystem://")
    app.conf.update(
        task_acks_late=True,
        worker_prefetch_multiplier=1,
        worker_disable_prefetch=True,
        worker_concurrency=settings.worker_class.max_concurrent_jobs,
        task_serializer="json", accept_content=["json"],
        task_ignore_result=True, result_backend=None,
        task_soft_time_limit=hard_backstop, task_time_limit=hard_backstop + settings.job_kill_grace_s,
        task_default_queue=settings.worker_classes[0].queue,
        task_create_missing_queues=True,
        broker_transport_options=broker_options(settings),
        broker_connection_retry_on_startup=True,
        worker_cancel_long_running_tasks_on_connection_loss=False,  # a broker blip must not stop a training
        worker_enable_remote_control=not embedded,  # the filesystem broker has no fanout for it
        worker_send_task_events=False,
        worker_hijack_root_logger=False,
        beat_schedule={"lcsb-reap": {"task": TaskName.SWEEP.value, "schedule": settings.reaper_interval_s}},
    )
    if embedded:
        # kombu's own filesystem channel can hand a consumer a half-written message (worker.fs_broker)
        app.conf.broker_transport = fs_broker.TRANSPORT
        for sub in ("messages", "control"):
            (settings.resolved_broker_folder / sub).mkdir(parents=True, exist_ok=True)
    app.lcsb_settings = settings  # read by worker.context
    return app
