"""Continuous batching in the serving engine (`lcsb_core.inference.llama_serving.ContinuousBatcher`, issue 49) on
the real SmolLM2 GGUF with a real trained adapter and a variant of it: requests for the base and two
adapters in flight at once, from one thread each, get exactly the greedy tokens they get alone; the
decoder really batched them (fewer decode steps than tokens) without alternating adapters every token;
a request that stops reading frees its slot while the others finish unchanged; an adapter with
requests in flight is not evicted by a cache of one; a request of `n` choices is `n` sequences of the
batch (more than the slots: they queue), choice i the answer of seed + i, with log probabilities
that do not depend on the batch either."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest

from lcsb_core.inference import AdapterRef, SamplingParams, choice_params
from lcsb_core.inference.llama_engine import LlamaEngine
from lcsb_core.inference.llama_serving import QUANTUM
from tests.integration.test_export_llama_cpp import gsm8k
from tests.integration.test_llama_engine import engine, greedy, job, variant  # noqa: F401 - fixtures

pytestmark = pytest.mark.integration
TOKENS = 40


@pytest.fixture(scope="module")
def adapters(job, tmp_path_factory) -> list[Path | None]:  # noqa: F811 - the fixture imported above
    return [None, job, variant(job, tmp_path_factory.mktemp("variant") / "half", 0.5)]


@pytest.fixture(scope="module")
def questions() -> list[str]:
    return [r["question"] for r in gsm8k("test", 200, 9)]


@pytest.fixture(scope="module")
def alone(engine, adapters, questions) -> dict[tuple[int, int], list[int]]:  # noqa: F811
    """Each (adapter, question)'s greedy tokens, one request at a time."""
    return {(a, q): greedy(engine, adapters[a], questions[q], TOKENS)
            for a in range(len(adapters)) for q in range(len(questions))}


def concurrently(eng: LlamaEngine, requests: list[tuple[Path | None, str]], n: int = TOKENS,
                 stop_after: dict[int, int] | None = None) -> list[list[int]]:
    """Each request's tokens, all sent at once from one thread each (as an inference worker's threads
    do); request i stops reading after `stop_after[i]` text pieces."""
    out: list[list[int]] = [[] for _ in requests]
    errors: list[BaseException] = []
    start = threading.Barrier(len(requests))

    def one(i: int, adapter: Path | None, question: str) -> None:
        try:
            ids = eng.chat_prompt([{"role": "user", "content": question}], eng.template_of(adapter))
            start.wait()
            ref = AdapterRef.of(adapter) if adapter else None
            run = eng.stream(ids, ref, SamplingParams(max_new_tokens=n, temperature=0))
            for k, _ in enumerate(run):
                if stop_after and i in stop_after and k + 1 >= stop_after[i]:
                    break
            out[i] = run.tokens
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i, a, q)) for i, (a, q) in enumerate(requests)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    if errors:
        raise errors[0]
    return out


def test_requests_for_three_adapters_at_once_answer_as_alone(engine, adapters, questions, alone):  # noqa: F811
    batched = LlamaEngine(engine.base_path, engine.gguf_path, lora_dir=engine.adapters.lora_dir, threads=2,
                          n_ctx=512, slots=6)
    requests = [(a, q) for q in range(len(questions)) for a in range(len(adapters))]   # 27, interleaved
    got = concurrently(batched, [(adapters[a], questions[q]) for a, q in requests])
    for (a, q), tokens in zip(requests, got, strict=True):
        assert tokens == alone[(a, q)], (a, q)
    made = sum(len(t) for t in got)
    assert made > 27 * 20   # real answers, not an end token each
    steps = batched.decoder.steps
    assert steps < made - 27   # each decode step served several sequences (the first tokens come from prefill)
    # adapters change at most once per group turn of QUANTUM steps (plus once per admission's prefill)
    assert batched.batcher.switches <= steps / QUANTUM + 2 * len(requests)
    assert batched.decoder.running == {} and batched.decoder.free_slots() == list(range(6))
    batched.close()


