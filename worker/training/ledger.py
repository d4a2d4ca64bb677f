"""A training worker's memory ledger: which jobs run in its slots and how much of its memory cap each
reserved, so that several jobs share one worker without exceeding the cap. Pure Python and thread-safe
(the worker's task threads share one ledger); no database, no Celery.

    ledger = MemoryLedger(cap_mib=8192, slots=3)
    r = ledger.reserve("ftjob-a", 3840, keep_waiting=still_queued)   # blocks until it fits; None: gave up
    try: ... run the job capped at r.mib ...
    finally: ledger.release(r)

Rules:
- never over the cap, never over `slots` jobs: the sum of the held reservations is <= `cap_mib`;
- first-fit on the waiting jobs in arrival order (`first_fit`): when memory or a slot frees, every
  waiting job that fits what is left is admitted, earliest first; a job that does not fit does not
  block a later, smaller one. (A stream of small jobs can keep a large one waiting; the sweeper's
  re-sends let another worker with room take it meanwhile.)
- a job id holds or waits for at most one reservation (a repeated delivery of a job that is already
  here gets None at once);
- `close()` (the worker is shutting down) makes every waiter give up.

`reservation_mib` is the size rule: with one slot a job reserves the whole cap (its process gets the
class cap, as before slots existed); with several, its estimate x (1 + margin), at most the cap.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

WAIT_CHECK_S = 2.0   # how often a waiting job asks `keep_waiting` (a database read) besides each release


@dataclass(frozen=True)
class Reservation:
    """`mib` MiB of the worker's `cap_mib` held by `job_id` in slot `slot` (1-based) of `slots`."""

    job_id: str
    mib: int
    slot: int
    slots: int
    cap_mib: int

    def describe(self) -> str:
        """E.g. "slot 2 of 3, 3,840 MiB reserved of 8,192"."""
        return f"slot {self.slot} of {self.slots}, {self.mib:,} MiB reserved of {self.cap_mib:,}"

    def to_data(self) -> dict[str, int]:
        """The event data of this placement."""
        return {"slot": self.slot, "slots": self.slots, "reserved_mib": self.mib, "worker_memory_mib": self.cap_mib}


@dataclass(frozen=True)
class LedgerState:
    """A snapshot: MiB reserved, jobs running (holding a reservation) and waiting."""

    reserved_mib: int
    running: int
    waiting: int


def reservation_mib(estimate: dict | None, *, cap_mib: int, slots: int, margin: float) -> int:
    """The MiB a job reserves on a worker with `slots` slots and a cap of `cap_mib`: the whole cap with
    one slot, or when the job has no estimate (`total_mib` of its recorded `memory_estimate`); else
    ceil(total_mib x (1 + margin)), at most the cap (a job the API let through reserves the cap and
    runs alone)."""
    total = (estimate or {}).get("total_mib")
    if slots <= 1 or not isinstance(total, int | float) or total <= 0:
        return cap_mib
    return min(cap_mib, math.ceil(total * (1 + margin)))


def first_fit(waiting: Sequence[tuple[str, int]], free_mib: int, free_slots: int) -> list[str]:
    """The waiting jobs admitted now, in order: go through `waiting` ((job id, MiB) in arrival order)
    and admit each job whose MiB fit in what is still free while a slot is left; a job that does not
    fit is passed over, not waited for."""
    admitted = []
    for job_id, mib in waiting:
        if free_slots <= 0:
            break
        if mib <= free_mib:
            admitted.append(job_id)
            free_mib -= mib
            free_slots -= 1
    return admitted


class MemoryLedger:
    """The reservations of one worker: at most `slots` jobs, at most `cap_mib` MiB in all."""

    def __init__(self, cap_mib: int, slots: int) -> None:
        if cap_mib <= 0 or slots <= 0:
            raise ValueError(f"a ledger needs a positive cap and slot count (got {cap_mib} MiB, {slots} slots)")
        self.cap_mib, self.slots = cap_mib, slots
        self._cond = threading.Condition()
        self._held: dict[str, Reservation] = {}
        self._waiting: list[tuple[str, int]] = []
        self._closed = False

    def state(self) -> LedgerState:
        """What is reserved, running and waiting now."""
        with self._cond:
            return self._state()

    def _state(self) -> LedgerState:
        return LedgerState(self._reserved(), len(self._held), len(self._waiting))

    def _reserved(self) -> int:
        return sum(r.mib for r in self._held.values())

    def _try_take(self, job_id: str) -> Reservation | None:
        """Under the lock: `job_id`'s reservation when first-fit admits it now."""
        free_slots = self.slots - len(self._held)
        if job_id not in first_fit(self._waiting, self.cap_mib - self._reserved(), free_slots):
            return None
        mib = next(m for j, m in self._waiting if j == job_id)
        self._waiting = [(j, m) for j, m in self._waiting if j != job_id]
        used = {r.slot for r in self._held.values()}
        slot = next(i for i in range(1, self.slots + 1) if i not in used)
        taken = Reservation(job_id, mib, slot, self.slots, self.cap_mib)
        self._held[job_id] = taken
        return taken

    def reserve(self, job_id: str, mib: int, *, keep_waiting: Callable[[], bool] = lambda: True,
                on_wait: Callable[[LedgerState], None] | None = None,
                check_every_s: float = WAIT_CHECK_S) -> Reservation | None:
        """Reserve `mib` MiB for `job_id`, waiting (first-fit) until it fits. While it waits, `on_wait`
        is called once with the state that made it wait, and `keep_waiting` every `check_every_s`
        seconds; both run outside the ledger's lock. Returns None without reserving when `job_id`
        already holds or waits for a reservation here, when `keep_waiting` answers False, or when the
        ledger is closed.

        Raises:
            ValueError: `mib` is not in 1..cap_mib (it could never fit).
        """
        if not 0 < mib <= self.cap_mib:
            raise ValueError(f"a reservation of {mib} MiB can never fit a cap of {self.cap_mib} MiB")
        with self._cond:
            if self._closed or job_id in self._held or any(j == job_id for j, _ in self._waiting):
                return None
            self._waiting.append((job_id, mib))
            taken, state = self._try_take(job_id), self._state()
        try:
            if taken is not None:
                return taken
            if on_wait is not None:
                on_wait(state)
            while True:
                checked = time.monotonic()
                with self._cond:
                    while True:
                        if self._closed:
                            return None
                        taken = self._try_take(job_id)
                        if taken is not None:
                            return taken
                        left = checked + check_every_s - time.monotonic()
                        if left <= 0:
                            break
                        self._cond.wait(left)
                if not keep_waiting():
                    return None
        finally:
            with self._cond:
                if any(j == job_id for j, _ in self._waiting):
                    self._waiting = [(j, m) for j, m in self._waiting if j != job_id]
                    self._cond.notify_all()  # a job that stops waiting may let a later one in

    def release(self, reservation: Reservation) -> None:
        """Give `reservation` back (idempotent) and wake the waiting jobs."""
        with self._cond:
            if self._held.get(reservation.job_id) == reservation:
                del self._held[reservation.job_id]
            self._cond.notify_all()

    def close(self) -> None:
        """Make every waiting job give up (its `reserve` returns None); held reservations stay until
        released. Used when the worker shuts down, so that it starts no new job."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
