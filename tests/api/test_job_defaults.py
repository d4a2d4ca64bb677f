"""One home for every default: the request schema leaves training settings unset (None), its
descriptions read the trainer's defaults, and a job created without them gets `TrainConfig`'s."""

from __future__ import annotations

from lcsb_core.data.settings import DataSettings
from lcsb_core.training.config import LoraSettings, ModelSettings, OptimSettings, TrainConfig
from lcsb_core.training.default_schedule import choose_auto
from lcsb_core.training.learning_rate import auto_warmup_steps, default_learning_rate
from lcsb_core.training.schedules import DEFAULT_FRACTION, DEFAULT_FULL_EVERY, LCSBSettings
from lcsb_service.models import Job
from lcsb_service.status import JobStatus
from tests.api.helpers import job_ok


def test_a_bare_job_gets_the_trainers_defaults(client, alice):
    job = job_ok(client, alice)
    m, hp = job["method"], job["hyperparameters"]
    total = job["progress"]["total_steps"]
    assert m["lora"] == {"rank": LoraSettings.rank, "alpha": LoraSettings.alpha, "dropout": LoraSettings.dropout,
                         "target_modules": list(LoraSettings.target_modules)} == {
        "rank": 16, "alpha": 32.0, "dropout": 0.0,
        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}
    chosen = choose_auto(job["model"], total)
    assert (m["quantization"], m["lcsb"]["schedule"], m["lcsb"]["fraction"], m["lcsb"]["momentum_for_skipped"],
            m["lcsb"]["gradient_checkpointing"]) == (ModelSettings.quantization, chosen.schedule,
                                                     DEFAULT_FRACTION, LCSBSettings.momentum_for_skipped, False)
    assert m["lcsb"]["auto"] == chosen.to_dict()  # what auto chose and why
    assert DEFAULT_FRACTION == 0.25
    assert (m["max_seq_len"], m["train_on_inputs"], m["on_truncation"], m["eval_every"], m["save_every"]) == (
        DataSettings.max_seq_len, False, DataSettings.on_truncation, TrainConfig.eval_every, 0)
    assert m["group_by_length"] is False and DataSettings.group_by_length is None  # None: by the method type
    assert (hp["weight_decay"], hp["lr_schedule"], hp["batch_size"]) == (
        OptimSettings.weight_decay, OptimSettings.lr_schedule, TrainConfig.batch_size) == (0.01, "linear", 4)
    # the learning rate and warmup by the measured rule (issue 30), resolved and stated in the job object
    assert (hp["learning_rate"], hp["learning_rate_multiplier"], hp["warmup_steps"]) == (
        default_learning_rate(m["lcsb"]["schedule"]), 1.0, auto_warmup_steps(total)) == (
        8e-4, 1.0, min(5, total // 4))
    assert m["supervised"]["hyperparameters"]["learning_rate"] == 8e-4
    assert m["stop_on_divergence"] is False
    assert m["eval_at_start"] is TrainConfig.eval_at_start is True


def test_given_values_replace_the_defaults(client, alice):
    job = job_ok(client, alice, hyperparameters={"weight_decay": 0.0, "lr_schedule": "cosine"},
                 method={"lora": {"rank": 8}, "train_on_inputs": True, "quantization": "fp32",
                         "group_by_length": True})
    assert (job["hyperparameters"]["weight_decay"], job["hyperparameters"]["lr_schedule"]) == (0.0, "cosine")
    assert (job["method"]["lora"]["rank"], job["method"]["lora"]["alpha"]) == (8, LoraSettings.alpha)
    assert (job["method"]["train_on_inputs"], job["method"]["quantization"]) == (True, "fp32")
    assert job["method"]["group_by_length"] is True


def test_schema_defaults_are_none_and_describe_the_trainers(client):
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    lora, method = schemas["LoraMethod"]["properties"], schemas["Method"]["properties"]
    assert all(p.get("default") is None for p in lora.values())
    assert lora["rank"]["description"] == f"LoRA rank r (default {LoraSettings.rank})" == "LoRA rank r (default 16)"
    for name in ("lora", "lcsb", "quantization", "max_seq_len", "train_on_inputs", "eval_every", "save_every",
                 "eval_at_start", "group_by_length"):
        assert method[name].get("default") is None, name
    assert f"(default {DataSettings.max_seq_len}," in method["max_seq_len"]["description"]
    lcsb = schemas["LCSBMethod"]["properties"]
    assert all(p.get("default") is None for p in lcsb.values())
    assert ("(default auto: chosen per job, the fastest schedule measured to keep 95 % of full backprop's gain: "
            "on SmolLM2-135M, jobs of 32 steps or more train all layers for 4 steps, then tail when the lower layers "
            "carry little of the gradient; otherwise full backprop, or split when full backprop would not fit in "
            "memory; the job object's lcsb.auto states the choice and why)") in lcsb["schedule"]["description"]
    assert lcsb["schedule"]["anyOf"][0]["enum"][0] == LCSBSettings.schedule == "auto"
    assert "(default 0.25)" in lcsb["fraction"]["description"]
    assert f"(default {DEFAULT_FULL_EVERY})" in lcsb["full_every"]["description"]
    assert "(default true); it runs on the base model after the first step" in method["eval_at_start"]["description"]
    assert schemas["JobObject"]["properties"]["status"]["$ref"].endswith("/JobStatus")
    assert schemas["JobStatus"]["enum"] == [s.value for s in JobStatus] == [
        "queued", "running", "succeeded", "failed", "cancelled"]


def test_eval_at_start_false_reaches_the_trainer_config(client, alice, app):
    job = job_ok(client, alice, method={"eval_at_start": False})
    assert job["method"]["eval_at_start"] is False
    with app.state.db.session() as s:
        stored = s.get(Job, job["id"]).train_config
    assert stored["eval_at_start"] is False and TrainConfig.from_dict(stored).eval_at_start is False
    r = client.post("/v1/fine_tuning/jobs", headers=alice.headers,
                    json={"model": job["model"], "training_file": job["training_file"], "method": {"eval_at_start": 0}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "method.eval_at_start"
