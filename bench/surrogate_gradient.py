"""How close is LCSB's surrogate gradient to the exact one, block by block, and why?

    python bench/surrogate_gradient.py --out bench/results/surrogate_gradient.md
    python bench/surrogate_gradient.py --settings gsm8k --batches 4      # quicker

SmolLM2-135M-Instruct NF4, LoRA r16 on all projections with lora_B ~ N(0, 1e-3^2) (so every LoRA
parameter has a gradient; at initialization B = 0), cyclic blocks of k = 8 of 30 layers ([0-7], [8-15],
[16-23], [24-29]). Three data settings, batches of 4:
- `gsm8k`: GSM8K chat, loss on the answer only (the product default);
- `gsm8k-inputs`: the same rows with the prompt in the loss (`train_on_inputs`);
- `wikitext`: WikiText-2 (the first lines of `valid.txt`) in blocks of 256 tokens, every token a target.

Per setting, two disjoint sets of `--batches` batches each. Gradients are accumulated over a set (the
loss is the mean over the set's target tokens). Reported per block:
- **surrogate cosine**: cosine between the block's LoRA gradient under LCSB (the layers above are
  identity in backward, arXiv 2602.13073 Sec. 3) and its exact gradient (everything back-propagated),
  on the same set (mean of the two sets), and the norm ratio ||g_lcsb|| / ||g_exact||;
- **noise floor**: cosine between the exact block gradients of the two disjoint sets. A surrogate
  cosine far below it is a real loss of direction, not batch noise;
- **non-target share**: at the output of the block's top layer, the share of the exact gradient's
  squared norm (w.r.t. the hidden states) that sits on positions whose next token is not a target
  (prompt and template tokens; padding excluded). The identity path carries the gradient only along
  the residual stream of the same position, so what a skipped attention layer would move from target
  positions to the question positions above the block is lost: a large share here with a low cosine
  points at cross-position flow as the cause.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common.probe_model import DATA, nf4_lora_with_random_b, smollm2_tokenizer_and_path
from lcsb_core.data import build_dataset, gsm8k_to_chat, iter_batches
from lcsb_core.models.modules import autocast_for
from lcsb_core.training.loss import IGNORE_INDEX, lm_loss_sums
from lcsb_core.training.schedules import CyclicSchedule
from lcsb_core.training.selective import LayerMode, SelectiveBackprop


def setting_batches(name: str, tokenizer, n: int, scratch: Path) -> list[dict[str, torch.Tensor]]:
    """`n` batches of 4 for a data setting (see the module docstring), in file order."""
    import json

    scratch.mkdir(parents=True, exist_ok=True)
    if name.startswith("gsm8k"):
        rows = [json.loads(x) for x in (DATA / "gsm8k" / "train.jsonl").read_text().splitlines()[:4 * n]]
        path = scratch / "gsm8k.jsonl"
        path.write_text("".join(json.dumps(gsm8k_to_chat(r)) + "\n" for r in rows))
        ds = build_dataset(path, tokenizer, max_seq_len=384, min_examples=1, train_on_inputs=name == "gsm8k-inputs")
    elif name == "wikitext":
        lines = (DATA / "wikitext-2" / "valid.txt").read_text().splitlines(keepends=True)[:1500]
        path = scratch / "wikitext.txt"
        path.write_text("".join(lines))
        ds = build_dataset(path, tokenizer, max_seq_len=256, min_examples=1)
        ds.examples = ds.examples[:4 * n]
    else:
        raise SystemExit(f"--settings: unknown {name!r} (gsm8k, gsm8k-inputs, wikitext)")
    batches = list(iter_batches(ds, 4, seed=0, epoch=0, pad_token_id=tokenizer.pad_token_id, shuffle=False))
    if len(batches) < n:
        raise SystemExit(f"{name}: only {len(batches)} batches, need {n}")
    return batches[:n]


def accumulated_grads(model, sel: SelectiveBackprop, batches, selected, mode: LayerMode,
                      capture: Sequence[int] = ()) -> tuple[dict[int, torch.Tensor], dict[int, float]]:
    """(layer -> flattened fp32 LoRA gradient of `selected` summed over `batches` with the loss the mean
    over all their target tokens, layer -> non-target squared-norm share at that layer's output for
    the layers in `capture`)."""
    sel.skip_mode = mode
    sel.select(selected)
    model.zero_grad(set_to_none=True)
    total = sum(int((b["labels"][:, 1:] != IGNORE_INDEX).sum()) for b in batches)
    non_target, everything = {i: 0.0 for i in capture}, {i: 0.0 for i in capture}
    for batch in batches:
        outputs: dict[int, torch.Tensor] = {}
        def keep(m, a, out, i, outputs=outputs):
            outputs[i] = out[0] if isinstance(out, tuple) else out

        hooks = [sel.layers[i].register_forward_hook(lambda m, a, out, i=i, keep=keep: keep(m, a, out, i))
                 for i in capture]
        with autocast_for(model):
            sums = lm_loss_sums(model, batch)
        for hook in hooks:
            hook.remove()
        for out in outputs.values():
            out.retain_grad()
        (sums.loss_sum / total).backward()
        valid = batch["attention_mask"].bool()
        is_target = torch.zeros_like(valid)
        is_target[:, :-1] = batch["labels"][:, 1:] != IGNORE_INDEX  # position t predicts label t+1
        for i, out in outputs.items():
            if out.grad is None:
                raise RuntimeError(f"layer {i}: no gradient reached its output")
            g2 = out.grad.float().pow(2).sum(-1)  # [B, T]
            non_target[i] += float(g2[valid & ~is_target].sum())
            everything[i] += float(g2[valid].sum())
    grads = {i: torch.cat([p.grad.flatten().float() for p in sel.params_by_layer[i] if p.grad is not None])
             for i in selected}
    return grads, {i: non_target[i] / everything[i] for i in capture}


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a, b, dim=0))


def run_setting(name: str, model, sel: SelectiveBackprop, tokenizer, args) -> list[str]:
    batches = setting_batches(name, tokenizer, 2 * args.batches, Path("runs/bench_surrogate"))
    sets = [batches[:args.batches], batches[args.batches:]]
    L = sel.num_layers
    blocks = [sorted(CyclicSchedule(L, args.k).layers_for_step(t)) for t in range(-(-L // args.k))]
    tops = [b[-1] for b in blocks]
    exact, share = [], []
    for s in sets:
        g, sh = accumulated_grads(model, sel, s, range(L), LayerMode.SKIP, capture=tops)
        exact.append(g)
        share.append(sh)
    rows = []
    for block in blocks:
        flat = lambda g, block=block: torch.cat([g[i] for i in block])  # noqa: E731
        surrogate = [flat(accumulated_grads(model, sel, s, block, LayerMode.SKIP)[0]) for s in sets]
        cos = [cosine(surrogate[j], flat(exact[j])) for j in range(2)]
        ratio = [float(surrogate[j].norm() / flat(exact[j]).norm()) for j in range(2)]
        floor = cosine(flat(exact[0]), flat(exact[1]))
        nt = sum(sh[block[-1]] for sh in share) / 2
        rows.append(f"| {name} | {block[0]}-{block[-1]} | {L - 1 - block[-1]} | {sum(cos) / 2:.3f} | "
                    f"{sum(ratio) / 2:.3f} | {floor:.3f} | {nt:.1%} |")
        print(rows[-1], flush=True)
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--settings", default="gsm8k,gsm8k-inputs,wikitext")
    ap.add_argument("--batches", type=int, default=4, help="batches of 4 per set (two disjoint sets)")
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    tokenizer, path = smollm2_tokenizer_and_path()
    model = nf4_lora_with_random_b(path)
    sel = SelectiveBackprop(model, skip_mode=LayerMode.SKIP)
    head = ["| setting | block (layers) | skipped above | surrogate cosine | norm ratio | noise floor (cosine of "
            "two disjoint sets, exact) | non-target share at block top |", "|---|---|---|---|---|---|---|"]
    print("\n".join(head), flush=True)
    rows = [r for name in args.settings.split(",") for r in run_setting(name, model, sel, tokenizer, args)]
    text = "\n".join(head + rows) + (f"\n\n{args.batches} batches of 4 per set, k = {args.k}, "
                                     f"torch threads {torch.get_num_threads()}, {time.perf_counter() - t0:.0f} s\n")
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
