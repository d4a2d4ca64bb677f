"""Continuous batching for serving: many requests, possibly for different adapters, decoded by one
`llama_batch.BatchDecoder` in one scheduler thread per engine.

    batcher = ContinuousBatcher(engine)                  # engine: lcsb_core.inference.llama_engine.LlamaEngine
    out = batcher.submit(adapter, SeqJob(prompt_ids, params, should_stop))
    while (item := out.get()).token is not None: ...    # Made(index, token, logprobs); an exception when
                                                        # decoding failed
    batcher.close()

How it schedules (as llama.cpp's own server does with its slots, and with its rule that requests with
different LoRA sets are not decoded in one batch):

- A request waits until a slot is free, then is admitted in arrival order whatever its adapter: its
  adapter is set on the context, its prompt prefilled alone and its first token sampled (time to first
  token does not wait for other requests' answers to end).
- Running sequences are grouped by adapter. Each `llama_decode` step decodes one token of every running
  sequence of one group (the base alone is a group too); a group keeps the context for `quantum` steps
  while other groups have running sequences, then the next group in round-robin order takes it. A
  paused sequence keeps its KV cells (computed with its own adapter) and resumes where it stopped; an
  adapter switch (`llama_set_adapters_lora`) costs a graph rebuild, so groups do not alternate every
  token.
- `should_stop()` (a cancelled request, a client that went away, or the consumer closing its
  generation) is asked before each step: that sequence's slot is freed at once, the others continue.
- An adapter with waiting or running requests is never evicted from the engine's adapter cache
  (`GGUFAdapterCache.get(..., keep=...)`).
- A request of `n` choices is `n` sequences submitted onto one queue (`submit(..., out=, index=)`): each
  is admitted, grouped and stopped like any other, and tags what it makes with its choice's index.

Each sequence's tokens are computed row by row as in `BatchDecoder.run`, so an answer does not depend
on what runs beside it (`tests/integration/test_llama_serving.py`).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from lcsb_core.inference.llama_batch import SeqJob
from lcsb_core.inference.logprobs import TokenLogprobs


class DecodingEngine(Protocol):
    """What the scheduler uses of its engine (`llama_engine.LlamaEngine` is one): the decoder, the lock
    around it, the end tokens, and the adapter in use (`use` switches it: None, the base alone)."""

    decoder: Any
    lock: Any
    end_token_ids: frozenset[int]

    @property
    def active_adapter(self) -> str | None:
        """The name of the adapter set on the context now (None: the base alone)."""

    def use(self, adapter: tuple[str, Any] | None) -> None:
        """Set `adapter` (its name and llama.cpp handle) on the context, or none."""

log = logging.getLogger(__name__)
_NO_TURN = "<no turn>"   # no group's turn (None is the base's group)
QUANTUM = 16   # decode steps a group of one adapter keeps the context while another group has sequences


@dataclass(frozen=True)
class Made:
    """What one sequence of a request made: a `token` of choice `index` with its `logprobs` (None when
    not asked), or `token` None when that choice's sequence ended (end token, token limit, stopped)."""

    index: int
    token: int | None
    logprobs: TokenLogprobs | None = None


Output = queue.SimpleQueue[Made | BaseException]   # a request's queue: what its sequences made, or a failure


@dataclass
class _Request:
    adapter: tuple[str, Any] | None       # (SHA-256, llama_adapter_lora pointer); None: the base alone
    job: SeqJob
    out: Output = field(default_factory=queue.SimpleQueue)
    index: int = 0                        # the choice this sequence answers

    @property
    def key(self) -> str | None:
        return self.adapter[0] if self.adapter is not None else None


