"""Memory caps (`worker.limits`): the kernel enforces a real cgroup v1 cap on a plain Python child
(when this machine has a writable v1 memory hierarchy, as CI's does), the address-space fallback turns
an over-cap allocation into MemoryError, and the v2 and parent-selection logic on fake trees."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from worker import limits
from worker.limits import Cage, cgroup_parent, create_cage, remove_stale_cages

ALLOCATE = ("import json, sys\n"
            "from worker.limits import enter_cage\n"
            "enter_cage(json.loads(sys.argv[1]))\n"
            "blocks = []\n"
            "try:\n"
            "    for _ in range(60): blocks.append(bytearray(10 * 2**20))\n"
            "except MemoryError:\n"
            "    print('MemoryError'); sys.exit(3)\n"
            "print('survived')\n")


def run_capped(cage: Cage) -> subprocess.CompletedProcess:
    """A child that joins `cage` and allocates 600 MiB."""
    return subprocess.run([sys.executable, "-c", ALLOCATE, json.dumps(cage.to_spec())], capture_output=True,
                          text=True, timeout=60)


v1_only = pytest.mark.skipif(limits.cgroup_version() != 1 or cgroup_parent(1) is None,
                             reason="no writable cgroup v1 memory hierarchy here")


@v1_only
def test_cgroup_v1_cap_kills_the_child_and_reports_the_peak():
    cage = create_cage("unit-v1", 150)
    try:
        assert cage.kind == "cgroup-v1"
        assert (cage.path / "memory.limit_in_bytes").read_text().strip() == str(150 * 2**20)
        out = run_capped(cage)
        assert out.returncode == -signal.SIGKILL and "survived" not in out.stdout
        assert cage.oom_kills() >= 1
        assert 140 <= cage.peak_mib() <= 150
    finally:
        cage.remove()
    assert not cage.path.exists()


@v1_only
def test_a_child_under_its_cap_runs_normally():
    cage = create_cage("unit-v1-ok", 1024)
    try:
        out = run_capped(cage)
        assert out.returncode == 0 and "survived" in out.stdout and cage.oom_kills() == 0
    finally:
        cage.remove()


@v1_only
def test_stale_cgroups_of_dead_workers_are_removed():
    parent = cgroup_parent(1)
    dead_pid = 4_000_000  # above any pid_max default: no such process
    stale, mine = parent / f"lcsb-{dead_pid}-old", create_cage("live", 100)
    stale.mkdir()
    try:
        assert remove_stale_cages() >= 1
        assert not stale.exists() and mine.path.exists()
    finally:
        mine.remove()
        if stale.exists():
            stale.rmdir()


def test_address_space_fallback_turns_the_overrun_into_memory_error():
    cage = Cage("rlimit", 100, address_space_bytes=400 * 2**20)
    out = run_capped(cage)
    assert out.returncode == 3 and "MemoryError" in out.stdout


def test_no_cgroup_hierarchy_falls_back_to_rlimit(tmp_path):
    cage = create_cage("x", 512, root=tmp_path, address_space_slack_mib=1000)
    assert cage.kind == "rlimit" and cage.address_space_bytes == 1512 * 2**20
    assert create_cage("x", 512, device="cuda", root=tmp_path).kind == "cuda"


def test_cgroup_v2_on_a_fake_tree(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("cpu io memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("cpu\n")
    cage = create_cage("job1", 256, root=tmp_path)
    assert cage.kind == "cgroup-v2" and cage.path.parent == tmp_path
    assert (cage.path / "memory.max").read_text() == str(256 * 2**20)
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+memory"  # controller delegated
    (cage.path / "memory.peak").write_text(str(200 * 2**20) + "\n")
    (cage.path / "memory.events").write_text("low 0\nhigh 0\nmax 7\noom 1\noom_kill 1\n")
    assert cage.peak_mib() == 200.0 and cage.oom_kills() == 1


def test_v1_parent_is_this_process_cgroup_when_writable(tmp_path):
    own = tmp_path / "memory" / "sandbox" / "abc"
    own.mkdir(parents=True)
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712")
    proc = tmp_path / "proc_cgroup"
    proc.write_text("9:name=systemd:/\n4:memory:/sandbox/abc\n0::/\n")
    assert limits.cgroup_version(tmp_path) == 1
    assert cgroup_parent(1, tmp_path, proc_cgroup=proc) == own
    assert cgroup_parent(1, tmp_path, configured=tmp_path / "memory", proc_cgroup=proc) == tmp_path / "memory"
    proc.write_text("4:memory:/\n")
    assert cgroup_parent(1, tmp_path, proc_cgroup=proc) == tmp_path / "memory"


def test_cage_readers_tolerate_missing_files(tmp_path):
    cage = Cage("cgroup-v1", 100, path=tmp_path / "gone")
    assert cage.peak_mib() is None and cage.oom_kills() is None
    cage.remove()  # nothing to remove
    assert Cage("rlimit", 100).peak_mib() is None


def test_without_a_cgroup_of_its_own_the_enclosing_oom_counter_tells_an_oom_kill(tmp_path):
    events = tmp_path / "memory.events"
    events.write_text("low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\n")
    cage = Cage("rlimit", 100, address_space_bytes=1, enclosing=events, enclosing_base=2)
    assert cage.oom_kills() == 0
    events.write_text("low 0\nhigh 0\nmax 4\noom 3\noom_kill 3\n")
    assert cage.oom_kills() == 1


def test_the_child_is_the_oom_killers_first_choice():
    out = subprocess.run([sys.executable, "-c", "import json, sys\nfrom worker.limits import enter_cage\n"
                          "enter_cage({'kind': 'cuda', 'cap_mib': 1})\nprint(open('/proc/self/oom_score_adj').read())"],
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "1000", out.stderr
