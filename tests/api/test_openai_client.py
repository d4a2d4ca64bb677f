"""The official `openai` client (pinned in pyproject's dev extra) against the API served by uvicorn:
files, jobs (with this service's method settings), events, checkpoints, cancel, models, errors."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest
from openai import OpenAI

from tests.api.helpers import SMOL, chat_lines


@pytest.fixture
def oa(live_server, alice) -> OpenAI:
    return OpenAI(base_url=f"{live_server.url}/v1", api_key=alice.key, max_retries=0, timeout=30)


def test_files_jobs_events_cancel(oa):
    content = chat_lines(20)
    f = oa.files.create(file=("train.jsonl", content), purpose="fine-tune")
    assert f.status == "processed" and f.bytes == len(content) and f.filename == "train.jsonl"
    assert oa.files.retrieve(f.id).id == f.id
    assert f.id in [x.id for x in oa.files.list()]
    assert oa.files.content(f.id).read() == content

    job = oa.fine_tuning.jobs.create(
        model=SMOL, training_file=f.id, seed=42, suffix="oa", metadata={"client": "openai"},
        method={"type": "supervised", "supervised": {"hyperparameters": {"n_epochs": 2, "batch_size": 2}},
                "lora": {"rank": 8}, "lcsb": {"schedule": "cyclic", "k": 5}, "max_seq_len": 256},
        extra_headers={"Idempotency-Key": "openai-client-job"})
    assert job.status == "queued" and job.hyperparameters.n_epochs == 2 and job.hyperparameters.batch_size == 2
    assert job.method.type == "supervised" and job.model_extra["queue"] == "cpu-6g"
    assert job.method.model_extra["lcsb"]["layers_per_step"] == 5 and job.method.model_extra["lora"]["rank"] == 8
    again = oa.fine_tuning.jobs.create(
        model=SMOL, training_file=f.id, seed=42, suffix="oa", metadata={"client": "openai"},
        method={"type": "supervised", "supervised": {"hyperparameters": {"n_epochs": 2, "batch_size": 2}},
                "lora": {"rank": 8}, "lcsb": {"schedule": "cyclic", "k": 5}, "max_seq_len": 256},
        extra_headers={"Idempotency-Key": "openai-client-job"})
    assert again.id == job.id
    second = oa.fine_tuning.jobs.create(model=SMOL, training_file=f.id, hyperparameters={"n_epochs": 1})
    assert oa.fine_tuning.jobs.retrieve(job.id).id == job.id
    assert [j.id for j in oa.fine_tuning.jobs.list(limit=1)] == [second.id, job.id]  # auto-paging
    assert [j.id for j in oa.fine_tuning.jobs.list(metadata={"client": "openai"})] == [job.id]

    events = oa.fine_tuning.jobs.list_events(job.id, limit=2)
    assert len(events.data) == 2 and events.has_more
    messages = [e.message for e in oa.fine_tuning.jobs.list_events(job.id, limit=1)]  # auto-paging
    assert messages[-1] == f"Created fine-tuning job: {job.id}" and len(messages) == 3

    cancelled = oa.fine_tuning.jobs.cancel(job.id)
    assert cancelled.status == "cancelled"
    assert oa.fine_tuning.jobs.list_events(job.id, limit=1).data[0].message == "Fine-tuning job cancelled"
    assert oa.fine_tuning.jobs.checkpoints.list(job.id).data == []
    oa.fine_tuning.jobs.cancel(second.id)
    assert oa.files.delete(f.id).deleted is True


def test_models_and_errors(oa, live_server):
    assert SMOL in [m.id for m in oa.models.list()]
    assert oa.models.retrieve(SMOL).model_extra["num_layers"] == 30
    with pytest.raises(openai.NotFoundError) as missing:
        oa.fine_tuning.jobs.retrieve("ftjob-missing")
    assert missing.value.code == "job_not_found"
    with pytest.raises(openai.BadRequestError) as bad:
        oa.fine_tuning.jobs.create(model="gpt-4o-mini", training_file="file-x")
    assert bad.value.code == "model_not_found" and bad.value.param == "model"
    f = oa.files.create(file=("t.jsonl", chat_lines(12)), purpose="fine-tune")
    with pytest.raises(openai.UnprocessableEntityError) as big:
        oa.fine_tuning.jobs.create(model="Giant-70B", training_file=f.id)
    assert big.value.code == "insufficient_memory"
    wrong = OpenAI(base_url=f"{live_server.url}/v1", api_key="sk-lcsb-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.files.list()


HH_RLHF = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "hh-rlhf-harmless" / "train.jsonl"


def test_dpo_jobs(oa, tmp_path):
    """A DPO job on an hh-rlhf excerpt (OpenAI's preference format) in OpenAI's `method` shape, shown
    back by GET; the other method's file, beta out of range and train_on_inputs are 400s naming the field."""
    assert HH_RLHF.is_file(), f"hh-rlhf missing at {HH_RLHF} (see ../shared/data/README.md)"
    excerpt = tmp_path / "pairs.jsonl"
    excerpt.write_text("".join(HH_RLHF.read_text().splitlines(keepends=True)[:20]))
    pairs = oa.files.create(file=excerpt.open("rb"), purpose="fine-tune")
    assert pairs.status == "processed"
    chat = oa.files.create(file=("chat.jsonl", chat_lines(12)), purpose="fine-tune")
    dpo = {"type": "dpo", "dpo": {"hyperparameters": {"beta": 0.2, "n_epochs": 1}}}
    job = oa.fine_tuning.jobs.create(model=SMOL, training_file=pairs.id, method=dpo)
    assert job.method.type == "dpo" and job.method.dpo.hyperparameters.beta == 0.2
    assert job.method.dpo.hyperparameters.n_epochs == 1 and job.method.supervised is None
    got = oa.fine_tuning.jobs.retrieve(job.id)
    assert got.method.type == "dpo" and got.method.dpo.hyperparameters.beta == 0.2
    assert got.method.dpo.hyperparameters.batch_size == job.method.dpo.hyperparameters.batch_size
    cases = [
        ({"training_file": chat.id, "method": dpo}, "training_file", "is chat data; a dpo job needs preference"),
        ({"training_file": pairs.id}, "training_file", "is preference pairs; a supervised job needs"),
        ({"training_file": pairs.id, "method": {"type": "dpo", "dpo": {"hyperparameters": {"beta": 0}}}},
         "method.dpo.hyperparameters.beta", "beta"),
        ({"training_file": pairs.id, "method": {**dpo, "train_on_inputs": True}}, "method.train_on_inputs",
         "answers"),
    ]
    for body, param, fragment in cases:
        with pytest.raises(openai.BadRequestError) as bad:
            oa.fine_tuning.jobs.create(model=SMOL, **body)
        assert bad.value.param == param and fragment in bad.value.message, bad.value.message
    oa.fine_tuning.jobs.cancel(job.id)
