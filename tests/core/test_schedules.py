"""Schedules are pure, seeded objects (no torch)."""

import dataclasses

import pytest

from lcsb_core.errors import ConfigError
from lcsb_core.training.schedules import (
    EXACT_GRADIENT_SCHEDULES,
    SCHEDULES,
    CyclicSchedule,
    ImportanceSchedule,
    LCSBSettings,
    RandomSchedule,
    Schedule,
    TailSchedule,
    TopFullSchedule,
    TopSchedule,
    make_schedule,
    resolve_k,
)


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


def test_top_trains_the_top_k_every_step():
    sched = make_schedule("top", num_layers=30, k=8)
    assert isinstance(sched, TopSchedule) and sched.cycle_length == 1
    assert all(sched.layers_for_step(t) == frozenset(range(22, 30)) for t in range(7))
    assert sched.backprop_layers(3) == frozenset(range(22, 30)) and sched.max_backprop_layers() == 8


def test_topfull_is_top_with_a_full_step_every_nth():
    sched = make_schedule("topfull", num_layers=30, k=8, full_every=3)
    assert isinstance(sched, TopFullSchedule) and sched.cycle_length == 3
    picks = [sched.layers_for_step(t) for t in range(9)]
    assert [len(p) for p in picks] == [8, 8, 30] * 3  # 1-based steps 3, 6, 9 are full
    assert picks[0] == frozenset(range(22, 30)) and picks[2] == frozenset(range(30))
    assert sched.max_backprop_layers() == 30


