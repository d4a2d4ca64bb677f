"""Checkpoints and artifacts, published through `lcsb_service.artifacts` the way the worker will, then
listed and downloaded through the API."""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

import pytest

from lcsb_service import transitions
from lcsb_service.artifacts import publish_checkpoint, publish_run
from tests.api.helpers import assert_error, fake_run, job_ok, read_as_other_user, world_readable_tree


@pytest.fixture
def trained(client, alice, app, tmp_path) -> dict:
    """A succeeded job with checkpoints at steps 2, 4, 6 and the run's outputs published."""
    job = job_ok(client, alice)
    run = fake_run(tmp_path, steps=(2, 4, 6))
    storage = app.state.storage
    with app.state.db.session() as s:
        transitions.claim(s, job["id"])
    for step in (2, 4, 6):
        with app.state.db.session() as s:
            publish_checkpoint(s, storage, job_id=job["id"], step=step, fine_tuned_model=f"ft:m:{alice.name}::x",
                               folder=run / "checkpoints" / f"step-{step:06d}",
                               metrics={"step": step, "train_loss": 3.0 - step / 10})
    with app.state.db.session() as s:
        result_files = publish_run(s, storage, job_id=job["id"], owner_id=alice.owner_id, run_dir=run)
        transitions.finish(s, job["id"], fine_tuned_model="ft:final", trained_tokens=999, result_files=result_files)
    return {"job": job, "run": run, "result_files": result_files}


