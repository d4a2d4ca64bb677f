"""Database engine and sessions (SQLAlchemy 2, synchronous).

    db = Database(settings.resolved_database_url)
    with db.session() as s:            # commits on success, rolls back on error
        s.add(...)

PostgreSQL (`postgresql+psycopg://...`) in production; SQLite as the embedded default, opened in WAL
mode with foreign keys on and a busy timeout, so the API and a worker process can share the file.
Sessions do not expire objects on commit, so a route can return what it just committed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

SQLITE_BUSY_TIMEOUT_MS = 15_000
_AFTER_COMMIT = "lcsb_after_commit"
log = logging.getLogger(__name__)


def make_engine(url: str, *, pool_size: int | None = None, pool_timeout_s: float = 30.0) -> Engine:
    """An engine for `url`; for SQLite, creates the file's folder and sets the connection pragmas.

    `pool_size`: a fixed pool of that many connections (no overflow), waited for at most
    `pool_timeout_s` seconds (then `sqlalchemy.exc.TimeoutError`); None keeps SQLAlchemy's default
    (5 + 10 overflow).
    """
    parsed = make_url(url)
    pool = {} if pool_size is None else {"pool_size": pool_size, "max_overflow": 0, "pool_timeout": pool_timeout_s}
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True, **pool)
    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
                           **pool)

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection, _record) -> None:  # DB-API connection
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.close()

    return engine


def is_postgresql(session_or_engine: Session | Engine) -> bool:
    """True when the bound database is PostgreSQL (row locks with SELECT ... FOR UPDATE)."""
    bind = session_or_engine.get_bind() if isinstance(session_or_engine, Session) else session_or_engine
    return bind.dialect.name == "postgresql"


def after_commit(session: Session, action: Callable[[], None]) -> None:
    """Run `action` once the session's transaction has committed (`run_after_commit`); dropped on
    rollback. For side effects that must not happen unless the rows exist (sending a job to a queue)
    or are gone (deleting a stored object)."""
    session.info.setdefault(_AFTER_COMMIT, []).append(action)


def run_after_commit(session: Session) -> None:
    """Run the remembered actions in order. A failing action is logged, not raised: the transaction
    already succeeded."""
    for action in session.info.pop(_AFTER_COMMIT, []):
        try:
            action()
        except Exception:  # keep the reason in the log, finish the others
            log.exception("after-commit action %r failed", action)


def discard_after_commit(session: Session) -> None:
    """Forget the remembered actions (the transaction was rolled back)."""
    session.info.pop(_AFTER_COMMIT, None)


class Database:
    """An engine plus a session factory (`pool_size`, `pool_timeout_s`: see `make_engine`)."""

    def __init__(self, url: str, *, pool_size: int | None = None, pool_timeout_s: float = 30.0) -> None:
        self.engine = make_engine(url, pool_size=pool_size, pool_timeout_s=pool_timeout_s)
        self.sessionmaker = sessionmaker(self.engine, expire_on_commit=False)
        self._reader = sessionmaker(self.engine.execution_options(isolation_level="AUTOCOMMIT"),
                                    expire_on_commit=False)

    @contextmanager
    def read_session(self) -> Iterator[Session]:
        """A session for reads only, in autocommit mode: no BEGIN / COMMIT round trips, each statement
        sees the latest committed rows. Nothing is committed (do not write through it)."""
        with self._reader() as session:
            yield session

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session that commits when the block ends normally (then runs its `after_commit` actions)
        and rolls back on an exception."""
        with self.sessionmaker() as session:
            try:
                yield session
                session.commit()
            except BaseException:
                session.rollback()
                discard_after_commit(session)
                raise
            run_after_commit(session)

    def ping(self) -> None:
        """Run `SELECT 1`. Raises: sqlalchemy.exc.DBAPIError / OperationalError when unreachable."""
        with self.engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    def dispose(self) -> None:
        self.engine.dispose()
