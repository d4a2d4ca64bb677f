"""Memory caps for the training child, the way a container limit works: past the cap the kernel kills
the child (SIGKILL), the worker survives and reports `oom` with the measured peak.

Preference (`create_cage`):

    cgroup v1   <parent>/lcsb-<worker pid>-<job id>/memory.limit_in_bytes = cap (memsw too when present)
    cgroup v2   <parent>/lcsb-<worker pid>-<job id>/memory.max = cap, memory.swap.max = 0
    rlimit      RLIMIT_AS = cap + Settings.address_space_slack_mib: a coarse fallback (it limits
                virtual address space, which torch reserves generously; allocation then fails with
                MemoryError instead of a kill)

The parent is `Settings.cgroup_parent`, else the worker's own memory cgroup (v1: a container's or a
sandbox's limit then still applies above the job's), else the hierarchy's root. v2 needs a parent
that delegates the memory controller (`cgroup.subtree_control`); the root does. The child joins its
cgroup itself, first thing (`enter_cage`), before it imports torch. On CUDA the cap is GPU memory:
the child calls `torch.cuda.set_per_process_memory_fraction` and no host cgroup is made.
The cgroup is removed after the job (`Cage.remove`); ones left by a killed worker are removed at the
next worker start (`remove_stale_cages`).

In a container whose cgroup filesystem is read-only, the container's limit is the cap (docker-compose
sets it a little above the class cap): the child sets its `oom_score_adj` to 1000 so that the kernel
kills it rather than the worker, and the enclosing cgroup's `oom_kill` counter tells an OOM kill from
any other SIGKILL.
"""

from __future__ import annotations

import logging
import os
import resource
import signal
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)
CGROUP_ROOT = Path("/sys/fs/cgroup")
PREFIX = "lcsb-"
MIB = 2**20


def _oom_kill_count(path: Path | None) -> int | None:
    """The `oom_kill N` line of a v1 memory.oom_control or a v2 memory.events file."""
    try:
        for line in path.read_text().splitlines() if path else []:
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
    except OSError:
        pass
    return None


@dataclass
class Cage:
    """A memory cap of `cap_mib` MiB: `kind` is cgroup-v1, cgroup-v2, rlimit or cuda. Without a cgroup
    of its own, `enclosing` is the OOM counter of the cgroup the worker runs in (a container's: its
    limit is then the real cap, and the child, with oom_score_adj 1000, is the kernel's first victim),
    read before the job (`enclosing_base`) and after."""

    kind: str
    cap_mib: int
    path: Path | None = None
    address_space_bytes: int | None = None
    enclosing: Path | None = None
    enclosing_base: int | None = None

    def to_spec(self) -> dict:
        """What the child needs to enter the cage (JSON)."""
        return {"kind": self.kind, "cap_mib": self.cap_mib, "path": str(self.path) if self.path else None,
                "address_space_bytes": self.address_space_bytes}

    def describe(self) -> str:
        return {"cgroup-v1": "a cgroup v1 memory limit", "cgroup-v2": "a cgroup v2 memory.max",
                "rlimit": "an address-space limit", "cuda": "a CUDA memory fraction"}[self.kind]

    def _read(self, name: str) -> str | None:
        try:
            return (self.path / name).read_text() if self.path else None
        except OSError:
            return None

    def peak_mib(self) -> float | None:
        """Peak memory charged to the cgroup (v1 max_usage_in_bytes, v2 memory.peak), MiB."""
        raw = self._read("memory.max_usage_in_bytes" if self.kind == "cgroup-v1" else "memory.peak")
        return round(int(raw) / MIB, 1) if raw and raw.strip().isdigit() else None

    def oom_kills(self) -> int | None:
        """Processes the kernel's OOM killer killed in the job's cgroup, or in the enclosing cgroup since
        the job started (None when not known)."""
        if self.path is not None:
            return _oom_kill_count(self.path / ("memory.oom_control" if self.kind == "cgroup-v1" else "memory.events"))
        now = _oom_kill_count(self.enclosing)
        return None if now is None or self.enclosing_base is None else now - self.enclosing_base

    def remove(self) -> None:
        """Kill what is left in the cgroup (the job's own processes) and remove it."""
        if self.path is None or not self.path.is_dir():
            return
        _remove_cgroup(self.path)


