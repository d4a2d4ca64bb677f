"""Batch encoded examples into tensors: dynamic right padding, or packing without cross-attention.

    batch = collate(examples, pad_token_id=tok.pad_token_id)
    model(**batch)          # input_ids, attention_mask [B,T]; labels [B,T] (-100 at padding)

    batch = collate(examples, pad_token_id, pack=True, max_seq_len=2048)
    model(**batch)          # + position_ids; attention_mask is a 4-D block-diagonal causal mask

Padding positions are found from each example's length (the attention mask), never from the token
id: SmolLM2's pad token is its end-of-turn token `<|im_end|>`, which must stay a target where it closes
an assistant turn. Labels are not shifted (transformers shifts inside its causal-LM loss).

Packing: examples are placed in order, first-fit, into rows of at most `max_seq_len` tokens. Each row
gets `position_ids` restarting at 0 per example and a mask [R, 1, T, T] where token i may attend to
token j only if j <= i and both belong to the same example (padding attends to padding only, so no
softmax row is empty). transformers 5.24 passes a 4-D mask through unchanged (`masking_utils`:
"already prepared"); the sdpa attention (the default) accepts it as bool (True = attend); the eager
attention *adds* the mask to the scores, so it needs `mask_dtype=<the model's float dtype>`, which
gives 0 / finfo.min instead. Every example's labels[0] is -100, so no example is trained to predict
its first token from the previous example.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from lcsb_core.data.tokenization import IGNORE_INDEX, EncodedExample


def count_target_tokens(labels: torch.Tensor) -> int:
    """Number of target tokens in a labels tensor (entries != -100). Because every example's first
    label is -100, this equals the number of positions the shifted causal-LM loss averages over;
    sum it over the micro-batches of one optimizer step to average the loss over target tokens."""
    return int((labels != IGNORE_INDEX).sum().item())


def _pad(examples: Sequence[EncodedExample], pad_token_id: int, multiple: int = 1) -> dict[str, torch.Tensor]:
    width = max(len(e.input_ids) for e in examples)
    width = -(-width // multiple) * multiple
    n = len(examples)
    input_ids = torch.full((n, width), pad_token_id, dtype=torch.long)
    labels = torch.full((n, width), IGNORE_INDEX, dtype=torch.long)
    attention_mask = torch.zeros((n, width), dtype=torch.long)
    for i, e in enumerate(examples):
        length = len(e.input_ids)
        input_ids[i, :length] = torch.tensor(e.input_ids, dtype=torch.long)
        labels[i, :length] = torch.tensor(e.labels, dtype=torch.long)
        attention_mask[i, :length] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def pack_rows(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """Group example indices, in order, into rows whose lengths sum to at most `capacity`."""
    rows: list[list[int]] = []
    used = capacity + 1
    for i, length in enumerate(lengths):
        if used + length > capacity:
            rows.append([])
            used = 0
        rows[-1].append(i)
        used += length
    return rows


def _pack(examples: Sequence[EncodedExample], pad_token_id: int, capacity: int,
          mask_dtype: torch.dtype | None) -> dict[str, torch.Tensor]:
    rows = pack_rows([len(e.input_ids) for e in examples], capacity)
    width = max(sum(len(examples[i].input_ids) for i in row) for row in rows)
    n = len(rows)
    input_ids = torch.full((n, width), pad_token_id, dtype=torch.long)
    labels = torch.full((n, width), IGNORE_INDEX, dtype=torch.long)
    position_ids = torch.zeros((n, width), dtype=torch.long)
    segment = torch.full((n, width), -1, dtype=torch.long)  # -1: padding
    for r, row in enumerate(rows):
        start = 0
        for k, i in enumerate(row):
            e = examples[i]
            end = start + len(e.input_ids)
            input_ids[r, start:end] = torch.tensor(e.input_ids, dtype=torch.long)
            labels[r, start:end] = torch.tensor(e.labels, dtype=torch.long)
            position_ids[r, start:end] = torch.arange(end - start)
            segment[r, start:end] = k
            start = end
        position_ids[r, start:] = torch.arange(width - start)
    causal = torch.ones((width, width), dtype=torch.bool).tril()
    mask = (segment[:, :, None] == segment[:, None, :]) & causal
    mask = mask[:, None, :, :]
    if mask_dtype is not None and mask_dtype != torch.bool:
        mask = torch.zeros(mask.shape, dtype=mask_dtype).masked_fill(~mask, torch.finfo(mask_dtype).min)
    return {"input_ids": input_ids, "attention_mask": mask, "position_ids": position_ids, "labels": labels}


def collate(
    examples: Sequence[EncodedExample],
    pad_token_id: int,
    *,
    pack: bool = False,
    max_seq_len: int | None = None,
    mask_dtype: torch.dtype | None = None,
    pad_to_multiple_of: int = 1,
) -> dict[str, torch.Tensor]:
    """Make one batch (right padding to the longest example of the batch, rounded up to a multiple of
    `pad_to_multiple_of`: fewer distinct shapes, so CPU kernel caches (oneDNN primitives) and the
    allocator see a handful of sizes instead of one per batch).

    Returns (all torch.long unless noted):
        pack=False: input_ids [B,T], attention_mask [B,T] (1 = real token), labels [B,T] (-100 at
            padding and wherever the example's labels are -100); B = len(examples).
        pack=True: input_ids [R,T], position_ids [R,T] (restart at 0 per example), labels [R,T],
            attention_mask [R,1,T,T]: bool (True = may attend), or additive float of `mask_dtype`
            (0 / finfo.min; needed by eager attention); R rows of at most max_seq_len tokens.

    Raises:
        ValueError: no examples; pack=True without max_seq_len; an example longer than max_seq_len;
            input_ids and labels of different lengths.
    """
    if not examples:
        raise ValueError("collate() needs at least one example")
    for e in examples:
        if len(e.input_ids) != len(e.labels):
            raise ValueError(f"example from line {e.line}: input_ids and labels differ in length")
        if max_seq_len is not None and len(e.input_ids) > max_seq_len:
            raise ValueError(f"example from line {e.line} has {len(e.input_ids)} tokens > max_seq_len {max_seq_len}")
    if not pack:
        return _pad(examples, pad_token_id, pad_to_multiple_of)
    if max_seq_len is None:
        raise ValueError("pack=True needs max_seq_len (the row length)")
    return _pack(examples, pad_token_id, max_seq_len, mask_dtype)
