"""Job creation checks every rule the trainer can check without the model, and answers 400 naming the
request's fields: cross-field rules (periodic eval needs a validation file; eval/save/warmup within
max_steps), strict types for every numeric and boolean field (a string "2" is not 2), the truncation
policy."""

from __future__ import annotations

import pytest

from tests.api.helpers import assert_error, chat_lines, create_job, job_ok, upload_ok


def test_periodic_eval_without_a_validation_file(client, alice):
    f = upload_ok(client, alice)
    err = assert_error(create_job(client, alice, f["id"], method={"eval_every": 2}), 400,
                       "invalid_hyperparameters", "method.eval_every")
    assert err["message"] == ("method.eval_every: is 2, but periodic evaluation needs validation_file; give a "
                              "validation file or set method.eval_every to 0")
    job = job_ok(client, alice, f["id"], validation_file=upload_ok(client, alice)["id"], method={"eval_every": 2})
    assert job["method"]["eval_every"] == 2


@pytest.mark.parametrize("body, param, fragment", [  # 12 examples, batch 4: 3 steps an epoch; 2 epochs: 6 > 5
    ({"hyperparameters": {"max_steps": 5, "n_epochs": 2}, "method": {"save_every": 6}}, "method.save_every",
     "is 6, more than hyperparameters.max_steps (5)"),
    ({"hyperparameters": {"max_steps": 5, "n_epochs": 2}, "method": {"eval_every": 6}, "validation": True},
     "method.eval_every", "is 6, more than hyperparameters.max_steps (5)"),
    ({"hyperparameters": {"max_steps": 5, "n_epochs": 2, "warmup_steps": 6}}, "hyperparameters.warmup_steps",
     "is 6, more than hyperparameters.max_steps (5)"),
    ({"hyperparameters": {"max_steps": 2}, "method": {"lcsb": {"schedule": "topfull", "full_every": 4}}},
     "method.lcsb.full_every",
     "is 4, more than hyperparameters.max_steps (2)"),
])
def test_intervals_beyond_max_steps(client, alice, body, param, fragment):
    f = upload_ok(client, alice)
    body = dict(body)  # the parameters are shared by both database backends
    if body.pop("validation", False):
        body["validation_file"] = upload_ok(client, alice)["id"]
    err = assert_error(create_job(client, alice, f["id"], **body), 400, "invalid_hyperparameters", param)
    assert err["message"].startswith(f"{param}: {fragment}: ")


STRICT = [  # (body, param): a value of the wrong JSON type is refused, never coerced
    ({"hyperparameters": {"n_epochs": "2"}}, "hyperparameters.n_epochs"),
    ({"hyperparameters": {"n_epochs": 2.0}}, "hyperparameters.n_epochs"),
    ({"hyperparameters": {"batch_size": "4"}}, "hyperparameters.batch_size"),
    ({"hyperparameters": {"learning_rate_multiplier": "2"}}, "hyperparameters.learning_rate_multiplier"),
    ({"hyperparameters": {"learning_rate": "1e-4"}}, "hyperparameters.learning_rate"),
    ({"hyperparameters": {"max_steps": "10"}}, "hyperparameters.max_steps"),
    ({"hyperparameters": {"warmup_steps": "1"}}, "hyperparameters.warmup_steps"),
    ({"hyperparameters": {"weight_decay": "0.1"}}, "hyperparameters.weight_decay"),
    ({"method": {"supervised": {"hyperparameters": {"n_epochs": "3"}}}}, "method.supervised.hyperparameters.n_epochs"),
    ({"seed": "7"}, "seed"),
    ({"method": {"lora": {"rank": "8"}}}, "method.lora.rank"),
    ({"method": {"lora": {"alpha": "16"}}}, "method.lora.alpha"),
    ({"method": {"lora": {"dropout": "0.1"}}}, "method.lora.dropout"),
    ({"method": {"lcsb": {"k": "4"}}}, "method.lcsb.k"),
    ({"method": {"lcsb": {"fraction": "0.5"}}}, "method.lcsb.fraction"),
    ({"method": {"lcsb": {"momentum_for_skipped": 1}}}, "method.lcsb.momentum_for_skipped"),
    ({"method": {"max_seq_len": "256"}}, "method.max_seq_len"),
    ({"method": {"train_on_inputs": "true"}}, "method.train_on_inputs"),
    ({"method": {"eval_every": "1"}}, "method.eval_every"),
    ({"method": {"save_every": 1.5}}, "method.save_every"),
]


