"""The service, as the client sees it: one object holding an `openai.OpenAI` client (files, jobs,
events pages, checkpoints, cancel) and an `httpx.Client` (this service's extensions: the event stream,
artifacts, checkpoint adapters). Every method returns plain dicts and raises only `ClientError`.

    with Service("http://127.0.0.1:8000/v1", key) as svc:
        f = svc.upload_file(Path("train.jsonl"))
        job = svc.create_job({"model": "SmolLM2-135M-Instruct", "training_file": f["id"],
                              "method": {"lcsb": {"schedule": "cyclic", "k": 8}}})
        with svc.event_stream(job["id"], last_event_id=None) as lines: ...
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import openai

from lcsb_client.errors import ClientError, from_openai, from_response, unreachable

DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"
USER_AGENT = "lcsb-client/0.1"
# Fields of a job request the `openai` client knows; the rest (our `method`, explicit optimizer
# settings under `hyperparameters`) travel in `extra_body`.
OPENAI_JOB_FIELDS = ("model", "training_file", "validation_file", "seed", "suffix", "metadata")
STREAM_READ_TIMEOUT_S = 60.0  # the server sends a keep-alive comment every 15 s while a job is quiet


def _dict(obj: Any) -> dict:
    """An `openai` model as a plain dict (this service's extra fields included)."""
    return obj.to_dict(mode="json")


class Service:
    """A connection to one service (`base_url` ends in `/v1`) with one API key.

    Raises:
        ClientError: `missing_api_key` when `api_key` is empty.
    """

    def __init__(self, base_url: str, api_key: str | None, *, timeout_s: float = 60.0, max_retries: int = 2,
                 transport: httpx.BaseTransport | None = None) -> None:
        if not api_key:
            raise ClientError("missing_api_key", "no API key: pass --api-key or set LCSB_API_KEY")
        self.base_url = base_url.rstrip("/")
        self.openai = openai.OpenAI(base_url=self.base_url, api_key=api_key, timeout=timeout_s,
                                    max_retries=max_retries, default_headers={"User-Agent": USER_AGENT})
        self.http = httpx.Client(base_url=self.base_url + "/", transport=transport,
                                 timeout=httpx.Timeout(timeout_s, read=STREAM_READ_TIMEOUT_S),
                                 headers={"Authorization": f"Bearer {api_key}", "User-Agent": USER_AGENT})

    def close(self) -> None:
        self.http.close()
        self.openai.close()

    def __enter__(self) -> Service:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _calling(self) -> Iterator[None]:
        """Turn `openai` and httpx failures into ClientError."""
        try:
            yield
        except openai.OpenAIError as exc:
            raise from_openai(exc, self.base_url) from None
        except httpx.TransportError as exc:
            raise unreachable(self.base_url, exc) from None

    def _get_json(self, path: str) -> dict:
        with self._calling():
            r = self.http.get(path)
        if r.status_code != 200:
            raise from_response(r)
        return r.json()

    # files and jobs: the official client

    def upload_file(self, path: Path) -> dict:
        """Upload a dataset (purpose `fine-tune`); the file object with its validation report. The name
        is sent as UTF-8 text: under an ASCII locale Python holds a name's non-ASCII bytes as surrogate
        escapes, which cannot be encoded, so its bytes are read back as UTF-8."""
        name = os.fsencode(path.name).decode("utf-8", errors="replace")
        with self._calling(), open(path, "rb") as fh:
            return _dict(self.openai.files.create(file=(name, fh), purpose="fine-tune"))

    def chat_stream(self, model: str, messages: list[dict], *,
                    on_finish: Callable[[str], None] | None = None, **params: Any) -> Iterator[str]:
        """The answer's text pieces as the service makes them (`/v1/chat/completions`, streamed);
        `params`: temperature, max_completion_tokens, seed, ... (left out when None). `on_finish` gets the
        choice's `finish_reason` when the stream gives it (`stop`, or `length`: cut at the token limit)."""
        given = {k: v for k, v in params.items() if v is not None}
        create: Any = self.openai.chat.completions.create   # its overloads do not take **params
        with self._calling():
            for chunk in create(model=model, messages=messages, stream=True, **given):
                if chunk.choices and chunk.choices[0].delta.content:
                    yield chunk.choices[0].delta.content
                if on_finish is not None and chunk.choices and chunk.choices[0].finish_reason:
                    on_finish(chunk.choices[0].finish_reason)

    def delete_file(self, file_id: str) -> None:
        """Delete one of the caller's files (`DELETE /v1/files/{id}`).

        Raises:
            ClientError: the service refuses (e.g. a job still uses the file) or cannot be reached.
        """
        with self._calling():
            self.openai.files.delete(file_id)

    def get_file(self, file_id: str) -> dict:
        with self._calling():
            return _dict(self.openai.files.retrieve(file_id))

    def list_files(self, limit: int = 20) -> list[dict]:
        """The caller's most recent files (one page)."""
        with self._calling():
            return [_dict(f) for f in self.openai.files.list(limit=limit).data]

    def create_job(self, request: dict, idempotency_key: str | None = None) -> dict:
        """POST a job request (the fields of `JobCreate`); the job object."""
        known = {k: v for k, v in request.items() if k in OPENAI_JOB_FIELDS}
        extra = {k: v for k, v in request.items() if k not in OPENAI_JOB_FIELDS}
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        with self._calling():
            return _dict(self.openai.fine_tuning.jobs.create(**known, extra_body=extra or None,
                                                             extra_headers=headers))

    def list_jobs(self, limit: int = 20, after: str | None = None,
                  metadata: dict[str, str] | None = None) -> tuple[list[dict], bool]:
        """One page of the caller's jobs, newest first: (jobs, has_more)."""
        kwargs: dict[str, Any] = {"limit": limit}
        if after:
            kwargs["after"] = after
        if metadata:
            kwargs["metadata"] = metadata
        with self._calling():
            page = self.openai.fine_tuning.jobs.list(**kwargs)
        return [_dict(j) for j in page.data], bool(page.has_more)

    def get_job(self, job_id: str) -> dict:
        with self._calling():
            return _dict(self.openai.fine_tuning.jobs.retrieve(job_id))

    def cancel_job(self, job_id: str) -> dict:
        """Cancel; not retried (the client would retry the 409 of a finished job, which stays 409)."""
        with self._calling():
            return _dict(self.openai.with_options(max_retries=0).fine_tuning.jobs.cancel(job_id))

    def list_checkpoints(self, job_id: str) -> list[dict]:
        """Every checkpoint of the job, latest step first (all pages)."""
        with self._calling():
            return [_dict(c) for c in self.openai.fine_tuning.jobs.checkpoints.list(job_id, limit=100)]

    # extensions: httpx

    def job_path(self, job_id: str, *parts: str) -> str:
        """`fine_tuning/jobs/<id>/<parts...>`, relative to the base URL, each part quoted."""
        return "/".join(["fine_tuning/jobs", quote(job_id, safe=""), *(quote(p, safe="/") for p in parts)])

    def list_artifacts(self, job_id: str) -> list[dict]:
        """The job's downloadable outputs (`name`, `kind`, `bytes`, ...); empty until it succeeded."""
        return self._get_json(self.job_path(job_id, "artifacts"))["data"]

    def create_export(self, job_id: str, formats: list[str] | None, checkpoint_step: int | None) -> dict:
        """POST `.../exports` (GGUF files for llama.cpp and Ollama); the queued export object."""
        body: dict[str, Any] = {}
        if formats:
            body["formats"] = formats
        if checkpoint_step is not None:
            body["checkpoint_step"] = checkpoint_step
        with self._calling():
            r = self.http.post(self.job_path(job_id, "exports"), json=body)
        if r.status_code != 200:
            raise from_response(r)
        return r.json()

    def get_export(self, job_id: str, export_id: str) -> dict:
        return self._get_json(self.job_path(job_id, "exports", export_id))

    def download(self, path: str, dest: Path, on_chunk: Callable[[int], None] | None = None) -> int:
        """Stream GET `path` (relative to the base URL) into `dest` (written as `dest.part`, then
        renamed); returns the byte count. `on_chunk(n)` is called per chunk received."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        part = dest.with_name(dest.name + ".part")
        total = 0
        try:
            with self._calling(), self.http.stream("GET", path) as r:
                if r.status_code != 200:
                    r.read()
                    raise from_response(r)
                with open(part, "wb") as fh:
                    for chunk in r.iter_bytes(1 << 20):
                        fh.write(chunk)
                        total += len(chunk)
                        if on_chunk:
                            on_chunk(len(chunk))
            part.replace(dest)
        finally:
            part.unlink(missing_ok=True)
        return total

    @contextmanager
    def event_stream(self, job_id: str, last_event_id: str | None = None) -> Iterator[Iterator[str]]:
        """Open the job's server-sent-event stream after `last_event_id` (from the start without one);
        yields its lines. httpx.TransportError is left to the caller (it reconnects).

        Raises:
            ClientError: the service answered with an error (unknown job, bad Last-Event-ID, ...).
        """
        headers = {"Accept": "text/event-stream", **({"Last-Event-ID": last_event_id} if last_event_id else {})}
        with self.http.stream("GET", self.job_path(job_id, "events", "stream"), headers=headers) as r:
            if r.status_code != 200:
                r.read()
                raise from_response(r)
            yield r.iter_lines()
