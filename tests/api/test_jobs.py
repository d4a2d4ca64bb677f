"""`/v1/fine_tuning/jobs`: create (validation, memory estimate and routing, enqueue after commit),
idempotency, list (cursor pages, metadata filter), get, cancel."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import select

from lcsb_service.models import Job
from tests.api.helpers import assert_error, chat_lines, create_job, job_ok, upload_ok


def test_create_resolves_spec_estimates_memory_and_enqueues(client, alice, app):
    f = upload_ok(client, alice, chat_lines(24))  # 24 examples / 4 a batch x 2 epochs = 12 steps: save_every 10 fits
    job = job_ok(client, alice, f["id"], seed=7, suffix="demo", metadata={"team": "nlp"},
                 hyperparameters={"n_epochs": 2, "batch_size": "auto", "learning_rate_multiplier": 2},
                 method={"type": "supervised", "lora": {"rank": 8, "target_modules": ["q_proj", "v_proj"]},
                         "lcsb": {"schedule": "cyclic", "fraction": 0.2}, "max_seq_len": 256, "save_every": 10})
    assert job["object"] == "fine_tuning.job" and job["id"].startswith("ftjob-") and job["status"] == "queued"
    assert job["organization_id"] == alice.owner_id and job["training_file"] == f["id"]
    assert job["seed"] == 7 and job["user_provided_suffix"] == "demo" and job["metadata"] == {"team": "nlp"}
    assert job["hyperparameters"]["n_epochs"] == 2 and job["hyperparameters"]["batch_size"] == 4
    assert job["hyperparameters"]["learning_rate"] == pytest.approx(8e-4)  # 2 x cyclic's measured 4e-4
    lcsb = job["method"]["lcsb"]
    assert lcsb["layers_per_step"] == 6 and job["method"]["lora"]["rank"] == 8 and job["method"]["max_seq_len"] == 256
    est = job["memory_estimate"]
    assert est["total_mib"] > 0 and est["required_mib"] <= est["memory_cap_mib"] and est["k"] == 6
    assert job["queue"] == "cpu-6g" == est["queue"]
    assert job["progress"] == {"steps_completed": 0, "total_steps": 12, "percent": 0.0,
                               "peak_memory_mib": None, "heartbeat_at": None}
    assert (job["id"], "cpu-6g") in app.state.enqueuer.calls
    with app.state.db.session() as s:
        cfg = s.get(Job, job["id"]).train_config
    assert cfg["data"]["train_file"] == f["id"] and cfg["lora"]["target_modules"] == ["q_proj", "v_proj"]
    assert cfg["optim"]["learning_rate"] == pytest.approx(8e-4) and cfg["save_every"] == 10 and cfg["epochs"] == 2
    events = client.get(f"/v1/fine_tuning/jobs/{job['id']}/events", headers=alice.headers).json()["data"]
    assert events[-1]["message"] == f"Created fine-tuning job: {job['id']}"
    assert events[0]["message"].startswith("Fine-tuning job queued on cpu-6g: 12 optimizer steps (24 examples, "
                                           "batch size 4, 2 epoch(s)), estimated peak memory ")
    assert events[0]["data"]["total_steps"] == 12


@pytest.mark.parametrize("max_steps,says", [
    (3, "3 optimizer steps (12 examples, batch size 4; max_steps 3 ends it before its 2 epoch(s) do)"),
    (50, "6 optimizer steps (12 examples, batch size 4, 2 epoch(s); max_steps 50 not reached)"),
])
def test_the_queued_event_says_whether_max_steps_or_the_epochs_end_the_run(client, alice, max_steps, says):
    job = job_ok(client, alice, hyperparameters={"n_epochs": 2, "batch_size": 4, "max_steps": max_steps})
    events = client.get(f"/v1/fine_tuning/jobs/{job['id']}/events", headers=alice.headers).json()["data"]
    assert events[0]["message"].startswith(f"Fine-tuning job queued on {job['queue']}: {says}, "), events[0]


@pytest.mark.parametrize("lcsb,per_step,full_every,exact", [
    ({"schedule": "top", "k": 6}, 6, None, True),
    ({"schedule": "topfull", "fraction": 0.5, "full_every": 3}, 15, 3, True),
    ({"schedule": "tail"}, 8, None, True),
    ({"schedule": "full"}, 30, None, True),
    ({"schedule": "cyclic"}, 8, None, False),
])
def test_every_schedule_is_accepted_and_resolved(client, alice, lcsb, per_step, full_every, exact):
    job = job_ok(client, alice, method={"lcsb": lcsb})
    resolved = job["method"]["lcsb"]
    assert resolved["schedule"] == lcsb["schedule"] and resolved["layers_per_step"] == per_step
    assert resolved["full_every"] == full_every and resolved["exact_gradient"] is exact


def test_schedules_that_back_propagate_every_layer_are_estimated_like_full(client, alice):
    est = {name: job_ok(client, alice, method={"lcsb": {"schedule": name}},
                        hyperparameters={"batch_size": 4})["memory_estimate"]["activations_mib"]
           for name in ("full", "tail", "topfull", "top", "cyclic", "split")}
    assert est["tail"] == est["topfull"] == est["full"]  # each reaches a full-depth backward in its cycle
    assert est["top"] == est["cyclic"] < est["full"]  # 8 layers keep activations
    # split's larger pass: 3 of the 4 rows through the top 8 (the deep one: 1 row through all 30)
    assert est["split"] == pytest.approx(0.75 * est["top"])


def test_recompute_deep_is_echoed_and_shrinks_the_estimate(client, alice):
    """`method.lcsb.recompute_deep` on `topfull`: stated in the job's method, and its full-depth step keeps
    the top 8 layers' activations and the others' inputs, so the estimate lies between `top`'s and
    `topfull`'s own (`lcsb_core.training.memory`)."""
    jobs = {name: job_ok(client, alice, method={"lcsb": lcsb}, hyperparameters={"batch_size": 4})
            for name, lcsb in (("plain", {"schedule": "topfull"}), ("top", {"schedule": "top"}),
                               ("recompute", {"schedule": "topfull", "recompute_deep": True}))}
    assert jobs["recompute"]["method"]["lcsb"]["recompute_deep"] is True
    assert jobs["plain"]["method"]["lcsb"]["recompute_deep"] is False
    act = {name: job["memory_estimate"]["activations_mib"] for name, job in jobs.items()}
    assert act["top"] < act["recompute"] < act["plain"]


