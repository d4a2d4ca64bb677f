"""The JSONL formats: parse one line, check it, detect its format, normalize it. Three are supervised
(chat, prompt_completion, text); the fourth, preference, holds DPO pairs.

    chat               {"messages": [{"role": "system"|"user"|"assistant", "content": str,
                                      "weight": 0|1 (assistant only, optional)}, ...]}
                       optional system message first, then user/assistant alternating, ending with
                       assistant, at least one assistant message with weight 1
    prompt_completion  {"prompt": str, "completion": str}
    text               {"text": str}      (language modelling: every token is a target)
    preference         {"input": {"messages": [...]}, "preferred_output": [{"role": "assistant", "content": str}],
                        "non_preferred_output": [{"role": "assistant", "content": str}]}   (OpenAI's DPO format)
                       input.messages: optional system message first, then user/assistant alternating,
                       starting and ending with user (the outputs answer it; no `weight`), where an assistant
                       turn may also follow an assistant turn (context only; real transcripts have them:
                       the chat template may still refuse it); each output: exactly
                       one assistant message, non-empty, no `weight`; the two answers differ. A line is in this
                       format when it has `preferred_output` or `non_preferred_output`, or an `input` that is an
                       object (a string `input`, as in Alpaca rows, is not this format)

Nothing is dropped silently. Each key of a line is one of:
    used        the keys above
    rejected    what training would get wrong if it left the key out: tool calling (`tool_calls`,
                `function_call`, `tool_call_id`, roles `tool`/`function`, top-level `tools`/`functions`),
                `audio`, `refusal`, content given as a list of parts (in a preference line: `input.tools`,
                `input.functions`, and the same message keys); an empty or whitespace-only trained target
                (assistant content with weight 1, completion, text, a preference answer); `weight` in a
                preference line (its input is never a target, its answers always are)
    ignored     any other key with a non-null value (e.g. a message's `name`, a top-level `id`): listed
                in `Example.ignored` (as `messages[].name`, `id`), which the validator reports as a
                warning naming the lines; in a preference line `input.<key>`, `input.messages[].<key>`,
                `preferred_output[].<key>`, `non_preferred_output[].<key>`
A key whose value is null (or an empty list) carries nothing and is treated as absent; so does a boolean
`input.parallel_tool_calls` (OpenAI's preference examples carry it beside an empty `tools`; without tools
it means nothing).

`parse_record(line_text)` returns an `Example` or raises `RecordError(field, message)`; the validator
turns that into an `Issue` with the physical line number. One error is reported per line: the first
problem found.

    try:
        example = parse_record('{"prompt": "2+2=", "completion": " 4"}')
    except RecordError as err:
        print(err.field, err.message)
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from lcsb_core.data.json_lines import RecordError, parse_json_line

CHAT = "chat"
PROMPT_COMPLETION = "prompt_completion"
TEXT = "text"
PREFERENCE = "preference"  # OpenAI's preference (DPO) file: input.messages, preferred_output, non_preferred_output
FORMATS = (CHAT, PROMPT_COMPLETION, TEXT)
SUPERVISED_FORMATS = FORMATS
PREFERENCE_FORMATS = (PREFERENCE,)
CHAT_TEMPLATE_FORMATS = (CHAT, PREFERENCE)  # rendered with the chat template (preference: `preference_sides`)
ROLES = ("system", "user", "assistant")
FORMAT_KEYS = {CHAT: ("messages",), PROMPT_COMPLETION: ("prompt", "completion"), TEXT: ("text",),
               PREFERENCE: ("input", "preferred_output", "non_preferred_output")}
PREFERENCE_OUTPUTS = ("preferred_output", "non_preferred_output")
MESSAGE_KEYS = ("role", "content", "weight")
TOOL_ROLES = ("tool", "function")
TOOL_MESSAGE_KEYS = ("tool_calls", "function_call", "tool_call_id")
TOOL_TOP_KEYS = ("tools", "functions")
NO_TOOLS = ("tool calling is not supported: training uses plain system, user and assistant text turns, and "
            "dropping the call would teach the model an answer without it; remove the line, or write the "
            "call into the assistant's content as text")
UNSUPPORTED_MESSAGE_KEYS = {
    "audio": "audio is not supported: only text turns are trained",
    "refusal": "a separate refusal is not supported: put the refusal text in content",
}


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


@dataclass(frozen=True)
class Message:
    """One chat turn; `weight` is 1 (train on it) or 0; only assistant turns are ever trained on."""

    role: str
    content: str
    weight: int = 1


@dataclass(frozen=True)
class Example:
    """A normalized, valid example. Chat uses `messages`; prompt_completion `prompt`/`completion`;
    text uses `text`; preference (DPO) uses `messages` (the input conversation, ending with a user turn),
    `preferred` and `non_preferred` (one assistant message each); the other fields stay empty."""

    format: str
    messages: tuple[Message, ...] = ()
    prompt: str = ""
    completion: str = ""
    text: str = ""
    preferred: Message | None = None
    non_preferred: Message | None = None
    ignored: tuple[str, ...] = field(default=(), compare=False)  # keys not used, as "messages[].name"

    def digest(self) -> int:
        """A 64-bit content hash: equal for examples with equal content (used for duplicates and
        train/validation overlap)."""
        if self.format == CHAT:
            body: Any = [[m.role, m.content, m.weight] for m in self.messages]
        elif self.format == PROMPT_COMPLETION:
            body = [self.prompt, self.completion]
        elif self.format == PREFERENCE:
            assert self.preferred is not None and self.non_preferred is not None
            body = [[[m.role, m.content] for m in self.messages], self.preferred.content,
                    self.non_preferred.content]
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
        if self.format == PREFERENCE:
            assert self.preferred is not None and self.non_preferred is not None
            return [m.content for m in self.messages] + [self.preferred.content, self.non_preferred.content]
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


def _present(obj: dict, key: str) -> bool:
    """True when `key` carries something: present, not null, not an empty list or object."""
    value = obj.get(key)
    return value is not None and value != [] and value != {}


def _string(obj: dict, key: str, field: str) -> str:
    if key not in obj:
        raise RecordError(field, "is missing")
    value = obj[key]
    if isinstance(value, list) and key == "content":
        raise RecordError(field, "content parts (a list) are not supported; give the text as one string")
    if not isinstance(value, str):
        raise RecordError(field, f"expected a string, found {json_type(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise RecordError(field, "contains an unpaired surrogate escape such as \\ud800; not valid text") from None
    return value


def detect_format(obj: dict) -> str:
    """The format a JSON object is written in, from its keys: `messages` (chat), `prompt` / `completion`
    (prompt_completion), `text` (text), `preferred_output` / `non_preferred_output` or an object-valued
    `input` (preference). Raises RecordError when it has the keys of none or of several formats."""
    found = []
    if "messages" in obj:
        found.append(CHAT)
    if "prompt" in obj or "completion" in obj:
        found.append(PROMPT_COMPLETION)
    if "text" in obj:
        found.append(TEXT)
    if any(k in obj for k in PREFERENCE_OUTPUTS) or isinstance(obj.get("input"), dict):
        found.append(PREFERENCE)
    if not found:
        keys = ", ".join(sorted(obj)[:5]) or "none"
        raise RecordError(
            None,
            'no known format: expected "messages" (chat), "prompt" and "completion", "text", or "input", '
            f'"preferred_output" and "non_preferred_output" (preference); found keys: {keys}',
        )
    if len(found) > 1:
        raise RecordError(None, f"keys of several formats on one line ({', '.join(found)}); use one")
    return found[0]


def _non_empty_target(value: str, field: str, what: str) -> None:
    if not value.strip():
        raise RecordError(field, f"is empty: {what} is a training target, and an empty one teaches the model "
                                 "to stop at once")


def _ignored(obj: dict, used: tuple[str, ...], prefix: str = "") -> list[str]:
    """Keys of `obj` that carry something but are not read (`prefix` + key)."""
    return [prefix + k for k in obj if k not in used and _present(obj, k)]


def _parse_message(i: int, m: Any, ignored: list[str], path: str = "messages", weights: bool = True) -> Message:
    """Message `i` of the list at JSON path `path`. With `weights` False (preference data) a `weight` key
    is an error, and an assistant turn is not checked for empty content (the caller decides)."""
    where = f"{path}[{i}]"
    if not isinstance(m, dict):
        raise RecordError(where, f"expected an object with role and content, found {json_type(m)}")
    for key in TOOL_MESSAGE_KEYS:
        if _present(m, key):
            raise RecordError(f"{where}.{key}", NO_TOOLS)
    role = _string(m, "role", f"{where}.role")
    if role in TOOL_ROLES:
        raise RecordError(f"{where}.role", f"role {role!r}: {NO_TOOLS}")
    if role not in ROLES:
        raise RecordError(f"{where}.role", f"unknown role {role!r}; expected system, user or assistant")
    for key, why in UNSUPPORTED_MESSAGE_KEYS.items():
        if _present(m, key):
            raise RecordError(f"{where}.{key}", why)
    content = _string(m, "content", f"{where}.content")
    weight = 1
    if not weights:
        if _present(m, "weight"):
            raise RecordError(f"{where}.weight", "is not used in preference data: the input is never a target and "
                                                 "each answer is scored whole; remove it")
        ignored.extend(_ignored(m, MESSAGE_KEYS, f"{path}[]."))
        return Message(role, content, 1)
    if "weight" in m:
        w = m["weight"]
        if role != "assistant":
            raise RecordError(f"{where}.weight", "is only allowed on assistant messages")
        if isinstance(w, bool) or w not in (0, 1):
            shown = json.dumps(w) if json_type(w) != "object" else "an object"
            raise RecordError(f"{where}.weight", f"expected 0 or 1, found {shown}")
        weight = int(w)
    if role == "assistant" and weight == 1:
        _non_empty_target(content, f"{where}.content", "an assistant turn with weight 1 (give the answer, or "
                                                        "weight 0 to keep the turn as context only)")
    ignored.extend(_ignored(m, MESSAGE_KEYS, "messages[]."))
    return Message(role, content, weight)


def _parse_chat(obj: dict) -> Example:
    messages = obj["messages"]
    if not isinstance(messages, list):
        raise RecordError("messages", f"expected a list of messages, found {json_type(messages)}")
    if not messages:
        raise RecordError("messages", "is empty: nothing to train on")
    ignored: list[str] = _ignored(obj, FORMAT_KEYS[CHAT])
    parsed = [_parse_message(i, m, ignored) for i, m in enumerate(messages)]
    _check_turns(parsed, "messages")
    if not any(m.role == "assistant" for m in parsed):
        raise RecordError("messages", "has no assistant message: nothing to train on")
    if parsed[-1].role != "assistant":
        last = len(parsed) - 1
        raise RecordError(f"messages[{last}].role",
                          f"the conversation must end with an assistant message, found {parsed[-1].role}")
    if not any(m.role == "assistant" and m.weight == 1 for m in parsed):
        raise RecordError("messages", "every assistant message has weight 0: nothing to train on")
    return Example(CHAT, messages=tuple(parsed), ignored=tuple(dict.fromkeys(ignored)))


def _check_turns(parsed: list[Message], path: str, repeat_assistant: bool = False) -> None:
    """Optional system message first, then user/assistant alternating, starting with user; `path` is the
    list's JSON path (for the error's field). With `repeat_assistant` an assistant turn may also follow an
    assistant turn (a preference input: context only, and real transcripts have an assistant that spoke
    twice)."""
    start = 1 if parsed[0].role == "system" else 0
    for i in range(start, len(parsed)):
        role = parsed[i].role
        if role == "system":
            raise RecordError(f"{path}[{i}].role", "a system message is only allowed first")
        if i == start:
            if role != "user":
                after = " after the system message" if start else ""
                raise RecordError(f"{path}[{i}].role",
                                  f"the first message{after} must be from the user, found {role}")
            continue
        previous = parsed[i - 1].role
        if repeat_assistant and role == previous == "assistant":
            continue
        expected = "assistant" if previous == "user" else "user"
        if role != expected:
            raise RecordError(
                f"{path}[{i}].role",
                f"expected {expected} after {previous}, found {role} (user and assistant turns alternate)",
            )


def _parse_output(obj: dict, key: str, ignored: list[str]) -> Message:
    """The one assistant message of `preferred_output` or `non_preferred_output`."""
    if not _present(obj, key):
        if isinstance(obj.get(key), list):
            raise RecordError(key, "is empty: give the answer as one assistant message")
        if obj.get(key) == {}:
            raise RecordError(key, "expected a list with one assistant message, found object")
        raise RecordError(key, "is missing: a preference line needs preferred_output and non_preferred_output, "
                               "one assistant message each")
    value = obj[key]
    if not isinstance(value, list):
        raise RecordError(key, f"expected a list with one assistant message, found {json_type(value)}")
    if len(value) > 1:
        raise RecordError(key, f"holds {len(value)} messages; give exactly one assistant message (the answer: "
                               "multi-turn answers are not supported)")
    message = _parse_message(0, value[0], ignored, key, weights=False)
    if message.role != "assistant":
        raise RecordError(f"{key}[0].role", f"expected assistant, found {message.role} (the output is the "
                                            "assistant's answer to the input)")
    if not message.content.strip():
        raise RecordError(f"{key}[0].content", "is empty: each answer is scored token by token, and an empty one "
                                               "has nothing to score; give the answer's text")
    return message


def _parse_preference(obj: dict) -> Example:
    """A preference (DPO) line: `input.messages`, `preferred_output`, `non_preferred_output`."""
    if "input" not in obj or obj["input"] is None:
        raise RecordError("input", 'is missing: a preference line needs {"input": {"messages": [...]}}')
    source = obj["input"]
    if not isinstance(source, dict):
        raise RecordError("input", f"expected an object with messages, found {json_type(source)}")
    for key in TOOL_TOP_KEYS:
        if _present(source, key):
            raise RecordError(f"input.{key}", NO_TOOLS)
    if "messages" not in source or source["messages"] is None:
        raise RecordError("input.messages", "is missing: the input conversation the two outputs answer")
    messages = source["messages"]
    if not isinstance(messages, list):
        raise RecordError("input.messages", f"expected a list of messages, found {json_type(messages)}")
    if not messages:
        raise RecordError("input.messages", "is empty: the outputs must answer a user message")
    ignored: list[str] = _ignored(obj, FORMAT_KEYS[PREFERENCE])
    switch = source.get("parallel_tool_calls")
    ignored += _ignored(source, ("messages",) + (("parallel_tool_calls",) if isinstance(switch, bool) else ()),
                        "input.")
    parsed = [_parse_message(i, m, ignored, "input.messages", weights=False) for i, m in enumerate(messages)]
    _check_turns(parsed, "input.messages", repeat_assistant=True)
    if parsed[-1].role != "user":
        last = len(parsed) - 1
        raise RecordError(f"input.messages[{last}].role",
                          "the input must end with a user message (preferred_output and non_preferred_output "
                          f"answer it), found {parsed[-1].role}")
    preferred = _parse_output(obj, "preferred_output", ignored)
    non_preferred = _parse_output(obj, "non_preferred_output", ignored)
    if preferred.content == non_preferred.content:
        raise RecordError("non_preferred_output[0].content",
                          "is the same as preferred_output[0].content: a pair of equal answers teaches nothing (its "
                          "DPO loss is constant); give two different answers or remove the line")
    return Example(PREFERENCE, messages=tuple(parsed), preferred=preferred, non_preferred=non_preferred,
                   ignored=tuple(dict.fromkeys(ignored)))


def check_record(obj: Any) -> Example:
    """Validate one parsed JSON value and normalize it. Raises RecordError (first problem found)."""
    if not isinstance(obj, dict):
        raise RecordError(None, f"expected a JSON object, found {json_type(obj)}")
    for key in TOOL_TOP_KEYS:
        if _present(obj, key):
            raise RecordError(key, NO_TOOLS)
    fmt = detect_format(obj)
    if fmt == CHAT:
        return _parse_chat(obj)
    if fmt == PREFERENCE:
        return _parse_preference(obj)
    ignored = tuple(_ignored(obj, FORMAT_KEYS[fmt]))
    if fmt == PROMPT_COMPLETION:
        prompt = _string(obj, "prompt", "prompt")
        completion = _string(obj, "completion", "completion")
        _non_empty_target(completion, "completion", "the completion")
        return Example(PROMPT_COMPLETION, prompt=prompt, completion=completion, ignored=ignored)
    text = _string(obj, "text", "text")
    _non_empty_target(text, "text", "the text")
    return Example(TEXT, text=text, ignored=ignored)


def parse_record(line_text: str) -> Example:
    """Parse one JSONL line into an `Example` (strict JSON: `parse_json_line`). Raises RecordError for
    invalid JSON, a repeated key, or invalid content."""
    return check_record(parse_json_line(line_text))


def preference_sides(example: Example) -> tuple[Example, Example]:
    """The two chat examples a preference pair is scored on: the input conversation followed by the
    preferred answer, and by the non-preferred one. Every assistant turn of the input has weight 0, so
    only the answer's tokens are targets (DPO scores the answer given the prompt).

    Raises:
        ValueError: `example` is not a preference example.
    """
    if example.format != PREFERENCE or example.preferred is None or example.non_preferred is None:
        raise ValueError(f"not a preference example: format {example.format!r}")
    prompt = tuple(Message(m.role, m.content, 0) if m.role == "assistant" else m for m in example.messages)
    chosen = Example(CHAT, messages=prompt + (Message("assistant", example.preferred.content, 1),))
    rejected = Example(CHAT, messages=prompt + (Message("assistant", example.non_preferred.content, 1),))
    return chosen, rejected
