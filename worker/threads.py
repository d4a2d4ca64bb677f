"""How many CPU threads a training process runs and how its OpenMP threads wait (torch-free: the supervisor
decides before the child imports torch, which reads `OMP_NUM_THREADS` once, at import; libgomp reads
`OMP_WAIT_POLICY` once, when it loads). An inference worker takes the thread count too
(`worker.inference.serving`); its torch may be loaded already, so it keeps libgomp's wait policy.

    policy = thread_policy(override=settings.worker_torch_threads, wait_policy=settings.worker_omp_wait_policy,
                           slots=1)
    policy.env()       # {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE", "LCSB_THREAD_POLICY": "{...}"}
    policy.describe()  # "2 CPU threads (2 CPUs this worker may use (affinity) / 1 training slot), OpenMP wait PASSIVE"

The rule (`thread_policy`):

- CPUs this worker may use: the smaller of its CPU affinity (`os.sched_getaffinity`: cpusets, `taskset`)
  and its cgroup's CPU quota (v2 `cpu.max`, v1 `cpu.cfs_quota_us / cpu.cfs_period_us`, the smallest along
  the path from the worker's cgroup to the hierarchy's root: a container's or a systemd slice's limit).
  torch's own default counts the affinity only, so in a container limited to 2 CPUs of a 64-core host it
  starts 64 threads that the quota throttles.
- threads = max(1, floor(CPUs / slots)), `slots` the training processes this worker runs at once (the worker
  class's `max_concurrent_jobs`, default 1): concurrent jobs split the CPUs instead of each starting one
  thread per core. A quota below one CPU still gets one thread. `override` (`LCSB_WORKER_TORCH_THREADS`)
  wins over all of it.
- wait policy PASSIVE unless overridden (`LCSB_WORKER_OMP_WAIT_POLICY`): an OpenMP thread that reaches a
  barrier first sleeps instead of spinning (libgomp, torch's OpenMP on Linux CPU wheels: PASSIVE means
  `GOMP_SPINCOUNT` 0; the default spins 300,000 times; ACTIVE spins practically forever). A spinning
  thread holds its core while its team waits for the thread the scheduler parked behind another process,
  the 5-10x slowdown of issue 36 (a README main job step went from 3.5-9.5 s to 30-51 s beside one `nice`
  Python process on 2 cores).

What decides these numbers: bench/contention.py (BENCHMARKS.md "Training beside other work", issue 36,
to be filled by a run on a quiet machine) times the README main job's step quiet and beside a CPU-bound
process (nice and not), an inference stream and a second training process, for threads = cores, cores - 1
and 1 and each wait policy. The rule stands if its knob `auto` there keeps the quiet step no more than
5 % slower than torch's default and the step beside a CPU-bound process within 2.2x of its quiet time.
PASSIVE is the expectation (it gives up a core at every barrier instead of spinning on it), cores - 1 is
not (it costs the quiet step up to half its speed on 2 cores); `auto,slots=2` against `default` under
`train2` says whether splitting the CPUs between two jobs beats each taking all of them.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lcsb_service.settings import WaitPolicy

DEFAULT_WAIT_POLICY: WaitPolicy = "PASSIVE"
CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")
POLICY_ENV = "LCSB_THREAD_POLICY"   # the policy as JSON, for the child's start event


@dataclass(frozen=True)
class ThreadPolicy:
    """A training process's threads and OpenMP wait policy, with where they came from.

    threads: intra-op threads (>= 1). threads_from: "override" (the setting), "cpu quota" (the cgroup's
    quota was the tighter bound) or "affinity" (the CPUs the worker may run on). wait_policy: OpenMP's
    `OMP_WAIT_POLICY`. wait_from: "override" or "default". cpus: the CPUs this worker may use (a quota
    may be fractional). slots: concurrent training processes on this worker. quota_cpus: the cgroup
    quota in CPUs, None when there is none. affinity_cpus: CPUs in the affinity mask."""

    threads: int
    threads_from: str
    wait_policy: WaitPolicy
    wait_from: str
    cpus: float
    slots: int
    quota_cpus: float | None
    affinity_cpus: int

    def env(self) -> dict[str, str]:
        """The child's environment additions: OMP_NUM_THREADS (torch's intra-op threads), OMP_WAIT_POLICY,
        and the policy itself as JSON under `POLICY_ENV` (`from_env` reads it back)."""
        return {"OMP_NUM_THREADS": str(self.threads), "OMP_WAIT_POLICY": self.wait_policy,
                POLICY_ENV: json.dumps(self.to_dict(), separators=(",", ":"))}

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-able dict (the start event's `thread_policy`)."""
        return asdict(self)

    def describe(self) -> str:
        """For the job's events: "2 CPU threads (2 CPUs by the cgroup's quota / 1 training slot), OpenMP wait
        PASSIVE" or "1 CPU thread (LCSB_WORKER_TORCH_THREADS), OpenMP wait ACTIVE (LCSB_WORKER_OMP_WAIT_POLICY)"."""
        where = ("LCSB_WORKER_TORCH_THREADS" if self.threads_from == "override" else
                 f"{self.cpus:g} CPUs by the {'cgroup quota' if self.threads_from == 'cpu quota' else 'CPU affinity'}"
                 f" / {self.slots} training slot{'s' if self.slots != 1 else ''}")
        wait = " (LCSB_WORKER_OMP_WAIT_POLICY)" if self.wait_from == "override" else ""
        plural = "s" if self.threads != 1 else ""
        return f"{self.threads} CPU thread{plural} ({where}), OpenMP wait {self.wait_policy}{wait}"

    @staticmethod
    def from_env(environ: Mapping[str, str]) -> ThreadPolicy | None:
        """The policy a supervisor put in `environ` (`env`), or None when there is none or it does not parse."""
        raw = environ.get(POLICY_ENV)
        if not raw:
            return None
        try:
            return ThreadPolicy(**json.loads(raw))
        except (ValueError, TypeError):
            return None


