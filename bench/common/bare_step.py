"""The bare optimizer step: a LoRA model wrapped for selective backprop and `lcsb_core.training.step.run_step` on
one batch, without the trainer around it. The reference the step-time, peer and trainer-overhead
benchmarks time against."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import torch

from lcsb_core.models.loading import load_base_model
from lcsb_core.training.config import LoraSettings, OptimSettings
from lcsb_core.training.lora import apply_lora
from lcsb_core.training.optim import build_optimizer
from lcsb_core.training.schedules import make_schedule
from lcsb_core.training.selective import LayerMode, SelectiveBackprop
from lcsb_core.training.step import run_step


def bare_model(folder: Path, quant: str, rank: int, device: torch.device):
    """(PeftModel, SelectiveBackprop, AdamW) for the bare step: the base at `folder` quantized as
    `quant`, LoRA rank `rank` (alpha 32, the seven projections), every layer wrapped for selective
    backprop (LCSB skip mode), AdamW at lr 1e-5 over all LoRA parameters."""
    base = load_base_model(folder, quantization=quant, device=device)
    model = apply_lora(base, LoraSettings(rank=rank), seed=0)
    sel = SelectiveBackprop(model, skip_mode=LayerMode.SKIP)
    params = [p for i in range(sel.num_layers) for p in sel.params_by_layer[i]]
    return model, sel, build_optimizer(params, OptimSettings(learning_rate=1e-5))


def random_batch(vocab_size: int, batch: int, seq: int, device: torch.device, seed: int = 0) -> dict:
    """input_ids, attention_mask (all ones) and labels (= input_ids: every token a target) [batch, seq],
    uniform random token ids from a generator seeded with `seed`."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab_size - 1, (batch, seq), generator=gen).to(device)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}


def token_options(token: str) -> tuple[str, int, bool]:
    """(the schedule token without its options, chunk MiB, recompute) of a token with `+` options, such as
    `topfull/4+chunk16+recompute`: `+chunkN` runs the chunked LM head with N MiB chunks
    (`TrainConfig.loss_chunk_mib`; 0, the whole head at once, without it), `+recompute` recomputes the
    layers below the top k on deeper steps (`LCSBSettings.recompute_deep`).

    Raises:
        ValueError: an unknown option, or N not a whole number."""
    base, *options = token.split("+")
    chunk, recompute = 0, False
    for option in options:
        if option == "recompute":
            recompute = True
        elif option.startswith("chunk"):
            chunk = int(option.removeprefix("chunk"))
        else:
            raise ValueError(f"unknown schedule token option +{option} in {token!r} (+chunkN, +recompute)")
    return base, chunk, recompute


def schedule_of(token: str, num_layers: int, fraction: float = 0.25):
    """The Schedule of a token `name[/full_every][-momentum-off][+option...]` (`token_options`; `topfull/4`,
    `full`, `cyclic`, `split` with its default deep_fraction) at k = `fraction` x `num_layers` (full: all layers)."""
    name, _, every = token_options(token)[0].removesuffix("-momentum-off").partition("/")
    return make_schedule(name, num_layers=num_layers, fraction=1.0 if name == "full" else fraction,
                         full_every=int(every or 4))


def bare_cycle(model, sel: SelectiveBackprop, opt, batch: dict, token: str, *, fraction: float = 0.25,
               checkpointing: bool = False) -> list[Callable[[], object]]:
    """One whole cycle of schedule `token` as bare steps: callable t runs `run_step` (forward, backward,
    clipping at 1.0, AdamW) on `batch` with the layers the schedule selects at its step t; skipped
    layers in the schedule's mode (LCSB skip or frozen), momentum for skipped layers unless the token
    ends in `-momentum-off`; the options of `token_options` (`+chunkN`, `+recompute`)."""
    sched = schedule_of(token, sel.num_layers, fraction)
    mode = LayerMode.SKIP if sched.identity_skip else LayerMode.FROZEN
    base, chunk_mib, recompute = token_options(token)
    momentum = not base.endswith("-momentum-off")

    def step(t: int) -> None:
        sel.skip_mode, sel.gradient_checkpointing = mode, checkpointing
        run_step(model, sel, opt, [batch], sched.layers_for_step(t), step=t, momentum_for_skipped=momentum,
                 max_grad_norm=1.0, deep_fraction=sched.deep_fraction, shallow=sched.shallow_layers(t),
                 loss_chunk_bytes=chunk_mib * 2**20,
                 recompute_top=sched.k if recompute else None)

    return [functools.partial(step, t) for t in range(sched.cycle_length)]


