"""Validate a dataset file in one streaming pass: the single check used by the API (at upload, usually
without a tokenizer) and by the trainer (before training, with the base model's tokenizer), so a file
that passes at upload cannot fail later for a structural reason.

    report = validate_file("train.jsonl", tokenizer=tok, max_seq_len=2048,
                           limits=ValidationLimits(min_examples=10),
                           reference_path=None)        # or the training file, for a validation file
    report.ok, report.format, report.errors[0].line, report.to_dict()

`.txt` files are plain-text corpora (see `text_corpus`); everything else is read as JSONL. The file is
read line by line (flat memory); valid examples are tokenized in batches of `ENCODE_BATCH` and only
their statistics are kept, unless `scan_file(..., keep_examples=True)` (used by `build_dataset`).

Preference (DPO) files: each line is encoded as its two sides (`formats.preference_sides`: the input
followed by the preferred answer, and by the non-preferred one), kept interleaved as [chosen_0, rejected_0,
chosen_1, rejected_1, ...], both carrying the line's number. A side longer than `max_seq_len` tokens is an
error on its line, never truncated (cutting an answer changes its log-probability); token statistics count
each side as one sequence.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lcsb_core.data.formats import (
    CHAT,
    FORMAT_KEYS,
    PREFERENCE,
    PREFERENCE_OUTPUTS,
    Example,
    Issue,
    RecordError,
    parse_record,
    preference_sides,
)
from lcsb_core.data.limits import ValidationLimits
from lcsb_core.data.reader import LineReader
from lcsb_core.data.report import ValidationReport
from lcsb_core.data.settings import DataSettings
from lcsb_core.data.stats import DigestTracker, TokenCounter
from lcsb_core.data.tokenization import IGNORE_INDEX, EncodedExample, ExampleEncoder, Segment

ENCODE_BATCH = 256
TXT_SUFFIXES = (".txt", ".text")


def _ignored_because(key: str, fmt: str | None) -> str:
    """Why an ignored key never reaches the model and where its text could go, in the words of the
    file's format (only chat data goes through a chat template)."""
    if key.startswith("messages[]."):
        return "a message's role, content and weight, so the chat template never sees it; remove it, or merge " \
               "it into content"
    if fmt == PREFERENCE:
        if "[]." in key:
            return "a message's role and content, so the chat template never sees it; remove it, or merge it into " \
                   "content"
        if key.startswith("input."):
            return "input.messages of the input, so the chat template never sees it; remove it, or merge it into a " \
                   "message's content"
        return "input, preferred_output and non_preferred_output in the preference format, so the chat template " \
               "never sees it; remove it"
    if fmt == CHAT:
        return "messages, so the chat template never sees it; remove it, or merge it into a message's content"
    used = FORMAT_KEYS.get(fmt or "", ())
    if not used:
        return "the format's keys, so the model never sees it; remove it"
    keys = " and ".join(used)
    return f"{keys} in the {fmt} format, so the model never sees it; remove it, or merge it into {' or '.join(used)}"


