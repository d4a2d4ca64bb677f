"""The service without parts of itself, on real processes: a Redis server (started here, on its own
port, without persistence, as a restart that loses every message) killed and restarted; and the only
worker killed and never restarted. The API's own sweeper (its lifespan, entered here) re-sends queued
jobs whose message may be lost and fails lost jobs, whether or not any worker runs."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.worker.conftest import LOST_BOUND_S, create_long_job
from tests.worker.test_failures import JOB_BOUND_S, alive, child_pid

pytestmark = pytest.mark.worker

RESEND_S = 2.0       # resend_queued_after_s in these tests
START_BOUND_S = 60.0  # a queued job starts within this of Redis being back (the target)


class RedisServer:
    """`redis-server` on a free port, no persistence; `kill()` (SIGKILL) and `start()` again."""

    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                                      "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                assert time.monotonic() < deadline and self.proc.poll() is None, "redis-server did not start"
                time.sleep(0.05)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    yield server
    server.kill()


def test_redis_restart_loses_no_job(make_settings, start_worker, make_service, redis_server):
    """Two jobs queued in Redis, Redis killed (their messages gone), two jobs created during the outage
    (200 `queued`; the send failed), Redis back, one worker: every job is sent again and succeeds, and
    the worker never idles while one waits: each job starts within 60 s of Redis being back or of the
    previous job's end (one worker runs one job at a time)."""
    settings = make_settings(broker_url=redis_server.url, broker_transport_options={},
                             resend_queued_after_s=RESEND_S)
    service = make_service(settings)
    with service.client:  # the lifespan runs the API's sweeper
        before = [service.create_job()["id"] for _ in range(2)]  # no worker yet: their messages wait in Redis
        redis_server.kill()
        during = [service.create_job() for _ in range(2)]
        assert all(job["status"] == "queued" for job in during)
        redis_server.start()  # empty: the first two messages are lost as well
        back = time.time()
        start_worker(settings)
        runs = []
        for job_id in before + [job["id"] for job in during]:
            done = service.wait(job_id, {"succeeded", "failed", "cancelled"}, 4 * (START_BOUND_S + JOB_BOUND_S))
            assert done["status"] == "succeeded", done["error"]
            events = service.events(job_id)
            assert any(e["message"].startswith("Re-sent to queue") for e in events)
            started = next(e["created_at"] for e in events if e["message"].startswith("Fine-tuning job started"))
            runs.append((started, done["finished_at"]))
        free_since = back
        for started, finished in sorted(runs):
            waited = started - free_since
            print(f"[broker-loss] job started {waited:.1f} s after Redis was back or the worker was free")
            assert waited <= START_BOUND_S + 1  # event times are whole seconds
            free_since = finished


def test_only_worker_killed_and_never_restarted(make_settings, start_worker, make_service):
    """No worker is left to reap: the API's sweeper fails the job `worker_lost` within the bound."""
    settings = make_settings()
    service = make_service(settings)
    with service.client:
        worker = start_worker(settings)
        job = create_long_job(service, {"save_every": 3})
        service.wait(job["id"], {"running"}, JOB_BOUND_S, step=2)
        pid = child_pid(service, job["id"])
        worker.kill()
        t0 = time.monotonic()
        while alive(pid) and time.monotonic() - t0 < 2:
            time.sleep(0.05)
        assert not alive(pid), "the training child outlived its worker"
        failed = service.wait(job["id"], {"failed"}, LOST_BOUND_S)
        print(f"[broker-loss] only worker killed -> failed by the API's sweeper in {time.monotonic() - t0:.2f} s "
              f"(bound {LOST_BOUND_S} s)")
        assert failed["error"]["code"] == "worker_lost" and "heartbeat" in failed["error"]["message"]
