"""Several jobs on one worker, admitted by memory (`WorkerClass.max_concurrent_jobs`,
`worker.training.ledger`), on real workers: with estimates of 3, 3 and 3 GiB and a cap of 8 GiB two jobs
run and the third waits, still queued, then starts when one ends; cancel, a killed training process and
an OOM kill end only their own job while another runs beside it on the same worker; a worker killed with
two running jobs has both failed `worker_lost` by the sweeper. Timing comes from the jobs' recorded
start and end times and events, not from sleeps.

The seam for sizes: a job's recorded `memory_estimate` (what the worker reserves from), written before
the worker that reads it starts."""

from __future__ import annotations

import os
import secrets
import signal
import time
from datetime import datetime

import pytest
from sqlalchemy import select, update

from lcsb_core.models.gguf_import import ensure_default_model
from lcsb_service.models import Job
from lcsb_service.settings import WorkerClass
from tests.worker.conftest import LOST_BOUND_S, chat_rows, create_long_job, create_memory_hog
from tests.worker.test_failures import alive, child_pid

pytestmark = pytest.mark.worker

GIB = 1024
CAP_MIB = 8 * GIB
JOB_BOUND_S = 90.0   # a tiny-model job beside others on 2 CPU cores
SHORT = {"hyperparameters": {"n_epochs": 4}}    # 24 steps
MEDIUM = {"hyperparameters": {"n_epochs": 10}}  # 60 steps


def packed_settings(make_settings, slots: int, **over):
    """Settings whose one class, of 8 GiB, runs `slots` jobs per worker (`over`: other settings)."""
    queue = f"cpu-pack-{secrets.token_hex(3)}"
    return make_settings(worker_classes=[WorkerClass(queue=queue, memory_mib=CAP_MIB, max_concurrent_jobs=slots)],
                         **over)


def force_estimate(service, job_id: str, total_mib: float) -> None:
    """Record `total_mib` as the job's estimated peak (the worker sizes its reservation from it)."""
    with service.app.state.db.session() as s:
        est = s.scalar(select(Job.memory_estimate).where(Job.id == job_id))
        s.execute(update(Job).where(Job.id == job_id).values(memory_estimate={**est, "total_mib": total_mib}))


def span(service, job_id: str) -> tuple[datetime, datetime]:
    """(started_at, finished_at) of a finished job, as the database recorded them."""
    with service.app.state.db.session() as s:
        started, finished = s.execute(select(Job.started_at, Job.finished_at).where(Job.id == job_id)).one()
    assert started is not None and finished is not None, job_id
    return started, finished


def event(service, job_id: str, prefix: str) -> dict:
    return next(e for e in service.events(job_id) if e["message"].startswith(prefix))


def test_two_jobs_of_3_gib_run_in_8_gib_and_the_third_waits_then_starts(make_settings, start_worker, make_service):
    settings = packed_settings(make_settings, slots=3)
    service = make_service(settings)
    ids = [service.create_job(**SHORT)["id"] for _ in range(3)]
    for job_id in ids:
        force_estimate(service, job_id, 3 * GIB)   # reserves 3 x 1.25 = 3,840 MiB: two fit in 8,192
    worker = start_worker(settings)
    for job_id in ids:
        done = service.wait(job_id, {"succeeded", "failed", "cancelled"}, 3 * JOB_BOUND_S)
        assert done["status"] == "succeeded", (done["error"], [e["message"] for e in service.events(job_id)])
    spans = {job_id: span(service, job_id) for job_id in ids}
    first, second, third = sorted(ids, key=lambda j: spans[j][0])
    rel = {j: [(t - spans[first][0]).total_seconds() for t in spans[j]] for j in ids}
    print("[packing] " + ", ".join(f"{rel[j][0]:.1f}-{rel[j][1]:.1f} s" for j in (first, second, third)))
    assert spans[second][0] < spans[first][1] and spans[first][0] < spans[second][1], "the first two ran together"
    assert spans[third][0] >= min(spans[first][1], spans[second][1]), "the third started before one of them ended"
    for job_id in ids:  # never three at once
        assert sum(spans[o][0] <= spans[job_id][0] < spans[o][1] for o in ids if o != job_id) <= 1
    waited = event(service, third, "Waiting on ")
    assert waited["data"] == {"worker": waited["data"]["worker"], "needed_mib": 3840, "reserved_mib": 7680,
                              "worker_memory_mib": CAP_MIB, "running_jobs": 2}
    assert waited["data"]["worker"].startswith(worker.name) and "(the job stays queued)" in waited["message"]
    started = {j: event(service, j, "Fine-tuning job started") for j in ids}
    assert started[third]["created_at"] >= waited["created_at"]
    assert {started[j]["data"]["slot"] for j in (first, second)} == {1, 2}
    for j in ids:
        data = started[j]["data"]
        assert (data["slots"], data["reserved_mib"], data["worker_memory_mib"]) == (3, 3840, CAP_MIB)
        assert started[j]["message"] == (f"Fine-tuning job started on {data['worker']}, slot {data['slot']} of 3, "
                                         "3,840 MiB reserved of 8,192")
        process = event(service, j, "Training process started")
        assert process["data"]["memory_cap_mib"] == 3840 and process["message"].startswith(
            "Training process started, memory cap 3840 MiB")   # the job's cage is its reservation


