"""Fixtures of the service tests: a fresh database per test session and backend, migrated with
`alembic upgrade head` (PostgreSQL: `CREATE DATABASE lcsb_test_<random>`, dropped at the end; SQLite: a
temporary file), the app on it, and a new owner with an API key per test (tests never share rows).

Backends: `LCSB_TEST_BACKENDS` (default `postgresql,sqlite`); PostgreSQL from `LCSB_TEST_POSTGRES_URL`
(default `postgresql+psycopg://postgres@127.0.0.1:5432/test`, an admin connection). Every test that uses
the database runs once per backend. An unreachable PostgreSQL fails the run (drop it from
`LCSB_TEST_BACKENDS` deliberately instead).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from lcsb_service import devserver
from lcsb_service.devserver import migrate, settings_env, start_api  # noqa: F401 - re-exported to the tests
from lcsb_service.enqueue import RecordingEnqueuer
from lcsb_service.keys import create_key
from lcsb_service.settings import Settings, WorkerClass
from tests.api.helpers import GIANT_CONFIG, SMOL_CONFIG

ROOT = Path(__file__).resolve().parents[2]
PG_ADMIN_URL = os.environ.get("LCSB_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
BACKENDS = [b.strip() for b in os.environ.get("LCSB_TEST_BACKENDS", "postgresql,sqlite").split(",") if b.strip()]
SECRET = "test-secret-" + "x" * 20


@contextmanager
def fresh_postgres_database(prefix: str) -> Iterator[str]:
    """`lcsb_service.devserver.fresh_postgres_database` on PG_ADMIN_URL; an unreachable server fails the
    test run (no silent skip)."""
    try:
        with devserver.fresh_postgres_database(PG_ADMIN_URL, prefix) as url:
            yield url
    except ConnectionError as exc:
        pytest.fail(f"{exc} (start it, or set LCSB_TEST_BACKENDS=sqlite to run without it)")


@pytest.fixture(scope="session", params=BACKENDS)
def database_url(request, tmp_path_factory) -> Iterator[str]:
    """A fresh, migrated database for this test session and backend."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('sqlite') / 'lcsb.sqlite3'}"
        migrate(url)
        yield url
        return
    with fresh_postgres_database("lcsb_test") as url:
        yield url


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory) -> Path:
    """Base models for the catalog: SmolLM2-135M's config, and a 70B-class config no worker can hold."""
    root = tmp_path_factory.mktemp("models")
    for name, config in (("SmolLM2-135M-Instruct", SMOL_CONFIG), ("Giant-70B", GIANT_CONFIG)):
        folder = root / name
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(config))
        (folder / "tokenizer.json").write_text("{}")
        (folder / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
        (folder / "model.safetensors").write_bytes(b"\0" * 1024)
    return root


@pytest.fixture(scope="session")
def settings(database_url, model_dir, tmp_path_factory) -> Settings:
    tmp = tmp_path_factory.mktemp("service")
    return Settings(environment="test", secret_key=SECRET, database_url=database_url, data_dir=tmp,
                    storage_url=str(tmp / "storage"), model_dirs=[model_dir], max_upload_bytes=8 * 2**20,
                    broker_url="memory://", sse_poll_interval_s=0.05,
                    worker_classes=[WorkerClass(queue="cpu-6g", memory_mib=6144),
                                    WorkerClass(queue="cpu-32g", memory_mib=32768)])


@pytest.fixture(scope="session")
def app(settings):
    app = create_app(settings, enqueuer=RecordingEnqueuer())
    yield app
    app.state.db.dispose()


@pytest.fixture(scope="session")
def client(app) -> Iterator[TestClient]:
    with TestClient(app) as c:
        yield c


@dataclass
class Tenant:
    """An owner with one API key; `headers` authenticate as them."""

    name: str
    owner_id: str
    key: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


def new_tenant(app, prefix: str) -> Tenant:
    name = f"{prefix}-{secrets.token_hex(4)}"
    with app.state.db.session() as s:
        row, key = create_key(s, app.state.settings.secret_key.get_secret_value(), name)
        return Tenant(name=name, owner_id=row.owner_id, key=key)


@pytest.fixture
def alice(app) -> Tenant:
    return new_tenant(app, "alice")


@pytest.fixture
def bob(app) -> Tenant:
    return new_tenant(app, "bob")


@dataclass
class LiveServer:
    """The API under uvicorn in a child process (same database and storage as `app`)."""

    url: str
    pid: int


@contextmanager
def serving_api(settings: Settings, *, log_level: str = "warning", log_file: Path | None = None,
                **env: str) -> Iterator[LiveServer]:
    """`start_api`, yielding the LiveServer; on exit the process is terminated (killed after 10 s)."""
    proc, url = start_api(settings, log_level=log_level, log_file=log_file, **env)
    try:
        yield LiveServer(url=url, pid=proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="session")
def live_server(settings) -> Iterator[LiveServer]:
    with serving_api(settings, LCSB_ENQUEUER="lcsb_service.enqueue:LoggingEnqueuer") as server:
        yield server
