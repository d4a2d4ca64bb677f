"""The measured peak of one training configuration of the real SmolLM2-135M on CPU, beside
`lcsb_core.training.memory`'s estimate for it: a fresh process loads what a worker's training process loads,
runs one cycle of the schedule's steps on random token batches, and reports its VmHWM. One source for
tests/core/test_memory.py (the estimate's band) and bench/memory_fit.py (the coefficients' fit).

A configuration is a dict: `schedule`, `k` (None for `full`), `batch`, `seq` (tokens per row), `ckpt`
(gradient checkpointing), `quant` (`nf4` or `fp32`), `rank` (LoRA rank) and optionally `chunk_mib` (the
chunked LM head's chunk, `TrainConfig.loss_chunk_mib`; 0 or absent: unchunked) and `recompute` (True:
`LCSBSettings.recompute_deep`; absent: False)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lcsb_core.training.memory import MemoryEstimate

PROBE = r"""
import json, sys, torch
# The estimate predicts a worker's training process, so the probe loads what that process loads
# (the service's database, storage and reporting modules, the trainer and its plots) before measuring.
import lcsb_service.jobspec, lcsb_service.models, lcsb_service.db, lcsb_service.storage  # noqa: E401
import worker.training.reporter, worker.training.divergence, worker.training.datacheck  # noqa: E401
import lcsb_core.training.trainer, lcsb_core.training.plots  # noqa: E401
from lcsb_core.training.config import LoraSettings, OptimSettings
from lcsb_core.training.history import UpdateTracker
from lcsb_core.training.lora import apply_lora
from lcsb_core.training.memory_probe import current_mib, peak_mib
from lcsb_core.models.loading import load_base_model, resolve_model_path
from lcsb_core.training.optim import build_optimizer
from lcsb_core.training.schedules import make_schedule
from lcsb_core.training.selective import LayerMode, SelectiveBackprop
from lcsb_core.training.step import run_step
spec = json.loads(sys.argv[1])
model = apply_lora(load_base_model(resolve_model_path("SmolLM2-135M-Instruct"), quantization=spec["quant"],
                                   device=torch.device("cpu")), LoraSettings(rank=spec["rank"]), seed=0)
sched = make_schedule(spec["schedule"], num_layers=30, k=spec["k"])
sel = SelectiveBackprop(model, skip_mode=LayerMode.SKIP if sched.identity_skip else LayerMode.FROZEN,
                        gradient_checkpointing=spec["ckpt"])
params = [p for i in range(sel.num_layers) for p in sel.params_by_layer[i]]
opt, tracker = build_optimizer(params, OptimSettings(learning_rate=1e-4)), UpdateTracker(sel.params_by_layer)
ids = torch.randint(3, 49000, (spec["batch"], spec["seq"]), generator=torch.Generator().manual_seed(0))
batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}
loaded_peak, resident = peak_mib(torch.device("cpu")), current_mib(torch.device("cpu"))
for step in range(sched.cycle_length):
    tracker.snapshot()
    run_step(model, sel, opt, [batch], sched.layers_for_step(step), step=step, momentum_for_skipped=True,
             max_grad_norm=1.0, deep_fraction=sched.deep_fraction, shallow=sched.shallow_layers(step),
             loss_chunk_bytes=spec.get("chunk_mib", 0) * 2**20,
             recompute_top=sched.k if spec.get("recompute") else None)
dtype = model.get_input_embeddings().weight.dtype
print(json.dumps({"peak_mib": peak_mib(torch.device("cpu")), "loading_peak_mib": loaded_peak,
                  "resident_before_steps_mib": resident, "max_backprop_layers": sched.max_backprop_layers(),
                  "compute_dtype": "fp32" if dtype == torch.float32 else "bf16"}))
"""


def config_id(spec: dict[str, Any]) -> str:
    """A configuration's name in test ids and result rows, e.g. `tail-k8-b4x256-ckpt0-nf4-chunk16`."""
    return (f"{spec['schedule']}-k{spec['k']}-b{spec['batch']}x{spec['seq']}-ckpt{int(spec['ckpt'])}-"
            f"{spec['quant']}-chunk{spec.get('chunk_mib', 0)}" + ("-recompute" if spec.get("recompute") else ""))


