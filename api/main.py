"""The FastAPI application factory.

    uvicorn --factory api.main:create_app --host 0.0.0.0 --port 8000     # settings from LCSB_* vars
    app = create_app(Settings(...), enqueuer=RecordingEnqueuer())        # tests

The database schema must exist (`alembic upgrade head`); the app never creates tables.

Request size limits are FastAPI's own (`max_body_size`): 1 MiB for JSON routes, the upload cap plus
multipart overhead for `/v1/files`; a body past its limit is cut off while being received (413). The
upload route also counts the file's own bytes while streaming it to storage (413 with the OpenAI error
body). A request that *declares* a Content-Length over the limit is refused by Starlette before any
byte is read, with its plain-text 413 body ("Content Too Large").

Concurrency is sized in one place, `Settings` (`api_max_concurrency` and what derives from it): the
admission limit (`api.admission`: a fast 503 with `Retry-After` past it), the database pool
(`Settings.db_pool_size`, no overflow), the worker-thread limit (`Settings.api_thread_limit`) and the
event-stream polls (`sse_poll_concurrency`).

While the app runs (its lifespan) it also sweeps, independently of any worker: once at start, stored
uploads that never got a row (`lcsb_service.files.sweep_orphan_uploads`), and every
`reaper_interval_s`, lost jobs and jobs whose broker message may be lost (`lcsb_service.sweeper`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from fastapi import Depends, FastAPI

from api import errors, log_redaction, ui
from api.admission import AdmissionLimit
from api.body_errors import strict_json_body
from api.metrics import MetricsMiddleware, ServiceMetrics
from api.query import reject_unknown_query
from api.routes import chat, estimate, events, exports, files, health, jobs, models, outputs
from api.schemas.common import errors as errors_of
from lcsb_service.db import Database
from lcsb_service.enqueue import Enqueuer, load_enqueuer
from lcsb_service.files import sweep_orphan_uploads
from lcsb_service.settings import Settings
from lcsb_service.storage import Storage
from lcsb_service.sweeper import start_reaper

MULTIPART_OVERHEAD_BYTES = 64 * 1024
JSON_BODY_LIMIT_BYTES = 1 << 20
log = logging.getLogger(__name__)


def create_app(settings: Settings | None = None, *, enqueuer: Enqueuer | None = None) -> FastAPI:
    """Build the app: settings (validated now: a default secret outside development refuses to
    start), database, storage, enqueuer, metrics, routes and error handlers."""
    settings = settings or Settings()
    log_redaction.install()  # uvicorn's access log: no API key from a query string
    app = FastAPI(title="LCSB fine-tuning service", version="0.1.0",
                  description="OpenAI-compatible files and fine-tuning jobs, trained with Layer-Cyclic "
                              "Selective Backpropagation (arXiv 2602.13073).",
                  max_body_size=JSON_BODY_LIMIT_BYTES, lifespan=_lifespan)
    app.state.settings = settings
    app.state.db = Database(settings.resolved_database_url, pool_size=settings.db_pool_size,
                            pool_timeout_s=settings.db_pool_timeout_s)
    app.state.storage = Storage(settings.resolved_storage_url)
    app.state.enqueuer = enqueuer or load_enqueuer(settings)
    app.state.metrics = ServiceMetrics(app.state.db)
    app.state.sse_limiter = anyio.CapacityLimiter(settings.sse_poll_concurrency)
    app.add_middleware(AdmissionLimit, limit=settings.api_max_concurrency, max_waiting=settings.api_max_waiting,
                       wait_s=settings.api_queue_timeout_s, retry_after_s=settings.api_retry_after_s)
    app.add_middleware(MetricsMiddleware, metrics=app.state.metrics)  # outermost: counts the 503s too
    errors.install(app)
    # an unknown query parameter, a repeated key or NaN in a JSON body: a 400, never ignored or guessed
    known_query = [Depends(reject_unknown_query), Depends(strict_json_body)]
    app.include_router(files.router, max_body_size=settings.max_upload_bytes + MULTIPART_OVERHEAD_BYTES,
                       dependencies=known_query, responses=errors_of(400))
    for module in (estimate, jobs, events, outputs, exports, models, chat):
        app.include_router(module.router, dependencies=known_query, responses=errors_of(400))
    app.include_router(health.router)
    ui.install(app)  # the dashboard under /ui: pages that call these /v1 routes
    log.info("LCSB API ready (%s environment, database %s)", settings.environment,
             app.state.db.engine.url.render_as_string(hide_password=True))
    return app


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Size the worker threads, sweep orphan uploads once, and run the job sweeper until shutdown."""
    settings: Settings = app.state.settings
    anyio.to_thread.current_default_thread_limiter().total_tokens = settings.api_thread_limit
    await anyio.to_thread.run_sync(sweep_orphan_uploads, app.state.db, app.state.storage,
                                   settings.stale_upload_after_s)
    stop = threading.Event()
    thread = start_reaper(app.state.db, app.state.enqueuer, settings, stop) if settings.api_sweeper else None
    try:
        yield
    finally:
        stop.set()
        if thread is not None:
            await anyio.to_thread.run_sync(thread.join, 10.0)
