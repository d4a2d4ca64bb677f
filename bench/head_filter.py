"""The chunked LM head's gradient filtering (`lcsb_core.training.loss.filtered_chunk`, Cut Cross-Entropy's idea):
on a real NF4 base with a fresh LoRA adapter and real GSM8K prompt/completion batches, the relative error
of the hidden states' gradient and of the LoRA gradients against the exact chunked head, the share of
vocabulary blocks skipped, and the head's time (the chunked head's forward, which takes each chunk's
gradient) exact vs filtered, interleaved in one process (wall and CPU seconds).

    .venv/bin/python -m bench.head_filter --model gemma-3-270m --threshold-log2 20 --rounds 3

Prints one JSON line per batch and a summary line.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from lcsb_core.models.loading import load_base_model, load_tokenizer, resolve_model_path
from lcsb_core.models.modules import autocast_for, causal_lm
from lcsb_core.training.config import LoraSettings
from lcsb_core.training.lora import apply_lora
from lcsb_core.training.loss import IGNORE_INDEX, HeadLossSum, filtered_chunk, lm_loss_sums

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "gsm8k" / "train.jsonl"


def gsm8k_batches(tokenizer, count: int, rows: int, max_len: int = 256) -> list[dict[str, torch.Tensor]]:
    """`count` batches of `rows` GSM8K training examples: prompt = question, completion = answer, the
    prompt's labels -100, right-padded (pad labels -100), truncated to `max_len` tokens."""
    lines = DATA.read_text().splitlines()[: count * rows]
    batches = []
    for b in range(count):
        seqs = []
        for line in lines[b * rows:(b + 1) * rows]:
            ex = json.loads(line)
            prompt = tokenizer(ex["question"] + "\n").input_ids
            answer = tokenizer(ex["answer"], add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
            ids = (prompt + answer)[:max_len]
            seqs.append((ids, ([IGNORE_INDEX] * len(prompt) + answer)[:max_len]))
        width = max(len(ids) for ids, _ in seqs)
        pad = tokenizer.pad_token_id
        batches.append({
            "input_ids": torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in seqs]),
            "attention_mask": torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in seqs]),
            "labels": torch.tensor([lab + [IGNORE_INDEX] * (width - len(lab)) for _, lab in seqs]),
        })
    return batches


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """||a - b|| / ||b|| in fp32."""
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


def lora_grads(model, batch, chunk_bytes: int, skip_below: float) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    with autocast_for(model):
        sums = lm_loss_sums(model, batch, chunk_bytes=chunk_bytes, skip_below=skip_below)
    sums.loss_sum.backward()
    return [p.grad.detach().clone() for p in model.parameters() if p.requires_grad and p.grad is not None]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("--threshold-log2", type=float, default=20.0, help="skip blocks below 2^-this")
    ap.add_argument("--batches", type=int, default=2)
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--chunk-mib", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    torch.manual_seed(0)
    folder = resolve_model_path(args.model)
    tokenizer = load_tokenizer(folder)
    model = apply_lora(load_base_model(folder, quantization="nf4", device=torch.device("cpu")),
                       LoraSettings(rank=16), seed=0)
    lm, threshold, chunk_bytes = causal_lm(model), 2.0 ** -args.threshold_log2, args.chunk_mib * 2 ** 20
    head, cap = lm.get_output_embeddings(), getattr(lm.config, "final_logit_softcapping", None)
    size = max(chunk_bytes // (head.weight.shape[0] * 4), 1)
    times = {"exact": [0.0, 0.0], "filtered": [0.0, 0.0]}
    summary: dict[str, list[float]] = {"hidden_err": [], "lora_err": [], "skipped": []}
    for n, batch in enumerate(gsm8k_batches(tokenizer, args.batches, args.rows)):
        with torch.no_grad(), autocast_for(model):
            hidden = lm.get_decoder()(input_ids=batch["input_ids"],
                                      attention_mask=batch["attention_mask"]).last_hidden_state
        mask = batch["labels"][:, 1:] != IGNORE_INDEX
        picked, tgt = hidden[:, :-1][mask].contiguous(), batch["labels"][:, 1:][mask]
        grads = {}
        for r in range(args.rounds):
            for name, skip in (("exact", 0.0), ("filtered", threshold))[:: 1 if r % 2 == 0 else -1]:
                h = picked.detach().requires_grad_(True)
                wall, cpu = time.perf_counter(), time.process_time()
                with autocast_for(model):
                    HeadLossSum.apply(h, tgt, head, cap, size, skip).backward()
                times[name][0] += time.perf_counter() - wall
                times[name][1] += time.process_time() - cpu
                grads[name] = h.grad
        with autocast_for(model):
            shares = [filtered_chunk(picked[i:i + size], tgt[i:i + size], head, cap, threshold)[2]
                      for i in range(0, tgt.numel(), size)]
        print(json.dumps({"batch": n, "hidden_grad_rel_err": rel(grads["filtered"], grads["exact"]),
                          "blocks_skipped": sum(shares) / len(shares),
                          "head_cpu_s_so_far": {k: round(v[1], 2) for k, v in times.items()}}), flush=True)
        exact_lora, filt_lora = lora_grads(model, batch, chunk_bytes, 0.0), lora_grads(model, batch, chunk_bytes,
                                                                                       threshold)
        num = sum(float((a.float() - b.float()).norm() ** 2) for a, b in zip(filt_lora, exact_lora, strict=True))
        den = sum(float(b.float().norm() ** 2) for b in exact_lora)
        row = {"batch": n, "targets": int(tgt.numel()), "hidden_grad_rel_err": rel(grads["filtered"], grads["exact"]),
               "lora_grad_rel_err": (num / den) ** 0.5, "max_layer_param_rel_err":
               max(rel(a, b) for a, b in zip(filt_lora, exact_lora, strict=True)),
               "blocks_skipped": sum(shares) / len(shares)}
        print(json.dumps(row), flush=True)
        summary["hidden_err"].append(row["hidden_grad_rel_err"])
        summary["lora_err"].append(row["lora_grad_rel_err"])
        summary["skipped"].append(row["blocks_skipped"])
    print(json.dumps({"model": args.model, "threshold": f"2^-{args.threshold_log2:g}", "chunk_positions": size,
                      "compute_dtype": str(head.weight.dtype), "threads": torch.get_num_threads(),
                      "max_hidden_grad_rel_err": max(summary["hidden_err"]),
                      "max_lora_grad_rel_err": max(summary["lora_err"]),
                      "mean_blocks_skipped": sum(summary["skipped"]) / len(summary["skipped"]),
                      "head_wall_s": {k: round(v[0], 2) for k, v in times.items()},
                      "head_cpu_s": {k: round(v[1], 2) for k, v in times.items()},
                      "filtered_over_exact_wall": times["filtered"][0] / times["exact"][0],
                      "filtered_over_exact_cpu": times["filtered"][1] / times["exact"][1]}), flush=True)


if __name__ == "__main__":
    main()
