"""Limits that bound what the dataset validator reads and reports.

The service fills a `ValidationLimits` from its settings and passes it to `validate_file` (at upload)
and `build_dataset` (before training), so both apply the same rules:

    from lcsb_core.data import ValidationLimits, validate_file
    report = validate_file(path, limits=ValidationLimits(max_bytes=512 * 2**20, min_examples=10))
"""

from __future__ import annotations

from dataclasses import dataclass

from lcsb_core.data.settings import DataSettings
from lcsb_core.errors import ConfigError


@dataclass(frozen=True)
class ValidationLimits:
    """Caps and thresholds of one validation run.

    Attributes:
        max_bytes: largest accepted file size in bytes (default 1 GiB); a larger file is rejected
            before any line is parsed.
        max_lines: most physical lines read (default 5,000,000); past it the file is rejected.
        max_line_bytes: longest accepted line in bytes (default 8 MiB); a longer line is an error on
            that line and is skipped without being held in memory.
        min_examples: fewer usable examples than this rejects the file (default
            `DataSettings.min_examples`, 10, like the OpenAI fine-tuning API). "Usable" means valid
            and, when a tokenizer is given, still holding a target token after truncation.
        max_errors: how many line errors the report lists (all are counted).
        max_listed: how many line numbers the report lists for truncated, dropped, duplicate and
            overlapping examples (all are counted).
    """

    max_bytes: int = 1 << 30
    max_lines: int = 5_000_000
    max_line_bytes: int = 8 << 20
    min_examples: int = DataSettings.min_examples
    max_errors: int = 20
    max_listed: int = 20

    def __post_init__(self) -> None:
        for name in ("max_bytes", "max_lines", "max_line_bytes"):
            if getattr(self, name) < 1:
                raise ConfigError(f"ValidationLimits.{name}", "must be at least 1")
        for name in ("min_examples", "max_errors", "max_listed"):
            if getattr(self, name) < 0:
                raise ConfigError(f"ValidationLimits.{name}", "must not be negative")
