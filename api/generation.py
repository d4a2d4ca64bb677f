"""From a validated generation request to an OpenAI response: send it to an inference worker, read its
token stream (`lcsb_service.streams`) and answer with one JSON object or server-sent events.

    return await answer(request.app, payload, kind="chat", stream=True, include_usage=True)

Streaming follows OpenAI's order, one `id` and `created` for every chunk: a role chunk per choice
(chat), the content deltas (each chunk one choice, named by its `index`, with its tokens' `logprobs`
when asked), a finish chunk per choice (`stop` or `length`), a usage chunk (`choices: []`; every
choice's tokens, the prompt once) when `stream_options.include_usage`, then `data: [DONE]`. The
choices' shapes: `api.choices`. A failure after the stream began is sent as an
`event: error` whose data is OpenAI's error body, so the `openai` client raises `APIError` instead of
ending quietly. Before anything is sent the API waits for the worker's first record, so a prompt over
the context or an unknown model is still an HTTP error (400, 404).

At most `Settings.inference_max_pending` requests of this API process wait for or read a worker at
once; past that, a fast 503 `server_overloaded` with `Retry-After`. A request that no worker starts
within `inference_start_timeout_s` (the workers are all busy, or none runs: the API cannot tell
which) is 503 `inference_start_timeout`; a service with no inference enqueuer at all, 503
`no_inference_worker`. When the client goes away the
stream's cancel flag is set and the worker stops within a token.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import anyio
from fastapi import FastAPI
from fastapi.responses import JSONResponse, StreamingResponse

from api.choices import choice, finish_reasons, logprobs_of
from lcsb_service.chat import GenerationRequest
from lcsb_service.enqueue import TaskSender
from lcsb_service.errors import Overloaded, ServiceError
from lcsb_service.streams import StreamTimeout, TokenStreams, token_streams
from lcsb_service.tasks import TaskName

NEXT_RECORD_TIMEOUT_S = 60.0   # a worker silent this long between tokens has stalled
_OBJECTS = {"chat": ("chat.completion", "chat.completion.chunk"), "completion": ("text_completion", "text_completion")}


def _streams(app: FastAPI) -> TokenStreams:
    if getattr(app.state, "token_streams", None) is None:
        app.state.token_streams = token_streams(app.state.settings)
        app.state.generations_in_flight = 0
    return app.state.token_streams


def _record_error(record: dict[str, Any]) -> ServiceError:
    err = ServiceError(str(record.get("message") or "generation failed"), code=record.get("code"),
                       param=record.get("param"))
    err.status = int(record.get("status") or 500)
    err.type = "invalid_request_error" if err.status < 500 else "server_error"
    return err


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


async def answer(app: FastAPI, payload: GenerationRequest, *, stream: bool, include_usage: bool) -> Any:
    """The HTTP response for `payload` (see the module docstring).

    Raises:
        Overloaded: 503 past the in-flight limit, no inference enqueuer, or no worker in time.
        ServiceError: the worker's first record is an error (400 / 404 / 500 as it says).
    """
    settings, streams = app.state.settings, _streams(app)
    sender = app.state.enqueuer
    if not isinstance(sender, TaskSender):
        raise Overloaded("this service has no inference workers", retry_after_s=settings.api_retry_after_s,
                         code="no_inference_worker")
    if app.state.generations_in_flight >= settings.inference_max_pending:
        raise Overloaded(f"{settings.inference_max_pending} generation requests are in flight; retry after the "
                         "Retry-After delay", retry_after_s=settings.api_retry_after_s)
    app.state.generations_in_flight += 1
    rid, released = payload.id, False

    def release(cancel: bool) -> None:
        nonlocal released
        if not released:
            released = True
            app.state.generations_in_flight -= 1
            if cancel:
                streams.cancel(rid)
            streams.close(rid)

    records = streams.read(rid, first_timeout_s=settings.inference_start_timeout_s,
                           next_timeout_s=NEXT_RECORD_TIMEOUT_S)
    try:
        await anyio.to_thread.run_sync(streams.put_request, rid, payload.model_dump_json())
        await anyio.to_thread.run_sync(sender.send, TaskName.GENERATE.value, rid, settings.inference_queue)
        try:
            first = await anext(records)
        except StreamTimeout:
            wait = settings.inference_start_timeout_s
            raise Overloaded(f"no inference worker started this request within {wait:g} s: every worker on "
                             f"queue {settings.inference_queue} is busy, or none is running",
                             retry_after_s=settings.api_retry_after_s, code="inference_start_timeout") from None
        if first["t"] == "error":
            raise _record_error(first)
    except BaseException:
        await records.aclose()
        release(cancel=True)
        raise
    kind = payload.kind
    head = {"id": f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{rid.split('-', 1)[-1]}", "created": int(time.time()),
            "model": payload.model, "system_fingerprint": None}
    if not stream:
        try:
            return await _whole(head, payload, first["prompt_tokens"], records)
        finally:
            await records.aclose()
            release(cancel=False)
    return _GenerationStream(_events(head, payload, first["prompt_tokens"], records, include_usage, release),
                             records, release)


class _GenerationStream(StreamingResponse):
    """Server-sent events that give the in-flight slot back (and stop the worker) even when the client
    went away before the first chunk was sent, when the event generator never ran."""

    def __init__(self, content: AsyncIterator[bytes], records: AsyncGenerator[dict, None], release: Any) -> None:
        super().__init__(content, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        self._records, self._release = records, release

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                closing = getattr(self.body_iterator, "aclose", None)
                if closing is not None:
                    await closing()   # the events' own cleanup, when the send failed mid-stream
                await self._records.aclose()   # a no-op when the events closed it
            self._release(cancel=True)   # a no-op when the stream already ended and released


def _prompt_chars(payload: GenerationRequest) -> int:
    return len(payload.prompt or "")


async def _whole(head: dict, payload: GenerationRequest, prompt_tokens: int,
                 records: AsyncGenerator[dict, None]) -> JSONResponse:
    kind, n = payload.kind, payload.n
    parts: list[list[str]] = [[] for _ in range(n)]
    tokens: list[list[dict]] | None = [[] for _ in range(n)] if payload.logprobs is not None else None
    async for record in records:
        if record["t"] == "delta":
            i = int(record.get("i", 0))
            parts[i].append(record["text"])
            if tokens is not None:
                tokens[i] += record.get("logprobs") or []
        elif record["t"] == "error":
            raise _record_error(record)
        elif record["t"] == "end":
            choices = [choice(kind, i, text="".join(parts[i]), finish=reason, whole=True,
                              logprobs=logprobs_of(kind, tokens[i] if tokens is not None else None,
                                                   _prompt_chars(payload)))
                       for i, reason in enumerate(finish_reasons(record, n))]
            body = {**head, "object": _OBJECTS[kind][0], "choices": choices,
                    "usage": _usage(prompt_tokens, record["completion_tokens"])}
            return JSONResponse(body)
    raise ServiceError("the inference worker ended the stream early", code="generation_failed")


def _sse(data: dict) -> bytes:
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _sse_error(message: str, code: str | None, status: int = 500) -> bytes:
    error = {"message": message, "type": "server_error" if status >= 500 else "invalid_request_error",
             "param": None, "code": code}
    return f"event: error\ndata: {json.dumps({'error': error})}\n\n".encode()


async def _events(head: dict, payload: GenerationRequest, prompt_tokens: int, records: AsyncGenerator[dict, None],
                  include_usage: bool, release: Any) -> AsyncIterator[bytes]:
    kind, n, asked, chars = payload.kind, payload.n, payload.logprobs is not None, _prompt_chars(payload)
    base = {**head, "object": _OBJECTS[kind][1]}
    extra = {"usage": None} if include_usage else {}
    finished = False   # the worker's `end` arrived; otherwise it is told to stop
    try:
        if kind == "chat":
            for i in range(n):
                yield _sse({**base, "choices": [choice(kind, i, text=None, finish=None, first=True)], **extra})
        try:
            async for record in records:
                if record["t"] == "delta":
                    logprobs = logprobs_of(kind, (record.get("logprobs") or []) if asked else None, chars)
                    yield _sse({**base, "choices": [choice(kind, int(record.get("i", 0)), text=record["text"],
                                                           finish=None, logprobs=logprobs)], **extra})
                elif record["t"] == "error":
                    yield _sse_error(str(record.get("message")), record.get("code"), int(record.get("status") or 500))
                    return
                elif record["t"] == "end":
                    for i, reason in enumerate(finish_reasons(record, n)):
                        yield _sse({**base, "choices": [choice(kind, i, text=None, finish=reason)], **extra})
                    if include_usage:
                        yield _sse({**base, "choices": [], "usage": _usage(prompt_tokens, record["completion_tokens"])})
                    yield b"data: [DONE]\n\n"
                    finished = True
                    return
        except StreamTimeout:
            yield _sse_error("the inference worker stopped answering", "generation_failed")
    finally:
        with anyio.CancelScope(shield=True):
            await records.aclose()
        release(cancel=not finished)
