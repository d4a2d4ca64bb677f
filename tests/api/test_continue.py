"""Continuing from a model (`lcsb_service.lineage`): a job whose `model` is one of the caller's `ft:`
models or checkpoints trains the parent's base, shape and quantization from its adapter and shows its
lineage; another owner's or an unknown model is 404, a job that has not succeeded 409, another shape 400.
And `n_epochs` "auto" (OpenAI's rule, `hyperparameters.auto_epochs`), resolved at creation."""

from __future__ import annotations

import pytest

from lcsb_service.hyperparameters import auto_epochs
from lcsb_service.jobspec import fine_tuned_model_name
from lcsb_service.models import Job
from tests.api.helpers import (
    SMOL,
    assert_error,
    chat_lines,
    create_job,
    fake_run,
    job_ok,
    publish_outputs,
    upload_ok,
)

LORA = {"rank": 8, "alpha": 4.0, "target_modules": ["q_proj", "v_proj"]}


@pytest.fixture
def parent(app, client, alice, tmp_path) -> dict:
    """A succeeded job of alice's (LoRA rank 8, alpha 4 on q/v, bf16) with checkpoints at 2 and 4."""
    job = job_ok(client, alice, suffix="p", method={"lora": LORA, "quantization": "bf16"},
                 hyperparameters={"n_epochs": 1})
    name = publish_outputs(app, job, alice.name, fake_run(tmp_path), finish=True)
    return {"job": job, "name": name}


def _stored(app, job_id: str) -> Job:
    with app.state.db.session() as s:
        return s.get(Job, job_id)


def test_a_job_continued_from_a_model_shows_its_lineage(app, client, alice, parent):
    child = job_ok(client, alice, model=parent["name"], hyperparameters={"n_epochs": 1})
    assert child["model"] == SMOL  # the root base, not the ft: id
    assert child["parent_model"] == parent["name"] and child["parent_job_id"] == parent["job"]["id"]
    lora = child["method"]["lora"]
    assert (lora["rank"], lora["alpha"], sorted(lora["target_modules"])) == (8, 4.0, ["q_proj", "v_proj"])
    assert child["method"]["quantization"] == "bf16"
    assert _stored(app, child["id"]).train_config["init_adapter"] == f"jobs/{parent['job']['id']}/adapter.tar.gz"
    fetched = client.get(f"/v1/fine_tuning/jobs/{child['id']}", headers=alice.headers).json()
    assert (fetched["parent_model"], fetched["parent_job_id"]) == (parent["name"], parent["job"]["id"])
    events = client.get(f"/v1/fine_tuning/jobs/{child['id']}/events", headers=alice.headers).json()["data"]
    line = next(e for e in events if e["message"].startswith("Continued from"))
    assert parent["name"] in line["message"] and "final adapter" in line["message"]
    assert line["data"]["parent_job_id"] == parent["job"]["id"] and line["data"]["parent_step"] is None
    # a model trained from a base model has no parent
    assert parent["job"]["parent_model"] is None and parent["job"]["parent_job_id"] is None
    # the continued job's own model names the base, so it can be continued in turn
    assert fine_tuned_model_name(SMOL, alice.name, None, child["id"]).startswith(f"ft:{SMOL}:")


def test_a_checkpoint_id_continues_from_that_checkpoint(app, client, alice, parent):
    ckpt = f"{parent['name']}:ckpt-step-2"
    child = job_ok(client, alice, model=ckpt, method={"lora": {"rank": 8, "dropout": 0.1}})  # same rank: fine
    assert child["parent_model"] == ckpt and child["method"]["lora"]["dropout"] == 0.1
    key = _stored(app, child["id"]).train_config["init_adapter"]
    assert key == f"jobs/{parent['job']['id']}/checkpoints/step-000002/adapter.tar.gz"
    r = client.post("/v1/fine_tuning/jobs/estimate", headers=alice.headers,
                    json={"model": ckpt, "training_file": child["training_file"]})
    assert r.status_code == 200 and r.json()["model"] == SMOL and r.json()["method"]["lora"]["rank"] == 8


