"""Load on real processes: 200 clients polling a job while it trains, against the API under uvicorn on
PostgreSQL (default concurrency settings), all at once: every request answers 200 with the job. A
bounded loop (3 polls per client), stopping on its own; latency figures are `bench/api_load.py`'s."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from bench.api_load import poll_load
from tests.api.conftest import start_api
from tests.worker.conftest import create_long_job
from tests.worker.test_failures import JOB_BOUND_S

pytestmark = pytest.mark.worker

CLIENTS, POLLS = 200, 3


def test_200_concurrent_pollers_while_a_job_trains(make_settings, start_worker, make_service):
    settings = make_settings()
    service = make_service(settings)  # the tenant's key, uploads and job creation
    start_worker(settings)
    job = create_long_job(service, {"save_every": 3})
    service.wait(job["id"], {"running"}, JOB_BOUND_S, step=1)
    api, url = start_api(settings)
    try:
        result = asyncio.run(poll_load(url, f"/v1/fine_tuning/jobs/{job['id']}", service.headers, clients=CLIENTS,
                                       polls=POLLS, think_s=0.1))
        print(f"[load] {CLIENTS} pollers x {POLLS}: p50 {result.percentile(50):.0f} ms, "
              f"p99 {result.percentile(99):.0f} ms, errors {dict(result.errors)}")
        assert result.requests == CLIENTS * POLLS and not result.errors
        r = httpx.get(f"{url}/v1/fine_tuning/jobs/{job['id']}", headers=service.headers)
        assert r.json()["status"] == "running"  # it trained throughout
        assert httpx.get(f"{url}/healthz").status_code == 200
    finally:
        api.terminate()
        api.wait(15)
        service.client.post(f"/v1/fine_tuning/jobs/{job['id']}/cancel", headers=service.headers)
