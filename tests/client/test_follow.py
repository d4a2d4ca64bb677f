"""`lcsb jobs follow`: the progress bar from the job's metrics events, the exit code of its outcome,
and resuming after a dropped connection with Last-Event-ID, against the live API. The worker is
stood in for by a thread writing events and transitions through lcsb_service (as worker/ does)."""

from __future__ import annotations

import io
import re
import threading
import time

import httpx
import pytest
from rich.console import Console

from lcsb_client.follow import follow_job
from lcsb_client.service import Service
from lcsb_service import transitions
from tests.client.conftest import ONE_BACKEND
from tests.client.helpers import evaluate, new_job, run_to_success, start, step

pytestmark = ONE_BACKEND


def in_background(target) -> threading.Thread:  # a zero-argument callable
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def test_follow_shows_progress_and_exits_0_on_success(lcsb, svc, app, tmp_path):
    job_id = new_job(svc, tmp_path)["id"]

    def worker() -> None:
        time.sleep(0.3)  # let follow connect first: these events arrive live
        start(app, job_id, total=5)
        for n in range(1, 6):
            step(app, job_id, n, total=5)
            time.sleep(0.05)
        evaluate(app, job_id, 5, total=5)
        with app.state.db.session() as s:
            transitions.finish(s, job_id, fine_tuned_model="ft:smol:follow", trained_tokens=2560)

    thread = in_background(worker)
    r = lcsb("jobs", "follow", job_id)
    thread.join(10)
    assert r.exit_code == 0, r.output
    err = r.stderr
    assert "Training started: 5 steps" in err and "Step 5/5: validation loss=0.7000" in err
    bar = next(line for line in err.splitlines() if line.startswith("train "))
    assert "5/5" in bar and "loss 0.5000" in bar and "1,234 tok/s" in bar and "peak 817 MiB" in bar
    assert "Step 3/5: training loss" not in err  # step events drive the bar, not lines
    assert err.rstrip().endswith(f"{job_id} succeeded: fine-tuned model ft:smol:follow, 2,560 trained tokens")


def test_follow_without_a_terminal_prints_progress_lines_between_evaluations(lcsb, svc, app, tmp_path):
    job_id = new_job(svc, tmp_path)["id"]

    def worker() -> None:
        time.sleep(0.3)
        start(app, job_id, total=20)
        for n in range(1, 21):
            step(app, job_id, n, total=20)
            if n % 10 == 0:
                evaluate(app, job_id, n, total=20)
        with app.state.db.session() as s:
            transitions.finish(s, job_id, fine_tuned_model="ft:smol:lines", trained_tokens=20 * 512)

    thread = in_background(worker)
    r = lcsb("jobs", "follow", job_id)  # CliRunner's streams are not a terminal
    thread.join(10)
    assert r.exit_code == 0, r.output
    lines = r.stderr.splitlines()
    pattern = re.compile(r"^\d\d:\d\d:\d\d step (\d+)/20 \((\d+)%\)  loss (-?\d\.\d{4})  1,234 tok/s  "
                         r"ETA \d+:\d\d:\d\d$")
    progress = [(i, pattern.match(line)) for i, line in enumerate(lines) if pattern.match(line)]
    steps = [int(m[1]) for _, m in progress]
    assert steps == [1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 20]  # the first, every 10 % (2 steps), the last
    for _, m in progress:
        n = int(m[1])
        assert int(m[2]) == round(100 * n / 20) and float(m[3]) == pytest.approx(round(1.0 - n / 10, 4))
    evals = [i for i, line in enumerate(lines) if "Step 10/20: validation loss" in line or
             "Step 20/20: validation loss" in line]
    assert len(evals) == 2
    between = [n for (i, m), n in zip(progress, steps, strict=True) if evals[0] < i < evals[1]]
    assert between == [11, 13, 15, 17, 19, 20]
    assert r.stderr.rstrip().endswith(f"{job_id} succeeded: fine-tuned model ft:smol:lines, 10,240 trained tokens")


def test_follow_exits_1_with_the_error_when_the_job_fails(lcsb, svc, app, tmp_path):
    job_id = new_job(svc, tmp_path)["id"]

    def worker() -> None:
        time.sleep(0.2)
        start(app, job_id, total=10)
        step(app, job_id, 1, total=10)
        with app.state.db.session() as s:
            transitions.fail(s, job_id, "oom", "the training process ran out of memory at step 2")

    thread = in_background(worker)
    r = lcsb("jobs", "follow", job_id)
    thread.join(10)
    assert r.exit_code == 1, r.output
    bar = next(line for line in r.stderr.splitlines() if line.startswith("train "))
    assert "1/10" in bar and "loss 0.9000" in bar
    assert "Fine-tuning job failed: the training process ran out of memory" in r.stderr
    assert r.stderr.rstrip().endswith(f"{job_id} failed\n"
                                      "error (oom): the training process ran out of memory at step 2")


