"""The service on this machine, outside a deployment: a migrated database, a fresh PostgreSQL database
that is dropped afterwards, and the API under uvicorn in a child process. What the tests' fixtures and
bench/api_load.py share (the embedded-default scripts do the same in shell: scripts/main_job.sh).
Needs a checkout (alembic.ini and the migrations beside the packages), not an installed wheel."""

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
from pathlib import Path

import httpx
import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from lcsb_service.settings import Settings

ROOT = Path(__file__).resolve().parents[1]


def migrate(url: str) -> None:
    """`alembic upgrade head` on the database at `url` (the schema comes from the migrations only)."""
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.set_main_option("sqlalchemy.url", url)
    command.upgrade(cfg, "head")


@contextmanager
def fresh_postgres_database(admin_url: str, prefix: str) -> Iterator[str]:
    """Create `<prefix>_<random hex>` on the PostgreSQL server of `admin_url` (a connection allowed to
    CREATE DATABASE), migrate it, yield its URL and drop it on exit (`WITH (FORCE)`). Raises
    ConnectionError naming `admin_url` when the server cannot be reached."""
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    name = f"{prefix}_{secrets.token_hex(6)}"
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    except sa.exc.OperationalError as exc:
        admin.dispose()
        raise ConnectionError(f"PostgreSQL not reachable at {admin_url}: {exc.orig}") from exc
    url = sa.make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    try:
        migrate(url)
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def settings_env(settings: Settings) -> dict[str, str]:
    """The LCSB_* environment that rebuilds `settings` in another process (lists and mappings as JSON;
    the secret key in clear)."""
    env = {}
    for name, value in settings.model_dump(mode="json").items():
        if value is not None:
            env[f"LCSB_{name.upper()}"] = value if isinstance(value, str) else json.dumps(value)
    env["LCSB_SECRET_KEY"] = settings.secret_key.get_secret_value()
    return env


def start_api(settings: Settings, *, log_level: str = "warning", log_file: Path | None = None,
              **env: str) -> tuple[subprocess.Popen, str]:
    """Start `uvicorn --factory api.main:create_app` in a child process with `settings` (plus `env`
    overrides) on a free port of 127.0.0.1; wait until `/healthz` answers 200. Returns (process, base
    URL). `log_level` "info" turns uvicorn's access log on; `log_file` receives the process's stdout and
    stderr. Raises RuntimeError (the process killed) when it does not start within 60 s."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    full_env = {**os.environ, **settings_env(settings), **env}
    out = log_file.open("ab") if log_file is not None else None
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "--factory", "api.main:create_app", "--host",
                             "127.0.0.1", "--port", str(port), "--log-level", log_level], cwd=ROOT, env=full_env,
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
