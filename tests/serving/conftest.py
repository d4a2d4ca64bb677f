"""Fixtures of the serving tests: one world for the package with real PostgreSQL and Redis (the worker
tests' fixtures), the API under uvicorn, a training worker that trains one short real SmolLM2 job,
and an inference worker process (`python -m worker --kind inference`) serving the real SmolLM2 base.

    world.oa(world.alice)      # the official `openai` client for a tenant
    world.ft, world.ckpt       # the job's fine_tuned_model and its first checkpoint's id
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from openai import OpenAI

from lcsb_core.models.gguf_import import ensure_default_model
from lcsb_service.db import Database
from lcsb_service.devserver import start_api
from lcsb_service.keys import create_key
from lcsb_service.settings import Settings
from tests.api.conftest import SECRET, settings_env
from tests.worker.conftest import make_settings, model_dir, pg_url, redis_prefix, start_worker  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
WORKER_START_S = 90.0


class InferenceWorker:
    """`python -m worker --kind inference` with `settings` in its environment; its log in `log_path`."""

    def __init__(self, settings: Settings, log_path: Path) -> None:
        self.log_path = log_path
        env = {**os.environ, **settings_env(settings), "LCSB_LOG_LEVEL": "INFO"}
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "worker", "--kind", "inference"], cwd=ROOT, env=env,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + WORKER_START_S
        while "LCSB worker ready" not in self.text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"inference worker did not start (exit {self.proc.poll()}):\n{self.text()[-3000:]}")
            time.sleep(0.1)

    def text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()


@dataclass
class Tenant:
    name: str
    owner_id: str
    key: str


def new_tenant(settings: Settings, prefix: str) -> Tenant:
    db = Database(settings.resolved_database_url)
    try:
        with db.session() as s:
            name = f"{prefix}-{secrets.token_hex(4)}"
            row, key = create_key(s, SECRET, name)
            return Tenant(name, row.owner_id, key)
    finally:
        db.dispose()


@dataclass
class World:
    settings: Settings
    url: str
    api_pid: int
    alice: Tenant
    bob: Tenant
    inference: InferenceWorker

    def oa(self, tenant: Tenant, **kw) -> OpenAI:
        return OpenAI(base_url=f"{self.url}/v1", api_key=tenant.key, max_retries=0, timeout=kw.pop("timeout", 120),
                      **kw)


@pytest.fixture(scope="package")
def smol() -> Path:
    return ensure_default_model()


@pytest.fixture(scope="package")
def world(make_settings, smol, tmp_path_factory) -> Iterator[World]:  # noqa: F811 - the worker tests' fixture
    """The API (uvicorn, Celery enqueuer) and an inference worker on this session's PostgreSQL and Redis."""
    logs = tmp_path_factory.mktemp("serving-logs")
    settings = make_settings(model_dirs=[smol.parent], inference_queue=f"inference-{secrets.token_hex(3)}",
                             inference_max_new_tokens=64, worker_torch_threads=1, inference_start_timeout_s=240)
    proc, url = start_api(settings, log_file=logs / "api.log", LCSB_ENQUEUER="worker.enqueue:CeleryEnqueuer")
    worker = InferenceWorker(settings, logs / "inference.log")
    try:
        yield World(settings, url, proc.pid, new_tenant(settings, "alice"), new_tenant(settings, "bob"), worker)
    finally:
        worker.stop()
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@dataclass
class Trained:
    job_id: str
    ft: str            # the job's fine_tuned_model
    ckpts: list[str]   # its checkpoints' ids, earliest step first
    valid: list[dict]  # its validation rows (graded at steps 0, 2 and 4)


def valid_rows() -> list[dict]:
    """20 held-out chat rows: sums unlike the training rows' numbers, and other short questions."""
    asks = [f"What is {i} plus {i}?" for i in (21, 34, 57, 80, 93)] + [
        f"What is {a} times {b}?" for a, b in ((3, 7), (6, 8), (12, 4), (9, 9), (11, 5))] + [
        f"Name a word that rhymes with {w}." for w in ("cat", "tree", "blue", "light", "rain")] + [
        f"How many {x} are in a {y}?" for x, y in (("days", "week"), ("months", "year"), ("minutes", "hour"),
                                                  ("legs", "spider"), ("sides", "hexagon"))]
    return [{"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": "ok"}]} for q in asks]


JOB_BOUND_S = 600.0


@pytest.fixture(scope="package")
def trained(world, smol, tmp_path_factory) -> Iterator[Trained]:
    """One short real SmolLM2 job of alice's (fp32, rank 8, 4 steps at a high learning rate, a checkpoint
    and a graded evaluation of 20 validation prompts every 2 steps), trained by a training worker process,
    so its adapters answer visibly unlike the base."""
    import httpx

    from tests.worker.conftest import Worker, chat_rows

    worker = Worker(world.settings, world.settings.worker_classes[0].queue,
                    tmp_path_factory.mktemp("training") / "worker.log")
    try:
        oa = world.oa(world.alice)
        content = "".join(__import__("json").dumps(r) + "\n" for r in chat_rows(16)).encode()
        f = oa.files.create(file=("train.jsonl", content), purpose="fine-tune")
        valid = "".join(__import__("json").dumps(r) + "\n" for r in valid_rows()).encode()
        v = oa.files.create(file=("valid.jsonl", valid), purpose="fine-tune")
        body = {"model": smol.name, "training_file": f.id, "validation_file": v.id, "seed": 1, "suffix": "serve",
                "hyperparameters": {"batch_size": 2, "max_steps": 4, "learning_rate": 1e-2},
                "method": {"quantization": "fp32", "max_seq_len": 64, "lora": {"rank": 8, "alpha": 16},
                           "lcsb": {"schedule": "full"}, "save_every": 2, "eval_every": 2,
                           "eval": {"graders": [{"type": "exact_match"}], "n_samples": 20, "max_new_tokens": 16}}}
        headers = {"Authorization": f"Bearer {world.alice.key}"}
        r = httpx.post(f"{world.url}/v1/fine_tuning/jobs", json=body, headers=headers, timeout=30)
        assert r.status_code == 200, r.text
        job_id = r.json()["id"]
        deadline = time.monotonic() + JOB_BOUND_S
        while (job := oa.fine_tuning.jobs.retrieve(job_id)).status not in ("succeeded", "failed", "cancelled"):
            assert time.monotonic() < deadline, f"job {job_id} still {job.status}"
            time.sleep(1)
        assert job.status == "succeeded", job.error
        ckpts = sorted(oa.fine_tuning.jobs.checkpoints.list(job_id), key=lambda c: c.step_number)
        yield Trained(job_id, job.fine_tuned_model, [c.fine_tuned_model_checkpoint for c in ckpts], valid_rows())
    finally:
        worker.stop()