class ContinuousBatcher:
    """The scheduler of one `LlamaEngine`'s decoder (see the module docstring). `quantum`: decode steps
    per adapter group's turn. Started on construction; `close()` stops it and ends waiting requests
    with a RuntimeError."""

    def __init__(self, engine: DecodingEngine, *, quantum: int = QUANTUM) -> None:
        if quantum < 1:
            raise ValueError(f"quantum must be at least 1, got {quantum}")
        self.engine, self.decoder, self.quantum = engine, engine.decoder, quantum
        self.cond = threading.Condition()
        self.waiting: deque[_Request] = deque()
        self.running: dict[int, _Request] = {}    # slot -> request (read by `in_use` under `cond`)
        self.closed = False
        self.turn: str | None = _NO_TURN          # the adapter group whose turn it is (None: the base's)
        self.rotation: list[str | None] = []      # the groups with running sequences, next turn first
        self.turn_steps = 0
        self.switches = 0                         # adapter changes between decode steps (for benchmarks)
        self.thread = threading.Thread(target=self._loop, name="lcsb-batcher", daemon=True)
        self.thread.start()

    def in_use(self) -> frozenset[str]:
        """SHA-256s of the adapters of waiting and running requests (not to be evicted)."""
        with self.cond:
            return frozenset(r.key for r in (*self.waiting, *self.running.values()) if r.key is not None)

    def submit(self, adapter: tuple[str, Any] | None, job: SeqJob, *, out: Output | None = None,
               index: int = 0) -> Output:
        """Queue `job` with `adapter` ((SHA-256, pointer) from the engine's cache; None: the base) as
        choice `index`, onto `out` (a new queue when None; the choices of one request share one).
        Returns the queue: a `Made` per token, then `Made(index, None)` when the sequence ended (end
        token, `max_new_tokens`, or `should_stop()`), or an exception (then nothing more from it).

        Raises:
            ValueError: the job does not fit a slot (`BatchDecoder.check`).
            RuntimeError: the batcher is closed.
        """
        self.decoder.check(job)
        request = _Request(adapter, job, out if out is not None else queue.SimpleQueue(), index)
        with self.cond:
            if self.closed:
                raise RuntimeError("the engine is closed")
            self.waiting.append(request)
            self.cond.notify()
        return request.out

    def close(self) -> None:
        """Stop the scheduler thread (after its current step); waiting and running requests end with a
        RuntimeError."""
        with self.cond:
            self.closed = True
            self.cond.notify()
        if self.thread is not threading.current_thread():
            self.thread.join(timeout=30)

    # the scheduler thread ---------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self.cond:
                while not self.waiting and not self.running and not self.closed:
                    self.cond.wait()
                if self.closed:
                    self._fail_all(RuntimeError("the engine was closed"))
                    return
            with self.engine.lock:   # `should_stop` is asked before every token: prefill's and each step's
                self._drop_waiting()
                self._admit()
                self._drop_running()
                self._step_one_group()

    def _fail_all(self, exc: BaseException) -> None:
        with self.engine.lock:
            for slot, request in list(self.running.items()):
                self.decoder.stop(slot)
                request.out.put(exc)
            self.running.clear()
            while self.waiting:
                self.waiting.popleft().out.put(exc)

    def _end(self, slot: int, item: BaseException | None = None) -> None:
        self.decoder.stop(slot)
        with self.cond:
            request = self.running.pop(slot)
        request.out.put(item if item is not None else Made(request.index, None))

    def _deliver(self, slot: int, token: int) -> None:
        """Hand `token` (and its log probabilities) to its request; end the sequence at an end token or
        its token limit."""
        request = self.running[slot]
        request.out.put(Made(request.index, token, self.decoder.logprobs(slot)))
        if token in self.engine.end_token_ids or self.decoder.made(slot) >= request.job.params.max_new_tokens:
            self._end(slot)

    def _drop_waiting(self) -> None:
        with self.cond:
            gone = [r for r in self.waiting if r.job.should_stop()]
            for r in gone:
                self.waiting.remove(r)
        for r in gone:
            r.out.put(Made(r.index, None))

    def _drop_running(self) -> None:
        for slot in [s for s, r in self.running.items() if r.job.should_stop()]:
            self._end(slot)

    def _admit(self) -> None:
        """Prefill waiting requests into free slots, in arrival order, and sample their first tokens."""
        for slot in self.decoder.free_slots():
            with self.cond:
                if not self.waiting:
                    return
                request = self.waiting.popleft()
                self.running[slot] = request
            try:
                self._use(request.key, request.adapter)
                token = self.decoder.start(slot, request.job)
            except Exception as exc:   # this request fails; the others go on
                log.exception("prefill failed")
                with self.cond:
                    self.running.pop(slot, None)
                self.decoder.stop(slot)
                request.out.put(exc)
                continue
            self._deliver(slot, token)

    def _use(self, key: str | None, adapter: tuple[str, Any] | None) -> None:
        if key != self.engine.active_adapter:
            self.switches += 1
        self.engine.use(adapter)

    def _step_one_group(self) -> None:
        """One decode step of the group whose turn it is (round-robin over adapter groups, `quantum`
        steps each while another group has running sequences)."""
        groups: dict[str | None, list[int]] = {}
        for slot, request in sorted(self.running.items()):
            groups.setdefault(request.key, []).append(slot)
        if not groups:
            return
        for key in groups:               # a new group waits behind those already running
            if key not in self.rotation:
                self.rotation.append(key)
        self.rotation = [k for k in self.rotation if k in groups]
        if self.turn in groups and len(groups) > 1 and self.turn_steps >= self.quantum:
            self.rotation.remove(self.turn)   # its turn is over: to the back of the line
            self.rotation.append(self.turn)
            self.turn = _NO_TURN
        if self.turn not in groups:
            self.turn, self.turn_steps = self.rotation[0], 0
        slots = groups[self.turn]
        self.turn_steps += 1
        first = self.running[slots[0]]
        try:
            self._use(first.key, first.adapter)
            tokens = self.decoder.step(slots)
        except Exception as exc:   # this group's requests fail; the others go on
            log.exception("decode step failed")
            for slot in slots:
                self._end(slot, exc)
            return
        for slot, token in zip(slots, tokens, strict=True):
            self._deliver(slot, token)
