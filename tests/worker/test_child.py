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
