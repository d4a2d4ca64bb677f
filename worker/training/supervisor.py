"""One job on a worker: admit it to a slot by memory, claim it, run the training child under its memory
reservation, keep the job's heartbeat, enforce the time limits, and put the job in its terminal state.

    run_job(ctx, job_id, worker="lcsb-cpu@host")  ->  "succeeded" | "failed" | "cancelled" | "skipped"

0. `admission.admit`: a reservation of the worker's memory in one of its `max_concurrent_jobs` slots,
   waited for while the job stays `queued` (with one slot: the whole cap, at once). None: "skipped".
   The reservation is released when the job has ended, whatever the outcome.
1. `transitions.claim` (queued -> running, row-locked): a second delivery of the job gets None and
   returns "skipped" without touching anything. Its event names the worker and the slot.
2. A memory cage (`worker.limits`) of the reservation's size, so that one job cannot take another's
   share, and a fresh child process (`python -m worker.training.child`, given a `ChildSpec` that names
   its slot and the worker's slot count). While it runs, the
   supervisor writes a heartbeat every `heartbeat_interval_s`; at the job's time limit it signals the
   child to stop (SIGUSR1, outcome `timeout`), `job_kill_grace_s` later it kills it. A job that left
   `running` (cancelled, or failed by a reaper) and whose child does not stop within the grace period
   is killed too.
3. The child's outcome -> `finish` (with the run's artifacts published, in one transaction that holds
   the row lock: a cancel that came first wins) or `fail` with its code. No outcome file: a SIGKILL
   with an OOM kill counted in the cgroup is `oom` with the cgroup's measured peak; another kill is
   `worker_lost`; any other exit is `internal_error`. The local run folder is then removed (its
   outputs are in storage).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from lcsb_service import transitions
from lcsb_service.artifacts import publish_run
from lcsb_service.errors import NotFound
from lcsb_service.events import add_event, heartbeat
from lcsb_service.job_records import owner_name, record_peak
from lcsb_service.jobspec import fine_tuned_model_name
from lcsb_service.models import Job
from lcsb_service.settings import Settings
from lcsb_service.status import JobStatus
from worker.context import WorkerContext
from worker.limits import Cage, create_cage
from worker.threads import thread_policy
from worker.training import admission
from worker.training.allocator import ChildMalloc, child_malloc
from worker.training.ledger import Reservation
from worker.training.outcome import INTERNAL_MESSAGE, Outcome, oom_message, read_outcome
from worker.training.spec import CageSpec, ChildSpec

CHILD_MODULE = "worker.training.child"   # `python -m` this, with the spec file's path

log = logging.getLogger(__name__)
POLL_S = 0.1


def run_job(ctx: WorkerContext, job_id: str, *, worker: str) -> str:
    """Admit, claim and run one job; returns the job's final status, or "skipped" when it was not queued
    (a repeated delivery, a job cancelled while queued or while it waited for memory, an unknown id, a
    worker shutting down while the job waited)."""
    reservation = admission.admit(ctx, job_id, worker=worker)
    if reservation is None:
        log.info("job %s is not queued (a repeated delivery, cancelled, or unknown) or the worker is stopping: "
                 "nothing to do", job_id)
        return "skipped"
    try:
        return _claim_and_run(ctx, job_id, worker, reservation)
    finally:
        admission.release(ctx, reservation)


def _claim_and_run(ctx: WorkerContext, job_id: str, worker: str, reservation: Reservation) -> str:
    try:
        with ctx.db.session() as s:
            job = transitions.claim(s, job_id, worker=worker, placement=reservation.describe(),
                                    placement_data=reservation.to_data())
            owner = owner_name(s, job.owner_id) if job is not None else ""
    except NotFound:
        job = None
    if job is None:
        log.info("job %s is not queued (a repeated delivery, cancelled, or unknown): nothing to do", job_id)
        return "skipped"
    name = fine_tuned_model_name(job.model, owner, job.suffix, job.id)
    run_dir, work = _folders(ctx, job.id)
    try:
        outcome = _train(ctx, job, name, run_dir, work, reservation)
    except Exception as exc:  # the job must still end
        log.exception("job %s: supervisor error", job_id)
        outcome = Outcome.failed("internal_error", INTERNAL_MESSAGE, detail=f"{type(exc).__name__}: {exc}")
    try:
        status = conclude(ctx, job, outcome, name)
    finally:
        if outcome.status == JobStatus.FAILED:
            log.warning("job %s ended %s (%s); training log tail:\n%s", job_id, outcome.status, outcome.code,
                        _tail(work / "child.log"))
        for folder in (run_dir, work):  # everything worth keeping is in storage now
            shutil.rmtree(folder, ignore_errors=True)
    return status


def _folders(ctx: WorkerContext, job_id: str) -> tuple[Path, Path]:
    """The run folder (the trainer's output) and the supervisor's work folder (spec, outcome, log)."""
    run_dir = (ctx.settings.resolved_runs_dir / job_id).resolve()
    return run_dir, run_dir.with_name(f".{job_id}")


def _child_env(settings: Settings, malloc: ChildMalloc, slots: int = 1) -> dict[str, str]:
    """The training process's environment: this process's, unbuffered output, its threads and OpenMP wait
    policy (`worker.threads`: the settings' override, else derived from this worker's CPUs and
    its `slots` concurrent jobs; torch and OpenMP read them at start) and `malloc`'s LD_PRELOAD."""
    policy = thread_policy(override=settings.worker_torch_threads, wait_policy=settings.worker_omp_wait_policy,
                           slots=slots)
    return malloc.env({**os.environ, "PYTHONUNBUFFERED": "1", **policy.env()})


def _train(ctx: WorkerContext, job: Job, fine_tuned_model: str, run_dir: Path, work: Path,
           reservation: Reservation) -> Outcome:
    settings, wc = ctx.settings, ctx.settings.worker_class
    for folder in (run_dir, work):  # a run starts afresh
        shutil.rmtree(folder, ignore_errors=True)
    work.mkdir(parents=True)
    cap_mib = reservation.mib   # the job's share of the worker's cap (all of it with one slot)
    cage = create_cage(job.id, cap_mib, device=wc.device, configured_parent=settings.cgroup_parent,
                       address_space_slack_mib=settings.address_space_slack_mib)
    limit = settings.job_time_limit_s
    spec = ChildSpec(job_id=job.id, database_url=settings.resolved_database_url,
                     storage_url=settings.resolved_storage_url,
                     model_dirs=tuple(str(p) for p in settings.resolved_model_dirs), run_dir=str(run_dir),
                     device=wc.device, cage=CageSpec(**cage.to_spec()), parent_pid=os.getpid(),
                     result_path=str(work / "outcome.json"), fine_tuned_model=fine_tuned_model, time_limit_s=limit,
                     slot=reservation.slot, slots=reservation.slots)
    spec_path = work / "spec.json"
    spec.write(spec_path)
    proc = None
    malloc = child_malloc(settings.worker_malloc) if wc.device == "cpu" else ChildMalloc("glibc")
    try:
        with open(work / "child.log", "wb") as child_log:
            proc = subprocess.Popen([sys.executable, "-m", CHILD_MODULE, str(spec_path)], stdout=child_log,
                                    stderr=subprocess.STDOUT, env=_child_env(settings, malloc, reservation.slots))
        _event(ctx, job.id, f"Training process started, memory cap {cap_mib} MiB ({cage.describe()}), "
               f"on {wc.device}, C allocator {malloc.describe()}",
               data={"pid": proc.pid, "memory_cap_mib": cap_mib, "limiter": cage.kind, "device": wc.device,
                     "time_limit_s": limit, "malloc": malloc.name, **reservation.to_data()})
        return _supervise(ctx, job.id, proc, cage, limit, work)
    finally:
        if proc is not None and proc.poll() is None:  # the supervisor itself failed: no orphan training
            proc.kill()
            proc.wait()
        cage.remove()


def _supervise(ctx: WorkerContext, job_id: str, proc: subprocess.Popen, cage: Cage, limit: float,
               work: Path) -> Outcome:
    settings = ctx.settings
    start = time.monotonic()
    next_beat, signalled_at, stopped_at, killed_for = start + settings.heartbeat_interval_s, None, None, None
    while proc.poll() is None:
        time.sleep(POLL_S)
        now = time.monotonic()
        if now >= next_beat:
            next_beat = now + settings.heartbeat_interval_s
            if _beat(ctx, job_id) and stopped_at is None:
                stopped_at = now
        if signalled_at is None and now - start >= limit:
            signalled_at = now
            proc.send_signal(signal.SIGUSR1)
            _event(ctx, job_id, f"Time limit of {limit:.0f} s reached: stopping after the current step", "warn")
        for since, reason in ((signalled_at, "timeout"), (stopped_at, "stopped")):
            if since is not None and now - since >= settings.job_kill_grace_s and killed_for is None:
                killed_for = reason
                proc.kill()
    rc = proc.wait()
    peak = cage.peak_mib()
    outcome = read_outcome(work / "outcome.json")
    if killed_for == "timeout" or (outcome is None and signalled_at is not None):
        return Outcome.failed("timeout", f"The job reached its time limit of {limit:.0f} s and was stopped",
                              peak_memory_mib=peak)
    if outcome is not None:  # its peak is the trainer's (resident set / CUDA allocated), not the cgroup's
        outcome.peak_memory_mib = outcome.peak_memory_mib or peak
        return outcome
    if killed_for == "stopped":
        return Outcome(JobStatus.CANCELLED)
    if rc == -signal.SIGKILL and (cage.oom_kills() or 0) > 0:
        return Outcome.failed("oom", oom_message(cage.cap_mib, peak), peak_memory_mib=peak)
    if rc < 0:
        return Outcome.failed("worker_lost", f"The training process was killed ({signal.Signals(-rc).name}) "
                              "before the job finished", peak_memory_mib=peak)
    return Outcome.failed("internal_error", INTERNAL_MESSAGE, peak_memory_mib=peak,
                          detail=f"the training process exited with status {rc} without an outcome: "
                                 f"{_tail(work / 'child.log')}")


def _beat(ctx: WorkerContext, job_id: str) -> bool:
    """Heartbeat; returns True when the job is no longer running (cancelled or reaped)."""
    try:
        with ctx.db.session() as s:
            heartbeat(s, job_id)
            return transitions.should_stop(s, job_id)
    except Exception:  # keep supervising through a database blip
        log.warning("job %s: heartbeat failed", job_id, exc_info=True)
        return False


def _event(ctx: WorkerContext, job_id: str, message: str, level: str = "info", data: dict | None = None) -> None:
    try:
        with ctx.db.session() as s:
            add_event(s, job_id, message, level=level, data=data)
    except Exception:
        log.warning("job %s: could not record event %r", job_id, message, exc_info=True)


def _tail(path: Path, chars: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def conclude(ctx: WorkerContext, job: Job, outcome: Outcome, fine_tuned_model: str) -> str:
    """Apply the outcome to the job row; returns the job's status afterwards."""
    with ctx.db.session() as s:
        current = transitions.lock_job(s, job.id)
        if outcome.peak_memory_mib is not None and current.status == JobStatus.RUNNING:
            record_peak(s, job.id, outcome.peak_memory_mib)
        if current.status != JobStatus.RUNNING:
            note = ("Training stopped: the job was cancelled; its checkpoints are kept"
                    if outcome.status == JobStatus.CANCELLED
                    else f"The training's late result ({outcome.status}) was discarded: the job is {current.status}")
            add_event(s, job.id, note, data={"steps_completed": outcome.steps})
            return current.status
        if outcome.status == JobStatus.SUCCEEDED:
            run_dir, work = _folders(ctx, job.id)
            public = {str(work): ""} | {str(d): "" for m in ctx.settings.resolved_model_dirs for d in (m, m.resolve())}
            files = publish_run(s, ctx.storage, job_id=job.id, owner_id=job.owner_id, run_dir=run_dir,
                                public_paths=public)
            transitions.finish(s, job.id, fine_tuned_model=fine_tuned_model,
                               trained_tokens=outcome.summary.get("trained_tokens"), result_files=files,
                               result=outcome.result)
            return JobStatus.SUCCEEDED
        if outcome.status == JobStatus.CANCELLED:  # the child saw a stop that the row no longer shows: treat as lost
            outcome = Outcome.failed("internal_error", INTERNAL_MESSAGE, detail="training stopped while running")
        if outcome.detail:  # exception text stays in the worker's log; the job's event has message and code
            log.error("job %s failed (%s): %s", job.id, outcome.code, outcome.detail)
        transitions.fail(s, job.id, outcome.code or "internal_error", outcome.message or INTERNAL_MESSAGE,
                         outcome.param)
        return JobStatus.FAILED