class _Scan:
    """State of one JSONL pass."""

    def __init__(self, report: ValidationReport, encoder: ExampleEncoder | None, max_seq_len: int,
                 limits: ValidationLimits, keep_examples: bool) -> None:
        self.report = report
        self.encoder = encoder
        self.max_seq_len = max_seq_len
        self.limits = limits
        self.keep = keep_examples
        self.digests = DigestTracker()
        self.counter = TokenCounter(limits.max_listed)
        self.pending: list[tuple[int, list[Segment]]] = []
        self.examples: list[EncodedExample] = []
        self.special_lines: list[int] = []
        self.special_count = 0
        self.lossy_lines: list[int] = []
        self.lossy_chars: set[str] = set()
        self.lossy_count = 0
        self.ignored: dict[str, list] = {}  # key -> [count, first lines]

    def error(self, line: int, field: str | None, message: str) -> None:
        """Count an invalid line; list it while fewer than max_errors are listed."""
        self.report.invalid_examples += 1
        if len(self.report.errors) < self.limits.max_errors:
            self.report.errors.append(Issue(line, field, message))

    def accept(self, line: int, example: Example) -> None:
        """Check the example against the file's format and the tokenizer; queue it for tokenizing."""
        r = self.report
        if r.format is None:
            r.format, r.format_line = example.format, line
            if self.encoder is not None:
                problem = self.encoder.format_error(example.format)
                if problem:
                    r.file_errors.append(problem)
                    self.encoder = None
        elif example.format != r.format:
            self.error(line, None, f"this line is in {example.format} format but the file is in {r.format} "
                       f"format (detected from line {r.format_line}); use one format per file")
            return
        if self.encoder is not None and example.format == PREFERENCE:
            if not self.encode_pair(line, example):
                return
        elif self.encoder is not None:
            try:
                segments = self.encoder.segments(example)
            except RecordError as exc:
                self.error(line, exc.field, exc.message)
                return
            self.pending.append((line, segments))
            if len(self.pending) >= ENCODE_BATCH:
                self.flush()
        if self.encoder is not None:
            self.count_text_warnings(line, example)
        r.valid_examples += 1
        self.digests.add(example.digest(), line)
        for key in example.ignored:
            seen = self.ignored.setdefault(key, [0, []])
            seen[0] += 1
            if len(seen[1]) < self.limits.max_listed:
                seen[1].append(line)

    def count_text_warnings(self, line: int, example: Example) -> None:
        """Count a valid example whose text holds a special token's string or characters the tokenizer
        loses (the warnings `_scan_jsonl` writes)."""
        assert self.encoder is not None
        if self.encoder.contains_special(example):
            self.special_count += 1
            if len(self.special_lines) < self.limits.max_listed:
                self.special_lines.append(line)
        lossy = self.encoder.lossy_chars(example)
        if lossy:
            self.lossy_count += 1
            self.lossy_chars |= lossy
            if len(self.lossy_lines) < self.limits.max_listed:
                self.lossy_lines.append(line)

    def encode_pair(self, line: int, example: Example) -> bool:
        """Encode a preference example's two sides now (not batched, so an over-long side is an error on its
        line before the line counts as valid); record their statistics and, when keeping, append both
        (chosen, then rejected). False after reporting an error on the line."""
        assert self.encoder is not None
        n_input = len(example.messages)
        all_segments = []
        for side, name in zip(preference_sides(example), PREFERENCE_OUTPUTS, strict=True):
            try:
                all_segments.append(self.encoder.segments(side))
            except RecordError as exc:
                self.error(line, _side_field(exc.field, n_input, name), exc.message)
                return False
        encoded = self.encoder.encode_segments(all_segments)
        for name, (ids, _) in zip(PREFERENCE_OUTPUTS, encoded, strict=True):
            if len(ids) > self.max_seq_len:
                self.error(line, name, f"the input and this answer take {len(ids)} tokens > max_seq_len "
                                       f"{self.max_seq_len}; shorten the conversation or raise max_seq_len")
                return False
        for ids, labels in encoded:
            targets = len(labels) - labels.count(IGNORE_INDEX)
            self.counter.add(line=line, length=len(ids), kept_length=len(ids), targets=targets)
            if self.keep:
                self.examples.append(EncodedExample(ids, labels, line))
        return True

    def report_ignored(self) -> None:
        """One warning per key that carries something but is not used (e.g. `messages[].name`)."""
        for key, (count, lines) in sorted(self.ignored.items()):
            self.report.ignored_keys[key] = {"count": count, "lines": lines}
            more = ", ..." if count > len(lines) else ""
            self.report.warnings.append(
                f"{key} is ignored on {count} line(s) ({', '.join(map(str, lines))}{more}): training reads only "
                f"{_ignored_because(key, self.report.format)}")

    def flush(self) -> None:
        """Tokenize the pending examples in one batched call; record their statistics."""
        if not self.pending or self.encoder is None:
            self.pending = []
            return
        encoded = self.encoder.encode_segments([segs for _, segs in self.pending])
        for (line, _), (ids, labels) in zip(self.pending, encoded, strict=True):
            length = len(ids)
            kept = min(length, self.max_seq_len)
            if kept < length:
                ids, labels = ids[:kept], labels[:kept]
            targets = kept - labels.count(IGNORE_INDEX)
            self.counter.add(line=line, length=length, kept_length=kept, targets=targets)
            if self.keep and targets > 0:
                self.examples.append(EncodedExample(ids, labels, line))
        self.pending = []


