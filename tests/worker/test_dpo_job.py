"""Real SmolLM2-135M-Instruct DPO jobs (issue 50) through the service (API in-process, real PostgreSQL and
Redis) and real worker processes, on hh-rlhf harmless pairs (/work/shared/data/hh-rlhf-harmless):

- a DPO job of 8 training pairs at batch 2 (4 steps, counted in pairs) with 4 validation pairs: the job
  shows `method.type` dpo and its beta; every step's metrics event carries the four `rewards/*` with
  finite values, the first step's loss is log 2 (a fresh adapter is its own reference, so every pair's
  margin is 0); the step-0 evaluation has `eval_rewards/accuracies` 0.5 (ties count one half) and
  `eval_rewards/margins` 0, every evaluation all four `eval_rewards/*`; its `ft:` model answers a chat
  request through an inference worker, and its adapter exports to a GGUF LoRA through an export worker;
- SFT then DPO: a DPO job whose `model` is a short supervised job's `ft:` model names its lineage, and
  its step-0 evaluation has margins 0 and accuracy 0.5: the continued adapter is the reference, not the
  base (against the base the supervised adapter would give non-zero margins).
"""

from __future__ import annotations

import json
import math
import secrets
import time
from pathlib import Path

import pytest

from lcsb_core.models.gguf_import import ensure_default_model, model_cache_dir
from lcsb_core.training.dpo import REWARD_KEYS
from lcsb_service.tasks import WorkerKind
from tests.worker.test_export_worker import request as request_export
from tests.worker.test_export_worker import wait_export

pytestmark = [pytest.mark.worker, pytest.mark.integration]
HH = Path(__file__).resolve().parents[3] / "shared" / "data" / "hh-rlhf-harmless"
EVAL_KEYS = tuple("eval_" + k for k in REWARD_KEYS)
BETA = 0.1
JOB_BOUND_S = 300.0   # 4 DPO steps of SmolLM2 NF4 at 1 thread; the benchmark grid may run beside
LOG2 = math.log(2.0)
# every side of these pairs is at most 450 tokens with SmolLM2's chat template (under max_seq_len 512)
METHOD = {"quantization": "nf4", "max_seq_len": 512, "lora": {"rank": 8, "alpha": 16},
          "lcsb": {"schedule": "tail", "k": 8, "recompute_deep": True}}


def pairs(split: str, n: int) -> bytes:
    return "".join((HH / f"{split}.jsonl").read_text().splitlines(keepends=True)[:n]).encode()


def create(service, model: str, training_file: str, method: dict, **body) -> dict:
    """POST a job as given (Service.create_job adds top-level hyperparameters, which a DPO job with
    method.dpo.hyperparameters refuses)."""
    r = service.client.post("/v1/fine_tuning/jobs", headers=service.headers,
                            json={"model": model, "training_file": training_file, "seed": 1, "method": method,
                                  **body})
    assert r.status_code == 200, r.text
    return r.json()


def dpo_method(**hp) -> dict:
    return {**METHOD, "type": "dpo", "dpo": {"hyperparameters": {"beta": BETA, "batch_size": 2, "n_epochs": 1,
                                                                   **hp}},
            "eval_at_start": True}   # evaluations at step 0 and at the end


def finished(service, job_id: str) -> tuple[dict, list[dict], float]:
    t0 = time.monotonic()
    done = service.wait(job_id, {"succeeded", "failed", "cancelled"}, JOB_BOUND_S)
    events = service.events(job_id)
    assert done["status"] == "succeeded", (done["error"], [e["message"] for e in events])
    return done, events, time.monotonic() - t0


def metrics_with(events: list[dict], key: str) -> dict[int, dict]:
    """The metrics events' data holding `key`, by step (train_loss: the steps; valid_loss: the evaluations)."""
    return {e["data"]["step"]: e["data"] for e in events if e["type"] == "metrics" and key in (e["data"] or {})}


