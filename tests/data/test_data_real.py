"""The reference data sets: GSM8K (through gsm8k_to_chat) and WikiText-2 (.txt, packed blocks)."""

from __future__ import annotations

import json
import math
import time

import pytest

from lcsb_core.data import build_dataset, convert_jsonl, gsm8k_to_chat, validate_file


@pytest.fixture(scope="module")
def gsm8k_chat(shared_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("gsm8k")
    paths = {}
    for split in ("train", "test"):
        paths[split] = out / f"{split}_chat.jsonl"
        paths[f"{split}_rows"] = convert_jsonl(shared_data(f"gsm8k/{split}.jsonl"), paths[split], gsm8k_to_chat)
    return paths


def test_gsm8k_counts_through_the_converter(gsm8k_chat, tokenizer):
    assert (gsm8k_chat["train_rows"], gsm8k_chat["test_rows"]) == (7473, 1319)
    train = validate_file(gsm8k_chat["train"], tokenizer=tokenizer, max_seq_len=512)
    assert train.ok and train.format == "chat"
    assert (train.num_examples, train.valid_examples, train.invalid_examples) == (7473, 7473, 0)
    assert train.tokens.examples == 7473 and train.usable_examples == 7473
    assert train.tokens.min_tokens <= train.tokens.mean_tokens <= train.tokens.p95_tokens <= train.tokens.max_tokens
    assert train.truncated == 7 and train.dropped_no_target == 0 and train.duplicates == 0
    test = validate_file(gsm8k_chat["test"], tokenizer=tokenizer, max_seq_len=512, reference_path=gsm8k_chat["train"])
    assert test.ok and (test.valid_examples, test.invalid_examples) == (1319, 0)
    assert test.reference_overlap == 0
    json.dumps(test.to_dict())


def test_raw_gsm8k_rows_are_rejected_with_a_clear_message(shared_data):
    report = validate_file(shared_data("gsm8k/test.jsonl"))
    assert not report.ok and report.invalid_examples == 1319
    assert "no known format" in report.errors[0].message and "question" in report.errors[0].message


def test_tokenizing_500_gsm8k_examples_is_fast(gsm8k_chat, tokenizer, tmp_path):
    path = tmp_path / "g500.jsonl"
    with open(gsm8k_chat["train"]) as f:
        path.write_text("".join(line for _, line in zip(range(500), f, strict=False)))
    start = time.perf_counter()
    ds = build_dataset(path, tokenizer, max_seq_len=1024)
    elapsed = time.perf_counter() - start
    assert len(ds) == 500 and ds.num_target_tokens > 500 * 20
    assert elapsed < 10, f"500 GSM8K examples took {elapsed:.1f} s"


def test_wikitext2_valid_packed_into_blocks(shared_data, tokenizer):
    path = shared_data("wikitext-2/valid.txt")
    structure = validate_file(path)
    assert structure.ok and structure.file_type == "txt" and structure.txt_mode == "packed_blocks"
    assert (structure.lines, structure.blank_lines, structure.num_examples, structure.invalid_examples) == (
        3760, 1299, 2461, 0)
    ds = build_dataset(path, tokenizer, max_seq_len=1024)
    report = ds.report
    blocks = ds.examples
    total = report.tokens.total_tokens
    assert len(blocks) == report.usable_examples == math.ceil(total / 1024)
    assert all(len(b.input_ids) == 1024 for b in blocks[:-1]) and 1 < len(blocks[-1].input_ids) <= 1024
    assert [b.line for b in blocks] == list(range(1, len(blocks) + 1))
    assert all(b.labels == [-100] + b.input_ids[1:] for b in blocks)
    assert ds.num_target_tokens == total - len(blocks) == report.tokens.trainable_tokens
    # the blocks hold the whole text: lines verbatim, whitespace-only lines as empty lines, EOS at the end
    ids = [i for b in blocks for i in b.input_ids]
    expected = "".join((line if line.strip() else "") + "\n" for line in path.read_text().split("\n")[:-1])
    decoded = tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    assert decoded == expected + tokenizer.eos_token
    whole = tokenizer(expected, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    assert ids == whole  # chunked tokenization equals tokenizing the whole text
