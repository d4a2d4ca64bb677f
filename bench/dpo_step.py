"""Issue 50: the cost of a DPO step against a supervised step of the same pairs' tokens, per schedule,
measured side by side in one process (interleaved rounds, `bench.common.timing.interleave`).

    python bench/dpo_step.py --pairs 4 --schedules full,tail --rounds 3 --json bench/results/dpo_step_cpu.json

One batch of `--pairs` real preference pairs (the first pairs of ../shared/data/hh-rlhf-harmless/train.jsonl
whose two sides fit in `--seq` tokens), SmolLM2-135M-Instruct NF4 with a fresh LoRA r16/alpha 32 on all
seven projections, AdamW. Modes, each a whole cycle of its schedule (`tail`: 4 steps, so every step of
its cycle is in the mean):
- `dpo <schedule>`: `lcsb_core.training.step.run_step` with the DPO objective (the reference forward without
  autograd, adapter off, then the policy's forward and backward over both answers of each pair);
- `sft <schedule>`: `run_step` with the language-model loss on the very same rows (2 x pairs rows, the same
  tokens and the same target tokens: each pair's two answers), the supervised step a DPO step is compared
  with in the issue's target (a DPO step at most 2.5x it).
- `trl full` (with `--peer`): the issue's peer, TRL's `DPOTrainer` with PEFT as a user writes them, on the
  same pairs as one batch: the same NF4 base (loaded as bench/peer.py's `hf-peer` loads it), `get_peft_model`
  with LoRA r16/alpha 32 on the seven projections, `DPOConfig(beta=0.1, loss_type sigmoid, max_length
  --seq, lr 5e-5 constant, max_grad_norm 1.0, bf16 where the compute dtype is bf16)`, no `ref_model` (the
  reference is the adapter switched off, as ours), no gradient checkpointing. Its step is the Trainer's inner
  loop body called directly (`bench.common.hf_peer.inner_loop_step`, as bench/peer.py's): `training_step`,
  `_clip_grad_norm`, optimizer and schedule step, gradients cleared; its batch is TRL's own collation of
  the pairs (its tokens counted in the header). TRL is installed for the benchmark only, not by
  scripts/setup.sh, into a folder named
  `site-packages` (dill, which `datasets` hashes with, pickles a module outside such a folder by value and
  fails): `pip install --no-deps --target /work/peer/site-packages trl==1.16.0 datasets==5.2.0 dill==0.4.1
  multiprocess==0.70.19 pandas==3.1.1 pyarrow==24.0.0 xxhash==4.1.0`, then
  `PYTHONPATH=/work/peer/site-packages python bench/dpo_step.py --peer`.
Printed: seconds per step (mean over each cycle, median over rounds), the ratio DPO / SFT of the same
schedule per round (median), the step-time ratio of each schedule to full backprop, and the peak resident
set per mode (MiB; CPU: VmHWM after `malloc_trim`, reset per cycle). Results go to `--json`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common.bare_step import bare_model
from bench.common.hf_peer import inner_loop_step, peft_peer_model
from bench.common.paths import DATA
from bench.common.timing import interleave, round_ratio
from lcsb_core.data import build_dataset
from lcsb_core.data.pairs import iter_pair_batches
from lcsb_core.models.loading import load_tokenizer, resolve_model_path
from lcsb_core.models.quantization import compute_dtype
from lcsb_core.training.dpo import AdapterOffReference, DPOObjective
from lcsb_core.training.memory_probe import MIB
from lcsb_core.training.schedules import make_schedule
from lcsb_core.training.step import run_step


def pair_batch(tokenizer, pairs: int, seq: int, work: Path) -> tuple[dict[str, torch.Tensor], list[dict]]:
    """The first `pairs` pairs of hh-rlhf train.jsonl whose sides fit in `seq` tokens, as one pair batch, and
    those pairs' JSON lines (OpenAI's DPO format, in the batch's order) for the peer."""
    lines = (DATA / "hh-rlhf-harmless" / "train.jsonl").read_text().splitlines()[: pairs * 4]
    work.mkdir(parents=True, exist_ok=True)
    (work / "pairs.jsonl").write_text("\n".join(lines) + "\n")
    data = build_dataset(work / "pairs.jsonl", tokenizer, max_seq_len=seq, min_examples=1, skip_invalid=True)
    data.examples = data.examples[: 2 * pairs]
    batch = next(iter_pair_batches(data, pairs, seed=0, epoch=0, pad_token_id=tokenizer.pad_token_id,
                                   shuffle=False, pad_to_multiple_of=64))
    return batch, [json.loads(lines[e.line - 1]) for e in data.examples[::2]]  # `line` is 1-based


