"""The SSE parser and `EventFollower`'s resume logic (Last-Event-ID after a drop, retries, giving up),
and Ctrl-C while following, on scripted streams: no server."""

from __future__ import annotations

import io
import json
from contextlib import contextmanager

import httpx
import pytest
from rich.console import Console

from lcsb_client.errors import ClientError
from lcsb_client.follow import follow_job
from lcsb_client.sse import EventFollower, SSEEvent, parse_sse


def wire(*events: tuple[str, dict]) -> list[str]:
    """SSE lines of job events (id, data) as the API sends them."""
    lines = []
    for event_id, data in events:
        lines += [f"data: {json.dumps(data)}", f"id: {event_id}", ""]
    return lines


DONE = ["event: done", 'data: {"status": "succeeded"}', ""]


def ev(i: int) -> tuple[str, dict]:
    return f"ftevent-{i}", {"id": f"ftevent-{i}", "message": f"event {i}"}


def test_parse_sse_fields_comments_and_partial_events():
    lines = [": ping", "", "data: {\"a\": 1}", "id: e1", "", "event: note", "data: line one", "data:line two",
             "retry: 1000", "x-unknown: y", "", "data: cut off before its blank line"]
    assert list(parse_sse(lines)) == [SSEEvent("message", {"a": 1}, "e1"),
                                      SSEEvent("note", "line one\nline two", None)]


class Script:
    """Streams scripted per connection: each is a list of lines, optionally ending in an exception
    raised after them (or raised at connect when the list is only an exception)."""

    def __init__(self, *connections) -> None:
        self.connections, self.asked = list(connections), []

    @contextmanager
    def open(self, last_event_id):
        self.asked.append(last_event_id)
        script = self.connections.pop(0)
        if isinstance(script, Exception):
            raise script

        def lines():
            for item in script:
                if isinstance(item, Exception):
                    raise item
                yield item

        yield lines()


def follow(script: Script, **kwargs) -> tuple[list[str], EventFollower, list[float], list[str]]:
    sleeps, notes = [], []
    follower = EventFollower(script.open, sleep=sleeps.append, on_reconnect=lambda reason, last: notes.append(reason),
                             **kwargs)
    return [e["message"] for e in follower], follower, sleeps, notes


def test_resumes_after_the_last_event_received():
    script = Script(wire(ev(1), ev(2)) + ["data: {\"id\": \"ftevent-3\"", httpx.ReadError("dropped")],
                    wire(ev(3), ev(4)) + DONE)
    messages, follower, sleeps, notes = follow(script)
    assert messages == ["event 1", "event 2", "event 3", "event 4"]
    assert script.asked == [None, "ftevent-2"] and follower.final_status == "succeeded"
    assert notes == ["connection lost (ReadError)"] and sleeps == []  # it had received data: at once


def test_reconnects_when_the_stream_ends_without_done_and_starts_after_a_given_event():
    script = Script(wire(ev(6)), wire(ev(7)) + DONE)
    messages, follower, _, notes = follow(script, last_event_id="ftevent-5")
    assert messages == ["event 6", "event 7"] and script.asked == ["ftevent-5", "ftevent-6"]
    assert notes == ["the stream ended before the job did"]


def test_retries_failed_connections_with_backoff_then_gives_up():
    refused = httpx.ConnectError("refused")
    script = Script(refused, ClientError("unavailable", "down", status=503), wire(ev(1)) + DONE)
    messages, _, sleeps, _ = follow(script, backoff_s=0.5)
    assert messages == ["event 1"] and sleeps == [0.5, 1.0] and script.asked == [None, None, None]
    script = Script(*[httpx.ConnectError("refused")] * 3)
    with pytest.raises(ClientError) as lost:
        follow(script, max_failures=3, backoff_s=1, max_backoff_s=1.5)
    assert lost.value.code == "connection_lost" and "after 3 attempts" in lost.value.message


def test_a_refusal_is_not_retried():
    script = Script(ClientError("invalid_last_event_id", "no such event", "Last-Event-ID", status=400))
    with pytest.raises(ClientError) as refused:
        follow(script)
    assert refused.value.code == "invalid_last_event_id" and script.asked == [None]


class InterruptedService:
    """Stands in for Service: a running job whose stream delivers one event, then Ctrl-C."""

    def get_job(self, job_id: str) -> dict:
        return {"id": job_id, "status": "running", "progress": {"steps_completed": 0, "total_steps": 4}}

    @contextmanager
    def event_stream(self, job_id: str, last_event_id: str | None):
        def lines():
            yield from wire(("ftevent-1", {"id": "ftevent-1", "message": "Training started", "created_at": 0}))
            raise KeyboardInterrupt

        yield lines()


def test_ctrl_c_says_how_to_continue():
    out = io.StringIO()
    with pytest.raises(KeyboardInterrupt):
        follow_job(InterruptedService(), "ftjob-x", Console(file=out, width=200))
    assert ("stopped following; the job goes on (lcsb jobs follow ftjob-x --after ftevent-1 to continue"
            in out.getvalue())
