"""DPO jobs (`method.type` dpo) at creation: OpenAI's `method.dpo.hyperparameters` with `beta` resolved
on the job and passed to the trainer's `TrainConfig.dpo`; a file of the other method's format is a 400
naming the file's field in both directions; `beta` out of range, `train_on_inputs`, the other type's
section and a preference file as the source of graded references are 400s naming the field; a DPO job
continues an `ft:` model of a supervised job with its lineage; the worker's config keeps `dpo`."""

from __future__ import annotations

import pytest

from lcsb_core.data.settings import GROUP_BY_LENGTH_DPO
from lcsb_core.training.config import DPO_DEFAULT_BETA
from lcsb_core.training.learning_rate import DPO_LEARNING_RATE
from lcsb_service.jobspec import train_config_for
from lcsb_service.models import Job
from tests.api.helpers import (
    SMOL,
    assert_error,
    chat_lines,
    create_job,
    fake_run,
    job_ok,
    preference_lines,
    publish_outputs,
    upload_ok,
)

DPO = {"type": "dpo", "dpo": {"hyperparameters": {"beta": 0.2, "n_epochs": 1, "batch_size": 2}}}


@pytest.fixture
def pairs(client, alice) -> str:
    """A preference file of alice's (12 pairs)."""
    f = upload_ok(client, alice, preference_lines(12))
    assert f["status"] == "processed"
    return f["id"]


def _stored(app, job_id: str) -> Job:
    with app.state.db.session() as s:
        return s.get(Job, job_id)


def test_a_dpo_job_shows_its_method_and_trains_with_beta(app, client, alice, pairs):
    job = job_ok(client, alice, pairs, method={**DPO, "lora": {"rank": 8}, "lcsb": {"schedule": "top", "k": 4}})
    method = job["method"]
    assert method["type"] == "dpo" and "supervised" not in method
    hp = method["dpo"]["hyperparameters"]
    assert (hp["beta"], hp["n_epochs"], hp["batch_size"]) == (0.2, 1, 2)
    assert hp["learning_rate_multiplier"] == 1.0 and hp["learning_rate"] == DPO_LEARNING_RATE  # DPO's own rate
    assert method["lora"]["rank"] == 8 and method["lcsb"]["layers_per_step"] == 4  # LCSB and LoRA apply to DPO
    assert job["progress"]["total_steps"] == 6
    assert method["group_by_length"] is GROUP_BY_LENGTH_DPO is True  # DPO's measured default
    off = job_ok(client, alice, pairs, method={**DPO, "group_by_length": False})
    assert off["method"]["group_by_length"] is False  # a given value is kept
    fetched = client.get(f"/v1/fine_tuning/jobs/{job['id']}", headers=alice.headers).json()
    assert fetched["method"]["type"] == "dpo" and fetched["method"]["dpo"] == method["dpo"]
    assert _stored(app, job["id"]).train_config["dpo"] == {"beta": 0.2}
    events = client.get(f"/v1/fine_tuning/jobs/{job['id']}/events", headers=alice.headers).json()["data"]
    assert any("format preference" in e["message"] for e in events)


@pytest.mark.parametrize("hp", [{}, {"beta": "auto"}, None])
def test_beta_auto_is_the_trainers_default(client, alice, pairs, hp):
    method = {"type": "dpo"} if hp is None else {"type": "dpo", "dpo": {"hyperparameters": hp}}
    job = job_ok(client, alice, pairs, method=method)
    assert job["method"]["dpo"]["hyperparameters"]["beta"] == DPO_DEFAULT_BETA


def test_top_level_hyperparameters_apply_to_a_dpo_job(client, alice, pairs):
    job = job_ok(client, alice, pairs, method={"type": "dpo"}, hyperparameters={"n_epochs": 2})
    assert job["method"]["dpo"]["hyperparameters"]["n_epochs"] == 2 and job["hyperparameters"]["n_epochs"] == 2
    err = assert_error(create_job(client, alice, pairs, method=DPO, hyperparameters={"n_epochs": 2}), 400,
                       param="hyperparameters")
    assert "method.dpo" in err["message"]


def test_supervised_jobs_are_unchanged(client, alice):
    job = job_ok(client, alice, method={"supervised": {"hyperparameters": {"n_epochs": 1}}})
    assert job["method"]["type"] == "supervised" and "dpo" not in job["method"]
    assert "beta" not in job["method"]["supervised"]["hyperparameters"]


def test_a_file_of_the_other_methods_format_is_400_naming_it(client, alice, pairs):
    chat = upload_ok(client, alice)["id"]
    err = assert_error(create_job(client, alice, chat, method=DPO), 400, "invalid_file", "training_file")
    assert err["message"] == (f"training_file: {chat} is chat data; a dpo job needs preference pairs "
                              '({"input", "preferred_output", "non_preferred_output"} lines)')
    err = assert_error(create_job(client, alice, pairs), 400, "invalid_file", "training_file")
    assert err["message"].startswith(f"training_file: {pairs} is preference pairs; a supervised job needs chat, ")
    assert "method.type dpo" in err["message"]
    err = assert_error(create_job(client, alice, pairs, validation_file=chat, method=DPO), 400, "invalid_file",
                       "validation_file")
    assert f"{chat} is chat data" in err["message"]
    assert_error(create_job(client, alice, chat, validation_file=pairs), 400, "invalid_file", "validation_file")
    for body, param in (({"training_file": chat, "method": DPO}, "training_file"),
                        ({"training_file": pairs}, "training_file"),
                        ({"training_file": pairs, "validation_file": chat, "method": DPO}, "validation_file")):
        r = client.post("/v1/fine_tuning/jobs/estimate", headers=alice.headers, json={"model": SMOL, **body})
        assert_error(r, 400, "invalid_file", param)


