"""Step time and peak memory of each schedule against full backprop, measured side by side in one process.

    # CPU: SmolLM2-135M NF4, 4 x 256
    python bench/step_time.py --schedules full,top,topfull/4,topfull/2,tail,freeze,cyclic
    python bench/step_time.py --quant nf4,bf16 --checkpointing both --fractions 0.125,0.25,0.5
    python bench/step_time.py --device cuda --shapes smollm2-135m,qwen2.5-0.5b,llama-3.2-1b,qwen2.5-3b \
        --seq 512                                                # GPU: random weights of on-device shapes

Rows run **interleaved** (see `bench_model`): `--warmup-rounds` untimed rounds, then `--rounds` rounds,
each running one whole cycle of every row (so a schedule is never timed mid-cycle) on the same random
batch (every token a target): optimizer steps (forward, backward, AdamW). Also measured: the forward
pass alone (with autograd recording, all layers trainable: the floor a step cannot beat). The ideal
step is `forward + (backprop layers / L) * (full step - forward)`, with a schedule's mean backprop
layers per step (`Schedule.backprop_layers`). Memory: CUDA peak allocated; on CPU the peak resident set
(after `malloc_trim`, VmHWM reset per row) and, exactly, the bytes autograd saved for backward
(`saved_tensors_hooks`), both in MiB.

`--allocator` (CPU): `trim` (the default) returns the C allocator's free pages before every cycle, as
the product's training loop may between steps, so each cycle pays the page faults of memory mapped
afresh, whose cost varies with the machine's state (BENCHMARKS.md 1f); `retain` calls
`bench.common.allocator.retain_freed_memory` first and never trims, so after the warm-up round the steps reuse
mapped pages and the times are compute alone (the peak columns are then not per row and are left out).
Another C allocator is chosen at process start (`LD_PRELOAD=libjemalloc.so.2 python bench/step_time.py`);
rows and the header record which one ran (`malloc`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common.allocator import retain_freed_memory
from bench.common.bare_step import bare_cycle, bare_model, random_batch, schedule_of, token_options
from bench.common.results import read_rows
from bench.common.timing import interleave, round_ratio
from lcsb_core.models.loading import resolve_model_path
from lcsb_core.models.modules import autocast_for
from lcsb_core.training.loss import lm_loss_sums
from lcsb_core.training.memory_probe import MIB, c_allocator, current_mib, release_free_memory

# Shapes of on-device models (Llama-architecture configs; random weights).
SHAPES: dict[str, dict[str, Any]] = {
    "smollm2-135m": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                         num_key_value_heads=3, vocab_size=49152, tie_word_embeddings=True),
    "qwen2.5-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "llama-3.2-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                         num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=True),
    "qwen2.5-3b": dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
                       num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
}


def shape_folder(name: str, tmp: Path, device: torch.device) -> Path:
    """Save a random-weight Llama of shape `name` (bf16, initialised on `device`: a 3B model's fp32
    initialisation on a CPU takes minutes) to a folder the normal loader reads."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    cfg = LlamaConfig(**SHAPES[name], max_position_embeddings=4096, rms_norm_eps=1e-5)
    torch.manual_seed(0)
    with device:
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    out = tmp / name
    model.save_pretrained(out)
    del model
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


