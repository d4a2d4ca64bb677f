"""Batched greedy generation for graded evaluation, leaving the training state as it was.

    answers, counts = generate_answers(model, tokenizer, prompt_ids, max_new_tokens=128)

transformers' `generate` with `do_sample=False` (greedy), a KV cache (`use_cache=True`) and left
padding, stopping each row at the model's end-of-sequence or end-of-turn token. Prompts are sorted by
length and batched up to `GENERATION_TOKENS` (less padding, few calls); answers come back in the prompts'
order.

On CPU an NF4 base's weights are dequantized once per call (`models.quantization.dequantized_weights`)
instead of once per layer per new token, with the same arithmetic (bit-identical outputs). Its cost on
2 CPU cores: BENCHMARKS.md, "Graded evaluation cost" (a bf16 product in fp32 was measured slower there).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import torch
from torch import nn

from lcsb_core.eval.settings import GENERATION_TOKENS
from lcsb_core.models.modules import autocast_for, causal_lm
from lcsb_core.models.quantization import dequantized_weights

# End-of-turn markers of the chat templates in use (SmolLM2/ChatML, Gemma, Llama 3), when in the vocabulary
END_OF_TURN = ("<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|end|>")


def stop_token_ids(model: nn.Module, tokenizer: Any) -> list[int]:
    """The ids that end an answer: the tokenizer's and the generation config's EOS, and the chat
    templates' end-of-turn tokens that the vocabulary holds as single tokens."""
    ids: set[int] = set()
    candidates: list[Any] = [tokenizer.eos_token_id,
                             getattr(getattr(causal_lm(model), "generation_config", None), "eos_token_id", None)]
    vocab = tokenizer.get_vocab()
    candidates += [vocab.get(tok) for tok in END_OF_TURN]
    for c in candidates:
        if isinstance(c, int):
            ids.add(c)
        elif isinstance(c, (list, tuple)):
            ids.update(int(x) for x in c)
    return sorted(ids)


@contextlib.contextmanager
def training_state_kept(model: nn.Module, tokenizer: Any) -> Iterator[None]:
    """Run the block in eval mode with the KV cache on, then restore each module's mode, `use_cache`,
    the tokenizer's padding side and the RNG states (CPU, and the model's CUDA device)."""
    modes = [(m, m.training) for m in model.modules()]
    lm_config = causal_lm(model).config
    use_cache, side = getattr(lm_config, "use_cache", None), tokenizer.padding_side
    device = next(model.parameters()).device
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        try:
            model.eval()
            tokenizer.padding_side = "left"
            yield
        finally:
            for module, training in modes:
                module.training = training
            if use_cache is not None:
                lm_config.use_cache = use_cache
            tokenizer.padding_side = side


class _Ticks:
    """A `generate` stopping criterion that stops nothing: it counts decoding steps and reports them."""

    def __init__(self, on_token: Callable[[int, int], None] | None, total: int) -> None:
        self.on_token, self.total, self.done = on_token, total, 0

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        self.done += 1
        if self.on_token is not None:
            self.on_token(self.done, self.total)
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


def _batches(order: list[int], lengths: list[int], max_new_tokens: int, budget: int) -> Iterator[list[int]]:
    """Consecutive runs of `order` (indices sorted by length) whose rows x (longest + max_new_tokens)
    stay within `budget` tokens; a run holds one row at least."""
    rows: list[int] = []
    for i in order:
        if rows and (len(rows) + 1) * (lengths[i] + max_new_tokens) > budget:
            yield rows
            rows = []
        rows.append(i)
    if rows:
        yield rows


class _Penalties:
    """OpenAI's frequency and presence penalties as a transformers logits processor: logit[t] -=
    frequency x count(t) + presence x [count(t) > 0], counting the tokens made after the prompt (the
    same rule as the llama.cpp engine's sampler, `lcsb_core.inference.llama_batch.sampler_chain`)."""

    def __init__(self, prompt_len: int, frequency: float, presence: float) -> None:
        self.prompt_len, self.frequency, self.presence = prompt_len, frequency, presence

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        made = input_ids[:, self.prompt_len:]
        if made.shape[1] == 0:
            return scores
        counts = torch.zeros_like(scores).scatter_add_(1, made, torch.ones_like(made, dtype=scores.dtype))
        return scores - self.frequency * counts - self.presence * (counts > 0).to(scores.dtype)


@torch.no_grad()
def generate_answers(model: nn.Module, tokenizer: Any, prompts: Sequence[Sequence[int]], *, max_new_tokens: int,
                     frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
                     max_prompt_tokens: int | None = None, token_budget: int = GENERATION_TOKENS,
                     on_token: Callable[[int, int], None] | None = None) -> tuple[list[str], list[int]]:
    """(greedy answers, their token counts) to `prompts` (token ids the model continues), at most
    `max_new_tokens` tokens each, decoded without special tokens; a count includes the end token that
    ended the answer. `frequency_penalty` / `presence_penalty`: OpenAI's (`_Penalties`).
    `max_prompt_tokens`: keep only a prompt's last tokens (the generation prompt is at the end).
    `token_budget`: most rows x (longest prompt + max_new_tokens) per `generate` call (one row at least).
    `on_token(done, total)`: called after every decoding step (`done` steps over all calls so far, of
    `total` = calls x max_new_tokens at most), so a caller can show progress and keep a heartbeat.
    Runs under `training_state_kept` and the model's autocast (`loss.autocast_for`); a CPU NF4 base's
    weights are dequantized once per call (`quantization.dequantized_weights`; same outputs)."""
    from transformers import LogitsProcessorList

    encoded = [list(p) for p in prompts]
    if max_prompt_tokens:
        encoded = [ids[-max_prompt_tokens:] for ids in encoded]
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    stops = stop_token_ids(model, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stops[0]
    device = next(model.parameters()).device
    answers: list[str] = [""] * len(prompts)
    counts: list[int] = [0] * len(prompts)
    batches = list(_batches(order, [len(ids) for ids in encoded], max_new_tokens, token_budget))
    ticks = _Ticks(on_token, len(batches) * max_new_tokens)
    with training_state_kept(model, tokenizer), autocast_for(model), dequantized_weights(model):
        for rows in batches:
            batch = tokenizer.pad({"input_ids": [encoded[i] for i in rows]}, padding=True, return_tensors="pt")
            input_ids, mask = batch["input_ids"].to(device), batch["attention_mask"].to(device)
            processors = LogitsProcessorList([_Penalties(input_ids.shape[1], frequency_penalty, presence_penalty)]
                                             if frequency_penalty or presence_penalty else [])
            out = cast(Any, model).generate(input_ids=input_ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                                 do_sample=False, use_cache=True, eos_token_id=stops, pad_token_id=pad,
                                 temperature=None, top_p=None, top_k=None, stopping_criteria=[ticks],
                                 logits_processor=processors)
            for i, row in zip(rows, out[:, input_ids.shape[1]:], strict=True):
                ids = row.tolist()
                ends = [k for k, t in enumerate(ids) if t in stops]
                ids = ids[:ends[0] + 1] if ends else ids
                answers[i] = tokenizer.decode(ids, skip_special_tokens=True)
                counts[i] = len(ids)
    return answers, counts
