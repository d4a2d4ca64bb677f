"""`estimate_peak_mib` keeps no defaults of a job's settings (they drifted: `seq_len=256` against the
trainer's 512): `TrainConfig` is their one home and `estimate_for` maps a config to the call. Pure
Python, no model (the estimate's accuracy is tests/core/test_memory.py's)."""

from __future__ import annotations

import inspect

import pytest

from lcsb_core.training.config import TrainConfig
from lcsb_core.training.memory import DepthSplit, depth_split_for, estimate_for, estimate_peak_mib
from lcsb_core.training.schedules import make_schedule

SMOLLM2 = {"num_hidden_layers": 30, "hidden_size": 576, "intermediate_size": 1536, "vocab_size": 49152,
           "num_attention_heads": 9, "num_key_value_heads": 3, "tie_word_embeddings": True}


def test_the_job_settings_are_required_keywords():
    params = inspect.signature(estimate_peak_mib).parameters
    settings = ("quantization", "lora_rank", "target_modules", "batch_size", "seq_len", "backprop_layers",
                "depth_split", "gradient_checkpointing", "device", "loss_chunk_bytes")
    assert {n: params[n].default for n in settings if params[n].default is not inspect.Parameter.empty} == {}
    assert all(params[n].kind is inspect.Parameter.KEYWORD_ONLY for n in settings)


def test_estimate_for_reads_the_configs_sequence_length():
    """Token-proportional terms follow `data.max_seq_len` (default 512): twice those at 256 (the unchunked
    head, whose terms are all per token; a chunk's buffers are not)."""
    cfg = TrainConfig.from_dict({"data": {"train_file": "x.jsonl"}, "loss_chunk_mib": 0})
    short = TrainConfig.from_dict({"data": {"train_file": "x.jsonl", "max_seq_len": 256}, "loss_chunk_mib": 0})
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
    prefill = 8192 * (24 * 576 + 12 * 1536) * 1.6 / 2**20
    assert abs(cpu.evaluation_mib - fixed - 360.0 - 405.0 - prefill) < 1e-6
    assert abs((cpu.evaluation_mib - cpu.runtime_mib) - (cuda.evaluation_mib - cuda.runtime_mib)
               - 106168320 * 4 / 2**20) < 1e-6
    assert cpu.total_mib == max(cpu.training_mib, cpu.loading_mib, cpu.evaluation_mib)
    assert cpu.evaluation_mib > cpu.training_mib  # batch 1 x 256 trains in less than generation needs


def job(schedule: str, **over) -> TrainConfig:
    """SmolLM2's benchmark job (BENCHMARKS.md, "The default on three kinds of data"): NF4, batch 4 x 256,
    with the unchunked LM head (`loss_chunk_mib` 0), whose per-token terms the tests below spell out."""
    return TrainConfig.from_dict({"data": {"train_file": "x.jsonl", "max_seq_len": 256}, "batch_size": 4,
                                  "lcsb": {"schedule": schedule}, "loss_chunk_mib": 0, **over})


def test_split_estimates_the_larger_of_its_deep_and_shallow_passes():
    """`split` at 4 x 256 (k = 8 of 30, deep_fraction 0.25) runs 1 row through all 30 layers, then 3 rows
    through the top 8. Per token (bf16): a layer 24 x 576 + 12 x 1536 = 32,256 B, the LM head's saved
    logits 9 x 49,152 = 442,368 B, its gradient 4 x 49,152 = 196,608 B, the transient's 8 layers 258,048 B.
    Deep pass, 256 tokens: (30 x 32,256 + 442,368) x 256 B = 344.25 MiB of activations + 111 MiB transient;
    shallow pass, 768 tokens: (8 x 32,256 + 442,368) x 768 B = 513 MiB + 333 MiB transient, the larger.
    `full` and `topfull` (whose every 4th step is full) keep all 30 layers for 1,024 tokens: 1,377 + 444."""
    split, topfull, full = (estimate_for(job(s), SMOLLM2, device="cpu", compute_dtype="bf16")
                            for s in ("split", "topfull", "full"))
    assert (split.activations_mib, split.transient_mib) == (513.0, 333.0)
    assert (topfull.activations_mib, topfull.transient_mib) == (full.activations_mib, full.transient_mib) \
        == (1377.0, 444.0)
    assert split.training_mib - full.training_mib == (513.0 + 333.0) - (1377.0 + 444.0)
    assert (split.weights_mib, split.lora_state_mib) == (full.weights_mib, full.lora_state_mib)
    # fp32 compute (the API's assumption for a CPU worker) scales the layer terms, not the LM head's
    fp32 = estimate_for(job("split"), SMOLLM2, device="cpu", compute_dtype="fp32")
    assert fp32.activations_mib == (8 * 32256 * 1.6 + 442368) * 768 / 2**20
    assert fp32.transient_mib == (196608 + 8 * 32256 * 1.6) * 768 / 2**20


def test_a_deep_pass_larger_than_the_shallow_one_sets_the_estimate():
    """At deep_fraction 0.75 the deep pass (3 rows x 30 layers) outweighs the shallow one (1 row x 8)."""
    deep = estimate_for(job("split", lcsb={"schedule": "split", "deep_fraction": 0.75}), SMOLLM2, device="cpu",
                        compute_dtype="bf16")
    assert (deep.activations_mib, deep.transient_mib) == ((30 * 32256 + 442368) * 768 / 2**20,
                                                          (196608 + 8 * 32256) * 768 / 2**20)


