"""The training child's inputs: datasets from any fsspec storage (a non-local one is downloaded for
the run), named with the upload's suffix so the reader picks the format."""

from __future__ import annotations

import secrets
from contextlib import ExitStack
from types import SimpleNamespace

from lcsb_service.storage import Storage
from worker.child import _local_input


def test_remote_storage_inputs_are_downloaded_and_named_by_suffix(tmp_path):
    storage = Storage(f"memory://lcsb-{secrets.token_hex(4)}")
    assert not storage.is_local
    with storage.open("files/file-abc", "wb") as fh:
        fh.write(b"some corpus text\n")
    row = SimpleNamespace(id="file-abc", filename="corpus.TXT", storage_key="files/file-abc")
    with ExitStack() as stack:
        link = _local_input(stack, storage, row, tmp_path)
        assert link.name == "file-abc.txt" and link.read_bytes() == b"some corpus text\n"
    assert not link.exists()  # the download is removed with the run


def test_local_storage_inputs_are_linked_not_copied(tmp_path):
    storage = Storage(str(tmp_path / "storage"))
    with storage.open("files/file-xyz", "wb") as fh:
        fh.write(b'{"text": "x"}\n')
    row = SimpleNamespace(id="file-xyz", filename="train.jsonl", storage_key="files/file-xyz")
    with ExitStack() as stack:
        link = _local_input(stack, storage, row, tmp_path)
        assert link.resolve() == (tmp_path / "storage" / "files" / "file-xyz").resolve()


def test_error_messages_name_no_worker_path():
    from worker.child import public_text

    spec = {"result_path": "/srv/runs/.ftjob-1/outcome.json", "run_dir": "/srv/runs/ftjob-1",
            "model_dirs": ["/opt/models", "/home/w/.cache/lcsb/models"]}
    message = ("/srv/runs/.ftjob-1/file-abc.jsonl: line 3 is invalid; cannot load weights from "
               "/home/w/.cache/lcsb/models/SmolLM2-135M-Instruct: truncated file; see /srv/runs/ftjob-1/adapter; "
               "nothing in /opt/models")
    assert public_text(message, spec, {"file-abc.jsonl": "train.jsonl"}) == (
        "train.jsonl: line 3 is invalid; cannot load weights from SmolLM2-135M-Instruct: truncated file; "
        "see adapter; nothing in the model folder")
