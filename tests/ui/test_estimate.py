"""`POST /v1/fine_tuning/jobs/estimate` (the create form's estimate): the core's memory estimate and
worker class for a create body, the same 400 / 422 errors as creating, and nothing stored."""

from __future__ import annotations

from tests.api.helpers import SMOL, assert_error, upload_ok


def estimate(client, tenant, **body):
    return client.post("/v1/fine_tuning/jobs/estimate", headers=tenant.headers, json=body)


def test_estimate_gives_the_memory_estimate_and_worker_class_and_stores_nothing(client, alice):
    file_id = upload_ok(client, alice)["id"]
    r = estimate(client, alice, model=SMOL, training_file=file_id, method={"lcsb": {"schedule": "cyclic", "k": 8}})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "fine_tuning.job.estimate" and body["model"] == SMOL
    assert body["queue"] == "cpu-6g" and body["memory_estimate"]["memory_cap_mib"] == 6144
    assert 0 < body["memory_estimate"]["total_mib"] < body["memory_estimate"]["required_mib"] <= 6144
    assert body["method"]["lcsb"]["layers_per_step"] == 8 and body["method"]["lcsb"]["schedule"] == "cyclic"
    full = estimate(client, alice, model=SMOL, training_file=file_id, method={"lcsb": {"schedule": "full"}}).json()
    assert full["method"]["lcsb"]["layers_per_step"] == 30
    assert full["memory_estimate"]["total_mib"] > body["memory_estimate"]["total_mib"]  # backprop through all 30
    assert client.get("/v1/fine_tuning/jobs", headers=alice.headers).json()["data"] == []


def test_estimate_errors_name_the_field_like_create(client, alice, bob):
    file_id = upload_ok(client, alice)["id"]
    assert_error(estimate(client, alice, model=SMOL, training_file=file_id, method={"lcsb": {"k": 99}}),
                 400, param="method.lcsb.k")
    assert_error(estimate(client, alice, model=SMOL, training_file=file_id, hyperparameters={"learning_rate": 5}),
                 400, param="hyperparameters.learning_rate")
    assert_error(estimate(client, bob, model=SMOL, training_file=file_id), 400, code="file_not_found",
                 param="training_file")  # another owner's file
    assert_error(estimate(client, alice, model="Giant-70B", training_file=file_id), 422, code="insufficient_memory")
    assert_error(client.post("/v1/fine_tuning/jobs/estimate", json={"model": SMOL, "training_file": file_id}), 401)


def test_generated_estimate_bodies_get_no_server_error(app, alice, client):
    """schemathesis over the estimate operation alone (the suite's fuzz test runs every operation),
    with the caller's real file id swapped in half the time so bodies reach the trainer's checks."""
    import schemathesis
    from hypothesis import HealthCheck, given
    from hypothesis import settings as hypothesis_settings
    from schemathesis.checks import not_a_server_error

    file_id = upload_ok(client, alice)["id"]
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operation = next(r.ok() for r in schema.get_all_operations()
                     if r.ok().label == "POST /v1/fine_tuning/jobs/estimate")
    statuses = []

    @given(case=operation.as_strategy())
    @hypothesis_settings(max_examples=60, deadline=None, derandomize=True, database=None,
                         suppress_health_check=list(HealthCheck))
    def run(case) -> None:
        if isinstance(case.body, dict) and len(statuses) % 2:
            case.body = {**case.body, "model": SMOL, "training_file": file_id}
        response = case.call_and_validate(headers=alice.headers, checks=[not_a_server_error])
        statuses.append(response.status_code)

    run()
    assert set(statuses) <= {200, 400, 422} and {200, 400} <= set(statuses)
