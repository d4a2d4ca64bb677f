"""The worker's memory ledger (`worker.training.ledger`), with real threads: the reservation size rule,
first-fit admission (a job that does not fit never blocks a later smaller one; fitting jobs go in
arrival order), never over the cap or the slots, release and give-up paths, and the lowest free slot."""

from __future__ import annotations

import random
import threading

import pytest

from worker.training.ledger import LedgerState, MemoryLedger, Reservation, first_fit, reservation_mib

GIB = 1024
JOIN_S = 10.0


class Waiter:
    """`ledger.reserve(job_id, mib)` in a thread; `waiting` is set when the ledger made it wait."""

    def __init__(self, ledger: MemoryLedger, job_id: str, mib: int, **kw) -> None:
        self.waiting, self.done = threading.Event(), threading.Event()
        self.state: LedgerState | None = None
        self.result: Reservation | None = None

        def on_wait(state: LedgerState) -> None:
            self.state = state
            self.waiting.set()

        def run() -> None:
            self.result = ledger.reserve(job_id, mib, on_wait=on_wait, **kw)
            self.done.set()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def join(self) -> Reservation | None:
        self.thread.join(JOIN_S)
        assert not self.thread.is_alive(), "reserve() did not return"
        return self.result


def test_the_reservation_rule():
    est = {"total_mib": 3 * GIB}
    assert reservation_mib(est, cap_mib=8 * GIB, slots=1, margin=0.25) == 8 * GIB  # one slot: the whole cap
    assert reservation_mib(est, cap_mib=8 * GIB, slots=3, margin=0.25) == 3840
    assert reservation_mib({"total_mib": 1000.2}, cap_mib=8 * GIB, slots=3, margin=0.0) == 1001  # rounded up
    assert reservation_mib({"total_mib": 7 * GIB}, cap_mib=8 * GIB, slots=3, margin=0.25) == 8 * GIB  # at most the cap
    assert reservation_mib({}, cap_mib=8 * GIB, slots=3, margin=0.25) == 8 * GIB     # no estimate: the cap
    assert reservation_mib(None, cap_mib=8 * GIB, slots=3, margin=0.25) == 8 * GIB


def test_first_fit_passes_over_a_job_that_does_not_fit():
    assert first_fit([("big", 6000), ("small", 2000), ("mid", 3000)], 5000, 3) == ["small", "mid"]
    assert first_fit([("big", 6000), ("small", 2000), ("mid", 3000)], 5000, 1) == ["small"]   # one slot left
    assert first_fit([("a", 3000), ("b", 3000), ("c", 3000)], 8192, 3) == ["a", "b"]
    assert first_fit([("a", 3000)], 8192, 0) == []
    assert first_fit([], 8192, 3) == []


def test_three_jobs_of_3_gib_in_8_gib_two_run_the_third_waits_then_starts():
    ledger = MemoryLedger(8 * GIB, slots=3)
    mib = reservation_mib({"total_mib": 3 * GIB}, cap_mib=8 * GIB, slots=3, margin=0.25)
    a, b = ledger.reserve("a", mib), ledger.reserve("b", mib)
    assert (a.slot, b.slot) == (1, 2) and a.describe() == "slot 1 of 3, 3,840 MiB reserved of 8,192"
    c = Waiter(ledger, "c", mib)
    assert c.waiting.wait(JOIN_S) and not c.done.is_set()
    assert c.state == LedgerState(reserved_mib=7680, running=2, waiting=1)
    ledger.release(a)
    got = c.join()
    assert got == Reservation("c", 3840, 1, 3, 8 * GIB)   # the lowest free slot
    assert ledger.state() == LedgerState(7680, 2, 0)
    ledger.release(a)  # idempotent: a's second release changes nothing
    assert ledger.state() == LedgerState(7680, 2, 0)
    for r in (b, got):
        ledger.release(r)
    assert ledger.state() == LedgerState(0, 0, 0)


