"""The peer a user would run instead of our trainer, as the peer benchmarks build it: the NF4 base loaded
by transformers with bitsandbytes' `BitsAndBytesConfig`, a fresh PEFT LoRA over it, and one optimizer step
of a Hugging Face `Trainer` (or a subclass such as TRL's `DPOTrainer`) called directly: the body of its inner
loop. Used by bench/peer.py (`transformers.Trainer`) and bench/dpo_step.py (TRL's `DPOTrainer`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from lcsb_core.models.quantization import base_dtype, quantization_config
from lcsb_core.training.config import LoraSettings


def peft_peer_model(folder: Path, quant: str, rank: int, device: torch.device):
    """The base at `folder` quantized as `quant` (`quantization_config`, `base_dtype`; SDPA attention) with
    `peft.get_peft_model`'s LoRA: rank `rank`, our default alpha and the seven projections, no dropout, no
    bias, no `prepare_model_for_kbit_training` (whose defaults turn on gradient checkpointing)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(
        folder, quantization_config=quantization_config(quant, device), dtype=base_dtype(quant, device),
        device_map={"": device} if quant == "nf4" else None, attn_implementation="sdpa", local_files_only=True)
    if quant != "nf4":
        base.to(device)  # type: ignore[arg-type]  # transformers types `to` through a decorator as (model)
    lora = LoraSettings(rank=rank)
    return get_peft_model(base, LoraConfig(r=rank, lora_alpha=int(lora.alpha), lora_dropout=0.0, bias="none",
                                           target_modules=list(lora.target_modules), task_type="CAUSAL_LM"))


def inner_loop_step(trainer: Any, steps: int, batch: dict, device: torch.device) -> Callable[[], None]:
    """A callable running one optimizer step of `trainer` on `batch`: `training_step` (forward, loss,
    `accelerator.backward`), `_clip_grad_norm`, optimizer and schedule step, gradients cleared (what the
    Trainer does between `on_step_begin` and `on_step_end`). The model, optimizer and a schedule of `steps`
    steps are set up by the Trainer's own `_prepare_for_training`, the batch's item count by its
    `get_batch_samples` (None for a batch without `labels`, such as TRL's preference collation).

    Raises:
        RuntimeError: the Trainer built no optimizer or schedule.
    """
    wrapped, _ = trainer._prepare_for_training(steps, None, None)
    trainer.current_gradient_accumulation_steps = 1
    _, num_items = trainer.get_batch_samples(iter([batch]), 1, device)
    optimizer, scheduler = trainer.optimizer, trainer.lr_scheduler
    if optimizer is None or scheduler is None:
        raise RuntimeError("Trainer._prepare_for_training built no optimizer or schedule")

    def step() -> None:
        trainer.training_step(wrapped, batch, num_items)
        trainer._clip_grad_norm(wrapped)
        optimizer.step()
        scheduler.step()
        wrapped.zero_grad()

    return step