def test_a_request_that_stops_reading_frees_its_slot_and_the_others_finish(engine, adapters, questions,  # noqa: F811
                                                                          alone):
    batched = LlamaEngine(engine.base_path, engine.gguf_path, lora_dir=engine.adapters.lora_dir, threads=2,
                          n_ctx=512, slots=4)
    requests = [(1, 0), (1, 1), (2, 2), (0, 3)]
    got = concurrently(batched, [(adapters[a], questions[q]) for a, q in requests], stop_after={1: 3})
    assert 3 <= len(got[1]) < len(alone[requests[1]])   # it stopped within a token or so of leaving
    assert got[1] == alone[requests[1]][:len(got[1])]
    for i in (0, 2, 3):
        assert got[i] == alone[requests[i]]
    assert batched.decoder.running == {}
    batched.close()


def test_an_adapter_in_flight_is_not_evicted_by_a_cache_of_one(engine, adapters, questions, alone):  # noqa: F811
    tight = LlamaEngine(engine.base_path, engine.gguf_path, lora_dir=engine.adapters.lora_dir, threads=2,
                        n_ctx=512, slots=4, max_adapters=1)
    requests = [(1, 4), (2, 5), (1, 6), (2, 7)]
    got = concurrently(tight, [(adapters[a], questions[q]) for a, q in requests])
    for (a, q), tokens in zip(requests, got, strict=True):
        assert tokens == alone[(a, q)]
    # over its bound only while both were in flight; no handle leaked or freed under a request
    assert set(tight.adapters.handles) == set(tight.adapters.lru.sizes) and len(tight.adapters.lru) <= 2
    tight.close()


def choices(run) -> tuple[list[str], list[list[dict]]]:
    """Each choice's text and token log probabilities of a generation with `n` choices."""
    texts: list[str] = [""] * len(run.choices)
    logprobs: list[list[dict]] = [[] for _ in run.choices]
    for piece in run.pieces():
        texts[piece.index] += piece.text
        logprobs[piece.index] += piece.logprobs
    return texts, logprobs


def test_n_choices_are_sequences_of_the_batch_with_seeds_and_logprobs(engine, adapters, questions):  # noqa: F811
    batched = LlamaEngine(engine.base_path, engine.gguf_path, lora_dir=engine.adapters.lora_dir, threads=2,
                          n_ctx=512, slots=2)
    adapter = AdapterRef.of(adapters[1])   # hashed once, as the inference worker does at unpack
    ids = batched.chat_prompt([{"role": "user", "content": questions[0]}], batched.template_of(adapter.path))
    sampled = SamplingParams(max_new_tokens=16, temperature=1.0, seed=4294967293)   # seeds wrap past 2**32 - 2
    run = batched.stream(ids, adapter, sampled, n=3)
    texts, _ = choices(run)
    assert [choice_params(sampled, i).seed for i in range(3)] == [4294967293, 4294967294, 0]
    alone = [choices(batched.stream(ids, adapter, choice_params(sampled, i)))[0][0] for i in range(3)]
    assert texts == alone and len(set(texts)) >= 2
    assert run.completion_tokens == sum(len(c.tokens) for c in run.choices)
    assert all(r in ("stop", "length") for r in run.finish_reasons)

    greedy_params = SamplingParams(max_new_tokens=16, temperature=0)
    texts, logprobs = choices(batched.stream(ids, adapter, greedy_params, n=3, logprobs=4))
    one_text, one_logprobs = choices(batched.stream(ids, adapter, greedy_params, logprobs=4))
    assert texts == one_text * 3 and logprobs == one_logprobs * 3   # the batch changes no number
    assert "".join(e["token"] for e in logprobs[0]) == texts[0]
    for e in logprobs[0]:
        assert e["top_logprobs"][0]["token"] == e["token"] and e["top_logprobs"][0]["logprob"] == e["logprob"]
        assert sum(math.exp(t["logprob"]) for t in e["top_logprobs"]) <= 1
    assert batched.decoder.running == {}
    batched.close()
