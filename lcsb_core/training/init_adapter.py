"""Start a run from another run's adapter (`TrainConfig.init_adapter`): continue training a model.

    start = initialise_from(cfg, model=m, params=ps, names=ns, optimizer=opt, schedule=sch)  # before step 1

Weights only (the default, as OpenAI's "fine-tune a fine-tuned model" and Together's `from_checkpoint`
do): the LoRA tensors of the adapter folder (`adapter_model.safetensors`) replace the fresh adapter's;
the optimizer, learning-rate schedule and data order start afresh, so the run is a new run on a
trained adapter. With `init_optimizer_state` the folder must be a checkpoint (`trainer_state.pt`): the
run carries on the one that wrote it (AdamW moments, RNG, layer-schedule state and step), so N steps
then M more in a new run folder end with the adapter of one run of N + M steps (same data order:
a pure function of seed, epoch and step; see `lcsb_core.training.checkpoint`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lcsb_core.errors import CheckpointError, ConfigError
from lcsb_core.training.checkpoint import load_checkpoint
from lcsb_core.training.config import LoraSettings, TrainConfig

ADAPTER_CONFIG, ADAPTER_WEIGHTS, TRAINER_STATE = "adapter_config.json", "adapter_model.safetensors", "trainer_state.pt"


def check_adapter_shape(folder: Path, lora: LoraSettings) -> dict[str, Any]:
    """The adapter's `adapter_config.json`, after checking that its LoRA shape is `lora`'s.

    Raises:
        ConfigError: `init_adapter` (no adapter in `folder`), or `lora.rank` / `lora.alpha` /
            `lora.target_modules` (the adapter's value differs; the message gives both).
    """
    try:
        saved = json.loads((folder / ADAPTER_CONFIG).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError("init_adapter", f"no readable PEFT adapter in {folder.name} ({ADAPTER_CONFIG}: "
                          f"{type(exc).__name__})") from exc
    theirs = {"lora.rank": saved.get("r"), "lora.alpha": float(saved.get("lora_alpha") or 0),
              "lora.target_modules": sorted(saved.get("target_modules") or [])}
    ours = {"lora.rank": lora.rank, "lora.alpha": float(lora.alpha), "lora.target_modules": sorted(lora.target_modules)}
    for name, value in ours.items():
        if theirs[name] != value:
            raise ConfigError(name, f"is {value!r}, but the adapter to continue from ({{init_adapter}}) has "
                                    f"{theirs[name]!r}: a continued run keeps its adapter's shape",
                              mentions=("init_adapter",))
    return saved


def load_adapter_weights(folder: Path, model: nn.Module) -> int:
    """Copy the LoRA tensors of `folder/adapter_model.safetensors` into `model` (a PeftModel with
    one adapter); returns how many tensors were loaded.

    Raises:
        ConfigError: `init_adapter`: a tensor is missing, unexpected or of another shape.
    """
    from peft.utils import get_peft_model_state_dict, set_peft_model_state_dict
    from safetensors.torch import load_file

    saved = load_file(str(folder / ADAPTER_WEIGHTS))
    expected = {k: tuple(v.shape) for k, v in get_peft_model_state_dict(model).items()}
    missing, unexpected = sorted(set(expected) - set(saved)), sorted(set(saved) - set(expected))
    wrong = sorted(k for k in set(expected) & set(saved) if tuple(saved[k].shape) != expected[k])
    if missing or unexpected or wrong:
        example = (missing or unexpected or wrong)[0]
        raise ConfigError("init_adapter", f"{folder.name} does not fit this model's LoRA parameters "
                          f"({len(missing)} missing, {len(unexpected)} unexpected, {len(wrong)} of another "
                          f"shape, e.g. {example}): it was trained on another base model or LoRA shape")
    with torch.no_grad():
        set_peft_model_state_dict(model, saved)
    return len(saved)


def initialise_from(cfg: TrainConfig, *, model: nn.Module, params: list[nn.Parameter], names: list[str],
                    optimizer: torch.optim.Optimizer, schedule: Any, total_steps: int) -> int:
    """Load `cfg.init_adapter` into a freshly set-up trainer, before its first step; returns the step
    the run starts at (0 for weights only; the checkpoint's step with `cfg.init_optimizer_state`).
    A config without `init_adapter` returns 0 and changes nothing.

    Raises:
        ConfigError: naming `init_adapter` (missing folder or trainer state, tensors that do not fit),
            a `lora.*` field (another shape), or `max_steps` (nothing left to train after the
            checkpoint's step).
    """
    if not cfg.init_adapter:
        return 0
    folder = Path(cfg.init_adapter)
    check_adapter_shape(folder, cfg.lora)
    if not cfg.init_optimizer_state:
        load_adapter_weights(folder, model)
        return 0
    if not (folder / TRAINER_STATE).is_file():
        raise ConfigError("init_optimizer_state", f"needs a checkpoint with {TRAINER_STATE}, and {folder.name} "
                          "has none (a final adapter holds weights only): continue with the weights alone")
    try:
        state = load_checkpoint(folder, params=params, names=names, optimizer=optimizer)
    except CheckpointError as exc:
        raise ConfigError("init_adapter", str(exc)) from exc
    schedule.load_state_dict(state.get("schedule"))
    start = int(state["step"])
    if start >= total_steps:
        raise ConfigError("max_steps", f"is {total_steps}, but the checkpoint to carry on ({{init_adapter}}) is "
                          f"already at step {start}: with init_optimizer_state the run counts the parent's steps",
                          mentions=("init_adapter",))
    return start
