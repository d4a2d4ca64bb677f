"""Per-process resources of a worker: settings, database, storage, the Celery app (to re-send jobs),
built once from the app's settings.

    ctx = worker_context(app)       # app.lcsb_settings was set by worker.app.create_app
    with ctx.db.session() as s: ...
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field

from celery import Celery

from lcsb_service.db import Database
from lcsb_service.settings import Settings
from lcsb_service.storage import Storage

_lock = threading.Lock()


@dataclass
class WorkerContext:
    settings: Settings
    db: Database
    storage: Storage
    app: Celery
    hostname: str = field(default_factory=socket.gethostname)


def worker_context(app: Celery) -> WorkerContext:
    """The context attached to `app`, created on first use (thread-safe)."""
    with _lock:
        ctx = getattr(app, "lcsb_context", None)
        if ctx is None:
            settings: Settings = app.lcsb_settings
            ctx = WorkerContext(settings=settings, db=Database(settings.resolved_database_url),
                                storage=Storage(settings.resolved_storage_url), app=app)
            app.lcsb_context = ctx
        return ctx