def test_a_dpo_job_trains_on_pairs_reports_rewards_answers_and_exports(make_settings, start_worker, make_service,
                                                                       model_dir):
    smol = ensure_default_model()
    settings = make_settings(model_dirs=[model_dir, smol.parent, model_cache_dir()],
                             inference_queue=f"inference-{secrets.token_hex(3)}", inference_max_new_tokens=64,
                             inference_start_timeout_s=240, export_queue=f"export-{secrets.token_hex(3)}")
    service = make_service(settings)
    start_worker(settings)
    t0 = time.monotonic()
    job = create(service, smol.name, service.upload(pairs("train", 8)), dpo_method(),
                 validation_file=service.upload(pairs("validation", 4), "valid.jsonl"))
    assert job["method"]["type"] == "dpo" and job["method"]["dpo"]["hyperparameters"]["beta"] == BETA
    assert job["progress"]["total_steps"] == 4   # 8 pairs / batch 2, not 16 rows
    done, events, _ = finished(service, job["id"])
    print(f"[dpo] job end to end: {time.monotonic() - t0:.1f} s; steps "
          f"{[round(e['data'].get('step_time_s', 0), 1) for e in events if 'train_loss' in (e['data'] or {})]} s")
    assert done["method"]["type"] == "dpo" and done["method"]["dpo"]["hyperparameters"]["beta"] == BETA
    assert done["progress"]["steps_completed"] == done["progress"]["total_steps"] == 4

    steps = metrics_with(events, "train_loss")
    assert sorted(steps) == [1, 2, 3, 4]
    for step, data in steps.items():
        assert all(math.isfinite(data[k]) for k in REWARD_KEYS), (step, data)
        assert 0.0 <= data["rewards/accuracies"] <= 1.0
    assert steps[1]["train_loss"] == pytest.approx(LOG2, abs=1e-3)  # the fresh adapter is the reference
    assert steps[1]["rewards/margins"] == pytest.approx(0.0, abs=1e-6)
    evals = metrics_with(events, "valid_loss")
    assert sorted(evals) == [0, 4]
    assert evals[0]["eval_rewards/accuracies"] == 0.5 and evals[0]["eval_rewards/margins"] == 0.0
    assert evals[0]["valid_loss"] == pytest.approx(LOG2, abs=1e-6)
    for step, data in evals.items():
        assert all(math.isfinite(data[k]) for k in EVAL_KEYS), (step, data)
        assert not set(REWARD_KEYS) & set(data)
    assert any(m["message"].startswith("Step 4/4: training loss=") and "reward margin=" in m["message"]
               for m in events)

    ft = done["fine_tuned_model"]
    assert ft.startswith(f"ft:{smol.name}:")
    start_worker(settings, kind=WorkerKind.INFERENCE)
    t1 = time.monotonic()
    r = service.client.post("/v1/chat/completions", headers=service.headers,
                            json={"model": ft, "messages": [{"role": "user", "content": "How do I make tea?"}],
                                  "temperature": 0, "max_tokens": 24})
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["model"] == ft and answer["choices"][0]["message"]["role"] == "assistant"
    assert answer["choices"][0]["message"]["content"].strip(), answer
    print(f"[dpo] chat with {ft}: {time.monotonic() - t1:.1f} s")

    start_worker(settings, kind=WorkerKind.EXPORT)
    t2 = time.monotonic()
    export = request_export(service, job["id"], formats=["adapter"])
    got = wait_export(service, job["id"], export["id"], {"succeeded", "failed"}, 240)
    assert got["status"] == "succeeded", got
    assert [f["name"] for f in got["files"]][0] == "adapter.gguf" and got["manifest"]["lora"]["rank"] == 8
    print(f"[dpo] adapter export: {time.monotonic() - t2:.1f} s")


