"""Batches of preference pairs for DPO (`lcsb_core.training.dpo`): a preference file's `TokenizedDataset.examples`
holds each pair's two sides next to each other, [chosen_0, rejected_0, chosen_1, rejected_1, ...]; these
functions shuffle and batch whole pairs and keep that layout in every batch."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from lcsb_core.data.batching import collate
from lcsb_core.data.dataset import epoch_order


def num_pairs(dataset: Any) -> int:
    """Preference pairs in a `TokenizedDataset` of preference data (two examples each).

    Raises:
        ValueError: an odd number of examples (not a pair layout).
    """
    n = len(dataset.examples)
    if n % 2:
        raise ValueError(f"a preference dataset holds two examples per pair, found {n}")
    return n // 2


def iter_pair_batches(dataset: Any, batch_size: int, *, seed: int, epoch: int, pad_token_id: int,
                      shuffle: bool = True, pad_to_multiple_of: int = 1,
                      by_length: bool = False, group_by_length: bool = False) -> Iterator[dict[str, torch.Tensor]]:
    """Yield `collate`d batches of `batch_size` pairs ([2 x pairs, T] rows: chosen at even rows, rejected
    at odd rows), in an order of pairs fixed by (seed, epoch) as `lcsb_core.data.iter_batches` orders
    examples (numpy PCG64 seeded with [seed, epoch]; when not shuffle, file order, or with `by_length`
    shortest pair first by its longer side, as an evaluation takes them; `group_by_length` (shuffled
    orders) puts pairs of similar longer side in the same batch, `epoch_order`'s `group_lengths`); the
    last, partial batch is kept. Packing does not apply (each row is one side of one pair).

    Raises:
        ValueError: batch_size < 1, or an odd number of examples.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    n = num_pairs(dataset)
    lengths = ([max(len(dataset.examples[2 * i].input_ids), len(dataset.examples[2 * i + 1].input_ids))
                for i in range(n)] if by_length or group_by_length else None)
    order = epoch_order(n, seed=seed, epoch=epoch, shuffle=shuffle, lengths=lengths if by_length else None,
                        group_lengths=lengths if group_by_length else None, batch_size=batch_size)
    for start in range(0, n, batch_size):
        rows = [dataset.examples[2 * int(i) + side] for i in order[start:start + batch_size] for side in (0, 1)]
        yield collate(rows, pad_token_id, pad_to_multiple_of=pad_to_multiple_of)
