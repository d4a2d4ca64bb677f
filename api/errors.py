"""One place that turns errors into OpenAI error bodies `{"error": {message, type, param, code}}`:
typed `ServiceError`s, request validation errors (400, `param` is the dotted field path), errors of the
JSON body as a whole (400, code `invalid_request_body`, `param` null; the words are `api.body_errors`),
Starlette's HTTP errors (unknown route 404, 405, body limit 413) and anything unexpected (500, logged)."""

from __future__ import annotations

import json
import logging
import math

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from api.body_errors import BODY_CODE, body_message, parse_failure_message
from api.schemas.fields import request_field_paths
from lcsb_core.data.formats import json_type
from lcsb_service.errors import Overloaded, ServiceError

log = logging.getLogger(__name__)
_VALIDATION_CODES = {"missing": "missing_required_parameter", "extra_forbidden": "unknown_parameter"}
_UNION_TAGS = {"int", "float", "str", "bool", "none", "dict", "list", "bytes"}
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "file_too_large"}


def error_response(status: int, message: str, *, type: str, code: str | None, param: str | None = None,
                   headers: dict | None = None) -> JSONResponse:
    """The one builder of the OpenAI error body `{"error": {message, type, param, code}}`."""
    return JSONResponse({"error": {"message": message, "type": type, "param": param, "code": code}},
                        status_code=status, headers=headers)


async def _service_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ServiceError)  # registered for ServiceError only
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    if isinstance(exc, Overloaded):
        headers = {"Retry-After": str(max(1, math.ceil(exc.retry_after_s)))}
    return error_response(exc.status, exc.message, type=exc.type, code=exc.code, param=exc.param, headers=headers)


def _field_path(loc: tuple) -> list[str]:
    """The request field of a pydantic error location: drop the source ("body", "query", ...) and the
    union-member tags pydantic appends ("int", "literal['auto']", "function-after[...]")."""
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header", "cookie"):
        parts = parts[1:]
    while parts and (parts[-1] in _UNION_TAGS or "[" in parts[-1] or "-" in parts[-1]):
        parts.pop()
    return parts


_SHOWS_INPUT = {"literal_error", "greater_than", "greater_than_equal", "less_than", "less_than_equal"}


def _found(err: dict) -> str:
    """", found string \"2\"" for a wrong-type or out-of-range error (the type as JSON names it, and the
    value, short)."""
    kind = str(err.get("type", ""))
    if not (kind.endswith("_type") or kind in _SHOWS_INPUT) or "input" not in err:
        return ""
    value = err["input"]
    if isinstance(value, (dict, list)):
        return f", found {json_type(value)}"
    shown = json.dumps(value, default=str)
    return f", found {json_type(value)} {shown if len(shown) <= 40 else shown[:37] + '...'}"


def _either(messages: list[str]) -> str:
    """A union's member messages as one: "Input should be 'auto' or greater than or equal to 0.001" (the
    shared "Input should be " said once)."""
    prefix = "Input should be "
    return " or ".join(m.removeprefix(prefix) if i and messages[0].startswith(prefix) else m
                       for i, m in enumerate(messages))


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)  # registered for it only
    errs = list(exc.errors()) or [{"loc": (), "msg": "invalid request", "type": ""}]
    whole_body = body_message(errs[0], doc=exc.body, content_type=request.headers.get("content-type"))
    if whole_body is not None:
        return error_response(400, whole_body, type="invalid_request_error", code=BODY_CODE)
    path = _field_path(tuple(errs[0].get("loc", ())))
    same = [e for e in errs if _field_path(tuple(e.get("loc", ()))) == path]  # a union's member errors
    param = ".".join(path) or None
    detail = _either(list(dict.fromkeys(str(e.get("msg")) for e in same))) + _found(same[0])
    if errs[0].get("type") == "extra_forbidden" and path:  # a known field in the wrong place: say where
        elsewhere = [p for p in request_field_paths().get(str(path[-1]), []) if p != param]
        if elsewhere:
            detail += f"; {path[-1]} belongs at {' or '.join(elsewhere)}"
    message = f"{param}: {detail}" if param else detail
    more = len(errs) - len(same)
    if more > 0:
        message += f" (and {more} more error{'s' if more > 1 else ''})"
    return error_response(400, message, type="invalid_request_error",
                          code=_VALIDATION_CODES.get(errs[0].get("type", ""), "invalid_value"), param=param)


async def _http_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)  # registered for it only
    if exc.status_code == 400 and exc.__cause__ is not None:  # FastAPI could not parse the body
        return error_response(400, parse_failure_message(exc.__cause__), type="invalid_request_error",
                              code=BODY_CODE)
    kind = "invalid_request_error" if exc.status_code < 500 else "server_error"
    return error_response(exc.status_code, str(exc.detail), type=kind, code=_HTTP_CODES.get(exc.status_code),
                          headers=getattr(exc, "headers", None))


async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error", exc_info=exc)
    return error_response(500, "internal server error", type="server_error", code="internal_error")


def install(app: FastAPI) -> None:
    """Register the handlers on `app`."""
    app.add_exception_handler(ServiceError, _service_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
