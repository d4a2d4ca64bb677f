"""LoRA adapters through PEFT, and structural lookup of decoder layers and their LoRA parameters.

Layers are found structurally, as PEFT's `check_target_module_exists` does: the decoder's `layers`
ModuleList, and for a LoRA module the index parsed from `.layers.<i>.` in its qualified name plus an
`isinstance(module, BaseTunerLayer)` check; never by substring-matching "lora".
"""

from __future__ import annotations

import re

import torch
from torch import nn

from lcsb_core.models.modules import decoder_layers
from lcsb_core.training.config import LoraSettings

_LAYER_INDEX = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def apply_lora(model: nn.Module, settings: LoraSettings, *, seed: int):
    """Wrap `model` in a PEFT `PeftModel` with one LoRA adapter ("default"); only LoRA parameters
    require grad. LoRA A is initialised from a generator seeded with `seed` (B starts at zero).

    Returns:
        peft.PeftModel
    """
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=settings.rank,
        lora_alpha=settings.alpha,  # type: ignore[arg-type]  # peft annotates int; the scale alpha/r is a float
        lora_dropout=settings.dropout,
        target_modules=list(settings.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        peft_model = get_peft_model(model, config)
    return peft_model


def lora_parameters_by_layer(model: nn.Module) -> dict[int, list[nn.Parameter]]:
    """Decoder-layer index -> the LoRA parameters inside it (lora_A/lora_B of every adapted module).

    Raises:
        ValueError: a LoRA module outside any decoder layer (its gradient would not be scheduled).
    """
    from peft.tuners.tuners_utils import BaseTunerLayer

    out: dict[int, list[nn.Parameter]] = {i: [] for i in range(len(decoder_layers(model)))}
    for name, module in model.named_modules():
        if not isinstance(module, BaseTunerLayer):
            continue
        match = _LAYER_INDEX.search(name + ".")
        if match is None:
            raise ValueError(f"LoRA module {name} is not inside a decoder layer")
        idx = int(match.group(1))
        for attr in module.adapter_layer_names:
            out[idx].extend(p for p in getattr(module, attr).parameters())
    return out


def adapter_is_identity(model: nn.Module) -> bool:
    """True when every LoRA B matrix (PEFT's `lora_B`, [out_features, r]) is zero, so that the adapted
    model computes exactly what its base model computes."""
    return all(not p.any() for name, p in model.named_parameters() if ".lora_B." in name)
