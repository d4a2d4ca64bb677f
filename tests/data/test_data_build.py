"""build_dataset options and job-creation checks: skip_invalid, minimum, chat template, duplicates,
train/validation overlap, .txt errors."""

from __future__ import annotations

import copy
import json

import pytest

from lcsb_core.data import ValidationLimits, build_dataset, check_tokenizer, sniff_format, validate_file
from lcsb_core.errors import DataError


def _chat(i: int) -> dict:
    return {"messages": [{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}]}


def _write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_invalid_lines_reject_by_default_and_skip_on_request(tmp_path, tokenizer):
    rows = [_chat(i) for i in range(12)]
    rows[4] = '{"messages": [}'
    rows[9] = {"messages": [{"role": "user", "content": "no answer"}]}
    path = _write(tmp_path / "d.jsonl", rows)
    with pytest.raises(DataError) as exc:
        build_dataset(path, tokenizer, max_seq_len=128)
    assert "line 5" in str(exc.value) and "line 10" in str(exc.value) and "skip_invalid" in str(exc.value)
    assert exc.value.code == "invalid_file"
    ds = build_dataset(path, tokenizer, max_seq_len=128, skip_invalid=True)
    assert len(ds) == 10 and ds.report.skipped_invalid == 2
    assert [e.line for e in ds.examples] == [1, 2, 3, 4, 6, 7, 8, 9, 11, 12]
    assert ds.report.to_dict()["skipped_invalid"] == 2
    with pytest.raises(DataError, match="at least 11"):  # skipping never bypasses the minimum
        build_dataset(path, tokenizer, max_seq_len=128, skip_invalid=True, min_examples=11)


def test_dropped_examples_count_against_the_minimum(tmp_path, tokenizer):
    rows = [_chat(i) for i in range(10)]
    rows[0]["messages"][0]["content"] = "long " * 400
    path = _write(tmp_path / "d.jsonl", rows)
    report = validate_file(path, tokenizer=tokenizer, max_seq_len=128)
    assert report.usable_examples == 9 and not report.ok
    assert report.file_errors == ["only 9 usable examples; at least 10 are needed"]
    assert validate_file(path).ok  # without a tokenizer (at upload) it cannot know


def test_model_without_chat_template_is_a_clear_error(tmp_path, tokenizer):
    no_template = copy.deepcopy(tokenizer)
    no_template.chat_template = None
    chat = _write(tmp_path / "chat.jsonl", [_chat(i) for i in range(10)])
    with pytest.raises(DataError, match="no chat template"):
        check_tokenizer(chat, no_template)
    with pytest.raises(DataError, match="no chat template"):
        build_dataset(chat, no_template, max_seq_len=128)
    assert "no chat template" in validate_file(chat, tokenizer=no_template).file_errors[0]
    assert check_tokenizer(chat, tokenizer) == "chat"
    pc = _write(tmp_path / "pc.jsonl", [{"prompt": f"p{i}", "completion": f"c{i}"} for i in range(10)])
    assert check_tokenizer(pc, no_template) == "prompt_completion"
    assert len(build_dataset(pc, no_template, max_seq_len=64)) == 10


def test_sniff_format_uses_first_valid_line(tmp_path):
    path = _write(tmp_path / "d.jsonl", ["not json", {"text": "hello"}])
    assert sniff_format(path) == "text"
    assert sniff_format(tmp_path / "x.txt") == "text"


def test_duplicates_and_overlap_with_training_file(tmp_path):
    rows = [_chat(i) for i in range(10)]
    rows.append(_chat(2))                                          # line 11 duplicates line 3
    rows.append({"messages": [{"content": "question 2", "role": "user"},  # key order does not matter
                              {"content": "answer 2", "role": "assistant"}]})
    rows.append(_chat(0))                                          # line 13 duplicates line 1
    train = _write(tmp_path / "train.jsonl", rows)
    report = validate_file(train, limits=ValidationLimits(max_listed=2))
    assert report.ok and report.duplicates == 3
    assert report.duplicate_lines == [(11, 3), (12, 3)]
    valid = _write(tmp_path / "valid.jsonl", [_chat(i) for i in range(8, 20)])
    report = validate_file(valid, reference_path=train)
    assert (report.reference_overlap, report.overlap_lines) == (2, [1, 2])


def test_txt_corpus_errors_minimum_and_skip(tmp_path, tokenizer):
    path = tmp_path / "c.txt"
    path.write_bytes(b"first paragraph of text\n\ncaf\xe9 latin-1 line\r\nthird line\n")
    report = validate_file(path, tokenizer=tokenizer, max_seq_len=8, limits=ValidationLimits(min_examples=1))
    assert [(e.line, "UTF-8" in e.message) for e in report.errors] == [(3, True)]
    assert (report.num_examples, report.valid_examples, report.blank_lines) == (3, 2, 1)
    with pytest.raises(DataError, match="line 3"):
        build_dataset(path, tokenizer, max_seq_len=8, min_examples=1)
    ds = build_dataset(path, tokenizer, max_seq_len=8, min_examples=1, skip_invalid=True)
    text = tokenizer.decode([i for e in ds.examples for i in e.input_ids])
    assert text == "first paragraph of text\n\nthird line\n" + tokenizer.eos_token
    with pytest.raises(DataError, match="usable examples; at least 10"):
        build_dataset(path, tokenizer, max_seq_len=8, skip_invalid=True)
