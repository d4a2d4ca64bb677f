"""Schedules are pure, seeded objects (no torch)."""

import pytest

from lcsb_core.errors import ConfigError
from lcsb_core.schedules import CyclicSchedule, ImportanceSchedule, RandomSchedule, make_schedule, resolve_k


@pytest.mark.parametrize("num_layers,k", [(30, 8), (30, 1), (30, 30), (4, 3), (7, 2)])
def test_cyclic_covers_every_layer_once_per_cycle(num_layers, k):
    sched = CyclicSchedule(num_layers, k)
    cycle = [sched.layers_for_step(t) for t in range(sched.cycle_length)]
    assert sched.cycle_length == -(-num_layers // k)
    seen = [i for sel in cycle for i in sel]
    assert sorted(seen) == list(range(num_layers))  # each layer exactly once per cycle
    assert all(len(sel) == k for sel in cycle[:-1])
    for sel in cycle:  # contiguous blocks
        assert sorted(sel) == list(range(min(sel), max(sel) + 1))
    assert sched.layers_for_step(sched.cycle_length) == cycle[0]


def test_cyclic_30_layers_k8_blocks():
    sched = CyclicSchedule(30, 8)
    assert [sorted(sched.layers_for_step(t)) for t in range(4)] == [
        list(range(0, 8)), list(range(8, 16)), list(range(16, 24)), list(range(24, 30))]


def test_random_is_seeded_and_per_step_reproducible():
    a, b, c = RandomSchedule(30, 8, seed=1), RandomSchedule(30, 8, seed=1), RandomSchedule(30, 8, seed=2)
    steps = range(50)
    assert [a.layers_for_step(t) for t in steps] == [b.layers_for_step(t) for t in steps]
    assert [a.layers_for_step(t) for t in steps] != [c.layers_for_step(t) for t in steps]
    assert all(len(a.layers_for_step(t)) == 8 for t in steps)
    assert a.layers_for_step(37) == RandomSchedule(30, 8, seed=1).layers_for_step(37)  # resume-safe
    assert set().union(*(a.layers_for_step(t) for t in steps)) == set(range(30))


def test_full_and_freeze_names():
    assert make_schedule("full", num_layers=5, k=2).layers_for_step(3) == frozenset(range(5))
    assert make_schedule("freeze", num_layers=5, k=2).layers_for_step(1) == frozenset({2, 3})


def test_importance_probes_then_picks_top_k():
    sched = ImportanceSchedule(6, 2, refresh_every=3)
    assert sched.needs_probe(0) and sched.layers_for_step(0) == frozenset(range(6))
    sched.observe({0: 0.1, 1: 5.0, 2: 0.3, 3: 4.0, 4: 0.2, 5: 0.0})
    assert sched.layers_for_step(1) == frozenset({1, 3})
    assert sched.layers_for_step(3) == frozenset(range(6))
    clone = ImportanceSchedule(6, 2, refresh_every=3)
    clone.load_state_dict(sched.state_dict())
    assert clone.layers_for_step(2) == frozenset({1, 3})


def test_resolve_k_errors_name_the_field():
    assert resolve_k(30, fraction=0.25) == 8 and resolve_k(30, k=3) == 3
    with pytest.raises(ConfigError, match="lcsb.k"):
        resolve_k(30, k=31)
    with pytest.raises(ConfigError, match="lcsb.fraction"):
        resolve_k(30, fraction=0.0)
    with pytest.raises(ConfigError, match="lcsb.schedule"):
        make_schedule("sideways", num_layers=4, k=1)
