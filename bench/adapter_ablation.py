"""Where a trained adapter's effect lives: the held-out eval loss of a `bench/quality.py` run's final
adapter with the LoRA of some decoder layers switched off (their `lora_B` set to zero, so those layers
compute the base model's output), against the whole adapter and the base model.

    python bench/adapter_ablation.py bench/results/paper_setting/runs/<run> --drop 0-7,0-15,16-29 \
        --eval-examples 100 --out bench/results/paper_setting     # WikiText-2 runs (the paper's setting)

A run trained by LCSB's identity-path surrogate (the paper's `cyclic`) updates its lower layers with
gradients that are almost orthogonal to the true ones (BENCHMARKS 2c); when such a run's loss rises,
dropping the LoRA of those layers tells whether the damage sits there. Evaluation is `Trainer.evaluate`'s
arithmetic (`lm_loss_sums`: nats per target token) on the run's own held-out set, rebuilt by
`bench/quality.py`'s `prepare_task` from the run's config (WikiText-2 blocks of `max_seq_len` tokens or
GSM8K answers). Prints a Markdown table; one row per LoRA setting.

Raises SystemExit when the run folder has no final adapter (`<run>/adapter`, written when a run ends).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.quality import prepare_task
from lcsb_core.config import TrainConfig
from lcsb_core.data.batching import collate
from lcsb_core.loss import evaluate_batches
from lcsb_core.setup import load_components


def layer_ranges(text: str) -> list[tuple[int, int]]:
    """`"0-7,16-29"` -> [(0, 7), (16, 29)] (inclusive decoder-layer ranges).

    >>> layer_ranges("0-7,12")
    [(0, 7), (12, 12)]
    """
    out = []
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        out.append((int(lo), int(hi or lo)))
    return out


def eval_loss(model, examples, batch_size: int, pad_token_id: int) -> float:
    """Mean loss in nats per target token over `examples` (EncodedExample list), in batches."""
    batches = (collate(examples[i:i + batch_size], pad_token_id) for i in range(0, len(examples), batch_size))
    return evaluate_batches(model, batches, with_accuracy=False).mean_loss


def lora_b_by_layer(model) -> dict[int, list[torch.nn.Parameter]]:
    """Every `lora_B` weight of the PEFT model, keyed by its decoder layer index (`.layers.<i>.`)."""
    out: dict[int, list[torch.nn.Parameter]] = {}
    for name, p in model.named_parameters():
        if "lora_B" in name and ".layers." in name:
            out.setdefault(int(name.split(".layers.")[1].split(".")[0]), []).append(p)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", help="a bench/quality.py run folder (config.json + adapter/)")
    ap.add_argument("--drop", default="0-7,0-15,16-29", help="comma-separated layer ranges, one row each")
    ap.add_argument("--task", default="wikitext", choices=["gsm8k", "wikitext"])
    ap.add_argument("--eval-examples", type=int, default=100)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--base", action=argparse.BooleanOptionalAction, default=True,
                    help="also evaluate the base model (every LoRA off); the run's step-0 evaluation is the same")
    ap.add_argument("--out", required=True, help="the grid's --out folder (its data/ is rebuilt there)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    run = Path(args.run)
    adapter = run / "adapter" / "adapter_model.safetensors"
    if not adapter.exists():
        raise SystemExit(f"{run}: no final adapter (adapter/adapter_model.safetensors); has the run ended?")
    raw = json.loads((run / "config.json").read_text())
    raw.pop("resolved", None)  # the trainer's record of what the run resolved (layers, k, ...), not config
    cfg = TrainConfig.from_dict(raw)
    model, tokenizer, _ = load_components(cfg)
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    result = set_peft_model_state_dict(model, load_file(str(adapter)))
    if getattr(result, "unexpected_keys", None):
        raise SystemExit(f"{adapter}: keys the model does not have: {result.unexpected_keys[:3]}")
    data_args = argparse.Namespace(out=args.out, seq=cfg.data.max_seq_len, eval_examples=args.eval_examples,
                                   train_examples=1)
    _, held, _ = prepare_task(args.task, tokenizer, data_args)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    by_layer = lora_b_by_layer(model)
    saved = {i: [p.detach().clone() for p in ps] for i, ps in by_layer.items()}

    def loss_with(dropped: set[int]) -> float:
        for i, ps in by_layer.items():
            for p, keep in zip(ps, saved[i], strict=True):
                p.data.copy_(torch.zeros_like(keep) if i in dropped else keep)
        return eval_loss(model, held.examples, args.batch, pad)

    t0 = time.perf_counter()
    rows = [("base model (every layer's LoRA off)", loss_with(set(by_layer)))] if args.base else []
    rows.append(("the whole adapter", loss_with(set())))
    for lo, hi in layer_ranges(args.drop):
        rows.append((f"LoRA off in layers {lo}-{hi}", loss_with(set(range(lo, hi + 1)))))
    print(f"run={run.name} eval examples={len(held.examples)} layers={len(by_layer)} "
          f"threads={torch.get_num_threads()} {time.perf_counter() - t0:.0f} s")
    print("| LoRA | eval loss | perplexity |\n|---|---|---|")
    for label, loss in rows:
        print(f"| {label} | {loss:.4f} | {torch.tensor(loss).exp().item():.2f} |")


if __name__ == "__main__":
    main()