@pytest.mark.parametrize("num_layers,k", [(30, 8), (30, 15), (18, 4), (5, 5), (7, 3)])
def test_tail_moves_the_cut_down_by_k_and_reaches_every_layer(num_layers, k):
    sched = TailSchedule(num_layers, k)
    cycle = [sched.layers_for_step(t) for t in range(sched.cycle_length)]
    assert sched.cycle_length == -(-num_layers // k)
    for t, sel in enumerate(cycle):  # every layer above the cut, nothing below
        assert sel == frozenset(range(max(0, num_layers - (t + 1) * k), num_layers))
    assert cycle[-1] == frozenset(range(num_layers))  # whole model reached at the cycle's end
    assert sched.layers_for_step(sched.cycle_length) == cycle[0]
    assert sched.backprop_layers(0) == cycle[0]  # trains everything it back-propagates through


def test_tail_30_layers_k8():
    sched = make_schedule("tail", num_layers=30, k=8)
    assert [min(sched.layers_for_step(t)) for t in range(5)] == [22, 14, 6, 0, 22]


@pytest.mark.parametrize("name", SCHEDULES)
def test_every_schedule_is_pure_in_seed_and_step(name):
    a = make_schedule(name, num_layers=12, k=3, seed=7)
    b = make_schedule(name, num_layers=12, k=3, seed=7)
    steps = [0, 5, 1, 11, 5, 40]  # any order, repeated: a resumed run sees the same selections
    assert [a.layers_for_step(t) for t in steps] == [b.layers_for_step(t) for t in reversed(steps)][::-1]
    assert all(sel and sel <= frozenset(range(12)) for sel in (a.layers_for_step(t) for t in steps))


def test_exact_schedules_backprop_from_the_lowest_trained_layer_to_the_top():
    assert set(EXACT_GRADIENT_SCHEDULES) == {"freeze", "top", "topfull", "tail", "split", "full"}
    freeze = make_schedule("freeze", num_layers=30, k=8)
    assert freeze.backprop_layers(1) == frozenset(range(8, 30)) and freeze.max_backprop_layers() == 30
    cyclic = make_schedule("cyclic", num_layers=30, k=8)
    assert cyclic.backprop_layers(1) == frozenset(range(8, 16)) and cyclic.max_backprop_layers() == 8


def test_full_uses_every_layer_whatever_k_says():
    sched = LCSBSettings(schedule="full", k=3).schedule_for(num_layers=30)
    assert sched.k == 30 and sched.layers_for_step(0) == frozenset(range(30))
    assert "all 30 layers" in sched.describe()


def test_settings_resolve_through_one_function():
    sched = LCSBSettings(schedule="topfull", fraction=0.5, full_every=2).schedule_for(num_layers=30)
    assert (sched.name, sched.k, sched.full_every) == ("topfull", 15, 2)
    assert sched.describe() == "top 15 of 30 layers per step, all 30 once every 2 steps (topfull, exact gradient)"


@pytest.mark.parametrize("bad", [1, 0, -3, 2.5, True])
def test_full_every_below_two_names_the_field(bad):
    with pytest.raises(ConfigError, match="lcsb.full_every"):
        LCSBSettings(schedule="topfull", full_every=bad)
    with pytest.raises(ConfigError, match="lcsb.full_every"):
        make_schedule("topfull", num_layers=30, k=8, full_every=bad)


def test_k_above_the_layer_count_names_the_field():
    with pytest.raises(ConfigError, match="lcsb.k"):
        make_schedule("top", num_layers=30, k=31)


def test_full_every_only_with_topfull_and_within_max_steps():
    from lcsb_core.training.config import TrainConfig

    with pytest.raises(ConfigError, match="lcsb.full_every: has no effect with schedule 'cyclic'"):
        LCSBSettings(schedule="cyclic", full_every=3)
    assert LCSBSettings(schedule="topfull").full_every is None  # the schedule's default applies
    assert LCSBSettings(schedule="topfull").schedule_for(num_layers=30).full_every == 4
    cfg = lambda **lcsb: TrainConfig.from_dict({"data": {"train_file": "x.jsonl"}, "max_steps": 2,  # noqa: E731
                                                "lcsb": {"schedule": "topfull", **lcsb}})
    with pytest.raises(ConfigError, match=r"lcsb.full_every: is 4, more than max_steps \(2\)"):
        cfg(full_every=4).check_honoured()  # a given N = 4 would never run a full step in 2 steps
    cfg(full_every=2).check_honoured()
    cfg().check_honoured()  # the default N applies as it can: a 2-step job of the default schedule runs


def test_auto_on_smollm2_is_the_probe_then_tail_switch_at_k_8():
    """"auto" on SmolLM2 for a job of known length (lcsb_core.training.default_schedule, issue 47): 4 full-depth
    probe steps, then tail at k = 8 of 30 if the probe's lower-layer share is low; exact gradients."""
    settings = LCSBSettings()
    settings.resolve("SmolLM2-135M-Instruct", 100)
    sched = settings.schedule_for(num_layers=30)
    assert (sched.name, sched.k, sched.full_every, sched.identity_skip) == ("auto", 8, None, False)
    assert [len(sched.layers_for_step(t)) for t in range(4)] == [30, 30, 30, 30]
    assert sched.max_backprop_layers() == 30 and sched.keeps_all_activations


@pytest.mark.parametrize("name", [n for n in SCHEDULES if n != "importance"])
def test_pure_schedules_have_the_stateless_protocol_defaults(name):
    sched = make_schedule(name, num_layers=30, k=8, seed=1)
    assert not any(sched.needs_probe(t) for t in range(20))
    assert sched.state_dict() is None
    sched.observe({0: 1.0})
    sched.load_state_dict(None)
    assert sched.layers_for_step(3) == make_schedule(name, num_layers=30, k=8, seed=1).layers_for_step(3)


@pytest.mark.parametrize("name, keeps_all", [("full", True), ("topfull", True), ("tail", True), ("importance", True),
                                             ("freeze", True), ("top", False), ("cyclic", False), ("random", False)])
def test_keeps_all_activations(name, keeps_all):
    # freeze's first block is layers 0-7, back-propagated through every layer above: a full-depth backward
    assert make_schedule(name, num_layers=30, k=8, seed=0).keeps_all_activations is keeps_all


PROTOCOL_MEMBERS = sorted(n for n in vars(Schedule) if not n.startswith("_"))


def _owner_of(cls: type, member: str) -> str:
    """The class that defines `member` for `cls`: a dataclass field of `cls` counts as its own; for a
    function or property, the class its code was written in (its `__qualname__`), which for a member
    copied by assignment (`describe = Other.describe`) is the other class."""
    if member in {f.name for f in dataclasses.fields(cls)}:
        return cls.__name__
    holder = next(c for c in cls.__mro__ if member in vars(c))
    value = vars(holder)[member]
    code = value.fget if isinstance(value, property) else value
    return code.__qualname__.split(".")[0] if hasattr(code, "__qualname__") else holder.__name__


def test_the_protocol_names_what_the_callers_read():
    assert {"layers_for_step", "backprop_layers", "max_backprop_layers", "keeps_all_activations", "cycle_length",
            "identity_skip", "uses_k", "full_every", "k", "num_layers", "name", "needs_probe", "observe",
            "state_dict", "load_state_dict", "describe", "deep_fraction", "shallow_layers",
            "update_shares", "decision"} == set(PROTOCOL_MEMBERS)


@pytest.mark.parametrize("name", SCHEDULES)
def test_every_schedule_is_a_schedule_with_its_own_members(name):
    """Each registered name yields a `Schedule` (runtime check), and every protocol member is defined by
    the schedule's own class or a class it derives from, never borrowed from an unrelated class."""
    sched = make_schedule(name, num_layers=30, k=8, seed=1)
    assert isinstance(sched, Schedule) and sched.name == name
    lineage = {c.__name__ for c in type(sched).__mro__}
    borrowed = {m: _owner_of(type(sched), m) for m in PROTOCOL_MEMBERS if _owner_of(type(sched), m) not in lineage}
    assert borrowed == {}


@pytest.mark.parametrize("name, full_every", [(n, 4 if n == "topfull" else None) for n in SCHEDULES])
def test_full_every_is_a_member_of_every_schedule(name, full_every):
    assert make_schedule(name, num_layers=30, k=8).full_every == full_every
