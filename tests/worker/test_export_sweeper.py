"""Lost exports (`lcsb_service.sweeper`, both database backends): a `running` export claimed longer ago than
the bound fails `worker_lost` with a message (a fresh one and a queued one are left alone, a late finish
changes nothing); a `queued` export whose message may be lost is sent again to its job's queue once per
period to the export queue, by one of several racing sweepers; `sweep` runs both with the settings' bounds."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import update

from lcsb_service.enqueue import LoggingEnqueuer, RecordingEnqueuer
from lcsb_service.exports import claim_export, finish_export
from lcsb_service.ids import new_id, utcnow
from lcsb_service.keys import get_or_create_owner
from lcsb_service.models import Job, JobExport
from lcsb_service.settings import Settings
from lcsb_service.sweeper import reap_lost_exports, resend_queued_exports, sweep
from lcsb_service.tasks import TaskName
from tests.worker.test_reaper import db, race  # noqa: F401 - db: the two-backend fixture

QUEUE, EXPORT_QUEUE = "job-q", "export-q"


def add_export(db, *, running: bool = False, age_s: float = 0.0) -> str:  # noqa: F811
    """A succeeded job with one export, queued (sent `age_s` ago) or running (claimed `age_s` ago)."""
    now = utcnow()
    with db.session() as s:
        owner = get_or_create_owner(s, "exports-" + new_id("o", 6))
        job = Job(id=new_id("ftjob"), owner_id=owner.id, model="m", training_file="file-x", status="succeeded",
                  seed=1, hyperparameters={}, method={}, train_config={}, memory_estimate={}, queue=QUEUE,
                  result_files=[], steps_completed=4, created_at=now, updated_at=now)
        s.add(job)
        s.flush()
        export = JobExport(id=new_id("ftexp"), job_id=job.id, status="queued", formats=["adapter"], files=[],
                           created_at=now, sent_at=now - timedelta(seconds=age_s))
        s.add(export)
    if running:
        with db.session() as s:
            assert claim_export(s, export.id) is not None
            s.execute(update(JobExport).where(JobExport.id == export.id)
                      .values(started_at=now - timedelta(seconds=age_s)))
    return export.id


def row(db, export_id: str) -> JobExport:  # noqa: F811
    with db.session() as s:
        return s.get(JobExport, export_id)


def test_a_running_export_past_the_bound_fails_worker_lost(db):  # noqa: F811
    lost = add_export(db, running=True, age_s=2000)
    fresh = add_export(db, running=True, age_s=30)
    queued = add_export(db, age_s=2000)
    assert row(db, fresh).started_at is not None  # the claim sets the clock
    reaped = reap_lost_exports(db, lost_after_s=900)  # the PostgreSQL database is shared: other tests' rows too
    assert lost in reaped and fresh not in reaped and queued not in reaped
    failed = row(db, lost)
    assert failed.status == "failed" and failed.error_code == "worker_lost" and failed.finished_at is not None
    assert "stopped before it finished" in failed.error_message and "request the export again" in failed.error_message
    assert "limit 900 s" in failed.error_message
    assert row(db, fresh).status == "running" and row(db, queued).status == "queued"
    assert lost not in reap_lost_exports(db, lost_after_s=900)  # nothing twice
    with db.session() as s:  # the lost worker's late finish changes nothing
        finish_export(s, lost, files=[{"name": "adapter.gguf"}], manifest={})
    assert row(db, lost).status == "failed" and row(db, lost).files == []


def test_a_queued_export_is_sent_again_once_per_period(db):  # noqa: F811
    stuck = add_export(db, age_s=7200)
    recent = add_export(db, age_s=10)
    sender = RecordingEnqueuer()
    first = resend_queued_exports(db, sender, 3600, EXPORT_QUEUE)
    assert stuck in first and recent not in first
    assert (str(TaskName.RUN_EXPORT), stuck, EXPORT_QUEUE) in sender.sent
    assert stuck not in resend_queued_exports(db, sender, 3600, EXPORT_QUEUE)  # its clock moved
    with db.session() as s:
        s.execute(update(JobExport).where(JobExport.id == stuck).values(sent_at=utcnow() - timedelta(seconds=7200)))
    assert stuck in resend_queued_exports(db, sender, 3600, EXPORT_QUEUE)  # a period later: sent again
    args = [arg for _, arg, _ in sender.sent]
    assert args.count(stuck) == 2 and recent not in args
    assert row(db, stuck).status == "queued"


def test_an_enqueuer_that_cannot_send_tasks_resends_no_export(db):  # noqa: F811
    class JobsOnly:
        def enqueue(self, job_id: str, queue: str) -> None:
            raise AssertionError("not a job")

    stuck = add_export(db, age_s=7200)
    assert resend_queued_exports(db, JobsOnly(), 60, EXPORT_QUEUE) == []
    assert stuck in resend_queued_exports(db, LoggingEnqueuer(), 60, EXPORT_QUEUE)


def test_concurrent_sweepers_send_each_stuck_export_once(db):  # noqa: F811
    stuck = {add_export(db, age_s=600) for _ in range(12)}
    senders = [RecordingEnqueuer(), RecordingEnqueuer()]
    race(lambda sender: resend_queued_exports(db, sender, 30, EXPORT_QUEUE), senders)
    sent = [arg for s in senders for _, arg, _ in s.sent if arg in stuck]
    assert sorted(sent) == sorted(stuck)  # every one sent, none twice


def test_sweep_ends_lost_exports_and_resends_lost_messages_with_the_settings_bounds(db):  # noqa: F811
    settings = Settings(export_lost_after_s=60, resend_queued_after_s=60, heartbeat_timeout_s=120,
                        export_queue=EXPORT_QUEUE)
    lost, kept = add_export(db, running=True, age_s=120), add_export(db, running=True, age_s=5)
    stuck = add_export(db, age_s=120)
    sender = RecordingEnqueuer()
    sweep(db, sender, settings)
    assert row(db, lost).error_code == "worker_lost" and row(db, kept).status == "running"
    assert (str(TaskName.RUN_EXPORT), stuck, EXPORT_QUEUE) in sender.sent
