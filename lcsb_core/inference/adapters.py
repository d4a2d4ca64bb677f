"""An adapter folder's identity for the serving caches, torch-free: the SHA-256 of its weights and
config (`adapter_hash`), computed once where the inference worker unpacks the adapter and passed with
each request (`AdapterRef`), so a chat request does not re-read and re-hash the weights."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

ADAPTER_WEIGHTS = "adapter_model.safetensors"
MIB = 2**20


def adapter_hash(adapter_dir: Path) -> str:
    """SHA-256 (hex) of the adapter's weights and config: the cache key, so the same content shares one entry."""
    h = hashlib.sha256()
    for name in ("adapter_config.json", ADAPTER_WEIGHTS):
        h.update((adapter_dir / name).read_bytes())
    return h.hexdigest()


@dataclass(frozen=True)
class AdapterRef:
    """A served adapter: its PEFT folder and `sha256`, the hex SHA-256 of its weights and config
    (`adapter_hash`), the key both engines cache it by. Made once where the adapter is unpacked
    (`AdapterRef.of`, or the inference worker's unpacked folder, which stores the digest beside it), then
    passed with every request."""

    path: Path
    sha256: str

    @classmethod
    def of(cls, path: Path) -> AdapterRef:
        """The reference of the adapter folder `path`, hashing its files now.

        Raises:
            OSError: `path` lacks `adapter_config.json` or the weights file.
        """
        return cls(path, adapter_hash(path))