def _side_field(field: str | None, n_input: int, output: str) -> str | None:
    """A field of one side of a preference pair (a chat example: the input's messages, then the answer)
    as the field of the preference line: `messages[k]...` is `input.messages[k]...` for k < n_input, else
    `<output>[0]...`; `messages` is `input.messages`."""
    if field is None or not field.startswith("messages"):
        return field
    rest = field[len("messages"):]
    if not rest.startswith("["):
        return "input.messages" + rest
    index, _, tail = rest[1:].partition("]")
    if index.isdigit() and int(index) >= n_input:
        return f"{output}[0]{tail}"
    return "input.messages" + rest


def _whole_document(first_line: str) -> str | None:
    """What the file is when its first line shows it is one JSON document rather than JSON Lines: a
    JSON array (on one line or several), or an object spread over several lines; else None."""
    stripped = first_line.strip()
    if stripped.startswith("["):
        return "a JSON array"
    if stripped == "{":
        return "one JSON object spread over several lines"
    return None


def _scan_jsonl(path: Path, report: ValidationReport, encoder: ExampleEncoder | None, max_seq_len: int,
                limits: ValidationLimits, keep_examples: bool) -> tuple[list[EncodedExample], DigestTracker]:
    scan = _Scan(report, encoder, max_seq_len, limits, keep_examples)
    reader = LineReader(path, limits)
    first = True
    for pl in reader:
        report.num_examples += 1
        if pl.error is not None or pl.text is None:  # exactly one of them is set
            scan.error(pl.number, None, pl.error or "unreadable line")
            continue
        if first:
            first = False
            whole = _whole_document(pl.text)
            if whole:
                report.file_errors.append(f"the file is {whole}; upload JSON Lines instead (one JSON object per "
                                          "line, no enclosing brackets)")
                report.num_examples = 0
                break
        try:
            example = parse_record(pl.text)
        except RecordError as exc:
            scan.error(pl.number, exc.field, exc.message)
            continue
        scan.accept(pl.number, example)
    scan.flush()
    scan.report_ignored()
    report.lines, report.blank_lines = reader.lines_read, reader.blank_lines
    if reader.file_error:
        report.file_errors.insert(0, reader.file_error)
    if scan.encoder is not None and report.format is not None:
        report.tokens = scan.counter.result()
        report.truncated, report.truncated_lines = scan.counter.truncated, scan.counter.truncated_lines
        report.dropped_no_target, report.dropped_lines = scan.counter.dropped, scan.counter.dropped_lines
        report.usable_examples = report.valid_examples - scan.counter.dropped
        if scan.special_count:
            report.warnings.append(
                f"{scan.special_count} examples contain the text of a special token such as "
                f"{scan.encoder.special_strings[0]!r} (lines {', '.join(map(str, scan.special_lines))}); "
                + ("it is read as text: a chat message's content never becomes a control token"
                   if report.format in (CHAT, PREFERENCE) else "the tokenizer reads it as a control token, not as "
                   "text"))
        if scan.lossy_count:
            shown = ", ".join(repr(c) for c in sorted(scan.lossy_chars)[:5])
            report.warnings.append(
                f"{scan.lossy_count} examples contain characters the tokenizer cannot represent ({shown}; "
                f"lines {', '.join(map(str, scan.lossy_lines))}); they are lost when tokenized")
        if scan.encoder.turns_without_eot:
            report.warnings.append(
                "the chat template closes assistant turns without a special end-of-turn token; "
                "the model may not learn to stop")
    return scan.examples, scan.digests


def _reference_digests(path: str | os.PathLike[str], limits: ValidationLimits, report: ValidationReport):
    tracker = DigestTracker()
    reader = LineReader(path, limits)
    for pl in reader:
        if pl.text is None:
            continue
        try:
            tracker.add(parse_record(pl.text).digest(), pl.number)
        except RecordError:
            continue
    if reader.file_error:
        report.warnings.append(f"overlap with the training file {path} not fully checked: {reader.file_error}")
    return tracker.digests()


def duplicates_warning(count: int, pairs: list[tuple[int, int]], shown: int = 5) -> str:
    """The warning for `count` examples equal to an earlier one; `pairs` lists (line, first line)."""
    listed = ", ".join(f"line {line} repeats line {first}" for line, first in pairs[:shown])
    more = ", ..." if count > min(len(pairs), shown) else ""
    return (f"{count} example(s) repeat an earlier one ({listed}{more}): each copy is trained on again, so it "
            "weighs more; remove the copies unless that is meant")


