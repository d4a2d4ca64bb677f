"""Step time and peak memory: full backprop vs freeze vs LCSB, measured side by side in one process.

    python bench/step_time.py                                  # CPU: SmolLM2-135M NF4, batch 4, seq 256
    python bench/step_time.py --quant nf4,bf16 --checkpointing both --fractions 0.125,0.25,0.5
    python bench/step_time.py --device cuda --shapes smollm2-135m,qwen2.5-0.5b,llama-3.2-1b,qwen2.5-3b \
        --seq 512                                                # GPU: random weights of on-device shapes

Each row: `--warmup` steps, then the mean over whole schedule cycles (at least `--steps`) of optimizer steps (forward, backward, AdamW) on
the same random batch (every token a target). Also measured: the forward pass alone (with autograd
recording, all layers trainable: the floor a step cannot beat) and the full backward
(= full step - forward). The ideal LCSB step is `forward + (k/L) * (full step - forward)`.
Memory: CUDA peak allocated; on CPU the peak resident set (after `malloc_trim`, VmHWM reset per row)
and, exactly, the bytes autograd saved for backward (`saved_tensors_hooks`), both in MiB.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lcsb_core.config import LoraSettings, OptimSettings  # noqa: E402
from lcsb_core.lora import apply_lora  # noqa: E402
from lcsb_core.loss import autocast_for, lm_loss_sums  # noqa: E402
from lcsb_core.memory_probe import MIB, current_mib, peak_mib, release_free_memory, reset_peak  # noqa: E402
from lcsb_core.models.loading import load_base_model, resolve_model_path  # noqa: E402
from lcsb_core.optim import build_optimizer  # noqa: E402
from lcsb_core.schedules import CyclicSchedule, resolve_k  # noqa: E402
from lcsb_core.selective import LayerMode, SelectiveBackprop  # noqa: E402
from lcsb_core.step import run_step  # noqa: E402

# Shapes of on-device models (Llama-architecture configs; random weights).
SHAPES = {
    "smollm2-135m": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                         num_key_value_heads=3, vocab_size=49152, tie_word_embeddings=True),
    "qwen2.5-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "llama-3.2-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                         num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=True),
    "qwen2.5-3b": dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
                       num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
}


def shape_folder(name: str, tmp: Path) -> Path:
    """Save a random-weight Llama of shape `name` (bf16) to a folder the normal loader reads."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**SHAPES[name], max_position_embeddings=4096, rms_norm_eps=1e-5)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    out = tmp / name
    model.save_pretrained(out)
    return out


class SavedBytes:
    """Bytes of the distinct storages autograd saves for backward (the activation memory of a step).

    The pack hook returns a detached alias: returning the tensor itself makes a saved output hold its
    own grad_fn, a reference cycle through the C++ graph that Python's gc cannot free (every hooked
    step then leaked its whole graph)."""

    def __init__(self):
        self.storages: dict[int, int] = {}

    @property
    def bytes(self) -> int:
        return sum(self.storages.values())

    def __enter__(self):
        def pack(t):
            storage = t.untyped_storage()
            self.storages[storage.data_ptr()] = storage.nbytes()
            return t.detach()

        self._ctx = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc):
        self._ctx.__exit__(*exc)


