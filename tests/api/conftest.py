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
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from fastapi.testclient import TestClient

from api.main import create_app
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
    """Create `<prefix>_<random>` on the PostgreSQL server at PG_ADMIN_URL, migrate it, yield its URL and
    drop it afterwards. An unreachable server fails the test run (no silent skip)."""
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"{prefix}_{secrets.token_hex(6)}"
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    except sa.exc.OperationalError as exc:
        admin.dispose()
        pytest.fail(f"PostgreSQL not reachable at {PG_ADMIN_URL}: {exc.orig} (start it, or set "
                    "LCSB_TEST_BACKENDS=sqlite to run without it)")
    url = sa.make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    try:
        migrate(url)
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def migrate(url: str) -> None:
    """`alembic upgrade head` on `url` (the schema comes from the migrations only)."""
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.set_main_option("sqlalchemy.url", url)
    command.upgrade(cfg, "head")


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


def settings_env(settings: Settings) -> dict[str, str]:
    """The LCSB_* environment that rebuilds `settings` in another process."""
    env = {}
    for name, value in settings.model_dump(mode="json").items():
        if value is not None:
            env[f"LCSB_{name.upper()}"] = value if isinstance(value, str) else json.dumps(value)
    env["LCSB_SECRET_KEY"] = settings.secret_key.get_secret_value()
    return env


def start_api(settings: Settings, *, log_level: str = "warning", log_file: Path | None = None,
              **env: str) -> tuple[subprocess.Popen, str]:
    """Start `uvicorn --factory api.main:create_app` in a child process with `settings` (plus `env`
    overrides) on a free port; wait until `/healthz` answers 200. Returns (process, base URL).
    `log_level` "info" turns uvicorn's access log on; `log_file` receives the process's stdout and stderr.
    Raises RuntimeError (the process killed) when it does not start within 60 s."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, **settings_env(settings), **env}
    out = log_file.open("ab") if log_file is not None else None
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "--factory", "api.main:create_app", "--host",
                             "127.0.0.1", "--port", str(port), "--log-level", log_level], cwd=ROOT, env=env,
                            stdout=out, stderr=subprocess.STDOUT if out else None)
    if out is not None:
        out.close()  # the child holds its own descriptor
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"uvicorn did not start (exit code {proc.poll()})")
        time.sleep(0.1)


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
