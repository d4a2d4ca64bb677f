"""The three JSONL formats: parse one line, check it, detect its format, normalize it.

    chat               {"messages": [{"role": "system"|"user"|"assistant", "content": str,
                                      "weight": 0|1 (assistant only, optional)}, ...]}
                       optional system message first, then user/assistant alternating, ending with
                       assistant, at least one assistant message with weight 1
    prompt_completion  {"prompt": str, "completion": str}
    text               {"text": str}      (language modelling: every token is a target)

Other top-level keys are ignored. `parse_record(line_text)` returns an `Example` or raises
`RecordError(field, message)`; the validator turns that into an `Issue` with the physical line number.
One error is reported per line: the first problem found.

    try:
        example = parse_record('{"prompt": "2+2=", "completion": " 4"}')
    except RecordError as err:
        print(err.field, err.message)
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

CHAT = "chat"
PROMPT_COMPLETION = "prompt_completion"
TEXT = "text"
FORMATS = (CHAT, PROMPT_COMPLETION, TEXT)
ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class Issue:
    """A problem on one line: `line` is the 1-based physical line (None for the whole file), `field`
    a JSON path such as `messages[1].content` (None for the whole line), `message` plain English."""

    line: int | None
    field: str | None
    message: str

    def to_dict(self) -> dict[str, Any]:
        """{"line", "field", "message"}."""
        return {"line": self.line, "field": self.field, "message": self.message}

    def __str__(self) -> str:
        where = f"line {self.line}" if self.line is not None else "file"
        return f"{where}" + (f", field {self.field}" if self.field else "") + f": {self.message}"


class RecordError(ValueError):
    """A line is not a valid example; `field` names the JSON path (or None), `message` says why."""

    def __init__(self, field: str | None, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Message:
    """One chat turn; `weight` is 1 (train on it) or 0; only assistant turns are ever trained on."""

    role: str
    content: str
    weight: int = 1


@dataclass(frozen=True)
class Example:
    """A normalized, valid example. Chat uses `messages`; prompt_completion `prompt`/`completion`;
    text uses `text`; the other fields stay empty."""

    format: str
    messages: tuple[Message, ...] = ()
    prompt: str = ""
    completion: str = ""
    text: str = ""

    def digest(self) -> int:
        """A 64-bit content hash: equal for examples with equal content (used for duplicates and
        train/validation overlap)."""
        if self.format == CHAT:
            body: Any = [[m.role, m.content, m.weight] for m in self.messages]
        elif self.format == PROMPT_COMPLETION:
            body = [self.prompt, self.completion]
        else:
            body = self.text
        data = json.dumps([self.format, body], ensure_ascii=False, separators=(",", ":"))
        return int.from_bytes(hashlib.blake2b(data.encode("utf-8"), digest_size=8).digest(), "little")

    def strings(self) -> list[str]:
        """Every text of the example (contents, prompt, completion or text)."""
        if self.format == CHAT:
            return [m.content for m in self.messages]
        if self.format == PROMPT_COMPLETION:
            return [self.prompt, self.completion]
        return [self.text]


def json_type(value: Any) -> str:
    """The JSON name of a parsed value's type: object, array, string, number, boolean or null."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _string(obj: dict, key: str, field: str) -> str:
    if key not in obj:
        raise RecordError(field, "is missing")
    value = obj[key]
    if not isinstance(value, str):
        raise RecordError(field, f"expected a string, found {json_type(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise RecordError(field, "contains an unpaired surrogate escape such as \\ud800; not valid text") from None
    return value


def detect_format(obj: dict) -> str:
    """The format a JSON object is written in, from its keys. Raises RecordError when it has the keys
    of none or of several formats."""
    found = []
    if "messages" in obj:
        found.append(CHAT)
    if "prompt" in obj or "completion" in obj:
        found.append(PROMPT_COMPLETION)
    if "text" in obj:
        found.append(TEXT)
    if not found:
        keys = ", ".join(sorted(obj)[:5]) or "none"
        raise RecordError(
            None,
            'no known format: expected "messages" (chat), "prompt" and "completion", or "text"; '
            f"found keys: {keys}",
        )
    if len(found) > 1:
        raise RecordError(None, f"keys of several formats on one line ({', '.join(found)}); use one")
    return found[0]


def _parse_chat(obj: dict) -> Example:
    messages = obj["messages"]
    if not isinstance(messages, list):
        raise RecordError("messages", f"expected a list of messages, found {json_type(messages)}")
    if not messages:
        raise RecordError("messages", "is empty: nothing to train on")
    parsed = []
    for i, m in enumerate(messages):
        field = f"messages[{i}]"
        if not isinstance(m, dict):
            raise RecordError(field, f"expected an object with role and content, found {json_type(m)}")
        role = _string(m, "role", f"{field}.role")
        if role not in ROLES:
            raise RecordError(f"{field}.role", f"unknown role {role!r}; expected system, user or assistant")
        content = _string(m, "content", f"{field}.content")
        weight = 1
        if "weight" in m:
            w = m["weight"]
            if role != "assistant":
                raise RecordError(f"{field}.weight", "is only allowed on assistant messages")
            if isinstance(w, bool) or w not in (0, 1):
                shown = json.dumps(w) if json_type(w) != "object" else "an object"
                raise RecordError(f"{field}.weight", f"expected 0 or 1, found {shown}")
            weight = int(w)
        parsed.append(Message(role, content, weight))
    start = 1 if parsed[0].role == "system" else 0
    for j, i in enumerate(range(start, len(parsed))):
        role = parsed[i].role
        if role == "system":
            raise RecordError(f"messages[{i}].role", "a system message is only allowed first")
        expected = "user" if j % 2 == 0 else "assistant"
        if role != expected:
            if j == 0:
                after = " after the system message" if start else ""
                raise RecordError(f"messages[{i}].role",
                                  f"the first message{after} must be from the user, found {role}")
            raise RecordError(
                f"messages[{i}].role",
                f"expected {expected} after {parsed[i - 1].role}, found {role} (user and assistant turns alternate)",
            )
    if not any(m.role == "assistant" for m in parsed):
        raise RecordError("messages", "has no assistant message: nothing to train on")
    if parsed[-1].role != "assistant":
        last = len(parsed) - 1
        raise RecordError(f"messages[{last}].role",
                          f"the conversation must end with an assistant message, found {parsed[-1].role}")
    if not any(m.role == "assistant" and m.weight == 1 for m in parsed):
        raise RecordError("messages", "every assistant message has weight 0: nothing to train on")
    return Example(CHAT, messages=tuple(parsed))


def check_record(obj: Any) -> Example:
    """Validate one parsed JSON value and normalize it. Raises RecordError (first problem found)."""
    if not isinstance(obj, dict):
        raise RecordError(None, f"expected a JSON object, found {json_type(obj)}")
    fmt = detect_format(obj)
    if fmt == CHAT:
        return _parse_chat(obj)
    if fmt == PROMPT_COMPLETION:
        prompt = _string(obj, "prompt", "prompt")
        return Example(PROMPT_COMPLETION, prompt=prompt, completion=_string(obj, "completion", "completion"))
    text = _string(obj, "text", "text")
    if not text.strip():
        raise RecordError("text", "is empty")
    return Example(TEXT, text=text)


def parse_record(line_text: str) -> Example:
    """Parse one JSONL line into an `Example`. Raises RecordError for invalid JSON or content."""
    try:
        obj = json.loads(line_text)
    except json.JSONDecodeError as exc:
        raise RecordError(None, f"not valid JSON: {exc.msg} at column {exc.colno}") from None
    except RecursionError:
        raise RecordError(None, "not valid JSON: nested too deeply") from None
    return check_record(obj)
