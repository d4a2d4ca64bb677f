"""The reaper (`lcsb_service.sweeper`) on both database backends: a running job whose heartbeat is older than
the bound fails `worker_lost`; a fresh one is left alone; a job stuck in `queued` is sent again once
per period."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import select, update

from lcsb_service import transitions
from lcsb_service.db import Database
from lcsb_service.enqueue import RecordingEnqueuer
from lcsb_service.ids import new_id, utcnow
from lcsb_service.keys import get_or_create_owner
from lcsb_service.models import Job, JobEvent
from lcsb_service.sweeper import reap_lost, resend_queued
from tests.api.conftest import migrate


@pytest.fixture(params=["postgresql", "sqlite"])
def db(request, tmp_path) -> Database:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'reaper.sqlite3'}"
        migrate(url)
    else:
        url = request.getfixturevalue("pg_url")
    database = Database(url)
    yield database
    database.dispose()


def add_job(db: Database, *, running: bool, heartbeat_age_s: float = 0.0, updated_age_s: float = 0.0) -> str:
    now = utcnow()
    with db.session() as s:
        owner = get_or_create_owner(s, "reaper-" + new_id("o", 6))
        job = Job(id=new_id("ftjob"), owner_id=owner.id, model="m", training_file="file-x", status="queued", seed=1,
                  hyperparameters={}, method={}, train_config={}, memory_estimate={}, queue="q", result_files=[],
                  steps_completed=0, created_at=now, updated_at=now - timedelta(seconds=updated_age_s))
        s.add(job)
    if running:
        with db.session() as s:
            transitions.claim(s, job.id, worker="w")
            s.execute(update(Job).where(Job.id == job.id).values(heartbeat_at=now - timedelta(seconds=heartbeat_age_s)))
    return job.id


def job_row(db: Database, job_id: str) -> Job:
    with db.session() as s:
        return s.get(Job, job_id)


def test_stale_running_jobs_fail_worker_lost(db):
    stale = add_job(db, running=True, heartbeat_age_s=300)
    fresh = add_job(db, running=True, heartbeat_age_s=5)
    queued = add_job(db, running=False)
    reaped = reap_lost(db, heartbeat_timeout_s=120)
    assert stale in reaped and fresh not in reaped and queued not in reaped
    row = job_row(db, stale)
    assert row.status == "failed" and row.error_code == "worker_lost" and "heartbeat" in row.error_message
    assert job_row(db, fresh).status == "running" and job_row(db, queued).status == "queued"
    assert stale not in reap_lost(db, heartbeat_timeout_s=120)  # already failed: nothing twice
    with db.session() as s:  # a late finish from the lost worker changes nothing
        assert transitions.finish(s, stale, fine_tuned_model="ft:late") is None


def test_jobs_stuck_in_queued_are_sent_again_once_per_period(db):
    stuck = add_job(db, running=False, updated_age_s=7200)
    recent = add_job(db, running=False, updated_age_s=10)
    enqueuer = RecordingEnqueuer()
    assert stuck in resend_queued(db, enqueuer, after_s=3600)
    assert (stuck, "q") in enqueuer.calls and all(job_id != recent for job_id, _ in enqueuer.calls)
    assert stuck not in resend_queued(db, enqueuer, after_s=3600)  # its clock was reset
    assert enqueuer.calls.count((stuck, "q")) == 1
    with db.session() as s:
        s.execute(update(Job).where(Job.id == stuck).values(updated_at=utcnow() - timedelta(seconds=7200)))
    assert stuck in resend_queued(db, enqueuer, after_s=3600)  # a period later: sent again
    assert enqueuer.calls.count((stuck, "q")) == 2
    with db.session() as s:  # one event for the first re-send, not one per period
        messages = list(s.scalars(select(JobEvent.message).where(JobEvent.job_id == stuck)))
    assert sum(m.startswith("Re-sent to queue q") for m in messages) == 1


def race(fn, args: list) -> None:
    """Run `fn(arg)` for each of `args` in its own thread, all released at once by a barrier; return
    when every one has finished (sweepers racing over the same rows)."""
    barrier = threading.Barrier(len(args))

    def run(arg):
        barrier.wait()
        fn(arg)

    threads = [threading.Thread(target=run, args=(a,)) for a in args]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_concurrent_sweepers_send_each_stuck_job_once(db):
    """Two sweepers racing over the same stale jobs: the guarded UPDATE lets one of them send each."""
    stuck = {add_job(db, running=False, updated_age_s=600) for _ in range(20)}
    enqueuers = [RecordingEnqueuer(), RecordingEnqueuer()]
    race(lambda enqueuer: resend_queued(db, enqueuer, after_s=30), enqueuers)
    sent = [job_id for e in enqueuers for job_id, _ in e.calls if job_id in stuck]
    assert sorted(sent) == sorted(stuck)  # every one sent, none twice
