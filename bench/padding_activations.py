"""Autograd state of one SmolLM2-135M-Instruct NF4 forward (fresh LoRA r16, every layer) with and without
padding in the batch: the bytes `torch.autograd.graph.saved_tensors_hooks` sees, for 4 rows of 448 and of
224 random tokens, all ones as the attention mask or two rows padded (the memory estimate's per-token
coefficients were fitted on unpadded batches; a DPO batch is always padded).

    python bench/padding_activations.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common.bare_step import bare_model
from lcsb_core.models.loading import resolve_model_path
from lcsb_core.models.quantization import compute_dtype


def saved_mib(model, ids: torch.Tensor, mask: torch.Tensor) -> float:
    """MiB of tensors autograd saves for backward in one forward of `ids` [B, T] under `mask` [B, T]."""
    total = [0]

    def pack(t: torch.Tensor) -> torch.Tensor:
        total[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=ids, attention_mask=mask)
    return total[0] / 2**20


def main() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, _, _ = bare_model(resolve_model_path("SmolLM2-135M-Instruct"), "nf4", 16, torch.device("cpu"))
    print(f"compute dtype {compute_dtype(torch.device('cpu'))}; 30 decoder layers; MiB saved for backward")
    print("| rows x tokens | unpadded | two rows padded | padded / unpadded |")
    print("|---|---|---|---|")
    for seq in (448, 224):
        ids = torch.randint(3, 40000, (4, seq))
        ones = torch.ones_like(ids)
        padded = ones.clone()
        padded[0, seq * 2 // 3:] = 0
        padded[1, seq // 2:] = 0
        a, b = saved_mib(model, ids, ones), saved_mib(model, ids, padded)
        print(f"| 4 x {seq} | {a:.0f} | {b:.0f} | {b / a:.3f} |")


if __name__ == "__main__":
    main()
