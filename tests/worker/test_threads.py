"""The worker's thread policy (`worker.threads`), one test per rule, on fake cgroup trees in a temporary
folder (the rule reads files; nothing of `os` is mocked): the cgroup's CPU quota (v2 and v1, the smallest
along the path), the affinity alone, several training slots, the override, a quota below one CPU; and
the environment the supervisor gives the training process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from lcsb_service.settings import Settings
from worker.threads import POLICY_ENV, ThreadPolicy, cpu_quota, thread_policy
from worker.training.allocator import ChildMalloc
from worker.training.supervisor import _child_env


def v2_tree(tmp_path: Path, quotas: dict[str, str], own: str = "/a/b") -> tuple[Path, Path]:
    """A cgroup v2 mount with `cpu.max` texts by folder ("" is the root) and a /proc/self/cgroup naming
    `own`; returns (mount, proc file)."""
    root = tmp_path / "cgroup"
    (root / own.lstrip("/")).mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu memory pids\n")
    for folder, text in quotas.items():
        (root / folder / "cpu.max").write_text(text + "\n")
    proc = tmp_path / "proc_cgroup"
    proc.write_text(f"0::{own}\n")
    return root, proc


def v1_tree(tmp_path: Path, quota_us: int, period_us: int = 100_000, own: str = "/docker/abc") -> tuple[Path, Path]:
    """A cgroup v1 hierarchy with the cpu controller at `cpu,cpuacct/` (the container's own cgroup at
    the mount, as without a cgroup namespace: `own` is not under it) and the given quota."""
    root = tmp_path / "cgroup"
    cpu = root / "cpu,cpuacct"
    cpu.mkdir(parents=True)
    (cpu / "cpu.cfs_quota_us").write_text(f"{quota_us}\n")
    (cpu / "cpu.cfs_period_us").write_text(f"{period_us}\n")
    proc = tmp_path / "proc_cgroup"
    proc.write_text(f"12:memory:{own}\n4:cpu,cpuacct:{own}\n0::/\n")
    return root, proc


def test_a_cgroup_quota_below_the_affinity_sets_the_threads(tmp_path):
    # v2: the smallest quota along the path counts (2 CPUs at a/, none at a/b/ or the root)
    root, proc = v2_tree(tmp_path, {"": "max 100000", "a": "200000 100000", "a/b": "max 100000"})
    assert cpu_quota(root, proc) == 2.0
    p = thread_policy(cgroup_root=root, proc_cgroup=proc, affinity=8)
    assert (p.threads, p.threads_from, p.cpus, p.quota_cpus, p.affinity_cpus) == (2, "cpu quota", 2.0, 2.0, 8)
    assert (p.wait_policy, p.wait_from, p.slots) == ("PASSIVE", "default", 1)
    assert p.describe() == "2 CPU threads (2 CPUs by the cgroup quota / 1 training slot), OpenMP wait PASSIVE"
    # v1 (cpu.cfs_quota_us / cpu.cfs_period_us), the container's cgroup mounted at the controller's root
    root1, proc1 = v1_tree(tmp_path / "v1", 300_000)
    assert thread_policy(cgroup_root=root1, proc_cgroup=proc1, affinity=16).threads == 3
    # 2.5 CPUs: two threads (a third would only be throttled)
    root2, proc2 = v2_tree(tmp_path / "frac", {"a/b": "250000 100000"})
    assert thread_policy(cgroup_root=root2, proc_cgroup=proc2, affinity=8).threads == 2


def test_without_a_quota_the_affinity_sets_the_threads(tmp_path):
    root, proc = v2_tree(tmp_path, {"": "max 100000", "a/b": "max 100000"})
    p = thread_policy(cgroup_root=root, proc_cgroup=proc, affinity=6)
    assert (p.threads, p.threads_from, p.cpus, p.quota_cpus) == (6, "affinity", 6.0, None)
    assert p.describe() == "6 CPU threads (6 CPUs by the CPU affinity / 1 training slot), OpenMP wait PASSIVE"
    unlimited_v1 = thread_policy(**dict(zip(("cgroup_root", "proc_cgroup"), v1_tree(tmp_path / "v1", -1), strict=True)),
                                 affinity=4)
    assert (unlimited_v1.threads, unlimited_v1.threads_from) == (4, "affinity")
    nothing = thread_policy(cgroup_root=tmp_path / "absent", proc_cgroup=tmp_path / "absent_proc", affinity=3)
    assert (nothing.threads, nothing.threads_from, nothing.quota_cpus) == (3, "affinity", None)
    # a quota above the affinity: the affinity is the bound
    root2, proc2 = v2_tree(tmp_path / "wide", {"a/b": "800000 100000"})
    p2 = thread_policy(cgroup_root=root2, proc_cgroup=proc2, affinity=2)
    assert (p2.threads, p2.threads_from, p2.quota_cpus) == (2, "affinity", 8.0)


def test_several_training_slots_split_the_cpus(tmp_path):
    root, proc = v2_tree(tmp_path, {"a": "400000 100000"})
    p = thread_policy(cgroup_root=root, proc_cgroup=proc, affinity=16, slots=2)
    assert (p.threads, p.slots, p.threads_from) == (2, 2, "cpu quota")
    assert p.describe() == "2 CPU threads (4 CPUs by the cgroup quota / 2 training slots), OpenMP wait PASSIVE"
    assert thread_policy(cgroup_root=root, proc_cgroup=proc, affinity=16, slots=3).threads == 1  # floor(4 / 3)
    assert thread_policy(cgroup_root=root, proc_cgroup=proc, affinity=16, slots=8).threads == 1  # never 0
    assert thread_policy(cgroup_root=tmp_path / "none", proc_cgroup=tmp_path / "none", affinity=8, slots=3).threads == 2
    with pytest.raises(ValueError, match="slots"):
        thread_policy(cgroup_root=root, proc_cgroup=proc, affinity=16, slots=0)


def test_the_override_wins(tmp_path):
    root, proc = v2_tree(tmp_path, {"a": "100000 100000"})
    p = thread_policy(override=3, wait_policy="ACTIVE", cgroup_root=root, proc_cgroup=proc, affinity=8, slots=2)
    assert (p.threads, p.threads_from, p.wait_policy, p.wait_from) == (3, "override", "ACTIVE", "override")
    assert p.cpus == 1.0 and p.quota_cpus == 1.0  # still recorded beside the override
    assert p.describe() == ("3 CPU threads (LCSB_WORKER_TORCH_THREADS), OpenMP wait ACTIVE "
                            "(LCSB_WORKER_OMP_WAIT_POLICY)")
    with pytest.raises(ValueError, match="override"):
        thread_policy(override=0, cgroup_root=root, proc_cgroup=proc, affinity=8)


def test_a_quota_below_one_cpu_still_gets_one_thread(tmp_path):
    root, proc = v2_tree(tmp_path, {"a/b": "50000 100000"})
    p = thread_policy(cgroup_root=root, proc_cgroup=proc, affinity=4)
    assert (p.threads, p.threads_from, p.cpus) == (1, "cpu quota", 0.5)
    assert p.describe() == "1 CPU thread (0.5 CPUs by the cgroup quota / 1 training slot), OpenMP wait PASSIVE"
    root1, proc1 = v1_tree(tmp_path / "v1", 20_000, 100_000)
    assert thread_policy(cgroup_root=root1, proc_cgroup=proc1, affinity=4).threads == 1


def test_the_policy_travels_in_the_environment(tmp_path):
    root, proc = v2_tree(tmp_path, {"a": "200000 100000"})
    p = thread_policy(cgroup_root=root, proc_cgroup=proc, affinity=8)
    env = p.env()
    assert (env["OMP_NUM_THREADS"], env["OMP_WAIT_POLICY"]) == ("2", "PASSIVE")
    assert ThreadPolicy.from_env(env) == p and json.loads(env[POLICY_ENV])["threads_from"] == "cpu quota"
    assert ThreadPolicy.from_env({}) is None and ThreadPolicy.from_env({POLICY_ENV: "{not json"}) is None
    assert ThreadPolicy.from_env({POLICY_ENV: '{"threads": 1}'}) is None  # fields missing


def test_the_supervisor_gives_the_training_process_its_threads_and_wait_policy(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "64")  # the worker's own environment does not leak through
    derived = ThreadPolicy.from_env(_child_env(Settings(), ChildMalloc("glibc")))
    assert derived == thread_policy()  # this machine's CPUs, one slot
    env = _child_env(Settings(), ChildMalloc("glibc"), slots=2)
    assert env["OMP_NUM_THREADS"] == str(max(1, int(thread_policy().cpus // 2))) and env["OMP_WAIT_POLICY"] == "PASSIVE"
    env = _child_env(Settings(worker_torch_threads=1, worker_omp_wait_policy="active"), ChildMalloc("glibc"))
    assert (env["OMP_NUM_THREADS"], env["OMP_WAIT_POLICY"], env["PYTHONUNBUFFERED"]) == ("1", "ACTIVE", "1")
    assert ThreadPolicy.from_env(env).threads_from == "override"
    with pytest.raises(ValidationError, match="worker_omp_wait_policy"):
        Settings(worker_omp_wait_policy="spin")
