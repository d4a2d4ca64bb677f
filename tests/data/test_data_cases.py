"""The shared dataset cases (copied under tests/data/cases/), each with its expected report."""

from __future__ import annotations

import json

import pytest

from lcsb_core.data import ValidationLimits, build_dataset, validate_file
from lcsb_core.data.formats import parse_record
from lcsb_core.data.reader import LineReader
from lcsb_core.errors import DataError

# The case files hold 1-3 examples; the default minimum of 10 is tested separately.
SMALL = ValidationLimits(min_examples=1)


def _errors(report):
    return [(e.line, e.field) for e in report.errors]


def test_clean_reference_is_three_chat_examples(case, tokenizer):
    report = validate_file(case("clean_reference.jsonl"), tokenizer=tokenizer, limits=SMALL)
    assert report.ok
    assert (report.format, report.format_line) == ("chat", 1)
    assert (report.num_examples, report.valid_examples, report.invalid_examples) == (3, 3, 0)
    assert report.errors == [] and report.file_errors == []
    assert report.tokens.examples == 3 and report.usable_examples == 3
    json.dumps(report.to_dict())  # JSON-serializable


def test_bom_blank_crlf_parses_to_the_same_records(case, tokenizer):
    def records(name):
        return [parse_record(pl.text) for pl in LineReader(case(name), SMALL)]

    assert records("bom_blank_crlf.jsonl") == records("clean_reference.jsonl")
    raw = case("bom_blank_crlf.jsonl").read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf") and b"\r\n" in raw and not raw.endswith(b"\n")
    report = validate_file(case("bom_blank_crlf.jsonl"), tokenizer=tokenizer, limits=SMALL)
    clean = validate_file(case("clean_reference.jsonl"), tokenizer=tokenizer, limits=SMALL)
    assert report.ok and report.valid_examples == 3 and report.blank_lines == 2 and report.lines == 5
    assert report.tokens == clean.tokens
    a = build_dataset(case("bom_blank_crlf.jsonl"), tokenizer, max_seq_len=512, min_examples=1)
    b = build_dataset(case("clean_reference.jsonl"), tokenizer, max_seq_len=512, min_examples=1)
    assert [(e.input_ids, e.labels) for e in a.examples] == [(e.input_ids, e.labels) for e in b.examples]
    assert [e.line for e in a.examples] == [1, 3, 5]  # physical lines, blank ones counted


def test_roles_bad_one_error_per_bad_line(case):
    report = validate_file(case("roles_bad.jsonl"), limits=SMALL)
    assert not report.ok
    assert (report.valid_examples, report.invalid_examples) == (2, 5)
    assert _errors(report) == [
        (2, "messages[0].role"),     # starts with assistant
        (3, "messages[1].role"),     # two user turns in a row
        (4, "messages[1].role"),     # unknown role bot
        (5, "messages[1].content"),  # no content
        (6, "messages"),             # no assistant turn
    ]
    messages = [e.message for e in report.errors]
    assert "must be from the user, found assistant" in messages[0]
    assert "expected assistant after user, found user" in messages[1]
    assert "unknown role 'bot'" in messages[2]
    assert "is missing" in messages[3]
    assert "no assistant message" in messages[4] and "nothing to train on" in messages[4]


def test_wrong_types_name_field_and_type(case):
    report = validate_file(case("wrong_types.jsonl"), limits=SMALL)
    assert not report.ok and (report.valid_examples, report.invalid_examples) == (2, 4)
    got = [(e.line, e.field, e.message) for e in report.errors]
    assert got == [
        (2, "messages[0].content", "expected a string, found object"),
        (3, "messages[0].content", "expected a string, found null"),
        (4, "messages", "expected a list of messages, found string"),
        (5, "prompt", "expected a string, found number"),
    ]


def test_broken_json_and_utf8_named_without_crash(case, tokenizer):
    report = validate_file(case("broken_json_and_utf8.jsonl"), tokenizer=tokenizer, limits=SMALL)
    assert not report.ok and (report.valid_examples, report.invalid_examples) == (3, 2)
    assert [e.line for e in report.errors] == [3, 5]
    assert report.errors[0].message.startswith("not valid JSON")
    assert "not valid UTF-8" in report.errors[1].message and "0xE9" in report.errors[1].message
    with pytest.raises(DataError) as exc:
        build_dataset(case("broken_json_and_utf8.jsonl"), tokenizer, max_seq_len=512, min_examples=1)
    text = str(exc.value)
    assert "line 3" in text and "line 5" in text and "Traceback" not in text
    assert exc.value.report.invalid_examples == 2


def test_mixed_formats_names_line_2(case):
    report = validate_file(case("mixed_formats.jsonl"), limits=SMALL)
    assert not report.ok and report.format == "chat" and report.format_line == 1
    first = report.errors[0]
    assert first.line == 2
    assert "prompt_completion" in first.message and "one format per file" in first.message
    assert (report.valid_examples, report.invalid_examples) == (1, 2)


def test_prompt_too_long_is_dropped_and_reported(case, tokenizer):
    report = validate_file(case("prompt_too_long.jsonl"), tokenizer=tokenizer, max_seq_len=256, limits=SMALL)
    assert report.ok  # a dropped example is reported, not an error
    assert (report.dropped_no_target, report.dropped_lines) == (1, [2])
    assert (report.truncated, report.truncated_lines) == (0, [])   # counted once: dropped, not also truncated
    assert report.usable_examples == 2
    assert ("1 example(s) dropped, no target token left after truncation to 256 tokens (lines 2)"
            in report.summary())  # what `lcsb train` and the job's start event show
    with pytest.raises(DataError, match=r"only 2 usable examples.*dropped.*\(lines 2\)"):
        build_dataset(case("prompt_too_long.jsonl"), tokenizer, max_seq_len=256, min_examples=3)
    ds = build_dataset(case("prompt_too_long.jsonl"), tokenizer, max_seq_len=256, min_examples=1)
    assert [e.line for e in ds.examples] == [1, 3]
    assert all(any(x != -100 for x in e.labels) for e in ds.examples)
    assert ds.report.dropped_no_target == 1

    big = validate_file(case("prompt_too_long.jsonl"), tokenizer=tokenizer, max_seq_len=4096, limits=SMALL)
    assert big.ok and big.dropped_no_target == 0 and big.truncated == 0 and big.usable_examples == 3
    assert big.tokens.max_tokens > 256


@pytest.mark.parametrize("name, fmt, count", [("prompt_completion.jsonl", "prompt_completion", 2),
                                               ("text.jsonl", "text", 2)])
def test_other_formats_valid(case, tokenizer, name, fmt, count):
    report = validate_file(case(name), tokenizer=tokenizer, limits=SMALL)
    assert report.ok and report.format == fmt and report.valid_examples == count
    ds = build_dataset(case(name), tokenizer, max_seq_len=512, min_examples=1)
    assert len(ds) == count and ds.num_target_tokens > 0


def test_minimum_examples_default_is_ten(case, tokenizer):
    report = validate_file(case("clean_reference.jsonl"))
    assert not report.ok and report.min_examples == 10
    assert any("only 3 valid examples" in m and "at least 10" in m for m in report.file_errors)
    with pytest.raises(DataError, match="at least 10"):
        build_dataset(case("clean_reference.jsonl"), tokenizer, max_seq_len=512)