def test_follow_exits_1_when_the_job_is_cancelled(lcsb, svc, app, tmp_path):
    job_id = new_job(svc, tmp_path)["id"]
    start(app, job_id, total=10)
    step(app, job_id, 1, total=10)
    # cancelled through the client's service API: a second CliRunner in another thread would swap
    # sys.stdout under the running `follow` (the test failed once with "I/O operation on closed file")
    thread = in_background(lambda: (time.sleep(0.2), svc.cancel_job(job_id)))
    r = lcsb("jobs", "follow", job_id)
    thread.join(10)
    assert r.exit_code == 1, r.output
    assert r.stderr.rstrip().endswith(f"{job_id} was cancelled")


class DropFirstStream(httpx.BaseTransport):
    """The real transport, except that the first event stream is cut (httpx.ReadError) after
    `events` whole events; records each stream request's Last-Event-ID."""

    def __init__(self, events: int) -> None:
        self.inner, self.events, self.last_event_ids = httpx.HTTPTransport(), events, []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if not request.url.path.endswith("/events/stream"):
            return response
        self.last_event_ids.append(request.headers.get("Last-Event-ID"))
        if len(self.last_event_ids) > 1:
            return response
        return httpx.Response(response.status_code, headers=response.headers, request=request,
                              stream=CutStream(response.stream, self.events))

    def close(self) -> None:
        self.inner.close()


class CutStream(httpx.SyncByteStream):
    def __init__(self, inner: httpx.SyncByteStream, events: int) -> None:
        self.inner, self.events = inner, events

    def __iter__(self):
        buffer = b""
        for chunk in self.inner:
            buffer += chunk
            if buffer.count(b"\n\n") >= self.events:
                cut = 0
                for _ in range(self.events):
                    cut = buffer.index(b"\n\n", cut) + 2
                yield buffer[:cut]
                raise httpx.ReadError("connection dropped by the test")
        yield buffer

    def close(self) -> None:
        self.inner.close()


def test_follow_resumes_after_a_dropped_connection(base_url, alice, svc, app, tmp_path):
    job_id = new_job(svc, tmp_path)["id"]
    run_to_success(app, job_id, total=4)  # the events exist before follow starts
    events = svc.openai.fine_tuning.jobs.list_events(job_id, limit=100).data[::-1]  # oldest first
    messages = [e.message for e in events if e.type != "metrics" or "validation" in e.message]
    transport = DropFirstStream(events=5)
    out = io.StringIO()
    with Service(base_url, alice.key, transport=transport) as flaky:
        code = follow_job(flaky, job_id, Console(file=out, width=200), backoff_s=0.01)
    text = out.getvalue()
    assert code == 0, text
    assert transport.last_event_ids == [None, events[4].id]  # reconnected after the fifth event
    assert f"connection lost (ReadError); reconnecting after {events[4].id}" in text
    for message in messages:  # every event once, in order
        assert text.count(message) == 1, message
    positions = [text.index(m) for m in messages]
    assert positions == sorted(positions)
    assert "4/4" in next(line for line in text.splitlines() if line.startswith("train "))


def test_follow_after_an_event_and_errors(lcsb, svc, app, tmp_path):
    job_id = new_job(svc, tmp_path)["id"]
    run_to_success(app, job_id, total=3)
    events = svc.openai.fine_tuning.jobs.list_events(job_id, limit=100).data[::-1]
    started = next(e for e in events if e.message.startswith("Training started"))
    r = lcsb("jobs", "follow", job_id, "--after", started.id)
    assert r.exit_code == 0, r.output
    assert "Training started" not in r.stderr and "Created fine-tuning job" not in r.stderr
    assert "Step 3/3: validation loss" in r.stderr and "succeeded" in r.stderr
    bad = lcsb("jobs", "follow", job_id, "--after", "ftevent-unknown")
    assert bad.exit_code == 2
    assert bad.stderr.startswith("error (invalid_last_event_id): ") and "[Last-Event-ID]" in bad.stderr
    missing = lcsb("jobs", "follow", "ftjob-missing")
    assert missing.exit_code == 2 and missing.stderr.startswith("error (job_not_found): ")
