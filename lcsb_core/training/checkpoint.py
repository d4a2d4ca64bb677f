"""Checkpoints: the PEFT adapter plus everything needed to continue bit-for-bit (optimizer state,
step, RNG states, schedule state). A resumed run with the same config and seed reproduces the
uninterrupted one: data order is a pure function of (seed, epoch) and the micro-batch position is
derived from the step.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np
import torch
from torch import nn

from lcsb_core.errors import CheckpointError, DivergenceError

if TYPE_CHECKING:
    from peft import PeftModel


def assert_finite_adapter(params: list[nn.Parameter], where: Path) -> None:
    """Raises DivergenceError when any LoRA parameter holds NaN/Inf (never save such an adapter)."""
    for p in params:
        if not torch.isfinite(p).all():
            raise DivergenceError(f"refusing to save {where}: the LoRA weights hold NaN/Inf")


CHAT_TEMPLATE_FILE = "chat_template.jinja"
"""The chat template a chat job trained with, saved beside its adapter (transformers' file name for a
tokenizer's template since 4.47), so serving, exports and a downloaded adapter render prompts as training did."""


def save_adapter(model: nn.Module, params: list[nn.Parameter], out_dir: Path, *,
                 chat_template: str | None = None) -> Path:
    """Write the PEFT adapter (`adapter_config.json` + `adapter_model.safetensors`) to `out_dir`, and
    `chat_template` (the Jinja template chat data was rendered with; None for text or prompt/completion
    data) as `CHAT_TEMPLATE_FILE`. Embedding layers are never saved (LoRA adapts projections only and the
    vocabulary is never resized); asking PEFT to decide would make it look the base model up on the
    Hugging Face Hub.

    Raises:
        DivergenceError: a LoRA parameter holds NaN/Inf (nothing is written).
    """
    assert_finite_adapter(params, out_dir)
    cast("PeftModel", model).save_pretrained(str(out_dir), safe_serialization=True, save_embedding_layers=False)
    if chat_template:
        (out_dir / CHAT_TEMPLATE_FILE).write_text(chat_template, encoding="utf-8")
    return out_dir


CHECKPOINT_FORMAT = 2
"""`trainer_state.pt` layout: 2 keys the LoRA tensors by parameter name; 1 (before 2026-11-30) was a
positional list, which cannot be matched to the parameters safely and is refused."""


def save_checkpoint(out_dir: Path, *, model: nn.Module, params: list[nn.Parameter], names: list[str],
                    optimizer: torch.optim.Optimizer, step: int, schedule_state: dict | None,
                    selection_state: dict | None = None, chat_template: str | None = None) -> Path:
    """Adapter + `trainer_state.pt` in `out_dir` after `step` completed optimizer steps. `names` are the
    qualified names of `params` (same order): the LoRA tensors are stored by name. `selection_state`:
    `SelectionWatch.state_dict()` (the best evaluation so far, early stopping's count). `chat_template`:
    as `save_adapter`."""
    save_adapter(model, params, out_dir, chat_template=chat_template)
    state = {
        "format": CHECKPOINT_FORMAT,
        "step": step,
        "optimizer": optimizer.state_dict(),
        "lora": {name: p.detach().clone() for name, p in zip(names, params, strict=True)},
        "schedule": schedule_state,
        "selection": selection_state,
        "rng": {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None},
    }
    tmp = out_dir / "trainer_state.pt.tmp"
    torch.save(state, tmp)
    tmp.rename(out_dir / "trainer_state.pt")
    return out_dir


def load_checkpoint(ckpt_dir: Path, *, params: list[nn.Parameter], names: list[str],
                    optimizer: torch.optim.Optimizer) -> dict:
    """Restore LoRA weights (exact tensors, matched by name), optimizer and RNG states; returns the
    state dict (`step`, `schedule`, `selection`: None before it existed).

    Raises:
        CheckpointError: the checkpoint has the older positional layout, or its LoRA tensors do not
            match this model's (names or shapes differ: another model, rank or target modules).
    """
    state = torch.load(ckpt_dir / "trainer_state.pt", map_location="cpu", weights_only=False)
    saved = state.get("lora")
    if state.get("format") != CHECKPOINT_FORMAT or not isinstance(saved, dict):
        raise CheckpointError(f"checkpoint {ckpt_dir.name} has an older layout (LoRA tensors by position, "
                              f"format {state.get('format', 1)}) that this version cannot resume; "
                              "start the training again")
    missing, unexpected = sorted(set(names) - set(saved)), sorted(set(saved) - set(names))
    if missing or unexpected:
        raise CheckpointError(f"checkpoint {ckpt_dir.name} does not match this model's LoRA parameters "
                              f"({len(missing)} missing, e.g. {missing[:1]}; {len(unexpected)} unexpected, "
                              f"e.g. {unexpected[:1]}): resume with the config that wrote it")
    with torch.no_grad():
        for name, p in zip(names, params, strict=True):
            if saved[name].shape != p.shape:
                raise CheckpointError(f"checkpoint {ckpt_dir.name}: {name} has shape {tuple(saved[name].shape)}, "
                                      f"the model's is {tuple(p.shape)}: resume with the config that wrote it")
            p.copy_(saved[name].to(p.device))
    optimizer.load_state_dict(state["optimizer"])
    rng = state["rng"]
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    if rng.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    return state
