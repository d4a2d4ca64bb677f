"""Fixtures of the client tests: the `lcsb` command (typer's CliRunner, in this process) against the API
under uvicorn in a child process, on a fresh migrated database. The database, settings, app, live server
and tenant fixtures are those of tests/api (imported, so this folder gets its own database and server).

Tests that use the server run on one backend, PostgreSQL (SQLite when `LCSB_TEST_BACKENDS` leaves
PostgreSQL out): mark their module with `pytestmark = ONE_BACKEND`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from typer.testing import CliRunner, Result

from lcsb_client.main import app as lcsb_app
from lcsb_client.service import Service
from tests.api.conftest import BACKENDS, alice, app, database_url, live_server, model_dir, settings  # noqa: F401

BACKEND = "postgresql" if "postgresql" in BACKENDS else BACKENDS[0]
ONE_BACKEND = pytest.mark.parametrize("database_url", [BACKEND], indirect=True)


@pytest.fixture
def base_url(live_server) -> str:  # noqa: F811
    return f"{live_server.url}/v1"


@pytest.fixture
def lcsb(base_url, alice) -> Callable[..., Result]:  # noqa: F811
    """Run `lcsb <args>` as alice against the live server; returns typer's Result (`exit_code`,
    `stdout`, `stderr`). Wide terminal so tables and the progress bar are not cut."""
    runner = CliRunner()
    env = {"LCSB_BASE_URL": base_url, "LCSB_API_KEY": alice.key, "COLUMNS": "200"}

    def run(*args: str, **env_overrides: str) -> Result:
        return runner.invoke(lcsb_app, [str(a) for a in args], env={**env, **env_overrides})

    return run


@pytest.fixture
def svc(base_url, alice) -> Iterator[Service]:  # noqa: F811
    """The client's Service as alice (to set up files and jobs directly)."""
    with Service(base_url, alice.key, max_retries=0) as service:
        yield service
