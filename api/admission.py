"""Admission control: at most `limit` requests are handled at once; a few more wait for a slot, and
the rest get a fast 503 with `Retry-After` (pure ASGI middleware, safe for streaming responses).

    app.add_middleware(AdmissionLimit, limit=32, max_waiting=512, wait_s=5.0, retry_after_s=1)

A request holds its slot until its response starts: by then its database work is done (the route's
session is committed before the response is sent), so the slots bound the connections the requests
use. A server-sent-event stream gives its slot back when the stream starts; its polls are bounded
separately (`api.routes.events`). A request waits for a slot at most `wait_s` seconds, holding no
thread and no connection; when `max_waiting` requests are already waiting, or the wait runs out, it is
answered 503 `server_overloaded` at once.
"""

from __future__ import annotations

import math

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import error_response


class AdmissionLimit:
    """ASGI middleware bounding the requests in progress (see the module docstring)."""

    def __init__(self, app: ASGIApp, *, limit: int, max_waiting: int, wait_s: float, retry_after_s: float) -> None:
        if limit < 1 or max_waiting < 0 or wait_s < 0:
            raise ValueError(f"invalid admission limits: limit={limit}, max_waiting={max_waiting}, wait_s={wait_s}")
        self.app, self.limit, self.max_waiting, self.wait_s = app, limit, max_waiting, wait_s
        self.retry_after = str(max(1, math.ceil(retry_after_s)))
        self._slots: anyio.Semaphore | None = None   # made on first use, inside the server's event loop
        self.waiting = 0

    @property
    def in_progress(self) -> int:
        """Requests holding a slot now."""
        return 0 if self._slots is None else self.limit - self._slots.value

    async def _acquire(self) -> bool:
        if self._slots is None:
            self._slots = anyio.Semaphore(self.limit)
        try:
            self._slots.acquire_nowait()
            return True
        except anyio.WouldBlock:
            pass
        if self.waiting >= self.max_waiting:
            return False
        self.waiting += 1
        try:
            with anyio.move_on_after(self.wait_s):
                await self._slots.acquire()
                return True
            return False
        finally:
            self.waiting -= 1

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if not await self._acquire():
            response = error_response(503, "the service is overloaded; retry after the Retry-After delay",
                                      type="server_error", code="server_overloaded",
                                      headers={"Retry-After": self.retry_after})
            await response(scope, receive, send)
            return
        held = True

        def release() -> None:
            nonlocal held
            if held and self._slots is not None:  # made by the acquire above
                held = False
                self._slots.release()

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                release()
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            release()
