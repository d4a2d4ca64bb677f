"""A generation request's payload, its token stream and its cancel flag, shared by the API and an
inference worker: Redis when the broker is Redis (production), files under `data_dir/streams` for
the embedded default (no server; the API and the worker share the machine).

    streams = token_streams(settings)
    streams.put_request(rid, payload_json)                    # API, before sending `lcsb.generate(rid)`
    payload = streams.get_request(rid)                        # worker (None: expired or cancelled)
    streams.append(rid, {"t": "delta", "text": "Hi"})         # worker, as tokens are made
    if streams.cancelled(rid): ...                            # worker, every token
    async for record in streams.read(rid, first_timeout_s=60): ...   # API, from the stream's start
    streams.cancel(rid)                                       # API: the client went away

Records (JSON objects, in order): `{"t": "start", "prompt_tokens": N}` or
`{"t": "error", "status", "code", "param", "message"}` first; then `{"t": "delta", "text"}`...; then
`{"t": "end", "finish_reason": "stop"|"length", "completion_tokens": M}` or an error. The reader
starts at the stream's first record whatever arrived before it began, so no token is lost (Redis
Streams `XREAD` from `0-0`; the file backend reads its append-only JSON-lines file from byte 0).
Everything expires after `Settings.inference_stream_ttl_s` (Redis keys) or is removed by the reader
when it is done (files).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any, Protocol

import anyio

from lcsb_service.settings import Settings

Records = AsyncGenerator[dict[str, Any], None]   # a reader's records, oldest first
POLL_S = 0.02   # the file backend's poll interval while waiting for a record
STALE_S = 3600.0  # the file backend removes files this old


class StreamTimeout(Exception):
    """No record arrived within the reader's wait (no worker started the request, or it stalled)."""


class TokenStreams(Protocol):
    """Request payloads, token streams and cancel flags (see the module docstring)."""

    def put_request(self, rid: str, payload: str) -> None: ...
    def get_request(self, rid: str) -> str | None: ...
    def append(self, rid: str, record: dict[str, Any]) -> None: ...
    def cancelled(self, rid: str) -> bool: ...
    def cancel(self, rid: str) -> None: ...
    def read(self, rid: str, *, first_timeout_s: float, next_timeout_s: float) -> Records: ...
    def close(self, rid: str) -> None: ...
    def discard(self, rid: str) -> None: ...


def token_streams(settings: Settings) -> TokenStreams:
    """Redis streams on the broker's Redis (keys under its `global_keyprefix`), else files."""
    if settings.broker_url.startswith(("redis://", "rediss://")):
        return RedisStreams(settings.broker_url, str(settings.broker_transport_options.get("global_keyprefix", "")),
                            ttl_s=settings.inference_stream_ttl_s)
    return FileStreams(settings.data_dir / "streams")