@pytest.mark.parametrize("beta", [0, -0.5, 10.5, 1e9])
def test_beta_out_of_range_is_400(client, alice, pairs, beta):
    err = assert_error(create_job(client, alice, pairs, method={"type": "dpo", "dpo": {"hyperparameters": {
        "beta": beta}}}), 400, "invalid_hyperparameters", "method.dpo.hyperparameters.beta")
    assert err["message"].startswith("method.dpo.hyperparameters.beta: ")


@pytest.mark.parametrize("beta", ["0.2", True, "high"])
def test_beta_of_another_type_is_400(client, alice, pairs, beta):
    r = create_job(client, alice, pairs, method={"type": "dpo", "dpo": {"hyperparameters": {"beta": beta}}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "method.dpo.hyperparameters.beta", r.text


def test_beta_at_the_bound_is_accepted(client, alice, pairs):
    job = job_ok(client, alice, pairs, method={"type": "dpo", "dpo": {"hyperparameters": {"beta": 10}}})
    assert job["method"]["dpo"]["hyperparameters"]["beta"] == 10


def test_train_on_inputs_with_dpo_is_400(client, alice, pairs):
    err = assert_error(create_job(client, alice, pairs, method={**DPO, "train_on_inputs": True}), 400,
                       param="method.train_on_inputs")
    assert "answers" in err["message"]
    job_ok(client, alice, pairs, method={**DPO, "train_on_inputs": False})


def test_the_other_types_section_is_400_naming_it(client, alice, pairs):
    assert_error(create_job(client, alice, pairs, method={"type": "dpo", "supervised": {"hyperparameters": {
        "n_epochs": 1}}}), 400, param="method.supervised")
    assert_error(create_job(client, alice, pairs, method={"dpo": {"hyperparameters": {"beta": 0.2}}}), 400,
                 param="method.dpo")
    assert_error(create_job(client, alice, pairs, method={"type": "supervised", "dpo": {}}), 400, param="method.dpo")
    assert_error(create_job(client, alice, pairs, method={"type": "reinforcement"}), 400, param="method.type")


def test_graded_eval_of_a_dpo_job_needs_an_eval_file(client, alice, pairs):
    valid = upload_ok(client, alice, preference_lines(12))["id"]
    graded = {"graders": [{"type": "numeric"}]}
    err = assert_error(create_job(client, alice, pairs, validation_file=valid, method={**DPO, "eval": graded}),
                       400, "invalid_file", "method.eval")
    assert "preference pairs" in err["message"] and "eval_file" in err["message"]
    eval_file = upload_ok(client, alice, chat_lines(12))["id"]
    job = job_ok(client, alice, pairs, validation_file=valid, method={**DPO, "eval": {**graded,
                                                                                       "eval_file": eval_file}})
    assert job["method"]["eval"]["eval_file"] == eval_file and job["method"]["type"] == "dpo"


def test_a_dpo_job_continues_a_supervised_model(app, client, alice, pairs, tmp_path):
    sft = job_ok(client, alice, suffix="sft", method={"lora": {"rank": 8}}, hyperparameters={"n_epochs": 1})
    name = publish_outputs(app, sft, alice.name, fake_run(tmp_path), finish=True)
    child = job_ok(client, alice, pairs, model=name, method=DPO)
    assert child["model"] == SMOL and child["method"]["type"] == "dpo"
    assert (child["parent_model"], child["parent_job_id"]) == (name, sft["id"])
    assert child["method"]["lora"]["rank"] == 8
    stored = _stored(app, child["id"]).train_config
    assert stored["init_adapter"] == f"jobs/{sft['id']}/adapter.tar.gz" and stored["dpo"] == {"beta": 0.2}
    r = client.post("/v1/fine_tuning/jobs/estimate", headers=alice.headers,
                    json={"model": name, "training_file": pairs, "method": DPO})
    assert r.status_code == 200, r.text
    assert r.json()["method"]["type"] == "dpo" and r.json()["method"]["dpo"]["hyperparameters"]["beta"] == 0.2


def test_the_workers_config_of_a_stored_dpo_job_keeps_dpo(app, client, alice, pairs, tmp_path):
    job = job_ok(client, alice, pairs, method=DPO)
    cfg = train_config_for(_stored(app, job["id"]).train_config, model_path=str(tmp_path / "model"),
                           train_path=str(tmp_path / "train.jsonl"), validation_path=None,
                           output_dir=str(tmp_path / "run"), device="cpu")
    assert cfg.dpo is not None and cfg.dpo.beta == 0.2 and cfg.data.group_by_length is True
    plain = job_ok(client, alice, hyperparameters={"n_epochs": 1})
    cfg = train_config_for(_stored(app, plain["id"]).train_config, model_path=str(tmp_path / "model"),
                           train_path=str(tmp_path / "train.jsonl"), validation_path=None,
                           output_dir=str(tmp_path / "run"), device="cpu")
    assert cfg.dpo is None and cfg.data.group_by_length is False


def test_the_estimate_of_a_dpo_job(client, alice, pairs):
    r = client.post("/v1/fine_tuning/jobs/estimate", headers=alice.headers,
                    json={"model": SMOL, "training_file": pairs, "method": DPO})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["method"]["type"] == "dpo" and body["method"]["dpo"]["hyperparameters"]["beta"] == 0.2
    assert body["total_steps"] == 6 and body["memory_estimate"]["total_mib"] > 0
