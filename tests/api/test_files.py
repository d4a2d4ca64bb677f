"""`/v1/files`: upload (validated, hashed, size-capped), list with cursor pages, get, content, delete."""

from __future__ import annotations

import hashlib
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.api.helpers import (
    MULTIPART_HEADERS,
    assert_error,
    chat_lines,
    create_job,
    job_ok,
    multipart_stream,
    upload,
    upload_ok,
)


def test_upload_validates_and_hashes(client, alice):
    content = chat_lines(15)
    f = upload_ok(client, alice, content)
    assert f["object"] == "file" and f["id"].startswith("file-") and f["purpose"] == "fine-tune"
    assert f["status"] == "processed" and f["status_details"] is None
    assert f["bytes"] == len(content) and f["sha256"] == hashlib.sha256(content).hexdigest()
    report = f["validation"]
    assert report["ok"] and report["format"] == "chat" and report["valid_examples"] == 15
    assert report["path"] == "train.jsonl"  # never the storage path
    assert client.get(f"/v1/files/{f['id']}", headers=alice.headers).json() == f
    body = client.get(f"/v1/files/{f['id']}/content", headers=alice.headers)
    assert body.status_code == 200 and body.content == content


def test_invalid_dataset_is_kept_with_its_report(client, alice):
    content = chat_lines(12) + b'{"messages": [{"role": "user", "content": "hi"}]}\nnot json\n'
    f = upload_ok(client, alice, content)
    assert f["status"] == "error"
    assert "13" in f["status_details"] and "14" in f["status_details"]
    lines = [e["line"] for e in f["validation"]["errors"]]
    assert lines == [13, 14] and f["validation"]["invalid_examples"] == 2


CASES = Path(__file__).resolve().parents[1] / "data" / "cases"


@pytest.mark.parametrize("name", ["clean_reference.jsonl", "bom_blank_crlf.jsonl"])
def test_a_valid_file_of_three_examples_uploads_and_a_job_from_it_is_refused(client, alice, name):
    """The shared cases' right outcome ("valid: 3 chat examples") at upload; the 10 examples a job needs
    (Settings.min_examples, OpenAI's minimum) are checked when a job is created from the file, as OpenAI does."""
    f = upload_ok(client, alice, (CASES / name).read_bytes(), filename=name)
    assert f["status"] == "processed" and f["validation"]["valid_examples"] == 3, f
    assert f["validation"]["warnings"] == ["3 valid examples: a fine-tuning job's training_file needs at "
                                           "least 10 (a validation_file any number); add examples before training "
                                           "on this file"]
    err = assert_error(create_job(client, alice, f["id"]), 400, "invalid_file", "training_file")
    assert err["message"] == f"training_file: {f['id']} has 3 valid examples; a fine-tuning job needs at least 10"
    assert create_job(client, alice, upload_ok(client, alice, chat_lines(10))["id"]).status_code == 200


def test_text_corpus_upload(client, alice):
    f = upload_ok(client, alice, b"".join(b"line %d of a corpus\n" % i for i in range(40)), filename="corpus.txt")
    assert f["validation"]["file_type"] == "txt"


def test_upload_errors(client, alice):
    assert_error(upload(client, alice, purpose="assistants"), 400, "invalid_purpose", "purpose")
    assert_error(upload(client, alice, filename="data.exe"), 400, "invalid_file_name", "file")
    assert_error(client.post("/v1/files", headers=alice.headers, data={"purpose": "fine-tune"}), 400,
                 "missing_required_parameter", "file")
    assert_error(client.post("/v1/files", headers=alice.headers, files={"file": ("a.jsonl", b"{}")}), 400,
                 "missing_required_parameter", "purpose")


def test_over_cap_upload_is_413_and_leaves_nothing(client, alice, settings, app):
    cap = settings.max_upload_bytes
    stored = lambda: set(app.state.storage.fs.find(app.state.storage.root))  # noqa: E731
    before = stored()
    # just over the cap: passes the request limit (cap + multipart overhead), refused while streaming
    err = assert_error(upload(client, alice, chat_lines(1, pad=cap)), 413, "file_too_large", "file")
    assert f"{cap:,}" in err["message"]
    # far over, sent chunked: cut off by the request body limit while receiving
    body = b"x" * (cap + 2**20)
    chunked = client.post("/v1/files", headers={**alice.headers, **MULTIPART_HEADERS},
                          content=multipart_stream(cap + 2**20))
    assert_error(chunked, 413)
    # declared Content-Length over the limit: refused before reading (Starlette's plain-text 413)
    declared = client.post("/v1/files", headers={**alice.headers, "Content-Type": "multipart/form-data; boundary=b"},
                           content=body)
    assert declared.status_code == 413
    assert stored() == before
    assert client.get("/v1/files", headers=alice.headers).json()["data"] == []


