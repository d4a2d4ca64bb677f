"""A real worker continues a job from a model (tiny Llama with SmolLM2's tokenizer): the child job's
`model` is the parent's `fine_tuned_model`; its first step starts from the parent's adapter (its first
loss is far below a fresh job's on the same first batch, near the parent's last losses), and its adapter
still names the base model, not the parent."""

from __future__ import annotations

import io
import json
import tarfile

import pytest

from tests.worker.conftest import TINY, chat_rows

pytestmark = pytest.mark.worker

JOB_BOUND_S = 120.0
HP = {"learning_rate": 1e-2, "batch_size": 2}


def train_losses(service, job_id: str) -> list[float]:
    return [e["data"]["train_loss"] for e in service.events(job_id)
            if e["type"] == "metrics" and "train_loss" in (e.get("data") or {})]


def adapter_config(service, url: str) -> dict:
    data = service.client.get(url, headers=service.headers).content
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("/adapter_config.json"))
        return json.loads(tar.extractfile(member).read())


def test_a_job_continued_from_a_model_starts_from_its_adapter(make_settings, start_worker, make_service):
    settings = make_settings()
    service = make_service(settings)
    start_worker(settings)
    file_id = service.upload(chat_rows(12))
    parent = service.create_job(file_id, hyperparameters={**HP, "n_epochs": 4}, method={"save_every": 6})  # 24 steps
    fresh = service.create_job(file_id, hyperparameters={**HP, "n_epochs": 1})  # the control: same data, same seed
    for job in (parent, fresh):
        done = service.wait(job["id"], {"succeeded", "failed"}, JOB_BOUND_S)
        assert done["status"] == "succeeded", done["error"]
    parent = service.job(parent["id"])
    child = service.create_job(file_id, model=parent["fine_tuned_model"], hyperparameters={**HP, "n_epochs": 1})
    assert (child["model"], child["parent_model"], child["parent_job_id"]) == (TINY, parent["fine_tuned_model"],
                                                                                 parent["id"])
    done = service.wait(child["id"], {"succeeded", "failed"}, JOB_BOUND_S)
    assert done["status"] == "succeeded", done["error"]

    parent_losses, fresh_losses, child_losses = (train_losses(service, j["id"]) for j in (parent, fresh, child))
    assert len(parent_losses) == 24 and len(fresh_losses) == len(child_losses) == 6
    # the same first batch (seed 1, epoch 0): the child starts where the parent ended (10.45 against the
    # parent's last 10.45 when written), far below a fresh adapter's 10.82 on that batch
    assert abs(child_losses[0] - parent_losses[-1]) < 0.05
    assert fresh_losses[0] - child_losses[0] > 0.25
    assert parent_losses[0] == pytest.approx(fresh_losses[0], rel=1e-6)  # the control is a fresh start

    base = f"/v1/fine_tuning/jobs/{child['id']}"
    config = adapter_config(service, f"{base}/artifacts/adapter.tar.gz")
    assert config["base_model_name_or_path"] == TINY and config["r"] == 2  # the base, not the parent
    events = [e["message"] for e in service.events(child["id"])]
    assert any(m.startswith(f"Continued from {parent['fine_tuned_model']}") for m in events)
    # and a checkpoint of the parent can be continued too (its own step-6 adapter)
    ckpts = service.client.get(f"/v1/fine_tuning/jobs/{parent['id']}/checkpoints", headers=service.headers).json()
    from_ckpt = service.create_job(file_id, model=ckpts["data"][-1]["fine_tuned_model_checkpoint"],
                                   hyperparameters={**HP, "max_steps": 1})
    done = service.wait(from_ckpt["id"], {"succeeded", "failed"}, JOB_BOUND_S)
    assert done["status"] == "succeeded", done["error"]
    first = train_losses(service, from_ckpt["id"])[0]
    assert child_losses[0] < first < fresh_losses[0]  # between: 6 steps trained, not 24
