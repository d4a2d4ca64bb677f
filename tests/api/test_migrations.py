"""The schema comes from the Alembic migrations only, and they match the SQLAlchemy models."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from tests.api.conftest import ROOT, migrate

TABLES = {"owners", "api_keys", "files", "jobs", "job_events", "checkpoints", "artifacts", "job_exports",
          "deleted_models", "alembic_version"}


def _config(url: str) -> Config:
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.set_main_option("sqlalchemy.url", url)
    return cfg


def test_migrated_schema_matches_the_models(database_url):
    command.check(_config(database_url))  # raises when autogenerate would emit any operation
    engine = sa.create_engine(database_url)
    try:
        assert set(sa.inspect(engine).get_table_names()) == TABLES
    finally:
        engine.dispose()


def test_downgrade_and_upgrade_again(tmp_path):
    url = f"sqlite:///{tmp_path / 'roundtrip.sqlite3'}"
    migrate(url)
    command.downgrade(_config(url), "base")
    engine = sa.create_engine(url)
    assert set(sa.inspect(engine).get_table_names()) == {"alembic_version"}
    engine.dispose()
    migrate(url)
