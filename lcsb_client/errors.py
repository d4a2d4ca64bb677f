"""One error type for everything the client reports: an API error body (`{"error": {message, type,
param, code}}`, from the `openai` client or from httpx), an unreachable service, or a local problem
(a bad spec, a rejected file). The commands print it as `error (<code>): <message> [param]`."""

from __future__ import annotations

from typing import Any

import httpx
import openai


class ClientError(Exception):
    """`code` (the API's error code, or a client-side one), `message`, `param`; `status` is the HTTP
    status when the service answered."""

    def __init__(self, code: str, message: str, param: str | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.param, self.status = code, message, param, status

    def __str__(self) -> str:
        """`error (code): message [param]`; a message of several lines (one per bad line of a file) names
        the param on the first line instead, where it cannot be read as part of the last line."""
        if self.param and "\n" in self.message:
            return f"error ({self.code}) [{self.param}]: {self.message}"
        return f"error ({self.code}): {self.message}" + (f" [{self.param}]" if self.param else "")


def from_body(status: int, body: Any, fallback: str) -> ClientError:
    """The ClientError of an error response: its OpenAI error body when it has one (either the whole
    body or its `error` member), else `http_<status>` with `fallback` (e.g. the response text)."""
    err = body.get("error", body) if isinstance(body, dict) else None
    if isinstance(err, dict) and err.get("message"):
        return ClientError(str(err.get("code") or f"http_{status}"), str(err["message"]), err.get("param"), status)
    return ClientError(f"http_{status}", fallback.strip() or f"HTTP {status}", None, status)


def from_response(response: httpx.Response) -> ClientError:
    """The ClientError of an httpx error response (read it first when streaming)."""
    try:
        body = response.json()
    except ValueError:
        body = None
    return from_body(response.status_code, body, response.text)


def from_openai(exc: openai.OpenAIError, base_url: str) -> ClientError:
    """The ClientError of an `openai` client exception."""
    if isinstance(exc, openai.APIStatusError):
        return from_body(exc.status_code, exc.body, exc.message)
    if isinstance(exc, openai.APIConnectionError):
        return unreachable(base_url, exc.__cause__ or exc)
    return ClientError("client_error", str(exc))


def unreachable(base_url: str, exc: BaseException) -> ClientError:
    """The service could not be reached (connection refused, DNS, timeout)."""
    detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return ClientError("connection_error", f"cannot reach the service at {base_url} ({detail})")
