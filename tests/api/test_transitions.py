"""Job status transitions (`lcsb_service.transitions`) and the worker-side writers (`events`), on the
real migrated database of each backend."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import select

from lcsb_core.training.callbacks import EvalProgress, EvalReport, StepReport
from lcsb_service import transitions
from lcsb_service.db import Database
from lcsb_service.errors import Conflict, NotFound
from lcsb_service.events import add_event, record_progress
from lcsb_service.models import Job, JobEvent
from tests.api.helpers import job_ok
from worker.threads import ThreadPolicy
from worker.training.reporter import EVAL_PROGRESS_EVERY_S, JobReporter


@pytest.fixture
def db(app) -> Database:
    return app.state.db


@pytest.fixture
def job_id(client, alice) -> str:
    return job_ok(client, alice)["id"]


def status(db: Database, job_id: str) -> str:
    with db.session() as s:
        return s.scalar(select(Job.status).where(Job.id == job_id))


def messages(db: Database, job_id: str) -> list[str]:
    with db.session() as s:
        return list(s.scalars(select(JobEvent.message).where(JobEvent.job_id == job_id).order_by(JobEvent.seq)))


def test_claim_finish(db, job_id):
    with db.session() as s:
        job = transitions.claim(s, job_id, worker="w1")
        assert job is not None and job.status == "running" and job.started_at is not None
    with db.session() as s:  # a second delivery of the same task does nothing
        assert transitions.claim(s, job_id, worker="w2") is None
    with db.session() as s:
        done = transitions.finish(s, job_id, fine_tuned_model="ft:m:o::j", trained_tokens=1234, result_files=["f"])
        assert done.status == "succeeded" and done.trained_tokens == 1234 and done.result_files == ["f"]
    assert status(db, job_id) == "succeeded"
    with db.session() as s:
        assert transitions.finish(s, job_id, fine_tuned_model="again") is None
        assert transitions.fail(s, job_id, "oom", "late") is None
        with pytest.raises(Conflict):
            transitions.cancel(s, job_id)
    assert messages(db, job_id)[-2:] == ["Fine-tuning job started on w1", "The job has successfully completed"]


def test_late_success_never_overwrites_cancelled(db, job_id):
    with db.session() as s:
        transitions.claim(s, job_id)
    with db.session() as s:
        assert not transitions.should_stop(s, job_id)
        assert transitions.cancel(s, job_id).status == "cancelled"
    with db.session() as s:
        assert transitions.should_stop(s, job_id)
        assert transitions.finish(s, job_id, fine_tuned_model="ft:late") is None
        assert transitions.fail(s, job_id, "worker_lost", "gone") is None
    with db.session() as s:
        job = s.get(Job, job_id)
        assert job.status == "cancelled" and job.fine_tuned_model is None and job.error_code is None


def test_fail_records_the_error(client, alice, db, job_id):
    with db.session() as s:
        transitions.fail(s, job_id, "invalid_file", "line 3: bad role", param="training_file")
    body = client.get(f"/v1/fine_tuning/jobs/{job_id}", headers=alice.headers).json()
    assert body["status"] == "failed" and body["finished_at"] is not None
    assert body["error"] == {"code": "invalid_file", "message": "line 3: bad role", "param": "training_file"}
    events = client.get(f"/v1/fine_tuning/jobs/{job_id}/events", headers=alice.headers).json()["data"]
    assert events[0]["level"] == "error" and "bad role" in events[0]["message"]
    with db.session() as s:  # a failed job cannot be claimed
        assert transitions.claim(s, job_id) is None


def test_unknown_job(db):
    with db.session() as s, pytest.raises(NotFound):
        transitions.claim(s, "ftjob-missing")


def test_concurrent_claims_let_exactly_one_win(db, job_id):
    """Eight workers receive the same job at once (broker redelivery): one claim applies."""
    barrier, results = threading.Barrier(8), []

    def worker(n: int) -> None:
        barrier.wait()
        with db.session() as s:
            results.append(transitions.claim(s, job_id, worker=f"w{n}") is not None)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 7 + [True]
    assert sum(m.startswith("Fine-tuning job started") for m in messages(db, job_id)) == 1


def test_cancel_racing_finish_ends_in_one_terminal_state(db, job_id):
    with db.session() as s:
        transitions.claim(s, job_id)
    barrier, outcomes = threading.Barrier(2), {}

    def do_cancel() -> None:
        barrier.wait()
        with db.session() as s:
            try:
                outcomes["cancel"] = transitions.cancel(s, job_id).status
            except Conflict:
                outcomes["cancel"] = "conflict"

    def do_finish() -> None:
        barrier.wait()
        with db.session() as s:
            outcomes["finish"] = transitions.finish(s, job_id, fine_tuned_model="ft:x") is not None

    threads = [threading.Thread(target=do_cancel), threading.Thread(target=do_finish)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    final = status(db, job_id)
    assert (final, outcomes) in [("cancelled", {"cancel": "cancelled", "finish": False}),
                                 ("succeeded", {"cancel": "conflict", "finish": True})]


def test_progress_and_events(client, alice, db, job_id):
    with db.session() as s:
        record_progress(s, job_id, steps_completed=5, total_steps=10, elapsed_s=50.0)  # not running: ignored
    with db.session() as s:
        transitions.claim(s, job_id)
    with db.session() as s:
        record_progress(s, job_id, steps_completed=5, total_steps=20, trained_tokens=4096, peak_memory_mib=812.5,
                        elapsed_s=50.0)
        add_event(s, job_id, "Step 5/20: training loss=1.50", type="metrics", data={"step": 5, "train_loss": 1.5})
        with pytest.raises(ValueError):
            add_event(s, job_id, "x", level="debug")
    body = client.get(f"/v1/fine_tuning/jobs/{job_id}", headers=alice.headers).json()
    assert body["progress"]["steps_completed"] == 5 and body["progress"]["total_steps"] == 20
    assert body["progress"]["percent"] == 25.0 and body["progress"]["peak_memory_mib"] == 812.5
    assert body["trained_tokens"] == 4096 and body["progress"]["heartbeat_at"] is not None
    assert 140 <= body["estimated_finish"] - body["progress"]["heartbeat_at"] <= 160  # 15 steps x 10 s
    event = client.get(f"/v1/fine_tuning/jobs/{job_id}/events?limit=1", headers=alice.headers).json()["data"][0]
    assert event["type"] == "metrics" and event["data"] == {"step": 5, "train_loss": 1.5}


def step_report(step: int, total: int, *, step_time_s: float, elapsed_s: float) -> StepReport:
    return StepReport(step=step, total_steps=total, loss=1.0, lr=1e-4, grad_norm=0.5, tokens=512, target_tokens=200,
                      tokens_per_s=512 / step_time_s, step_time_s=step_time_s, peak_memory_mib=800.0,
                      elapsed_s=elapsed_s)


def test_estimated_finish_follows_the_measured_step_rate_of_a_running_job(client, alice, app, db, job_id):
    def job() -> dict:
        return client.get(f"/v1/fine_tuning/jobs/{job_id}", headers=alice.headers).json()

    def reporter() -> JobReporter:  # the worker's callback, writing to this database
        return JobReporter(db, app.state.storage, job_id, "ft:x", threading.Event())

    assert job()["estimated_finish"] is None  # queued
    with db.session() as s:
        transitions.claim(s, job_id)
    assert job()["estimated_finish"] is None  # running, no step yet
    run = reporter()
    run.on_step(step_report(1, 100, step_time_s=2.0, elapsed_s=32.0))  # after a 30 s step-0 evaluation
    body = job()
    assert 190 <= body["estimated_finish"] - body["progress"]["heartbeat_at"] <= 200  # 99 steps x 2 s, not 32 s
    assert body["estimated_finish"] >= time.time() + 180
    run.on_step(step_report(2, 100, step_time_s=2.0, elapsed_s=34.0))
    run.on_step(step_report(3, 100, step_time_s=2.0, elapsed_s=46.0))  # a 10 s evaluation after step 2 counts
    body = job()
    assert 512 <= body["estimated_finish"] - body["progress"]["heartbeat_at"] <= 522  # 97 steps x 16 s / 3

    resumed = reporter()  # a resumed run: its clock starts again at step 51
    resumed.on_step(step_report(51, 100, step_time_s=2.0, elapsed_s=2.0))
    resumed.on_step(step_report(52, 100, step_time_s=2.0, elapsed_s=4.0))
    body = job()
    assert 90 <= body["estimated_finish"] - body["progress"]["heartbeat_at"] <= 100  # 48 steps x 2 s
    with db.session() as s:
        transitions.finish(s, job_id, fine_tuned_model="ft:x")
    assert job()["estimated_finish"] is None


def test_the_step_0_evaluation_after_the_first_step_is_left_out_of_the_step_rate(client, alice, app, db, job_id):
    with db.session() as s:
        transitions.claim(s, job_id)
    run = JobReporter(db, app.state.storage, job_id, "ft:x", threading.Event())
    run.on_step(step_report(1, 100, step_time_s=2.0, elapsed_s=2.0))
    run.on_eval(EvalReport(step=0, eval_loss=1.76, eval_token_accuracy=0.6, eval_target_tokens=900, elapsed_s=24.0,
                           eval_time_s=22.0))  # the trainer's deferred step-0 evaluation
    run.on_step(step_report(2, 100, step_time_s=2.0, elapsed_s=26.0))
    run.on_eval(EvalReport(step=2, eval_loss=1.5, eval_token_accuracy=0.6, eval_target_tokens=900, elapsed_s=48.0,
                           eval_time_s=22.0))  # a later evaluation is the job's time: it counts
    run.on_step(step_report(3, 100, step_time_s=2.0, elapsed_s=50.0))
    body = client.get(f"/v1/fine_tuning/jobs/{job_id}", headers=alice.headers).json()
    # (50 - 22) s over 3 steps = 9.33 s a step, 97 steps left; with the step-0 evaluation it would be 16.7 s
    assert 895 <= body["estimated_finish"] - body["progress"]["heartbeat_at"] <= 915


def test_a_long_evaluation_reports_its_progress_every_20_s(app, db, job_id):
    assert EVAL_PROGRESS_EVERY_S == 20.0
    with db.session() as s:
        transitions.claim(s, job_id)
    run = JobReporter(db, app.state.storage, job_id, "ft:x", threading.Event())
    before = len(messages(db, job_id))
    for n in range(1, 9):  # step 0: 8 validation batches of 10 s each
        run.on_eval_progress(EvalProgress(step=0, batches_done=n, batches_total=8, elapsed_s=10.0 * n))
    for n in range(1, 4):  # step 5: 3 batches of 25 s; a new evaluation starts its own clock
        run.on_eval_progress(EvalProgress(step=5, batches_done=n, batches_total=3, elapsed_s=25.0 * n))
    # 20, 40 and 60 s into the first; 25 and 50 s into the second; never at the last batch, whose
    # evaluation event comes at once
    assert messages(db, job_id)[before:] == [
        "Evaluating at step 0: 2/8 validation batches, 20 s", "Evaluating at step 0: 4/8 validation batches, 40 s",
        "Evaluating at step 0: 6/8 validation batches, 60 s", "Evaluating at step 5: 1/3 validation batches, 25 s",
        "Evaluating at step 5: 2/3 validation batches, 50 s"]
    with db.session() as s:
        event = s.scalars(select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.seq.desc())).first()
        assert event.data == {"step": 5, "eval_batches_done": 2, "eval_batches_total": 3, "eval_elapsed_s": 50.0}


def test_a_graded_evaluation_reports_decoding_steps_and_keeps_the_heartbeat(app, db, job_id):
    with db.session() as s:
        transitions.claim(s, job_id)
        s.get(Job, job_id).heartbeat_at = None
    run = JobReporter(db, app.state.storage, job_id, "ft:x", threading.Event())
    before = len(messages(db, job_id))
    run.on_eval_progress(EvalProgress(step=4, batches_done=2, batches_total=2, elapsed_s=5.0))  # the loss pass
    for n in range(1, 31):  # then generation: 1.5 s per decoding step, on the evaluation's clock
        run.on_eval_progress(EvalProgress(step=4, batches_done=n, batches_total=256, elapsed_s=5.0 + 1.5 * n,
                                          phase="graded"))
    # every 20 s of the evaluation's clock, as for validation batches
    assert messages(db, job_id)[before:] == ["Evaluating at step 4: answering prompts, 10/256 decoding steps, 20 s",
                                              "Evaluating at step 4: answering prompts, 24/256 decoding steps, 41 s"]
    with db.session() as s:
        event = s.scalars(select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.seq.desc())).first()
        assert event.data["eval_phase"] == "graded" and s.get(Job, job_id).heartbeat_at is not None


def test_the_start_event_states_the_threads_and_where_they_came_from(db, job_id):
    with db.session() as s:
        transitions.claim(s, job_id)
    info = {"total_steps": 100, "start_step": 0, "config": {"log_every": 1}, "num_layers": 30, "k": 8,
            "schedule": "topfull", "schedule_description": "30 layers (8 trained per step, topfull)", "full_every": 4,
            "device": "cpu", "torch_threads": 2, "c_allocator": "jemalloc", "train_examples": 400,
            "eval_examples": 64, "lora_parameters": 4884480, "learning_rate": 8e-4, "warmup_steps": 5,
            "lr_schedule": "linear"}
    policy = ThreadPolicy(threads=2, threads_from="cpu quota", wait_policy="PASSIVE", wait_from="default", cpus=2.0,
                          slots=1, quota_cpus=2.0, affinity_cpus=8)
    JobReporter(db, None, job_id, "ft:x", threading.Event(), thread_policy=policy).on_start(info)
    JobReporter(db, None, job_id, "ft:x", threading.Event()).on_start(info)  # outside a worker: no policy
    with db.session() as s:
        stated, bare = s.scalars(select(JobEvent).where(JobEvent.job_id == job_id,
                                                        JobEvent.message.startswith("Training started"))
                                 .order_by(JobEvent.seq)).all()
    assert stated.message == ("Training started: 100 steps, 30 layers (8 trained per step, topfull), 400 examples, "
                              "cpu, 2 CPU threads (2 CPUs by the cgroup quota / 1 training slot), OpenMP wait PASSIVE; "
                              "learning rate 0.0008 after 5 warmup steps, linear after that")
    assert stated.data["thread_policy"] == {"threads": 2, "threads_from": "cpu quota", "wait_policy": "PASSIVE",
                                            "wait_from": "default", "cpus": 2.0, "slots": 1, "quota_cpus": 2.0,
                                            "affinity_cpus": 8}
    assert stated.data["torch_threads"] == 2
    assert bare.data["thread_policy"] is None and ", cpu; learning rate" in bare.message


@pytest.mark.parametrize(("dtype", "quantization", "said"), [("float32", "nf4", True), ("bfloat16", "nf4", False),
                                                             ("float32", "fp32", False)])
def test_the_start_event_says_when_an_nf4_base_computes_in_fp32(db, job_id, dtype, quantization, said):
    """A CPU without native bf16 computes an NF4 base in fp32 (other losses, shares and peaks than the
    README's bf16 numbers): the start event says so; a bf16 CPU, or a job that asked for fp32, says nothing."""
    with db.session() as s:
        transitions.claim(s, job_id)
    info = {"total_steps": 10, "start_step": 0, "config": {"log_every": 1, "model": {"quantization": quantization}},
            "num_layers": 30, "k": 8, "schedule": "full", "schedule_description": "30 layers (all, full)",
            "full_every": None, "device": "cpu", "torch_threads": 2, "c_allocator": "jemalloc", "train_examples": 40,
            "eval_examples": 0, "lora_parameters": 1, "learning_rate": 8e-4, "warmup_steps": 5,
            "lr_schedule": "linear", "compute_dtype": dtype}
    JobReporter(db, None, job_id, "ft:x", threading.Event()).on_start(info)
    with db.session() as s:
        event = s.scalars(select(JobEvent).where(JobEvent.job_id == job_id,
                                                 JobEvent.message.startswith("Training started"))).one()
    clause = "cpu; the NF4 base computes in fp32 (this CPU has no native bf16); learning rate 0.0008"
    assert (clause in event.message) is said and event.data["compute_dtype"] == dtype
    assert event.message.endswith("learning rate 0.0008 after 5 warmup steps, linear after that")
