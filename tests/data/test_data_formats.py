"""Per-record checks of the three formats."""

from __future__ import annotations

import json

import pytest

from lcsb_core.data import gsm8k_to_chat
from lcsb_core.data.formats import parse_record
from lcsb_core.data.json_lines import RecordError
from lcsb_core.errors import DataError


def _err(obj) -> tuple[str | None, str]:
    with pytest.raises(RecordError) as exc:
        parse_record(obj if isinstance(obj, str) else json.dumps(obj))
    return exc.value.field, exc.value.message


def u(c):
    return {"role": "user", "content": c}


def a(c, **kw):
    return {"role": "assistant", "content": c, **kw}


def test_valid_chat_with_system_and_weights():
    ex = parse_record(json.dumps({"messages": [{"role": "system", "content": "S"}, u("q"), a("x", weight=0),
                                               u("q2"), a("y", weight=1)], "id": 7}))
    assert ex.format == "chat" and [m.weight for m in ex.messages] == [1, 1, 0, 1, 1]


@pytest.mark.parametrize("obj, field, fragment", [
    ({"messages": []}, "messages", "is empty"),
    ({"messages": [u("a"), a("b", weight=2)]}, "messages[1].weight", "expected 0 or 1, found 2"),
    ({"messages": [u("a"), a("b", weight=True)]}, "messages[1].weight", "expected 0 or 1, found true"),
    ({"messages": [{**u("a"), "weight": 1}, a("b")]}, "messages[0].weight", "only allowed on assistant"),
    ({"messages": [u("a"), a("b", weight=0)]}, "messages", "weight 0: nothing to train on"),
    ({"messages": [u("a"), a("b"), u("c")]}, "messages[2].role", "must end with an assistant message"),
    ({"messages": [u("a"), {"role": "system", "content": "s"}, a("b")]}, "messages[1].role", "only allowed first"),
    ({"messages": [{"role": "system", "content": "s"}, a("b")]}, "messages[1].role", "after the system message"),
    ({"messages": [u("a"), "assistant: b"]}, "messages[1]", "found string"),
    ({"messages": [u("a"), {"content": "b"}]}, "messages[1].role", "is missing"),
    ({"messages": [u("a"), {"role": 3, "content": "b"}]}, "messages[1].role", "found number"),
    ({"prompt": "a"}, "completion", "is missing"),
    ({"prompt": ["a"], "completion": "b"}, "prompt", "found array"),
    ({"text": ""}, "text", "is empty"),
    ({"text": False}, "text", "found boolean"),
    ({"question": "q", "answer": "a"}, None, "no known format"),
    ({"text": "a", "messages": []}, None, "several formats"),
    ('[1, 2]', None, "expected a JSON object, found array"),
    ('{"text": "a"', None, "not valid JSON"),
    ('{"text": "\\ud800"}', "text", "unpaired surrogate"),
    ("[" * 100000 + "]" * 100000, None, "not valid JSON"),
])
def test_invalid_records(obj, field, fragment):
    got_field, message = _err(obj)
    assert got_field == field and fragment in message


def test_digest_ignores_key_order_and_extra_keys():
    one = parse_record('{"prompt": "a", "completion": "b", "id": 1}')
    two = parse_record('{"completion": "b", "prompt": "a"}')
    assert one.digest() == two.digest()
    assert one.digest() != parse_record('{"prompt": "a", "completion": "c"}').digest()


def test_gsm8k_to_chat():
    row = {"question": "What is 2+3?", "answer": "2+3=5\n#### 5"}
    out = gsm8k_to_chat(row)
    assert out == {"messages": [{"role": "user", "content": "What is 2+3?"},
                                {"role": "assistant", "content": "2+3=5\n#### 5"}]}
    assert parse_record(json.dumps(out)).format == "chat"
    with pytest.raises(DataError, match="answer"):
        gsm8k_to_chat({"question": "q"})
