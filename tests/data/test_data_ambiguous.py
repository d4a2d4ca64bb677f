"""Lines that would train on a guess are refused, and what the upload counts is also said: a key repeated
in one JSON object (at any depth), NaN / Infinity (not JSON, RFC 8259), UTF-16 without a byte-order mark
(one file-level message, the same as with a mark), and duplicate examples (a warning with count and lines)."""

from __future__ import annotations

import json

import pytest

from lcsb_core.data import ValidationLimits, validate_file
from lcsb_core.data.reader import UTF16_MESSAGE, looks_like_utf16

SMALL = ValidationLimits(min_examples=1)
GOOD = json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]})


def _file(tmp_path, lines: list[str], name="train.jsonl"):
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _only_error(tmp_path, line: str):
    """Validate GOOD, `line`, GOOD-like; return the one error, on line 2."""
    other = json.dumps({"messages": [{"role": "user", "content": "bye"}, {"role": "assistant", "content": "ciao"}]})
    report = validate_file(_file(tmp_path, [GOOD, line, other]), limits=SMALL)
    assert not report.ok and report.invalid_examples == 1 and report.valid_examples == 2
    [err] = report.errors
    assert err.line == 2
    return err


U = '{"role": "user", "content": "Is this a question?"}'
REPEATED = [  # (line, the field named): the last value would win silently
    pytest.param('{"messages": [' + U + ', {"role": "assistant", "content": "Yes.", "weight": 0, "weight": 1}]}',
                 "messages[1].weight", id="weight"),
    pytest.param('{"messages": [' + U + ', {"role": "assistant", "content": "No.", "content": "Yes."}]}',
                 "messages[1].content", id="content"),
    pytest.param('{"messages": [{"role": "system", "role": "user", "content": "Hi"}, '
                 '{"role": "assistant", "content": "Hello"}]}', "messages[0].role", id="role"),
    pytest.param('{"messages": [' + U + ', {"role": "assistant", "content": "A"}], "messages": [' + U
                 + ', {"role": "assistant", "content": "B"}]}', "messages", id="messages"),
    pytest.param('{"prompt": "2+2=", "completion": " 5", "completion": " 4"}', "completion", id="completion"),
    pytest.param('{"prompt": "a", "prompt": "b", "completion": "c"}', "prompt", id="prompt"),
    pytest.param('{"text": "one", "text": "two"}', "text", id="text"),
    pytest.param('{"text": "one", "meta": {"id": 1, "id": 2}}', "meta.id", id="nested-ignored-key"),
]


@pytest.mark.parametrize("line, field", REPEATED)
def test_a_repeated_key_rejects_the_line_naming_it(tmp_path, line, field):
    if field in ("completion", "prompt"):
        other = '{"prompt": "x", "completion": "y"}'
    elif field in ("text", "meta.id"):
        other = '{"text": "fine"}'
    else:
        other = None
    if other is None:
        err = _only_error(tmp_path, line)
    else:
        report = validate_file(_file(tmp_path, [other, line]), limits=SMALL)
        assert not report.ok and report.invalid_examples == 1
        [err] = report.errors
        assert err.line == 2
    key = field.rsplit(".", 1)[-1].split("[")[0]
    assert err.field == field
    assert err.message.startswith(f'the key "{key}" appears more than once in ')
    assert "training would use a guess" in err.message


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_not_json(tmp_path, constant):
    line = ('{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo", '
            f'"weight": {constant}}}]}}')
    err = _only_error(tmp_path, line)
    assert err.field is None
    assert err.message == (f"not valid JSON: {constant} is not a JSON value (JSON has no NaN or Infinity, "
                           "RFC 8259); write a finite number, or a string")


def test_nan_as_text_is_fine(tmp_path):
    report = validate_file(_file(tmp_path, ['{"prompt": "NaN", "completion": "Infinity -Infinity"}']), limits=SMALL)
    assert report.ok


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be"])
@pytest.mark.parametrize("name", ["train.jsonl", "corpus.txt"])
def test_utf16_without_a_bom_is_one_file_error(tmp_path, encoding, name):
    text = (GOOD + "\n") * 12 if name.endswith(".jsonl") else "Plain text, line one.\n" * 12
    path = tmp_path / name
    path.write_bytes(text.encode(encoding))
    report = validate_file(path, limits=SMALL)
    assert report.file_errors == [UTF16_MESSAGE] and report.errors == [] and report.invalid_examples == 0
    path.write_bytes(text.encode("utf-16"))  # with a byte-order mark: the same single message
    assert validate_file(path, limits=SMALL).file_errors == [UTF16_MESSAGE]
    path.write_bytes(b"\n" + text.encode(encoding))  # a blank first line does not hide it
    assert validate_file(path, limits=SMALL).file_errors == [UTF16_MESSAGE]


def test_utf8_is_not_taken_for_utf16():
    assert not looks_like_utf16(GOOD.encode())
    assert not looks_like_utf16('{"text": "日本語のテキスト, Ελληνικά, ﻿"}'.encode())
    assert not looks_like_utf16(b'{"text": "a\x00b"}')  # one stray NUL: a line error, not an encoding
    assert looks_like_utf16('{"text": "日本語"}'.encode("utf-16-le"))


def test_duplicates_are_warned_with_count_and_lines(tmp_path):
    other = json.dumps({"messages": [{"role": "user", "content": "bye"}, {"role": "assistant", "content": "ciao"}]})
    report = validate_file(_file(tmp_path, [GOOD, other, GOOD, other, GOOD]), limits=SMALL)
    assert report.ok and report.duplicates == 3
    assert report.warnings == ["3 example(s) repeat an earlier one (line 3 repeats line 1, line 4 repeats line 2, "
                               "line 5 repeats line 1): each copy is trained on again, so it weighs more; remove "
                               "the copies unless that is meant"]
    many = validate_file(_file(tmp_path, [GOOD] * 9, "many.jsonl"), limits=SMALL)
    assert many.warnings[0].startswith("8 example(s) repeat an earlier one (line 2 repeats line 1, ")
    assert "line 6 repeats line 1, ...)" in many.warnings[0]
