"""Running statistics for the validator, in bounded memory.

- `TokenCounter`: token lengths per example kept as a histogram (one counter per distinct length, not
  per example), so min / mean / max / p95 are exact while memory stays independent of the file size.
- `DigestTracker`: 12 bytes per example (64-bit content hash + 32-bit line number, in compact arrays)
  to find duplicate examples and the overlap of a validation file with its training file.

    counter = TokenCounter(max_listed=20)
    counter.add(line=3, length=812, targets=140, truncated=False)
    stats = counter.result()     # TokenStats
"""

from __future__ import annotations

from array import array
from collections import Counter
from dataclasses import asdict, dataclass

import numpy as np


@dataclass
class TokenStats:
    """Token statistics of the valid examples, measured with the base model's tokenizer.

    min/mean/max/p95_tokens: tokens per example before truncation (p95: nearest-rank 95th percentile).
    total_tokens / trainable_tokens: tokens and target tokens (labels != -100) that will be trained on,
    after truncation to max_seq_len, over the examples that are kept.
    """

    examples: int
    min_tokens: int
    mean_tokens: float
    max_tokens: int
    p95_tokens: int
    total_tokens: int
    trainable_tokens: int

    def to_dict(self) -> dict:
        """The fields as a plain dict."""
        return asdict(self)


class TokenCounter:
    """Accumulates per-example token counts; lists at most `max_listed` line numbers of truncated and
    dropped examples (all are counted)."""

    def __init__(self, max_listed: int) -> None:
        self.max_listed = max_listed
        self.hist: Counter[int] = Counter()
        self.total_tokens = 0
        self.trainable_tokens = 0
        self.truncated = 0
        self.truncated_lines: list[int] = []
        self.dropped = 0
        self.dropped_lines: list[int] = []

    def add(self, *, line: int, length: int, kept_length: int, targets: int) -> None:
        """Record one example: `length` tokens before truncation, `kept_length` after, `targets` target
        tokens after truncation (0 means it is dropped). An example is counted once: dropped, or else
        truncated (cut and trained on) when `kept_length < length`."""
        self.hist[length] += 1
        if targets == 0:
            self.dropped += 1
            if len(self.dropped_lines) < self.max_listed:
                self.dropped_lines.append(line)
            return
        if kept_length < length:
            self.truncated += 1
            if len(self.truncated_lines) < self.max_listed:
                self.truncated_lines.append(line)
        self.total_tokens += kept_length
        self.trainable_tokens += targets

    def result(self) -> TokenStats | None:
        """The statistics, or None when no example was measured."""
        n = sum(self.hist.values())
        if n == 0:
            return None
        lengths = sorted(self.hist)
        rank = -(-95 * n // 100)  # ceil(0.95 n), nearest-rank method
        seen = 0
        p95 = lengths[-1]
        for length in lengths:
            seen += self.hist[length]
            if seen >= rank:
                p95 = length
                break
        total = sum(length * count for length, count in self.hist.items())
        return TokenStats(
            examples=n,
            min_tokens=lengths[0],
            mean_tokens=round(total / n, 2),
            max_tokens=lengths[-1],
            p95_tokens=p95,
            total_tokens=self.total_tokens,
            trainable_tokens=self.trainable_tokens,
        )


class DigestTracker:
    """Content hashes of examples with their line numbers (12 bytes per example)."""

    def __init__(self) -> None:
        self._digests = array("Q")
        self._lines = array("I")

    def __len__(self) -> int:
        return len(self._digests)

    def add(self, digest: int, line: int) -> None:
        """Record one example's 64-bit digest and 1-based line."""
        self._digests.append(digest)
        self._lines.append(line)

    def digests(self) -> np.ndarray:
        """All digests, as a uint64 array (a view, no copy)."""
        return np.frombuffer(self._digests, dtype=np.uint64) if len(self._digests) else np.zeros(0, np.uint64)

    def duplicates(self, max_listed: int) -> tuple[int, list[tuple[int, int]]]:
        """(number of examples equal to an earlier one, up to `max_listed` (line, first line) pairs in
        line order)."""
        if len(self._digests) < 2:
            return 0, []
        d = self.digests()
        ds = np.sort(d)
        count = int(np.count_nonzero(ds[1:] == ds[:-1]))
        if count == 0:  # the common case: one sorted copy of scratch memory
            return 0, []
        lines = np.frombuffer(self._lines, dtype=np.uint32)
        order = np.argsort(d, kind="stable")  # stable: within equal digests, file order
        ds = d[order]
        repeat = np.empty(len(ds), dtype=bool)
        repeat[0] = False
        repeat[1:] = ds[1:] == ds[:-1]
        group_start = np.maximum.accumulate(np.where(repeat, 0, np.arange(len(ds))))
        first_line = lines[order][group_start]
        dup_lines = lines[order][repeat]
        firsts = first_line[repeat]
        pick = np.argsort(dup_lines, kind="stable")[:max_listed]
        return count, [(int(dup_lines[i]), int(firsts[i])) for i in pick]

    def overlap(self, reference: np.ndarray, max_listed: int) -> tuple[int, list[int]]:
        """(number of examples whose digest is in `reference`, up to `max_listed` of their lines)."""
        if len(self._digests) == 0 or len(reference) == 0:
            return 0, []
        hit = np.isin(self.digests(), reference)
        lines = np.frombuffer(self._lines, dtype=np.uint32)[hit]
        return int(hit.sum()), [int(x) for x in lines[:max_listed]]
