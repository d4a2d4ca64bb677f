"""Served == graded (issue 46): for a real SmolLM2 job trained by a training worker, the greedy answer
its graded evaluation wrote for each held-out prompt (`eval_samples/step-N.jsonl`, answered on the
serving engine in one batch) equals, text and token count, the answer `/v1/chat/completions` gives an
inference worker for that prompt with `temperature: 0` and the same token limit: for the base model
(step 0), the checkpoint (step 2) and the final model (step 4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def graded_rows(world, job_id: str, step: int) -> list[dict]:
    """The rows of the job's evaluation after `step` steps, from the training worker's run folder."""
    found = [p for p in Path(world.settings.data_dir).rglob(f"step-{step:06d}.jsonl")
             if job_id in str(p) and p.parent.name == "eval_samples"]
    assert len(found) == 1, found
    return [json.loads(line) for line in found[0].read_text().splitlines()]


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
