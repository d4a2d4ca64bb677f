"""The service pieces the serving benchmarks share: a migrated database with an API key."""

from __future__ import annotations

from lcsb_service.settings import Settings


def migrated_with_key(settings: Settings, name: str = "bench") -> str:
    """Migrate `settings`' database to the newest revision (Alembic) and create an API key named `name`;
    returns the key (the secret the `openai` client sends)."""
    from lcsb_service.db import Database
    from lcsb_service.devserver import migrate
    from lcsb_service.keys import create_key

    migrate(settings.resolved_database_url)
    db = Database(settings.resolved_database_url)
    try:
        with db.session() as s:
            _, key = create_key(s, settings.secret_key.get_secret_value(), name)
    finally:
        db.dispose()
    return key
