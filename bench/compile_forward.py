"""Does `torch.compile` (inductor, CPU) make the forward pass or a training step faster? (issue 14, item 4)

Two copies of the same model (SmolLM2-135M-Instruct NF4, LoRA r16 on the 7 projections, the same LoRA
initialisation): one eager, one with every decoder layer's attention and MLP blocks compiled in place
(`nn.Module.compile()`, inductor; the layer's own forward stays eager because `SelectiveBackprop` wraps
it, so its mode switches never recompile). Measured **interleaved** (bench/step_time.py's `interleave`,
rotated order, per-round ratios), on one random batch [batch, seq]:

- `forward`: `lm_loss_sums` under the model's autocast, all layers trainable, autograd recording;
- `full step`: one full-backprop `run_step` (forward, backward, clipping, AdamW).

Also printed: the seconds of the first compiled forward and step (the compilation, paid once per
process and shape), and how far the compiled model's loss and LoRA gradients are from the eager one's
on the same weights and batch before any step (inductor fuses ops, so bit-identity is not expected;
the relative difference is max |g_c - g_e| / max |g_e| over all LoRA tensors).

    python bench/compile_forward.py --rounds 4 --json bench/results/compile_forward_cpu.json
    python bench/compile_forward.py --seq 64 --batch 1 --rounds 1   # a smoke run (still compiles: minutes)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.step_time import bare_cycle, bare_model, interleave, random_batch, round_ratio
from lcsb_core.loss import autocast_for, lm_loss_sums
from lcsb_core.models.loading import resolve_model_path


def compile_blocks(sel) -> int:
    """Compile each decoder layer's `self_attn` and `mlp` in place; returns how many modules."""
    n = 0
    for layer in sel.layers:
        for name in ("self_attn", "mlp"):
            getattr(layer, name).compile()
            n += 1
    return n


def lora_grads(model, sel, batch) -> tuple[float, list[torch.Tensor]]:
    """(loss, LoRA gradients) of one forward and backward with every layer trainable; grads cleared after."""
    sel.select(range(sel.num_layers))
    with autocast_for(model):
        sums = lm_loss_sums(model, batch)
    loss = sums.loss_sum / sums.num_targets
    loss.backward()
    params = [p for i in range(sel.num_layers) for p in sel.params_by_layer[i]]
    grads = [p.grad.detach().clone() for p in params]
    for p in params:
        p.grad = None
    return float(loss.detach()), grads


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="SmolLM2-135M-Instruct")
    ap.add_argument("--quant", default="nf4", choices=["nf4", "bf16", "fp32"])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--warmup-rounds", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    device = torch.device("cpu")
    folder = resolve_model_path(args.model)
    eager = bare_model(folder, args.quant, args.rank, device)
    comp = bare_model(folder, args.quant, args.rank, device)
    compiled_modules = compile_blocks(comp[1])
    batch = random_batch(eager[0].config.vocab_size, args.batch, args.seq, device)

    t0 = time.perf_counter()
    loss_c, grads_c = lora_grads(comp[0], comp[1], batch)  # the first compiled forward + backward: compiles
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    loss_e, grads_e = lora_grads(eager[0], eager[1], batch)
    eager_first_s = time.perf_counter() - t0
    scale = max(float(g.abs().max()) for g in grads_e)
    grad_rel = max(float((c - e).abs().max()) for c, e in zip(grads_c, grads_e, strict=True)) / scale

    def forward_of(model, sel):
        def fwd():
            sel.select(range(sel.num_layers))
            with autocast_for(model):
                lm_loss_sums(model, batch).loss_sum.detach()
        return fwd

    names = ["eager forward", "compiled forward", "eager full step", "compiled full step"]
    cycles = [[forward_of(*eager[:2])], [forward_of(*comp[:2])],
              bare_cycle(*eager, batch, "full"), bare_cycle(*comp, batch, "full")]
    times, _ = interleave(cycles, names, device, rounds=args.rounds, warmup_rounds=args.warmup_rounds)
    result = {
        "model": Path(args.model).name, "quant": args.quant, "batch": args.batch, "seq": args.seq,
        "threads": torch.get_num_threads(), "torch": torch.__version__, "compiled_modules": compiled_modules,
        "first_forward_backward_s": {"compiled": compile_s, "eager": eager_first_s},
        "loss": {"eager": loss_e, "compiled": loss_c}, "lora_grad_max_rel_diff": grad_rel,
        "step_s": {n: statistics.median(t) for n, t in zip(names, times, strict=True)},
        "step_s_rounds": dict(zip(names, times, strict=True)),
        "speedup_forward": round_ratio(times[0], times[1]), "speedup_full_step": round_ratio(times[2], times[3]),
    }
    print(f"{result['model']} {args.quant} batch {args.batch} x {args.seq}, {result['threads']} threads, "
          f"torch {torch.__version__}; {compiled_modules} modules compiled")
    print(f"first forward+backward: compiled {compile_s:.1f} s (compiling), eager {eager_first_s:.1f} s")
    print(f"loss eager {loss_e:.6f}, compiled {loss_c:.6f}; LoRA grads max rel diff {grad_rel:.2e}")
    print("| mode | median (s) | rounds min-max (s) |\n|---|---|---|")
    for n, t in zip(names, times, strict=True):
        print(f"| {n} | {statistics.median(t):.3f} | {min(t):.2f}-{max(t):.2f} |")
    print(f"compiled vs eager (median of per-round ratios): forward {result['speedup_forward']:.3f}x, "
          f"full step {result['speedup_full_step']:.3f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
