"""Tiny random-weight base models that load like a catalog model: a 3-layer Llama (hidden 32) with
SmolLM2-135M-Instruct's tokenizer and chat template, so the service accepts chat files for it and a job
trains in a fraction of a second per step. For smoke runs of the service (the worker tests,
bench/api_load.py), never for a measurement of quality or speed."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from lcsb_core.models.gguf_import import ensure_default_model

TINY, TINY_NAN = "tiny-llama", "tiny-nan"


def build_tiny_models(root: Path) -> Path:
    """Write `tiny-llama` (3 layers, hidden 32, SmolLM2's vocabulary, tokenizer and chat template; seed 0)
    and `tiny-nan` (the same with a NaN in the final norm: every loss is NaN) as model folders under
    `root`; returns `root`. Imports SmolLM2's GGUF first if its folder is not cached yet."""
    src = ensure_default_model()
    for name in (TINY, TINY_NAN):
        torch.manual_seed(0)
        cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                          num_key_value_heads=2, vocab_size=49152, tie_word_embeddings=True, pad_token_id=2,
                          bos_token_id=1, eos_token_id=2, max_position_embeddings=2048)
        model = LlamaForCausalLM(cfg)
        if name == TINY_NAN:
            with torch.no_grad():
                model.model.norm.weight[0] = float("nan")
        model.save_pretrained(root / name)
        for f in src.iterdir():
            if f.name.startswith(("tokenizer", "chat_template", "special")):
                shutil.copy(f, root / name / f.name)
    return root
