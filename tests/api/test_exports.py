"""Job exports through the API (`/v1/fine_tuning/jobs/{id}/exports`): the request checks (404 for another
owner's job, 400 naming an unknown format or saying what a format cannot hold, 404 for a missing
checkpoint, 409 for a job that has not succeeded), the queued export sent to the export queue, and the
worker's export task (`worker.export.run.run_export`, called in-process) making real GGUF files for
the shipped SmolLM2 GGUF from a published PEFT adapter, then listed and downloaded."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from safetensors.numpy import save_file
from sqlalchemy import update

from lcsb_service import transitions
from lcsb_service.artifacts import publish_checkpoint, publish_run
from lcsb_service.models import Job
from tests.api.helpers import assert_error, fake_run, job_ok


def real_adapter(folder, rank: int = 4) -> None:
    """A PEFT LoRA adapter for SmolLM2-135M on q_proj and v_proj of every layer (B non-zero)."""
    rng = np.random.default_rng(0)
    tensors = {}
    for i in range(30):
        for proj, out_dim in (("q_proj", 576), ("v_proj", 192)):
            prefix = f"base_model.model.model.layers.{i}.self_attn.{proj}"
            tensors[prefix + ".lora_A.weight"] = rng.normal(0, 0.05, (rank, 576)).astype(np.float32)
            tensors[prefix + ".lora_B.weight"] = rng.normal(0, 0.01, (out_dim, rank)).astype(np.float32)
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    (folder / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "r": rank, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"], "bias": "none"}))


@pytest.fixture
def trained(client, alice, app, tmp_path) -> dict:
    return succeeded_job(client, alice, app, tmp_path)


def succeeded_job(client, alice, app, tmp_path) -> dict:
    """A succeeded SmolLM2 chat job with a checkpoint at step 2 and a real final adapter published."""
    job = job_ok(client, alice)
    run = fake_run(tmp_path, steps=(2,))
    real_adapter(run / "adapter")
    with app.state.db.session() as s:
        transitions.claim(s, job["id"])
        # the worker's data check stores one report per request field (lcsb_service.job_records)
        report = {"training_file": {"format": "chat", "file_id": "file-x"}}
        s.execute(update(Job).where(Job.id == job["id"]).values(data_report=report))
    with app.state.db.session() as s:
        publish_checkpoint(s, app.state.storage, job_id=job["id"], step=2, fine_tuned_model="ft:x",
                           folder=run / "checkpoints" / "step-000002")
        publish_run(s, app.state.storage, job_id=job["id"], owner_id=alice.owner_id, run_dir=run)
        transitions.finish(s, job["id"], fine_tuned_model="ft:x")
    return job


def url(job_id: str) -> str:
    return f"/v1/fine_tuning/jobs/{job_id}/exports"


def test_request_checks(client, alice, bob, app, trained):
    job_id = trained["id"]
    assert_error(client.post(url(job_id), headers=bob.headers, json={}), 404, "job_not_found")
    r = assert_error(client.post(url(job_id), headers=alice.headers, json={"formats": ["adapter", "onnx"]}),
                     400, "invalid_format", "formats")
    assert "'onnx'" in r["message"]
    assert_error(client.post(url(job_id), headers=alice.headers, json={"checkpoint_step": 3}),
                 404, "checkpoint_not_found", "checkpoint_step")
    queued = job_ok(client, alice)
    r = assert_error(client.post(url(queued["id"]), headers=alice.headers, json={}), 409, "job_not_succeeded")
    assert "queued" in r["message"]
    with app.state.db.session() as s:
        s.execute(update(Job).where(Job.id == job_id).values(
            train_config={"lora": {"rank": 8, "alpha": 16, "target_modules": ["q_proj", "lm_head"]}}))
    r = assert_error(client.post(url(job_id), headers=alice.headers, json={}), 400, "unsupported_export", "formats")
    assert "lm_head" in r["message"] and "ties" in r["message"]
    assert client.get(url(job_id), headers=alice.headers).json()["data"] == []


def test_export_is_queued_made_by_the_worker_task_and_downloaded(client, alice, bob, app, trained):
    from worker.context import WorkerContext
    from worker.export.run import run_export

    job_id = trained["id"]
    r = client.post(url(job_id), headers=alice.headers, json={"formats": ["adapter", "merged-q8_0"]})
    assert r.status_code == 200, r.text
    export = r.json()
    assert export["status"] == "queued" and export["formats"] == ["adapter", "merged-q8_0"]
    assert ("lcsb.run_export", export["id"], app.state.settings.export_queue) in app.state.enqueuer.sent
    ctx = WorkerContext(settings=app.state.settings, db=app.state.db, storage=app.state.storage, app=None)
    assert run_export(ctx, export["id"]) == "succeeded"
    assert run_export(ctx, export["id"]) == "skipped"  # a repeated delivery
    got = client.get(f"{url(job_id)}/{export['id']}", headers=alice.headers).json()
    assert got["status"] == "succeeded" and got["error"] is None
    files = {f["name"]: f for f in got["files"]}
    assert set(files) == {"adapter.gguf", "merged-q8_0.gguf", "Modelfile", "README.md", "manifest.json"}
    assert 0.9 < files["merged-q8_0.gguf"]["effect_kept"] < 1.1 and files["adapter.gguf"]["effect_kept"] is None
    assert got["manifest"]["lora"]["targets"] == ["q_proj", "v_proj"] and got["manifest"]["data_format"] == "chat"
    body = client.get(files["adapter.gguf"]["download_url"], headers=alice.headers)
    assert body.status_code == 200 and body.content[:4] == b"GGUF"
    assert hashlib.sha256(body.content).hexdigest() == files["adapter.gguf"]["sha256"]
    modelfile = client.get(files["Modelfile"]["download_url"], headers=alice.headers).text
    assert modelfile.startswith("FROM ./merged-q8_0.gguf\n") and 'PARAMETER stop "<|im_end|>"' in modelfile
    assert_error(client.get(files["Modelfile"]["download_url"], headers=bob.headers), 404, "job_not_found")
    assert_error(client.get(f"{url(job_id)}/{export['id']}/files/nope.gguf", headers=alice.headers), 404,
                 "file_not_found")
    listed = client.get(url(job_id), headers=alice.headers).json()["data"]
    assert [e["id"] for e in listed] == [export["id"]]


def test_checkpoint_export_of_an_unusable_adapter_fails_with_a_message(client, alice, app, trained):
    """The step-2 checkpoint of the fake run holds no real weights: the export fails and says so."""
    from worker.context import WorkerContext
    from worker.export.run import run_export

    export = client.post(url(trained["id"]), headers=alice.headers, json={"checkpoint_step": 2}).json()
    assert export["checkpoint_step"] == 2
    ctx = WorkerContext(settings=app.state.settings, db=app.state.db, storage=app.state.storage, app=None)
    assert run_export(ctx, export["id"]) == "failed"
    got = client.get(f"{url(trained['id'])}/{export['id']}", headers=alice.headers).json()
    assert got["status"] == "failed" and got["files"] == [] and got["error"]["code"] == "adapter_corrupt"
    assert got["error"]["message"].startswith("The adapter of checkpoint step 2 cannot be read as a PEFT LoRA "
                                              "adapter: adapter_model.safetensors is not a readable safetensors")
    assert "/" not in got["error"]["message"]  # no path


def test_the_training_files_format_is_read_from_the_per_field_report():
    """Regression (a fresh-user run): the export worker read a flat `data_report["format"]`, which a real
    job never has, so every export of a real job failed "no ... data format to export"."""
    from lcsb_service.job_records import training_data_format

    assert training_data_format({"training_file": {"format": "chat"}, "validation_file": {"format": "text"}}) == "chat"
    assert training_data_format({"format": "chat"}) is None
    assert training_data_format(None) is None
