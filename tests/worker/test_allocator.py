"""The training child's C allocator (worker.training.allocator): jemalloc preloaded when installed, else glibc."""

from __future__ import annotations

import ctypes.util

from worker.training import allocator
from worker.training.allocator import ChildMalloc, child_malloc


def test_jemalloc_is_preloaded_in_front_of_any_other_preload():
    malloc = child_malloc("jemalloc")  # scripts/setup.sh installs Debian's libjemalloc2
    assert malloc == ChildMalloc("jemalloc", preload="libjemalloc.so.2")
    assert malloc.describe() == "jemalloc"
    assert malloc.env({"PATH": "/bin"}) == {"PATH": "/bin", "LD_PRELOAD": "libjemalloc.so.2"}
    assert malloc.env({"LD_PRELOAD": "libfoo.so"})["LD_PRELOAD"] == "libjemalloc.so.2 libfoo.so"


def test_glibc_asked_for_or_jemalloc_missing_runs_on_glibc_and_says_so(monkeypatch, caplog):
    glibc = child_malloc("glibc")
    assert glibc == ChildMalloc("glibc") and glibc.env({"A": "1"}) == {"A": "1"} and glibc.describe() == "glibc"
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    missing = child_malloc("jemalloc")
    assert missing == ChildMalloc("glibc", missing="jemalloc") and missing.env({}) == {}
    assert missing.describe() == "glibc (jemalloc is not installed on this worker)"
    assert "apt-get install libjemalloc2" in caplog.text
    assert allocator.log.name == "worker.training.allocator"
