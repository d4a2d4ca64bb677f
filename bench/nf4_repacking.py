"""How wrong are LoRA gradients on an NF4 base after bitsandbytes repacks the weights for CPU inference?

    python bench/nf4_repacking.py            # SmolLM2-135M-Instruct NF4, 4 GSM8K train examples

bitsandbytes 0.50 (`Linear4bit.forward`) repacks a layer's NF4 weight into a CPU-inference layout the
first time it runs in eval mode on an AVX512-BF16 CPU and does not undo it on `train()`
(`lcsb_core.models.quantization.disable_cpu_weight_repacking` turns this off; this script turns it
back on). For full backprop and for LCSB (cyclic blocks, k = 8 of 30) it computes the LoRA gradients
(1) in train mode before any evaluation (the reference), (2) after one eval-mode forward (weights
repacked), (3) after `state_dict()` (what a checkpoint save does: unpacks them again), and prints per
decoder layer the relative L2 error ||g - g_ref|| / ||g_ref|| and the cosine similarity to the
reference. LoRA B is set to small random values so every LoRA parameter has a gradient at step 0.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.probe_model import gsm8k_batches, nf4_lora_with_random_b, smollm2_tokenizer_and_path
from lcsb_core.loss import autocast_for, lm_loss_sums
from lcsb_core.selective import LayerMode, SelectiveBackprop


def layer_grads(model, sel: SelectiveBackprop, batch, selected) -> dict[int, torch.Tensor]:
    """Flattened LoRA gradient per selected decoder layer for one forward/backward on `batch`."""
    sel.select(selected)
    model.zero_grad(set_to_none=True)
    with autocast_for(model):
        sums = lm_loss_sums(model, batch)
    (sums.loss_sum / sums.num_targets).backward()
    return {i: torch.cat([p.grad.flatten().float() for p in sel.params_by_layer[i]]) for i in sorted(selected)}


def compare(ref: dict, got: dict) -> dict[int, tuple[float, float]]:
    """Per layer: (relative L2 error, cosine similarity)."""
    return {i: (float((got[i] - ref[i]).norm() / ref[i].norm()),
                float(torch.nn.functional.cosine_similarity(got[i], ref[i], dim=0))) for i in ref}


def main() -> None:
    import bitsandbytes as bnb
    from bitsandbytes.functional import has_avx512bf16

    tokenizer, path = smollm2_tokenizer_and_path()
    batch = gsm8k_batches(tokenizer, 4, Path("runs/bench_repacking.jsonl"))[0]
    print(f"bitsandbytes {bnb.__version__}, CPU has AVX512-BF16: {bool(has_avx512bf16())}")
    for label, mode, selected in (("full backprop", LayerMode.SKIP, range(30)),
                                  ("LCSB block 0-7", LayerMode.SKIP, range(0, 8)),
                                  ("LCSB block 22-29", LayerMode.SKIP, range(22, 30))):
        model = nf4_lora_with_random_b(path)
        for m in model.modules():
            if isinstance(m, bnb.nn.Linear4bit):
                m.support_avx512bf16_for_cpu = bool(has_avx512bf16())  # bitsandbytes' default
        sel = SelectiveBackprop(model, skip_mode=mode)
        ref = layer_grads(model, sel, batch, frozenset(selected))
        model.eval()
        with torch.no_grad(), autocast_for(model):
            lm_loss_sums(model, batch)  # an evaluation: repacks every Linear4bit weight
        model.train()
        packed = compare(ref, layer_grads(model, sel, batch, frozenset(selected)))
        model.state_dict()  # a checkpoint save: unpacks them
        unpacked = compare(ref, layer_grads(model, sel, batch, frozenset(selected)))
        print(f"\n{label}: per decoder layer, relative L2 error of the LoRA gradient (cosine to reference)")
        print("| layer | after an eval (repacked) | after state_dict (unpacked) |")
        print("|---|---|---|")
        for i in ref:
            print(f"| {i} | {packed[i][0]:.3f} ({packed[i][1]:+.3f}) | {unpacked[i][0]:.3f} ({unpacked[i][1]:+.3f}) |")


if __name__ == "__main__":
    main()