def measure(fn, device, warmup: int, steps: int) -> tuple[float, float, float]:
    """(mean seconds, peak MiB, largest saved-activation MiB) of `steps` calls of `fn()`. Callers pass
    whole cycles of the schedule: freeze/LCSB step times depend on which block is selected."""
    for _ in range(warmup):
        fn()
    release_free_memory(device)
    reset_peak(device)
    times = []
    for _ in range(steps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    peak = peak_mib(device)
    saved = 0.0
    for _ in range(steps):  # untimed, after the peak is read
        with SavedBytes() as sb:
            fn()
        saved = max(saved, sb.bytes / MIB)
    return statistics.fmean(times), peak, saved


def bench_model(folder: Path, label: str, quant: str, args, device) -> list[dict]:
    base = load_base_model(folder, quantization=quant, device=device)
    model = apply_lora(base, LoraSettings(rank=args.rank), seed=0)
    sel = SelectiveBackprop(model, skip_mode=LayerMode.SKIP)
    L = sel.num_layers
    params = [p for i in range(L) for p in sel.params_by_layer[i]]
    opt = build_optimizer(params, OptimSettings(learning_rate=1e-5))
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, model.config.vocab_size - 1, (args.batch, args.seq), generator=gen).to(device)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}
    release_free_memory(device)
    idle = current_mib(device)

    def step(selected, skip_mode, ckpt, t=[0], momentum=True):
        sel.skip_mode, sel.gradient_checkpointing = skip_mode, ckpt
        run_step(model, sel, opt, [batch], selected, step=t[0], momentum_for_skipped=momentum, max_grad_norm=1.0)
        t[0] += 1

    def forward_only():
        sel.select(range(L))
        sel.gradient_checkpointing = False
        with autocast_for(model):
            lm_loss_sums(model, batch).loss_sum.detach()

    rows = []

    def row(name, k, ckpt, fn):
        cycle = -(-L // k)
        steps = cycle * max(1, -(-args.steps // cycle))  # whole cycles, at least --steps
        sec, peak, saved = measure(fn, device, args.warmup, steps)
        rows.append(dict(model=label, quant=quant, schedule=name, k=k, layers=L, checkpointing=ckpt,
                         step_s=sec, peak_mib=peak, peak_over_idle_mib=peak - idle if device.type == "cpu" else peak,
                         saved_activations_mib=saved))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)

    all_layers = frozenset(range(L))
    for ckpt in args.checkpointing:
        row("full", L, ckpt, lambda: step(all_layers, LayerMode.SKIP, ckpt))
        if not ckpt:
            row("forward", L, False, forward_only)
        for frac in args.fractions:
            k = resolve_k(L, fraction=frac)
            cyc = CyclicSchedule(L, k)
            counter = iter(range(10**9))
            row("freeze", k, ckpt, lambda: step(cyc.layers_for_step(next(counter)), LayerMode.FROZEN, ckpt))
            counter2 = iter(range(10**9))
            row("lcsb", k, ckpt, lambda: step(cyc.layers_for_step(next(counter2)), LayerMode.SKIP, ckpt))
            if args.momentum_off_rows:
                counter3 = iter(range(10**9))
                row("lcsb-momentum-off", k, ckpt,
                    lambda: step(cyc.layers_for_step(next(counter3)), LayerMode.SKIP, ckpt, momentum=False))
    release_free_memory(device)
    return rows


def table(rows: list[dict]) -> str:
    out = ["| model | quant | schedule | k/L | ckpt | step (s) | vs full | vs freeze | ideal (s) | of ideal | "
           "peak (MiB) | peak over idle (MiB) | mem vs full | saved act. (MiB) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        same = [x for x in rows if x["model"] == r["model"] and x["quant"] == r["quant"]]
        fwd = next(x for x in same if x["schedule"] == "forward")
        full = next((x for x in same if x["schedule"] == "full" and x["checkpointing"] == r["checkpointing"]), None)
        freeze = next((x for x in same if x["schedule"] == "freeze" and x["k"] == r["k"]
                       and x["checkpointing"] == r["checkpointing"]), None)
        ideal = fwd["step_s"] + r["k"] / r["layers"] * (full["step_s"] - fwd["step_s"]) if full else None
        show = lambda v, f: f.format(v) if v is not None else ""  # noqa: E731
        is_lcsb = r["schedule"].startswith("lcsb")
        out.append("| " + " | ".join([
            r["model"], r["quant"], r["schedule"], f"{r['k']}/{r['layers']}", "on" if r["checkpointing"] else "off",
            f"{r['step_s']:.3f}",
            show(full["step_s"] / r["step_s"] if full and r["schedule"] != "forward" else None, "{:.2f}x"),
            show(freeze["step_s"] / r["step_s"] if freeze and is_lcsb else None, "{:.2f}x"),
            show(ideal if is_lcsb else None, "{:.3f}"),
            show(ideal / r["step_s"] if is_lcsb and ideal else None, "{:.0%}"),
            f"{r['peak_mib']:.0f}", f"{r['peak_over_idle_mib']:.0f}",
            show(r["peak_over_idle_mib"] / full["peak_over_idle_mib"] if full and r["schedule"] != "forward" else None, "{:.2f}x"),
            f"{r['saved_activations_mib']:.0f}",
        ]) + " |")
    return "\n".join(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--model", default="SmolLM2-135M-Instruct", help="real model (folder or default name)")
    ap.add_argument("--shapes", default="", help=f"random-weight shapes instead of --model: {','.join(SHAPES)}")
    ap.add_argument("--quant", default="nf4", help="comma list of nf4,bf16,fp32")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--fractions", default="0.25", help="comma list of k/L")
    ap.add_argument("--checkpointing", default="off", choices=["off", "on", "both"])
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="torch threads on CPU (0 = torch default)")
    ap.add_argument("--json", default="", help="also write rows to this JSON file")
    ap.add_argument("--momentum-off-rows", action="store_true",
                    help="add an LCSB row with momentum_for_skipped off (None grads: AdamW skips those layers)")
    args = ap.parse_args(argv)
    args.fractions = [float(f) for f in args.fractions.split(",")]
    args.checkpointing = {"off": [False], "on": [True], "both": [False, True]}[args.checkpointing]
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        targets = ([(shape_folder(s, Path(tmp)), s) for s in args.shapes.split(",")] if args.shapes
                   else [(resolve_model_path(args.model), Path(args.model).name)])
        for folder, label in targets:
            for quant in args.quant.split(","):
                rows += bench_model(folder, label, quant, args, device)
    print(f"device={args.device} batch={args.batch} seq={args.seq} rank={args.rank} "
          f"warmup={args.warmup} steps={args.steps} threads={torch.get_num_threads()} torch={torch.__version__}")
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