def test_cancel_and_a_killed_process_end_only_their_own_job(make_settings, start_worker, make_service):
    """Three jobs in three slots: one is cancelled, one's training process is killed, the third succeeds;
    then a job that reserves the whole cap runs, so all three reservations were given back."""
    settings = packed_settings(make_settings, slots=3)
    service = make_service(settings)
    cancelled, killed, kept = (create_long_job(service)["id"], create_long_job(service)["id"],
                               service.create_job(**MEDIUM)["id"])
    whole = service.create_job(**SHORT)["id"]
    force_estimate(service, whole, CAP_MIB)   # reserves the whole cap: only on an empty worker
    start_worker(settings)
    for job_id in (cancelled, killed, kept):
        service.wait(job_id, {"running"}, JOB_BOUND_S, step=2)
    slots = {event(service, j, "Fine-tuning job started")["data"]["slot"] for j in (cancelled, killed, kept)}
    assert slots == {1, 2, 3}
    r = service.client.post(f"/v1/fine_tuning/jobs/{cancelled}/cancel", headers=service.headers)
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    os.kill(child_pid(service, killed), signal.SIGKILL)
    lost = service.wait(killed, {"failed"}, 10.0)
    assert lost["error"]["code"] == "worker_lost" and "SIGKILL" in lost["error"]["message"]
    assert service.job(kept)["status"] == "running"
    done = service.wait(kept, {"succeeded", "failed", "cancelled"}, JOB_BOUND_S)
    assert done["status"] == "succeeded", done["error"]
    assert done["progress"]["steps_completed"] == done["progress"]["total_steps"] == 60
    assert service.job(cancelled)["status"] == "cancelled"
    last = service.wait(whole, {"succeeded", "failed", "cancelled"}, JOB_BOUND_S)
    assert last["status"] == "succeeded", last["error"]
    assert span(service, whole)[0] >= max(span(service, j)[1] for j in (cancelled, killed, kept))
    assert event(service, whole, "Fine-tuning job started")["data"]["reserved_mib"] == CAP_MIB


def test_an_oom_kill_ends_only_the_job_over_its_reservation(make_settings, start_worker, make_service, model_dir):
    """Two jobs on one 8 GiB worker: the hog's estimate is forced to 960 MiB (so it reserves 1,200), while
    the hog (`create_memory_hog`, SmolLM2-135M) needs about 2 GiB: its cgroup kills it, not its neighbour
    (the tiny model), which succeeds."""
    base = ensure_default_model()
    settings = packed_settings(make_settings, slots=2, model_dirs=[model_dir, base.parent])
    service = make_service(settings)
    hog = create_memory_hog(service, base.name)["id"]
    neighbour = service.create_job(service.upload(chat_rows(12)), **MEDIUM)
    force_estimate(service, hog, 960)
    start_worker(settings)
    failed = service.wait(hog, {"failed", "succeeded"}, JOB_BOUND_S)
    assert failed["status"] == "failed" and failed["error"]["code"] == "oom", (failed["error"], failed["progress"])
    assert "1200 MiB" in failed["error"]["message"] and failed["progress"]["peak_memory_mib"] >= 1100
    done = service.wait(neighbour["id"], {"succeeded", "failed", "cancelled"}, JOB_BOUND_S)
    assert done["status"] == "succeeded", done["error"]
    hog_span, kept_span = span(service, hog), span(service, neighbour["id"])
    assert hog_span[0] < kept_span[1] and kept_span[0] < hog_span[1], "the two did not run together"
    reserved = event(service, neighbour["id"], "Fine-tuning job started")["data"]["reserved_mib"]
    print(f"[packing] neighbour: estimate {neighbour['memory_estimate']['total_mib']} MiB, reserved {reserved} MiB, "
          f"measured peak {done['progress']['peak_memory_mib']} MiB")
    assert done["progress"]["peak_memory_mib"] <= reserved


def test_a_killed_worker_with_two_running_jobs_has_both_failed_by_the_sweeper(make_settings, start_worker,
                                                                               make_service):
    settings = packed_settings(make_settings, slots=2)
    service = make_service(settings)
    ids = [create_long_job(service)["id"] for _ in range(2)]
    doomed = start_worker(settings)
    for job_id in ids:
        service.wait(job_id, {"running"}, JOB_BOUND_S, step=2)
    workers = {event(service, j, "Fine-tuning job started")["data"]["worker"] for j in ids}
    assert len(workers) == 1 and workers.pop().startswith(doomed.name)   # one worker hostname, two running jobs
    survivor = start_worker(packed_settings(make_settings, slots=2))      # another class: only its sweeper matters
    pids = [child_pid(service, j) for j in ids]
    doomed.kill()
    t0 = time.monotonic()
    while any(alive(p) for p in pids) and time.monotonic() - t0 < 2:
        time.sleep(0.05)
    assert not any(alive(p) for p in pids), "a training process outlived its worker"
    for job_id in ids:
        failed = service.wait(job_id, {"failed"}, LOST_BOUND_S)
        assert failed["error"]["code"] == "worker_lost" and "heartbeat" in failed["error"]["message"]
    print(f"[packing] killed worker with 2 jobs -> both failed in {time.monotonic() - t0:.2f} s "
          f"(bound {LOST_BOUND_S} s)")
    assert survivor.proc.poll() is None
