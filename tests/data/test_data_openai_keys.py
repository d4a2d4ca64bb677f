"""What the validator does with every key an OpenAI-style dataset line may carry: each is used, named
in a rejection (line and field), or named in a warning; none is dropped silently. Also: empty trained
targets, and files that are one JSON document instead of JSON Lines."""

from __future__ import annotations

import json

import pytest

from lcsb_core.data import ValidationLimits, build_dataset, validate_file
from lcsb_core.data.formats import NO_TOOLS, parse_record
from lcsb_core.data.json_lines import RecordError

SMALL = ValidationLimits(min_examples=1)
CALL = [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


def u(content="Weather in Paris?", **kw):
    return {"role": "user", "content": content, **kw}


def a(content="Sunny, 21 C.", **kw):
    return {"role": "assistant", "content": content, **kw}


def chat(*messages, **top):
    return {"messages": list(messages), **top}


def _file(tmp_path, rows, name="train.jsonl"):
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


# (line, expected field, fragment of the message): rejected because training would get it wrong
REJECTED = [
    pytest.param(chat(u(), a("", tool_calls=CALL)), "messages[1].tool_calls", "tool calling is not supported",
                 id="tool_calls-empty-content"),
    pytest.param(chat(u(), a("Let me look.", tool_calls=CALL)), "messages[1].tool_calls", "tool calling",
                 id="tool_calls-with-content"),
    pytest.param(chat(u(), a(None, tool_calls=CALL)), "messages[1].tool_calls", "tool calling",
                 id="tool_calls-null-content"),
    pytest.param(chat(u(), a(None, function_call=CALL[0]["function"])), "messages[1].function_call", "tool calling",
                 id="function_call"),
    pytest.param(chat(u(), a(), u("ok", tool_call_id="c1"), a()), "messages[2].tool_call_id", "tool calling",
                 id="tool_call_id"),
    pytest.param(chat(u(), a(), {"role": "tool", "tool_call_id": "c1", "content": "21 C"}, a()),
                 "messages[2].tool_call_id", "tool calling", id="tool-role-with-id"),
    pytest.param(chat(u(), a(), {"role": "tool", "content": "21 C"}, a()), "messages[2].role",
                 "role 'tool': tool calling", id="tool-role"),
    pytest.param(chat(u(), a(), {"role": "function", "name": "f", "content": "21"}, a()), "messages[2].role",
                 "role 'function': tool calling", id="function-role"),
    pytest.param(chat(u(), a(), tools=TOOLS), "tools", "tool calling", id="top-level-tools"),
    pytest.param(chat(u(), a(), tools=TOOLS, parallel_tool_calls=True), "tools", "tool calling",
                 id="tools-and-parallel_tool_calls"),
    pytest.param(chat(u(), a(), functions=[TOOLS[0]["function"]]), "functions", "tool calling", id="functions"),
    pytest.param({"prompt": "Weather?", "completion": "Sunny", "tools": TOOLS}, "tools", "tool calling",
                 id="tools-on-prompt-completion"),
    pytest.param(chat(u(), a(None, refusal="I can't help with that.")), "messages[1].refusal",
                 "put the refusal text in content", id="refusal"),
    pytest.param(chat(u(), a(None, audio={"id": "audio_1"})), "messages[1].audio", "audio is not supported",
                 id="audio"),
    pytest.param(chat(u([{"type": "text", "text": "Weather?"}]), a()), "messages[0].content",
                 "content parts (a list) are not supported", id="content-parts-user"),
    pytest.param(chat(u(), a([{"type": "text", "text": "Sunny"}])), "messages[1].content",
                 "content parts (a list) are not supported", id="content-parts-assistant"),
    pytest.param(chat(u(), a([{"type": "image_url", "image_url": {"url": "x"}}])), "messages[1].content",
                 "content parts", id="content-parts-image"),
]

# (line, ignored key): used for nothing by training, so reported as a warning naming the lines
WARNED = [
    pytest.param(chat(u(name="alice"), a(name="bot")), "messages[].name", id="name"),
    pytest.param(chat(u(), a(), parallel_tool_calls=False), "parallel_tool_calls", id="parallel_tool_calls-alone"),
    pytest.param(chat(u(), a(), id="conv-7"), "id", id="top-level-id"),
    pytest.param(chat(u(), a(annotations=[{"type": "url_citation"}])), "messages[].annotations", id="annotations"),
    pytest.param({"prompt": "2+2=", "completion": " 4", "metadata": {"src": "x"}}, "metadata",
                 id="prompt-completion-metadata"),
    pytest.param({"text": "Some text.", "title": "T"}, "title", id="text-title"),
]


@pytest.mark.parametrize("line, field, fragment", REJECTED)
def test_rejected_keys_name_the_line_and_field(tmp_path, line, field, fragment):
    good = line if "prompt" not in line else None
    rows = [chat(u("hi"), a("hello")) if good else {"prompt": "a", "completion": "b"}, line,
            chat(u("hi"), a("hello")) if good else {"prompt": "c", "completion": "d"}]
    report = validate_file(_file(tmp_path, rows), limits=SMALL)
    assert not report.ok and (report.valid_examples, report.invalid_examples) == (2, 1)
    [err] = report.errors
    assert (err.line, err.field) == (2, field)
    assert fragment in err.message
    assert f"line 2, field {field}: " in report.summary()


def test_tool_calling_message_says_why():
    assert "not supported" in NO_TOOLS and "without it" in NO_TOOLS
    with pytest.raises(RecordError) as exc:  # not "expected a string, found null"
        parse_record(json.dumps(chat(u(), a(None, tool_calls=CALL))))
    assert "found null" not in exc.value.message


@pytest.mark.parametrize("line, key", WARNED)
def test_ignored_keys_are_warned_with_lines(tmp_path, tokenizer, line, key):
    plain = {k: v for k, v in line.items() if k in ("messages", "prompt", "completion", "text")}
    if "messages" in plain:
        plain["messages"] = [{k: v for k, v in m.items() if k in ("role", "content")} for m in plain["messages"]]
    rows = [plain, line, plain, line]
    report = validate_file(_file(tmp_path, rows), tokenizer=tokenizer, limits=SMALL)
    assert report.ok and report.valid_examples == 4
    assert report.ignored_keys == {key: {"count": 2, "lines": [2, 4]}}
    [warning] = [w for w in report.warnings if w.startswith(key)]
    assert f"{key} is ignored on 2 line(s) (2, 4)" in warning
    # worded for the file's format: only chat data goes through a chat template
    if "messages" in line:
        assert "so the chat template never sees it" in warning
    else:
        used = " and ".join(k for k in ("prompt", "completion", "text") if k in line)
        assert "chat template" not in warning and "merge it into content" not in warning
        assert f"training reads only {used} in the {report.format} format, so the model never sees it" in warning
    assert report.to_dict()["ignored_keys"] == {key: {"count": 2, "lines": [2, 4]}}
    # what is used trains exactly as the line without the ignored key
    ds = build_dataset(_file(tmp_path, rows, "b.jsonl"), tokenizer, max_seq_len=256, min_examples=1)
    assert ds.examples[0].input_ids == ds.examples[1].input_ids and ds.examples[0].labels == ds.examples[1].labels


def test_null_valued_keys_carry_nothing(tmp_path):
    rows = [chat(u(question, name=None), a(tool_calls=None, function_call=None, refusal=None, audio=None, name=None),
                 tools=None, functions=[], parallel_tool_calls=None) for question in ("Paris?", "Rome?")]
    report = validate_file(_file(tmp_path, rows), limits=SMALL)
    assert report.ok and report.warnings == [] and report.ignored_keys == {}


@pytest.mark.parametrize("content", ["", "   \n", "\t"])
def test_empty_trained_assistant_content_is_rejected(tmp_path, content):
    rows = [chat(u(), a()), chat(u(), a(content)), chat(u(), a(), u("more?"), a(content))]
    report = validate_file(_file(tmp_path, rows), limits=SMALL)
    assert [(e.line, e.field) for e in report.errors] == [(2, "messages[1].content"), (3, "messages[3].content")]
    assert "is empty" in report.errors[0].message and "weight 0" in report.errors[0].message


def test_empty_untrained_turns_may_stay(tmp_path, tokenizer):
    rows = [chat(u(), a("", weight=0), u("again?"), a()), chat(u(""), a())]
    report = validate_file(_file(tmp_path, rows), tokenizer=tokenizer, limits=SMALL)
    assert report.ok and report.valid_examples == 2


@pytest.mark.parametrize("row, field", [({"prompt": "2+2=", "completion": ""}, "completion"),
                                        ({"prompt": "2+2=", "completion": "  "}, "completion"),
                                        ({"text": " \n"}, "text")])
def test_empty_targets_in_other_formats_are_rejected(row, field):
    with pytest.raises(RecordError) as exc:
        parse_record(json.dumps(row))
    assert exc.value.field == field and "is empty" in exc.value.message


@pytest.mark.parametrize("text, what", [
    ('[{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}]', "a JSON array"),
    ('  [{"prompt": "a", "completion": "b"},\n{"prompt": "c", "completion": "d"}]', "a JSON array"),
    ('[\n  {"prompt": "a", "completion": "b"}\n]', "a JSON array"),
    ('{\n  "messages": []\n}', "one JSON object spread over several lines"),
])
def test_one_json_document_is_named_as_such(tmp_path, text, what):
    path = tmp_path / "data.json"
    path.write_text(text)
    report = validate_file(path, limits=SMALL)
    assert not report.ok and report.errors == [] and report.num_examples == 0
    assert report.file_errors == [f"the file is {what}; upload JSON Lines instead (one JSON object per line, "
                                  "no enclosing brackets)"]
