"""Many users at once on one inference worker (issue 49), through the official `openai` client: the
worker takes `inference_max_sequences` (4) requests at once and its llama.cpp engine decodes them
together; 12 concurrent greedy streams over the base, a checkpoint and a fine-tuned model (more than
its slots, so some queue) all complete with exactly the answer each gets alone, while one more client
that hangs up after two chunks frees its sequence without disturbing the others."""

from __future__ import annotations

import threading

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.worker]
TOKENS = 24


def test_concurrent_streams_over_three_adapters_answer_as_alone(world, trained, smol):
    oa = world.oa(world.alice, timeout=600)
    models = [smol.name, trained.ckpts[0], trained.ft]
    asks = [row["messages"][:1] for row in trained.valid[:4]]
    requests = [(m, a) for a in range(len(asks)) for m in models]   # 12, adapters interleaved

    def alone(model: str, ask: list[dict]) -> str:
        r = oa.chat.completions.create(model=model, messages=ask, temperature=0, max_completion_tokens=TOKENS)
        return str(r.choices[0].message.content)

    expected = [alone(m, asks[a]) for m, a in requests]
    got: list[str | None] = [None] * len(requests)
    finishes: list[str | None] = [None] * len(requests)
    errors: list[BaseException] = []
    start = threading.Barrier(len(requests) + 1)

    def stream(i: int, model: str, ask: list[dict]) -> None:
        try:
            start.wait()
            parts = []
            for chunk in oa.chat.completions.create(model=model, messages=ask, temperature=0, stream=True,
                                                    max_completion_tokens=TOKENS):
                if chunk.choices:
                    parts.append(chunk.choices[0].delta.content or "")
                    finishes[i] = chunk.choices[0].finish_reason or finishes[i]
            got[i] = "".join(parts)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(exc)

    def hang_up() -> None:
        start.wait()
        with oa.chat.completions.create(model=trained.ft, messages=asks[0], temperature=0, stream=True,
                                        max_completion_tokens=64) as s:
            for n, _ in enumerate(s):
                if n >= 2:
                    break   # the client goes away mid-answer

    threads = [threading.Thread(target=stream, args=(i, m, asks[a])) for i, (m, a) in enumerate(requests)]
    threads.append(threading.Thread(target=hang_up))
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors, errors
    assert got == expected
    assert all(f in ("stop", "length") for f in finishes)
    assert len(set(expected)) >= 3   # the three models answer differently: the adapters were really used
    assert "4 sequences of" in world.inference.text()   # the engine's slots (the default inference_max_sequences)
