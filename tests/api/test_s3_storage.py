"""The files, outputs and upload-sweep tests again, with artifact storage on a real S3-compatible
server (`tests.s3_server`: moto in server mode) instead of a local folder: the same test functions,
collected here with `settings` / `app` / `client` overridden for S3."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from api.main import create_app
from lcsb_service.enqueue import RecordingEnqueuer
from lcsb_service.files import PARTIAL_SUFFIX, sweep_orphan_uploads
from tests.api.helpers import chat_lines, upload_ok
from tests.api.test_files import (  # noqa: F401 - collected again here, on S3
    test_delete,
    test_invalid_dataset_is_kept_with_its_report,
    test_over_cap_upload_is_413_and_leaves_nothing,
    test_upload_validates_and_hashes,
)
from tests.api.test_outputs import (  # noqa: F401
    test_artifacts_and_result_files,
    test_checkpoints_pages_and_adapter_download,
    trained,
)
from tests.s3_server import moto_s3


@pytest.fixture(scope="module")
def settings(settings) -> Iterator:  # the conftest's settings, with storage on S3
    with moto_s3() as bucket:
        yield settings.model_copy(update={"storage_url": f"s3://{bucket}/lcsb"})


@pytest.fixture(scope="module")
def app(settings):
    app = create_app(settings, enqueuer=RecordingEnqueuer())
    assert not app.state.storage.is_local
    yield app
    app.state.db.dispose()


@pytest.fixture(scope="module")
def client(app) -> Iterator[TestClient]:
    with TestClient(app) as c:
        assert c.get("/healthz").json()["checks"]["storage"] == "ok"
        yield c


def test_upload_is_renamed_into_place_and_orphans_are_swept(client, app, alice):
    storage, db = app.state.storage, app.state.db
    kept = upload_ok(client, alice, chat_lines(12))
    keys = {key for key, _ in storage.list_with_age("files")}
    assert f"files/{kept['id']}" in keys and not any(k.endswith(PARTIAL_SUFFIX) for k in keys)
    for key in ("files/file-s3killed" + PARTIAL_SUFFIX, "files/file-s3rowless"):
        with storage.open(key, "wb") as fh:
            fh.write(b"half")
    assert sweep_orphan_uploads(db, storage, stale_after_s=3600) == []
    assert sorted(sweep_orphan_uploads(db, storage, stale_after_s=0)) == ["files/file-s3killed" + PARTIAL_SUFFIX,
                                                                           "files/file-s3rowless"]
    assert client.get(f"/v1/files/{kept['id']}/content", headers=alice.headers).content == chat_lines(12)
