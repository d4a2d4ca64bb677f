"""What is wrong with a JSON request body as a whole, in words a user can act on: not JSON (with line and
column), sent without `Content-Type: application/json`, empty, not an object, nested too deeply or not
UTF-8, a key repeated in one object, `NaN` / `Infinity` (`strict_json_body`, a dependency of every `/v1`
router). `api.errors` answers all of them in one shape: 400, `invalid_request_error`, code
`invalid_request_body` (`BODY_CODE`), `param` null (no field is at fault, the whole body is).

    message = body_message(first_error, doc=exc.body, content_type=request.headers.get("content-type"))
    message = parse_failure_message(http_exc.__cause__)   # FastAPI's "There was an error parsing the body"
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request

from lcsb_core.data.formats import json_type
from lcsb_service.errors import InvalidRequest

BODY_CODE = "invalid_request_body"
WITH_HEADER = ("with the header 'Content-Type: application/json' (with curl: -H 'Content-Type: application/json', "
               "or --json instead of -d)")
# pydantic's errors for a body that is not an object, or is missing, at location ("body",)
_WHOLE_BODY_TYPES = {"model_attributes_type", "dict_type", "model_type", "missing"}


def _line_column(doc: str, pos: int) -> tuple[int, int]:
    """1-based line and column of character `pos` of `doc` (as `json.JSONDecodeError` counts them)."""
    line = doc.count("\n", 0, pos) + 1
    return line, pos - doc.rfind("\n", 0, pos)


def body_message(err: dict[str, Any], *, doc: Any, content_type: str | None) -> str | None:
    """The message for a validation error `err` (pydantic/FastAPI's dict) about the body as a whole,
    or None when it is about a field. `doc` is the text FastAPI tried to parse (`RequestValidationError.body`)."""
    loc, kind = tuple(err.get("loc", ())), err.get("type")
    if kind == "json_invalid":
        reason = str((err.get("ctx") or {}).get("error") or "invalid syntax")
        if isinstance(doc, str) and len(loc) > 1 and isinstance(loc[1], int):
            line, column = _line_column(doc, loc[1])
            return f"the request body is not valid JSON: {reason} at line {line} column {column}"
        return f"the request body is not valid JSON: {reason}"
    if loc != ("body",) or kind not in _WHOLE_BODY_TYPES:
        return None
    if kind == "missing":
        return f"the request body is empty: send a JSON object {WITH_HEADER}"
    value = err.get("input")
    if isinstance(value, (bytes, bytearray)):  # FastAPI parses JSON only when the header says so
        sent = f"Content-Type: {content_type}" if content_type else "no Content-Type"
        return f"the request body was sent with {sent}, so it was not read as JSON; send it {WITH_HEADER}"
    return f"the request body must be a JSON object, found {json_type(value)}"


def parse_failure_message(cause: BaseException | None) -> str:
    """The message for a body FastAPI could not parse for a reason other than JSON syntax (its 400
    "There was an error parsing the body", raised from `cause`)."""
    if isinstance(cause, RecursionError):
        return ("the request body is nested too deeply to parse (arrays or objects hundreds of levels deep); no "
                "request needs more than a few levels")
    if isinstance(cause, UnicodeDecodeError):
        return (f"the request body is not valid JSON: it is not {cause.encoding.upper()} text ({cause.reason} "
                f"at byte {cause.start})")
    return "the request body could not be parsed as JSON"


class _Repeated(Exception):
    """A JSON object of the body repeats `key`."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


class _NotJSONConstant(Exception):
    """The body holds `NaN`, `Infinity` or `-Infinity`, which Python's parser reads but JSON lacks."""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise _Repeated(key)
        seen.add(key)
    return dict(pairs)


def _constant(name: str) -> Any:
    raise _NotJSONConstant(name)


def strict_body_message(raw: bytes) -> str | None:
    """What makes a body that Python's `json.loads` (and so FastAPI) accepts ambiguous or not JSON
    (RFC 8259): a key repeated in one object (a parser keeps either value, so the request would be read
    as a guess) or `NaN` / `Infinity`. None when the body is strict JSON, or when it is not JSON at all
    (FastAPI's own parse has answered that already, with line and column)."""
    try:
        json.loads(raw, object_pairs_hook=_pairs, parse_constant=_constant)
    except _Repeated as exc:
        return (f"the request body is ambiguous: the key {json.dumps(exc.key, ensure_ascii=False)} appears more "
                "than once in one object, and a JSON reader keeps either value; send each key once")
    except _NotJSONConstant as exc:
        return (f"the request body is not valid JSON: {exc} is not a JSON value (JSON has no NaN or Infinity, "
                "RFC 8259); send a finite number")
    except (ValueError, RecursionError):  # not JSON at all: answered by FastAPI's parse before this runs
        return None
    return None


async def strict_json_body(request: Request) -> None:
    """A dependency of every `/v1` router: a JSON body (Content-Type application/json) that repeats a key
    in one object or holds NaN / Infinity is a 400 `invalid_request_body` (`param` null), never read as
    whichever value the parser kept. Bodies of other types (multipart uploads) pass untouched.

    Raises:
        InvalidRequest: with `strict_body_message`'s words.
    """
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if request.method not in ("POST", "PUT", "PATCH") or content_type != "application/json":
        return
    message = strict_body_message(await request.body())
    if message is not None:
        raise InvalidRequest(message, code=BODY_CODE)
