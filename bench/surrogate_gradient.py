"""How close is LCSB's surrogate gradient to the exact one, block by block?

    python bench/surrogate_gradient.py            # SmolLM2-135M-Instruct NF4, 3 batches of 4 GSM8K examples

For each cyclic block (k = 8 of 30 layers: [0-7], [8-15], [16-23], [24-29]) it back-propagates only
that block, the other decoder layers passing the gradient through their residual path (LCSB, arXiv
2602.13073 Sec. 3), and compares the block's LoRA gradient with the exact one (all layers
back-propagated, the same batch): cosine similarity and norm ratio ||g_lcsb|| / ||g_exact|| per block,
mean over batches. (The freeze peer back-propagates the other layers exactly, so its block gradient
is the exact one by construction; tests/core checks that.) LoRA B is set to small random values so every
LoRA parameter has a gradient (at initialization B = 0 and A gets none).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.probe_model import gsm8k_batches, nf4_lora_with_random_b, smollm2_tokenizer_and_path  # noqa: E402
from lcsb_core.loss import autocast_for, lm_loss_sums  # noqa: E402
from lcsb_core.schedules import CyclicSchedule  # noqa: E402
from lcsb_core.selective import LayerMode, SelectiveBackprop  # noqa: E402


def block_grad(model, sel: SelectiveBackprop, batch, block, mode: LayerMode) -> torch.Tensor:
    """The LoRA gradient of `block` (flattened, fp32) with the other layers in `mode`."""
    sel.skip_mode = mode
    sel.select(block)
    model.zero_grad(set_to_none=True)
    with autocast_for(model):
        sums = lm_loss_sums(model, batch)
    (sums.loss_sum / sums.num_targets).backward()
    return torch.cat([p.grad.flatten().float() for i in sorted(block) for p in sel.params_by_layer[i]])


def main() -> None:
    tokenizer, path = smollm2_tokenizer_and_path()
    batches = gsm8k_batches(tokenizer, 12, Path("runs/bench_surrogate.jsonl"))
    model = nf4_lora_with_random_b(path)
    sel = SelectiveBackprop(model, skip_mode=LayerMode.SKIP)
    blocks = [sorted(CyclicSchedule(sel.num_layers, 8).layers_for_step(t)) for t in range(4)]
    sizes = [sum(p.numel() for p in sel.params_by_layer[i]) for i in range(sel.num_layers)]
    cos = {b[0]: [] for b in blocks}
    ratio = {b[0]: [] for b in blocks}
    for batch in batches:
        exact_all = block_grad(model, sel, batch, range(sel.num_layers), LayerMode.SKIP)
        for block in blocks:
            start = sum(sizes[:block[0]])
            exact = exact_all[start:start + sum(sizes[i] for i in block)]
            lcsb = block_grad(model, sel, batch, block, LayerMode.SKIP)
            cos[block[0]].append(float(torch.nn.functional.cosine_similarity(lcsb, exact, dim=0)))
            ratio[block[0]].append(float(lcsb.norm() / exact.norm()))
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    print("| block (layers) | cosine LCSB vs exact | norm ratio LCSB / exact |")
    print("|---|---|---|")
    for block in blocks:
        print(f"| {block[0]}-{block[-1]} | {mean(cos[block[0]]):.3f} | {mean(ratio[block[0]]):.3f} |")


if __name__ == "__main__":
    main()
