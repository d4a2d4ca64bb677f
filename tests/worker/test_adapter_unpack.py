"""A served adapter is hashed once, when the inference worker unpacks it (issue 51): `adapter_folder`
extracts a stored adapter archive once per machine and writes its SHA-256 beside it; later requests read
the digest (`AdapterRef`), and neither engine re-reads and re-hashes the weights on a chat request."""

from __future__ import annotations

import types

import pytest

import lcsb_core.inference.adapters as adapters_module
import worker.inference.serving as serving
from lcsb_core.inference import AdapterRef, adapter_hash
from lcsb_service.artifacts import _archive
from lcsb_service.storage import Storage


def make_adapter(folder, weights: bytes):
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text('{"r": 4}')
    (folder / "adapter_model.safetensors").write_bytes(weights)
    return folder


@pytest.fixture
def ctx(tmp_path):
    storage = Storage(f"file://{tmp_path / 'store'}")
    return types.SimpleNamespace(storage=storage, settings=types.SimpleNamespace(data_dir=tmp_path / "data"))


def test_the_adapter_is_hashed_once_at_unpack_and_read_back_after(ctx, tmp_path, monkeypatch):
    source = make_adapter(tmp_path / "src" / "adapter", b"weights-one" * 100)
    _archive(source, "jobs/j1/adapter.tar.gz", ctx.storage)
    calls = []
    real = adapters_module.adapter_hash
    monkeypatch.setattr(serving, "adapter_hash", lambda path: calls.append(path) or real(path))

    first = serving.adapter_folder(ctx, "jobs/j1/adapter.tar.gz")
    assert first.sha256 == adapter_hash(source) and (first.path / "adapter_model.safetensors").is_file()
    assert len(calls) == 1
    for _ in range(3):   # requests after the first: the digest is read, the weights are not hashed again
        assert serving.adapter_folder(ctx, "jobs/j1/adapter.tar.gz") == first
    assert len(calls) == 1

    other = make_adapter(tmp_path / "src2" / "adapter", b"weights-two" * 100)
    _archive(other, "jobs/j2/adapter.tar.gz", ctx.storage)
    second = serving.adapter_folder(ctx, "jobs/j2/adapter.tar.gz")
    assert second.sha256 == adapter_hash(other) != first.sha256 and len(calls) == 2


def test_a_folder_unpacked_before_the_digest_was_stored_gets_it_once(ctx, tmp_path, monkeypatch):
    source = make_adapter(tmp_path / "src" / "adapter", b"w" * 64)
    _archive(source, "k", ctx.storage)
    ref = serving.adapter_folder(ctx, "k")
    (ref.path.parent / serving.SHA_FILE).unlink()   # as an older worker left it
    calls = []
    real = adapters_module.adapter_hash
    monkeypatch.setattr(serving, "adapter_hash", lambda path: calls.append(path) or real(path))
    assert serving.adapter_folder(ctx, "k") == ref and serving.adapter_folder(ctx, "k") == ref
    assert len(calls) == 1


def test_the_engines_key_their_caches_by_the_reference_and_never_hash(tmp_path, monkeypatch):
    """`AdapterRef.of` hashes; the llama.cpp cache's file name and the PEFT cache's adapter name come from
    the reference's digest alone (a planted digest shows it: the weights' own hash is not taken)."""
    from lcsb_core.inference.llama_engine import GGUFAdapterCache

    folder = make_adapter(tmp_path / "a", b"x" * 32)
    assert AdapterRef.of(folder) == AdapterRef(folder, adapter_hash(folder))
    monkeypatch.setattr(adapters_module, "adapter_hash", lambda path: pytest.fail("hashed on a request"))
    converted = []
    cache = GGUFAdapterCache(None, tmp_path / "gguf", lambda src, out: converted.append(src) or out.write_bytes(b"g"),
                             max_count=2, max_mib=1)
    path = cache.gguf_of(AdapterRef(folder, "planted"))
    assert path.name == "planted.gguf" and converted == [folder]
    assert cache.gguf_of(AdapterRef(folder, "planted")) == path and converted == [folder]
