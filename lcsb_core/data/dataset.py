"""Build the training set from a file, and iterate over it in deterministic batches.

    ds = build_dataset("train.jsonl", tok, max_seq_len=2048)       # raises DataError if unusable
    ds.report.to_dict()       # format, counts, truncated, dropped_no_target, skipped_invalid, ...
    for batch in iter_batches(ds, 8, seed=0, epoch=0, pad_token_id=tok.pad_token_id):
        loss = model(**batch).loss

`build_dataset` runs the same validation as the API (`validator.scan_file`) and tokenizes in the same
pass, so training never meets a data problem the report did not show. A preference (DPO) file gives
two examples per line, interleaved: [chosen_0, rejected_0, chosen_1, rejected_1, ...] (`ds.format` is
"preference").
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from lcsb_core.data.batching import collate
from lcsb_core.data.formats import FORMATS, PREFERENCE_FORMATS, parse_record
from lcsb_core.data.json_lines import RecordError
from lcsb_core.data.limits import ValidationLimits
from lcsb_core.data.reader import LineReader
from lcsb_core.data.report import ValidationReport
from lcsb_core.data.run_length import batches_per_epoch
from lcsb_core.data.settings import DataSettings
from lcsb_core.data.tokenization import IGNORE_INDEX, EncodedExample, ExampleEncoder
from lcsb_core.data.validator import TXT_SUFFIXES, scan_file
from lcsb_core.errors import DataError


@dataclass
class TokenizedDataset:
    """Encoded examples ready for batching, with the validation report of their file. For a preference
    file `examples` holds each pair's two sides in a row, [chosen_0, rejected_0, chosen_1, rejected_1, ...]
    (both with the pair's `line`), so `len()` is twice the number of pairs."""

    examples: list[EncodedExample]
    report: ValidationReport

    def __len__(self) -> int:
        return len(self.examples)

    @property
    def format(self) -> str | None:
        """The file's detected format (`report.format`): "chat", "prompt_completion", "text" (also a .txt
        corpus) or "preference"; None when no line was valid."""
        return self.report.format

    @property
    def is_preference(self) -> bool:
        """True for a preference (DPO) file: `examples` are (chosen, rejected) sides in a row."""
        return self.report.format in PREFERENCE_FORMATS

    @property
    def num_target_tokens(self) -> int:
        """Target tokens (labels != -100) over all examples; the loss is averaged over these."""
        return sum(len(e.labels) - e.labels.count(IGNORE_INDEX) for e in self.examples)


def _raise(report: ValidationReport, message: str) -> None:
    err = DataError(message)
    err.report = report  # type: ignore[attr-defined]  # the API stores it with the failed job
    raise err


def build_dataset(
    path: str | os.PathLike[str],
    tokenizer: Any,
    *,
    max_seq_len: int,
    train_on_inputs: bool = False,
    skip_invalid: bool = False,
    min_examples: int = DataSettings.min_examples,
    limits: ValidationLimits | None = None,
    file_type: str | None = None,
) -> TokenizedDataset:
    """Validate and tokenize a dataset file (JSONL in any of the four formats, or a .txt corpus).

    Examples longer than `max_seq_len` tokens are truncated keeping the start; examples left with no
    target token are dropped and counted (`report.dropped_no_target`, `report.dropped_lines`). With
    `skip_invalid`, invalid lines are left out and counted in `report.skipped_invalid`. A preference line
    gives two examples (its chosen and rejected sides, `formats.preference_sides`, in that order); a side
    longer than `max_seq_len` is an invalid line (field `preferred_output` or `non_preferred_output`), never
    truncated.

    Args:
        path: the file. tokenizer: the base model's transformers (fast) tokenizer.
        max_seq_len: most tokens per example (>= 2). train_on_inputs: every token is a target, not only
            assistant turns / completions (refused for preference data). min_examples: fewer usable
            examples raises (overrides `limits.min_examples`). limits: caps (default `ValidationLimits()`).
            file_type: "jsonl" or "txt" (default from the suffix).

    Returns:
        TokenizedDataset; `examples` in file order.

    Raises:
        DataError: the file has invalid lines (and not skip_invalid), a file-level problem (size or line
            cap, no chat template for chat or preference data, train_on_inputs with preference data), or
            fewer than `min_examples` usable examples. The message names the first bad lines; `err.report`
            holds the full ValidationReport.
        ValueError: no tokenizer, or max_seq_len < 2.
    """
    if tokenizer is None:
        raise ValueError("build_dataset needs the base model's tokenizer")
    limits = replace(limits or ValidationLimits(), min_examples=min_examples)
    report, examples = scan_file(path, tokenizer=tokenizer, max_seq_len=max_seq_len, limits=limits,
                                 train_on_inputs=train_on_inputs, keep_examples=True, file_type=file_type)
    if report.file_errors:
        _raise(report, report.summary())
    if report.invalid_examples:
        if not skip_invalid:
            _raise(report, report.summary() + " (rejected; the skip_invalid option leaves invalid lines out)")
        report.skipped_invalid = report.invalid_examples
    return TokenizedDataset(examples, report)


def num_batches(dataset: TokenizedDataset, batch_size: int) -> int:
    """How many batches `iter_batches(dataset, batch_size, ...)` yields in one epoch: one per
    `batch_size` examples, the last partial batch kept (`run_length.batches_per_epoch`)."""
    return batches_per_epoch(len(dataset.examples), batch_size)


def epoch_order(n: int, *, seed: int, epoch: int, shuffle: bool = True,
                lengths: Sequence[int] | None = None, group_lengths: Sequence[int] | None = None,
                batch_size: int = 1) -> np.ndarray:
    """The order of `n` items in one epoch: a permutation from numpy's PCG64 seeded with [seed, epoch]
    (the same for a resumed run), or, when not `shuffle`, 0..n-1, or with `lengths` (one per item) shortest
    first (a stable sort: equal lengths keep file order), the evaluation order, so that each batch pads its
    rows to similar lengths (a mean over tokens or pairs does not depend on the order). Examples
    (`iter_batches`) and preference pairs (`lcsb_core.data.pairs`) are ordered by it.

    `group_lengths` (one per item; shuffled orders only) groups items of similar length into the same
    batches of `batch_size`, as transformers' `Trainer` does with `group_by_length`
    (`transformers.trainer_pt_utils.get_length_grouped_indices`, used here as is): a random permutation
    (a torch generator seeded from [seed, epoch]) cut into mega-batches of up to 50 batches, each sorted
    longest first, the longest item's batch moved to the front; every item still comes once per epoch."""
    if not shuffle:
        return np.arange(n) if lengths is None else np.argsort(np.asarray(lengths), kind="stable")
    words = [seed & 0xFFFFFFFFFFFFFFFF, epoch & 0xFFFFFFFFFFFFFFFF]
    if group_lengths is not None:
        from transformers.trainer_pt_utils import get_length_grouped_indices

        if len(group_lengths) != n:
            raise ValueError(f"group_lengths holds {len(group_lengths)} lengths for {n} items")
        state = np.random.SeedSequence(words).generate_state(1, np.uint64)
        generator = torch.Generator().manual_seed(int(state[0]))
        return np.asarray(get_length_grouped_indices(list(group_lengths), batch_size, generator=generator),
                          dtype=np.int64)
    return np.random.default_rng(words).permutation(n)


def iter_batches(
    dataset: TokenizedDataset,
    batch_size: int,
    *,
    seed: int,
    epoch: int,
    pad_token_id: int,
    shuffle: bool = True,
    pack: bool = False,
    max_seq_len: int | None = None,
    mask_dtype: torch.dtype | None = None,
    pad_to_multiple_of: int = 1,
    by_length: bool = False,
    group_by_length: bool = False,
) -> Iterator[dict[str, torch.Tensor]]:
    """Yield `collate`d batches of `batch_size` examples, in an order fixed by (seed, epoch) (a
    permutation from numpy's PCG64 seeded with [seed, epoch]; when not shuffle, file order, or with
    `by_length` shortest first, as an evaluation takes them; `by_length` is ignored with `pack`, whose rows
    hold several examples: `epoch_order`); `group_by_length` (shuffled orders) puts examples of similar
    length in the same batch (`epoch_order`'s `group_lengths`: less padding, the same examples each
    epoch). The last,
    partial batch is kept. `pack`, `max_seq_len`, `mask_dtype`, `pad_to_multiple_of` are passed to `collate` (with
    pack, each batch's `batch_size` examples become as many rows as needed).

    Raises:
        ValueError: batch_size < 1; group_by_length with pack (packed rows hold several examples).
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    if group_by_length and pack:
        raise ValueError("group_by_length does not apply with pack: a packed row holds several examples")
    n = len(dataset.examples)
    lengths = [len(e.input_ids) for e in dataset.examples] if (by_length or group_by_length) and not pack else None
    order = epoch_order(n, seed=seed, epoch=epoch, shuffle=shuffle, lengths=lengths if by_length else None,
                        group_lengths=lengths if group_by_length else None, batch_size=batch_size)
    for start in range(0, n, batch_size):
        batch = [dataset.examples[int(i)] for i in order[start:start + batch_size]]
        yield collate(batch, pad_token_id, pack=pack, max_seq_len=max_seq_len, mask_dtype=mask_dtype,
                      pad_to_multiple_of=pad_to_multiple_of)


def sniff_format(path: str | os.PathLike[str], *, limits: ValidationLimits | None = None,
                 file_type: str | None = None) -> str | None:
    """The file's format (chat, prompt_completion, text or preference), read from its first valid line
    only; None when no line is valid. A .txt corpus is "text"."""
    if (file_type or "").lower() == "txt" or str(path).lower().endswith(TXT_SUFFIXES):
        return "text"
    for pl in LineReader(path, limits or ValidationLimits()):
        if pl.text is None:
            continue
        try:
            return parse_record(pl.text).format
        except RecordError:
            continue
    return None


def check_tokenizer(path: str | os.PathLike[str], tokenizer: Any, *, file_type: str | None = None) -> str | None:
    """Check at job creation, cheaply, that `tokenizer` can encode the file's format (a chat or preference
    file needs a chat template). Returns the format (None when no line is valid).

    Raises:
        DataError: the tokenizer cannot encode this format; the message says what to do.
    """
    fmt = sniff_format(path, file_type=file_type)
    if fmt in FORMATS or fmt in PREFERENCE_FORMATS:
        problem = ExampleEncoder(tokenizer).format_error(fmt)
        if problem:
            raise DataError(f"{path}: {fmt} data: {problem}")
    return fmt
