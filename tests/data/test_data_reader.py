"""Streaming reader and file-level limits: BOM, CRLF, blank lines, caps, encodings, JSON arrays."""

from __future__ import annotations

import json

from lcsb_core.data import ValidationLimits, validate_file
from lcsb_core.data.reader import LineReader

CHAT = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
LINE = json.dumps(CHAT)


def _write(tmp_path, data: bytes, name="f.jsonl"):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_line_endings_bom_and_blank_lines(tmp_path):
    data = b"\xef\xbb\xbf" + (LINE + "\r\n").encode() + b" \t \r\n\n" + LINE.encode() + b"\n" + LINE.encode()
    reader = LineReader(_write(tmp_path, data), ValidationLimits())
    lines = list(reader)
    assert [(pl.number, pl.text) for pl in lines] == [(1, LINE), (4, LINE), (5, LINE)]
    assert (reader.lines_read, reader.blank_lines, reader.file_error) == (5, 2, None)


def test_byte_cap_rejects_before_reading(tmp_path):
    path = _write(tmp_path, (LINE + "\n").encode() * 20)
    report = validate_file(path, limits=ValidationLimits(max_bytes=100, min_examples=1))
    assert not report.ok and report.num_examples == 0
    assert "larger than the limit of 100 bytes" in report.file_errors[0]
    assert len(report.file_errors) == 1


def test_line_cap(tmp_path):
    path = _write(tmp_path, (LINE + "\n").encode() * 20)
    report = validate_file(path, limits=ValidationLimits(max_lines=12, min_examples=1))
    assert not report.ok and "more than 12 lines" in report.file_errors[0]
    assert report.valid_examples == 12


def test_overlong_line_is_an_error_on_that_line_only(tmp_path):
    long_line = json.dumps({"prompt": "x" * 5000, "completion": "y"})
    short = json.dumps({"prompt": "a", "completion": "b"})
    path = _write(tmp_path, f"{short}\n{long_line}\n{short}\n".encode())
    report = validate_file(path, limits=ValidationLimits(max_line_bytes=1000, min_examples=1))
    assert [(e.line, e.message) for e in report.errors] == [(2, "the line is longer than 1,000 bytes")]
    assert report.valid_examples == 2
    path = _write(tmp_path, f"{short}\n{long_line}".encode(), "nofinal.jsonl")  # no final newline
    report = validate_file(path, limits=ValidationLimits(max_line_bytes=1000, min_examples=1))
    assert [e.line for e in report.errors] == [2] and report.valid_examples == 1


def test_utf16_and_json_array_and_missing_file(tmp_path):
    path = _write(tmp_path, (LINE + "\n").encode("utf-16"))
    assert "UTF-16" in validate_file(path).file_errors[0]
    path = _write(tmp_path, ("[\n" + LINE + ",\n" + LINE + "\n]\n").encode(), "array.jsonl")
    assert "JSON array" in validate_file(path).file_errors[0]
    report = validate_file(tmp_path / "nope.jsonl")
    assert not report.ok and "cannot read the file" in report.file_errors[0]


def test_empty_file(tmp_path):
    report = validate_file(_write(tmp_path, b"\n  \n"), limits=ValidationLimits(min_examples=0))
    assert not report.ok and report.file_errors == ["the file holds no examples"]


def test_errors_listed_are_capped_but_all_counted(tmp_path):
    path = _write(tmp_path, b"{bad\n" * 30)
    report = validate_file(path, limits=ValidationLimits(max_errors=5))
    assert report.invalid_examples == 30 and len(report.errors) == 5
    assert "and 25 more" in report.summary()
