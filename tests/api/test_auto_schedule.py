"""`lcsb.schedule` auto resolved per job at creation (issue 47): from the model and the planned steps
(`lcsb_core.training.default_schedule.choose_auto`), and from memory: where no worker class holds full backprop's
estimate, `split` instead of a refusal; the job object's `method.lcsb.auto` states the choice and why."""

from __future__ import annotations

from lcsb_core.training.default_schedule import MIN_SWITCH_STEPS, choose_auto
from tests.api.helpers import SMOL, assert_error, create_job, job_ok, upload_ok


def test_the_job_length_decides_between_the_switch_and_full_backprop(client, alice):
    long = job_ok(client, alice, hyperparameters={"max_steps": MIN_SWITCH_STEPS, "n_epochs": 100})
    lcsb = long["method"]["lcsb"]
    assert long["progress"]["total_steps"] == MIN_SWITCH_STEPS
    assert (lcsb["schedule"], lcsb["auto"]) == ("auto", choose_auto(SMOL, MIN_SWITCH_STEPS).to_dict())
    assert (lcsb["auto"]["probe_steps"], lcsb["auto"]["then"]) == (4, "tail")
    assert lcsb["layers_per_step"] == 8 and lcsb["exact_gradient"] is True
    short = job_ok(client, alice, hyperparameters={"max_steps": MIN_SWITCH_STEPS - 1, "n_epochs": 100})
    lcsb = short["method"]["lcsb"]
    assert (lcsb["schedule"], lcsb["auto"]["schedule"]) == ("full", "full")
    assert lcsb["auto"]["reason"].startswith(f"full backprop: {MIN_SWITCH_STEPS - 1} planned steps are fewer than")
    named = job_ok(client, alice, hyperparameters={"max_steps": 8}, method={"lcsb": {"schedule": "tail"}})
    assert (named["method"]["lcsb"]["schedule"], named["method"]["lcsb"]["auto"]) == ("tail", None)


def test_k_with_what_auto_chose_as_full_backprop_says_so(client, alice):
    f = upload_ok(client, alice)
    err = assert_error(create_job(client, alice, f["id"], hyperparameters={"max_steps": 4},
                                  method={"lcsb": {"k": 4}}), 400, param="method.lcsb.k")
    assert "what auto chose for this job: full backprop: 4 planned steps are fewer than the 32" in err["message"]
    assert err["message"].endswith("remove it, or name lcsb.schedule")


def test_auto_takes_split_where_full_backprop_does_not_fit_and_says_so(client, alice):
    f = upload_ok(client, alice)
    big = {"hyperparameters": {"batch_size": 8, "max_steps": 4}, "method": {"max_seq_len": 2048}}
    named = create_job(client, alice, f["id"], hyperparameters=big["hyperparameters"],
                       method={**big["method"], "lcsb": {"schedule": "full"}})
    assert_error(named, 422, "insufficient_memory")  # named full backprop: refused, as before
    job = job_ok(client, alice, f["id"], **big)
    lcsb = job["method"]["lcsb"]
    assert (lcsb["schedule"], lcsb["auto"]["schedule"], lcsb["deep_fraction"]) == ("split", "split", 0.25)
    reason = lcsb["auto"]["reason"]
    assert reason.startswith("split: full backprop needs an estimated ") and \
        "MiB, more than the largest worker's 32768 MiB" in reason
    need = float(reason.split("estimated ")[1].split(" MiB")[0])
    assert need > 32768 >= job["memory_estimate"]["required_mib"]
    assert job["queue"] == "cpu-32g"