def bench_model(folder: Path, label: str, quant: str, args, device) -> list[dict]:
    """Rows for every schedule token of `--schedules` plus the forward pass, measured **interleaved**:
    each of `--rounds` rounds runs one whole cycle of every row, in an order rotated round by round,
    so drift, warm-up and allocator state spread over all rows instead of landing on whichever row
    runs first. A row's step time is the median over rounds of its per-cycle mean; its peak memory is
    the largest over rounds (reset before each row's cycle)."""
    model, sel, opt = bare_model(folder, quant, args.rank, device)
    L = sel.num_layers
    batch = random_batch(model.config.vocab_size, args.batch, args.seq, device)
    release_free_memory(device)
    idle = current_mib(device)

    def forward_only():
        sel.select(range(L))
        sel.gradient_checkpointing = False
        with autocast_for(model):
            lm_loss_sums(model, batch).loss_sum.detach()

    rows = []  # (row dict, list of per-step callables for one cycle)
    for ckpt in args.checkpointing:
        if not ckpt:
            rows.append((dict(schedule="forward", k=L), [forward_only]))
        for token in args.schedules:
            full = token_options(token)[0].partition("/")[0].removesuffix("-momentum-off") == "full"
            for frac in ([1.0] if full else args.fractions):
                sched = schedule_of(token, L, frac)
                fns = bare_cycle(model, sel, opt, batch, token, fraction=frac, checkpointing=ckpt)
                rows.append((dict(schedule=token, k=sched.k, checkpointing=ckpt,
                                  backprop_layers=statistics.fmean(len(sched.backprop_layers(t))
                                                                   for t in range(sched.cycle_length))), fns))
    trim = args.allocator == "trim"
    times, peaks = interleave([fns for _, fns in rows], [row["schedule"] for row, _ in rows], device,
                              rounds=args.rounds, warmup_rounds=args.warmup_rounds, trim=trim)
    out = []
    for i, (row, fns) in enumerate(rows):
        saved = 0.0
        for fn in fns:  # untimed, after the peaks are read
            with SavedBytes() as sb:
                fn()
            saved = max(saved, sb.bytes / MIB)
        out.append(dict(model=label, quant=quant, layers=L, **{"checkpointing": False, "backprop_layers": None, **row},
                        step_s=statistics.median(times[i]), step_s_rounds=times[i], allocator=args.allocator,
                        malloc=c_allocator(),
                        peak_mib=peaks[i] if trim else None,
                        peak_over_idle_mib=(peaks[i] - idle if device.type == "cpu" else peaks[i]) if trim else None,
                        saved_activations_mib=saved))
        print(json.dumps(out[-1]), file=sys.stderr, flush=True)
    release_free_memory(device)
    return out


def with_head(schedule: str, token: str) -> str:
    """The token of reference schedule `schedule` (`full`, `freeze`) with the LM head of schedule token
    `token`: `full` for `topfull/4`, `full+chunk16` for `topfull/4+chunk16+recompute` (`token_options`),
    so each row is compared with its reference under the same head."""
    chunk = token_options(token)[1]
    return f"{schedule}+chunk{chunk}" if chunk else schedule


def speedups(rows: list[dict]) -> dict[tuple, dict[str, float]]:
    """Per row (keyed by `row_key`): `vs full` and `vs freeze`, each the median over rounds of the
    per-round ratio (`round_ratio`) to full backprop and to freeze at the same k and checkpointing,
    where those rows exist. Rows of one model and quant were timed in the same rounds."""
    out: dict[tuple, dict[str, float]] = {}
    for r in rows:
        if r["schedule"] == "forward":
            continue
        same = [x for x in rows if x["model"] == r["model"] and x["quant"] == r["quant"]
                and x["checkpointing"] == r["checkpointing"]]
        full = next((x for x in same if x["schedule"] == with_head("full", r["schedule"])), None)
        freeze = next((x for x in same if x["schedule"] == with_head("freeze", r["schedule"]) and x["k"] == r["k"]),
                      None)
        out[row_key(r)] = {name: round_ratio(ref["step_s_rounds"], r["step_s_rounds"])
                           for name, ref in (("vs full", full), ("vs freeze", freeze)) if ref and ref is not r}
    return out


def row_key(r: dict) -> tuple:
    """What identifies a row across runs: model, quant, schedule, k, checkpointing."""
    return r["model"], r["quant"], r["schedule"], r["k"], r["checkpointing"]


def compare(a: list[dict], b: list[dict]) -> str:
    """Markdown: each speed-up of run `a` beside the same one of run `b` (two `--json` files of the same
    command) and b / a - 1 in percent, the reproducibility check of issue 14 item 1 (target: within
    +-10 %). Rows present in only one run are left out."""
    sa, sb = speedups(a), speedups(b)
    out = ["| model | quant | schedule | k | ckpt | ratio | run A | run B | B / A - 1 |",
           "|---|---|---|---|---|---|---|---|---|"]
    for key, ra in sa.items():
        for name, va in ra.items():
            vb = sb.get(key, {}).get(name)
            if vb is None:
                continue
            model, quant, schedule, k, ckpt = key
            out.append(f"| {model} | {quant} | {schedule} | {k} | {'on' if ckpt else 'off'} | {name} | {va:.2f}x | "
                       f"{vb:.2f}x | {vb / va - 1:+.1%} |")
    return "\n".join(out)


