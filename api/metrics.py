"""Prometheus metrics on `/metrics`: request count and latency by route template and status, upload
bytes, jobs created, jobs by status (read from the database at scrape time), and the admission queue.
One registry per app (so tests can build several apps in one process).

Every label comes from a closed set, so no request can add series: `method` is one of `METHODS` or
`other`, `route` a route template of the app or `unmatched`, `status` a class (`2xx` ... `5xx`)."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lcsb_service.db import Database
from lcsb_service.jobs import count_by_status
from lcsb_service.status import JobStatus


class ServiceMetrics:
    """The app's registry and instruments."""

    def __init__(self, db: Database) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("lcsb_http_requests", "HTTP requests by status class", ["method", "route", "status"],
                                registry=self.registry)
        self.latency = Histogram("lcsb_http_request_duration_seconds", "HTTP request latency (s), to the "
                                 "response start", ["method", "route"], registry=self.registry)
        self.upload_bytes = Counter("lcsb_upload_bytes", "bytes of accepted uploads", registry=self.registry)
        self.jobs_created = Counter("lcsb_jobs_created", "fine-tuning jobs created", ["queue"],
                                    registry=self.registry)
        self.registry.register(_JobStatusCollector(db))


class _JobStatusCollector:
    def __init__(self, db: Database) -> None:
        self.db = db

    def collect(self):
        gauge = GaugeMetricFamily("lcsb_jobs", "fine-tuning jobs by status", labels=["status"])
        counts: dict[str, int] = dict.fromkeys(JobStatus, 0)
        try:
            with self.db.sessionmaker() as s:
                counts.update(count_by_status(s))
        except Exception:  # noqa: BLE001 - a scrape must not fail because the database is down
            return
        for status, n in counts.items():
            gauge.add_metric([status], n)
        yield gauge


class MetricsMiddleware:
    """Pure ASGI middleware (safe for streaming responses): counts requests by route template."""

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), [500]

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                self.metrics.latency.labels(*_labels(scope)).observe(time.perf_counter() - start)
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            self.metrics.requests.labels(*_labels(scope), f"{status[0] // 100}xx").inc()


METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def _labels(scope: Scope) -> tuple[str, str]:
    """(method, route template): both from closed sets (an invented method is `other`; a path that
    matched no route is `unmatched`)."""
    method = scope["method"] if scope["method"] in METHODS else "other"
    return method, getattr(scope.get("route"), "path", "unmatched")
