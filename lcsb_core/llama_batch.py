"""Batched decoding on one llama.cpp context: many sequences that share one adapter, decoded together,
for serving (one sequence per request) and graded evaluation (every prompt of an evaluation): one code
path, so a served answer and a graded answer are made by the same arithmetic.

    decoder = BatchDecoder(model_ptr, slots=16, seq_tokens=640, threads=2)
    for job, token in decoder.run([SeqJob(prompt_ids, params), ...], end_ids):
        ...                                       # tokens as they are made, (job index, token id)
    decoder.close()

How (llama.cpp's low-level API, `llama_cpp` ctypes bindings; llama.cpp's `examples/batched` and
`tools/server` do the same): one `llama_context` with `slots` sequences, each with its own KV stream of
`seq_tokens` cells (`kv_unified = false`), so a sequence's attention reads only its own cells, laid out
from cell 0 as a request alone would have them. Every prompt is prefilled alone (chunks of `N_BATCH`
tokens, logits of its last token only); then each step decodes one token of every running sequence in
one `llama_decode` (seq ids in increasing order: llama.cpp computes consecutive streams in one ubatch).
A finished sequence frees its slot at once (`llama_memory_seq_rm`) and the next waiting prompt takes
it: continuous batching. Each sequence samples with its own llama.cpp sampler chain (`sampler_chain`):
OpenAI's frequency and presence penalties over the tokens it made (`llama_sampler_init_penalties`),
then greedy at temperature 0, else `top_p`, temperature and a seeded draw.

Every per-token result here is computed row by row (quantized weights times one activation row,
attention over the sequence's own stream), so a sequence's tokens do not depend on which others run
beside it: `tests/core/test_llama_batch.py` checks batched greedy answers against one-at-a-time ones.
"""

from __future__ import annotations

import secrets
from collections import deque
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from lcsb_core.inference import SamplingParams

N_BATCH = 512          # tokens per llama_decode call and per ubatch (llama.cpp's default)


@dataclass
class SeqJob:
    """One sequence to decode: `prompt` token ids (at least one), its `params` (max_new_tokens,
    temperature, top_p, seed, penalties; stop strings are the caller's), and `should_stop`, asked before
    every new token (a cancelled request)."""

    prompt: Sequence[int]
    params: SamplingParams
    should_stop: Callable[[], bool] = field(default=lambda: False)


def sampler_chain(params: SamplingParams, vocab_size: int) -> Any:
    """A llama.cpp sampler chain for `params` (free it with `llama_sampler_free`): the penalties sampler
    when a penalty is non-zero (OpenAI's semantics: logit -= frequency_penalty x count + presence_penalty
    x [count > 0], over the tokens this sequence has made, not the prompt's), then greedy (temperature 0:
    the highest logit, the first one on a tie) or top_p, temperature and a draw seeded by `seed` (a random
    seed when None). `vocab_size`: the model's vocabulary (llama.cpp's penalties sampler takes it)."""
    import llama_cpp

    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    add = lambda s: llama_cpp.llama_sampler_chain_add(chain, s)  # noqa: E731
    if params.frequency_penalty or params.presence_penalty:
        add(llama_cpp.llama_sampler_init_penalties(vocab_size, max(params.max_new_tokens, 1), 1.0,
                                                   float(params.frequency_penalty), float(params.presence_penalty)))
    if params.temperature <= 0:
        add(llama_cpp.llama_sampler_init_greedy())
    else:
        seed = params.seed if params.seed is not None else secrets.randbits(31)
        add(llama_cpp.llama_sampler_init_top_p(float(params.top_p), 1))
        add(llama_cpp.llama_sampler_init_temp(float(params.temperature)))
        add(llama_cpp.llama_sampler_init_dist(seed & 0xFFFFFFFF))
    return chain


@dataclass
class _Running:
    job: int
    pos: int
    made: int
    sampler: Any
    next_token: int


