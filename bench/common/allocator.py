"""Keep freed memory inside glibc's heap (`retain_freed_memory`): bench/step_time.py's `--allocator retain`
mode, which times a step's compute without the page faults of memory mapped afresh (BENCHMARKS.md 1g)."""

from __future__ import annotations

import ctypes

import torch

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc <malloc.h> mallopt parameters


def retain_freed_memory(device: torch.device) -> bool:
    """CPU: keep memory a step frees inside the C allocator's heap instead of returning it to the system
    after every step (glibc `mallopt`: `M_MMAP_MAX` = 0, so no allocation gets its own `mmap` that `free`
    unmaps; `M_TRIM_THRESHOLD` = 2 GiB - 1, so `free` does not shrink the heap). The next step then reuses
    pages already mapped instead of faulting every activation page back in, which the kernel must also
    zero. Affects allocations made after the call, for the whole process. Resident memory stays near
    the largest step's level.

    A benchmark mode, not a product setting (it moved here from `lcsb_core.training.memory_probe`: nothing in the
    product called it): bench/step_time.py `--allocator retain` times compute alone with it. Measured
    on SmolLM2-135M NF4, 4 x 256: with the chunked loss, the default `topfull/4` step 1.12x faster and
    its peak 0.90x; without it, full backprop's step 1.13x faster but its peak 1.12x (bench/LOG.md,
    BENCHMARKS.md 1f). Returns whether the settings were applied (False on CUDA, or without glibc);
    glibc manual, "Memory Allocation Tunables"."""
    if device.type != "cpu":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(M_MMAP_MAX, 0)) and bool(libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1))
    except (OSError, AttributeError):
        return False
