"""`/healthz` (database, broker, storage reachable: 200, else 503 with the failing component) and
`/metrics` (Prometheus text format). Neither needs an API key, so `/healthz` answers only `ok` or
`error` per component; the reason (which may name hosts, ports or roles) goes to the log."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from api.deps import DatabaseDep, MetricsDep, SettingsDep, StorageDep
from api.schemas.models import Health
from lcsb_service.settings import Settings

router = APIRouter(tags=["service"])
log = logging.getLogger(__name__)


def _check_broker(settings: Settings) -> None:
    url = settings.broker_url
    if url.startswith(("redis://", "rediss://")):
        import redis

        redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2).ping()
    elif url.startswith("filesystem://"):
        folder = settings.resolved_broker_folder
        folder.mkdir(parents=True, exist_ok=True)
        if not folder.is_dir():
            raise OSError(f"broker folder {folder} is not a directory")
    # other transports (memory://, sqla+...) have nothing separate to reach


def _run(name: str, check: Callable[[], object]) -> Literal["ok", "error"]:
    try:
        check()
    except Exception as exc:  # noqa: BLE001 - any failure is "error"; the reason only to the log
        log.warning("health check %s failed: %s: %s", name, type(exc).__name__, exc)
        return "error"
    return "ok"


@router.get("/healthz", response_model=Health, responses={503: {"model": Health}})
def healthz(db: DatabaseDep, storage: StorageDep, settings: SettingsDep) -> JSONResponse:
    """200 when the database, the broker and storage answer, else 503; each check is `ok` or `error`."""
    checks = {"database": _run("database", db.ping), "broker": _run("broker", lambda: _check_broker(settings)),
              "storage": _run("storage", storage.ping)}
    ok = all(v == "ok" for v in checks.values())
    body = Health(status="ok" if ok else "unavailable", checks=checks)
    return JSONResponse(body.model_dump(), status_code=200 if ok else 503)


@router.get("/metrics", response_class=Response, responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}})
def metrics(service_metrics: MetricsDep) -> Response:
    return Response(generate_latest(service_metrics.registry), media_type=CONTENT_TYPE_LATEST)
