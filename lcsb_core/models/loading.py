"""Load a base causal LM and its tokenizer from a local Hugging Face folder (or the default
SmolLM2-135M-Instruct, imported from its GGUF once), quantized as asked.

Nothing is downloaded: `local_files_only=True` everywhere.
"""

from __future__ import annotations

from pathlib import Path

import torch

from lcsb_core.errors import ModelLoadError
from lcsb_core.models.catalog import CATALOG, catalog_entry
from lcsb_core.models.gguf_import import ensure_model
from lcsb_core.models.identity import public_model_id
from lcsb_core.models.quantization import base_dtype, disable_cpu_weight_repacking, quantization_config

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral", "gemma", "gemma2", "gemma3_text", "phi3")


def resolve_device(device: str) -> torch.device:
    """`auto` -> cuda if available else cpu.

    Raises:
        ModelLoadError: cuda asked for on a machine without one.
    """
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError(f"model.device is {device!r} but no CUDA device is visible; use 'cpu' or 'auto'")
    return dev


def resolve_model_path(name_or_path: str) -> Path:
    """Folder of the base model: a catalog name or hub id (`SmolLM2-135M-Instruct`, `gemma-3-270m`)
    maps to its imported cache (imported on first use), anything else is a local folder.

    Raises:
        ModelLoadError: the folder or its config.json is missing, or a catalog model cannot be imported.
    """
    if catalog_entry(name_or_path) is not None:
        return ensure_model(name_or_path)
    path = Path(name_or_path).expanduser()
    if not path.is_dir():
        raise ModelLoadError(f"model {name_or_path!r}: no such folder; give a local Hugging Face model "
                             f"folder or a catalog model ({', '.join(CATALOG)})")
    if not (path / "config.json").is_file():
        raise ModelLoadError(f"model folder {path} has no config.json: is it a Hugging Face model folder?")
    return path


def load_tokenizer(path: Path, *, require_chat_template: bool = False):
    """Tokenizer of the model at `path`; pad token falls back to eos.

    Raises:
        ModelLoadError: no tokenizer, or no chat template when `require_chat_template` (chat data).
    """
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as exc:
        raise ModelLoadError(f"cannot load a tokenizer from {path}: {exc}") from exc
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    if require_chat_template:
        from lcsb_core.chat_tokens import chat_template_error

        if (message := chat_template_error(tok)) is not None:
            raise ModelLoadError(message)
    return tok


def load_base_model(path: Path, *, quantization: str, device: torch.device) -> torch.nn.Module:
    """Causal LM at `path`, quantized (`nf4`) or in bf16/fp32, on `device`, in train mode with all base
    parameters frozen. Its `name_or_path` is the model's public hub id (`identity.public_model_id`),
    not the folder, so adapters trained on it name a base that exists on other machines.

    Raises:
        ModelLoadError: unsupported architecture or unreadable weights.
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(path, local_files_only=True)
    if config.model_type not in SUPPORTED_MODEL_TYPES:
        raise ModelLoadError(f"model type {config.model_type!r} is not supported; supported decoder "
                             f"architectures: {', '.join(SUPPORTED_MODEL_TYPES)}")
    kwargs = dict(dtype=base_dtype(quantization, device), local_files_only=True, attn_implementation="sdpa")
    qconf = quantization_config(quantization, device)
    if qconf is not None:
        kwargs.update(quantization_config=qconf, device_map={"": device})
    try:
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except Exception as exc:
        raise ModelLoadError(f"cannot load weights from {path}: {exc}") from exc
    if qconf is None:
        model.to(device)  # type: ignore[arg-type]  # transformers' stub types `to` as its decorator's wrapper
    else:
        disable_cpu_weight_repacking(model)
    model.config.use_cache = False
    model.name_or_path = model.config.name_or_path = public_model_id(path)  # read by PEFT's save_pretrained
    for p in model.parameters():
        p.requires_grad_(False)
    model.train()
    return model