def _cgroup_paths(proc_cgroup: Path) -> dict[str, str]:
    """{"v2": path, "cpu": path} from a /proc/<pid>/cgroup file ("0::/path" is v2; v1 lines name their
    controllers, "4:cpu,cpuacct:/path"); {} when it cannot be read."""
    out: dict[str, str] = {}
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            out["v2"] = path
        elif "cpu" in controllers.split(","):
            out["cpu"] = path
    return out


def _along(mount: Path, path: str) -> list[Path]:
    """The cgroup folders from the process's (`mount`/`path`) up to `mount`. A container without a cgroup
    namespace sees its host-side path in /proc/self/cgroup while its own cgroup is mounted at the root:
    when `path` is not under the mount, the mount alone."""
    start = mount / path.lstrip("/")
    if not start.is_dir():
        return [mount]
    folders = [start]
    while folders[-1] != mount and mount in folders[-1].parents:
        folders.append(folders[-1].parent)
    return folders


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _v2_quota(folder: Path) -> float | None:
    """CPUs of a v2 `cpu.max` ("150000 100000" -> 1.5; "max 100000" -> None)."""
    text = _read(folder / "cpu.max")
    if not text:
        return None
    quota, _, period = text.partition(" ")
    if quota == "max" or not quota.isdigit() or not period.strip().isdigit() or int(period) <= 0:
        return None
    return int(quota) / int(period)


def _v1_quota(folder: Path) -> float | None:
    """CPUs of v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us` (a quota of -1: None)."""
    quota, period = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
    try:
        q, p = int(quota or ""), int(period or "")
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None


def cpu_quota(cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> float | None:
    """The CPU quota over this process in CPUs (1.5 = one and a half CPUs of time per second), the
    smallest along its cgroup's path to the root, in cgroup v2 (`<root>/<path>/cpu.max`) and v1
    (`<root>/cpu,cpuacct/<path>/` or `<root>/cpu/<path>/`); None when no level has a quota or there is
    no cgroup filesystem. `cgroup_root` and `proc_cgroup` are parameters so tests can pass a fake tree."""
    paths = _cgroup_paths(proc_cgroup)
    found: list[float] = []
    if "v2" in paths and (cgroup_root / "cgroup.controllers").is_file():
        found += [q for f in _along(cgroup_root, paths["v2"]) if (q := _v2_quota(f)) is not None]
    if "cpu" in paths:
        mount = next((m for m in (cgroup_root / "cpu,cpuacct", cgroup_root / "cpu") if m.is_dir()), None)
        if mount is not None:
            found += [q for f in _along(mount, paths["cpu"]) if (q := _v1_quota(f)) is not None]
    return min(found) if found else None


def thread_policy(*, override: int | None = None, wait_policy: WaitPolicy | None = None, slots: int = 1,
                  cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP,
                  affinity: int | None = None) -> ThreadPolicy:
    """The training process's threads and wait policy by the module's rule.

    Args:
        override: threads from the setting (`worker_torch_threads`); wins when set.
        wait_policy: "PASSIVE" or "ACTIVE" from the setting (`worker_omp_wait_policy`); default PASSIVE.
        slots: training processes this worker runs at once (>= 1).
        cgroup_root, proc_cgroup: where the cgroup filesystem and this process's cgroup file are (tests).
        affinity: CPUs this process may run on; default `len(os.sched_getaffinity(0))` (`os.cpu_count()`
            where there is no affinity call).

    Raises:
        ValueError: slots < 1 or override < 1.
    """
    if slots < 1:
        raise ValueError(f"slots must be at least 1, got {slots}")
    if override is not None and override < 1:
        raise ValueError(f"override must be at least 1 thread, got {override}")
    if affinity is None:
        affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = cpu_quota(cgroup_root, proc_cgroup)
    cpus = min(float(affinity), quota) if quota is not None else float(affinity)
    if override is not None:
        threads, source = override, "override"
    else:
        threads = max(1, math.floor(cpus / slots))
        source = "cpu quota" if quota is not None and quota < affinity else "affinity"
    return ThreadPolicy(threads=threads, threads_from=source, wait_policy=wait_policy or DEFAULT_WAIT_POLICY,
                        wait_from="override" if wait_policy else "default", cpus=round(cpus, 3), slots=slots,
                        quota_cpus=round(quota, 3) if quota is not None else None, affinity_cpus=affinity)
