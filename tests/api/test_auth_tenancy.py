"""API keys and tenancy: no key or a wrong/revoked key is 401; another owner's ids answer 404; lists
show only the caller's objects; the key command prints a key once and stores only its hash."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from lcsb_service.keys import app as keys_cli
from lcsb_service.keys import hash_key
from lcsb_service.models import ApiKey
from tests.api.conftest import SECRET
from tests.api.helpers import assert_error, create_job, job_ok

PROTECTED = [("GET", "/v1/files"), ("POST", "/v1/fine_tuning/jobs"), ("GET", "/v1/fine_tuning/jobs"),
             ("GET", "/v1/models"), ("GET", "/v1/files/file-x"), ("GET", "/v1/fine_tuning/jobs/ftjob-x/events")]


@pytest.mark.parametrize("method,path", PROTECTED)
def test_missing_and_wrong_key_are_401(client, method, path):
    err = assert_error(client.request(method, path), 401, "missing_api_key")
    assert err["type"] == "authentication_error"
    assert_error(client.request(method, path, headers={"Authorization": "Bearer sk-lcsb-wrong"}), 401,
                 "invalid_api_key")
    assert_error(client.request(method, path, headers={"Authorization": "Basic abc"}), 401, "missing_api_key")


def test_keys_are_hashed_at_rest(app, alice):
    with app.state.db.session() as s:
        row = s.execute(select(ApiKey).where(ApiKey.owner_id == alice.owner_id)).scalar_one()
    assert row.key_hash == hash_key(SECRET, alice.key) and alice.key not in (row.key_hash, row.prefix)
    assert alice.key.startswith(row.prefix)


def test_other_owners_objects_are_404(client, alice, bob):
    job = job_ok(client, alice)
    fid = job["training_file"]
    for method, path in [("GET", f"/v1/files/{fid}"), ("GET", f"/v1/files/{fid}/content"),
                         ("DELETE", f"/v1/files/{fid}"), ("GET", f"/v1/fine_tuning/jobs/{job['id']}"),
                         ("POST", f"/v1/fine_tuning/jobs/{job['id']}/cancel"),
                         ("GET", f"/v1/fine_tuning/jobs/{job['id']}/events"),
                         ("GET", f"/v1/fine_tuning/jobs/{job['id']}/events/stream"),
                         ("GET", f"/v1/fine_tuning/jobs/{job['id']}/checkpoints"),
                         ("GET", f"/v1/fine_tuning/jobs/{job['id']}/artifacts")]:
        assert_error(client.request(method, path, headers=bob.headers), 404)
        if not path.endswith("/stream"):  # alice's stream would wait for her queued job to finish
            assert client.request("GET", path.replace("/cancel", ""), headers=alice.headers).status_code == 200
    assert client.get("/v1/files", headers=bob.headers).json()["data"] == []
    assert client.get("/v1/fine_tuning/jobs", headers=bob.headers).json()["data"] == []
    # bob cannot train on alice's file, nor page with her ids as cursors
    assert_error(create_job(client, bob, fid), 400, "file_not_found", "training_file")
    assert_error(client.get(f"/v1/fine_tuning/jobs?after={job['id']}", headers=bob.headers), 400, "invalid_cursor")
    assert client.get(f"/v1/fine_tuning/jobs/{job['id']}", headers=alice.headers).json()["status"] == "queued"


def test_key_command_create_list_revoke(settings, client, monkeypatch):
    env = {"LCSB_ENVIRONMENT": "test", "LCSB_SECRET_KEY": SECRET, "LCSB_DATABASE_URL": settings.database_url}
    runner = CliRunner()
    out = runner.invoke(keys_cli, ["create", "--owner", "carol-cli", "--name", "laptop"], env=env)
    assert out.exit_code == 0, out.output
    key = out.output.strip().splitlines()[-1]
    key_id = out.output.split()[1]
    assert key.startswith("sk-lcsb-")
    assert client.get("/v1/files", headers={"Authorization": f"Bearer {key}"}).status_code == 200
    listed = runner.invoke(keys_cli, ["list", "--owner", "carol-cli"], env=env)
    assert key_id in listed.output and key not in listed.output and "active" in listed.output
    assert runner.invoke(keys_cli, ["revoke", key_id], env=env).exit_code == 0
    assert_error(client.get("/v1/files", headers={"Authorization": f"Bearer {key}"}), 401, "invalid_api_key")
    assert runner.invoke(keys_cli, ["revoke", "key-nope"], env=env).exit_code == 1