def members(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def test_checkpoints_pages_and_adapter_download(client, alice, trained):
    job_id = trained["job"]["id"]
    listed = client.get(f"/v1/fine_tuning/jobs/{job_id}/checkpoints", headers=alice.headers).json()
    assert [c["step_number"] for c in listed["data"]] == [6, 4, 2] and not listed["has_more"]
    first = client.get(f"/v1/fine_tuning/jobs/{job_id}/checkpoints?limit=2", headers=alice.headers).json()
    rest = client.get(f"/v1/fine_tuning/jobs/{job_id}/checkpoints?limit=2&after={first['last_id']}",
                      headers=alice.headers).json()
    assert first["has_more"] and [c["step_number"] for c in rest["data"]] == [2] and not rest["has_more"]
    ckpt = listed["data"][1]
    assert ckpt["object"] == "fine_tuning.job.checkpoint" and ckpt["fine_tuning_job_id"] == job_id
    assert ckpt["fine_tuned_model_checkpoint"].endswith(":ckpt-step-4") and ckpt["metrics"]["train_loss"] == 2.6
    r = client.get(ckpt["download_url"], headers=alice.headers)
    assert r.status_code == 200 and r.headers["content-type"] == "application/gzip"
    files = members(r.content)
    assert set(files) == {"step-4/adapter_config.json", "step-4/adapter_model.safetensors"}  # no optimizer state
    assert files["step-4/adapter_model.safetensors"] == b"weights-step-000004"
    assert_error(client.get(f"/v1/fine_tuning/jobs/{job_id}/checkpoints/ftckpt-nope/adapter",
                            headers=alice.headers), 404, "checkpoint_not_found")


def test_artifacts_and_result_files(client, alice, bob, trained):
    job_id, run = trained["job"]["id"], trained["run"]
    job = client.get(f"/v1/fine_tuning/jobs/{job_id}", headers=alice.headers).json()
    assert job["status"] == "succeeded" and job["fine_tuned_model"] == "ft:final" and job["trained_tokens"] == 999
    assert job["result_files"] == trained["result_files"] and len(job["result_files"]) == 1
    listed = client.get(f"/v1/fine_tuning/jobs/{job_id}/artifacts", headers=alice.headers).json()["data"]
    names = {a["name"]: a for a in listed}
    assert set(names) == {"adapter.tar.gz", "selection_history.jsonl", "metrics.csv", "summary.json", "plots/loss.png"}
    adapter = client.get(names["adapter.tar.gz"]["download_url"], headers=alice.headers)
    assert set(members(adapter.content)) == {"adapter/adapter_config.json", "adapter/adapter_model.safetensors"}
    for name, path in [("selection_history.jsonl", "selection_history.jsonl"), ("metrics.csv", "metrics.csv"),
                       ("plots/loss.png", "plots/loss.png")]:
        r = client.get(f"/v1/fine_tuning/jobs/{job_id}/artifacts/{name}", headers=alice.headers)
        assert r.status_code == 200 and r.content == (run / path).read_bytes()
        assert r.headers["content-type"].startswith(names[name]["content_type"])
        assert int(r.headers["content-length"]) == names[name]["bytes"]
    result = client.get(f"/v1/files/{job['result_files'][0]}", headers=alice.headers).json()
    assert result["purpose"] == "fine-tune-results" and result["filename"].endswith("metrics.csv")
    content = client.get(f"/v1/files/{job['result_files'][0]}/content", headers=alice.headers).content
    assert content == (run / "metrics.csv").read_bytes()
    assert_error(client.get(f"/v1/fine_tuning/jobs/{job_id}/artifacts/nothing.bin", headers=alice.headers), 404,
                 "artifact_not_found")
    assert_error(client.get(f"/v1/fine_tuning/jobs/{job_id}/artifacts/metrics.csv", headers=bob.headers), 404)
    assert_error(client.get(f"/v1/files/{job['result_files'][0]}/content", headers=bob.headers), 404)


def test_no_outputs_before_training(client, alice):
    job = job_ok(client, alice)
    assert client.get(f"/v1/fine_tuning/jobs/{job['id']}/artifacts", headers=alice.headers).json()["data"] == []
    page = client.get(f"/v1/fine_tuning/jobs/{job['id']}/checkpoints", headers=alice.headers).json()
    assert page["data"] == [] and page["has_more"] is False


def test_run_files_follow_the_trainers_layout(tmp_path):
    from lcsb_core.run_files import RunFiles
    from lcsb_service.artifacts import RUN_FILES

    files = RunFiles(tmp_path)
    assert RUN_FILES == {files.history.name: "selection_history", files.metrics_csv.name: "metrics",
                         files.metrics.name: "metrics", files.summary.name: "summary", files.config.name: "config",
                         files.eval_samples.name: "eval_samples"}
    assert list(RUN_FILES) == ["selection_history.jsonl", "metrics.csv", "metrics.jsonl", "summary.json", "config.json",
                               "eval_samples.jsonl"]


@pytest.fixture
def shared_dir():
    """A folder other users can enter (pytest's tmp_path is 0700), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="lcsb-shared-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def test_archives_extract_readable_by_other_users(client, alice, app, tmp_path, shared_dir):
    """The worker's umask and its 0600 weights file do not reach the archive: every member of the
    final adapter and of a checkpoint is 0644 (folders 0755, no owner names); extracted with plain
    tarfile (as `tar xzf` would), another user reads every file."""
    job = job_ok(client, alice)
    run = fake_run(tmp_path, steps=(2,))
    for weights in run.rglob("adapter_model.safetensors"):
        weights.chmod(0o600)
    storage, old_umask = app.state.storage, os.umask(0o077)
    try:
        with app.state.db.session() as s:
            transitions.claim(s, job["id"])
            publish_checkpoint(s, storage, job_id=job["id"], step=2, fine_tuned_model="ft:m::x",
                               folder=run / "checkpoints" / "step-000002")
            publish_run(s, storage, job_id=job["id"], owner_id=alice.owner_id, run_dir=run)
    finally:
        os.umask(old_umask)
    ckpt = client.get(f"/v1/fine_tuning/jobs/{job['id']}/checkpoints", headers=alice.headers).json()["data"][0]
    archives = {"adapter": client.get(f"/v1/fine_tuning/jobs/{job['id']}/artifacts/adapter.tar.gz",
                                      headers=alice.headers).content,
                "step-2": client.get(ckpt["download_url"], headers=alice.headers).content}
    for top, data in archives.items():
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            modes = {m.name: (oct(m.mode), m.uname, m.gname) for m in tar.getmembers()}
            assert modes == {top: ("0o755", "", ""), f"{top}/adapter_config.json": ("0o644", "", ""),
                             f"{top}/adapter_model.safetensors": ("0o644", "", "")}
            tar.extractall(shared_dir, filter="data")
        files = world_readable_tree(shared_dir / top)
        assert [f.name for f in files] == ["adapter_config.json", "adapter_model.safetensors"]
        for path in files:
            assert read_as_other_user(path) in (path.read_bytes(), None)
