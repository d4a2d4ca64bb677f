"""The FastAPI application factory.

    uvicorn --factory api.main:create_app --host 0.0.0.0 --port 8000     # settings from LCSB_* vars
    app = create_app(Settings(...), enqueuer=RecordingEnqueuer())        # tests

The database schema must exist (`alembic upgrade head`); the app never creates tables.

Request size limits are FastAPI's own (`max_body_size`): 1 MiB for JSON routes, the upload cap plus
multipart overhead for `/v1/files`; a body past its limit is cut off while being received (413). The
upload route also counts the file's own bytes while streaming it to storage (413 with the OpenAI error
body). A request that *declares* a Content-Length over the limit is refused by Starlette before any
byte is read, with its plain-text 413 body ("Content Too Large").
"""

from __future__ import annotations

import logging

from fastapi import FastAPI

from api import errors
from api.metrics import MetricsMiddleware, ServiceMetrics
from api.routes import events, files, health, jobs, models, outputs
from lcsb_service.db import Database
from lcsb_service.enqueue import Enqueuer, load_enqueuer
from lcsb_service.settings import Settings
from lcsb_service.storage import Storage

MULTIPART_OVERHEAD_BYTES = 64 * 1024
JSON_BODY_LIMIT_BYTES = 1 << 20
log = logging.getLogger(__name__)


def create_app(settings: Settings | None = None, *, enqueuer: Enqueuer | None = None) -> FastAPI:
    """Build the app: settings (validated now: a default secret outside development refuses to
    start), database, storage, enqueuer, metrics, routes and error handlers."""
    settings = settings or Settings()
    app = FastAPI(title="LCSB fine-tuning service", version="0.1.0",
                  description="OpenAI-compatible files and fine-tuning jobs, trained with Layer-Cyclic "
                              "Selective Backpropagation (arXiv 2602.13073).",
                  max_body_size=JSON_BODY_LIMIT_BYTES)
    app.state.settings = settings
    app.state.db = Database(settings.resolved_database_url)
    app.state.storage = Storage(settings.resolved_storage_url)
    app.state.enqueuer = enqueuer or load_enqueuer(settings)
    app.state.metrics = ServiceMetrics(app.state.db)
    app.add_middleware(MetricsMiddleware, metrics=app.state.metrics)
    errors.install(app)
    app.include_router(files.router, max_body_size=settings.max_upload_bytes + MULTIPART_OVERHEAD_BYTES)
    for module in (jobs, events, outputs, models, health):
        app.include_router(module.router)
    log.info("LCSB API ready (%s environment, database %s)", settings.environment,
             app.state.db.engine.url.render_as_string(hide_password=True))
    return app
