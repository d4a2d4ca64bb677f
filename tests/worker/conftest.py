"""Fixtures of the worker tests: real PostgreSQL (a fresh migrated database per session), real Redis
(keys under a random `global_keyprefix`, removed at the end), real worker processes (`python -m
worker`, each with its own settings in the environment), the API in-process (TestClient, sending jobs
with the Celery enqueuer), and tiny base models that use SmolLM2's tokenizer (a NaN one too).

Times: heartbeat every 0.5 s, lost after 4 s, reaper every 0.5 s; so a lost job must end within
LOST_BOUND_S = 4 + 0.5 + slack.
"""

from __future__ import annotations

import io
import json
import os
import secrets
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient
from safetensors.torch import load

from api.main import create_app
from lcsb_core.models.tiny import TINY, TINY_NAN, build_tiny_models  # noqa: F401 - TINY_NAN re-exported to the tests
from lcsb_service.keys import create_key
from lcsb_service.settings import Settings, WorkerClass
from lcsb_service.tasks import WorkerKind
from tests.api.conftest import SECRET, fresh_postgres_database, settings_env

ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = os.environ.get("LCSB_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
HEARTBEAT_S, HEARTBEAT_TIMEOUT_S, REAPER_S = 0.5, 4.0, 0.5
LOST_BOUND_S = HEARTBEAT_TIMEOUT_S + REAPER_S + 3.0
WORKER_START_S = 60.0


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    with fresh_postgres_database("lcsb_worker") as url:
        yield url


@pytest.fixture(scope="session")
def redis_prefix() -> Iterator[str]:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        pytest.fail(f"Redis not reachable at {REDIS_URL}: {exc}")
    prefix = f"lcsbtest-{secrets.token_hex(4)}:"
    yield prefix
    for key in client.scan_iter(match=f"{prefix}*"):
        client.delete(key)


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory) -> Path:
    """The tiny models of `build_tiny_models`."""
    return build_tiny_models(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="session")
def make_settings(pg_url, redis_prefix, model_dir, tmp_path_factory):
    """Settings for one test world: this session's database, Redis prefix and models; `**over` on top."""
    data = tmp_path_factory.mktemp("service")

    def make(**over) -> Settings:
        base = dict(environment="test", secret_key=SECRET, database_url=pg_url, data_dir=data,
                    storage_url=str(data / "storage"), model_dirs=[model_dir], broker_url=REDIS_URL,
                    broker_transport_options={"global_keyprefix": redis_prefix}, min_examples=2,
                    worker_classes=[WorkerClass(queue=f"cpu-small-{secrets.token_hex(3)}", memory_mib=4096)],
                    heartbeat_interval_s=HEARTBEAT_S, heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S,
                    reaper_interval_s=REAPER_S, worker_torch_threads=1)  # up to 2 workers train at once
        return Settings(**{**base, **over})

    return make