@pytest.mark.parametrize("body, param", STRICT)
def test_numbers_and_booleans_are_strict(client, alice, body, param):
    f = upload_ok(client, alice)
    err = assert_error(create_job(client, alice, f["id"], **body), 400, "invalid_value", param)
    assert err["message"].startswith(f"{param}: ") and ", found " in err["message"]


def test_the_string_in_the_answer_is_named(client, alice):
    f = upload_ok(client, alice)
    err = assert_error(create_job(client, alice, f["id"], hyperparameters={"n_epochs": "2"}), 400)
    assert err["message"] == ("hyperparameters.n_epochs: Input should be 'auto' or a valid "
                              'integer, found string "2"')


def test_a_union_says_input_should_be_once(client, alice):
    f = upload_ok(client, alice)
    err = assert_error(create_job(client, alice, f["id"], hyperparameters={"learning_rate_multiplier": -1}), 400,
                       "invalid_value", "hyperparameters.learning_rate_multiplier")
    assert err["message"] == ("hyperparameters.learning_rate_multiplier: Input should be 'auto' or greater than or "
                              "equal to 0.001, found number -1")


def test_right_types_still_pass(client, alice):
    job = job_ok(client, alice, hyperparameters={"n_epochs": "auto", "learning_rate_multiplier": 2},
                 method={"lora": {"alpha": 16},
                         "lcsb": {"schedule": "topfull", "fraction": 1}})  # an integer where a float is asked
    assert job["hyperparameters"]["learning_rate_multiplier"] == 2 and job["method"]["lora"]["alpha"] == 16


def test_truncation_policy(client, alice):
    assert job_ok(client, alice)["method"]["on_truncation"] == "report"
    assert job_ok(client, alice, method={"on_truncation": "fail"})["method"]["on_truncation"] == "fail"
    f = upload_ok(client, alice)
    assert_error(create_job(client, alice, f["id"], method={"on_truncation": "drop"}), 400, "invalid_value",
                 "method.on_truncation")


def test_chat_data_needs_a_model_with_a_chat_template(client, alice, model_dir):
    folder = model_dir / "NoTemplate-135M"  # SmolLM2's config, a tokenizer without a chat template
    folder.mkdir()
    try:
        for name in ("config.json", "tokenizer.json", "model.safetensors"):
            (folder / name).write_bytes((model_dir / "SmolLM2-135M-Instruct" / name).read_bytes())
        chat = upload_ok(client, alice)
        err = assert_error(create_job(client, alice, chat["id"], model="NoTemplate-135M"), 400, "invalid_file",
                           "training_file")
        assert err["message"].startswith(f"training_file: {chat['id']} is chat data, but the base model's tokenizer "
                                         "(NoTemplate-135M) has no chat template")
        err = assert_error(create_job(client, alice, upload_ok(client, alice, b'{"prompt": "a", "completion": "b"}\n'
                                                                * 12)["id"], model="NoTemplate-135M",
                                      validation_file=chat["id"]), 400, "invalid_file", "validation_file")
        pc = upload_ok(client, alice, b"".join(b'{"prompt": "%d+%d=", "completion": " %d"}\n' % (i, i, 2 * i)
                                               for i in range(12)))
        assert job_ok(client, alice, pc["id"], model="NoTemplate-135M")["model"] == "NoTemplate-135M"
    finally:
        for f in folder.iterdir():
            f.unlink()
        folder.rmdir()


@pytest.mark.parametrize("lcsb, param", [
    ({"schedule": "cyclic", "full_every": 3}, "method.lcsb.full_every"),
    ({"schedule": "top", "k": 4, "full_every": 2}, "method.lcsb.full_every"),
    ({"schedule": "full", "k": 4}, "method.lcsb.k"),
    ({"schedule": "full", "fraction": 0.5}, "method.lcsb.fraction"),
    ({"schedule": "top", "recompute_deep": True}, "method.lcsb.recompute_deep"),
    ({"schedule": "cyclic", "k": 4, "recompute_deep": True}, "method.lcsb.recompute_deep"),
])
def test_schedule_options_the_schedule_does_not_use(client, alice, lcsb, param):
    f = upload_ok(client, alice)
    err = assert_error(create_job(client, alice, f["id"], method={"lcsb": lcsb}), 400, "invalid_hyperparameters", param)
    assert err["message"].startswith(f"{param}: has no effect with schedule '{lcsb['schedule']}'")