def table(rows: list[dict]) -> str:
    """Markdown: per row the step time (median over rounds), its spread, the speed-up over full backprop
    and over freeze at the same k (medians of per-round ratios, `speedups`), the ideal (forward + the
    back-propagated share of full's backward) and the memory columns."""
    ratios = speedups(rows)
    out = ["| model | quant | schedule | k/L | backprop layers | ckpt | step (s) | rounds min-max (s) | vs full | "
           "vs freeze | ideal (s) | of ideal | peak (MiB) | peak over idle (MiB) | mem vs full | saved act. (MiB) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        same = [x for x in rows if x["model"] == r["model"] and x["quant"] == r["quant"]]
        fwd = next(x for x in same if x["schedule"] == "forward")
        full = next((x for x in same if x["schedule"] == with_head("full", r["schedule"])
                     and x["checkpointing"] == r["checkpointing"]), None)
        is_step = r["schedule"] != "forward"
        ideal = (fwd["step_s"] + r["backprop_layers"] / r["layers"] * (full["step_s"] - fwd["step_s"])
                 if full and is_step else None)
        show = lambda v, f: f.format(v) if v is not None else ""  # noqa: E731
        out.append("| " + " | ".join([
            r["model"], r["quant"], r["schedule"], f"{r['k']}/{r['layers']}",
            show(r.get("backprop_layers"), "{:.1f}"), "on" if r["checkpointing"] else "off",
            f"{r['step_s']:.3f}", f"{min(r['step_s_rounds']):.2f}-{max(r['step_s_rounds']):.2f}",
            show(ratios.get(row_key(r), {}).get("vs full"), "{:.2f}x"),
            show(ratios.get(row_key(r), {}).get("vs freeze"), "{:.2f}x"),
            show(ideal, "{:.3f}"), show(ideal / r["step_s"] if ideal else None, "{:.0%}"),
            show(r["peak_mib"], "{:.0f}"), show(r["peak_over_idle_mib"], "{:.0f}"),
            show(r["peak_over_idle_mib"] / full["peak_over_idle_mib"]
                 if full and is_step and r["peak_over_idle_mib"] is not None else None, "{:.2f}x"),
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
    ap.add_argument("--schedules", default="full,freeze,cyclic",
                    help="comma list of schedule tokens name[/full_every], e.g. full,top,topfull/4,tail,freeze,cyclic; "
                         "a -momentum-off suffix (cyclic-momentum-off) gives skipped layers None gradients")
    ap.add_argument("--warmup-rounds", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds (each runs one whole cycle of every row)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads on CPU (0 = torch default)")
    ap.add_argument("--allocator", default="trim", choices=["trim", "retain"],
                    help="CPU: malloc_trim before every cycle (trim), or retain freed memory and time compute alone")
    ap.add_argument("--json", default="", help="also write rows to this JSON file")
    ap.add_argument("--compare", nargs=2, metavar=("A.json", "B.json"),
                    help="measure nothing: print each speed-up of two --json runs side by side")
    args = ap.parse_args(argv)
    if args.compare:
        a, b = (read_rows(f) for f in args.compare)
        print(compare(a, b))
        return
    args.fractions = [float(f) for f in args.fractions.split(",")]
    args.schedules = args.schedules.split(",")
    args.checkpointing = {"off": [False], "on": [True], "both": [False, True]}[args.checkpointing]
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if args.allocator == "retain" and not retain_freed_memory(device):
        raise SystemExit("--allocator retain needs a CPU device and glibc")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        targets = ([(shape_folder(s, Path(tmp), device), s) for s in args.shapes.split(",")] if args.shapes
                   else [(resolve_model_path(args.model), Path(args.model).name)])
        for folder, label in targets:
            for quant in args.quant.split(","):
                rows += bench_model(folder, label, quant, args, device)
    print(f"device={args.device} batch={args.batch} seq={args.seq} rank={args.rank} "
          f"warmup_rounds={args.warmup_rounds} rounds={args.rounds} threads={torch.get_num_threads()} "
          f"allocator={args.allocator} malloc={c_allocator()} "
          f"torch={torch.__version__}")
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))




if __name__ == "__main__":
    main()
