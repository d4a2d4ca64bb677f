"""Checkpoints: the PEFT adapter plus everything needed to continue bit-for-bit (optimizer state,
step, RNG states, schedule state). A resumed run with the same config and seed reproduces the
uninterrupted one: data order is a pure function of (seed, epoch) and the micro-batch position is
derived from the step.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import torch
from torch import nn

from lcsb_core.errors import DivergenceError


def assert_finite_adapter(params: list[nn.Parameter], where: Path) -> None:
    """Raises DivergenceError when any LoRA parameter holds NaN/Inf (never save such an adapter)."""
    for p in params:
        if not torch.isfinite(p).all():
            raise DivergenceError(f"refusing to save {where}: the LoRA weights hold NaN/Inf")


def save_adapter(model: nn.Module, params: list[nn.Parameter], out_dir: Path) -> Path:
    """Write the PEFT adapter (`adapter_config.json` + `adapter_model.safetensors`) to `out_dir`.
    Embedding layers are never saved (LoRA adapts projections only and the vocabulary is never
    resized); asking PEFT to decide would make it look the base model up on the Hugging Face Hub."""
    assert_finite_adapter(params, out_dir)
    model.save_pretrained(out_dir, safe_serialization=True, save_embedding_layers=False)
    return out_dir


def save_checkpoint(out_dir: Path, *, model: nn.Module, params: list[nn.Parameter],
                    optimizer: torch.optim.Optimizer, step: int, schedule_state: dict | None) -> Path:
    """Adapter + `trainer_state.pt` in `out_dir` after `step` completed optimizer steps."""
    save_adapter(model, params, out_dir)
    state = {
        "step": step,
        "optimizer": optimizer.state_dict(),
        "lora": [p.detach().clone() for p in params],
        "schedule": schedule_state,
        "rng": {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None},
    }
    tmp = out_dir / "trainer_state.pt.tmp"
    torch.save(state, tmp)
    tmp.rename(out_dir / "trainer_state.pt")
    return out_dir


def load_checkpoint(ckpt_dir: Path, *, params: list[nn.Parameter], optimizer: torch.optim.Optimizer) -> dict:
    """Restore LoRA weights (exact tensors), optimizer and RNG states; returns the state dict
    (`step`, `schedule`)."""
    state = torch.load(ckpt_dir / "trainer_state.pt", map_location="cpu", weights_only=False)
    with torch.no_grad():
        for p, saved in zip(params, state["lora"], strict=True):
            p.copy_(saved.to(p.device))
    optimizer.load_state_dict(state["optimizer"])
    rng = state["rng"]
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    if rng.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    return state
