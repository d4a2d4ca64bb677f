"""Streaming reader of physical lines, shared by the JSONL and plain-text paths.

It never holds more than one line (at most `limits.max_line_bytes`) in memory, so a 1 GB file is read
in flat memory. It accepts a UTF-8 byte-order mark, CRLF line ends, whitespace-only lines (skipped and
counted) and a missing final newline; a line that is not valid UTF-8 or is too long becomes an error on
that line, and reading goes on. File-level problems (too large, too many lines, UTF-16 with or without
a byte-order mark) stop reading and are left in `reader.file_error`.

    reader = LineReader(path, ValidationLimits())
    for line in reader:            # only non-blank lines
        if line.error: ...         # line.number is 1-based and physical
        else: use(line.text)
    if reader.file_error: ...
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from lcsb_core.data.limits import ValidationLimits

_BOM = b"\xef\xbb\xbf"
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
UTF16_MESSAGE = "the file is UTF-16 encoded; save it as UTF-8"
_SNIFF_BYTES = 64
_CHUNK = 1 << 20


def looks_like_utf16(head: bytes) -> bool:
    """True when `head` (a file's first bytes, without a byte-order mark) reads as UTF-16 text: at
    least half of its 2-byte units are an ASCII character next to a NUL byte (`{\\x00` little-endian,
    `\\x00{` big-endian). UTF-8 JSON or text has no NUL bytes at all."""
    head = head[:_SNIFF_BYTES]
    units = len(head) // 2
    if units < 2 or b"\x00" not in head:
        return False
    pairs = list(zip(head[0:2 * units:2], head[1:2 * units:2], strict=True))
    little = sum(1 for a, b in pairs if 0 < a < 0x80 and b == 0)
    big = sum(1 for a, b in pairs if a == 0 and 0 < b < 0x80)
    return max(little, big) * 2 >= units


@dataclass(frozen=True)
class PhysicalLine:
    """One non-blank physical line: `number` is 1-based; exactly one of `text` (decoded, without the
    line end) and `error` (a plain message) is set."""

    number: int
    text: str | None
    error: str | None = None


class LineReader:
    """Iterate over the non-blank lines of a file, one at a time (with `yield_blank=True`, blank lines
    too, as empty text).

    After iteration: `lines_read` (physical lines seen), `blank_lines` (whitespace-only ones),
    `bytes_read`, and `file_error` (a message when reading stopped for a file-level reason, else None).
    A missing file is a file error too, not an exception.
    """

    def __init__(self, path: str | os.PathLike[str], limits: ValidationLimits, *, yield_blank: bool = False) -> None:
        self.path = Path(path)
        self.limits = limits
        self.yield_blank = yield_blank
        self.lines_read = 0
        self.blank_lines = 0
        self.bytes_read = 0
        self.file_error: str | None = None

    def __iter__(self) -> Iterator[PhysicalLine]:
        try:
            size = self.path.stat().st_size
        except OSError as exc:
            self.file_error = f"cannot read the file: {exc.strerror or exc}"
            return
        if size > self.limits.max_bytes:
            self.file_error = (
                f"the file is {size:,} bytes, larger than the limit of {self.limits.max_bytes:,} bytes"
            )
            return
        with self.path.open("rb", buffering=_CHUNK) as f:
            yield from self._lines(f)

    def _lines(self, f) -> Iterator[PhysicalLine]:  # a binary file object
        max_line = self.limits.max_line_bytes
        number = 0
        sniffed = False
        while True:
            raw = f.readline(max_line + 2)  # + room for "\r\n"
            if not raw:
                return
            number += 1
            self.bytes_read += len(raw)
            if number > self.limits.max_lines:
                self.file_error = f"the file has more than {self.limits.max_lines:,} lines"
                return
            if self.bytes_read > self.limits.max_bytes:
                self.file_error = f"the file is larger than the limit of {self.limits.max_bytes:,} bytes"
                return
            self.lines_read = number
            too_long = False
            if not raw.endswith(b"\n") and len(raw) >= max_line + 2:
                too_long = True
                while True:  # skip the rest of the line without keeping it
                    rest = f.readline(_CHUNK)
                    self.bytes_read += len(rest)
                    if not rest or rest.endswith(b"\n"):
                        break
            if number == 1:
                if raw.startswith(_UTF16_BOMS):
                    self.file_error = UTF16_MESSAGE
                    return
                if raw.startswith(_BOM):
                    raw = raw[len(_BOM):]
            if not sniffed and raw.strip():  # the first line with content: UTF-16 without a BOM?
                sniffed = True
                if looks_like_utf16(raw):
                    self.file_error = UTF16_MESSAGE
                    return
            content = raw.rstrip(b"\r\n") if raw.endswith(b"\n") else raw
            if too_long or len(content) > max_line:
                yield PhysicalLine(number, None, f"the line is longer than {max_line:,} bytes")
                continue
            try:
                text = content.decode("utf-8")
            except UnicodeDecodeError as exc:
                bad = content[exc.start]
                yield PhysicalLine(
                    number,
                    None,
                    f"the line is not valid UTF-8 (byte 0x{bad:02X} at byte {exc.start + 1} of the line);"
                    " save the file as UTF-8",
                )
                continue
            if not text.strip():
                self.blank_lines += 1
                if self.yield_blank:
                    yield PhysicalLine(number, "")
                continue
            yield PhysicalLine(number, text)
