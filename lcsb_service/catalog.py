"""Base models this installation can train: every sub-folder of `Settings.resolved_model_dirs` that
holds a Hugging Face `config.json` of a supported decoder (Llama/Qwen2/Gemma-style) and a
`tokenizer.json`. Read from the files only (no torch): layer count, parameter count and limits. A
folder named like a shipped model (`lcsb_core.models.catalog`: SmolLM2-135M-Instruct, gemma-3-270m)
also shows that entry's package, GGUF file and hash, and license.

    models = list_models(settings.resolved_model_dirs)
    info = find_model(settings.resolved_model_dirs, "SmolLM2-135M-Instruct")   # or None
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from lcsb_core.models.catalog import CatalogEntry, catalog_entry
from lcsb_core.models.identity import public_model_id
from lcsb_core.models.shapes import parameter_count
from lcsb_core.training.config import QUANTIZATIONS

_MODEL_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,199}")  # a folder name, never a path
REQUIRED_KEYS = ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "vocab_size")


@dataclass(frozen=True)
class ModelInfo:
    """One trainable base model. `config` is its config.json; `checkpoint_bytes` the size of its weight
    files; `context_length` its context (tokens, `max_position_embeddings`)."""

    name: str
    path: Path
    config: dict
    checkpoint_bytes: int
    created: int
    architectures: list[str] = field(default_factory=list)

    @property
    def num_layers(self) -> int:
        return int(self.config["num_hidden_layers"])

    @property
    def hub_id(self) -> str:
        """The public Hugging Face Hub id trained adapters name as their base (never the folder path)."""
        return public_model_id(self.path)

    @property
    def catalog(self) -> CatalogEntry | None:
        """The shipped model this folder holds (by folder name), or None for a user-supplied folder."""
        return catalog_entry(self.name)

    @property
    def has_chat_template(self) -> bool:
        """Whether its tokenizer can render chat data: a `chat_template.jinja` (or `.json`) file, or a
        `chat_template` in `tokenizer_config.json` (where transformers saves it)."""
        if any((self.path / f).is_file() for f in ("chat_template.jinja", "chat_template.json")):
            return True
        try:
            return bool(json.loads((self.path / "tokenizer_config.json").read_text()).get("chat_template"))
        except (OSError, ValueError, AttributeError):
            return False

    @property
    def context_length(self) -> int:
        """The longest sequence the model takes (tokens): `max_position_embeddings`, else 2048."""
        return int(self.config.get("max_position_embeddings") or 2048)

    @property
    def num_parameters(self) -> int:
        """Parameters of the decoder (attention + MLP projections, norms, embeddings, LM head)."""
        return sum(parameter_count(self.config))


def _read(folder: Path) -> ModelInfo | None:
    config_path = folder / "config.json"
    if not config_path.is_file() or not (folder / "tokenizer.json").is_file():
        return None
    try:
        config = json.loads(config_path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict) or any(not isinstance(config.get(k), int) for k in REQUIRED_KEYS):
        return None
    weights = list(folder.glob("*.safetensors")) or list(folder.glob("*.bin"))
    return ModelInfo(name=folder.name, path=folder, config=config,
                     checkpoint_bytes=sum(f.stat().st_size for f in weights),
                     created=int(config_path.stat().st_mtime), architectures=list(config.get("architectures") or []))


def list_models(model_dirs: list[Path]) -> list[ModelInfo]:
    """Trainable models under `model_dirs`, sorted by name (the first folder wins on a name clash)."""
    found: dict[str, ModelInfo] = {}
    for root in model_dirs:
        if not root.is_dir():
            continue
        for folder in sorted(p for p in root.iterdir() if p.is_dir()):
            info = _read(folder)
            if info is not None and info.name not in found:
                found[info.name] = info
    return [found[k] for k in sorted(found)]


def find_model(model_dirs: list[Path], name: str) -> ModelInfo | None:
    """The model called `name`, or None."""
    if not _MODEL_NAME.fullmatch(name or ""):
        return None
    for root in model_dirs:
        info = _read(root / name)
        if info is not None:
            return info
    return None


def model_object(info: ModelInfo) -> dict:
    """The OpenAI `model` object with this service's extra fields. Catalog models add `package`,
    `package_version`, `gguf_file`, `gguf_sha256`, `license` and `license_url` (None otherwise), and
    their measured `num_parameters`; `max_seq_len` and `context_length` are the context in tokens."""
    entry = info.catalog
    return {"id": info.name, "object": "model", "created": info.created, "owned_by": "system",
            "num_layers": info.num_layers,
            "num_parameters": entry.num_parameters if entry else info.num_parameters,
            "max_seq_len": info.context_length, "context_length": info.context_length,
            "architectures": info.architectures, "hub_id": info.hub_id,
            "has_chat_template": info.has_chat_template, "quantizations": list(QUANTIZATIONS),
            "package": entry.package if entry else None,
            "package_version": entry.package_version if entry else None,
            "gguf_file": entry.gguf_file if entry else None, "gguf_sha256": entry.gguf_sha256 if entry else None,
            "license": entry.license if entry else None, "license_url": entry.license_url if entry else None}
