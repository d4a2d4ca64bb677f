"""When the trainer returns freed heap pages to the system (lcsb_core.training.memory_probe.FreeMemoryReleaser)."""

from __future__ import annotations

import pytest
import torch

from lcsb_core.training import memory_probe
from lcsb_core.training.memory_probe import FreeMemoryReleaser


def test_trims_only_when_the_resident_set_grows_past_the_first_settled_level(monkeypatch):
    trims: list[int] = []
    after_trim = iter([700.0, 1100.0, 1000.0])  # the resident set right after each release, MiB
    monkeypatch.setattr(memory_probe, "release_free_memory", lambda device: trims.append(1))
    monkeypatch.setattr(memory_probe, "current_mib", lambda device: next(after_trim))
    releaser = FreeMemoryReleaser(torch.device("cpu"), growth=1.25, window=4)
    # a topfull-like cycle: three small steps and a full one; it settles at the full step's level
    assert [releaser.after_step(r) for r in (800, 800, 800, 1000)] == [False] * 4
    assert releaser.reference_mib == 1000
    # the same cycle again, and up to 1.25 x 1,000: never trimmed
    assert [releaser.after_step(r) for r in (800, 810, 790, 1010, 1249)] == [False] * 5
    # the heap fragments: past 1.25 x 1,000 it is trimmed, back to 700 MiB; the reference stays 1,000
    assert releaser.after_step(1300) is True and trims == [1]
    assert releaser.reference_mib == 1000
    # it grows again: trimmed again at the same bar, not at 1.25 x a level settled after the trim
    assert [releaser.after_step(r) for r in (900, 1100, 1200, 1250)] == [False] * 4
    assert releaser.after_step(1251) is True and len(trims) == 2
    # a trim that cannot get below the reference (1,100 MiB really held) raises it, so the next
    # steps at that level are not trimmed again and again
    assert releaser.reference_mib == 1100
    assert [releaser.after_step(r) for r in (1200, 1300, 1375)] == [False] * 3
    assert releaser.after_step(1376) is True and len(trims) == 3
    assert releaser.reference_mib == 1100  # 1,000 after this release: it keeps the higher level


def test_cuda_never_trims_and_the_settings_are_checked(monkeypatch):
    monkeypatch.setattr(memory_probe, "release_free_memory", lambda device: pytest.fail("trimmed on CUDA"))
    releaser = FreeMemoryReleaser(torch.device("cuda"), window=1)
    assert [releaser.after_step(r) for r in (100, 1000, 10000)] == [False] * 3
    with pytest.raises(ValueError, match="growth"):
        FreeMemoryReleaser(torch.device("cpu"), growth=1.0)
    with pytest.raises(ValueError, match="window"):
        FreeMemoryReleaser(torch.device("cpu"), window=0)


def test_reads_the_real_resident_set_when_none_is_given():
    releaser = FreeMemoryReleaser(torch.device("cpu"))
    assert releaser.after_step() is False
    assert releaser.reference_mib > 10  # this Python process, MiB


STATUS_SCRIPT = """
import torch
from lcsb_core.training import memory_probe
cpu = torch.device("cpu")
rss, hwm, vm_peak = (memory_probe.status_mib(f) for f in ("VmRSS", "VmHWM", "VmPeak"))
block = torch.ones(64 * 2**20 // 4)  # 64 MiB, every page touched
print(rss, hwm, vm_peak, memory_probe.current_mib(cpu), memory_probe.peak_mib(cpu),
      memory_probe.status_mib("VmNoSuchField"))
"""


def test_the_status_fields_are_read_in_mib_and_a_missing_one_is_none():
    """In a fresh process: in this one, freed heap left by earlier tests can hold the 64 MiB block
    without the resident set growing (a CI failure: current 1,660 MiB before and after)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", STATUS_SCRIPT], capture_output=True, text=True, timeout=120,
                         check=True).stdout.split()
    rss, hwm, vm_peak, current, peak = map(float, out[:5])
    assert 10 < rss <= hwm <= vm_peak  # resident now <= resident peak <= virtual peak, MiB
    assert current >= rss + 60 and peak >= rss + 60  # the 64 MiB block is seen by both readings
    assert out[5] == "None"


RELEASE_SCRIPT = """
import torch
from lcsb_core.training.memory_probe import c_allocator, current_mib, release_free_memory
cpu = torch.device("cpu")
blocks = [torch.ones(64 * 2**20 // 4) for _ in range(8)]  # 512 MiB in 8 blocks, every page touched
held = current_mib(cpu)
del blocks
freed = current_mib(cpu)
release_free_memory(cpu)
print(c_allocator(), round(held), round(freed), round(current_mib(cpu)))
"""


@pytest.mark.parametrize("preload", [None, "libjemalloc.so.2"])
def test_the_release_returns_freed_pages_under_glibc_and_jemalloc(preload):
    """In a fresh process (the allocator is chosen at its start): 512 MiB freed and then released
    leave the resident set. jemalloc's own decay is turned off (MALLOC_CONF), so only the release
    (`arena.4096.purge`) can return its pages; glibc returns blocks this large at `free` already."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "MALLOC_CONF": "dirty_decay_ms:-1,muzzy_decay_ms:-1"}
    if preload:
        env["LD_PRELOAD"] = preload
    out = subprocess.run([sys.executable, "-c", RELEASE_SCRIPT], env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    name, held, freed, released = out[0], *map(int, out[1:])
    assert name == ("jemalloc" if preload else "glibc")
    assert released < held - 450  # MiB
    if preload:  # the freed pages stayed until the purge
        assert freed > held - 50
