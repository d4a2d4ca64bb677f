"""Served == graded (issue 46): for a real SmolLM2 job trained by a training worker, the greedy answer
its graded evaluation wrote for each held-out prompt (the job's `eval_samples/step-N.jsonl` artifact,
answered on the serving engine in one batch) equals, text and token count, the answer `/v1/chat/completions` gives an
inference worker for that prompt with `temperature: 0` and the same token limit: for the base model
(step 0), the checkpoint (step 2) and the final model (step 4)."""

from __future__ import annotations

import json

import httpx
import pytest

pytestmark = pytest.mark.integration


def graded_rows(world, job_id: str, step: int) -> list[dict]:
    """The rows of the job's evaluation after `step` steps: its `eval_samples/step-<N>.jsonl` artifact."""
    r = httpx.get(f"{world.url}/v1/fine_tuning/jobs/{job_id}/artifacts/eval_samples/step-{step:06d}.jsonl",
                  headers={"Authorization": f"Bearer {world.alice.key}"}, timeout=30)
    assert r.status_code == 200, r.text
    return [json.loads(line) for line in r.text.splitlines()]


def test_the_served_answer_is_the_graded_answer_token_for_token(world, trained, smol):
    oa = world.oa(world.alice)
    models = {0: smol.name, 2: trained.ckpts[0], 4: trained.ft}
    compared, distinct = 0, set()
    for step, model in models.items():
        rows = graded_rows(world, trained.job_id, step)
        assert len(rows) == 20 and all(r["engine"] == "llama.cpp" for r in rows)
        for row in rows:
            messages = trained.valid[row["line"] - 1]["messages"][:-1]
            reply = oa.chat.completions.create(model=model, messages=messages, temperature=0, max_tokens=16)
            assert reply.choices[0].message.content == row["answer"], (step, row["line"])
            assert reply.usage.completion_tokens == row["answer_tokens"], (step, row["line"])
            compared += 1
            distinct.add((row["line"], row["answer"]))
    assert compared == 60
    assert len(distinct) > 20   # the three models do not all answer alike: the comparison covers different adapters
