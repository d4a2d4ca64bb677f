"""Jobs on real workers (Redis, PostgreSQL, `python -m worker` processes), sent through the API:
queued -> succeeded with events, checkpoints and artifacts (on local and on S3 storage); exactly one execution
whatever the delivery count (a repeated message, and Redis redelivering after a short visibility timeout); routing
by memory class; a queued job never waits behind a long one on a busy worker."""

from __future__ import annotations

import io
import tarfile
import time
from collections.abc import Iterator

import pytest

from lcsb_service.settings import WorkerClass
from tests.s3_server import moto_s3
from tests.worker.conftest import chat_rows, create_long_job, safetensors_of
from worker.enqueue import CeleryEnqueuer

pytestmark = pytest.mark.worker

JOB_BOUND_S = 60.0   # a 6-step tiny-model job: child start (torch import, ~5 s) + steps, on 2 CPU cores


def started_on(service, job_id: str) -> list[str]:
    return [e["data"]["worker"] for e in service.events(job_id) if e["message"].startswith("Fine-tuning job started")]


@pytest.fixture(params=["local", "s3"])
def storage_over(request) -> Iterator[dict]:
    """Settings overrides for artifact storage: the default local folder, or a bucket on a real
    S3-compatible server (moto, `tests.s3_server`; the worker processes inherit its AWS_* variables)."""
    if request.param == "local":
        yield {}
        return
    with moto_s3() as bucket:
        yield {"storage_url": f"s3://{bucket}/lcsb"}


