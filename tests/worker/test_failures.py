"""Every way a job can end badly, on real workers: the training child or the whole worker killed with
SIGKILL, cancel mid-run, a job past its memory cap, NaN loss, data the worker rejects, the time limit,
a model the worker lacks. Each ends in a terminal state within a stated bound, with the right
`error.code`, and the worker keeps serving."""

from __future__ import annotations

import os
import signal
import time

import pytest
from sqlalchemy import select

from lcsb_core.models.gguf_import import ensure_default_model
from lcsb_service.models import JobEvent
from lcsb_service.settings import WorkerClass
from tests.worker.conftest import LOST_BOUND_S, TINY_NAN, create_long_job, create_memory_hog

pytestmark = pytest.mark.worker

JOB_BOUND_S = 60.0
DETECT_S = 3.0  # the supervisor notices its child's exit within a poll (0.1 s) plus a database write


def child_pid(service, job_id: str) -> int:
    return next(e["data"]["pid"] for e in service.events(job_id) if e["message"].startswith("Training process started"))


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def assert_serves(service, worker) -> None:
    """The worker runs a normal job to the end afterwards."""
    job = service.create_job()
    done = service.wait(job["id"], {"succeeded", "failed"}, JOB_BOUND_S)
    assert done["status"] == "succeeded", done["error"]
    assert worker is None or worker.proc.poll() is None


def test_sigkill_of_the_training_child(make_settings, start_worker, make_service):
    settings = make_settings()
    service = make_service(settings)
    worker = start_worker(settings)
    job = create_long_job(service, {"save_every": 3})
    service.wait(job["id"], {"running"}, JOB_BOUND_S, step=2)
    os.kill(child_pid(service, job["id"]), signal.SIGKILL)
    t0 = time.monotonic()
    failed = service.wait(job["id"], {"failed"}, DETECT_S)
    print(f"[worker] killed child -> failed in {time.monotonic() - t0:.2f} s (bound {DETECT_S} s)")
    assert failed["error"]["code"] == "worker_lost" and "SIGKILL" in failed["error"]["message"]
    assert_serves(service, worker)


def test_sigkill_of_the_worker(make_settings, start_worker, make_service):
    """The worker running the job dies; its training child dies with it (PDEATHSIG); the other worker's
    reaper fails the job within the heartbeat bound and then serves the next job."""
    settings = make_settings()
    service = make_service(settings)
    job = create_long_job(service, {"save_every": 3})
    doomed = start_worker(settings)
    service.wait(job["id"], {"running"}, JOB_BOUND_S, step=2)
    survivor = start_worker(settings)
    pid = child_pid(service, job["id"])
    doomed.kill()
    t0 = time.monotonic()
    while alive(pid) and time.monotonic() - t0 < 2:
        time.sleep(0.05)
    assert not alive(pid), "the training child outlived its worker"
    failed = service.wait(job["id"], {"failed"}, LOST_BOUND_S)
    print(f"[worker] killed worker -> failed in {time.monotonic() - t0:.2f} s (bound {LOST_BOUND_S} s)")
    assert failed["error"]["code"] == "worker_lost" and "heartbeat" in failed["error"]["message"]
    assert_serves(service, survivor)


def test_cancel_stops_within_one_step_and_keeps_the_checkpoint(make_settings, start_worker, make_service):
    settings = make_settings()
    service = make_service(settings)
    start_worker(settings)
    job = create_long_job(service, {"save_every": 3})
    service.wait(job["id"], {"running"}, JOB_BOUND_S, step=4)  # checkpoint at step 3 published
    r = service.client.post(f"/v1/fine_tuning/jobs/{job['id']}/cancel", headers=service.headers)
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    deadline = time.monotonic() + 10
    while not any(e["message"].startswith("Training stopped") for e in service.events(job["id"])):
        assert time.monotonic() < deadline, "the training did not stop within 10 s"
        time.sleep(0.1)
    with service.app.state.db.session() as s:
        rows = s.execute(select(JobEvent.message, JobEvent.data).where(JobEvent.job_id == job["id"])
                         .order_by(JobEvent.seq)).all()
    cancel_at = [m for m, _ in rows].index("Fine-tuning job cancelled")
    after = [d["step"] for m, d in rows[cancel_at:] if m.startswith("Step ")]
    assert len(after) <= 1, f"steps after the cancel: {after}"
    final = service.job(job["id"])
    assert final["status"] == "cancelled" and final["error"] is None and final["fine_tuned_model"] is None
    ckpts = service.client.get(f"/v1/fine_tuning/jobs/{job['id']}/checkpoints", headers=service.headers).json()["data"]
    assert ckpts and ckpts[0]["step_number"] >= 3
    r = service.client.get(f"/v1/fine_tuning/jobs/{job['id']}/checkpoints/{ckpts[0]['id']}/adapter",
                           headers=service.headers)
    assert r.status_code == 200 and r.content[:2] == b"\x1f\x8b"


