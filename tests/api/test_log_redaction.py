"""API keys never reach the access log: a key sent in the query string (refused, 401) is written as
REDACTED by uvicorn's access log, in a real `uvicorn --factory api.main:create_app` process."""

from __future__ import annotations

import httpx
import pytest

from api.log_redaction import redact_target
from tests.api.conftest import serving_api

KEY = "sk-lcsb-" + "A1b2_C3d4-" * 4 + "xyz"


@pytest.mark.parametrize("target, want", [
    (f"/v1/files?api_key={KEY}", "/v1/files?api_key=REDACTED"),
    (f"/v1/files?limit=5&key={KEY}&after=file-1", "/v1/files?limit=5&key=REDACTED&after=file-1"),
    ("/v1/models?access_token=abc&Authorization=Bearer%20x", "/v1/models?access_token=REDACTED&Authorization=REDACTED"),
    (f"/v1/files?q={KEY}", "/v1/files?q=REDACTED"),                      # key-shaped under any name
    (f"/v1/files/{KEY}/content", "/v1/files/REDACTED/content"),          # pasted into the path
    ("/v1/fine_tuning/jobs?limit=5&after=ftjob-1", "/v1/fine_tuning/jobs?limit=5&after=ftjob-1"),
])
def test_redact_target(target, want):
    assert redact_target(target) == want


def test_the_access_log_never_holds_a_key(settings, alice, tmp_path):
    log = tmp_path / "api.log"
    with serving_api(settings, log_level="info", log_file=log,
                     LCSB_ENQUEUER="lcsb_service.enqueue:LoggingEnqueuer") as server:
        for query in (f"api_key={alice.key}", f"limit=5&key={alice.key}", f"token={alice.key}&x=1",
                      f"access_token={alice.key}", f"q={alice.key}"):
            r = httpx.get(f"{server.url}/v1/files?{query}", timeout=10)
            assert r.status_code == 401 and r.json()["error"]["code"] == "missing_api_key"
        assert httpx.get(f"{server.url}/v1/files?limit=2", headers={"Authorization": f"Bearer {alice.key}"},
                         timeout=10).status_code == 200
    text = log.read_text()
    assert alice.key not in text and alice.key[8:] not in text
    for logged in ("GET /v1/files?api_key=REDACTED HTTP/1.1\" 401", "GET /v1/files?limit=5&key=REDACTED HTTP",
                   "GET /v1/files?token=REDACTED&x=1 HTTP", "GET /v1/files?access_token=REDACTED HTTP",
                   "GET /v1/files?q=REDACTED HTTP", "GET /v1/files?limit=2 HTTP/1.1\" 200"):
        assert logged in text, text
