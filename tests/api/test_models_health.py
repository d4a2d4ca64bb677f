"""`/v1/models`, `/healthz` (database, broker, storage) and `/metrics` (Prometheus)."""

from __future__ import annotations

import socket

from fastapi.testclient import TestClient

from api.main import create_app
from lcsb_service.enqueue import RecordingEnqueuer
from tests.api.helpers import assert_error, job_ok


def test_models(client, alice):
    data = client.get("/v1/models", headers=alice.headers).json()["data"]
    by_id = {m["id"]: m for m in data}
    assert set(by_id) == {"SmolLM2-135M-Instruct", "Giant-70B"}
    smol = by_id["SmolLM2-135M-Instruct"]
    assert smol["object"] == "model" and smol["num_layers"] == 30 and smol["max_seq_len"] == 8192
    assert smol["num_parameters"] == 134_515_008  # SmolLM2-135M's published parameter count
    assert "nf4" in smol["quantizations"]
    assert smol["hub_id"] == "HuggingFaceTB/SmolLM2-135M-Instruct"  # what its adapters name as their base
    giant = client.get("/v1/models/Giant-70B", headers=alice.headers).json()
    assert giant["num_layers"] == 80 and giant["hub_id"] == "Giant-70B"  # unknown to the hub: its name, no path
    assert_error(client.get("/v1/models/nope", headers=alice.headers), 404, "model_not_found")
    assert_error(client.get("/v1/models/..", headers=alice.headers), 404)


def test_healthz_ok(client):
    r = client.get("/healthz")
    assert r.status_code == 200 and r.json() == {"status": "ok",
                                                  "checks": {"database": "ok", "broker": "ok", "storage": "ok"}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_healthz_reports_an_unreachable_broker(settings):
    broken = settings.model_copy(update={"broker_url": f"redis://127.0.0.1:{_free_port()}/0"})
    app = create_app(broken, enqueuer=RecordingEnqueuer())
    with TestClient(app) as c:
        r = c.get("/healthz")
    app.state.db.dispose()
    assert r.status_code == 503 and r.json() == {"status": "unavailable",
                                                  "checks": {"database": "ok", "broker": "error", "storage": "ok"}}


def test_healthz_names_no_host_port_or_role(settings, caplog):
    """An unauthenticated caller learns which component failed, not where it lives nor as whom."""
    db_port, broker_port = _free_port(), _free_port()
    broken = settings.model_copy(update={
        "database_url": f"postgresql+psycopg://secret_role_x@127.0.0.1:{db_port}/hidden_db",
        "broker_url": f"redis://127.0.0.1:{broker_port}/0", "api_sweeper": False})
    app = create_app(broken, enqueuer=RecordingEnqueuer())
    with TestClient(app) as c, caplog.at_level("WARNING"):
        r = c.get("/healthz")
    app.state.db.dispose()
    assert r.status_code == 503 and r.json()["checks"] == {"database": "error", "broker": "error", "storage": "ok"}
    for secret in ("secret_role_x", "hidden_db", "127.0.0.1", str(db_port), str(broker_port)):
        assert secret not in r.text
    assert str(db_port) in caplog.text and str(broker_port) in caplog.text  # the reasons are in the log


def test_healthz_pings_redis(settings):
    """Against the test Redis at 127.0.0.1:6379 (a requirement of the suite, like PostgreSQL)."""
    app = create_app(settings.model_copy(update={"broker_url": "redis://127.0.0.1:6379/0"}),
                     enqueuer=RecordingEnqueuer())
    with TestClient(app) as c:
        assert c.get("/healthz").json()["checks"]["broker"] == "ok"
    app.state.db.dispose()


def test_metrics(client, alice):
    job_ok(client, alice)
    client.get("/v1/files", headers={"Authorization": "Bearer nope"})
    text = client.get("/metrics").text
    assert 'lcsb_http_requests_total{method="POST",route="/v1/fine_tuning/jobs",status="2xx"}' in text
    assert 'lcsb_http_requests_total{method="GET",route="/v1/files",status="4xx"}' in text
    assert "lcsb_upload_bytes_total" in text and 'lcsb_jobs_created_total{queue="cpu-6g"}' in text
    assert 'lcsb_jobs{status="queued"}' in text
    assert "lcsb_http_request_duration_seconds_bucket" in text


def _series(text: str) -> int:
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


def test_metrics_series_are_bounded_by_invented_methods_and_paths(client):
    """300 invented HTTP methods on invented paths, unauthenticated, add a bounded number of series."""
    client.get("/metrics")  # the scrape's own series exist from now on
    before = _series(client.get("/metrics").text)
    for i in range(300):
        client.request(f"BREW{i}", f"/nowhere/{i}")
        client.request(f"X-{i}", "/v1/files")
    text = client.get("/metrics").text
    assert "BREW" not in text and "nowhere" not in text and "X-1" not in text
    assert 'method="other",route="unmatched",status="4xx"' in text
    assert 'method="other",route="/v1/files",status="4xx"' in text
    # the new series: a counter and a histogram (buckets + sum + count + created) per new label set
    assert _series(text) - before <= 2 * (1 + 20)
