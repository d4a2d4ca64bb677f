"""The embedded default chats without Redis: SQLite, kombu's filesystem broker, local storage and the
file token streams (`lcsb_service.streams.FileStreams`); the API under uvicorn and an inference
worker process, the official `openai` client streaming an answer from the real SmolLM2 base."""

from __future__ import annotations

import subprocess

import pytest
from openai import OpenAI

from lcsb_service.devserver import start_api
from tests.api.conftest import migrate
from tests.serving.conftest import InferenceWorker, new_tenant

pytestmark = [pytest.mark.integration, pytest.mark.worker]


def test_the_embedded_default_chats_without_redis(make_settings, smol, tmp_path):
    url = f"sqlite:///{tmp_path / 'lcsb.sqlite3'}"
    migrate(url)
    settings = make_settings(database_url=url, broker_url="filesystem://", broker_transport_options={},
                             data_dir=tmp_path / "var", storage_url=None, model_dirs=[smol.parent],
                             inference_start_timeout_s=240)
    proc, api_url = start_api(settings, log_file=tmp_path / "api.log", LCSB_ENQUEUER="worker.enqueue:CeleryEnqueuer")
    worker = InferenceWorker(settings, tmp_path / "inference.log")
    try:
        oa = OpenAI(base_url=f"{api_url}/v1", api_key=new_tenant(settings, "carol").key, max_retries=0, timeout=240)
        ask = [{"role": "user", "content": "What is 2+2? Answer briefly."}]
        chunks = list(oa.chat.completions.create(model="SmolLM2-135M-Instruct", messages=ask, temperature=0,
                                                 max_tokens=8, stream=True, stream_options={"include_usage": True}))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text and chunks[-1].usage.completion_tokens <= 8
        whole = oa.chat.completions.create(model="SmolLM2-135M-Instruct", messages=ask, temperature=0, max_tokens=8)
        assert whole.choices[0].message.content == text
        assert "filesystem" in worker.text()
        assert not list((settings.data_dir / "streams").glob("*.jsonl"))   # the API removed the streams it read
    finally:
        worker.stop()
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
