"""Typed domain errors. Each carries an HTTP status, an OpenAI error `type`, a machine-readable `code`
and the request `param` it concerns; the API turns any of them into

    {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}

with one exception handler (`api/errors.py`, whose `error_response` is the one builder of that body).
Service code raises these; routes never build HTTP errors by hand.
"""

from __future__ import annotations


class ServiceError(Exception):
    """Base class: `status` (HTTP), `type` (OpenAI error type), `code`, `param`."""

    status = 500
    type = "server_error"
    code = "internal_error"

    def __init__(self, message: str, *, code: str | None = None, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code


class InvalidRequest(ServiceError):
    """A parameter is missing, malformed or out of range (400)."""

    status, type, code = 400, "invalid_request_error", "invalid_request"


class AuthenticationFailed(ServiceError):
    """No API key or an unknown/revoked one (401)."""

    status, type, code = 401, "authentication_error", "invalid_api_key"


class NotFound(ServiceError):
    """No such object for this owner; another owner's object is reported the same way (404)."""

    status, type, code = 404, "invalid_request_error", "not_found"


class Conflict(ServiceError):
    """The object's state does not allow the operation (409)."""

    status, type, code = 409, "invalid_request_error", "conflict"


class PayloadTooLarge(ServiceError):
    """An upload is larger than the configured cap (413)."""

    status, type, code = 413, "invalid_request_error", "file_too_large"


class Unprocessable(ServiceError):
    """The request is valid but cannot be served, e.g. no worker class can hold the job (422)."""

    status, type, code = 422, "invalid_request_error", "unprocessable"


class Overloaded(ServiceError):
    """Too much work in flight, or no worker took it in time: try again after `retry_after_s` (503,
    sent as `Retry-After`)."""

    status, type, code = 503, "server_error", "server_overloaded"

    def __init__(self, message: str, *, retry_after_s: float, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.retry_after_s = retry_after_s
