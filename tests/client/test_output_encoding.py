"""The real `lcsb` command with an output that cannot encode the file's name (a Windows pipe,
`PYTHONIOENCODING=ascii`, `LC_ALL=C`): characters it cannot write are replaced, never fatal; the upload
happens once and is reported with its id, and `files list` shows it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.api.conftest import ROOT
from tests.client.conftest import ONE_BACKEND
from tests.client.helpers import write_dataset

pytestmark = ONE_BACKEND
NAME = "données-日本.jsonl"
LCSB = Path(sys.executable).with_name("lcsb")  # the installed entry point (lcsb_client.main:main)
ENCODINGS = [pytest.param({"PYTHONIOENCODING": "ascii"}, id="ascii"),
             pytest.param({"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}, id="C-locale"),
             pytest.param({"PYTHONIOENCODING": "cp1252"}, id="windows-pipe")]


def run_lcsb(base_url: str, key: str, encoding: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LC_", "PYTHONIO", "LCSB_"))}
    env.update(PYTHONPATH=str(ROOT), LCSB_BASE_URL=base_url, LCSB_API_KEY=key, **encoding)
    return subprocess.run([str(LCSB), *args], env=env, capture_output=True, timeout=120, check=False)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_upload_and_list_with_an_output_that_cannot_encode_the_name(base_url, alice, svc, tmp_path, encoding):
    path = write_dataset(tmp_path / NAME)
    before = {f["id"] for f in svc.list_files(100)}
    upload = run_lcsb(base_url, alice.key, encoding, "files", "upload", str(path))
    out = upload.stdout.decode("ascii", errors="replace")
    assert upload.returncode == 0, upload.stderr.decode(errors="replace")
    assert "Traceback" not in upload.stderr.decode(errors="replace")
    new = [f for f in svc.list_files(100) if f["id"] not in before]
    assert [f["filename"] for f in new] == [NAME]  # uploaded once
    assert new[0]["id"] in out and "processed" in out
    listed = run_lcsb(base_url, alice.key, encoding, "files", "list")
    assert listed.returncode == 0 and "Traceback" not in listed.stderr.decode(errors="replace")
    assert new[0]["id"] in listed.stdout.decode("ascii", errors="replace")
    as_json = run_lcsb(base_url, alice.key, encoding, "files", "get", new[0]["id"], "--json")
    assert as_json.returncode == 0 and json.loads(as_json.stdout)["filename"] == NAME  # JSON escapes, loses nothing
