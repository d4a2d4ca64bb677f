"""One line of a JSONL file as strict JSON (RFC 8259), and `RecordError`, how a line's problem is told:
the field's JSON path and why. Python's json module accepts NaN and Infinity and keeps the last of a
repeated key; training would then use a guess, so both are refused here, naming the line's field."""

from __future__ import annotations

import json
from typing import Any


class RecordError(ValueError):
    """A line is not a valid example; `field` names the JSON path (or None), `message` says why."""

    def __init__(self, field: str | None, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.message = message


class _NotJSON(ValueError):
    """A constant Python's json module accepts but JSON does not (NaN, Infinity, -Infinity)."""


class _Pairs(dict):
    """A JSON object whose key `repeated` appeared more than once (its last value kept)."""

    repeated: str


def _first_repeat(pairs: list[tuple[str, Any]]) -> str:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            return key
        seen.add(key)
    raise AssertionError("no repeated key")


def _constant(name: str) -> Any:
    """`parse_constant`: NaN, Infinity and -Infinity are not JSON (RFC 8259, section 6)."""
    raise _NotJSON(name)


def _repeated_key(value: Any, path: str = "") -> tuple[str, str] | None:
    """(JSON path of the object, the key) of the first object in `value` that repeats a key, else None."""
    if isinstance(value, dict):
        if isinstance(value, _Pairs):
            return path, value.repeated
        for key, item in value.items():
            found = _repeated_key(item, f"{path}.{key}" if path else key)
            if found:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = _repeated_key(item, f"{path}[{i}]")
            if found:
                return found
    return None


def parse_json_line(line_text: str) -> Any:
    """Parse one line as strict JSON (RFC 8259): NaN / Infinity / -Infinity and an object that repeats a
    key (at any depth) are refused, since a reader keeps either value and training would use a guess.

    Raises:
        RecordError: not valid JSON (`field` None), or a repeated key (`field` the key's JSON path, such
            as `messages[1].weight`).
    """
    repeats = 0

    def pairs_hook(pairs: list[tuple[str, Any]]) -> dict:
        nonlocal repeats
        obj = dict(pairs)
        if len(obj) == len(pairs):
            return obj
        repeats += 1
        flagged = _Pairs(obj)
        flagged.repeated = _first_repeat(pairs)
        return flagged

    try:
        obj = json.loads(line_text, object_pairs_hook=pairs_hook, parse_constant=_constant)
    except json.JSONDecodeError as exc:
        raise RecordError(None, f"not valid JSON: {exc.msg} at column {exc.colno}") from None
    except _NotJSON as exc:
        raise RecordError(None, f"not valid JSON: {exc} is not a JSON value (JSON has no NaN or Infinity, "
                                "RFC 8259); write a finite number, or a string") from None
    except RecursionError:
        raise RecordError(None, "not valid JSON: nested too deeply") from None
    found = _repeated_key(obj) if repeats else None
    if found is not None:
        path, key = found
        field = f"{path}.{key}" if path else key
        where = f"the object at {path}" if path else "the line's object"
        raise RecordError(field, f"the key {json.dumps(key, ensure_ascii=False)} appears more than once in "
                                 f"{where}; readers keep either value, so training would use a guess: keep one")
    return obj
