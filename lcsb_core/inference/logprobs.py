"""Log probabilities of sampled tokens from the engine's own logits (numpy only, no torch), as OpenAI
documents `logprobs`: the log-softmax of the model's logits row at the sampled position, before the
sampler's penalties, temperature or top_p (what the model gives, not what the draw used).

    lp = token_logprobs(logits_row, token=42, top=5)
    lp.logprob, lp.top          # log p(42); the 5 most likely ids with theirs, most likely first

`llama_batch.BatchDecoder` computes one per sampled token of a sequence that asks for them
(`SeqJob.logprobs`); `llama_generation` attaches each to the text it made.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_TOP = 20   # OpenAI's bound on chat's top_logprobs (completions' logprobs: 5)


@dataclass(frozen=True)
class TokenLogprobs:
    """`token`'s log probability and the `top` most likely tokens ((id, log probability), most
    likely first; ties by lower id) at its position."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]


def token_logprobs(logits: np.ndarray, token: int, top: int) -> TokenLogprobs:
    """The log-softmax of `logits` (one vocabulary row, any float dtype; computed in float64) at `token`,
    and its `top` (0..`MAX_TOP`) largest entries.

    Raises:
        ValueError: `top` out of range or `token` outside the row.
    """
    if not 0 <= top <= MAX_TOP:
        raise ValueError(f"top must be 0..{MAX_TOP}, got {top}")
    row = np.asarray(logits, dtype=np.float64).reshape(-1)
    if not 0 <= token < row.size:
        raise ValueError(f"token {token} is outside a vocabulary of {row.size}")
    peak = float(row.max())
    log_z = peak + float(np.log(np.exp(row - peak).sum()))
    best: tuple[tuple[int, float], ...] = ()
    if top:
        near = np.argpartition(-row, top - 1)[:top] if top < row.size else np.arange(row.size)
        ids = sorted((int(i) for i in near), key=lambda i: (-row[i], i))
        best = tuple((i, float(row[i]) - log_z) for i in ids)
    return TokenLogprobs(int(token), float(row[token]) - log_z, best)
