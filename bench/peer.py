"""Our trainer against the peer a user would run instead: Hugging Face `transformers.Trainer` + PEFT QLoRA
(issue 14, item 3), on the same model and the same batch, measured interleaved in one process.

    # the full measurement (CPU, SmolLM2-135M-Instruct NF4, batch 4 x 256, all cores, 8 timed rounds):
    python bench/peer.py --warmup-rounds 1 --rounds 8 --json bench/results/peer_cpu.json
    # a smoke run (seconds; says nothing about speed):
    OMP_NUM_THREADS=1 python bench/peer.py --batch 1 --seq 64 --rounds 1 --warmup-rounds 0 --threads 1

Modes, each on its own copy of the model (the base loaded by `lcsb_core.models.loading.load_base_model`:
NF4 through bitsandbytes' `BitsAndBytesConfig`, computing in bf16 on CPUs with AVX512-BF16/AMX and GPUs,
else fp32; LoRA r 16, alpha 32, no dropout, on q/k/v/o/gate/up/down; no gradient checkpointing):

- `hf-peer`: `transformers.Trainer` + `peft.get_peft_model` as a user writes them (TrainingArguments:
  the batch, lr 1e-5 constant, weight decay 0.01, max_grad_norm 1.0, the Trainer's default optimizer,
  bf16 autocast where the compute dtype is bf16; no `prepare_model_for_kbit_training`, whose defaults
  turn on gradient checkpointing and upcast the norms and embeddings to fp32). Its loss is the model's
  own: logits for every position, cross-entropy over the shifted labels.
- `full`: our bare step (`lcsb_core.training.step.run_step`, what bench/step_time.py times) with every layer.
- `topfull/4`: the default schedule (top 8 of 30 layers, all 30 every 4th step), bare steps.

What is timed, the same thing for all three: one optimizer step on the batch = forward, loss, backward,
gradient clipping at norm 1.0, AdamW step, gradients cleared. For the peer that is the body of the
Trainer's inner loop between its `on_step_begin` and `on_step_end` callbacks, called directly per step:
`trainer.training_step` (forward + loss + `accelerator.backward`), `trainer._clip_grad_norm`,
`optimizer.step()`, `lr_scheduler.step()`, `model.zero_grad()`. Not timed: its data loader, logging and
callbacks (the model, optimizer and autocast are set up by the Trainer's own `_prepare_for_training`).

Rounds (bench/step_time.py `interleave`): `--warmup-rounds` untimed, then `--rounds` timed; each runs one
whole cycle of every mode (topfull/4: 4 steps; the others: 1 step) in an order rotated round by round.
The batch: `--batch` x `--seq` uniform random tokens, every token a target, the same tensor for all.

Prints (stdout) a markdown table, one row per mode: step time in seconds (median over rounds of the
per-cycle mean step time), its min-max over rounds, the peer's step / this mode's step as the median of
per-round ratios (> 1: faster than the peer), peak memory over idle in MiB (the process's peak resident
set after `malloc_trim`, VmHWM reset before each cycle, minus the resident set after loading everything:
bench/step_time.py's measure; CUDA: peak allocated) and its ratio to the peer's. `--json` also writes the
rows with every round's times. Per-round lines go to stderr.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common.bare_step import bare_cycle, bare_model, random_batch
from bench.common.hf_peer import inner_loop_step, peft_peer_model
from bench.common.timing import add_interleaved_bench_args, interleave, round_ratio
from lcsb_core.models.loading import resolve_model_path
from lcsb_core.models.quantization import base_dtype, compute_dtype
from lcsb_core.training.memory_probe import current_mib, release_free_memory

PEER = "hf-peer"


def hf_peer_step(folder: Path, quant: str, rank: int, device: torch.device, batch: dict, steps: int, out_dir: str):
    """A callable running one optimizer step of Hugging Face Trainer + PEFT LoRA on `batch` (see the
    module docstring for what it contains), and the Trainer's optimizer name."""
    from transformers import Trainer, TrainingArguments

    model = peft_peer_model(folder, quant, rank, device)
    bf16 = (compute_dtype(device) if quant == "nf4" else base_dtype(quant, device)) == torch.bfloat16
    args = TrainingArguments(output_dir=out_dir, per_device_train_batch_size=batch["input_ids"].shape[0],
                             max_steps=steps, learning_rate=1e-5, weight_decay=0.01, lr_scheduler_type="constant",
                             max_grad_norm=1.0, bf16=bf16, use_cpu=device.type == "cpu", report_to="none",
                             save_strategy="no", logging_strategy="no", dataloader_num_workers=0, seed=0)
    trainer = Trainer(model=model, args=args)
    return inner_loop_step(trainer, steps, batch, device), getattr(args.optim, "value", str(args.optim))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_interleaved_bench_args(ap, schedule_help="our schedule token beside full backprop",
                               rounds_help="timed rounds (each runs one whole cycle of every mode)",
                               json_help="also write the rows to this JSON file")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    folder = resolve_model_path(args.model)
    model, sel, opt = bare_model(folder, args.quant, args.rank, device)
    batch = random_batch(model.config.vocab_size, args.batch, args.seq, device)
    names = ["full", args.schedule]
    cycles = [bare_cycle(model, sel, opt, batch, token) for token in names]
    with tempfile.TemporaryDirectory() as tmp:
        steps = args.warmup_rounds + args.rounds  # the peer's cycle is one step
        hf_step, optim_name = hf_peer_step(folder, args.quant, args.rank, device, batch, steps, tmp)
        names, cycles = [PEER, *names], [[hf_step], *cycles]
        release_free_memory(device)
        idle = current_mib(device)
        times, peaks = interleave(cycles, names, device, rounds=args.rounds, warmup_rounds=args.warmup_rounds)
    rows = []
    for i, name in enumerate(names):
        over_idle = peaks[i] - idle if device.type == "cpu" else peaks[i]
        rows.append(dict(mode=name, step_s=statistics.median(times[i]), step_s_rounds=times[i],
                         peer_over_this=round_ratio(times[0], times[i]), peak_mib=peaks[i],
                         peak_over_idle_mib=over_idle))
    for r in rows:
        r["mem_vs_peer"] = r["peak_over_idle_mib"] / rows[0]["peak_over_idle_mib"]
    print(f"model={Path(args.model).name} quant={args.quant} device={args.device} batch={args.batch} seq={args.seq} "
          f"rank={args.rank} warmup_rounds={args.warmup_rounds} rounds={args.rounds} threads={torch.get_num_threads()} "
          f"compute={str(compute_dtype(device)).removeprefix('torch.') if args.quant == 'nf4' else args.quant} "
          f"peer_optim={optim_name} "
          f"idle={idle:.0f}MiB torch={torch.__version__}")
    print("| mode | step (s) | rounds min-max (s) | peer / this (round median) | peak over idle (MiB) | mem vs peer |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['mode']} | {r['step_s']:.3f} | {min(r['step_s_rounds']):.2f}-{max(r['step_s_rounds']):.2f} | "
              f"{r['peer_over_this']:.2f}x | {r['peak_over_idle_mib']:.0f} | {r['mem_vs_peer']:.2f}x |")
    if args.json:
        Path(args.json).write_text(json.dumps(dict(args=vars(args), idle_mib=idle, peer_optim=optim_name, rows=rows),
                                              indent=1))


if __name__ == "__main__":
    main()