def test_another_owners_or_an_unknown_model_is_404(client, alice, bob, parent):
    bob_file = upload_ok(client, bob)["id"]
    for model in (parent["name"], f"{parent['name']}:ckpt-step-2"):
        assert_error(create_job(client, bob, bob_file, model=model), 404, "model_not_found", "model")
    alice_file = upload_ok(client, alice)["id"]
    for model in (f"{parent['name']}:ckpt-step-3", parent["name"] + "x", f"ft:{SMOL}:{alice.name}:p:ftjob-nope",
                  f"ft:{SMOL}:someone-else:p:{parent['job']['id']}", "ft:nothing"):
        assert_error(create_job(client, alice, alice_file, model=model), 404, "model_not_found", "model")


def test_a_job_that_has_not_succeeded_is_409(app, client, alice, tmp_path):
    running = job_ok(client, alice, hyperparameters={"n_epochs": 1})
    name = publish_outputs(app, running, alice.name, fake_run(tmp_path), finish=False)
    for model in (name, f"{name}:ckpt-step-4"):  # its published checkpoints too
        err = assert_error(create_job(client, alice, running["training_file"], model=model), 409, "model_not_ready",
                           "model")
        assert "running" in err["message"]


@pytest.mark.parametrize(("method", "param"), [
    ({"lora": {"rank": 16}}, "method.lora.rank"),
    ({"lora": {"alpha": 32}}, "method.lora.alpha"),
    ({"lora": {"target_modules": ["q_proj", "k_proj"]}}, "method.lora.target_modules"),
    ({"quantization": "nf4"}, "method.quantization"),
])
def test_another_lora_shape_or_quantization_is_400_naming_the_field(client, alice, parent, method, param):
    r = create_job(client, alice, parent["job"]["training_file"], model=parent["name"], method=method)
    assert_error(r, 400, param=param)
    ok = {"lora": {"target_modules": ["v_proj", "q_proj"]}}  # the same modules in another order are the same shape
    assert create_job(client, alice, parent["job"]["training_file"], model=parent["name"], method=ok).status_code == 200


def test_a_name_with_another_base_is_400(client, alice, parent):
    other = parent["name"].replace(f"ft:{SMOL}:", "ft:Giant-70B:", 1)
    err = assert_error(create_job(client, alice, parent["job"]["training_file"], model=other), 400, param="model")
    assert SMOL in err["message"] and "Giant-70B" in err["message"]


@pytest.mark.parametrize(("examples", "epochs"), [
    (1, 25), (3, 25), (4, 25), (5, 20), (12, 8), (33, 3), (34, 3), (100, 3), (8333, 3), (8334, 2), (12_500, 2),
    (12_501, 1), (25_000, 1), (1_000_000, 1), (None, 1), (0, 1),
])
def test_auto_epochs_follows_openais_rule(settings, examples, epochs):
    """3 epochs; under 34 examples min(25, 100 // n); over 8,333 max(1, 25000 // n); unknown: the setting."""
    assert auto_epochs(examples, settings) == epochs


def test_auto_epochs_is_resolved_and_shown_at_creation(client, alice):
    for n, expected in ((12, 8), (40, 3)):
        file_id = upload_ok(client, alice, chat_lines(n))["id"]
        for hp in ({}, {"n_epochs": "auto"}):
            job = job_ok(client, alice, file_id, hyperparameters=hp, method={"lcsb": {"schedule": "full"}})
            assert job["hyperparameters"]["n_epochs"] == expected
            assert job["method"]["supervised"]["hyperparameters"]["n_epochs"] == expected
            assert job["progress"]["total_steps"] == -(-n // 4) * expected  # batch size 4
            events = client.get(f"/v1/fine_tuning/jobs/{job['id']}/events", headers=alice.headers).json()["data"]
            queued = next(e for e in events if e["message"].startswith("Fine-tuning job queued"))
            assert f"{expected} epoch(s) (auto)" in queued["message"]
            assert queued["data"]["n_epochs"] == expected and queued["data"]["n_epochs_auto"] is True
    fixed = job_ok(client, alice, file_id, hyperparameters={"n_epochs": 2})
    assert fixed["hyperparameters"]["n_epochs"] == 2
