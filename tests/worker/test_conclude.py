"""How the supervisor applies an outcome (`worker.training.supervisor.conclude`), on PostgreSQL: a success that
arrives after a cancel is discarded (no artifacts, no `succeeded`); a failure's detail (exception text)
goes to the worker's log only: the job's events carry the plain message and the error code."""

from __future__ import annotations

import json

from sqlalchemy import func, select

from lcsb_service import transitions
from lcsb_service.db import Database
from lcsb_service.models import Artifact, Job, JobEvent
from lcsb_service.storage import Storage
from tests.worker.test_reaper import add_job
from worker.context import WorkerContext
from worker.training.outcome import Outcome
from worker.training.supervisor import conclude


def context(make_settings, pg_url, tmp_path) -> WorkerContext:
    return WorkerContext(settings=make_settings(worker_runs_dir=tmp_path / "runs"), db=Database(pg_url),
                         storage=Storage(str(tmp_path / "storage")), app=None)


def test_a_late_success_never_overwrites_cancelled(make_settings, pg_url, tmp_path):
    ctx = context(make_settings, pg_url, tmp_path)
    job_id = add_job(ctx.db, running=True)
    (tmp_path / "runs" / job_id / "adapter").mkdir(parents=True)
    (tmp_path / "runs" / job_id / "adapter" / "adapter_config.json").write_text("{}")
    with ctx.db.session() as s:
        job = transitions.cancel(s, job_id)
    status = conclude(ctx, job, Outcome("succeeded", steps=6, summary={"trained_tokens": 10}), "ft:m:o::j")
    with ctx.db.session() as s:
        row = s.get(Job, job_id)
        assert status == row.status == "cancelled" and row.fine_tuned_model is None
        assert s.scalar(select(func.count()).select_from(Artifact).where(Artifact.job_id == job_id)) == 0
        last = s.scalars(select(JobEvent.message).where(JobEvent.job_id == job_id)
                         .order_by(JobEvent.seq.desc())).first()
    assert last == "The training's late result (succeeded) was discarded: the job is cancelled"
    ctx.db.dispose()


def test_a_failure_keeps_its_detail_out_of_the_events(make_settings, pg_url, tmp_path, caplog):
    ctx = context(make_settings, pg_url, tmp_path)
    job_id = add_job(ctx.db, running=True)
    with ctx.db.session() as s:
        job = s.get(Job, job_id)
    out = Outcome.failed("internal_error", "The job failed", detail="KeyError: '/srv/x'", peak_memory_mib=812.3)
    with caplog.at_level("ERROR", logger="worker.training.supervisor"):
        assert conclude(ctx, job, out, "ft:m:o::j") == "failed"
    with ctx.db.session() as s:
        row = s.get(Job, job_id)
        events = list(s.execute(select(JobEvent.message, JobEvent.data).where(JobEvent.job_id == job_id)))
    assert (row.error_code, row.error_message, row.peak_memory_mib) == ("internal_error", "The job failed", 812.3)
    assert ("Fine-tuning job failed: The job failed", {"code": "internal_error", "param": None}) in \
        [(m, d) for m, d in events]
    assert not any("KeyError" in m or "/srv/x" in m or "KeyError" in json.dumps(d) for m, d in events)
    assert "KeyError: '/srv/x'" in caplog.text  # the operator still sees it
    ctx.db.dispose()
