"""A DPO run's reward metrics (TRL's names: `rewards/chosen`, `rewards/rejected`, `rewards/margins`,
`rewards/accuracies` in train log rows, `eval_rewards/...` in eval rows) reach the job's metrics events,
its checkpoints' metrics and its `metrics.csv` / `metrics.jsonl` artifacts unchanged, from the trainer's
reports (`StepReport.rewards`, `EvalReport.rewards`, flattened into the log rows by `to_dict`)."""

from __future__ import annotations

import csv
import io
import json
import threading

import pytest

from lcsb_core.run_files import RunFiles
from lcsb_core.training.callbacks import EvalReport, StepReport
from lcsb_service import transitions
from tests.api.helpers import fake_run, job_ok, preference_lines, publish_outputs, upload_ok
from worker.training.reporter import JobReporter

TRAIN = {"rewards/chosen": 0.12, "rewards/rejected": -0.3, "rewards/margins": 0.42, "rewards/accuracies": 0.75}
EVAL = {"eval_" + k: v for k, v in TRAIN.items()}


@pytest.fixture
def dpo_job(client, alice) -> dict:
    pairs = upload_ok(client, alice, preference_lines(12))["id"]
    return job_ok(client, alice, pairs, method={"type": "dpo", "dpo": {"hyperparameters": {"n_epochs": 1}}})


def _metrics_events(client, alice, job_id: str) -> list[dict]:
    events = client.get(f"/v1/fine_tuning/jobs/{job_id}/events?limit=100", headers=alice.headers).json()["data"]
    return [e for e in events if e["type"] == "metrics"]


def test_reward_metrics_reach_the_events_and_checkpoints(app, client, alice, dpo_job, tmp_path):
    job_id = dpo_job["id"]
    with app.state.db.session() as s:
        transitions.claim(s, job_id)
    run = JobReporter(app.state.db, app.state.storage, job_id, "ft:x", threading.Event())
    run.on_step(StepReport(step=1, total_steps=6, loss=0.69, lr=1e-4, grad_norm=0.5, tokens=512, target_tokens=80,
                        tokens_per_s=256.0, step_time_s=2.0, peak_memory_mib=800.0, elapsed_s=2.0, rewards=TRAIN))
    run.on_eval(EvalReport(step=1, eval_loss=0.6, eval_token_accuracy=0.5, eval_target_tokens=90, rewards=EVAL))
    folder = fake_run(tmp_path) / "checkpoints" / "step-000002"
    run.on_checkpoint(1, str(folder))
    evaluation, step = _metrics_events(client, alice, job_id)[:2]  # newest first
    assert {k: step["data"][k] for k in TRAIN} == TRAIN
    assert step["message"] == "Step 1/6: training loss=0.6900, reward margin=0.420, reward accuracy=0.750"
    assert {k: evaluation["data"][k] for k in EVAL} == EVAL and not set(TRAIN) & set(evaluation["data"])
    assert evaluation["message"] == ("Step 1/6: validation DPO loss=0.6000, token accuracy on the preferred "
                                     "answers=0.500, reward margin=0.420, reward accuracy=0.750")
    ckpts = client.get(f"/v1/fine_tuning/jobs/{job_id}/checkpoints", headers=alice.headers).json()["data"]
    assert {k: ckpts[0]["metrics"][k] for k in EVAL} == EVAL


def test_a_supervised_steps_event_is_unchanged(app, client, alice):
    job_id = job_ok(client, alice)["id"]
    with app.state.db.session() as s:
        transitions.claim(s, job_id)
    run = JobReporter(app.state.db, app.state.storage, job_id, "ft:x", threading.Event())
    run.on_step(StepReport(step=1, total_steps=6, loss=1.5, lr=1e-4, grad_norm=0.5, tokens=512, target_tokens=80,
                           tokens_per_s=256.0, step_time_s=2.0, peak_memory_mib=800.0, elapsed_s=2.0))
    event = _metrics_events(client, alice, job_id)[0]
    assert event["message"] == "Step 1/6: training loss=1.5000" and not any("rewards" in k for k in event["data"])


def test_reward_columns_reach_the_metrics_files(app, client, alice, dpo_job, tmp_path):
    run_dir = fake_run(tmp_path)
    files = RunFiles(run_dir)
    (run_dir / "metrics.csv").unlink()
    files.append(files.metrics, {"split": "train", "step": 1, "loss": 0.69, **TRAIN})
    files.append(files.metrics, {"split": "eval", "step": 1, "eval_loss": 0.6, **EVAL})
    files.write_metrics_csv()
    publish_outputs(app, dpo_job, alice.name, run_dir, finish=True)
    base = f"/v1/fine_tuning/jobs/{dpo_job['id']}/artifacts"
    table = list(csv.DictReader(io.StringIO(client.get(f"{base}/metrics.csv", headers=alice.headers).text)))
    assert {k: float(table[0][k]) for k in TRAIN} == TRAIN and {k: float(table[1][k]) for k in EVAL} == EVAL
    rows = [json.loads(line) for line in client.get(f"{base}/metrics.jsonl", headers=alice.headers).text.splitlines()]
    assert {k: rows[0][k] for k in TRAIN} == TRAIN and {k: rows[1][k] for k in EVAL} == EVAL
