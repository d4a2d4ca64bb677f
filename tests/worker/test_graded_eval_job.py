"""A real worker runs a job with graded evaluation (tiny Llama with SmolLM2's tokenizer): the evaluation
events carry each `grader/<name>` score, every checkpoint's `metrics` the scores of the evaluation at its
step, and `eval_samples.jsonl` (the final evaluation's answers and grades) and `eval_samples/step-<N>.jsonl` (each
evaluation's) are downloadable artifacts
whose grades agree with the final event and the summary."""

from __future__ import annotations

import json

import pytest

from tests.worker.conftest import chat_rows

pytestmark = pytest.mark.worker

JOB_BOUND_S = 90.0


def test_graded_scores_reach_events_checkpoints_and_artifacts(make_settings, start_worker, make_service):
    settings = make_settings()
    service = make_service(settings)
    start_worker(settings)
    train, valid, prompts = (service.upload(chat_rows(12)), service.upload(chat_rows(10)),
                             service.upload([{"prompt": f"{i} plus {i} is", "completion": f" {2 * i}"}
                                             for i in range(10)]))
    graders = [{"type": "numeric"}, {"type": "regex", "name": "digit", "pattern": r"\d"}]
    job = service.create_job(train, validation_file=valid, method={
        "eval_every": 2, "save_every": 2, "eval": {"graders": graders, "n_samples": 3, "max_new_tokens": 4,
                                                   "eval_file": prompts}})
    done = service.wait(job["id"], {"succeeded", "failed"}, JOB_BOUND_S)
    assert done["status"] == "succeeded", done["error"]
    evals = [e for e in service.events(job["id"]) if "valid_loss" in (e.get("data") or {})]
    assert [e["data"]["step"] for e in evals] == [0, 2, 4, 6]
    for e in evals:
        assert {"grader/numeric", "grader/digit"} <= set(e["data"]) and "grader/digit=" in e["message"]
    by_step = {e["data"]["step"]: e["data"] for e in evals}
    base = f"/v1/fine_tuning/jobs/{job['id']}"
    checkpoints = service.client.get(f"{base}/checkpoints", headers=service.headers).json()["data"]
    assert sorted(c["step_number"] for c in checkpoints) == [2, 4, 6]  # the last step's carries its scores too
    for c in checkpoints:
        assert {k: c["metrics"][k] for k in ("grader/numeric", "grader/digit")} == {
            k: by_step[c["step_number"]][k] for k in ("grader/numeric", "grader/digit")}
    r = service.client.get(f"{base}/artifacts/eval_samples.jsonl", headers=service.headers)
    assert r.status_code == 200, r.text
    rows = [json.loads(line) for line in r.text.splitlines()]
    assert [(row["step"], row["prompt"], row["reference"]) for row in rows] == [
        (6, f"{i} plus {i} is", f" {2 * i}") for i in range(3)]
    assert sum(row["grades"]["digit"] for row in rows) / 3 == by_step[6]["grader/digit"]
    # every evaluation's answers are kept, the base model's (step 0) included
    listed = service.client.get(f"{base}/artifacts", headers=service.headers).json()["data"]
    per_step = sorted(a["name"] for a in listed if a["name"].startswith("eval_samples/"))
    assert per_step == [f"eval_samples/step-{s:06d}.jsonl" for s in (0, 2, 4, 6)]
    for s in (0, 2, 4, 6):
        r = service.client.get(f"{base}/artifacts/eval_samples/step-{s:06d}.jsonl", headers=service.headers)
        step_rows = [json.loads(line) for line in r.text.splitlines()]
        assert [row["step"] for row in step_rows] == [s] * 3
        assert sum(row["grades"]["digit"] for row in step_rows) / 3 == by_step[s]["grader/digit"]
    summary = json.loads(service.client.get(f"{base}/artifacts/summary.json", headers=service.headers).text)
    assert summary["graded_after"] == {k: by_step[6][k] for k in ("grader/numeric", "grader/digit")}
    assert summary["graded_before"] == {k: by_step[0][k] for k in ("grader/numeric", "grader/digit")}