def test_list_pagination_and_order(client, alice):
    ids = [upload_ok(client, alice)["id"] for _ in range(5)]
    full = client.get("/v1/files?limit=100", headers=alice.headers).json()
    assert [f["id"] for f in full["data"]] == ids[::-1] and full["has_more"] is False
    assert full["first_id"] == ids[-1] and full["last_id"] == ids[0]
    seen, after = [], None
    while True:
        page = client.get("/v1/files", params={"limit": 2, **({"after": after} if after else {})},
                          headers=alice.headers).json()
        seen += [f["id"] for f in page["data"]]
        if not page["has_more"]:
            break
        after = page["last_id"]
    assert seen == ids[::-1] and len(page["data"]) == 1
    asc = client.get("/v1/files", params={"order": "asc", "limit": 2, "after": ids[1]}, headers=alice.headers).json()
    assert [f["id"] for f in asc["data"]] == ids[2:4] and asc["has_more"] is True
    last = client.get("/v1/files", params={"after": ids[0]}, headers=alice.headers).json()
    assert last["data"] == [] and last["has_more"] is False and last["first_id"] is None
    exact = client.get("/v1/files", params={"limit": 5}, headers=alice.headers).json()
    assert len(exact["data"]) == 5 and exact["has_more"] is False
    assert client.get("/v1/files?purpose=fine-tune-results", headers=alice.headers).json()["data"] == []
    for bad in ({"limit": 0}, {"limit": 101}, {"order": "sideways"}):
        assert_error(client.get("/v1/files", params=bad, headers=alice.headers), 400)
    assert_error(client.get("/v1/files", params={"after": "file-nope"}, headers=alice.headers), 400,
                 "invalid_cursor", "after")


def test_delete(client, alice, app):
    f = upload_ok(client, alice)
    key = f"files/{f['id']}"
    assert app.state.storage.exists(key)
    r = client.delete(f"/v1/files/{f['id']}", headers=alice.headers)
    assert r.status_code == 200 and r.json() == {"id": f["id"], "object": "file", "deleted": True}
    assert not app.state.storage.exists(key)
    assert_error(client.get(f"/v1/files/{f['id']}", headers=alice.headers), 404, "file_not_found")
    assert_error(client.delete(f"/v1/files/{f['id']}", headers=alice.headers), 404)


def test_delete_refused_while_a_job_uses_the_file(client, alice):
    job = job_ok(client, alice)
    assert_error(client.delete(f"/v1/files/{job['training_file']}", headers=alice.headers), 409, "file_in_use")
    client.post(f"/v1/fine_tuning/jobs/{job['id']}/cancel", headers=alice.headers)
    assert client.delete(f"/v1/files/{job['training_file']}", headers=alice.headers).status_code == 200


def test_unknown_route_and_method_use_the_error_body(client, alice):
    assert_error(client.get("/v1/nothing", headers=alice.headers), 404, "not_found")
    assert_error(client.put("/v1/files", headers=alice.headers), 405, "method_not_allowed")


@pytest.mark.parametrize("filename, ascii_name", [("données-日本.jsonl", "donnees-.jsonl"), ("日本.jsonl", None),
                                                  ("100% sûr.jsonl", "100_ sur.jsonl")])
def test_content_download_keeps_the_uploaded_name(client, alice, filename, ascii_name):
    """RFC 6266: an ASCII `filename` for old clients, the exact name in `filename*` (RFC 8187 UTF-8)."""
    f = upload_ok(client, alice, chat_lines(12), filename=filename)
    assert f["filename"] == filename
    r = client.get(f"/v1/files/{f['id']}/content", headers=alice.headers)
    disposition = r.headers["content-disposition"]
    assert disposition.isascii() and disposition.startswith("attachment; ")
    params = dict(p.strip().split("=", 1) for p in disposition.split(";")[1:])
    assert unquote(params["filename*"].removeprefix("UTF-8''"), errors="strict") == filename
    assert params["filename*"].startswith("UTF-8''") and '"' not in params["filename*"]
    assert params["filename"] == f'"{ascii_name or f["id"] + ".jsonl"}"'


def test_an_ascii_name_is_sent_as_it_is(client, alice):
    f = upload_ok(client, alice, chat_lines(12), filename="train-v2.jsonl")
    r = client.get(f"/v1/files/{f['id']}/content", headers=alice.headers)
    assert r.headers["content-disposition"] == 'attachment; filename="train-v2.jsonl"'
