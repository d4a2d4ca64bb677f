"""Uploads leave nothing behind: the bytes go to a `.partial` object renamed once complete, and the API
removes `.partial` objects and objects without a row when it starts (`sweep_orphan_uploads`). The
last test kills a real API process (SIGKILL) while an upload is being stored, then restarts it."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import httpx
from sqlalchemy import select

from lcsb_service.files import PARTIAL_SUFFIX, sweep_orphan_uploads
from lcsb_service.models import File
from tests.api.conftest import start_api
from tests.api.helpers import MULTIPART_HEADERS, chat_lines, multipart_stream, upload, upload_ok

MIB = 2**20


def stored(app) -> set[str]:
    root = Path(app.state.storage.root) / "files"
    return {p.name for p in root.iterdir()} if root.exists() else set()


def test_upload_leaves_only_its_final_object(client, app, alice):
    before = stored(app)
    kept = upload_ok(client, alice, chat_lines(12))
    assert stored(app) - before == {kept["id"]}
    r = upload(client, alice, b"x" * (app.state.settings.max_upload_bytes + 1))  # 413 while streaming
    assert r.status_code == 413
    r = upload(client, alice, chat_lines(12), filename="train.exe")  # refused before storing
    assert r.status_code == 400
    assert stored(app) - before == {kept["id"]}


def test_sweep_removes_partial_and_rowless_objects_once_stale(client, app, alice):
    storage, db = app.state.storage, app.state.db
    kept = upload_ok(client, alice, chat_lines(12))
    for key in ("files/file-killedmidcopy" + PARTIAL_SUFFIX, "files/file-killedbeforecommit"):
        with storage.open(key, "wb") as fh:
            fh.write(b"half")
    assert sweep_orphan_uploads(db, storage, stale_after_s=3600) == []  # fresh: maybe still being written
    removed = sweep_orphan_uploads(db, storage, stale_after_s=0)
    assert sorted(removed) == ["files/file-killedbeforecommit", "files/file-killedmidcopy" + PARTIAL_SUFFIX]
    assert kept["id"] in stored(app) and not any(n.startswith("file-killed") for n in stored(app))
    assert client.get(f"/v1/files/{kept['id']}/content", headers=alice.headers).content == chat_lines(12)


def test_api_killed_mid_upload_leaves_no_orphan_after_restart(settings, app, alice):
    """SIGKILL while the upload's `.partial` object exists (it is validated before the rename); the
    restarted API removes it, and no row was written."""
    big = settings.model_copy(update={"max_upload_bytes": 64 * MIB, "upload_chunk_bytes": 64 * 1024,
                                      "stale_upload_after_s": 0.0})
    root = Path(app.state.storage.root) / "files"
    partials_before = set(root.glob(f"*{PARTIAL_SUFFIX}"))
    proc, url = start_api(big, LCSB_ENQUEUER="lcsb_service.enqueue:LoggingEnqueuer")
    try:
        errors: list[BaseException] = []

        def send() -> None:
            try:
                httpx.post(f"{url}/v1/files", headers={**alice.headers, **MULTIPART_HEADERS},
                           content=multipart_stream(48 * MIB), timeout=120)
            except httpx.HTTPError as exc:  # the server dies under it
                errors.append(exc)

        sender = threading.Thread(target=send)
        sender.start()
        deadline = time.monotonic() + 120
        while not (new := set(root.glob(f"*{PARTIAL_SUFFIX}")) - partials_before):
            assert time.monotonic() < deadline and sender.is_alive(), "no partial upload object appeared"
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        sender.join(30)
        assert errors, "the upload finished before the kill"
        assert all(p.exists() for p in new)  # what a killed API leaves
        file_ids = [p.name.removesuffix(PARTIAL_SUFFIX) for p in new]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    proc, url = start_api(big, LCSB_ENQUEUER="lcsb_service.enqueue:LoggingEnqueuer")  # sweeps at start
    try:
        assert not any(p.exists() for p in new)
        with app.state.db.session() as s:
            assert s.scalars(select(File.id).where(File.id.in_(file_ids))).all() == []
        assert not set(file_ids) & stored(app)
    finally:
        proc.terminate()
        proc.wait(10)

