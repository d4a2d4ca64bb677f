"""Issue 49 item 2 through the official `openai` client, against the API and a real inference worker
serving the real SmolLM2 GGUF: `n` choices (sequences of the worker's batch; choice i seeded seed + i,
so each equals the one-choice answer of that seed, and the usage counts every choice's tokens and the
prompt once), streamed with each chunk naming its choice; greedy choices equal; `logprobs` /
`top_logprobs` in OpenAI's chat shape and the legacy completions shape, from the engine's logits
(the greedy token is the most likely one, the alternatives' probabilities sum to at most 1); out of
bounds a 400 naming the parameter."""

from __future__ import annotations

import math

import openai
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.worker]
SMOL = "SmolLM2-135M-Instruct"
ASK = [{"role": "user", "content": "Name three colours."}]
TOKENS = 10


def test_n_seeded_choices_are_each_seeds_answer_and_reproduce(world):
    oa = world.oa(world.alice)
    kw = dict(model=SMOL, messages=ASK, temperature=1.0, max_completion_tokens=TOKENS)
    r = oa.chat.completions.create(n=3, seed=11, **kw)
    assert [c.index for c in r.choices] == [0, 1, 2]
    texts = [c.message.content for c in r.choices]
    again = oa.chat.completions.create(n=3, seed=11, **kw)
    assert [c.message.content for c in again.choices] == texts and again.usage == r.usage   # reproducible
    singles = [oa.chat.completions.create(seed=11 + i, **kw) for i in range(3)]
    assert texts == [s.choices[0].message.content for s in singles]   # choice i is seed + i's answer
    assert [c.finish_reason for c in r.choices] == [s.choices[0].finish_reason for s in singles]
    assert len(set(texts)) >= 2   # sampled: the choices differ
    assert r.usage.prompt_tokens == singles[0].usage.prompt_tokens   # the prompt counted once
    assert r.usage.completion_tokens == sum(s.usage.completion_tokens for s in singles)
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens

    chunks = list(oa.chat.completions.create(n=3, seed=11, stream=True, stream_options={"include_usage": True}, **kw))
    assert len({c.id for c in chunks}) == 1
    roles = [c.choices[0].index for c in chunks if c.choices and c.choices[0].delta.role == "assistant"]
    assert sorted(roles) == [0, 1, 2]
    streamed, finishes = ["", "", ""], [None, None, None]
    for c in chunks[:-1]:
        (choice,) = c.choices   # one choice per chunk, named by its index
        streamed[choice.index] += choice.delta.content or ""
        finishes[choice.index] = choice.finish_reason or finishes[choice.index]
    assert streamed == texts and finishes == [c.finish_reason for c in r.choices]
    assert chunks[-1].choices == [] and chunks[-1].usage == r.usage


def test_greedy_choices_are_equal_and_completions_take_n(world):
    oa = world.oa(world.alice)
    r = oa.chat.completions.create(model=SMOL, messages=ASK, temperature=0, n=2, max_completion_tokens=TOKENS)
    one = oa.chat.completions.create(model=SMOL, messages=ASK, temperature=0, max_completion_tokens=TOKENS)
    assert [c.message.content for c in r.choices] == [one.choices[0].message.content] * 2
    assert r.usage.completion_tokens == 2 * one.usage.completion_tokens
    c = oa.completions.create(model=SMOL, prompt="The capital of France is", max_tokens=5, temperature=0.8, seed=3,
                              n=2)
    assert [x.index for x in c.choices] == [0, 1] and c.usage.completion_tokens == 10
    seeded = [oa.completions.create(model=SMOL, prompt="The capital of France is", max_tokens=5, temperature=0.8,
                                    seed=3 + i).choices[0].text for i in range(2)]
    assert [x.text for x in c.choices] == seeded


def test_chat_logprobs_come_from_the_engine_in_openais_shape(world):
    oa = world.oa(world.alice)
    r = oa.chat.completions.create(model=SMOL, messages=ASK, temperature=0, max_completion_tokens=TOKENS,
                                   logprobs=True, top_logprobs=5)
    choice = r.choices[0]
    content = choice.logprobs.content
    assert content and "".join(t.token for t in content) == choice.message.content
    for t in content:
        assert len(t.top_logprobs) == 5 and t.logprob <= 0
        assert t.logprob == max(a.logprob for a in t.top_logprobs) == t.top_logprobs[0].logprob   # greedy: the best
        assert t.top_logprobs[0].token == t.token and bytes(t.bytes) == t.token.encode()
        assert sum(math.exp(a.logprob) for a in t.top_logprobs) <= 1 + 1e-9
        assert [a.logprob for a in t.top_logprobs] == sorted((a.logprob for a in t.top_logprobs), reverse=True)
    plain = oa.chat.completions.create(model=SMOL, messages=ASK, temperature=0, max_completion_tokens=TOKENS)
    assert plain.choices[0].logprobs is None and plain.choices[0].message.content == choice.message.content
    only = oa.chat.completions.create(model=SMOL, messages=ASK, temperature=0, max_completion_tokens=TOKENS,
                                      logprobs=True)
    assert [(t.token, t.logprob, t.top_logprobs) for t in only.choices[0].logprobs.content] == \
        [(t.token, t.logprob, []) for t in content]

    streamed = []
    for chunk in oa.chat.completions.create(model=SMOL, messages=ASK, temperature=0, max_completion_tokens=TOKENS,
                                            logprobs=True, top_logprobs=5, stream=True):
        if chunk.choices and chunk.choices[0].logprobs is not None:
            streamed += chunk.choices[0].logprobs.content
    assert [(t.token, t.logprob) for t in streamed] == [(t.token, t.logprob) for t in content]

    with pytest.raises(openai.BadRequestError) as err:
        oa.chat.completions.create(model=SMOL, messages=ASK, logprobs=True, top_logprobs=21)
    assert err.value.body["param"] == "top_logprobs" and err.value.body["code"] == "invalid_value"


def test_completions_logprobs_in_the_legacy_shape(world):
    oa = world.oa(world.alice)
    prompt = "The capital of France is"
    r = oa.completions.create(model=SMOL, prompt=prompt, max_tokens=6, temperature=0, logprobs=3)
    lp = r.choices[0].logprobs
    assert "".join(lp.tokens) == r.choices[0].text and len(lp.tokens) == len(lp.token_logprobs) == 6
    assert lp.text_offset[0] == len(prompt)   # offsets count from the prompt's start
    assert lp.text_offset == [len(prompt) + len("".join(lp.tokens[:k])) for k in range(6)]
    for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=True):
        assert len(top) == 3 and top[token] == logprob == max(top.values())
        assert sum(math.exp(v) for v in top.values()) <= 1 + 1e-9
    with pytest.raises(openai.BadRequestError) as err:
        oa.completions.create(model=SMOL, prompt=prompt, max_tokens=2, logprobs=6)
    assert err.value.body["param"] == "logprobs"