@pytest.mark.parametrize("lcsb", [{"schedule": "cyclic", "k": 4}, {"schedule": "topfull", "k": 4, "full_every": 3}])
def test_schedule_options_that_take_effect(client, alice, lcsb):
    assert job_ok(client, alice, method={"lcsb": lcsb})["method"]["lcsb"]["schedule"] == lcsb["schedule"]


RUN = ("the run's 3 optimizer steps (12 training examples in batches of hyperparameters.batch_size 4 for "
       "hyperparameters.n_epochs 1")  # the default upload: 12 examples, batch 4, 1 epoch


@pytest.mark.parametrize("body, param, fragment", [
    ({"method": {"save_every": 4}}, "method.save_every", f"is 4, more than {RUN}): it would never happen"),
    ({"method": {"eval_every": 5}, "validation": True}, "method.eval_every",
     f"is 5, more than {RUN}): it would never happen"),
    ({"hyperparameters": {"warmup_steps": 10}}, "hyperparameters.warmup_steps",
     f"is 10, more than {RUN}): the learning rate would never reach its value"),
    ({"method": {"lcsb": {"schedule": "topfull", "full_every": 4}}}, "method.lcsb.full_every",
     f"is 4, more than {RUN}): no full backward step would run"),
    ({"hyperparameters": {"max_steps": 100}, "method": {"save_every": 50}}, "method.save_every",
     f"is 50, more than {RUN}; hyperparameters.max_steps 100 is not reached): it would never happen"),
])
def test_intervals_beyond_the_runs_real_length(client, alice, body, param, fragment):
    """The epochs end the run before max_steps (or with none): the upload's example count bounds it."""
    f = upload_ok(client, alice)
    body = dict(body)
    body["hyperparameters"] = {"n_epochs": 1, **body.get("hyperparameters", {})}  # not "auto" (8 for 12 examples)
    if body.pop("validation", False):
        body["validation_file"] = upload_ok(client, alice)["id"]
    err = assert_error(create_job(client, alice, f["id"], **body), 400, "invalid_hyperparameters", param)
    assert err["message"] == f"{param}: {fragment}"
    estimate = client.post("/v1/fine_tuning/jobs/estimate", headers=alice.headers,
                           json={"model": "SmolLM2-135M-Instruct", "training_file": f["id"], **body})
    assert_error(estimate, 400, "invalid_hyperparameters", param)


def test_the_real_step_count_is_on_the_job_and_the_estimate(client, alice):
    f = upload_ok(client, alice, chat_lines(13))  # ceil(13 / 4) = 4 batches, the last partial one kept
    body = {"hyperparameters": {"n_epochs": 3},
            "method": {"save_every": 12, "lcsb": {"schedule": "topfull", "full_every": 12}}}
    job = job_ok(client, alice, f["id"], **body)  # 12 steps: every interval fits, at the boundary
    assert job["progress"]["total_steps"] == 12
    estimate = client.post("/v1/fine_tuning/jobs/estimate", headers=alice.headers,
                           json={"model": "SmolLM2-135M-Instruct", "training_file": f["id"], **body})
    assert estimate.status_code == 200 and estimate.json()["total_steps"] == 12
    capped = job_ok(client, alice, f["id"], hyperparameters={"n_epochs": 3, "max_steps": 5})
    assert capped["progress"]["total_steps"] == 5


def test_a_corpus_is_counted_by_the_worker(client, alice):
    """A .txt corpus trains on packed blocks that only the model's tokenizer can count: the job is
    accepted with no step count yet (the worker states it, and warns of a setting it cannot honour)."""
    f = upload_ok(client, alice, b"A line of plain text.\n" * 12, filename="corpus.txt")
    job = job_ok(client, alice, f["id"], method={"save_every": 1000})
    assert job["progress"]["total_steps"] is None