def _pids(path: Path) -> list[int]:
    try:
        return [int(p) for p in (path / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _remove_cgroup(path: Path, wait_s: float = 5.0) -> bool:
    """SIGKILL the cgroup's processes (the job's own) and rmdir it, retrying while the kernel still
    lists them (EBUSY). Returns False when it is still there after `wait_s`."""
    deadline = time.monotonic() + wait_s
    while path.is_dir():
        for pid in _pids(path):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            path.rmdir()
        except FileNotFoundError:
            break
        except OSError as exc:
            if time.monotonic() > deadline:
                log.warning("could not remove cgroup %s: %s", path, exc)
                return False
            time.sleep(0.05)
    return True


def cgroup_version(root: Path = CGROUP_ROOT) -> int | None:
    """1 (a v1 memory hierarchy at root/memory), 2 (unified with the memory controller) or None."""
    if (root / "memory" / "memory.limit_in_bytes").is_file():
        return 1
    controllers = root / "cgroup.controllers"
    if controllers.is_file() and "memory" in controllers.read_text().split():
        return 2
    return None


def _own_cgroup(version: int, proc_cgroup: Path = Path("/proc/self/cgroup")) -> str | None:
    try:
        for line in proc_cgroup.read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if (version == 1 and "memory" in controllers.split(",")) or (version == 2 and controllers == ""):
                return path
    except (OSError, ValueError):
        pass
    return None


def cgroup_parent(version: int, root: Path = CGROUP_ROOT, configured: Path | None = None,
                  proc_cgroup: Path = Path("/proc/self/cgroup")) -> Path | None:
    """A writable cgroup under which job cgroups can be made, or None."""
    base = root / "memory" if version == 1 else root
    candidates = [configured] if configured else []
    own = _own_cgroup(version, proc_cgroup)
    if version == 1 and own and own != "/":
        candidates.append(base / own.lstrip("/"))
    candidates.append(base)
    for parent in candidates:
        if not parent.is_dir() or not os.access(parent, os.W_OK):
            continue
        if version == 2:
            control = parent / "cgroup.subtree_control"
            try:
                if "memory" not in control.read_text().split():
                    control.write_text("+memory")
            except OSError:
                continue
        return parent
    return None


def create_cage(name: str, cap_mib: int, *, device: str = "cpu", root: Path = CGROUP_ROOT,
                configured_parent: Path | None = None, address_space_slack_mib: int = 8192) -> Cage:
    """A cage of `cap_mib` MiB named `lcsb-<worker pid>-<name>`, in the best mechanism available."""
    version = cgroup_version(root)
    if device.startswith("cuda"):
        return _watching(Cage("cuda", cap_mib), version, root)
    parent = cgroup_parent(version, root, configured_parent) if version else None
    if parent is not None:
        path = parent / f"{PREFIX}{os.getpid()}-{name}"
        try:
            path.mkdir(exist_ok=True)
            limit = str(cap_mib * MIB)
            if version == 1:
                (path / "memory.limit_in_bytes").write_text(limit)
                if (path / "memory.memsw.limit_in_bytes").exists():  # no swapping past the cap
                    (path / "memory.memsw.limit_in_bytes").write_text(limit)
            else:
                (path / "memory.max").write_text(limit)
                if (path / "memory.swap.max").exists():
                    (path / "memory.swap.max").write_text("0")
            return Cage(f"cgroup-v{version}", cap_mib, path=path)
        except OSError as exc:
            log.warning("cannot create memory cgroup %s (%s); falling back to an address-space limit", path, exc)
            _remove_cgroup(path, wait_s=0.5)
    return _watching(Cage("rlimit", cap_mib, address_space_bytes=(cap_mib + address_space_slack_mib) * MIB),
                     version, root)


def _watching(cage: Cage, version: int | None, root: Path) -> Cage:
    """Attach the enclosing cgroup's OOM counter (and its current value) to a cage without a cgroup."""
    own = _own_cgroup(version) if version else None
    if own is not None:
        base = root / "memory" if version == 1 else root
        cage.enclosing = base / own.lstrip("/") / ("memory.oom_control" if version == 1 else "memory.events")
        cage.enclosing_base = _oom_kill_count(cage.enclosing)
    return cage


def enter_cage(spec: dict) -> None:
    """In the child, before anything large is loaded: become the OOM killer's first choice (so a
    container limit kills the training, not the worker), then join the cgroup or set the
    address-space limit."""
    try:
        Path("/proc/self/oom_score_adj").write_text("1000")
    except OSError:
        pass
    if spec["kind"].startswith("cgroup"):
        (Path(spec["path"]) / "cgroup.procs").write_text(str(os.getpid()))
    elif spec["kind"] == "rlimit":
        limit = int(spec["address_space_bytes"])
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def remove_stale_cages(root: Path = CGROUP_ROOT, configured_parent: Path | None = None) -> int:
    """Remove job cgroups whose worker process is gone (left by a killed worker); returns how many."""
    version = cgroup_version(root)
    parent = cgroup_parent(version, root, configured_parent) if version else None
    removed = 0
    for path in parent.glob(f"{PREFIX}*-*") if parent else []:
        pid = path.name[len(PREFIX):].split("-", 1)[0]
        if path.is_dir() and pid.isdigit() and not Path(f"/proc/{pid}").exists():
            removed += _remove_cgroup(path, wait_s=1.0)
    return removed
