"""`estimate_peak_mib` keeps no defaults of a job's settings (they drifted: `seq_len=256` against the
trainer's 512): `TrainConfig` is their one home and `estimate_for` maps a config to the call. Pure
Python, no model (the estimate's accuracy is tests/core/test_memory.py's)."""

from __future__ import annotations

import inspect

from lcsb_core.config import TrainConfig
from lcsb_core.memory import estimate_for, estimate_peak_mib

SMOLLM2 = {"num_hidden_layers": 30, "hidden_size": 576, "intermediate_size": 1536, "vocab_size": 49152,
           "num_attention_heads": 9, "num_key_value_heads": 3, "tie_word_embeddings": True}


def test_the_job_settings_are_required_keywords():
    params = inspect.signature(estimate_peak_mib).parameters
    settings = ("quantization", "lora_rank", "target_modules", "batch_size", "seq_len", "backprop_layers",
                "gradient_checkpointing", "device")
    assert {n: params[n].default for n in settings if params[n].default is not inspect.Parameter.empty} == {}
    assert all(params[n].kind is inspect.Parameter.KEYWORD_ONLY for n in settings)


def test_estimate_for_reads_the_configs_sequence_length():
    """Token-proportional terms follow `data.max_seq_len` (default 512): twice those at 256."""
    cfg = TrainConfig.from_dict({"data": {"train_file": "x.jsonl"}})
    short = TrainConfig.from_dict({"data": {"train_file": "x.jsonl", "max_seq_len": 256}})
    a, b = (estimate_for(c, SMOLLM2, device="cpu") for c in (cfg, short))
    assert cfg.data.max_seq_len == 512
    assert (a.activations_mib, a.transient_mib) == (2 * b.activations_mib, 2 * b.transient_mib)


def test_graded_evaluation_adds_its_kv_cache_and_the_dequantized_weights():
    """With `method.eval` the estimate holds the evaluation's peak: the KV cache of one `generate` call
    (8,192 tokens x 30 layers x K,V x 3 heads x 64 x 4 B in fp32 = 360 MiB for SmolLM2) and, on a CPU NF4
    base, the decoder's linear weights dequantized once (106,168,320 x 4 B = 405 MiB); without it, none."""
    raw = {"data": {"train_file": "x.jsonl", "max_seq_len": 256}, "batch_size": 1,
           "eval": {"graders": [{"type": "numeric"}]}}
    graded, plain = TrainConfig.from_dict(raw), TrainConfig.from_dict({**raw, "eval": None})
    cpu, cuda = (estimate_for(graded, SMOLLM2, device=d, compute_dtype="fp32") for d in ("cpu", "cuda"))
    assert estimate_for(plain, SMOLLM2, device="cpu", compute_dtype="fp32").evaluation_mib == 0.0
    fixed = cpu.runtime_mib + cpu.weights_mib + cpu.lora_state_mib
    prefill = 8192 * (24 * 576 + 12 * 1536) * 1.25 / 2**20
    assert abs(cpu.evaluation_mib - fixed - 360.0 - 405.0 - prefill) < 1e-6
    assert abs((cpu.evaluation_mib - cpu.runtime_mib) - (cuda.evaluation_mib - cuda.runtime_mib)
               - 106168320 * 4 / 2**20) < 1e-6
    assert cpu.total_mib == max(cpu.training_mib, cpu.loading_mib, cpu.evaluation_mib)
    assert cpu.evaluation_mib > cpu.training_mib  # batch 1 x 256 trains in less than generation needs
