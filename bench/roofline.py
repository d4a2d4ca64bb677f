"""A roofline for this machine (issue 14, item 4): what GEMMs of the model's shapes reach, what the forward pass
reaches, and where the forward's time goes.

    # the full measurement (CPU, SmolLM2-135M-Instruct NF4, batch 4 x 256, all cores; bf16 GEMMs on a CPU
    # without AVX512-BF16/AMX take minutes, the LM head's alone about 100 s):
    python bench/roofline.py --dtypes fp32,bf16 --forward-reps 5 --json bench/results/roofline_cpu.json
    # a smoke run (seconds; says nothing about speed):
    OMP_NUM_THREADS=1 python bench/roofline.py --batch 1 --seq 64 --threads 1 --forward-reps 1 --min-time 0.05

Three parts, printed in order (stdout):

1. The machine: torch's CPU capability (`torch.backends.cpu.get_cpu_capability()`: AVX2, AVX512, ...),
   whether it has bf16 matrix units (AVX512-BF16/AMX), threads, and the dtype an NF4 base computes in
   here (`lcsb_core.models.quantization.compute_dtype`: bf16 with those units, else fp32).
2. GEMM throughput at the model's matmul shapes, per dtype of `--dtypes`: `F.linear(x, W)` with x
   [tokens, in] (tokens = batch x seq) and W [out, in] for each projection of a decoder layer, the LoRA
   A and B matmuls (in -> r, r -> out) of the largest projection, and the LM head (hidden -> vocab).
   Seconds per call (median of calls after one untimed call, repeated for at least `--min-time`
   seconds; a single call longer than that is the measurement), FLOP/s = 2 x tokens x in x out / s.
   The practical peak is the best FLOP/s over these shapes in the compute dtype.
3. The forward pass (bench/step_time.py's forward row: `lm_loss_sums` under the model's autocast, all
   layers trainable, autograd recording): its FLOPs counted analytically from config.json (base
   projections 2 x tokens x in x out, LoRA 2 x tokens x r x (in + out) per adapted projection, attention
   QK^T and AV over the causal half, 2 x batch x heads x seq^2 x head_dim per layer, the LM head
   2 x targets x hidden x vocab; norms and elementwise not counted), seconds (median of
   `--forward-reps`), achieved FLOP/s and its share of the practical peak; and the GEMM-bound time, what
   its GEMMs alone would take at the rates measured in part 2. Then a torch.profiler breakdown of one
   forward (self CPU time of each op, given to the category of its nearest categorized ancestor):
   NF4 dequantization (`bitsandbytes::dequantize_4bit`), NF4 glue (the other bitsandbytes ops and its
   autograd function), base GEMMs, LoRA GEMMs (a dimension equal to r), LM head GEMM (a dimension equal
   to the vocab), attention (SDPA), loss (log-softmax, NLL), norms/elementwise/other ops (the rest), and
   Python/dispatch (the profiled forward's wall time minus the ops' self times); milliseconds and shares.
   The profiler adds its own overhead, so its total is above the unprofiled forward.

`--json` writes every number.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common.bare_step import bare_model, random_batch
from lcsb_core.models.loading import resolve_model_path
from lcsb_core.models.modules import autocast_for
from lcsb_core.models.quantization import compute_dtype, cpu_has_native_bf16
from lcsb_core.models.shapes import projection_shapes
from lcsb_core.training.loss import lm_loss_sums

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def seconds_per_call(fn, min_time: float) -> float:
    """Median seconds of `fn()` over calls after one untimed call, repeated until `min_time` seconds have
    passed (at least one timed call); a first call longer than `min_time` is itself the measurement."""
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    if first >= min_time:
        return first
    times: list[float] = []
    while not times or sum(times) < min_time:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def gemm_shapes(config: dict, rank: int) -> dict[str, tuple[int, int]]:
    """(in, out) of every matmul shape of the model: the seven projections, LoRA A and B of the widest
    projection, the LM head."""
    shapes = projection_shapes(config)
    i_in, i_out = max(shapes.values(), key=lambda s: s[0] * s[1])
    return {**shapes, "lora_A (in->r)": (i_in, rank), "lora_B (r->out)": (rank, i_out),
            "lm_head": (config["hidden_size"], config["vocab_size"])}


def gemm_throughput(shapes: dict[str, tuple[int, int]], tokens: int, dtype: torch.dtype, min_time: float) -> dict:
    """{shape name: {in, out, s, flops_per_s}} for `F.linear(x [tokens, in], W [out, in])` in `dtype`."""
    gen = torch.Generator().manual_seed(0)
    out = {}
    for name, (k, n) in shapes.items():
        x = torch.randn(tokens, k, generator=gen).to(dtype)
        w = torch.randn(n, k, generator=gen).to(dtype)
        s = seconds_per_call(lambda x=x, w=w: F.linear(x, w), min_time)
        out[name] = dict(**{"in": k, "out": n}, s=s, flops_per_s=2 * tokens * k * n / s)
        print(f"  {str(dtype).removeprefix('torch.'):5s} {name:16s} [{tokens} x {k}] x [{k} x {n}]: "
              f"{s * 1e3:9.2f} ms  {out[name]['flops_per_s'] / 1e9:8.1f} GFLOP/s", file=sys.stderr, flush=True)
    return out


def forward_flops(config: dict, batch: int, seq: int, rank: int, targets: int) -> dict[str, float]:
    """Analytic FLOPs of one forward by part (see the module docstring for what is counted)."""
    layers, hidden, vocab = config["num_hidden_layers"], config["hidden_size"], config["vocab_size"]
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    tokens = batch * seq
    shapes = projection_shapes(config)
    return {
        "base GEMMs": 2.0 * tokens * layers * sum(a * b for a, b in shapes.values()),
        "LoRA GEMMs": 2.0 * tokens * layers * sum(rank * (a + b) for a, b in shapes.values()),
        "attention": 2.0 * batch * heads * seq * seq * head_dim * layers,  # 4 b h s^2 d over the causal half
        "LM head GEMM": 2.0 * targets * hidden * vocab,
    }


CATEGORIES = ["NF4 dequantization", "NF4 glue", "base GEMMs", "LoRA GEMMs", "LM head GEMM", "attention", "loss",
              "norms/elementwise/other ops", "Python/dispatch"]
GEMM_OPS = ("aten::linear", "aten::matmul", "aten::mm", "aten::addmm", "aten::bmm")


def category(event, rank: int, vocab: int, projections: list[tuple[int, int]]) -> str | None:
    """The category an op anchors (None: not an anchor; its self time goes to its nearest anchor). A matmul
    is a base GEMM only when its shapes hold both dimensions of one of `projections` (the rotary
    embedding's small matmul is not)."""
    name = event.name
    if "dequantize" in name and "bitsandbytes" in name:
        return "NF4 dequantization"
    if "bitsandbytes" in name or name == "MatMul4Bit":
        return "NF4 glue"
    if "scaled_dot_product" in name or "flash_attention" in name:
        return "attention"
    if any(s in name for s in ("cross_entropy", "log_softmax", "nll_loss")):
        return "loss"
    if name in GEMM_OPS:
        dims = {d for shape in event.input_shapes or [] for d in shape}
        if vocab in dims:
            return "LM head GEMM"
        if rank in dims:
            return "LoRA GEMMs"
        return "base GEMMs" if any(k in dims and n in dims for k, n in projections) else None
    return None


def forward_breakdown(run_forward, rank: int, config: dict) -> dict[str, float]:
    """Seconds of one profiled forward by category (see the module docstring)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        t0 = time.perf_counter()
        run_forward()
        wall = time.perf_counter() - t0
    out = dict.fromkeys(CATEGORIES, 0.0)
    projections = list(projection_shapes(config).values())
    for event in prof.events():
        anchor, cat = event, None
        while anchor is not None and (cat := category(anchor, rank, config["vocab_size"], projections)) is None:
            anchor = anchor.cpu_parent
        out[cat or "norms/elementwise/other ops"] += event.self_cpu_time_total / 1e6
    out["Python/dispatch"] = max(0.0, wall - sum(out.values()))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="SmolLM2-135M-Instruct", help="catalog name or model folder")
    ap.add_argument("--quant", default="nf4", choices=["nf4", "bf16", "fp32"])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--dtypes", default="fp32,bf16", help="comma list of GEMM dtypes to measure: fp32,bf16")
    ap.add_argument("--min-time", type=float, default=1.0, help="seconds of timed calls per GEMM shape")
    ap.add_argument("--forward-reps", type=int, default=5, help="timed forward passes (after one untimed)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    ap.add_argument("--json", default="", help="also write every number to this JSON file")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    folder = resolve_model_path(args.model)
    config = json.loads((folder / "config.json").read_text())
    tokens = args.batch * args.seq
    compute = compute_dtype(device) if args.quant == "nf4" else DTYPES.get(args.quant, torch.bfloat16)
    compute_name = str(compute).removeprefix("torch.").replace("float32", "fp32").replace("bfloat16", "bf16")
    machine = dict(cpu_capability=torch.backends.cpu.get_cpu_capability(), native_bf16=cpu_has_native_bf16(),
                   threads=torch.get_num_threads(), compute_dtype=compute_name, torch=torch.__version__)
    print("machine: " + " ".join(f"{k}={v}" for k, v in machine.items()))

    shapes = gemm_shapes(config, args.rank)
    gemms = {name: gemm_throughput(shapes, tokens, DTYPES[name], args.min_time) for name in args.dtypes.split(",")}
    print(f"\nGEMM throughput, GFLOP/s, x [{tokens} x in] times W^T [in x out]:")
    names = list(args.dtypes.split(","))
    print("| shape | in | out | " + " | ".join(f"{d} (ms)" for d in names) + " | "
          + " | ".join(f"{d} (GFLOP/s)" for d in names) + " |")
    print("|---|---|---|" + "---|" * (2 * len(names)))
    for shape, (k, n) in shapes.items():
        print(f"| {shape} | {k} | {n} | " + " | ".join(f"{gemms[d][shape]['s'] * 1e3:.2f}" for d in names) + " | "
              + " | ".join(f"{gemms[d][shape]['flops_per_s'] / 1e9:.1f}" for d in names) + " |")
    peak = max(r["flops_per_s"] for r in gemms[compute_name].values()) if compute_name in gemms else None

    model, sel, _ = bare_model(folder, args.quant, args.rank, device)
    sel.select(range(sel.num_layers))
    batch = random_batch(config["vocab_size"], args.batch, args.seq, device)
    targets = int((batch["labels"][:, 1:] != -100).sum())

    def run_forward() -> None:
        with autocast_for(model):
            lm_loss_sums(model, batch).loss_sum.detach()

    run_forward()  # untimed
    fwd_times = []
    for _ in range(args.forward_reps):
        t0 = time.perf_counter()
        run_forward()
        fwd_times.append(time.perf_counter() - t0)
    fwd_s = statistics.median(fwd_times)
    flops = forward_flops(config, args.batch, args.seq, args.rank, targets)
    total = sum(flops.values())
    layers = config["num_hidden_layers"]
    gemm_bound = None
    if compute_name in gemms:
        rate = {s: gemms[compute_name][s]["s"] for s in shapes}
        gemm_bound = (layers * sum(rate[s] for s in projection_shapes(config)) + rate["lm_head"] * targets / tokens)
    print(f"\nforward ({args.batch} x {args.seq}, {compute_name}): {fwd_s:.3f} s, {total / 1e9:.2f} GFLOP counted "
          f"({', '.join(f'{k} {v / 1e9:.2f}' for k, v in flops.items())}), {total / fwd_s / 1e9:.1f} GFLOP/s achieved")
    if peak and gemm_bound is not None:
        print(f"practical peak ({compute_name} GEMM, best shape): {peak / 1e9:.1f} GFLOP/s; forward at "
              f"{total / fwd_s / peak:.1%} of it; its base and LM-head GEMMs alone at the measured per-shape rates: "
              f"{gemm_bound:.3f} s ({gemm_bound / fwd_s:.0%} of the forward)")
    breakdown = forward_breakdown(run_forward, args.rank, config)
    profiled = sum(breakdown.values())
    print(f"\nforward breakdown (torch.profiler, one forward, {profiled:.3f} s profiled):")
    print("| part | ms | share |")
    print("|---|---|---|")
    for cat in CATEGORIES:
        print(f"| {cat} | {breakdown[cat] * 1e3:.1f} | {breakdown[cat] / profiled:.1%} |")
    if args.json:
        Path(args.json).write_text(json.dumps(dict(
            args=vars(args), machine=machine, gemms=gemms, peak_flops_per_s=peak, forward_s=fwd_s,
            forward_s_reps=fwd_times,
            forward_flops=flops, forward_flops_per_s=total / fwd_s, gemm_bound_s=gemm_bound,
            breakdown_s=breakdown), indent=1))


if __name__ == "__main__":
    main()