def test_job_succeeds_with_events_checkpoints_and_artifacts(make_settings, start_worker, make_service, storage_over):
    settings = make_settings(**storage_over)
    service = make_service(settings)
    worker = start_worker(settings)
    t0 = time.monotonic()
    job = service.create_job(method={"save_every": 2, "eval_every": 3}, validation_file=service.upload(chat_rows(4)))
    assert job["status"] == "queued"
    done = service.wait(job["id"], {"succeeded", "failed", "cancelled"}, JOB_BOUND_S)
    print(f"[worker] tiny job end to end: {time.monotonic() - t0:.1f} s (bound {JOB_BOUND_S:.0f} s)")
    events = service.events(job["id"])
    messages = [e["message"] for e in events]
    assert done["status"] == "succeeded", (done["error"], messages)
    assert done["fine_tuned_model"].startswith("ft:tiny-llama:") and done["fine_tuned_model"].endswith(job["id"])
    assert done["trained_tokens"] > 0 and done["progress"]["steps_completed"] == done["progress"]["total_steps"] == 6
    assert done["progress"]["peak_memory_mib"] > 0 and len(done["result_files"]) == 1
    assert len(started_on(service, job["id"])) == 1 and started_on(service, job["id"])[0].startswith(worker.name)
    steps = [e for e in events if e["type"] == "metrics" and "train_loss" in (e["data"] or {})]
    assert [e["data"]["step"] for e in steps] == [1, 2, 3, 4, 5, 6]
    started = next(e for e in events if e["message"].startswith("Training started"))
    assert started["data"]["torch_threads"] == settings.worker_torch_threads == 1
    policy = started["data"]["thread_policy"]  # the supervisor's choice, passed to the training process
    assert (policy["threads"], policy["threads_from"], policy["wait_policy"], policy["slots"]) == (
        1, "override", "PASSIVE", 1)
    assert "cpu, 1 CPU thread (LCSB_WORKER_TORCH_THREADS), OpenMP wait PASSIVE;" in started["message"]
    assert started["data"]["c_allocator"] == "jemalloc"  # settings.worker_malloc's default, seen from inside
    process = next(e for e in events if e["message"].startswith("Training process started"))
    assert process["data"]["malloc"] == "jemalloc" and process["message"].endswith("C allocator jemalloc")
    assert started["data"]["schedule"] == "cyclic" and "1 of 3 layers per step (cyclic" in started["message"]
    for e in steps:
        assert {"lr", "tokens_per_s", "peak_memory_mib", "train_loss", "grad_norm"} <= set(e["data"])
    assert [e["data"]["step"] for e in events if "valid_loss" in (e["data"] or {})] == [0, 3, 6]
    assert [m for m in messages if m.startswith("Checkpoint saved")] == ["Checkpoint saved at step 2",
                                                                          "Checkpoint saved at step 4",
                                                                          "Checkpoint saved at step 6"]
    assert any(m.startswith("Training process started, memory cap 4096 MiB") for m in messages)
    assert any(m.startswith("Training started") for m in messages)
    assert any(m.startswith("Training finished") for m in messages)
    assert messages[-1] == "The job has successfully completed"
    ckpts = service.client.get(f"/v1/fine_tuning/jobs/{job['id']}/checkpoints", headers=service.headers).json()["data"]
    # newest first, as OpenAI lists them: the list ends (in time) with the job's last step, saved once
    assert [c["step_number"] for c in ckpts] == [6, 4, 2]
    assert ckpts[0]["fine_tuned_model_checkpoint"] == f"{done['fine_tuned_model']}:ckpt-step-6"
    last_eval = next(e["data"] for e in events if "valid_loss" in (e["data"] or {}) and e["data"]["step"] == 6)
    assert ckpts[0]["metrics"]["valid_loss"] == last_eval["valid_loss"]  # saved after the final evaluation
    last_name = ckpts[0]["fine_tuned_model_checkpoint"]
    assert done["result"]["final_checkpoint"] == {"step": 6, "fine_tuned_model_checkpoint": last_name}
    chosen = done["result"]["selected_checkpoint"]  # select_checkpoint last: the same step, the same adapter
    assert (chosen["step"], chosen["fine_tuned_model_checkpoint"]) == (6, last_name)
    r = service.client.get(f"/v1/fine_tuning/jobs/{job['id']}/checkpoints/{ckpts[0]['id']}/adapter",
                           headers=service.headers)
    assert r.status_code == 200
    ckpt_names = tarfile.open(fileobj=io.BytesIO(r.content)).getnames()
    assert any(n.endswith("/adapter_model.safetensors") for n in ckpt_names)
    assert any(n.endswith("/chat_template.jinja") for n in ckpt_names)  # a chat job: the template it trained with
    arts = {a["name"] for a in service.client.get(f"/v1/fine_tuning/jobs/{job['id']}/artifacts",
                                                   headers=service.headers).json()["data"]}
    assert {"adapter.tar.gz", "selection_history.jsonl", "metrics.csv", "summary.json", "plots/loss.png"} <= arts
    r = service.client.get(f"/v1/fine_tuning/jobs/{job['id']}/artifacts/adapter.tar.gz", headers=service.headers)
    names = tarfile.open(fileobj=io.BytesIO(r.content)).getnames()
    last = service.client.get(f"/v1/fine_tuning/jobs/{job['id']}/checkpoints/{ckpts[0]['id']}/adapter",
                              headers=service.headers)
    a, b = safetensors_of(r.content), safetensors_of(last.content)  # the last step's checkpoint is the job's model
    assert a.keys() == b.keys() and len(a) > 0 and all(a[k].equal(b[k]) for k in a)
    assert {"adapter/adapter_config.json", "adapter/adapter_model.safetensors",
            "adapter/chat_template.jinja"} <= set(names)
    r = service.client.get(f"/v1/files/{done['result_files'][0]}/content", headers=service.headers)
    assert r.status_code == 200 and r.text.startswith("split,")


