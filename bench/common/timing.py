"""Interleaved timing: run several modes' step cycles round-robin, so that drift, warm-up and allocator
state spread over all of them, and compare two modes by the median of their per-round ratios
(BENCHMARKS.md 1f-1g: with 16 rounds a ratio reproduced within 6.4 %). Used by bench/step_time.py,
bench/peer.py and bench/trainer_overhead.py."""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence

import torch

from lcsb_core.training.memory_probe import peak_mib, release_free_memory, reset_peak


def timed(fn, device) -> float:
    """Seconds of one call of `fn()` (CUDA synchronized on both sides)."""
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def interleave(cycles: Sequence[Sequence[Callable[[], object]]], names: Sequence[str], device: torch.device, *,
               rounds: int, warmup_rounds: int, trim: bool = True) -> tuple[list[list[float]], list[float]]:
    """Run every mode's cycle (`cycles[i]`: the step callables of one whole cycle of mode i) round-robin:
    `warmup_rounds` untimed rounds, then `rounds` timed ones, the order rotated by one each round so
    drift, warm-up and allocator state spread over all modes. Before each cycle the C allocator's free
    pages are returned (`malloc_trim`; not with `trim=False`) and the peak window is reset.

    Returns (times, peaks): `times[i]` one entry per timed round, mode i's mean seconds per step over its
    cycle; `peaks[i]` the largest peak memory (MiB; CPU: resident set, CUDA: allocated) over its timed
    cycles. A line per round goes to stderr."""
    times: list[list[float]] = [[] for _ in cycles]
    peaks = [0.0] * len(cycles)
    for rnd in range(warmup_rounds + rounds):
        order = list(range(len(cycles)))
        order = order[rnd % len(order):] + order[:rnd % len(order)]
        for i in order:
            if trim:
                release_free_memory(device)
            reset_peak(device)
            cycle = [timed(fn, device) for fn in cycles[i]]
            if rnd >= warmup_rounds:
                times[i].append(statistics.fmean(cycle))
                peaks[i] = max(peaks[i], peak_mib(device))
        print(f"round {rnd + 1}/{warmup_rounds + rounds}: "
              + ", ".join(f"{names[i]} {times[i][-1]:.2f}s" for i in order if times[i]),
              file=sys.stderr, flush=True)
    return times, peaks


def round_ratio(num: Sequence[float], den: Sequence[float]) -> float:
    """Median over rounds of num[r] / den[r]: a ratio of two modes measured in the same round, so
    drift between rounds cancels."""
    return statistics.median(a / b for a, b in zip(num, den, strict=True))


def add_interleaved_bench_args(ap: argparse.ArgumentParser, *, schedule_help: str, rounds_help: str,
                               json_help: str) -> None:
    """The options bench/peer.py and bench/trainer_overhead.py share: model, quantization, device, batch
    shape (examples x tokens), LoRA rank, schedule token, warm-up and timed rounds, torch threads, JSON."""
    ap.add_argument("--model", default="SmolLM2-135M-Instruct", help="catalog name or model folder")
    ap.add_argument("--quant", default="nf4", choices=["nf4", "bf16", "fp32"])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--schedule", default="topfull/4", help=schedule_help)
    ap.add_argument("--warmup-rounds", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=8, help=rounds_help)
    ap.add_argument("--threads", type=int, default=0, help="torch threads on CPU (0 = torch default)")
    ap.add_argument("--json", default="", help=json_help)


