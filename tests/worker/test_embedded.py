"""The embedded default: no servers at all. SQLite database file, kombu's filesystem broker, local
storage; the API (in-process) sends the job, a real worker runs it."""

from __future__ import annotations

import pytest

from tests.api.conftest import migrate

pytestmark = pytest.mark.worker


def test_job_runs_on_sqlite_and_the_filesystem_broker(make_settings, start_worker, make_service, tmp_path):
    url = f"sqlite:///{tmp_path / 'lcsb.sqlite3'}"
    migrate(url)
    settings = make_settings(database_url=url, broker_url="filesystem://", broker_transport_options={},
                             data_dir=tmp_path / "var", storage_url=None)
    service = make_service(settings)
    worker = start_worker(settings)
    job = service.create_job(method={"save_every": 3})
    done = service.wait(job["id"], {"succeeded", "failed"}, 60.0)
    assert done["status"] == "succeeded", done["error"]
    assert done["progress"]["steps_completed"] == 6 and done["result_files"]
    assert any(e["message"].startswith("Checkpoint saved at step 3") for e in service.events(job["id"]))
    assert "filesystem" in worker.text()
