"""Alembic environment. The URL comes from, in order: `-x url=...`, the config's `sqlalchemy.url`
(tests set it), or the service settings (`LCSB_DATABASE_URL`, default SQLite under `LCSB_DATA_DIR`)."""

from __future__ import annotations

from alembic import context

from lcsb_service.db import make_engine
from lcsb_service.models import Base

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option("sqlalchemy.url")
    if url:
        return url
    from lcsb_service.settings import Settings

    return Settings().resolved_database_url


def run_migrations_offline() -> None:
    url = _url()
    context.configure(url=url, target_metadata=target_metadata, literal_binds=True,
                      render_as_batch=url.startswith("sqlite"))
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = make_engine(_url())
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=target_metadata,
                          render_as_batch=connection.dialect.name == "sqlite")
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