def _finish(report: ValidationReport, digests: DigestTracker, limits: ValidationLimits,
            reference_path: str | os.PathLike[str] | None) -> None:
    report.duplicates, report.duplicate_lines = digests.duplicates(limits.max_listed)
    if report.duplicates:
        report.warnings.append(duplicates_warning(report.duplicates, report.duplicate_lines))
    if reference_path is not None:
        ref = _reference_digests(reference_path, limits, report)
        report.reference_overlap, report.overlap_lines = digests.overlap(ref, limits.max_listed)
    if report.file_errors and report.num_examples == 0:
        return  # the file was not read: counting examples would only repeat the reason
    usable = report.usable_examples if report.usable_examples is not None else report.valid_examples
    if report.num_examples == 0:
        report.file_errors.append("the file holds no examples")
    elif usable < limits.min_examples:
        what = "usable example" if report.usable_examples is not None else "valid example"
        report.file_errors.append(f"only {usable} {what}{'' if usable == 1 else 's'}; "
                                  f"at least {limits.min_examples} are needed")


def scan_file(
    path: str | os.PathLike[str],
    *,
    tokenizer: Any = None,
    max_seq_len: int = DataSettings.max_seq_len,
    limits: ValidationLimits | None = None,
    train_on_inputs: bool = False,
    reference_path: str | os.PathLike[str] | None = None,
    keep_examples: bool = False,
    file_type: str | None = None,
) -> tuple[ValidationReport, list[EncodedExample]]:
    """`validate_file`, also returning the encoded examples (truncated, no-target ones dropped) when
    `keep_examples` and a tokenizer is given; else an empty list."""
    from lcsb_core.data.text_corpus import scan_text_corpus  # late: text_corpus imports this module

    limits = limits or ValidationLimits()
    if max_seq_len < 2:
        raise ValueError("max_seq_len must be at least 2")
    path = Path(path)
    kind = file_type or ("txt" if path.suffix.lower() in TXT_SUFFIXES else "jsonl")
    if kind not in ("jsonl", "txt"):
        raise ValueError(f"file_type must be 'jsonl' or 'txt', not {file_type!r}")
    report = ValidationReport(path=str(path), file_type=kind, min_examples=limits.min_examples,
                              max_seq_len=max_seq_len if tokenizer is not None else None,
                              train_on_inputs=train_on_inputs)
    if kind == "txt":
        examples = scan_text_corpus(path, report, tokenizer=tokenizer, max_seq_len=max_seq_len,
                                    limits=limits, keep_examples=keep_examples)
        _finish(report, DigestTracker(), limits, None)
        return report, examples
    encoder = ExampleEncoder(tokenizer, train_on_inputs=train_on_inputs) if tokenizer is not None else None
    examples, digests = _scan_jsonl(path, report, encoder, max_seq_len, limits, keep_examples)
    _finish(report, digests, limits, reference_path)
    return report, examples


def validate_file(
    path: str | os.PathLike[str],
    *,
    tokenizer: Any = None,
    max_seq_len: int = DataSettings.max_seq_len,
    limits: ValidationLimits | None = None,
    train_on_inputs: bool = False,
    reference_path: str | os.PathLike[str] | None = None,
    file_type: str | None = None,
) -> ValidationReport:
    """Validate a dataset file in one streaming pass (flat memory) and report what training would see.

    Args:
        path: a JSONL file (chat, prompt_completion or text format) or a `.txt` corpus.
        tokenizer: the base model's transformers tokenizer; when given, token statistics (tokens per
            example, trainable tokens, truncated and dropped examples) are measured with it and its chat
            template. None: structure only (what the API can check at upload).
        max_seq_len: tokens per example after truncation (truncation keeps the start; default
            `DataSettings.max_seq_len`, the trainer's).
        limits: caps and thresholds (default `ValidationLimits()`).
        train_on_inputs: count prompt/user/system tokens as targets too.
        reference_path: for a validation file, the training file; the report counts examples present
            in both.
        file_type: "jsonl" or "txt"; default from the suffix (.txt/.text is a corpus, else JSONL).

    Returns:
        ValidationReport; `report.ok` says whether training can use the file as it is. Data problems are
        reported, never raised.

    Raises:
        ValueError: max_seq_len < 2 or an unknown file_type (programming errors, not data problems).
    """
    report, _ = scan_file(path, tokenizer=tokenizer, max_seq_len=max_seq_len, limits=limits,
                          train_on_inputs=train_on_inputs, reference_path=reference_path, file_type=file_type)
    return report
