"""A tiny random Llama with LoRA, built in the test (peft/torchtune style), and synthetic batches."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from lcsb_core.training.config import LoraSettings
from lcsb_core.training.lora import apply_lora

NUM_LAYERS = 4
VOCAB = 128


def tiny_base(seed: int = 0, num_layers: int = NUM_LAYERS) -> LlamaForCausalLM:
    """Llama with hidden 32, 4 heads (2 KV), 4 decoder layers, vocab 128, fp32, frozen, train mode."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=num_layers,
                      num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB,
                      max_position_embeddings=256, pad_token_id=0, tie_word_embeddings=False,
                      attn_implementation="sdpa")
    model = LlamaForCausalLM(cfg)
    model.config.use_cache = False
    for p in model.parameters():
        p.requires_grad_(False)
    return model.train()


def tiny_lora(seed: int = 0, rank: int = 4, dropout: float = 0.0, num_layers: int = NUM_LAYERS):
    """The tiny base wrapped with LoRA on all seven projections; lora_B perturbed away from zero so
    that every LoRA parameter gets a non-zero gradient from step 1."""
    model = apply_lora(tiny_base(seed, num_layers), LoraSettings(rank=rank, alpha=2 * rank, dropout=dropout), seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad and p.ndim == 2 and p.abs().sum() == 0:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    return model


def batch(seed: int = 0, bsz: int = 2, seq: int = 12, pad_last: int = 3) -> dict[str, torch.Tensor]:
    """Random input_ids [bsz, seq]; the last example right-padded by `pad_last` tokens; labels are the
    inputs with the first 3 positions (a 'prompt') and the padding set to -100."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, VOCAB, (bsz, seq), generator=gen)
    mask = torch.ones_like(ids)
    if pad_last:
        mask[-1, -pad_last:] = 0
        ids[-1, -pad_last:] = 0
    labels = ids.clone()
    labels[:, :3] = -100
    labels[mask == 0] = -100
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}
