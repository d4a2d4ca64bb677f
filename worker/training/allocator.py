"""Which C allocator the training child runs with: jemalloc (Debian's `libjemalloc2`, preloaded
through `LD_PRELOAD`) or glibc's `malloc`, from `Settings.worker_malloc`.

    child_malloc("jemalloc")  ->  ChildMalloc(name="jemalloc", preload="libjemalloc.so.2")
    child_malloc("jemalloc")  ->  ChildMalloc(name="glibc", preload=None, missing="jemalloc")  # not installed
    child_malloc("glibc")     ->  ChildMalloc(name="glibc", preload=None)

Why jemalloc is the default (BENCHMARKS.md 1h): the README main job (SmolLM2-135M NF4, `topfull/4`,
100 GSM8K steps of varying length) peaked at 2,861 MiB against 3,733 with glibc, a step's peak 0.56x
(median of per-step ratios), at the same step time (glibc / jemalloc 1.03x, IQR 0.96-1.13) and with
bit-identical losses; over 200 steps (bench/rss_flat.py, 1e) the resident set between steps stayed
near 1.1-1.4 GiB instead of 2.5-3.6. glibc's heap fragments under batches whose shapes change;
jemalloc returns freed pages on its own decay timer. Its peak virtual size is larger (4,021 against
3,625 MiB over 20 steps), far inside the `RLIMIT_AS` fallback cage (cap + 8,192 MiB). A worker
without the library runs the child on glibc and says so in the job's "Training process started"
event; nothing fails.
"""

from __future__ import annotations

import ctypes.util
import logging
from dataclasses import dataclass

from lcsb_service.settings import Malloc

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ChildMalloc:
    """The allocator a training child gets: `name` (`jemalloc` or `glibc`), `preload` (the library for
    `LD_PRELOAD`, a soname the dynamic linker finds on its search path; None for glibc) and `missing`
    (the allocator asked for but not installed here, or None)."""

    name: Malloc
    preload: str | None = None
    missing: Malloc | None = None

    def describe(self) -> str:
        """For the job's event: `jemalloc`, `glibc`, or `glibc (jemalloc is not installed on this worker)`."""
        return self.name if self.missing is None else f"{self.name} ({self.missing} is not installed on this worker)"

    def env(self, env: dict[str, str]) -> dict[str, str]:
        """`env` with `preload` put in front of any `LD_PRELOAD` already there."""
        if self.preload is None:
            return env
        before = env.get("LD_PRELOAD", "")
        return {**env, "LD_PRELOAD": f"{self.preload} {before}".strip()}


def child_malloc(wanted: Malloc) -> ChildMalloc:
    """The allocator for `wanted` on this machine: jemalloc's soname as `ctypes.util.find_library`
    finds it (the linker cache, `ldconfig -p`), glibc when it is not there (logged as a warning)."""
    if wanted == "glibc":
        return ChildMalloc("glibc")
    soname = ctypes.util.find_library("jemalloc")
    if soname is None:
        log.warning("LCSB_WORKER_MALLOC=jemalloc but libjemalloc is not installed: training on glibc's malloc "
                    "(Debian/Ubuntu: apt-get install libjemalloc2)")
        return ChildMalloc("glibc", missing="jemalloc")
    return ChildMalloc("jemalloc", preload=soname)