class RedisStreams:
    """Keys `<prefix>lcsb:gen:<rid>:req` (payload), `:out` (a Redis Stream of records, field `r`),
    `:cancel`; each expires `ttl_s` after its last write."""

    def __init__(self, url: str, prefix: str = "", *, ttl_s: float = 600.0) -> None:
        import redis

        self.url, self.prefix, self.ttl = url, prefix, max(1, int(ttl_s))
        self.client = redis.Redis.from_url(url)

    def _key(self, rid: str, what: str) -> str:
        return f"{self.prefix}lcsb:gen:{rid}:{what}"

    def put_request(self, rid: str, payload: str) -> None:
        self.client.set(self._key(rid, "req"), payload, ex=self.ttl)

    def get_request(self, rid: str) -> str | None:
        raw = self.client.get(self._key(rid, "req"))
        return raw.decode() if isinstance(raw, bytes) else raw

    def append(self, rid: str, record: dict[str, Any]) -> None:
        key = self._key(rid, "out")
        with self.client.pipeline() as pipe:
            pipe.xadd(key, {"r": json.dumps(record)})
            pipe.expire(key, self.ttl)
            pipe.execute()

    def cancelled(self, rid: str) -> bool:
        return bool(self.client.exists(self._key(rid, "cancel")))

    def cancel(self, rid: str) -> None:
        self.client.set(self._key(rid, "cancel"), b"1", ex=self.ttl)

    async def read(self, rid: str, *, first_timeout_s: float, next_timeout_s: float) -> Records:
        """Records from the stream's first, each waited for at most `first_timeout_s` (the first) or
        `next_timeout_s` (the others). Raises StreamTimeout."""
        import redis.asyncio as aioredis

        client = aioredis.Redis.from_url(self.url)
        key, last, timeout = self._key(rid, "out"), "0-0", first_timeout_s
        try:
            while True:
                deadline = time.monotonic() + timeout
                found: Any = []
                while not found:
                    left_ms = int((deadline - time.monotonic()) * 1000)
                    if left_ms <= 0:
                        raise StreamTimeout(rid)
                    found = await client.xread({key: last}, count=64, block=min(left_ms, 1000))
                for _, entries in found:
                    for entry_id, fields in entries:
                        last = entry_id
                        yield json.loads(fields[b"r"])
                timeout = next_timeout_s
        finally:
            await client.aclose()

    def close(self, rid: str) -> None:
        self.client.delete(self._key(rid, "req"), self._key(rid, "out"))

    def discard(self, rid: str) -> None:
        self.client.delete(self._key(rid, "req"), self._key(rid, "out"), self._key(rid, "cancel"))


class FileStreams:
    """`<folder>/<rid>.req.json`, `<rid>.out.jsonl` (one record a line, appended with O_APPEND),
    `<rid>.cancel`: for the embedded default, where the API and the worker share the data folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def _path(self, rid: str, what: str) -> Path:
        if not rid.replace("-", "").isalnum():
            raise ValueError(f"bad request id {rid!r}")
        return self.folder / f"{rid}.{what}"

    def put_request(self, rid: str, payload: str) -> None:
        tmp = self._path(rid, "req.tmp")
        tmp.write_text(payload)
        tmp.rename(self._path(rid, "req.json"))

    def get_request(self, rid: str) -> str | None:
        try:
            return self._path(rid, "req.json").read_text()
        except FileNotFoundError:
            return None

    def append(self, rid: str, record: dict[str, Any]) -> None:
        line = (json.dumps(record) + "\n").encode()
        fd = os.open(self._path(rid, "out.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)   # one write of a whole line: a reader never sees half of it complete
        finally:
            os.close(fd)

    def cancelled(self, rid: str) -> bool:
        return self._path(rid, "cancel").exists()

    def cancel(self, rid: str) -> None:
        self._path(rid, "cancel").touch()

    async def read(self, rid: str, *, first_timeout_s: float, next_timeout_s: float) -> Records:
        """As `RedisStreams.read`, polling the file every POLL_S seconds."""
        path, offset, buffer, timeout = self._path(rid, "out.jsonl"), 0, b"", first_timeout_s
        deadline = time.monotonic() + timeout
        while True:
            chunk = b""
            if path.exists():
                with open(path, "rb") as f:
                    f.seek(offset)
                    chunk = f.read()
            if not chunk:
                if time.monotonic() > deadline:
                    raise StreamTimeout(rid)
                await anyio.sleep(POLL_S)
                continue
            offset += len(chunk)
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                yield json.loads(line)
            deadline = time.monotonic() + next_timeout_s

    def close(self, rid: str) -> None:
        """Remove the request's payload and stream, and any file of the folder older than an hour (left
        by a request no worker took, or a process that died)."""
        for what in ("req.json", "out.jsonl"):
            self._path(rid, what).unlink(missing_ok=True)
        old = time.time() - STALE_S
        for path in self.folder.iterdir():
            try:
                if path.stat().st_mtime < old:
                    path.unlink(missing_ok=True)
            except OSError:
                continue

    def discard(self, rid: str) -> None:
        """Remove everything of a cancelled request, its cancel flag too (the worker, once it stopped)."""
        self.close(rid)
        self._path(rid, "cancel").unlink(missing_ok=True)
