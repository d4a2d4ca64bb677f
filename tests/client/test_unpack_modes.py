"""`lcsb_client.outputs.unpack_adapter` on an archive as the service stored it before its members had
public modes (a 0600 safetensors, owner names, no folder entries): the unpacked adapter is readable by
another user (a serving daemon, a container user), whatever the umask."""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

import pytest

from lcsb_client.outputs import unpack_adapter
from tests.api.helpers import read_as_other_user, world_readable_tree

MEMBERS = {"adapter/adapter_config.json": (b'{"peft_type": "LORA"}', 0o600),
           "adapter/adapter_model.safetensors": (b"weights" * 100, 0o600)}


@pytest.fixture
def shared_dir():
    """A folder other users can enter (pytest's tmp_path is 0700), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="lcsb-shared-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def legacy_archive(path: Path) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, (data, mode) in MEMBERS.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.uname, info.gname = len(data), mode, "worker", "worker"
            tar.addfile(info, io.BytesIO(data))
    return path


def test_unpacked_adapter_is_readable_by_other_users(shared_dir):
    archive = legacy_archive(shared_dir / "adapter.tar.gz")
    old_umask = os.umask(0o022)  # the folder's own mode is the caller's umask; every member is 0644
    try:
        dest = unpack_adapter(archive, shared_dir / "out" / "adapter")
    finally:
        os.umask(old_umask)
    files = world_readable_tree(shared_dir / "out")
    assert [f.relative_to(dest).as_posix() for f in files] == ["adapter_config.json", "adapter_model.safetensors"]
    for path in files:
        want = MEMBERS[f"adapter/{path.name}"][0]
        assert path.read_bytes() == want and read_as_other_user(path) in (want, None)
