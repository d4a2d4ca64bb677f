"""A model trained without a chat template is served by `/v1/completions` only (issue 48): a job that trained
on prompt/completion data learnt the raw prompt, so chat with its `ft:` model or a checkpoint is a 400
`model_has_no_chat_template` naming the model, answered by the API before a worker is asked (as for
Gemma-3-270M's base), and by the inference worker too when a payload reaches it. Its completions are
accepted and sent to the workers, whose prompt is the raw one training read (tests/core/test_one_template.py);
a chat job's model still chats. The fact comes from the job record's data report, which the training worker
writes from the checked training file (here the real report of the uploaded file). On PostgreSQL and SQLite."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from lcsb_core.data import validate_file
from lcsb_service.chat import GenerationRequest, Message
from lcsb_service.enqueue import RecordingEnqueuer
from lcsb_service.ids import new_id
from lcsb_service.job_records import record_data_report
from lcsb_service.streams import token_streams
from tests.api.helpers import assert_error, fake_run, job_ok, publish_outputs, upload_ok

PROMPT = "Question: What is 7 plus 7?\nAnswer:"
ASK = [{"role": "user", "content": "What is 7 plus 7?"}]


def _trained_model(app, client, tenant, tmp_path, rows: list[dict], suffix: str) -> str:
    """A succeeded job on `rows` with its data report recorded as the training worker records it."""
    data = tmp_path / f"{suffix}.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    upload = upload_ok(client, tenant, data.read_bytes())
    job = job_ok(client, tenant, upload["id"], suffix=suffix, hyperparameters={"n_epochs": 1})
    report = {**validate_file(data).to_dict(), "path": upload["filename"], "file_id": upload["id"]}
    with app.state.db.session() as s:
        record_data_report(s, job["id"], {"training_file": report})
    return publish_outputs(app, job, tenant.name, fake_run(tmp_path / suffix), finish=True)


@pytest.fixture
def pc_model(app, client, alice, tmp_path) -> str:
    rows = [{"prompt": f"Question: What is {i} plus {i}?\nAnswer:", "completion": f" {2 * i}"} for i in range(12)]
    return _trained_model(app, client, alice, tmp_path, rows, "pc")


def test_chat_with_a_prompt_completion_model_is_refused_naming_it(client, alice, pc_model):
    for model in (pc_model, f"{pc_model}:ckpt-step-2"):
        r = client.post("/v1/chat/completions", headers=alice.headers, json={"model": model, "messages": ASK})
        err = assert_error(r, 400, "model_has_no_chat_template", "model")
        assert repr(model) in err["message"] and "prompt/completion" in err["message"], err
        assert "/v1/completions" in err["message"]


def test_its_completions_go_to_a_worker_with_the_raw_prompt_and_a_chat_model_still_chats(
        settings, app, client, alice, pc_model, tmp_path):
    chat_rows = [{"messages": [{"role": "user", "content": f"What is {i} + {i}?"},
                               {"role": "assistant", "content": str(2 * i)}]} for i in range(12)]
    chat_model = _trained_model(app, client, alice, tmp_path, chat_rows, "chat")
    enqueuer = RecordingEnqueuer()
    quick = create_app(settings.model_copy(update={"inference_start_timeout_s": 0.3}), enqueuer=enqueuer)
    try:
        with TestClient(quick) as c:
            r = c.post("/v1/completions", headers=alice.headers, json={"model": pc_model, "prompt": PROMPT,
                                                                        "max_tokens": 2})
            assert_error(r, 503, "inference_start_timeout")   # accepted and sent: no worker runs here
            r = c.post("/v1/chat/completions", headers=alice.headers, json={"model": chat_model, "messages": ASK})
            assert_error(r, 503, "inference_start_timeout")
    finally:
        quick.state.db.dispose()
    sent = [arg for task, arg, _ in enqueuer.sent if task == "lcsb.generate"]
    assert len(sent) == 2


def test_the_inference_worker_refuses_such_a_chat_payload_before_loading_a_model(settings, app, alice, pc_model):
    from worker.context import WorkerContext
    from worker.inference import serving

    payload = GenerationRequest(id=new_id("gen"), owner_id=alice.owner_id, model=pc_model,
                                messages=[Message(role="user", content="Hi")], max_new_tokens=4,
                                max_tokens_param="max_completion_tokens")
    token_streams(settings).put_request(payload.id, payload.model_dump_json())
    ctx = WorkerContext(settings=settings, db=app.state.db, storage=app.state.storage, app=None)
    loaded = set(serving._engines)
    serving.serve(ctx, payload.id)
    out = settings.data_dir / "streams" / f"{payload.id}.out.jsonl"   # the file streams of the embedded default
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["t"], r["status"], r["code"], r["param"]) for r in records] == [
        ("error", 400, "model_has_no_chat_template", "model")]
    assert repr(pc_model) in records[0]["message"]
    assert set(serving._engines) == loaded   # refused before any engine or adapter loads
