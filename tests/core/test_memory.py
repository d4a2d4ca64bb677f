"""The memory estimate holds within 25 % of the measured peak (VmHWM of a fresh process) on CPU, for
a few configurations of the real SmolLM2-135M."""

import json
import subprocess
import sys

import pytest

from lcsb_core.memory import estimate_peak_mib
from lcsb_core.models.gguf_import import ensure_default_model

pytestmark = pytest.mark.integration

PROBE = r"""
import json, sys, torch
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
opt, tracker = build_optimizer(params, OptimSettings()), UpdateTracker(sel.params_by_layer)
ids = torch.randint(3, 49000, (spec["batch"], spec["seq"]), generator=torch.Generator().manual_seed(0))
batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}
for step in range(sched.cycle_length):
    tracker.snapshot()
    run_step(model, sel, opt, [batch], sched.layers_for_step(step), step=step, momentum_for_skipped=True, max_grad_norm=1.0)
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
    dict(schedule="full", k=None, batch=2, seq=128, ckpt=False, quant="fp32", rank=8),
]


@pytest.mark.parametrize("spec", CONFIGS, ids=lambda s: f"{s['schedule']}-k{s['k']}-b{s['batch']}x{s['seq']}-"
                         f"ckpt{int(s['ckpt'])}-{s['quant']}")
def test_estimate_within_25_percent_of_measured_peak(spec):
    folder = ensure_default_model()
    out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(spec)], capture_output=True, text=True, check=True)
    probe = json.loads(out.stdout.strip().splitlines()[-1])
    measured = probe["peak_mib"]
    config = json.loads((folder / "config.json").read_text())
    est = estimate_peak_mib(config, quantization=spec["quant"], lora_rank=spec["rank"], batch_size=spec["batch"],
                            seq_len=spec["seq"], backprop_layers=probe["max_backprop_layers"],
                            gradient_checkpointing=spec["ckpt"], compute_dtype=probe["compute_dtype"],
                            checkpoint_bytes=(folder / "model.safetensors").stat().st_size)
    print(spec, "measured", round(measured), "estimated", round(est.total_mib), est.to_dict())
    assert abs(est.total_mib - measured) <= 0.25 * measured, (measured, est.to_dict())