class Worker:
    """A `python -m worker --kind <kind>` process with `settings` in its environment (and `extra_env`);
    its log in `log_path`."""

    def __init__(self, settings: Settings, queue: str, log_path: Path, kind: WorkerKind = WorkerKind.TRAINING,
                 extra_env: dict[str, str] | None = None) -> None:
        self.queue, self.log_path = queue, log_path
        env = {**os.environ, **settings_env(settings), "LCSB_WORKER_QUEUE": queue, "LCSB_LOG_LEVEL": "INFO",
               **(extra_env or {})}
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "worker", "--kind", kind.value], cwd=ROOT, env=env,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + WORKER_START_S
        while "LCSB worker ready" not in self.text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"worker did not start (exit {self.proc.poll()}):\n{self.text()[-3000:]}")
            time.sleep(0.1)

    @property
    def name(self) -> str:
        return f"{self.queue}-{self.proc.pid}@"

    def text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        """Cold shutdown (SIGQUIT: does not wait for a running job), then SIGKILL if needed."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()


@pytest.fixture
def start_worker(tmp_path) -> Iterator:
    """start_worker(settings, queue=None, kind=training, extra_env=None) -> Worker; all are stopped at the
    end of the test."""
    started: list[Worker] = []

    def start(settings: Settings, queue: str | None = None, kind: WorkerKind = WorkerKind.TRAINING,
              extra_env: dict[str, str] | None = None) -> Worker:
        w = Worker(settings, queue or settings.worker_classes[0].queue, tmp_path / f"worker-{len(started)}.log",
                   kind, extra_env)
        started.append(w)
        return w

    yield start
    for w in started:
        w.stop()


class Service:
    """The API in-process, sending jobs to Redis with the Celery enqueuer, and one tenant's key."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.app = create_app(settings)
        self.client = TestClient(self.app)
        with self.app.state.db.session() as s:
            _, key = create_key(s, SECRET, f"tester-{secrets.token_hex(4)}")
        self.headers = {"Authorization": f"Bearer {key}"}

    def upload(self, rows: list[dict] | bytes, filename: str = "train.jsonl") -> str:
        content = rows if isinstance(rows, bytes) else "".join(json.dumps(r) + "\n" for r in rows).encode()
        r = self.client.post("/v1/files", headers=self.headers, data={"purpose": "fine-tune"},
                             files={"file": (filename, content)})
        assert r.status_code == 200 and r.json()["status"] == "processed", r.text
        return r.json()["id"]

    def create_job(self, file_id: str | None = None, model: str = TINY, **body) -> dict:
        file_id = file_id or self.upload(chat_rows(12))
        method = {"quantization": "fp32", "max_seq_len": 64, "lora": {"rank": 2, "alpha": 4},
                  "lcsb": {"schedule": "cyclic", "k": 1},
                  **body.pop("method", {})}
        hp = {"batch_size": 2, "n_epochs": 1, "learning_rate": 1e-3, **body.pop("hyperparameters", {})}
        r = self.client.post("/v1/fine_tuning/jobs", headers=self.headers,
                             json={"model": model, "training_file": file_id, "seed": 1, "method": method,
                                   "hyperparameters": hp, **body})
        assert r.status_code == 200, r.text
        return r.json()

    def job(self, job_id: str) -> dict:
        r = self.client.get(f"/v1/fine_tuning/jobs/{job_id}", headers=self.headers)
        assert r.status_code == 200, r.text
        return r.json()

    def events(self, job_id: str) -> list[dict]:
        """All events, oldest first."""
        events, after = [], ""
        while True:
            r = self.client.get(f"/v1/fine_tuning/jobs/{job_id}/events?limit=100{after}", headers=self.headers)
            assert r.status_code == 200, r.text
            events += r.json()["data"]
            if not r.json()["has_more"]:
                return list(reversed(events))
            after = f"&after={events[-1]['id']}"

    def wait(self, job_id: str, statuses: set[str], timeout_s: float, *, step: int | None = None) -> dict:
        """Poll until the job's status is in `statuses` (and, with `step`, it completed that many steps);
        fails after `timeout_s` with the job and its events."""
        deadline = time.monotonic() + timeout_s
        while True:
            job = self.job(job_id)
            if job["status"] in statuses and (step is None or (job["progress"]["steps_completed"] or 0) >= step):
                return job
            if time.monotonic() > deadline:
                pytest.fail(f"job {job_id} not {statuses} within {timeout_s} s: {job['status']}, "
                            f"error {job.get('error')}, events {[e['message'] for e in self.events(job_id)]}")
            time.sleep(0.1)

    def close(self) -> None:
        self.client.close()
        self.app.state.db.dispose()


@pytest.fixture
def make_service() -> Iterator:
    made: list[Service] = []

    def make(settings: Settings) -> Service:
        made.append(Service(settings))
        return made[-1]

    yield make
    for s in made:
        s.close()


def safetensors_of(archive: bytes) -> dict:
    """The tensors of the adapter in a downloaded adapter .tar.gz (the final adapter or a checkpoint's)."""
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("adapter_model.safetensors"))
        data = tar.extractfile(member)
        assert data is not None
        return load(data.read())


def chat_rows(n: int, answer_words: int = 6) -> list[dict]:
    return [{"messages": [{"role": "user", "content": f"What is {i} plus {i}?"},
                          {"role": "assistant", "content": f"{2 * i} " + "because numbers add " * answer_words}]}
            for i in range(n)]


LONG_ROWS = 120  # x 100 epochs / batch 2 = 6,000 steps: minutes even on a fast quiet CPU, where the service's
#                  12-row default (600 steps) finished in 27 s, inside the time-limit test's 30 s


def create_long_job(service, method: dict | None = None) -> dict:
    """A job that cannot finish within any bound these tests wait for: 100 epochs of `LONG_ROWS` rows of the
    service's default job, with `method` fields added (e.g. `{"save_every": 3}`). Returns the created job."""
    return service.create_job(service.upload(chat_rows(LONG_ROWS)), hyperparameters={"n_epochs": 100},
                              method=method or {})


def create_memory_hog(service, model: str) -> dict:
    """A job that needs far more than a 1,200 MiB cap: 16 rows of 400-word text through SmolLM2-135M NF4
    (`model`, the name under which the service's `model_dirs` hold it) at 4 x 512 tokens, about 2 GiB.
    The tiny model cannot be the hog: with the chunked LM head, on by default, its 8 x 512 tokens peak at
    about 570 MiB. Returns the created job."""
    text = service.upload([{"text": " ".join(f"word{i * j}" for j in range(400))} for i in range(16)])
    return service.create_job(text, model=model, hyperparameters={"batch_size": 4},
                              method={"quantization": "nf4", "max_seq_len": 512,
                                      "lcsb": {"schedule": "topfull", "fraction": 0.25},
                                      "lora": {"rank": 8, "alpha": 16}})
