"""Server-sent events: a line parser (the SSE wire format) and `EventFollower`, which reads one job's
event stream to its end, reconnecting with `Last-Event-ID` after a dropped connection so that every
event arrives once and in order.

    follower = EventFollower(lambda last_id: svc.event_stream(job_id, last_id))
    for event in follower:            # fine_tuning.job.event objects (dicts), oldest first
        ...
    follower.final_status             # "succeeded" | "failed" | "cancelled" (from the `done` event)

The stream's contract (api/routes/events.py): each event's `id` is the job event's id and its `data`
the event object; the stream ends with `event: done` (data `{"status": ...}`) once the job finished,
or ends early without it (the server's time limit), after which the client reconnects.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import httpx

from lcsb_client.errors import ClientError

OpenStream = Callable[[str | None], AbstractContextManager[Iterable[str]]]


@dataclass
class SSEEvent:
    """One dispatched event: `event` type ("message" unless named), `data` (parsed JSON when it is
    JSON, else the text), `id` (None when the event had no id field)."""

    event: str
    data: Any
    id: str | None = None


def _decode(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_sse(lines: Iterable[str]) -> Iterator[SSEEvent]:
    """Events from SSE lines (without line terminators): `field: value` lines accumulate, a blank
    line dispatches; comments (`:`) and unknown fields are ignored; several `data` lines join with a
    newline; an event cut off before its blank line is dropped (as the SSE spec says)."""
    event: str | None = None
    data: list[str] = []
    event_id: str | None = None
    for line in lines:
        if not line:
            if data or event:
                yield SSEEvent(event or "message", _decode("\n".join(data)), event_id)
            event, data, event_id = None, [], None
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "data":
            data.append(value)
        elif field == "event":
            event = value
        elif field == "id":
            event_id = value


class EventFollower:
    """Iterates a job's events across reconnections.

    `open_stream(last_event_id)` opens the stream after that event (from the start with None) and
    yields its lines. A connection that fails (httpx.TransportError, or a 5xx answer) or that ends
    without `event: done` is reopened after the last event received. `max_failures` consecutive
    attempts that received nothing end the iteration with ClientError `connection_lost`; waits between
    them double from `backoff_s` up to `max_backoff_s`. `on_reconnect(reason, last_event_id)` is called
    before each reconnection.

    Raises (while iterating):
        ClientError: the service refused the stream (4xx: unknown job, bad Last-Event-ID), or
            `connection_lost`.
    """

    def __init__(self, open_stream: OpenStream, *, last_event_id: str | None = None, max_failures: int = 5,
                 backoff_s: float = 0.5, max_backoff_s: float = 10.0,
                 on_reconnect: Callable[[str, str | None], None] | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.open_stream, self.last_event_id = open_stream, last_event_id
        self.max_failures, self.backoff_s, self.max_backoff_s = max_failures, backoff_s, max_backoff_s
        self.on_reconnect, self.sleep = on_reconnect, sleep
        self.final_status: str | None = None
        self.connections = 0

    def __iter__(self) -> Iterator[dict]:
        failures = 0
        while True:
            alive = False  # did this connection deliver anything (an event or a keep-alive comment)?

            def mark(lines: Iterable[str]) -> Iterator[str]:
                nonlocal alive
                for line in lines:
                    alive = True
                    yield line

            self.connections += 1
            try:
                with self.open_stream(self.last_event_id) as lines:
                    for ev in parse_sse(mark(lines)):
                        if ev.event == "done":
                            self.final_status = ev.data.get("status") if isinstance(ev.data, dict) else None
                            return
                        if ev.id:
                            self.last_event_id = ev.id
                        yield ev.data
                reason = "the stream ended before the job did"
            except httpx.TransportError as exc:
                reason = f"connection lost ({type(exc).__name__})"
            except ClientError as exc:
                if exc.status is None or exc.status < 500:
                    raise
                reason = f"the service answered {exc.status}"
            failures = 0 if alive else failures + 1
            if failures >= self.max_failures:
                raise ClientError("connection_lost", f"gave up following the event stream after {failures} "
                                  f"attempts: {reason}")
            if self.on_reconnect:
                self.on_reconnect(reason, self.last_event_id)
            if failures:
                self.sleep(min(self.max_backoff_s, self.backoff_s * 2 ** (failures - 1)))
