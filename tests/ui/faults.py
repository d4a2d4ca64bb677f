"""A fault-injecting reverse proxy for the dashboard's browser tests: an ASGI app under uvicorn (in a
thread of the test process) that forwards every request to the live API, except where a test scripted
what the next requests to a path get: an error answer (503 with `Retry-After`, 404, ...) or an event
stream cut after its n-th event, in the middle of the next one. Every request is logged with its
wall-clock arrival time, its `Last-Event-ID` and the status answered, so a test can check when the page
came back and what it asked for.

    with FaultProxy("http://127.0.0.1:8000") as proxy:   # proxy.url: point the browser here
        proxy.script("/v1/fine_tuning/jobs/ftjob-1", Fail(503, retry_after="2"), Fail(503, retry_after="2"))
        proxy.script("/v1/fine_tuning/jobs/ftjob-1/events/stream", Cut(after_events=3))
"""

from __future__ import annotations

import email.utils
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import anyio
import httpx
import uvicorn
from starlette.types import Receive, Scope, Send

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "host", "content-length"}

CUT_DELAY_S = 0.5  # between a Cut's whole events and the half event before the drop


@dataclass(frozen=True)
class Fail:
    """Answer `status` with the API's error shape; `retry_after` (a string, or a callable giving one at
    answer time, for an HTTP date) becomes the `Retry-After` header."""

    status: int
    retry_after: str | Callable[[], str] | None = None


@dataclass(frozen=True)
class Cut:
    """Forward the stream until `after_events` events (blocks with an `id:`) went through, then half of
    the next block, then drop the connection (no end of the chunked body: the browser sees an error)."""

    after_events: int


@dataclass
class Hit:
    """One request the proxy received: arrival (time.time()), method, path, Last-Event-ID, status."""

    at: float
    method: str
    path: str
    last_event_id: str | None
    status: int = 0
    retry_after: str | None = None


def http_date_in(seconds: float) -> Callable[[], str]:
    """A callable giving an HTTP date (RFC 9110 5.6.7) at least `seconds` after the moment it is called."""
    return lambda: email.utils.formatdate(time.time() + seconds + 1, usegmt=True)


def retry_after_s(hit: Hit) -> float:
    """The earliest time.time() the client may come back after `hit` (its Retry-After, either form)."""
    assert hit.retry_after is not None
    if hit.retry_after.isdigit():
        return hit.at + int(hit.retry_after)
    return email.utils.parsedate_to_datetime(hit.retry_after).timestamp()


class _Dropped(Exception):
    """Raised after a Cut: uvicorn closes the connection of an app that fails mid-response."""


class FaultProxy:
    """The proxy (see the module docstring); a context manager that serves while it is open."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.log: list[Hit] = []
        self._scripts: dict[str, deque[Fail | Cut]] = {}
        self._lock = threading.Lock()
        self._client: httpx.AsyncClient | None = None
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._server = uvicorn.Server(uvicorn.Config(self, host="127.0.0.1", port=self.port, lifespan="off",
                                                     log_level="critical"))
        self._thread = threading.Thread(target=self._server.run, name="fault-proxy", daemon=True)

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the fault proxy did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def script(self, path: str, *actions: Fail | Cut) -> None:
        """The next requests to `path` (exact, query ignored) get `actions` in order, then the API."""
        with self._lock:
            self._scripts[path] = deque(actions)

    def reset(self) -> None:
        """Forget the scripts and the log."""
        with self._lock:
            self._scripts.clear()
            self.log.clear()

    def hits(self, path: str) -> list[Hit]:
        """The logged requests to `path`, oldest first."""
        with self._lock:
            return [h for h in self.log if h.path == path]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        hit = Hit(at=time.time(), method=scope["method"], path=scope["path"],
                  last_event_id=headers.get("last-event-id"))
        with self._lock:
            self.log.append(hit)
            queue = self._scripts.get(scope["path"])
            action = queue.popleft() if queue else None
        if isinstance(action, Fail):
            await self._fail(action, hit, send)
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=httpx.Timeout(60.0, read=None))
        query = scope.get("query_string", b"").decode("latin-1")
        request = self._client.build_request(
            scope["method"], self.upstream + scope["path"] + ("?" + query if query else ""), content=body,
            headers={k: v for k, v in headers.items() if k not in HOP_BY_HOP})
        upstream = await self._client.send(request, stream=True)
        try:
            hit.status = upstream.status_code
            await send({"type": "http.response.start", "status": upstream.status_code,
                        "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in upstream.headers.items()
                                    if k.lower() not in HOP_BY_HOP]})
            if isinstance(action, Cut):
                await self._forward_then_cut(upstream, action.after_events, send)
            async for chunk in upstream.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await upstream.aclose()

    @staticmethod
    async def _fail(action: Fail, hit: Hit, send: Send) -> None:
        retry_after = action.retry_after() if callable(action.retry_after) else action.retry_after
        hit.status, hit.retry_after = action.status, retry_after
        code = {503: "server_overloaded", 404: "not_found"}.get(action.status, f"http_{action.status}")
        body = (b'{"error": {"message": "injected by the test proxy", "type": "server_error", "param": null, '
                b'"code": "' + code.encode() + b'"}}')
        response_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        if retry_after is not None:
            response_headers.append((b"retry-after", retry_after.encode("latin-1")))
        await send({"type": "http.response.start", "status": action.status, "headers": response_headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    @staticmethod
    async def _forward_then_cut(upstream: httpx.Response, after_events: int, send: Send) -> None:
        buffer = b""
        async for chunk in upstream.aiter_raw():
            buffer += chunk
            end, seen = 0, 0
            while seen < after_events and (cut := buffer.find(b"\n\n", end)) >= 0:
                seen += b"\nid:" in b"\n" + buffer[end:cut]
                end = cut + 2
            following = buffer.find(b"\n\n", end) if seen == after_events else -1
            if following > end + 1:  # the next block is here: send the first half of it, then drop
                # the whole events first, and time for the browser to read them: sent in the same segment
                # as the drop, a loaded machine's browser may discard them with the connection (seen once
                # in the full suite), and the test is about a cut after events the page has received
                await send({"type": "http.response.body", "body": buffer[:end], "more_body": True})
                await anyio.sleep(CUT_DELAY_S)
                await send({"type": "http.response.body", "body": buffer[end:end + (following - end) // 2],
                            "more_body": True})
                raise _Dropped(f"cut after {after_events} events")
        raise _Dropped(f"the stream ended before {after_events} events and the next one")