def test_dpo_continues_a_supervised_model_with_it_as_the_reference(make_settings, start_worker, make_service,
                                                                   model_dir):
    smol = ensure_default_model()
    settings = make_settings(model_dirs=[model_dir, smol.parent])
    service = make_service(settings)
    start_worker(settings)
    t0 = time.monotonic()
    rows = [json.loads(line) for line in pairs("train", 4).decode().splitlines()]
    chats = [{"messages": r["input"]["messages"] + r["preferred_output"]} for r in rows]   # SFT on the chosen sides
    sft = create(service, smol.name, service.upload(chats), {**METHOD, "type": "supervised", "supervised": {
        "hyperparameters": {"batch_size": 2, "n_epochs": 1, "learning_rate": 1e-3}}})
    sft, _, sft_s = finished(service, sft["id"])
    parent = sft["fine_tuned_model"]

    job = create(service, parent, service.upload(pairs("train", 8)), dpo_method(max_steps=2),
                 validation_file=service.upload(pairs("validation", 4), "valid.jsonl"))
    assert (job["model"], job["parent_model"], job["parent_job_id"]) == (smol.name, parent, sft["id"])
    assert job["method"]["type"] == "dpo"
    done, events, dpo_s = finished(service, job["id"])
    print(f"[dpo] SFT {sft_s:.1f} s, then DPO {dpo_s:.1f} s ({time.monotonic() - t0:.1f} s in all)")
    assert (done["parent_model"], done["parent_job_id"]) == (parent, sft["id"])
    steps, evals = metrics_with(events, "train_loss"), metrics_with(events, "valid_loss")
    assert sorted(steps) == [1, 2] and sorted(evals) == [0, 2]
    # the continued adapter is the reference: policy and reference agree at the start
    assert steps[1]["train_loss"] == pytest.approx(LOG2, abs=1e-3)
    assert evals[0]["eval_rewards/margins"] == 0.0 and evals[0]["eval_rewards/accuracies"] == 0.5
    assert all(math.isfinite(evals[2][k]) for k in EVAL_KEYS)


def test_a_pair_longer_than_max_seq_len_passes_upload_and_fails_the_job_before_training(
        make_settings, start_worker, make_service, model_dir):
    """The upload check has no tokenizer, so it cannot count a pair's tokens; the worker's check with the
    model's tokenizer (before the model loads) rejects the job: `invalid_file` on `training_file`, the
    message naming the line, the field and `method.max_seq_len` (never the core's `skip_invalid`, which the
    API does not offer), and the job's validation event saying the line was invalid, not "N used"."""
    smol = ensure_default_model()
    settings = make_settings(model_dirs=[model_dir, smol.parent, model_cache_dir()])
    service = make_service(settings)
    start_worker(settings)

    def pair(prompt: str, chosen: str, rejected: str) -> dict:
        return {"input": {"messages": [{"role": "user", "content": prompt}]},
                "preferred_output": [{"role": "assistant", "content": chosen}],
                "non_preferred_output": [{"role": "assistant", "content": rejected}]}

    rows = [pair(f"Say hi {i}", "Hi!", "No.") for i in range(4)]
    rows[2] = pair("Say hi", "Hi! " + "Nice to meet you. " * 40, "No.")   # its chosen side: over 128 tokens
    upload = service.client.post("/v1/files", headers=service.headers, data={"purpose": "fine-tune"},
                                 files={"file": ("pairs.jsonl", "".join(json.dumps(r) + "\n" for r in rows))})
    assert upload.status_code == 200 and upload.json()["status"] == "processed", upload.text
    job = create(service, smol.name, upload.json()["id"], {**dpo_method(), "max_seq_len": 128})
    failed = service.wait(job["id"], {"failed", "succeeded"}, JOB_BOUND_S)
    assert failed["status"] == "failed" and failed["progress"]["steps_completed"] == 0
    error = failed["error"]
    assert (error["code"], error["param"]) == ("invalid_file", "training_file"), error
    message = error["message"]
    assert message.startswith("pairs.jsonl: 1 of 4 lines are invalid: line 3, field preferred_output:"), message
    assert "> max_seq_len 128" in message and "raise max_seq_len" in message, message
    assert "the job's method.max_seq_len (now 128" in message, message
    assert "skip_invalid" not in message and "/" not in message, message
    checked = [e["message"] for e in service.events(job["id"]) if e["message"].startswith("Checked training file")]
    assert len(checked) == 1 and "1 of 4 lines are invalid: line 3" in checked[0], checked
    assert checked[0].endswith("(max_seq_len 128); rejected") and " used " not in checked[0], checked
