"""Issue 50: the cost of a DPO step against a supervised step of the same pairs' tokens, per schedule,
measured side by side in one process (interleaved rounds, `bench.common.timing.interleave`).

    python bench/dpo_step.py --pairs 4 --schedules full,tail --rounds 3 --json bench/results/dpo_step_cpu.json

One batch of `--pairs` real preference pairs (the first pairs of ../shared/data/hh-rlhf-harmless/train.jsonl
whose two sides fit in `--seq` tokens), SmolLM2-135M-Instruct NF4 with a fresh LoRA r16/alpha 32 on all
seven projections, AdamW. Modes, each a whole cycle of its schedule (`tail`: 4 steps, so every step of
its cycle is in the mean):
- `dpo <schedule>`: `lcsb_core.step.run_step` with the DPO objective (the reference forward without
  autograd, adapter off, then the policy's forward and backward over both answers of each pair);
- `sft <schedule>`: `run_step` with the language-model loss on the very same rows (2 x pairs rows, the same
  tokens and the same target tokens: each pair's two answers), the supervised step a DPO step is compared
  with in the issue's target (a DPO step at most 2.5x it).
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
from bench.common.paths import DATA
from bench.common.timing import interleave, round_ratio
from lcsb_core.data import build_dataset
from lcsb_core.data.pairs import iter_pair_batches
from lcsb_core.dpo import AdapterOffReference, DPOObjective
from lcsb_core.memory_probe import MIB
from lcsb_core.models.loading import load_tokenizer, resolve_model_path
from lcsb_core.schedules import make_schedule
from lcsb_core.step import run_step


def pair_batch(tokenizer, pairs: int, seq: int, work: Path) -> dict[str, torch.Tensor]:
    """The first `pairs` pairs of hh-rlhf train.jsonl whose sides fit in `seq` tokens, as one pair batch."""
    lines = (DATA / "hh-rlhf-harmless" / "train.jsonl").read_text().splitlines()[: pairs * 4]
    work.mkdir(parents=True, exist_ok=True)
    (work / "pairs.jsonl").write_text("\n".join(lines) + "\n")
    data = build_dataset(work / "pairs.jsonl", tokenizer, max_seq_len=seq, min_examples=1, skip_invalid=True)
    data.examples = data.examples[: 2 * pairs]
    return next(iter_pair_batches(data, pairs, seed=0, epoch=0, pad_token_id=tokenizer.pad_token_id,
                                  shuffle=False, pad_to_multiple_of=64))


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
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    folder = resolve_model_path(args.model)
    tokenizer = load_tokenizer(folder)
    batch = pair_batch(tokenizer, args.pairs, args.seq, Path("/tmp/lcsb_dpo_step"))
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
    times, peaks = interleave(cycles, names, device, rounds=args.rounds, warmup_rounds=args.warmup_rounds)
    rows = {n: {"s_per_step": statistics.median(t), "peak_mib": p} for n, t, p in zip(names, times, peaks, strict=True)}
    lines = [f"hh-rlhf, {args.pairs} pairs ({tuple(batch['input_ids'].shape)} rows x padded tokens, "
             f"{int(batch['attention_mask'].sum())} tokens), {torch.get_num_threads()} threads, "
             f"{args.rounds} rounds after {args.warmup_rounds} warm-up",
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
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "rows": rows, "table": lines}, indent=1))


if __name__ == "__main__":
    main()
