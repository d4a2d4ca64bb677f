"""Peak-memory measurement for a process: CUDA allocator peak on GPU, resident-set high-water mark
(VmHWM, reset through /proc/self/clear_refs) on CPU. Values in MiB."""

from __future__ import annotations

import ctypes
import functools
import resource
from pathlib import Path

import torch

MIB = 1024 * 1024


def reset_peak(device: torch.device) -> None:
    """Start a new peak window."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    try:
        Path("/proc/self/clear_refs").write_text("5")  # Linux >= 4.0: resets VmHWM to the current RSS
    except OSError:
        pass


def status_mib(field: str) -> float | None:
    """A memory field of this process's /proc/self/status ("VmHWM", "VmRSS", "VmPeak": kB there), in
    MiB; None where the file or the field is missing (not Linux)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def peak_mib(device: torch.device) -> float:
    """Peak memory since the last `reset_peak` (CUDA: allocated tensors; CPU: resident set), MiB."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / MIB
    hwm = status_mib("VmHWM")
    return hwm if hwm is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_mib(device: torch.device) -> float:
    """Memory in use now (CUDA: allocated; CPU: resident set), MiB."""
    if device.type == "cuda":
        return torch.cuda.memory_allocated(device) / MIB
    return status_mib("VmRSS") or 0.0


PRELOADED_ALLOCATORS = ("jemalloc", "tcmalloc")
MALLCTL_ARENAS_ALL = 4096  # jemalloc >= 5: the arena index that means every arena ("arena.4096.purge")


@functools.cache
def c_allocator() -> str:
    """The C allocator serving this process's `malloc`: `jemalloc` or `tcmalloc` when its library is
    mapped (it is then preloaded, `LD_PRELOAD`, since torch links neither), else `glibc`. Fixed for
    the life of the process, so read once (/proc/self/maps)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return "glibc"
    return next((name for name in PRELOADED_ALLOCATORS if f"lib{name}" in maps), "glibc")


def release_free_memory(device: torch.device) -> None:
    """CPU: return the C allocator's free pages to the system, so memory freed by a step does not stay
    in the process between steps: glibc `malloc_trim(0)` (measured on SmolLM2, 16 steps with varying
    batch shapes: resident set 1.9 GB without, 1.0 GB with; about 10 ms), or under jemalloc a purge of
    every arena (`mallctl("arena.4096.purge")`, jemalloc(3) "arena.<i>.purge"; jemalloc also returns
    pages on its own decay timer). No-op on CUDA and under any other allocator."""
    if device.type != "cpu":
        return
    try:
        if c_allocator() == "jemalloc":
            ctypes.CDLL(None).mallctl(f"arena.{MALLCTL_ARENAS_ALL}.purge".encode(), None, None, None,
                                      ctypes.c_size_t(0))
        elif c_allocator() == "glibc":
            ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class FreeMemoryReleaser:
    """When to call `release_free_memory` between optimizer steps (CPU): only when the resident set
    after a step has grown past `growth` times the reference level, which is the highest resident set
    after any of the run's first `window` steps (so that a schedule whose steps differ, e.g. `topfull`'s
    full step every N-th, settles at its largest step), raised to the resident set right after a
    release when a release cannot bring it below that level (memory the run really holds).

    The reference is kept across releases, so the resident set stays within `growth` times the first
    settled level. An earlier rule settled a new reference after every release, at the fragmented
    level the heap had reached, and let the resident set climb by `growth` per release: measured over
    200 GSM8K steps of 103-384 tokens (bench/rss_flat.py, BENCHMARKS.md 1e) it grew 1.25x, against
    1.50x with no release and 1.09x with a release after every step.

    Releasing after every step costs more than the release itself: the next step faults the returned
    pages back in. Measured interleaved on SmolLM2-135M NF4, `topfull/4`, 4 x 256, one thread
    (bench/trainer_overhead.py, BENCHMARKS.md 1e): the trainer's step was 1.10x the bare step with a
    trim after every step and 1.00x without. Steps of one shape keep a flat resident set without
    releases; batches of varying shapes fragment the heap and make it grow, and then it is released.
    `after_step` returns True when it released. No-op on CUDA (the caching allocator holds its own
    pool). Raises ValueError for `growth` <= 1 or `window` < 1."""

    def __init__(self, device: torch.device, growth: float = 1.25, window: int = 8) -> None:
        if growth <= 1.0:
            raise ValueError(f"growth must be > 1.0, got {growth}")
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.device, self.growth, self.window = device, growth, window
        self.reference_mib = 0.0  # the level the resident set may grow `growth` times past, MiB
        self.steps = 0

    def after_step(self, rss_mib: float | None = None) -> bool:
        """Call after each optimizer step; `rss_mib` (the resident set now, MiB) defaults to
        `current_mib`. Returns whether it released free memory."""
        if self.device.type != "cpu":
            return False
        rss = current_mib(self.device) if rss_mib is None else rss_mib
        self.steps += 1
        if self.steps <= self.window:
            self.reference_mib = max(self.reference_mib, rss)
            return False
        if rss <= self.reference_mib * self.growth:
            return False
        release_free_memory(self.device)
        self.reference_mib = max(self.reference_mib, current_mib(self.device))
        return True