def trl_step(folder: Path, tokenizer, rows: list[dict], seq: int, steps: int, out_dir: str):
    """A callable running one optimizer step of TRL's DPOTrainer + PEFT LoRA on `rows` as one batch (the
    module docstring), and that batch's number of non-padding tokens."""
    from datasets import Dataset  # type: ignore[import-not-found]  # installed apart (the docstring)
    from trl import DPOConfig, DPOTrainer  # type: ignore[import-not-found]

    device = torch.device("cpu")
    model = peft_peer_model(folder, "nf4", 16, device)
    data = Dataset.from_list([{"prompt": r["input"]["messages"], "chosen": r["preferred_output"],
                               "rejected": r["non_preferred_output"]} for r in rows])
    args = DPOConfig(output_dir=out_dir, per_device_train_batch_size=len(rows), max_steps=steps, learning_rate=5e-5,
                     lr_scheduler_type="constant", max_grad_norm=1.0, beta=0.1, loss_type=["sigmoid"],
                     max_length=seq, bf16=compute_dtype(device) == torch.bfloat16, use_cpu=True, report_to="none",
                     save_strategy="no", logging_strategy="no", dataloader_num_workers=0, seed=0)
    trainer = DPOTrainer(model=model, args=args, train_dataset=data, processing_class=tokenizer)
    batch = next(iter(trainer.get_train_dataloader()))
    return inner_loop_step(trainer, steps, batch, device), int(batch["attention_mask"].sum())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--schedules", default="full,tail")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup-rounds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--model", default="SmolLM2-135M-Instruct")
    ap.add_argument("--json", default=None)
    ap.add_argument("--peer", action="store_true", help="add TRL's DPOTrainer + PEFT (`trl full`; installed apart)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    folder = resolve_model_path(args.model)
    tokenizer = load_tokenizer(folder)
    batch, pairs = pair_batch(tokenizer, args.pairs, args.seq, Path("/tmp/lcsb_dpo_step"))
    model, sel, opt = bare_model(folder, "nf4", 16, device)
    objective = DPOObjective(0.1, AdapterOffReference(), chunk_bytes=16 * MIB)
    cycles, names = [], []
    for name in args.schedules.split(","):
        schedule = make_schedule(name, num_layers=sel.num_layers)
        for kind in ("dpo", "sft"):
            def step(s=schedule, k=kind, i=[0]):  # noqa: B006  (the cycle's step counter)
                run_step(model, sel, opt, [batch], s.layers_for_step(i[0]), step=i[0], momentum_for_skipped=True,
                         max_grad_norm=1.0, loss_chunk_bytes=16 * MIB, objective=objective if k == "dpo" else None)
                i[0] += 1
            cycles.append([step] * schedule.cycle_length)
            names.append(f"{kind} {name}")
    peer_tokens = None
    if args.peer:
        peer, peer_tokens = trl_step(folder, tokenizer, pairs, args.seq, args.rounds + args.warmup_rounds,
                                     "/tmp/lcsb_dpo_step/trl")
        cycles.append([peer])
        names.append("trl full")
    times, peaks = interleave(cycles, names, device, rounds=args.rounds, warmup_rounds=args.warmup_rounds)
    rows = {n: {"s_per_step": statistics.median(t), "peak_mib": p} for n, t, p in zip(names, times, peaks, strict=True)}
    lines = [f"hh-rlhf, {args.pairs} pairs ({tuple(batch['input_ids'].shape)} rows x padded tokens, "
             f"{int(batch['attention_mask'].sum())} tokens), {torch.get_num_threads()} threads, "
             f"{args.rounds} rounds after {args.warmup_rounds} warm-up"
             + (f"; TRL's batch of the same pairs: {peer_tokens} tokens" if peer_tokens is not None else ""),
             "| schedule | DPO s/step | SFT (same rows) s/step | DPO / SFT | DPO x full DPO | DPO peak MiB "
             "| SFT peak MiB |",
             "|---|---|---|---|---|---|---|"]
    full_dpo = times[names.index("dpo full")] if "dpo full" in names else None
    for name in args.schedules.split(","):
        d, s = names.index(f"dpo {name}"), names.index(f"sft {name}")
        ratio = round_ratio(times[d], times[s])
        vs_full = round_ratio(times[d], full_dpo) if full_dpo else float("nan")
        rows[f"dpo {name}"].update(dpo_over_sft=ratio, over_full_dpo=vs_full)
        lines.append(f"| {name} | {statistics.median(times[d]):.2f} | {statistics.median(times[s]):.2f} | "
                     f"{ratio:.2f} | {vs_full:.2f} | {peaks[d]:.0f} | {peaks[s]:.0f} |")
    if args.peer:
        t, i = times[names.index("trl full")], names.index("trl full")
        rows["trl full"].update(over_full_dpo=round_ratio(t, full_dpo) if full_dpo else float("nan"))
        lines.append(f"| TRL DPOTrainer + PEFT (full) | {statistics.median(t):.2f} | - | - | "
                     f"{rows['trl full']['over_full_dpo']:.2f} | {peaks[i]:.0f} | - |")
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "rows": rows, "table": lines}, indent=1))


if __name__ == "__main__":
    main()