@pytest.mark.parametrize("batch,accumulation,passes", [
    (4, 1, DepthSplit(1, 3, 8)),   # W = 4: D = 1, the other 3 rows in the same micro-batch
    (4, 2, DepthSplit(2, 4, 8)),   # W = 8: D = 2 in the first micro-batch, the second untouched (4 rows)
    (2, 4, DepthSplit(2, 2, 8)),   # W = 8: D = 2 fill the first micro-batch
    (1, 2, DepthSplit(1, 1, 8)),   # W = 2: one row each
    (8, 1, DepthSplit(2, 6, 8)),
])
def test_depth_split_sizes_each_pass_by_its_largest_micro_batch(batch, accumulation, passes):
    """`run_step` takes the window's first `deep_rows` rows across micro-batches (`split_rows`)."""
    sched = make_schedule("split", num_layers=30, k=8)
    assert depth_split_for(sched, batch_size=batch, accumulation_steps=accumulation) == passes


def test_one_pass_schedules_have_no_depth_split():
    """Every schedule but `split` runs one pass; so does `split` when its shallow layers are all of them."""
    for name in ("full", "topfull", "tail", "top", "cyclic"):
        assert depth_split_for(make_schedule(name, num_layers=30, k=8), batch_size=4, accumulation_steps=1) is None
    assert depth_split_for(make_schedule("split", num_layers=30, k=30), batch_size=4, accumulation_steps=1) is None


def test_the_estimate_says_how_far_it_holds_on_its_device():
    """Issue 36: until a GPU refit the CUDA estimate says it is unfitted and on the safe side; the CPU
    one names the band its test holds it to."""
    cfg = TrainConfig.from_dict({"data": {"train_file": "x.jsonl"}})
    cpu, cuda = (estimate_for(cfg, SMOLLM2, device=d).to_dict() for d in ("cpu", "cuda:0"))
    assert "not fitted on a GPU" in cuda["basis"] and "safe side" in cuda["basis"]
    assert "0.8x-1.6x" in cpu["basis"]


def test_the_chunked_head_drops_the_logits_terms_and_follows_the_config():
    """With chunks the head keeps its [N, H] input gradient and one chunk's buffers, not the [N, V] logits,
    in either compute dtype (measured in both: BENCHMARKS.md, "The chunked LM head")."""
    from lcsb_core.data.settings import DataSettings

    on = TrainConfig(data=DataSettings(train_file="t.jsonl"), batch_size=4, loss_chunk_mib=16)
    off = TrainConfig(data=DataSettings(train_file="t.jsonl"), batch_size=4, loss_chunk_mib=0)
    chunked, whole = (estimate_for(c, SMOLLM2, device="cpu", compute_dtype="fp32") for c in (on, off))
    bf16_on, bf16_off = (estimate_for(c, SMOLLM2, device="cpu", compute_dtype="bf16") for c in (on, off))
    tokens = 4 * on.data.max_seq_len
    head_whole = (9 + 4) * tokens * 49152 / 2**20
    head_chunked = (4 * tokens * 576 + 4 * 16 * 2**20) / 2**20
    assert whole.training_mib - chunked.training_mib == pytest.approx(head_whole - head_chunked)
    assert bf16_off.training_mib - bf16_on.training_mib == pytest.approx(head_whole - head_chunked)


def test_recompute_deep_keeps_the_top_k_layers_and_the_others_inputs():
    """`topfull` at 4 x 256 with `recompute_deep`: its full-depth step keeps the top 8 layers' activations,
    the 22 others' inputs (4 x 576 B a token) and one recomputed layer: (8 x 32,256 + 22 x 2,304 + 32,256 +
    442,368) x 1,024 B = 765 MiB, against 1,377 without; the transient is unchanged (bf16)."""
    plain = estimate_for(job("topfull"), SMOLLM2, device="cpu", compute_dtype="bf16")
    recomputed = estimate_for(job("topfull", lcsb={"schedule": "topfull", "recompute_deep": True}), SMOLLM2,
                              device="cpu", compute_dtype="bf16")
    assert recomputed.activations_mib == (8 * 32256 + 22 * 2304 + 32256 + 442368) * 1024 / 2**20 == 765.0
    assert recomputed.transient_mib == plain.transient_mib == 444.0
    top = estimate_for(job("top"), SMOLLM2, device="cpu", compute_dtype="bf16")
    assert top.activations_mib < recomputed.activations_mib < plain.activations_mib


def test_dpo_counts_both_answers_of_each_pair():
    """A DPO micro-batch of B pairs is 2B rows: its estimate is a supervised one of 2B rows, and more than
    the supervised estimate of B rows."""
    base = {"data": {"train_file": "x.jsonl"}, "lcsb": {"schedule": "tail"}, "batch_size": 4}
    dpo = TrainConfig.from_dict({**base, "dpo": {"beta": 0.1}})
    rows = TrainConfig.from_dict({**base, "batch_size": 8})
    sft = TrainConfig.from_dict(base)
    a, b, c = (estimate_for(cfg, SMOLLM2, device="cpu", compute_dtype="bf16") for cfg in (dpo, rows, sft))
    assert a.to_dict() == b.to_dict()
    assert a.activations_mib > c.activations_mib
