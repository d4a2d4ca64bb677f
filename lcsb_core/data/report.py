"""`ValidationReport`: what the validator found in one file, JSON-serializable for the API.

    report = validate_file(path, tokenizer=tok, max_seq_len=2048)
    if not report.ok:
        print(report.summary())          # one paragraph naming the first bad lines
    json.dumps(report.to_dict())         # the whole report, for the API and the job record
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lcsb_core.data.formats import Issue
from lcsb_core.data.stats import TokenStats

TXT_MODE = "packed_blocks"


@dataclass
class ValidationReport:
    """Outcome of validating one dataset file.

    Counts: `lines` physical lines read, `blank_lines` whitespace-only ones, `num_examples` the other
    lines (each is one example in JSONL; one text line in .txt), split into `valid_examples` and
    `invalid_examples`. `errors` lists the first `limits.max_errors` line errors (one per invalid line,
    1-based physical line, field, message); `file_errors` are reasons the whole file is rejected (size
    or line cap, too few usable examples, no chat template for chat data). `ok` is True when neither
    exists.

    With a tokenizer: `tokens` (per-example token statistics), `truncated` (examples longer than
    `max_seq_len`, cut keeping the start and trained on), `dropped_no_target` (examples left with no target
    token after truncation: never trained on; not also counted as truncated), `usable_examples` (what
    training will use; for .txt, the number of packed blocks). `duplicates` counts examples equal to an
    earlier one; `reference_overlap` counts examples also present in the training file (validation files
    only). `skipped_invalid` is set by
    `build_dataset(skip_invalid=True)`. `ignored_keys` maps each key that carries something but is not
    used (e.g. `messages[].name`) to {"count", "lines"}; each also has a line in `warnings`.
    """

    path: str
    file_type: str
    format: str | None = None
    format_line: int | None = None
    txt_mode: str | None = None
    lines: int = 0
    blank_lines: int = 0
    num_examples: int = 0
    valid_examples: int = 0
    invalid_examples: int = 0
    errors: list[Issue] = field(default_factory=list)
    file_errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    min_examples: int = 0
    max_seq_len: int | None = None
    train_on_inputs: bool = False
    tokens: TokenStats | None = None
    usable_examples: int | None = None
    truncated: int = 0
    truncated_lines: list[int] = field(default_factory=list)
    dropped_no_target: int = 0
    dropped_lines: list[int] = field(default_factory=list)
    duplicates: int = 0
    duplicate_lines: list[tuple[int, int]] = field(default_factory=list)
    reference_overlap: int | None = None
    overlap_lines: list[int] = field(default_factory=list)
    skipped_invalid: int = 0
    ignored_keys: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when the file can be trained on as it is (no invalid line, no file-level error)."""
        return self.invalid_examples == 0 and not self.file_errors

    def summary(self, max_items: int = 5) -> str:
        """One paragraph for an error message or a log line: the file's path, then `findings`."""
        return f"{self.path}: {self.findings(max_items)}"

    def findings(self, max_items: int = 5) -> str:
        """What `summary` says after the path: file errors, the first line errors, then examples dropped
        (no target token left after truncation) and truncated, with their lines; "valid" when none."""
        parts = list(self.file_errors)
        if self.invalid_examples:
            shown = "; ".join(str(e) for e in self.errors[:max_items])
            more = self.invalid_examples - min(len(self.errors), max_items)
            parts.append(
                f"{self.invalid_examples} of {self.num_examples} lines are invalid: {shown}"
                + (f"; and {more} more" if more > 0 else "")
            )
        notes = self.truncation_notes(max_items)
        head = ". ".join(parts) if parts else "valid"
        return head + ("; " + "; ".join(notes) if notes else "")

    def truncation_notes(self, max_items: int = 5) -> list[str]:
        """What truncation to `max_seq_len` does to the file: examples dropped (no target token left)
        and truncated, each with its first lines; empty when nothing is cut."""
        notes = []
        if self.dropped_no_target:
            notes.append(f"{self.dropped_no_target} example(s) dropped, no target token left after truncation to "
                         f"{self.max_seq_len} tokens (lines {_lines(self.dropped_lines, max_items)})")
        if self.truncated:
            notes.append(f"{self.truncated} example(s) truncated to {self.max_seq_len} tokens "
                         f"(lines {_lines(self.truncated_lines, max_items)})")
        return notes

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types only (str, int, float, bool, None, lists, dicts)."""
        return {
            "ok": self.ok,
            "path": self.path,
            "file_type": self.file_type,
            "format": self.format,
            "format_line": self.format_line,
            "txt_mode": self.txt_mode,
            "lines": self.lines,
            "blank_lines": self.blank_lines,
            "num_examples": self.num_examples,
            "valid_examples": self.valid_examples,
            "invalid_examples": self.invalid_examples,
            "errors": [e.to_dict() for e in self.errors],
            "file_errors": list(self.file_errors),
            "warnings": list(self.warnings),
            "min_examples": self.min_examples,
            "max_seq_len": self.max_seq_len,
            "train_on_inputs": self.train_on_inputs,
            "tokens": self.tokens.to_dict() if self.tokens else None,
            "usable_examples": self.usable_examples,
            "truncated": self.truncated,
            "truncated_lines": list(self.truncated_lines),
            "dropped_no_target": self.dropped_no_target,
            "dropped_lines": list(self.dropped_lines),
            "duplicates": self.duplicates,
            "duplicate_lines": [{"line": a, "duplicate_of": b} for a, b in self.duplicate_lines],
            "reference_overlap": self.reference_overlap,
            "overlap_lines": list(self.overlap_lines),
            "skipped_invalid": self.skipped_invalid,
            "ignored_keys": {k: dict(v) for k, v in self.ignored_keys.items()},
        }


def _lines(lines: list[int], max_items: int) -> str:
    shown = ", ".join(str(n) for n in lines[:max_items])
    return shown + (", ..." if len(lines) > max_items else "")