def measure_and_estimate(spec: dict[str, Any], *, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run the probe for `spec` in a fresh Python process (with `env` added to this process's environment,
    e.g. `LCSB_CPU_FP32_COMPUTE=1`) and estimate the same configuration (`estimate`).

    Returns: the probe's fields (`peak_mib`, `loading_peak_mib`, `resident_before_steps_mib`,
    `max_backprop_layers`, `compute_dtype`) plus `estimate` (`MemoryEstimate.to_dict()`, MiB).

    Raises:
        subprocess.CalledProcessError: the probe failed (its stderr is in the exception).
    """
    from lcsb_core.models.gguf_import import ensure_default_model

    folder = ensure_default_model()
    out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(spec)], capture_output=True, text=True,
                         check=True, env={**os.environ, **(env or {})})
    probe = json.loads(out.stdout.strip().splitlines()[-1])
    return {**probe, "estimate": estimate(spec, probe["max_backprop_layers"], probe["compute_dtype"],
                                          folder=folder).to_dict()}


def estimate(spec: dict[str, Any], max_backprop_layers: int, compute_dtype: str, *,
             folder: Path | None = None) -> MemoryEstimate:
    """`lcsb_core.training.memory.estimate_peak_mib` for configuration `spec` of SmolLM2-135M whose deepest step
    back-propagates `max_backprop_layers` in `compute_dtype` (`bf16` or `fp32`), as the probe ran it;
    `folder` is the model folder when the caller has it (else `ensure_default_model` finds it).

    Raises:
        ModelLoadError: the model folder cannot be found (`ensure_default_model`)."""
    from lcsb_core.models.gguf_import import ensure_default_model
    from lcsb_core.training.config import LoraSettings
    from lcsb_core.training.memory import depth_split_for, estimate_peak_mib
    from lcsb_core.training.schedules import make_schedule

    folder = folder or ensure_default_model()
    config = json.loads((folder / "config.json").read_text())
    split = depth_split_for(make_schedule(spec["schedule"], num_layers=config["num_hidden_layers"], k=spec["k"]),
                            batch_size=spec["batch"], accumulation_steps=1)
    return estimate_peak_mib(config, quantization=spec["quant"], lora_rank=spec["rank"], batch_size=spec["batch"],
                             target_modules=LoraSettings.target_modules, seq_len=spec["seq"],
                             backprop_layers=max_backprop_layers, depth_split=split,
                             gradient_checkpointing=spec["ckpt"], loss_chunk_bytes=spec.get("chunk_mib", 0) * 2**20,
                             recompute_top=spec["k"] if spec.get("recompute") else None, device="cpu",
                             compute_dtype=compute_dtype,
                             checkpoint_bytes=(folder / "model.safetensors").stat().st_size)


#: The configurations whose estimate tests/core/test_memory.py holds to its band, unchunked; `topfull`
#: (k 8 = a quarter of 30, a full backward every 4th step) is the product default, here also with
#: `recompute_deep`.
CONFIGS: list[dict[str, Any]] = [
    dict(schedule="full", k=None, batch=2, seq=128, ckpt=False, quant="nf4", rank=16),
    dict(schedule="cyclic", k=8, batch=4, seq=256, ckpt=False, quant="nf4", rank=16),
    dict(schedule="cyclic", k=8, batch=4, seq=256, ckpt=True, quant="nf4", rank=16),
    dict(schedule="freeze", k=8, batch=4, seq=256, ckpt=False, quant="nf4", rank=16),
    dict(schedule="top", k=8, batch=4, seq=256, ckpt=False, quant="nf4", rank=16),
    dict(schedule="tail", k=8, batch=4, seq=256, ckpt=False, quant="nf4", rank=16),
    dict(schedule="split", k=8, batch=4, seq=256, ckpt=False, quant="nf4", rank=16),
    dict(schedule="topfull", k=8, batch=4, seq=256, ckpt=False, quant="nf4", rank=16),
    dict(schedule="topfull", k=8, batch=4, seq=256, ckpt=False, quant="nf4", rank=16, recompute=True),
    dict(schedule="full", k=None, batch=4, seq=256, ckpt=False, quant="nf4", rank=16),
]
UNQUANTIZED: dict[str, Any] = dict(schedule="full", k=None, batch=2, seq=128, ckpt=False, quant="fp32", rank=8)