class BatchDecoder:
    """One llama.cpp context on `model` (a `llama_model` pointer) for up to `slots` sequences of at most
    `seq_tokens` tokens each (prompt + new), `threads` CPU threads. KV cache: slots x seq_tokens cells.

    Raises:
        RuntimeError: llama.cpp could not make the context (out of memory).
    """

    def __init__(self, model: Any, *, slots: int, seq_tokens: int, threads: int) -> None:
        import llama_cpp

        if slots < 1 or seq_tokens < 2:
            raise ValueError(f"slots ({slots}) >= 1 and seq_tokens ({seq_tokens}) >= 2")
        self.slots, self.seq_tokens = min(slots, N_BATCH), seq_tokens
        p = llama_cpp.llama_context_default_params()
        p.n_ctx = self.slots * seq_tokens
        p.n_batch = p.n_ubatch = N_BATCH
        p.n_seq_max = self.slots
        p.n_threads = p.n_threads_batch = threads
        p.kv_unified = False
        p.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        p.no_perf = True
        self.ctx = llama_cpp.llama_init_from_model(model, p)
        if not self.ctx:
            raise RuntimeError(f"llama.cpp could not make a context of {self.slots} x {seq_tokens} tokens")
        self.mem = llama_cpp.llama_get_memory(self.ctx)
        self.vocab_size = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
        self.batch = llama_cpp.llama_batch_init(N_BATCH, 0, 1)
        self.steps = 0          # llama_decode calls of the decode phase (one token per running sequence)

    def close(self) -> None:
        """Free the context and the batch (idempotent)."""
        import llama_cpp

        if self.ctx:
            llama_cpp.llama_batch_free(self.batch)
            llama_cpp.llama_free(self.ctx)
            self.ctx = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown: the bindings may be gone
            pass

    def _decode(self, items: list[tuple[int, int, int, bool]]) -> None:
        """One llama_decode of `items` (token, position, seq id, logits wanted), at most N_BATCH.

        Raises:
            RuntimeError: llama.cpp refused the batch (no KV cell free, or a failed computation).
        """
        import llama_cpp

        b = self.batch
        for i, (token, pos, seq, logits) in enumerate(items):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = token, pos, 1, logits
            b.seq_id[i][0] = seq
        b.n_tokens = len(items)
        rc = llama_cpp.llama_decode(self.ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode failed ({rc}) on {len(items)} tokens")

    def _prefill(self, slot: int, prompt: Sequence[int]) -> None:
        """The prompt into `slot`'s stream, in chunks of N_BATCH tokens; logits of its last token only
        (at batch index `len(last chunk) - 1`)."""
        for start in range(0, len(prompt), N_BATCH):
            chunk = prompt[start:start + N_BATCH]
            last = start + len(chunk) == len(prompt)
            self._decode([(int(t), start + i, slot, last and i == len(chunk) - 1) for i, t in enumerate(chunk)])

    def run(self, jobs: Sequence[SeqJob], end_ids: frozenset[int]) -> Generator[tuple[int, int], None, None]:
        """Decode every job; yields (job index, token id) as each token is made, an end token included
        (then that job is done). A job ends at an end token, at `max_new_tokens`, or when its
        `should_stop()` is true before a token (nothing more is yielded for it). Jobs start in order as
        slots free up. Closing the iterator early frees every slot.

        Raises:
            ValueError: a job's prompt is empty, or its prompt plus max_new_tokens exceed `seq_tokens`.
            RuntimeError: llama.cpp failed to decode.
        """
        import llama_cpp

        for i, job in enumerate(jobs):
            if not job.prompt or len(job.prompt) + job.params.max_new_tokens > self.seq_tokens:
                raise ValueError(f"job {i}: prompt of {len(job.prompt)} tokens plus {job.params.max_new_tokens} new "
                                 f"does not fit a sequence of {self.seq_tokens} tokens")
        llama_cpp.llama_memory_clear(self.mem, True)
        waiting = deque(range(len(jobs)))
        running: dict[int, _Running] = {}

        def finish(slot: int) -> None:
            llama_cpp.llama_sampler_free(running.pop(slot).sampler)
            llama_cpp.llama_memory_seq_rm(self.mem, slot, -1, -1)

        def sample(slot: int, idx: int) -> Iterator[tuple[int, int]]:
            r = running[slot]
            token = int(llama_cpp.llama_sampler_sample(r.sampler, self.ctx, idx))
            r.made += 1
            yield r.job, token
            if token in end_ids or r.made >= jobs[r.job].params.max_new_tokens:
                finish(slot)
            else:
                r.next_token = token

        try:
            while waiting or running:
                for slot in range(self.slots):          # admit: the lowest free slots, prompts in order
                    if not waiting:
                        break
                    if slot in running:
                        continue
                    j = waiting.popleft()
                    job = jobs[j]
                    if job.should_stop():
                        continue
                    running[slot] = _Running(j, len(job.prompt), 0, sampler_chain(job.params, self.vocab_size), -1)
                    self._prefill(slot, job.prompt)
                    yield from sample(slot, -1)
                for slot in [s for s, r in running.items() if jobs[r.job].should_stop()]:
                    finish(slot)
                order = sorted(running)
                if not order:
                    continue
                self._decode([(running[s].next_token, running[s].pos, s, True) for s in order])
                self.steps += 1
                for idx, slot in enumerate(order):
                    running[slot].pos += 1
                    yield from sample(slot, idx)
        finally:
            for slot in list(running):
                finish(slot)


def generate_batch(decoder: BatchDecoder, prompts: Sequence[Sequence[int]], params: SamplingParams,
                   end_ids: frozenset[int]) -> list[list[int]]:
    """The token ids each prompt's sequence made (an end token included when one ended it), in the
    prompts' order; all sequences share `params` (graded evaluation: greedy, the eval's token limit)."""
    out: list[list[int]] = [[] for _ in prompts]
    for job, token in decoder.run([SeqJob(p, params) for p in prompts], end_ids):
        out[job].append(token)
    return out

