"""The memory estimate bounds the measured peak (VmHWM of a fresh process that loads what a worker's
training process loads) on CPU, for a few configurations of the real SmolLM2-135M: at most 20 % under,
at most 60 % over (see `test_estimate_bounds_the_measured_peak`)."""

import json
import subprocess
import sys

import pytest

from lcsb_core.config import LoraSettings
from lcsb_core.memory import depth_split_for, estimate_peak_mib
from lcsb_core.models.gguf_import import ensure_default_model
from lcsb_core.schedules import make_schedule

pytestmark = pytest.mark.integration

PROBE = r"""
import json, sys, torch
# The estimate predicts a worker's training process, so the probe loads what that process loads
# (the service's database, storage and reporting modules, the trainer and its plots) before measuring.
import lcsb_service.jobspec, lcsb_service.models, lcsb_service.db, lcsb_service.storage  # noqa: E401
import worker.training.reporter, worker.training.divergence, worker.training.datacheck  # noqa: E401
import lcsb_core.trainer, lcsb_core.plots  # noqa: E401
from lcsb_core.config import LoraSettings, OptimSettings
from lcsb_core.history import UpdateTracker
from lcsb_core.lora import apply_lora
from lcsb_core.memory_probe import peak_mib
from lcsb_core.models.loading import load_base_model, resolve_model_path
from lcsb_core.optim import build_optimizer
from lcsb_core.schedules import make_schedule
from lcsb_core.selective import LayerMode, SelectiveBackprop
from lcsb_core.step import run_step
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
for step in range(sched.cycle_length):
    tracker.snapshot()
    run_step(model, sel, opt, [batch], sched.layers_for_step(step), step=step, momentum_for_skipped=True,
             max_grad_norm=1.0, deep_fraction=sched.deep_fraction, shallow=sched.shallow_layers(step),
             loss_chunk_bytes=spec.get("chunk_mib", 0) * 2**20)
dtype = model.get_input_embeddings().weight.dtype
print(json.dumps({"peak_mib": peak_mib(torch.device("cpu")), "max_backprop_layers": sched.max_backprop_layers(),
                  "compute_dtype": "fp32" if dtype == torch.float32 else "bf16"}))
"""

CONFIGS = [
    dict(schedule="full", k=None, batch=2, seq=128, ckpt=False, quant="nf4", rank=16),
    dict(schedule="cyclic", k=8, batch=4, seq=256, ckpt=False, quant="nf4", rank=16),
    dict(schedule="cyclic", k=8, batch=4, seq=256, ckpt=True, quant="nf4", rank=16),
    dict(schedule="freeze", k=8, batch=4, seq=256, ckpt=False, quant="nf4", rank=16),
    dict(schedule="top", k=8, batch=4, seq=256, ckpt=False, quant="nf4", rank=16),
    dict(schedule="tail", k=8, batch=4, seq=256, ckpt=False, quant="nf4", rank=16),
    dict(schedule="split", k=8, batch=4, seq=256, ckpt=False, quant="nf4", rank=16),
]
UNQUANTIZED = dict(schedule="full", k=None, batch=2, seq=128, ckpt=False, quant="fp32", rank=8)
#: Configurations with the chunked LM-head loss (`TrainConfig.loss_chunk_mib`, off by default): the measured
#: one; the other configurations join when the estimate is refitted on full-depth steps (BENCHMARKS.md, "The
#: chunked LM head").
CHUNKED = [{**spec, "chunk_mib": 16} for spec in CONFIGS if spec["schedule"] == "tail"]


def measure_and_estimate(spec) -> tuple[float, float]:
    """(measured peak MiB of a fresh probe process, estimated total MiB) for one configuration."""
    folder = ensure_default_model()
    out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(spec)], capture_output=True, text=True, check=True)
    probe = json.loads(out.stdout.strip().splitlines()[-1])
    config = json.loads((folder / "config.json").read_text())
    split = depth_split_for(make_schedule(spec["schedule"], num_layers=config["num_hidden_layers"], k=spec["k"]),
                            batch_size=spec["batch"], accumulation_steps=1)
    est = estimate_peak_mib(config, quantization=spec["quant"], lora_rank=spec["rank"], batch_size=spec["batch"],
                            target_modules=LoraSettings.target_modules, seq_len=spec["seq"],
                            backprop_layers=probe["max_backprop_layers"], depth_split=split,
                            gradient_checkpointing=spec["ckpt"], loss_chunk_bytes=spec.get("chunk_mib", 0) * 2**20,
                            device="cpu", compute_dtype=probe["compute_dtype"],
                            checkpoint_bytes=(folder / "model.safetensors").stat().st_size)
    print(spec, "measured", round(probe["peak_mib"]), "estimated", round(est.total_mib), est.to_dict())
    return probe["peak_mib"], est.total_mib


@pytest.mark.parametrize("spec", CONFIGS + [UNQUANTIZED] + CHUNKED, ids=lambda s: f"{s['schedule']}-k{s['k']}-b"
                         f"{s['batch']}x{s['seq']}-ckpt{int(s['ckpt'])}-{s['quant']}-chunk{s.get('chunk_mib', 0)}")
def test_estimate_bounds_the_measured_peak(spec):
    """The estimate may be at most 20 % under the measured peak (the dangerous side: a job routed to
    a worker too small for it) and at most 60 % over it (a job routed to a bigger worker than needed).

    It was a symmetric 25 % band on the AVX-512 machine where the coefficients were measured. On an
    AVX2 machine (NF4 computing in fp32) the same configuration's measured peak varied between runs
    (full b2x128: 1,168 and 1,518 MiB; the process baseline dominates small configurations), and
    the unquantized base's loading term over-reserves (fp32: 1,492 measured, 2,083 estimated)."""
    measured, estimated = measure_and_estimate(spec)
    assert 0.8 * measured <= estimated <= 1.6 * measured, (measured, estimated)
