"""Plain-text corpora (`.txt`, e.g. WikiText-2): packed into fixed-length blocks.

Decision: a .txt file is language-modelling data and is *packed*: the whole text (lines kept verbatim,
whitespace-only lines kept as empty lines so paragraph breaks survive, EOS at the end of the file) is
tokenized as one stream and cut into consecutive blocks of exactly `max_seq_len` tokens; the last,
shorter block is kept. Every token is a target except the first of each block (nothing precedes it).
Why not one example per blank-line-separated document: plain text has no reliable document boundary
(WikiText-2 puts blank lines around every heading and paragraph, so "documents" would be 5-token
headings next to 300-token paragraphs), and padding such ragged examples wastes most of each batch;
packing is the standard causal-LM recipe (transformers' `run_clm` `group_texts`), trains on every
token, and its results do not depend on where the author left blank lines.

The file is streamed: lines are grouped into ~64 KB chunks cut only before a non-blank line (so the
tokenization equals that of the whole text), chunks are tokenized in batches, and only the current
block's tokens (plus, with `keep_examples`, the finished blocks) are held.

    report = validate_file("valid.txt", tokenizer=tok, max_seq_len=1024)
    report.usable_examples      # number of blocks
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lcsb_core.data.formats import TEXT, Example, Issue
from lcsb_core.data.limits import ValidationLimits
from lcsb_core.data.reader import LineReader
from lcsb_core.data.report import TXT_MODE, ValidationReport
from lcsb_core.data.stats import TokenCounter
from lcsb_core.data.tokenization import IGNORE_INDEX, EncodedExample, ExampleEncoder

CHUNK_CHARS = 64 * 1024
CHUNKS_PER_CALL = 16


class _Packer:
    """Cuts a stream of token ids into blocks of `block` tokens."""

    def __init__(self, block: int, counter: TokenCounter, keep: bool) -> None:
        self.block = block
        self.counter = counter
        self.keep = keep
        self.buffer: list[int] = []
        self.blocks = 0
        self.examples: list[EncodedExample] = []

    def feed(self, ids: list[int]) -> None:
        """Append token ids; emit every full block."""
        self.buffer.extend(ids)
        start = 0
        while len(self.buffer) - start >= self.block:
            self._emit(self.buffer[start:start + self.block])
            start += self.block
        if start:
            del self.buffer[:start]

    def finish(self) -> None:
        """Emit the last, shorter block."""
        if self.buffer:
            self._emit(self.buffer)
            self.buffer = []

    def _emit(self, ids: list[int]) -> None:
        targets = len(ids) - 1
        self.blocks += 1
        self.counter.add(line=self.blocks, length=len(ids), kept_length=len(ids), targets=targets)
        if targets > 0 and self.keep:
            self.examples.append(EncodedExample(ids, [IGNORE_INDEX] + ids[1:], self.blocks))


def scan_text_corpus(
    path: Path,
    report: ValidationReport,
    *,
    tokenizer: Any,
    max_seq_len: int,
    limits: ValidationLimits,
    keep_examples: bool,
) -> list[EncodedExample]:
    """Fill `report` for a .txt corpus; return the packed blocks when `keep_examples` and a tokenizer
    is given. Lines that are not valid UTF-8 (or too long) are line errors and are left out of the
    blocks. Counts: `num_examples` = non-blank lines, `usable_examples` = blocks."""
    report.format, report.txt_mode = TEXT, TXT_MODE
    encoder = ExampleEncoder(tokenizer) if tokenizer is not None else None
    problem = encoder.format_error(TEXT) if encoder is not None else None
    if problem:
        report.file_errors.append(problem)
        encoder = None
    counter = TokenCounter(limits.max_listed)
    packer = _Packer(max_seq_len, counter, keep_examples)
    chunks: list[str] = []
    current: list[str] = []
    current_chars = 0
    lossy_count = 0
    lossy_lines: list[int] = []

    def tokenize_chunks() -> None:
        if encoder is not None and chunks:
            for ids in tokenizer(chunks, add_special_tokens=False)["input_ids"]:
                packer.feed(list(ids))
        chunks.clear()

    if encoder is not None:
        packer.feed(encoder.bos_ids)
    reader = LineReader(path, limits, yield_blank=True)
    for pl in reader:
        if pl.text == "":  # blank line: keep the paragraph break
            if encoder is not None:
                current.append("\n")
                current_chars += 1
            continue
        report.num_examples += 1
        if pl.error is not None or pl.text is None:  # exactly one of them is set
            report.invalid_examples += 1
            if len(report.errors) < limits.max_errors:
                report.errors.append(Issue(pl.number, None, pl.error or "unreadable line"))
            continue
        if report.format_line is None:
            report.format_line = pl.number
        report.valid_examples += 1
        if encoder is None:
            continue
        if encoder.lossy_chars(Example(TEXT, text=pl.text)):
            lossy_count += 1
            if len(lossy_lines) < limits.max_listed:
                lossy_lines.append(pl.number)
        if current_chars >= CHUNK_CHARS:  # cut only before a non-blank line
            chunks.append("".join(current))
            current, current_chars = [], 0
            if len(chunks) >= CHUNKS_PER_CALL:
                tokenize_chunks()
        current.append(pl.text + "\n")
        current_chars += len(pl.text) + 1
    if encoder is not None:
        if current:
            chunks.append("".join(current))
        tokenize_chunks()
        packer.feed([encoder.eos_id] if encoder.eos_id is not None else [])
        packer.finish()
        report.tokens = counter.result()
        report.dropped_no_target, report.dropped_lines = counter.dropped, counter.dropped_lines
        report.usable_examples = packer.blocks - counter.dropped
        if lossy_count:
            report.warnings.append(
                f"{lossy_count} lines contain characters the tokenizer cannot represent (lines "
                f"{', '.join(map(str, lossy_lines))}); they are lost when tokenized")
    report.lines, report.blank_lines = reader.lines_read, reader.blank_lines
    if reader.file_error:
        report.file_errors.insert(0, reader.file_error)
    return packer.examples
