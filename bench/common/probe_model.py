"""Set-up of the gradient probe bench/surrogate_gradient.py (and of bench/nf4_repacking.py until commit
f538568): a few real GSM8K batches and SmolLM2-135M-Instruct in NF4 with LoRA whose B matrices are small random
values (at initialization B = 0, so A would get no gradient)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from bench.common.paths import DATA
from lcsb_core.data import build_dataset, gsm8k_to_chat, iter_batches
from lcsb_core.models.loading import load_base_model, load_tokenizer, resolve_model_path
from lcsb_core.training.config import LoraSettings
from lcsb_core.training.lora import apply_lora


def gsm8k_batches(tokenizer, n_examples: int, scratch: Path) -> list[dict[str, torch.Tensor]]:
    """The first `n_examples` GSM8K training rows as chat, in file order, batches of 4 (up to 384
    tokens each); `scratch` is the JSONL file written on the way."""
    rows = [json.loads(x) for x in (DATA / "gsm8k" / "train.jsonl").read_text().splitlines()[:n_examples]]
    scratch.parent.mkdir(parents=True, exist_ok=True)
    scratch.write_text("".join(json.dumps(gsm8k_to_chat(r)) + "\n" for r in rows))
    ds = build_dataset(scratch, tokenizer, max_seq_len=384, min_examples=1)
    return list(iter_batches(ds, 4, seed=0, epoch=0, pad_token_id=tokenizer.pad_token_id, shuffle=False))


def smollm2_tokenizer_and_path():
    """(tokenizer, model folder) of the cached SmolLM2-135M-Instruct."""
    path = resolve_model_path("SmolLM2-135M-Instruct")
    return load_tokenizer(path), path


def nf4_lora_with_random_b(path: Path):
    """PeftModel: NF4 base on CPU, LoRA r16/alpha 32 on all projections, lora_B ~ N(0, 1e-3^2) (seed 0)."""
    model = apply_lora(load_base_model(path, quantization="nf4", device=torch.device("cpu")),
                       LoraSettings(rank=16, alpha=32), seed=0)
    torch.manual_seed(0)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=1e-3)
    return model
