"""The bounded LRU bookkeeping both adapter caches share (lcsb_core.inference.lru.LruBound)."""

import pytest

from lcsb_core.inference.lru import LruBound


def test_the_count_bound_evicts_the_least_recently_used_first():
    lru = LruBound(max_count=2, max_mib=100)
    assert lru.add("a", 1) == [] and lru.add("b", 1) == []
    assert lru.touch("a") is True          # b is now the oldest
    assert lru.add("c", 1) == ["b"]
    assert list(lru.sizes) == ["a", "c"] and "b" not in lru and len(lru) == 2
    assert lru.touch("b") is False


def test_the_mib_bound_evicts_until_the_sum_fits_and_never_the_new_name():
    lru = LruBound(max_count=10, max_mib=10)
    for name in "abc":
        assert lru.add(name, 3) == []
    assert lru.mib == 9
    assert lru.add("d", 5) == ["a", "b"]    # 14 MiB -> 8 MiB
    assert lru.mib == 8
    assert lru.add("huge", 50) == ["c", "d"]   # larger than the bound alone: kept, alone
    assert list(lru.sizes) == ["huge"] and lru.mib == 50
    assert lru.add("e", 1) == ["huge"]


@pytest.mark.parametrize("kwargs, field", [({"max_count": 0, "max_mib": 1}, "max_count"),
                                           ({"max_count": 1, "max_mib": 0}, "max_mib")])
def test_bounds_must_be_positive(kwargs, field):
    with pytest.raises(ValueError, match=field):
        LruBound(**kwargs)
