"""Peak-memory measurement for a process: CUDA allocator peak on GPU, resident-set high-water mark
(VmHWM, reset through /proc/self/clear_refs) on CPU. Values in MiB."""

from __future__ import annotations

import ctypes
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


def peak_mib(device: torch.device) -> float:
    """Peak memory since the last `reset_peak` (CUDA: allocated tensors; CPU: resident set), MiB."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / MIB
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_mib(device: torch.device) -> float:
    """Memory in use now (CUDA: allocated; CPU: resident set), MiB."""
    if device.type == "cuda":
        return torch.cuda.memory_allocated(device) / MIB
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def release_free_memory(device: torch.device) -> None:
    """CPU: return the C allocator's free pages to the system (`malloc_trim(0)`), so memory freed by a
    step does not stay in the process between steps (measured on SmolLM2, 16 steps with varying batch
    shapes: resident set 1.9 GB without, 1.0 GB with; about 10 ms). No-op on CUDA and without glibc."""
    if device.type != "cpu":
        return
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
