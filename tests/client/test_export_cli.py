"""`lcsb jobs export`: requests an export, waits while a worker makes it (here the export task run in a
thread of the test process), downloads every file; and its errors (unknown format: exit 2 naming it)."""

from __future__ import annotations

import threading
import time

from lcsb_service.exports import list_exports
from tests.api.conftest import client  # noqa: F401 - the app's TestClient, to set up a succeeded job
from tests.api.test_exports import succeeded_job
from tests.client.conftest import ONE_BACKEND

pytestmark = ONE_BACKEND


def run_exports_of(app, job_id: str, stop: threading.Event) -> None:
    """Stand in for the worker: run the job's queued exports as they appear."""
    from worker.context import WorkerContext
    from worker.export.run import run_export

    ctx = WorkerContext(settings=app.state.settings, db=app.state.db, storage=app.state.storage, app=None)
    while not stop.is_set():
        with app.state.db.session() as s:
            queued = [r.id for r in list_exports(s, job_id) if r.status == "queued"]
        for export_id in queued:
            run_export(ctx, export_id)
        time.sleep(0.2)


def test_jobs_export_waits_and_downloads_every_file(lcsb, app, alice, client, tmp_path):  # noqa: F811
    job = succeeded_job(client, alice, app, tmp_path)
    stop = threading.Event()
    worker = threading.Thread(target=run_exports_of, args=(app, job["id"], stop), daemon=True)
    worker.start()
    try:
        result = lcsb("jobs", "export", job["id"], "--format", "adapter", "--out", tmp_path / "gguf")
    finally:
        stop.set()
        worker.join(timeout=30)
    assert result.exit_code == 0, result.stderr
    names = sorted(p.name for p in (tmp_path / "gguf").iterdir())
    assert names == ["README.md", "adapter.gguf", "manifest.json"]
    assert (tmp_path / "gguf" / "adapter.gguf").read_bytes()[:4] == b"GGUF"
    assert str(tmp_path / "gguf" / "adapter.gguf") in result.stdout


def test_jobs_export_names_an_unknown_format(lcsb, app, alice, client, tmp_path):  # noqa: F811
    job = succeeded_job(client, alice, app, tmp_path)
    result = lcsb("jobs", "export", job["id"], "--format", "gguf-q2")
    assert result.exit_code == 2 and "'gguf-q2'" in result.stderr
