"""The public name of a base model: what a downloaded adapter records as its base
(`adapter_config.json`'s `base_model_name_or_path`, the adapter README's `base_model`), so the adapter
loads on another machine (`AutoPeftModelForCausalLM.from_pretrained`, llama.cpp's
`convert_lora_to_gguf`) and no local folder path leaves the machine that trained it. Torch-free: the
service's model catalog reads it too.

    public_model_id(Path("~/.cache/lcsb/models/SmolLM2-135M-Instruct"))  # "HuggingFaceTB/SmolLM2-135M-Instruct"
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from lcsb_core.models.catalog import CATALOG

_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}")
KNOWN_HUB_IDS = {e.name: e.hub_id for e in CATALOG.values()}


def public_model_id(path: str | os.PathLike[str]) -> str:
    """The Hugging Face Hub id of the model in the folder `path`, never a filesystem path.

    In order: the hub id its `config.json` records in `_name_or_path` (when it has the form `org/name`
    and is not a local path); the hub id of a catalog model by folder name (SmolLM2-135M-Instruct,
    gemma-3-270m: imported from their GGUF files); else the folder's name.
    """
    folder = Path(path)
    try:
        recorded = json.loads((folder / "config.json").read_text()).get("_name_or_path")
    except (OSError, ValueError, AttributeError):
        recorded = None
    if isinstance(recorded, str) and _HUB_ID.fullmatch(recorded) and not Path(recorded).expanduser().exists():
        return recorded
    return KNOWN_HUB_IDS.get(folder.name, folder.name)
