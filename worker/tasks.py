"""The tasks every kind of worker registers, and the worker's start-up hook.

    TaskName.SWEEP ("lcsb.reap")   one sweeper pass (for Celery beat; workers also sweep on their own)

At worker start (`worker_ready`): remove memory cgroups left by a killed worker on this machine, run
one sweeper pass, and start the sweeper thread (`lcsb_service.sweeper`).
"""

from __future__ import annotations

import logging
import threading

from celery import current_app, shared_task
from celery.signals import worker_ready, worker_shutdown

from lcsb_service import sweeper
from lcsb_service.tasks import TaskName, WorkerKind
from worker.context import worker_context
from worker.enqueue import CeleryEnqueuer
from worker.limits import remove_stale_cages

log = logging.getLogger(__name__)
_stop_reaper = threading.Event()


@shared_task(name=TaskName.SWEEP.value, ignore_result=True)
def reap() -> None:
    """One sweeper pass: lost running jobs fail, long-queued jobs are sent again."""
    ctx = worker_context(current_app)
    sweeper.sweep(ctx.db, CeleryEnqueuer(ctx.settings, app=ctx.app), ctx.settings)


@worker_ready.connect
def _on_worker_ready(sender=None, **_kwargs) -> None:  # Celery's consumer
    app = getattr(sender, "app", None) or current_app
    ctx = worker_context(app)
    wc = ctx.settings.worker_class
    removed = remove_stale_cages(configured_parent=ctx.settings.cgroup_parent)
    if removed:
        log.info("removed %d memory cgroups left by earlier workers", removed)
    sweeper.start_reaper(ctx.db, CeleryEnqueuer(ctx.settings, app=ctx.app), ctx.settings, _stop_reaper)
    kind = getattr(app, "lcsb_kind", None)
    if kind == WorkerKind.INFERENCE:
        s = ctx.settings
        log.info("LCSB worker ready: inference queue %s, process memory %s, %s, engine %s (transformers precision %s)",
                 s.inference_queue, getattr(app, "lcsb_cap", "not capped"), s.inference_device, s.inference_engine,
                 s.inference_precision)
        return
    if kind == WorkerKind.EXPORT:
        log.info("LCSB worker ready: export queue %s, process memory %s; a running export is lost after %.0f s",
                 ctx.settings.export_queue, getattr(app, "lcsb_cap", "not capped"), ctx.settings.export_lost_after_s)
        return
    log.info("LCSB worker ready: queue %s, memory cap %d MiB, %s, %d job slot%s; heartbeat bound %.0f s",
             wc.queue, wc.memory_mib, wc.device, wc.max_concurrent_jobs, "s" * (wc.max_concurrent_jobs != 1),
             ctx.settings.heartbeat_timeout_s)
    if ctx.settings.resolved_visibility_timeout_s <= ctx.settings.job_time_limit_s:
        log.warning("the broker's visibility timeout (%.0f s) is not above the job time limit (%.0f s): a long "
                    "job's message will be delivered again while it runs (the claim makes that a no-op)",
                    ctx.settings.resolved_visibility_timeout_s, ctx.settings.job_time_limit_s)


@worker_shutdown.connect
def _on_worker_shutdown(**_kwargs) -> None:
    _stop_reaper.set()
