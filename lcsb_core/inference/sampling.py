"""Sampling parameters of one answer, torch-free: what a request asks of either engine (OpenAI's
`max_tokens`, `temperature`, `top_p`, `seed`, `stop`, `frequency_penalty`, `presence_penalty`) and the
seed of each of a request's `n` choices."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class SamplingParams:
    """`max_new_tokens` >= 1; `temperature` 0 = greedy, else sampling with `top_p` (nucleus) and no
    top-k; `seed` seeds the sampler (None: a random one); `stop`: strings that end the answer;
    `frequency_penalty` and `presence_penalty` (OpenAI's, -2 to 2; 0 = off): before choosing a token,
    logit[t] -= frequency_penalty x count(t) + presence_penalty x [count(t) > 0], counting the tokens
    made so far (not the prompt's). The llama.cpp engine applies them (`lcsb_core.inference.llama_batch`)."""

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0


SEED_SPACE = 2**32 - 1   # seeds 0..2**32 - 2: llama.cpp reads 2**32 - 1 as "draw a random seed"


def choice_params(params: SamplingParams, index: int) -> SamplingParams:
    """The sampling of choice `index` of a request of several (`n`): seed + index (past 2**32 - 2 it
    wraps to 0, so it stays a seed llama.cpp honours); no seed stays no seed (each choice draws its own)."""
    if params.seed is None or index == 0:
        return params
    return replace(params, seed=(params.seed + index) % SEED_SPACE)