def test_a_job_past_its_memory_cap_fails_oom_and_the_worker_goes_on(make_settings, start_worker, make_service,
                                                                    model_dir):
    """The API believes the class holds 8 GiB (the estimate passes); the worker's cap is 1200 MiB, and
    the job (`create_memory_hog`) needs about 2 GiB: the kernel kills the child; the job fails `oom` with
    the cgroup's measured peak."""
    base = ensure_default_model()
    queue = f"cpu-oom-{os.getpid()}"
    dirs = [model_dir, base.parent]
    api_settings = make_settings(worker_classes=[WorkerClass(queue=queue, memory_mib=8192)], model_dirs=dirs)
    worker_settings = make_settings(worker_classes=[WorkerClass(queue=queue, memory_mib=1200)], model_dirs=dirs)
    service = make_service(api_settings)
    worker = start_worker(worker_settings)
    job = create_memory_hog(service, base.name)
    failed = service.wait(job["id"], {"failed", "succeeded"}, JOB_BOUND_S)
    assert failed["status"] == "failed" and failed["error"]["code"] == "oom", (failed["error"], failed["progress"])
    assert "1200 MiB" in failed["error"]["message"] and "measured peak" in failed["error"]["message"]
    assert failed["progress"]["peak_memory_mib"] >= 1100
    assert_serves(service, worker)


def test_nan_loss(make_settings, start_worker, make_service):
    settings = make_settings()
    service = make_service(settings)
    start_worker(settings)
    job = service.create_job(model=TINY_NAN)
    failed = service.wait(job["id"], {"failed", "succeeded"}, JOB_BOUND_S)
    assert failed["error"]["code"] == "nan_loss" and "nan" in failed["error"]["message"].lower()


def test_data_the_worker_rejects_is_invalid_file(make_settings, start_worker, make_service):
    """Valid at upload (structure), but with the base model's tokenizer and 16 tokens per example no
    assistant token is left in any example: nothing to train on."""
    settings = make_settings()
    service = make_service(settings)
    start_worker(settings)
    rows = [{"messages": [{"role": "user", "content": "please " * 40 + str(i)},
                          {"role": "assistant", "content": str(i)}]} for i in range(6)]
    job = service.create_job(service.upload(rows), method={"max_seq_len": 16})
    failed = service.wait(job["id"], {"failed", "succeeded"}, JOB_BOUND_S)
    assert failed["error"]["code"] == "invalid_file" and failed["error"]["param"] == "training_file"
    assert "/" not in failed["error"]["message"].replace("n/a", ""), "a worker path leaked"
    report = failed["data_report"]["training_file"]  # recorded before the job failed
    assert (report["dropped_no_target"], report["dropped_lines"]) == (6, [1, 2, 3, 4, 5, 6])


def test_time_limit_is_timeout_and_keeps_checkpoints(make_settings, start_worker, make_service):
    """A 30 s limit: the loop is asked to stop after its current step; the job fails `timeout`. (A 12 s
    limit ended a job before its first checkpoint, step 3, on a 2-core AVX2 machine where NF4 computes
    in fp32; 30 s leaves room for the model load and three steps there.)"""
    limit_s, grace_s = 30.0, 10.0
    settings = make_settings(job_time_limit_s=limit_s, job_kill_grace_s=grace_s)
    service = make_service(settings)
    start_worker(settings)
    job = create_long_job(service, {"save_every": 3})
    t0 = time.monotonic()
    failed = service.wait(job["id"], {"failed", "succeeded"}, limit_s + grace_s + 5.0)
    print(f"[worker] time limit {limit_s:.0f} s -> failed after {time.monotonic() - t0:.1f} s")
    assert failed["error"]["code"] == "timeout" and "time limit" in failed["error"]["message"]
    ckpts = service.client.get(f"/v1/fine_tuning/jobs/{job['id']}/checkpoints", headers=service.headers).json()["data"]
    assert ckpts, "checkpoints written before the limit are kept"


def test_a_model_missing_on_the_worker_is_an_internal_error(make_settings, start_worker, make_service, tmp_path):
    settings = make_settings()
    service = make_service(settings)
    start_worker(make_settings(worker_classes=settings.worker_classes, model_dirs=[tmp_path]))
    job = service.create_job()
    failed = service.wait(job["id"], {"failed", "succeeded"}, JOB_BOUND_S)
    assert failed["error"]["code"] == "internal_error" and "not installed on this worker" in failed["error"]["message"]
    assert "Traceback" not in failed["error"]["message"]
    events = service.events(job["id"])  # a plain message and the code; the exception's type stays in the log
    assert any(e["level"] == "error" and e["data"] == {"code": "internal_error", "param": None}
               and "not installed on this worker" in e["message"] for e in events)
    assert not any("ModelLoadError" in e["message"] or "Error:" in e["message"] for e in events)
