"""Artifact storage on any fsspec filesystem (a local folder by default; `s3://bucket/prefix` etc. when
the matching fsspec backend is installed). Objects are addressed by relative keys:

    files/<file-id>                                  uploaded datasets
    jobs/<job-id>/adapter.tar.gz, metrics.csv, ...   a run's outputs
    jobs/<job-id>/checkpoints/step-<N>/adapter.tar.gz

    storage = Storage(settings.resolved_storage_url)
    with storage.open("files/file-abc", "wb") as f: f.write(chunk)
    for chunk in storage.iter_bytes("files/file-abc"): ...
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import fsspec
from fsspec.implementations.local import LocalFileSystem

CHUNK_BYTES = 1 << 20


class Storage:
    """Keys under one fsspec root URL."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.fs, root = fsspec.core.url_to_fs(url)
        self.root = root.rstrip("/")
        if self.is_local:
            Path(self.root).mkdir(parents=True, exist_ok=True)

    @property
    def is_local(self) -> bool:
        return isinstance(self.fs, LocalFileSystem)

    def path(self, key: str) -> str:
        """The filesystem path of `key` (keys never start with '/' nor contain '..')."""
        if key.startswith("/") or ".." in key.split("/"):
            raise ValueError(f"invalid storage key {key!r}")
        return f"{self.root}/{key}"

    def open(self, key: str, mode: str = "rb") -> IO[bytes]:
        """Open `key` for binary reading or writing (parent folders are created when writing)."""
        path = self.path(key)
        if "w" in mode and self.is_local:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        return self.fs.open(path, mode)

    def iter_bytes(self, key: str, chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
        """Read `key` in chunks of `chunk_bytes` (flat memory)."""
        with self.open(key, "rb") as fh:
            while chunk := fh.read(chunk_bytes):
                yield chunk

    def put_file(self, local_path: str | Path, key: str) -> int:
        """Copy a local file to `key`; returns its size in bytes."""
        with open(local_path, "rb") as src, self.open(key, "wb") as dst:
            shutil.copyfileobj(src, dst, CHUNK_BYTES)
        return Path(local_path).stat().st_size

    def size(self, key: str) -> int:
        return int(self.fs.size(self.path(key)))

    def exists(self, key: str) -> bool:
        return bool(self.fs.exists(self.path(key)))

    def rename(self, src: str, dst: str) -> None:
        """Move `src` to `dst` (an atomic rename on a local filesystem; copy then delete on object
        stores, where `dst` appears only once complete)."""
        self.fs.mv(self.path(src), self.path(dst))

    def list_with_age(self, prefix: str) -> list[tuple[str, float]]:
        """The keys directly under the folder `prefix`, each with its age in seconds since it was last
        written; [] when the folder does not exist."""
        folder = self.path(prefix.rstrip("/"))
        if not self.fs.exists(folder):
            return []
        now = time.time()
        out = []
        for entry in self.fs.ls(folder, detail=True):
            if entry.get("type") != "file":
                continue
            stamp = entry.get("mtime") or entry.get("LastModified") or self.fs.modified(entry["name"])  # local, S3
            stamp = stamp.timestamp() if hasattr(stamp, "timestamp") else float(stamp)
            out.append((f"{prefix.rstrip('/')}/{entry['name'].rstrip('/').rsplit('/', 1)[-1]}", now - stamp))
        return out

    def delete(self, key: str) -> None:
        """Remove `key` (a file or a folder of keys); a missing key is not an error."""
        path = self.path(key)
        if self.fs.exists(path):
            self.fs.rm(path, recursive=True)

    @contextmanager
    def local_copy(self, key: str) -> Iterator[Path]:
        """A local path holding `key`'s bytes: the file itself on a local filesystem, else a temporary
        download removed when the block ends."""
        if self.is_local:
            yield Path(self.path(key))
            return
        with tempfile.TemporaryDirectory(prefix="lcsb-") as tmp:
            dest = Path(tmp) / Path(key).name
            self.fs.get(self.path(key), str(dest))
            yield dest

    def ping(self) -> None:
        """Check that the root is reachable and writable (writes and removes a small probe object).
        Raises: OSError (or the backend's error, e.g. botocore's for S3)."""
        probe = self.path(".healthz")
        if self.is_local:
            Path(probe).write_bytes(b"ok")
            Path(probe).unlink()
        else:
            with self.fs.open(probe, "wb") as fh:
                fh.write(b"ok")
            self.fs.rm(probe)
