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
then greedy at temperature 0, else `top_p`, temperature and a seeded draw. A sequence that asks for
log probabilities (`SeqJob.logprobs`) gets, for each token, the log-softmax of the logits row it was
drawn from, read before the sampler chain runs (`lcsb_core.inference.logprobs`; `BatchDecoder.logprobs`).

Every per-token result here is computed row by row (quantized weights times one activation row,
attention over the sequence's own stream), so a sequence's tokens do not depend on which others run
beside it: `tests/integration/test_llama_engine.py` checks batched greedy answers against one-at-a-time ones.
"""

from __future__ import annotations

import secrets
from collections import deque
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from lcsb_core.inference.logprobs import TokenLogprobs, token_logprobs
from lcsb_core.inference.sampling import SamplingParams

N_BATCH = 512          # tokens per llama_decode call and per ubatch (llama.cpp's default)


@dataclass
class SeqJob:
    """One sequence to decode: `prompt` token ids (at least one), its `params` (max_new_tokens,
    temperature, top_p, seed, penalties; stop strings are the caller's), `should_stop`, asked before
    every new token (a cancelled request), and `logprobs`: None for none, else the log probability of
    each sampled token and of the `logprobs` (0..20) most likely ones at its position."""

    prompt: Sequence[int]
    params: SamplingParams
    should_stop: Callable[[], bool] = field(default=lambda: False)
    logprobs: int | None = None


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
    pos: int            # the position of `next_token` in the sequence
    made: int           # tokens sampled so far
    sampler: Any
    next_token: int     # the last token sampled, to decode at the next step
    top: int | None = None                 # log probabilities wanted: None, or how many alternatives
    last: TokenLogprobs | None = None      # those of `next_token`


class BatchDecoder:
    """One llama.cpp context on `model` (a `llama_model` pointer) for up to `slots` sequences of at most
    `seq_tokens` tokens each (prompt + new), `threads` CPU threads. KV cache: slots x seq_tokens cells.

    Two ways to drive it: `run(jobs, end_ids)` decodes a list of jobs to the end (graded evaluation,
    one request); `start` / `step` / `stop` drive single slots (a serving scheduler that admits requests
    as they come, `lcsb_core.inference.llama_serving`). Not thread-safe: one caller at a time.

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
        self.running: dict[int, _Running] = {}   # slot -> its sequence

    def close(self) -> None:
        """Free the context, the batch and the running sequences' samplers (idempotent)."""
        import llama_cpp

        if self.ctx:
            for slot in list(self.running):
                llama_cpp.llama_sampler_free(self.running.pop(slot).sampler)
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

    def check(self, job: SeqJob) -> None:
        """Raises ValueError when `job` cannot run here: an empty prompt, or its prompt plus
        `max_new_tokens` over `seq_tokens`."""
        if not job.prompt or len(job.prompt) + job.params.max_new_tokens > self.seq_tokens:
            raise ValueError(f"a prompt of {len(job.prompt)} tokens plus {job.params.max_new_tokens} new does not "
                             f"fit a sequence of {self.seq_tokens} tokens")

    def free_slots(self) -> list[int]:
        """The slots no sequence holds, lowest first."""
        return [s for s in range(self.slots) if s not in self.running]

    def start(self, slot: int, job: SeqJob) -> int:
        """Prefill `job`'s prompt into the free `slot` (with the adapter set on the context now) and
        sample its first token; returns it. The slot then holds the sequence until `stop(slot)`.

        Raises:
            ValueError: as `check`, or `slot` is taken.
            RuntimeError: llama.cpp failed to decode.
        """
        import llama_cpp

        self.check(job)
        if slot in self.running or not 0 <= slot < self.slots:
            raise ValueError(f"slot {slot} is not free")
        llama_cpp.llama_memory_seq_rm(self.mem, slot, -1, -1)
        self.running[slot] = _Running(len(job.prompt), 0, sampler_chain(job.params, self.vocab_size), -1,
                                      job.logprobs)
        try:
            self._prefill(slot, job.prompt)
        except BaseException:
            self.stop(slot)
            raise
        return self._sample(slot, -1)

    def _sample(self, slot: int, idx: int) -> int:
        import llama_cpp

        r = self.running[slot]
        row = None
        if r.top is not None:   # the logits as the model made them: the chain below works on a copy
            import numpy as np

            row = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self.ctx, idx), shape=(self.vocab_size,))
            row = row.copy()
        token = int(llama_cpp.llama_sampler_sample(r.sampler, self.ctx, idx))
        r.last = token_logprobs(row, token, r.top) if row is not None and r.top is not None else None
        r.made += 1
        r.next_token = token
        return token

    def logprobs(self, slot: int) -> TokenLogprobs | None:
        """The log probabilities of the token the sequence in `slot` sampled last (None when its job
        did not ask for them)."""
        return self.running[slot].last

    def step(self, slots: Sequence[int]) -> list[int]:
        """Decode the last sampled token of each of `slots` (running sequences) in one llama_decode, in
        increasing slot order, and sample the next one of each; returns them in the order of `slots`.
        The caller stops a sequence (`stop`) at its end token or token limit instead of stepping it.

        Raises:
            RuntimeError: llama.cpp failed to decode.
        """
        order = sorted(slots)
        self._decode([(self.running[s].next_token, self.running[s].pos, s, True) for s in order])
        self.steps += 1
        made = {}
        for idx, slot in enumerate(order):
            self.running[slot].pos += 1
            made[slot] = self._sample(slot, idx)
        return [made[s] for s in slots]

    def made(self, slot: int) -> int:
        """Tokens the sequence in `slot` has sampled."""
        return self.running[slot].made

    def stop(self, slot: int) -> None:
        """Free `slot`: its sampler and its KV cells (a no-op for a free slot)."""
        import llama_cpp

        r = self.running.pop(slot, None)
        if r is not None:
            llama_cpp.llama_sampler_free(r.sampler)
            llama_cpp.llama_memory_seq_rm(self.mem, slot, -1, -1)

    def run(self, jobs: Sequence[SeqJob], end_ids: frozenset[int]) -> Generator[tuple[int, int], None, None]:
        """Decode every job; yields (job index, token id) as each token is made, an end token included
        (then that job is done). A job ends at an end token, at `max_new_tokens`, or when its
        `should_stop()` is true before a token (nothing more is yielded for it). Jobs start in order as
        slots free up (the lowest free slot first). Closing the iterator early frees every slot.

        Raises:
            ValueError: a job's prompt is empty, or its prompt plus max_new_tokens exceed `seq_tokens`;
                slots are already held (`start` was used without `stop`).
            RuntimeError: llama.cpp failed to decode.
        """
        for i, job in enumerate(jobs):
            try:
                self.check(job)
            except ValueError as exc:
                raise ValueError(f"job {i}: {exc}") from None
        if self.running:
            raise ValueError(f"slots {sorted(self.running)} are held")
        waiting = deque(range(len(jobs)))
        owner: dict[int, int] = {}   # slot -> job index

        def after(slot: int, token: int) -> Iterator[tuple[int, int]]:
            j = owner[slot]
            yield j, token
            if token in end_ids or self.made(slot) >= jobs[j].params.max_new_tokens:
                self.stop(slot)
                del owner[slot]

        try:
            while waiting or owner:
                for slot in self.free_slots():          # admit: the lowest free slots, prompts in order
                    while waiting and jobs[waiting[0]].should_stop():
                        waiting.popleft()
                    if not waiting:
                        break
                    j = waiting.popleft()
                    owner[slot] = j
                    yield from after(slot, self.start(slot, jobs[j]))
                for slot in [s for s, j in owner.items() if jobs[j].should_stop()]:
                    self.stop(slot)
                    del owner[slot]
                order = sorted(owner)
                if not order:
                    continue
                for slot, token in zip(order, self.step(order), strict=True):
                    yield from after(slot, token)
        finally:
            for slot in list(owner):
                self.stop(slot)


def generate_batch(decoder: BatchDecoder, prompts: Sequence[Sequence[int]], params: SamplingParams,
                   end_ids: frozenset[int]) -> list[list[int]]:
    """The token ids each prompt's sequence made (an end token included when one ended it), in the
    prompts' order; all sequences share `params` (graded evaluation: greedy, the eval's token limit)."""
    out: list[list[int]] = [[] for _ in prompts]
    for job, token in decoder.run([SeqJob(p, params) for p in prompts], end_ids):
        out[job].append(token)
    return out