def test_hyperparameters_in_method_and_learning_rate(client, alice):
    job = job_ok(client, alice, method={"supervised": {"hyperparameters": {"n_epochs": 3}}},
                 hyperparameters=None)
    assert job["hyperparameters"]["n_epochs"] == 3
    job = job_ok(client, alice, hyperparameters={"learning_rate": 4e-4, "max_steps": 20})
    assert job["hyperparameters"]["learning_rate_multiplier"] == pytest.approx(0.5)  # of topfull's 8e-4
    assert job["hyperparameters"]["max_steps"] == 20


@pytest.mark.parametrize("schedule,multiplier,lr", [
    ("topfull", "auto", 8e-4), ("topfull", 2, 1.6e-3), ("full", 0.5, 4e-4), ("top", "auto", 1.6e-3),
    ("cyclic", "auto", 4e-4)])
def test_the_multiplier_scales_the_schedules_measured_learning_rate(client, alice, schedule, multiplier, lr):
    """Issue 30: "auto" is the measured best for the job's schedule (lcsb_core.training.learning_rate), the same
    number the core resolves, stated in the job object and in the trainer's config."""
    job = job_ok(client, alice, hyperparameters={"learning_rate_multiplier": multiplier, "max_steps": 20},
                 method={"lcsb": {"schedule": schedule}})
    assert job["hyperparameters"]["learning_rate"] == pytest.approx(lr)
    assert job["method"]["supervised"]["hyperparameters"]["learning_rate"] == pytest.approx(lr)
    from lcsb_core.training.config import TrainConfig
    core = TrainConfig.from_dict({"data": {"train_file": "x.jsonl"}, "lcsb": {"schedule": schedule}})
    assert core.optim.learning_rate * (1.0 if multiplier == "auto" else multiplier) == pytest.approx(lr)


def test_bigger_jobs_route_to_bigger_workers_or_422(client, alice):
    big = job_ok(client, alice, hyperparameters={"batch_size": 8}, method={"max_seq_len": 1024})
    assert big["queue"] == "cpu-32g" and big["memory_estimate"]["memory_cap_mib"] == 32768
    f = upload_ok(client, alice)
    err = assert_error(create_job(client, alice, f["id"], model="Giant-70B"), 422, "insufficient_memory")
    assert "MiB" in err["message"] and "cpu-32g" in err["message"]
    full = create_job(client, alice, f["id"], hyperparameters={"batch_size": 64},
                      method={"max_seq_len": 8192, "lcsb": {"schedule": "full"}})
    assert_error(full, 422, "insufficient_memory")