def test_a_waiting_job_does_not_block_a_later_smaller_one():
    ledger = MemoryLedger(8 * GIB, slots=3)
    held = ledger.reserve("held", 6000)
    big = Waiter(ledger, "big", 4000)
    assert big.waiting.wait(JOIN_S)
    small = ledger.reserve("small", 1000, check_every_s=0.05)  # fits beside "held" at once
    assert small is not None and small.slot == 2 and not big.done.is_set()
    ledger.release(held)
    assert big.join() is not None and big.result.slot == 1
    assert ledger.state() == LedgerState(5000, 2, 0)


def test_fitting_waiters_go_in_arrival_order():
    """The cap is held whole; two 5 GiB jobs wait, in order; when it frees only one fits: the first."""
    ledger = MemoryLedger(8 * GIB, slots=3)
    whole = ledger.reserve("whole", 8 * GIB)
    first = Waiter(ledger, "first", 5 * GIB)
    assert first.waiting.wait(JOIN_S)
    second = Waiter(ledger, "second", 5 * GIB)
    assert second.waiting.wait(JOIN_S)
    ledger.release(whole)
    assert first.join() is not None and not second.done.is_set()
    ledger.release(first.result)
    assert second.join() is not None


def test_slots_bound_the_jobs_even_with_memory_free():
    ledger = MemoryLedger(8 * GIB, slots=2)
    a, _ = ledger.reserve("a", 100), ledger.reserve("b", 100)
    c = Waiter(ledger, "c", 100)
    assert c.waiting.wait(JOIN_S) and c.state == LedgerState(200, 2, 1)
    ledger.release(a)
    assert c.join().slot == 1


def test_giving_up_a_repeated_delivery_and_closing():
    ledger = MemoryLedger(8 * GIB, slots=3)
    held = ledger.reserve("held", 8 * GIB)
    assert ledger.reserve("held", 1) is None   # the job already holds a reservation here: a repeated delivery
    stop = threading.Event()
    cancelled = Waiter(ledger, "cancelled", 1000, keep_waiting=lambda: not stop.is_set(), check_every_s=0.05)
    assert cancelled.waiting.wait(JOIN_S)
    assert ledger.reserve("cancelled", 1000) is None   # it waits already
    stop.set()  # e.g. the job was cancelled while it waited
    assert cancelled.join() is None and ledger.state() == LedgerState(8 * GIB, 1, 0)
    closing = Waiter(ledger, "closing", 1000)
    assert closing.waiting.wait(JOIN_S)
    ledger.close()  # the worker is shutting down
    assert closing.join() is None and ledger.state() == LedgerState(8 * GIB, 1, 0)
    assert ledger.reserve("late", 1) is None
    ledger.release(held)
    assert ledger.state() == LedgerState(0, 0, 0)
    with pytest.raises(ValueError, match="never fit"):
        MemoryLedger(1000, 1).reserve("huge", 1001)


def test_many_threads_never_exceed_the_cap_or_the_slots():
    """24 jobs of random sizes through 3 slots and 8 GiB, each holding its reservation for a moment."""
    ledger = MemoryLedger(8 * GIB, slots=3)
    lock, seen, errors = threading.Lock(), [], []
    rng = random.Random(0)
    sizes = [rng.randint(500, 8 * GIB) for _ in range(24)]

    def job(i: int) -> None:
        r = ledger.reserve(f"job{i}", sizes[i], check_every_s=0.05)
        try:
            if r is None:
                errors.append(f"job{i} got no reservation")
                return
            with lock:
                seen.append(ledger.state())
            threading.Event().wait(0.01)
        finally:
            if r is not None:
                ledger.release(r)

    threads = [threading.Thread(target=job, args=(i,), daemon=True) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and len(seen) == 24
    assert all(s.reserved_mib <= 8 * GIB and s.running <= 3 for s in seen), max(seen, key=lambda s: s.reserved_mib)
    assert max(s.running for s in seen) >= 2   # they did share the worker
    assert ledger.state() == LedgerState(0, 0, 0)
