"""`/v1/models` with fine-tuned models and checkpoints, `DELETE /v1/models/{id}`, and the chat routes'
checks that need no worker, on PostgreSQL and SQLite: the caller's models beside the bases, another
owner's and a deleted one 404 everywhere (continuing a job from it too), unsupported parameters 400,
and a request no inference worker starts in time 503 `inference_start_timeout` after being sent by its id."""

from __future__ import annotations

import pytest

from api.main import create_app
from lcsb_service.enqueue import RecordingEnqueuer
from tests.api.helpers import SMOL, assert_error, fake_run, job_ok, publish_outputs

ASK = [{"role": "user", "content": "Hi"}]


@pytest.fixture
def model(app, client, alice, tmp_path) -> dict:
    job = job_ok(client, alice, suffix="srv", hyperparameters={"n_epochs": 1})
    return {"job": job, "name": publish_outputs(app, job, alice.name, fake_run(tmp_path), finish=True)}


def test_models_lists_yours_beside_the_bases_and_delete_removes_one(client, alice, bob, model):
    name, job_id = model["name"], model["job"]["id"]
    listed = client.get("/v1/models", headers=alice.headers).json()["data"]
    ids = [m["id"] for m in listed]
    assert ids[:2] == ["Giant-70B", SMOL] and ids[2:] == [name, f"{name}:ckpt-step-4", f"{name}:ckpt-step-2"]
    ckpt = client.get(f"/v1/models/{name}:ckpt-step-2", headers=alice.headers).json()
    assert ckpt == {"id": f"{name}:ckpt-step-2", "object": "model", "created": ckpt["created"], "owned_by": alice.name,
                    "root": SMOL, "parent": None, "job_id": job_id, "step": 2}
    assert [m["id"] for m in client.get("/v1/models", headers=bob.headers).json()["data"]] == ids[:2]
    assert_error(client.get(f"/v1/models/{name}", headers=bob.headers), 404, "model_not_found", "model")
    assert_error(client.delete(f"/v1/models/{name}", headers=bob.headers), 404, "model_not_found")
    assert_error(client.delete(f"/v1/models/{SMOL}", headers=alice.headers), 400, param="model")

    r = client.delete(f"/v1/models/{name}", headers=alice.headers)
    assert r.status_code == 200 and r.json() == {"id": name, "object": "model", "deleted": True}
    assert_error(client.get(f"/v1/models/{name}", headers=alice.headers), 404, "model_not_found")
    assert_error(client.delete(f"/v1/models/{name}", headers=alice.headers), 404, "model_not_found")
    assert_error(client.post("/v1/chat/completions", headers=alice.headers, json={"model": name, "messages": ASK}),
                 404, "model_not_found", "model")
    left = [m["id"] for m in client.get("/v1/models", headers=alice.headers).json()["data"]]
    assert name not in left and f"{name}:ckpt-step-4" in left   # each id is deleted by itself
    r = client.post("/v1/fine_tuning/jobs", headers=alice.headers,
                    json={"model": name, "training_file": model["job"]["training_file"]})
    assert_error(r, 404, "model_not_found", "model")   # nor can a job continue from it


@pytest.mark.parametrize(("extra", "param", "code"), [
    ({"tools": [{"type": "function"}]}, "tools", "unsupported_parameter"),
    ({"response_format": {"type": "json_schema"}}, "response_format", "unsupported_parameter"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs", "invalid_value"), ({"n": 9}, "n", "invalid_value"),
    ({"frobnicate": 1}, "frobnicate", "unknown_parameter"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     "messages.0.content", None),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages.0.role", None),
    ({"max_completion_tokens": 0}, "max_completion_tokens", None),
    ({"frequency_penalty": 2.5}, "frequency_penalty", "invalid_value"),
    ({"presence_penalty": -2.01}, "presence_penalty", "invalid_value")])
def test_chat_refuses_what_it_cannot_honour(client, alice, extra, param, code):
    r = client.post("/v1/chat/completions", headers=alice.headers, json={"model": SMOL, "messages": ASK, **extra})
    assert_error(r, 400, code, param)


def test_no_worker_in_time_is_a_503_after_sending_the_request_by_id(settings, alice, model):
    enqueuer = RecordingEnqueuer()
    app = create_app(settings.model_copy(update={"inference_start_timeout_s": 0.3}), enqueuer=enqueuer)
    from fastapi.testclient import TestClient

    with TestClient(app) as client:
        r = client.post("/v1/completions", headers=alice.headers,
                        json={"model": f"{model['name']}:ckpt-step-2", "prompt": "x", "max_tokens": 2})
        assert_error(r, 503, "inference_start_timeout")
        assert "queue lcsb-inference is busy, or none is running" in r.json()["error"]["message"]
        assert r.headers["Retry-After"] == "1"
    # only this request's task: the app's start-up sweep may also re-send jobs other tests left queued
    generate = [(task, arg, queue) for task, arg, queue in enqueuer.sent if task == "lcsb.generate"]
    assert [(task, queue) for task, _, queue in generate] == [("lcsb.generate", "lcsb-inference")]
    assert generate[0][1].startswith("gen-")   # the id only: the payload is on its stream
    app.state.db.dispose()
