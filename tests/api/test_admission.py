"""`api.admission.AdmissionLimit`: at most `limit` requests in progress, `max_waiting` more wait for a
slot, the rest get 503 `server_overloaded` with `Retry-After`; a slot is given back when the response
starts (so an open stream does not hold one). Driven with an ASGI app whose requests block until
released, through httpx's ASGI transport."""

from __future__ import annotations

import anyio
import httpx
import pytest

from api.admission import AdmissionLimit


class Gate:
    """An ASGI app: `/block` waits until `open` is set, then answers 200; `/stream` starts its response
    at once and finishes when `open` is set; anything else answers 200 at once."""

    def __init__(self) -> None:
        self.open = anyio.Event()
        self.entered = 0

    async def __call__(self, scope, receive, send) -> None:  # ASGI
        self.entered += 1
        if scope["path"] == "/stream":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await self.open.wait()
            await send({"type": "http.response.body", "body": b"end"})
            return
        if scope["path"] == "/block":
            await self.open.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def run(limit: int, max_waiting: int, wait_s: float, scenario) -> None:  # async callable
    async def main() -> None:
        gate = Gate()
        app = AdmissionLimit(gate, limit=limit, max_waiting=max_waiting, wait_s=wait_s, retry_after_s=2.5)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            await scenario(app, gate, client)

    anyio.run(main)


async def wait_until(condition) -> None:
    with anyio.fail_after(5):
        while not condition():
            await anyio.sleep(0.001)


def test_past_the_limit_and_the_waiting_room_is_a_fast_503_with_retry_after():
    async def scenario(app, gate, client) -> None:
        results: dict[str, httpx.Response] = {}

        async def get(name: str, path: str) -> None:
            results[name] = await client.get(path)

        async with anyio.create_task_group() as tg:
            for i in range(2):
                tg.start_soon(get, f"busy{i}", "/block")
            await wait_until(lambda: app.in_progress == 2)
            tg.start_soon(get, "waiter", "/")
            await wait_until(lambda: app.waiting == 1)
            overflow = await client.get("/")  # two in progress, one waiting: no room
            assert overflow.status_code == 503 and overflow.headers["Retry-After"] == "3"
            assert overflow.json()["error"]["code"] == "server_overloaded" and gate.entered == 2
            gate.open.set()
        assert [results[n].status_code for n in ("busy0", "busy1", "waiter")] == [200, 200, 200]
        assert app.in_progress == 0 and app.waiting == 0

    run(limit=2, max_waiting=1, wait_s=30, scenario=scenario)


def test_a_wait_longer_than_wait_s_is_a_503():
    async def scenario(app, gate, client) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.get, "/block")
            await wait_until(lambda: app.in_progress == 1)
            r = await client.get("/")
            assert r.status_code == 503 and "Retry-After" in r.headers and app.waiting == 0
            gate.open.set()
        assert (await client.get("/")).status_code == 200

    run(limit=1, max_waiting=10, wait_s=0.05, scenario=scenario)


def test_a_started_stream_gives_its_slot_back():
    """Raw ASGI calls (httpx's ASGI transport buffers whole responses)."""

    async def scenario(app, gate, client) -> None:
        started, sent = anyio.Event(), []

        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message) -> None:
            sent.append(message)
            if message["type"] == "http.response.start":
                started.set()

        scope = {"type": "http", "method": "GET", "path": "/stream", "headers": []}
        async with anyio.create_task_group() as tg:
            tg.start_soon(app, scope, receive, send)
            await started.wait()
            assert app.in_progress == 0
            assert (await client.get("/")).status_code == 200  # the one slot is free while streaming
            gate.open.set()
        assert sent[-1] == {"type": "http.response.body", "body": b"end"}

    run(limit=1, max_waiting=0, wait_s=0, scenario=scenario)


def test_invalid_limits_are_refused():
    with pytest.raises(ValueError):
        AdmissionLimit(Gate(), limit=0, max_waiting=0, wait_s=0, retry_after_s=1)
