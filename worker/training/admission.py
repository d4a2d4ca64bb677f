"""Admit a delivered job to a slot of this worker by memory (`worker.training.ledger`), before it is
claimed: the job stays `queued` while it waits, so a cancel, another worker's claim of a re-sent
message, or this worker's death leaves it in a consistent state.

    reservation = admit(ctx, job_id, worker="cpu-8g-123@host")   # waits; None: nothing to run here
    ...
    release(ctx, reservation)

One ledger per worker process (`worker_ledger`), sized from the class this worker serves: its
`memory_mib` and `max_concurrent_jobs` (the task threads of a `threads` pool share it). A job reserves
`ledger.reservation_mib` of its recorded estimate (`lcsb_service.job_records.queued_estimate`). While it
waits, its events say so once ("Waiting on <worker> for memory: ..."), and every `ledger.WAIT_CHECK_S`
the worker re-reads the job: cancelled, or claimed elsewhere, it stops waiting. At shutdown
(`close_ledger`) waiting jobs give up and stay queued; the sweeper sends them again.
"""

from __future__ import annotations

import logging
import threading

from lcsb_service.events import add_event
from lcsb_service.job_records import queued_estimate
from lcsb_service.settings import WorkerClass
from worker.context import WorkerContext
from worker.training.ledger import LedgerState, MemoryLedger, Reservation, reservation_mib

log = logging.getLogger(__name__)
_lock = threading.Lock()
_ledger: MemoryLedger | None = None


def worker_ledger(wc: WorkerClass) -> MemoryLedger:
    """This process's ledger for the class `wc` (made on first use)."""
    global _ledger
    with _lock:
        if _ledger is None or (_ledger.cap_mib, _ledger.slots) != (wc.memory_mib, wc.max_concurrent_jobs):
            _ledger = MemoryLedger(wc.memory_mib, wc.max_concurrent_jobs)
        return _ledger


def close_ledger() -> None:
    """The worker is shutting down: jobs waiting for memory give up (they stay queued)."""
    with _lock:
        if _ledger is not None:
            _ledger.close()


def _estimate(ctx: WorkerContext, job_id: str) -> dict | None:
    with ctx.db.session() as s:
        return queued_estimate(s, job_id)


def _still_queued(ctx: WorkerContext, job_id: str) -> bool:
    try:
        return _estimate(ctx, job_id) is not None
    except Exception:  # a database blip: keep waiting, ask again later
        log.warning("job %s: could not read its status while it waits for memory", job_id, exc_info=True)
        return True


def _note_wait(ctx: WorkerContext, job_id: str, worker: str, mib: int, state: LedgerState) -> None:
    cap = ctx.settings.worker_class.memory_mib
    message = (f"Waiting on {worker} for memory: the job needs {mib:,} MiB; {state.reserved_mib:,} of {cap:,} MiB "
               f"are reserved by {state.running} running job{'s' * (state.running != 1)} (the job stays queued)")
    log.info("job %s: %s", job_id, message)
    try:
        with ctx.db.session() as s:
            add_event(s, job_id, message, data={"worker": worker, "needed_mib": mib, "reserved_mib": state.reserved_mib,
                                                "worker_memory_mib": cap, "running_jobs": state.running})
    except Exception:
        log.warning("job %s: could not record that it waits for memory", job_id, exc_info=True)


def admit(ctx: WorkerContext, job_id: str, *, worker: str) -> Reservation | None:
    """Reserve memory for the queued job `job_id` on this worker, waiting (first-fit) until it fits.
    Returns None when there is nothing to run here: the job is not queued (or unknown), it already
    holds or waits for a reservation here (a repeated delivery), it stopped being queued while it
    waited, or the worker is shutting down."""
    estimate = _estimate(ctx, job_id)
    if estimate is None:
        return None
    wc = ctx.settings.worker_class
    mib = reservation_mib(estimate, cap_mib=wc.memory_mib, slots=wc.max_concurrent_jobs,
                          margin=ctx.settings.reservation_margin)
    return worker_ledger(wc).reserve(job_id, mib, keep_waiting=lambda: _still_queued(ctx, job_id),
                                     on_wait=lambda state: _note_wait(ctx, job_id, worker, mib, state))


def release(ctx: WorkerContext, reservation: Reservation) -> None:
    """Give the job's reservation back: its process has ended and its cage is gone."""
    worker_ledger(ctx.settings.worker_class).release(reservation)