BAD_BODIES = [
    ({"model": "gpt-4o"}, 400, "model_not_found", "model"),
    ({"training_file": "file-missing"}, 400, "file_not_found", "training_file"),
    ({"validation_file": "file-missing"}, 400, "file_not_found", "validation_file"),
    ({"hyperparameters": {"n_epochs": 0}}, 400, "invalid_value", "hyperparameters.n_epochs"),
    ({"hyperparameters": {"batch_size": "big"}}, 400, "invalid_value", None),
    ({"hyperparameters": {"learning_rate": 1e-4, "learning_rate_multiplier": 2}}, 400, None,
     "hyperparameters.learning_rate"),
    ({"hyperparameters": {"n_epochs": 1}, "method": {"supervised": {"hyperparameters": {"n_epochs": 2}}}}, 400,
     None, "hyperparameters"),
    ({"method": {"lora": {"rank": 0}}}, 400, "invalid_value", "method.lora.rank"),
    ({"method": {"lora": {"target_modules": ["attn"]}}}, 400, "invalid_value", None),
    ({"method": {"lcsb": {"k": 31}}}, 400, "invalid_hyperparameters", "method.lcsb.k"),
    ({"method": {"lcsb": {"k": 4, "fraction": 0.5}}}, 400, "invalid_value", "method.lcsb"),
    ({"method": {"lcsb": {"schedule": "sometimes"}}}, 400, "invalid_value", "method.lcsb.schedule"),
    ({"method": {"lcsb": {"schedule": "topfull", "full_every": 1}}}, 400, "invalid_value", "method.lcsb.full_every"),
    ({"method": {"lcsb": {"schedule": "top", "k": 31}}}, 400, "invalid_hyperparameters", "method.lcsb.k"),
    ({"method": {"quantization": "int3"}}, 400, "invalid_value", "method.quantization"),
    ({"method": {"max_seq_len": 16384}}, 400, None, "method.max_seq_len"),
    ({"method": {"type": "reinforcement"}}, 400, "invalid_value", "method.type"),
    ({"suffix": "has spaces"}, 400, "invalid_value", "suffix"),
    ({"metadata": {f"k{i}": "v" for i in range(17)}}, 400, None, "metadata"),
    ({"integrations": [{"type": "wandb"}]}, 400, None, "integrations"),
    ({"epochs": 3}, 400, "unknown_parameter", "epochs"),
    ({"model": None}, 400, None, "model"),
]


@pytest.mark.parametrize("override,status,code,param", BAD_BODIES)
def test_invalid_requests_are_4xx_naming_the_field(client, alice, override, status, code, param):
    f = upload_ok(client, alice)
    body = {"model": "SmolLM2-135M-Instruct", "training_file": f["id"], **override}
    r = client.post("/v1/fine_tuning/jobs", headers=alice.headers, json=body)
    assert_error(r, status, code, param)


def test_files_that_failed_validation_are_refused(client, alice):
    bad = upload_ok(client, alice, b"not json\n" * 12)
    err = assert_error(create_job(client, alice, bad["id"]), 400, "invalid_file", "training_file")
    assert "line 1" in err["message"] or "1" in err["message"]
    good = upload_ok(client, alice)
    assert_error(create_job(client, alice, good["id"], validation_file=bad["id"]), 400, "invalid_file",
                 "validation_file")
    assert_error(client.post("/v1/fine_tuning/jobs", headers=alice.headers, content=b"{not json"), 400)


def test_idempotency_key_returns_the_same_job(client, alice, bob, app):
    f = upload_ok(client, alice)
    key = {"Idempotency-Key": "retry-123"}
    first = create_job(client, alice, f["id"], headers=key, seed=1).json()
    again = create_job(client, alice, f["id"], headers=key, seed=1)
    assert again.status_code == 200 and again.json()["id"] == first["id"]
    assert [c for c in app.state.enqueuer.calls if c[0] == first["id"]] == [(first["id"], "cpu-6g")]
    assert_error(create_job(client, alice, f["id"], headers=key, seed=2), 409, "idempotency_key_reused")
    other = create_job(client, bob, upload_ok(client, bob)["id"], headers=key, seed=1)
    assert other.status_code == 200 and other.json()["id"] != first["id"]
    without = create_job(client, alice, f["id"], seed=1)
    assert without.json()["id"] != first["id"]


def test_concurrent_requests_with_one_key_create_one_job(client, alice, app):
    f = upload_ok(client, alice)

    def post(_):
        return create_job(client, alice, f["id"], headers={"Idempotency-Key": "concurrent"}, seed=3)

    with ThreadPoolExecutor(4) as pool:
        responses = list(pool.map(post, range(4)))
    assert {r.status_code for r in responses} == {200}
    assert len({r.json()["id"] for r in responses}) == 1
    with app.state.db.session() as s:
        count = len(s.execute(select(Job.id).where(Job.owner_id == alice.owner_id)).all())
    assert count == 1


