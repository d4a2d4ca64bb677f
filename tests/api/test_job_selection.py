"""`method.select_checkpoint` and `method.early_stopping` at job creation: the resolved method shows them,
and a setting that cannot take effect is a 400 naming the request's field (no evaluations to compare, a
grader the job does not have, a patience the run is too short for, bad values)."""

from __future__ import annotations

import pytest

from tests.api.helpers import assert_error, create_job, job_ok, upload_ok

LONG = {"hyperparameters": {"n_epochs": 4}}  # 12 examples in batches of 4: 12 steps


def test_the_resolved_method_shows_selection_and_early_stopping(client, alice):
    f, v = upload_ok(client, alice)["id"], upload_ok(client, alice)["id"]
    job = job_ok(client, alice, f, validation_file=v, **LONG,
                 method={"eval_every": 2, "select_checkpoint": {"mode": "best", "metric": "eval_token_accuracy"},
                         "early_stopping": {"patience": 2, "min_delta": 0}})
    assert job["method"]["select_checkpoint"] == {"mode": "best", "metric": "eval_token_accuracy"}
    assert job["method"]["early_stopping"] == {"metric": "eval_loss", "patience": 2, "min_delta": 0.0}
    assert job["result"] is None and job["progress"]["total_steps"] == 12
    plain = job_ok(client, alice, f)
    assert plain["method"]["select_checkpoint"] == {"mode": "last", "metric": "eval_loss"}
    assert plain["method"]["early_stopping"] is None


NO_EVAL = "evaluations during the run, but none run before its end: give validation_file and set method.eval_every > 0"


@pytest.mark.parametrize("body, validation, param, message", [
    ({"method": {"select_checkpoint": {"mode": "best"}}}, False, "method.select_checkpoint.mode",
     f"method.select_checkpoint.mode: is best, which compares {NO_EVAL}"),
    ({"method": {"select_checkpoint": {"mode": "best"}}}, True, "method.select_checkpoint.mode",
     f"method.select_checkpoint.mode: is best, which compares {NO_EVAL}"),
    ({"method": {"early_stopping": {"patience": 1}}}, True, "method.early_stopping",
     f"method.early_stopping: compares {NO_EVAL}"),
    ({"method": {"eval_every": 2, "select_checkpoint": {"mode": "best", "metric": "grader/exact_match"}}}, True,
     "method.select_checkpoint.metric", "method.select_checkpoint.metric: names 'grader/exact_match', but the job "
     "has no graded evaluation; use one of eval_loss, eval_token_accuracy"),
    ({"method": {"eval_every": 2, "early_stopping": {"metric": "grader/numeric"}}}, True,
     "method.early_stopping.metric", "method.early_stopping.metric: names 'grader/numeric', but the job has no "
     "graded evaluation; use one of eval_loss, eval_token_accuracy"),
    ({"method": {"eval_every": 2, "select_checkpoint": {"mode": "best", "metric": "accuracy"}}}, True,
     "method.select_checkpoint.metric", "method.select_checkpoint.metric: must be one of eval_loss, "
     "eval_token_accuracy or grader/<grader name>, got 'accuracy'"),
    ({"method": {"eval_every": 12, "select_checkpoint": {"mode": "best"}}}, True, "method.select_checkpoint.mode",
     "method.select_checkpoint.mode: best needs two evaluations or more to choose from, but method.eval_every 12 "
     "gives one in the run's 12 optimizer steps"),
    ({"method": {"eval_every": 4, "early_stopping": {"patience": 2}}}, True, "method.early_stopping.patience",
     "method.early_stopping.patience: is 2: stopping early needs 3 evaluations, every method.eval_every 4 steps, "
     "before the end of the run's 12 optimizer steps"),
])
def test_settings_that_cannot_take_effect_are_400(client, alice, body, validation, param, message):
    f = upload_ok(client, alice)["id"]
    extra = {"validation_file": upload_ok(client, alice)["id"]} if validation else {}
    err = assert_error(create_job(client, alice, f, **LONG, **extra, **body), 400, "invalid_hyperparameters", param)
    assert err["message"].startswith(message), err["message"]


@pytest.mark.parametrize("method, param", [
    ({"select_checkpoint": {"mode": "first"}}, "method.select_checkpoint.mode"),
    ({"select_checkpoint": {"mode": "best", "by": "eval_loss"}}, "method.select_checkpoint.by"),
    ({"early_stopping": {"patience": 0}}, "method.early_stopping.patience"),
    ({"early_stopping": {"patience": "2"}}, "method.early_stopping.patience"),
    ({"early_stopping": {"min_delta": -0.5}}, "method.early_stopping.min_delta"),
    ({"early_stopping": {"metric": ""}}, "method.early_stopping.metric"),
    ({"select_checkpoint": "best"}, "method.select_checkpoint"),
])
def test_bad_values_are_400_naming_the_field(client, alice, method, param):
    f, v = upload_ok(client, alice)["id"], upload_ok(client, alice)["id"]
    r = create_job(client, alice, f, validation_file=v, **LONG, method={"eval_every": 2, **method})
    err = assert_error(r, 400, param=param)
    assert err["message"].startswith(param), err["message"]
