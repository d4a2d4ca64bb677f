"""The product end to end, as a user runs it: the API under uvicorn and a Celery worker as separate
processes; the official `openai` client uploads real GSM8K examples and creates a job on the real
SmolLM2-135M-Instruct (NF4, LCSB cyclic); events are polled to `succeeded`; the adapter is downloaded,
loaded with PEFT on the base model, changes the logits and lowers the loss on held-out GSM8K examples.
Once on PostgreSQL + Redis (production shape), once on the embedded default (SQLite + filesystem
broker). Bound per flow: 420 s (measured about 90 s on 2 CPU cores)."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import httpx
import pytest
import torch
from openai import OpenAI

from lcsb_core.data import build_dataset, gsm8k_to_chat, iter_batches
from lcsb_core.models.gguf_import import ensure_default_model
from lcsb_service.db import Database
from lcsb_service.keys import create_key
from tests.api.conftest import settings_env

pytestmark = [pytest.mark.integration, pytest.mark.worker]
ROOT = Path(__file__).resolve().parents[2]
GSM8K = ROOT.parent / "shared" / "data" / "gsm8k"
BOUND_S = 420.0


def gsm8k_file(path: Path, split: str, start: int, count: int) -> Path:
    assert (GSM8K / f"{split}.jsonl").is_file(), f"GSM8K missing at {GSM8K}"
    rows = (GSM8K / f"{split}.jsonl").read_text().splitlines()[start:start + count]
    path.write_text("".join(json.dumps(gsm8k_to_chat(json.loads(r))) + "\n" for r in rows))
    return path


def start_api(settings, log: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, **settings_env(settings), "LCSB_ENQUEUER": "worker.enqueue:CeleryEnqueuer"}
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "--factory", "api.main:create_app", "--host", "127.0.0.1",
                             "--port", str(port), "--log-level", "warning"], cwd=ROOT, env=env,
                            stdout=log.open("w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"the API did not start: {log.read_text()[-2000:]}")


def heldout_loss(model, tokenizer, path: Path) -> float:
    from lcsb_core.models.modules import autocast_for
    from lcsb_core.training.loss import lm_loss_sums

    data = build_dataset(path, tokenizer, max_seq_len=256, min_examples=1)
    total, targets = 0.0, 0
    model.eval()
    with torch.no_grad(), autocast_for(model):
        for batch in iter_batches(data, 4, seed=0, epoch=0, pad_token_id=tokenizer.pad_token_id, shuffle=False):
            sums = lm_loss_sums(model, batch)
            total, targets = total + float(sums.loss_sum), targets + sums.num_targets
    return total / targets


def run_flow(settings, start_worker, tmp_path: Path) -> None:
    db = Database(settings.resolved_database_url)
    with db.session() as s:
        _, key = create_key(s, settings.secret_key.get_secret_value(), "e2e-user")
    db.dispose()
    api, url = start_api(settings, tmp_path / "api.log")
    start_worker(settings)
    try:
        t0 = time.monotonic()
        client = OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)
        train = client.files.create(file=gsm8k_file(tmp_path / "train.jsonl", "train", 0, 64).open("rb"),
                                    purpose="fine-tune")
        heldout = gsm8k_file(tmp_path / "heldout.jsonl", "test", 0, 24)
        valid = client.files.create(file=heldout.open("rb"), purpose="fine-tune")
        job = client.fine_tuning.jobs.create(
            model="SmolLM2-135M-Instruct", training_file=train.id, validation_file=valid.id, seed=7,
            hyperparameters={"batch_size": 4, "n_epochs": 1},
            extra_body={"method": {"quantization": "nf4", "max_seq_len": 256, "lora": {"rank": 16, "alpha": 32},
                                   "lcsb": {"schedule": "cyclic", "k": 8}},
                        "hyperparameters": {"batch_size": 4, "n_epochs": 1, "learning_rate": 3e-4}})
        while (job := client.fine_tuning.jobs.retrieve(job.id)).status not in ("succeeded", "failed", "cancelled"):
            assert time.monotonic() - t0 < BOUND_S, f"job still {job.status} after {BOUND_S} s"
            time.sleep(1)
        messages = [e.message for e in client.fine_tuning.jobs.list_events(job.id, limit=100)]
        assert job.status == "succeeded", (job.error, messages[:10])
        assert job.trained_tokens and job.trained_tokens > 0 and job.fine_tuned_model
        r = httpx.get(f"{url}/v1/fine_tuning/jobs/{job.id}/artifacts/adapter.tar.gz",
                      headers={"Authorization": f"Bearer {key}"}, timeout=60)
        assert r.status_code == 200
        tarfile.open(fileobj=io.BytesIO(r.content)).extractall(tmp_path / "dl", filter="data")
        adapter = next((tmp_path / "dl").rglob("adapter_config.json")).parent
    finally:
        api.terminate()
        api.wait(timeout=30)

    from peft import PeftModel

    from lcsb_core.models.loading import load_base_model, load_tokenizer

    base_dir = ensure_default_model()
    tokenizer = load_tokenizer(base_dir)
    base = load_base_model(base_dir, quantization="nf4", device=torch.device("cpu"))
    before = heldout_loss(base, tokenizer, heldout)
    ids = torch.tensor([tokenizer("Natalia sold clips to 48 of her friends.")["input_ids"]])
    with torch.no_grad():
        base_logits = base(input_ids=ids).logits.float()
    tuned = PeftModel.from_pretrained(base, adapter)
    with torch.no_grad():
        tuned_logits = tuned(input_ids=ids).logits.float()
    after = heldout_loss(tuned, tokenizer, heldout)
    print(f"[e2e] held-out GSM8K loss {before:.4f} -> {after:.4f}; {time.monotonic() - t0:.0f} s")
    assert (tuned_logits - base_logits).abs().max() > 1e-2
    assert after < before - 0.02


def test_production_shape_postgresql_redis(make_settings, start_worker, tmp_path):
    base = ensure_default_model()
    run_flow(make_settings(model_dirs=[base.parent], min_examples=10), start_worker, tmp_path)


def test_embedded_default_sqlite_filesystem_broker(make_settings, start_worker, tmp_path):
    base = ensure_default_model()
    data = tmp_path / "var"
    settings = make_settings(model_dirs=[base.parent], min_examples=10, data_dir=data, storage_url=None,
                             database_url=None, broker_url="filesystem://", broker_transport_options={})
    subprocess.run([sys.executable, "-m", "alembic", "upgrade", "head"], cwd=ROOT, check=True, capture_output=True,
                   env={**os.environ, **settings_env(settings)})
    run_flow(settings, start_worker, tmp_path)