def test_list_pagination_and_metadata_filter(client, alice):
    f = upload_ok(client, alice)["id"]
    ids = [job_ok(client, alice, f, metadata={"batch": "a" if i % 2 else "b", "i": str(i)})["id"] for i in range(5)]
    listed = client.get("/v1/fine_tuning/jobs?limit=100", headers=alice.headers).json()
    assert [j["id"] for j in listed["data"]] == ids[::-1] and not listed["has_more"]
    page1 = client.get("/v1/fine_tuning/jobs?limit=3", headers=alice.headers).json()
    page2 = client.get(f"/v1/fine_tuning/jobs?limit=3&after={page1['last_id']}", headers=alice.headers).json()
    assert page1["has_more"] and not page2["has_more"]
    assert [j["id"] for j in page1["data"] + page2["data"]] == ids[::-1]
    odd = client.get("/v1/fine_tuning/jobs", params={"metadata[batch]": "a"}, headers=alice.headers).json()
    assert [j["id"] for j in odd["data"]] == [ids[3], ids[1]]
    both = client.get("/v1/fine_tuning/jobs", params={"metadata[batch]": "a", "metadata[i]": "3"},
                      headers=alice.headers).json()
    assert [j["id"] for j in both["data"]] == [ids[3]]
    nope = client.get("/v1/fine_tuning/jobs", params={"metadata[nope]": "x"}, headers=alice.headers)
    assert nope.json()["data"] == []
    assert_error(client.get("/v1/fine_tuning/jobs", params={"metadata": "x"}, headers=alice.headers), 400)
    plain = job_ok(client, alice, f)["id"]
    none = client.get("/v1/fine_tuning/jobs", params={"metadata": "null"}, headers=alice.headers).json()
    assert [j["id"] for j in none["data"]] == [plain]
    assert_error(client.get("/v1/fine_tuning/jobs?limit=0", headers=alice.headers), 400, param="limit")


def test_get_and_cancel(client, alice, app):
    job = job_ok(client, alice)
    got = client.get(f"/v1/fine_tuning/jobs/{job['id']}", headers=alice.headers).json()
    assert got == job
    cancelled = client.post(f"/v1/fine_tuning/jobs/{job['id']}/cancel", headers=alice.headers)
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert cancelled.json()["finished_at"] is not None
    again = client.post(f"/v1/fine_tuning/jobs/{job['id']}/cancel", headers=alice.headers)
    assert again.status_code == 200 and again.json()["status"] == "cancelled"
    from lcsb_service import transitions

    done = job_ok(client, alice)
    with app.state.db.session() as s:
        transitions.claim(s, done["id"])
    with app.state.db.session() as s:
        transitions.finish(s, done["id"], fine_tuned_model="ft:x")
    assert_error(client.post(f"/v1/fine_tuning/jobs/{done['id']}/cancel", headers=alice.headers), 409,
                 "job_not_cancellable")
    assert_error(client.get("/v1/fine_tuning/jobs/ftjob-nope", headers=alice.headers), 404, "job_not_found")


class CommitCheckingEnqueuer:
    """Records whether the job row was already committed (visible to a new session) when enqueued;
    raises afterwards when `broken` (a broker outage)."""

    def __init__(self, db, broken: bool = False) -> None:
        self.db, self.broken, self.seen = db, broken, []

    def enqueue(self, job_id: str, queue: str) -> None:
        with self.db.session() as s:
            self.seen.append((job_id, s.get(Job, job_id) is not None))
        if self.broken:
            raise ConnectionError("broker down")


@pytest.mark.parametrize("broken", [False, True])
def test_enqueue_happens_after_commit_and_a_broker_failure_keeps_the_job(settings, broken):
    from fastapi.testclient import TestClient

    from api.main import create_app
    from tests.api.conftest import new_tenant

    app = create_app(settings)
    app.state.enqueuer = enqueuer = CommitCheckingEnqueuer(app.state.db, broken=broken)
    tenant = new_tenant(app, "enqueue")
    with TestClient(app) as c:
        job = job_ok(c, tenant)
        assert enqueuer.seen == [(job["id"], True)]
        assert_error(create_job(c, tenant, job["training_file"], model="Giant-70B"), 422)  # rolled back
        assert len(enqueuer.seen) == 1
        assert c.get(f"/v1/fine_tuning/jobs/{job['id']}", headers=tenant.headers).json()["status"] == "queued"
    app.state.db.dispose()
