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

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lcsb_core.config import LoraSettings  # noqa: E402
from lcsb_core.data import build_dataset, gsm8k_to_chat, iter_batches  # noqa: E402
from lcsb_core.lora import apply_lora  # noqa: E402
from lcsb_core.loss import autocast_for, lm_loss_sums  # noqa: E402
from lcsb_core.models.loading import load_base_model, load_tokenizer, resolve_model_path  # noqa: E402
from lcsb_core.schedules import CyclicSchedule  # noqa: E402
from lcsb_core.selective import LayerMode, SelectiveBackprop  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


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
    path = resolve_model_path("SmolLM2-135M-Instruct")
    tokenizer = load_tokenizer(path)
    rows = [json.loads(x) for x in (DATA / "gsm8k" / "train.jsonl").read_text().splitlines()[:12]]
    tmp = Path("runs/bench_surrogate.jsonl")
    tmp.parent.mkdir(parents=True, exist_ok=True)
    tmp.write_text("".join(json.dumps(gsm8k_to_chat(r)) + "\n" for r in rows))
    ds = build_dataset(tmp, tokenizer, max_seq_len=384, min_examples=1)
    batches = list(iter_batches(ds, 4, seed=0, epoch=0, pad_token_id=tokenizer.pad_token_id, shuffle=False))
    model = apply_lora(load_base_model(path, quantization="nf4", device=torch.device("cpu")),
                       LoraSettings(rank=16, alpha=32), seed=0)
    torch.manual_seed(0)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=1e-3)
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
