"""The training child's inputs: its spec (typed, validated: a bad one is a clear error naming the field),
datasets from any fsspec storage (a non-local one is downloaded for the run), named with the upload's
suffix so the reader picks the format."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path
from types import SimpleNamespace

import pytest

from lcsb_service.storage import Storage
from worker.training.child import _local_input
from worker.training.spec import CageSpec, ChildSpec, ChildSpecError

ROOT = Path(__file__).resolve().parents[2]


def make_spec(**changes) -> ChildSpec:
    fields = dict(job_id="ftjob-1", database_url="sqlite:///x.db", storage_url="/srv/storage",
                  model_dirs=("/opt/models", "/home/w/.cache/lcsb/models"), run_dir="/srv/runs/ftjob-1",
                  device="cpu", cage=CageSpec(kind="rlimit", cap_mib=4096, address_space_bytes=2**33),
                  parent_pid=1, result_path="/srv/runs/.ftjob-1/outcome.json", fine_tuned_model="ft:x",
                  time_limit_s=3600.0)
    return ChildSpec(**{**fields, **changes})


def test_the_spec_round_trips_through_its_file(tmp_path):
    spec = make_spec()
    spec.write(tmp_path / "spec.json")
    assert (tmp_path / "spec.json").stat().st_mode & 0o777 == 0o600
    assert ChildSpec.read(tmp_path / "spec.json") == spec
    assert spec.cage.limits_spec() == {"kind": "rlimit", "cap_mib": 4096, "path": None,
                                       "address_space_bytes": 2**33}
    assert spec.inputs_dir == Path("/srv/runs/.ftjob-1")


def test_a_bad_spec_names_each_bad_field(tmp_path):
    data = json.loads(make_spec().model_dump_json())
    del data["job_id"]
    data["cage"]["cap_mib"] = "lots"
    data["colour"] = "blue"
    (tmp_path / "spec.json").write_text(json.dumps(data))
    with pytest.raises(ChildSpecError) as err:
        ChildSpec.read(tmp_path / "spec.json")
    message = str(err.value)
    assert str(tmp_path / "spec.json") in message
    assert "job_id: Field required" in message and "cage.cap_mib:" in message and "colour:" in message
    with pytest.raises(ChildSpecError, match="cannot read"):
        ChildSpec.read(tmp_path / "missing.json")


def test_the_child_refuses_a_bad_spec_with_status_2(tmp_path):
    (tmp_path / "spec.json").write_text('{"job_id": "ftjob-1"}')
    out = subprocess.run([sys.executable, "-m", "worker.training.child", str(tmp_path / "spec.json")], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "invalid training spec" in out.stderr and "database_url: Field required" in out.stderr


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
    from worker.training.child import public_text

    spec = make_spec()
    message = ("/srv/runs/.ftjob-1/file-abc.jsonl: line 3 is invalid; cannot load weights from "
               "/home/w/.cache/lcsb/models/SmolLM2-135M-Instruct: truncated file; see /srv/runs/ftjob-1/adapter; "
               "nothing in /opt/models")
    assert public_text(message, spec, {"file-abc.jsonl": "train.jsonl"}) == (
        "train.jsonl: line 3 is invalid; cannot load weights from SmolLM2-135M-Instruct: truncated file; "
        "see adapter; nothing in the model folder")