def test_a_repeated_delivery_runs_the_job_once(make_settings, start_worker, make_service):
    """The same job sent three times, consumed by two workers: one execution, two no-op deliveries."""
    settings = make_settings()
    service = make_service(settings)
    job = service.create_job()
    for _ in range(2):
        CeleryEnqueuer(settings).enqueue(job["id"], job["queue"])
    workers = [start_worker(settings), start_worker(settings)]
    done = service.wait(job["id"], {"succeeded", "failed"}, JOB_BOUND_S)
    assert done["status"] == "succeeded"
    assert len(started_on(service, job["id"])) == 1
    def counts() -> tuple[int, int]:  # (deliveries skipped, deliveries handled), from the workers' logs
        return (sum(w.text().count("'skipped'") for w in workers),
                sum(w.text().count("succeeded in") for w in workers))

    deadline = time.monotonic() + 10
    while counts() != (2, 3) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert counts() == (2, 3)


def test_redelivery_after_the_visibility_timeout_does_not_run_twice(make_settings, start_worker, make_service):
    """Redis with a 2 s visibility timeout (restored every second): while the job runs (~15 s) its
    message is delivered again to the idle second worker, whose claim sees `running` and exits."""
    settings = make_settings(broker_visibility_timeout_s=2.0,
                             broker_transport_options={**make_settings().broker_transport_options,
                                                       "unacked_restore_interval": 1, "unacked_restore_throttle": 1})
    service = make_service(settings)
    first = start_worker(settings)
    job = service.create_job(hyperparameters={"n_epochs": 20})  # 120 steps
    service.wait(job["id"], {"running"}, JOB_BOUND_S, step=1)
    second = start_worker(settings)
    done = service.wait(job["id"], {"succeeded", "failed"}, 2 * JOB_BOUND_S)
    assert done["status"] == "succeeded" and done["progress"]["steps_completed"] == 120
    assert started_on(service, job["id"]) == [started_on(service, job["id"])[0]]
    assert first.name in started_on(service, job["id"])[0]
    assert "'skipped'" in second.text(), "the message was not delivered again: the test proves nothing"


def test_jobs_are_routed_to_the_smallest_class_that_holds_them(make_settings, start_worker, make_service):
    """Two classes (1024 and 8192 MiB): a small job's estimate fits the small class, a large batch and
    sequence length does not; each runs on a worker of its class."""
    small, large = WorkerClass(queue="small-" + time.strftime("%H%M%S"), memory_mib=1024), \
        WorkerClass(queue="large-" + time.strftime("%H%M%S"), memory_mib=8192)
    settings = make_settings(worker_classes=[small, large])
    service = make_service(settings)
    w_small, w_large = start_worker(settings, small.queue), start_worker(settings, large.queue)
    a = service.create_job()
    b = service.create_job(hyperparameters={"batch_size": 8}, method={"max_seq_len": 512})
    assert (a["queue"], b["queue"]) == (small.queue, large.queue)
    assert a["memory_estimate"]["required_mib"] <= 1024 < b["memory_estimate"]["required_mib"] <= 8192
    for job, worker in ((a, w_small), (b, w_large)):
        assert service.wait(job["id"], {"succeeded", "failed"}, JOB_BOUND_S)["status"] == "succeeded"
        assert [w.startswith(worker.name) for w in started_on(service, job["id"])] == [True]


def test_a_queued_job_starts_while_another_worker_is_busy(make_settings, start_worker, make_service):
    """Two jobs queued before any worker runs: the first worker takes one and reserves nothing else
    (prefetch 1, late ack); the second worker, started later, runs the other to the end while the
    first job still runs."""
    settings = make_settings()
    service = make_service(settings)
    long_job = create_long_job(service)
    short_job = service.create_job()
    busy = start_worker(settings)
    service.wait(long_job["id"], {"running"}, JOB_BOUND_S, step=1)
    assert service.job(short_job["id"])["status"] == "queued"
    free = start_worker(settings)
    t0 = time.monotonic()
    done = service.wait(short_job["id"], {"succeeded", "failed"}, JOB_BOUND_S)
    print(f"[worker] queued job done {time.monotonic() - t0:.1f} s after a second worker started")
    assert done["status"] == "succeeded" and started_on(service, short_job["id"])[0].startswith(free.name)
    assert service.job(long_job["id"])["status"] == "running" and busy.name in started_on(service, long_job["id"])[0]
