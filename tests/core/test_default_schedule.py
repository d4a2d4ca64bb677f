"""The schedule a run gets when it names none (`lcsb.schedule: auto`): the rule resolved per job from the
model and the planned steps (`choose_auto`), by `TrainConfig`, with the options that depend on it checked
against what it chose; and `auto`'s probe-then-switch schedule deciding from its first steps' gradients."""

from __future__ import annotations

import pytest

from lcsb_core.data.settings import DataSettings
from lcsb_core.errors import ConfigError
from lcsb_core.models.catalog import CATALOG
from lcsb_core.training.config import ModelSettings, TrainConfig
from lcsb_core.training.default_schedule import (
    AUTO,
    MEMORY_FALLBACK,
    MIN_SWITCH_STEPS,
    PROBE_STEPS,
    SWITCH_THRESHOLD,
    SWITCH_TO,
    AutoChoice,
    choose_auto,
    memory_choice,
)
from lcsb_core.training.learning_rate import default_learning_rate
from lcsb_core.training.schedules import SCHEDULES, LCSBSettings, SwitchSchedule

GEMMA = ModelSettings(name_or_path="gemma-3-270m")
SMOL = "SmolLM2-135M-Instruct"


def config(**kw) -> TrainConfig:
    """A TrainConfig on a named file (nothing is read)."""
    return TrainConfig(data=DataSettings(train_file="t.jsonl"), **kw)


def test_the_switch_threshold_is_stated_for_catalog_models_only_and_is_a_share():
    assert set(SWITCH_THRESHOLD) <= set(CATALOG)
    assert all(0 < t < 1 for t in SWITCH_THRESHOLD.values())
    assert SWITCH_TO in SCHEDULES and MEMORY_FALLBACK in SCHEDULES


@pytest.mark.parametrize("name, steps, expected", [
    (SMOL, 100, AUTO), ("HuggingFaceTB/SmolLM2-135M-Instruct", None, AUTO),
    (f"/root/.cache/lcsb/models/{SMOL}", MIN_SWITCH_STEPS, AUTO),
    (SMOL, MIN_SWITCH_STEPS - 1, "full"), (SMOL, 1, "full"),
    ("gemma-3-270m", 100, "full"), ("google/gemma-3-270m", None, "full"),
    ("/data/models/my-own-llama", 500, "full"), ("gemma-3-270m-copy", 100, "full"),
])
def test_auto_follows_the_model_and_the_planned_steps(name, steps, expected):
    choice = choose_auto(name, steps)
    assert choice.schedule == expected
    if expected == AUTO:
        assert (choice.probe_steps, choice.then, choice.threshold) == (PROBE_STEPS, SWITCH_TO, SWITCH_THRESHOLD[SMOL])
    else:
        assert (choice.probe_steps, choice.then, choice.threshold) == (None, None, None)
    assert AutoChoice.from_dict(choice.to_dict()) == choice


def test_each_reason_says_why_with_its_numbers():
    assert f"{MIN_SWITCH_STEPS - 1} planned steps are fewer than the {MIN_SWITCH_STEPS}" in \
        choose_auto(SMOL, MIN_SWITCH_STEPS - 1).reason
    assert "gemma-3-270m" in choose_auto("gemma-3-270m", 100).reason
    assert f"under {SWITCH_THRESHOLD[SMOL]:.1%}" in choose_auto(SMOL, 100).reason
    fallback = memory_choice(9000.4, 8192)
    assert fallback.schedule == MEMORY_FALLBACK
    assert "needs an estimated 9000 MiB, more than the largest worker's 8192 MiB" in fallback.reason


def test_train_config_resolves_auto_with_max_steps_and_states_it():
    cfg = config(max_steps=100)
    assert (cfg.lcsb.schedule, cfg.lcsb.auto["then"]) == (AUTO, SWITCH_TO)
    assert cfg.optim.learning_rate == default_learning_rate(AUTO) == default_learning_rate("full")
    again = TrainConfig.from_dict(cfg.to_dict())  # what the worker reads is the resolved plan
    assert (again.lcsb.schedule, again.lcsb.auto) == (AUTO, cfg.lcsb.auto)
    assert config(max_steps=10).lcsb.schedule == "full"
    assert config(model=GEMMA, max_steps=100).lcsb.schedule == "full"
    assert config(max_steps=10, epochs=1).lcsb.schedule == AUTO  # the length is not known before the data
    named = config(model=GEMMA, lcsb=LCSBSettings(schedule="topfull"))
    assert (named.lcsb.schedule, named.lcsb.auto) == ("topfull", None)


def test_auto_is_resolved_once_with_the_length_known_at_job_creation_and_a_named_schedule_is_kept(monkeypatch):
    """The service passes the training file's example count to `from_dict`, so "auto" is decided once for the
    run's real length (48 examples in batches of 4 for 1 epoch: 12 steps, under MIN_SWITCH_STEPS); the saved
    config is read back without deciding again."""
    import lcsb_core.training.schedules.settings as settings_module

    decided = []
    real = settings_module.choose_auto
    monkeypatch.setattr(settings_module, "choose_auto", lambda *a: decided.append(a) or real(*a))
    raw = {"data": {"train_file": "t.jsonl"}, "batch_size": 4, "epochs": 1}
    short = TrainConfig.from_dict(raw, train_examples=48)
    assert (short.lcsb.schedule, short.lcsb.auto["schedule"]) == ("full", "full") and decided == [(SMOL, 12)]
    assert TrainConfig.from_dict(raw, train_examples=480).lcsb.schedule == AUTO and decided[-1] == (SMOL, 120)
    TrainConfig.from_dict(short.to_dict())
    assert len(decided) == 2   # the resolved plan is kept
    named = TrainConfig.from_dict({**raw, "lcsb": {"schedule": "split"}}, train_examples=48)
    assert named.lcsb.schedule == "split" and len(decided) == 2


def test_options_of_another_schedule_are_refused_against_what_auto_chose():
    with pytest.raises(ConfigError) as err:  # Gemma's auto is full backprop, which has no full_every
        config(model=GEMMA, lcsb=LCSBSettings(full_every=3))
    assert err.value.field == "lcsb.full_every"
    assert "schedule 'full' (what auto chose for this gemma-3-270m job)" in str(err.value)
    assert str(err.value).endswith("remove it, or name lcsb.schedule topfull")
    with pytest.raises(ConfigError) as err:  # SmolLM2's auto (probe then tail) does not split examples
        config(max_steps=100, lcsb=LCSBSettings(deep_fraction=0.5))
    assert err.value.field == "lcsb.deep_fraction"
    assert str(err.value).endswith("remove it, or name lcsb.schedule split")
    with pytest.raises(ConfigError) as err:  # layer scaling needs fixed shares; the switch has none
        config(max_steps=100, lcsb=LCSBSettings(layer_lr_scaling="sqrt"))
    assert err.value.field == "lcsb.layer_lr_scaling"
    with pytest.raises(ConfigError) as err:  # named: the option is simply refused
        config(lcsb=LCSBSettings(schedule="topfull", deep_fraction=0.5))
    assert str(err.value).endswith("; remove it") and "auto" not in str(err.value)
    assert config(lcsb=LCSBSettings(schedule="topfull", full_every=3)).lcsb.full_every == 3


def test_an_unknown_schedule_names_auto_among_the_choices():
    with pytest.raises(ConfigError) as err:
        LCSBSettings(schedule="fastest")
    assert err.value.field == "lcsb.schedule"
    assert f"must be one of auto, {', '.join(SCHEDULES)}, got 'fastest'" in str(err.value)


def test_split_with_one_example_per_step_is_refused_naming_batch_size():
    with pytest.raises(ConfigError) as err:
        config(batch_size=1, lcsb=LCSBSettings(schedule="split"))
    assert err.value.field == "batch_size"
    assert str(err.value).endswith("needs 2 or more per step: raise batch_size to 2 or more")


def switch(num_layers: int = 8, threshold: float = 0.5) -> SwitchSchedule:
    cfg = config(max_steps=100)
    plan = {**cfg.lcsb.auto, "threshold": threshold}
    schedule = LCSBSettings(schedule=AUTO, auto=plan, k=2).schedule_for(num_layers=num_layers)
    assert isinstance(schedule, SwitchSchedule)
    return schedule


def norms(lower: float, upper: float, num_layers: int = 8, k: int = 2) -> dict[int, float]:
    return {i: lower if i < num_layers - k else upper for i in range(num_layers)}


def test_the_switch_probes_at_full_depth_then_switches_when_the_lower_share_is_low():
    s = switch()
    assert [s.needs_probe(t) for t in range(PROBE_STEPS + 1)] == [True] * PROBE_STEPS + [False]
    assert all(s.layers_for_step(t) == frozenset(range(8)) for t in range(PROBE_STEPS))
    for _ in range(PROBE_STEPS):
        assert s.decision() is None
        s.observe(norms(lower=0.1, upper=1.0))  # 6 layers x 0.01 against 2 x 1.0: share 0.0291
    d = s.decision()
    assert d["schedule"] == SWITCH_TO and d["from_step"] == PROBE_STEPS + 1 and d["lower_layers"] == 6
    assert d["switched"] is True
    assert d["lower_share"] == pytest.approx(0.06 / 2.06, abs=1e-4)
    # after the probe: tail's selection from its own step 0 (the top k first), all layers once per cycle
    assert [len(s.layers_for_step(PROBE_STEPS + t)) for t in range(4)] == [2, 4, 6, 8]
    assert s.layers_for_step(PROBE_STEPS) == frozenset({6, 7})


def test_the_switch_stays_at_full_depth_when_the_lower_layers_carry_the_gradient_and_resumes_its_state():
    s = switch()
    for _ in range(PROBE_STEPS):
        s.observe(norms(lower=1.0, upper=0.1))  # share 6 / 6.02
    assert s.decision()["schedule"] == "full" and s.decision()["switched"] is False
    assert all(s.layers_for_step(t) == frozenset(range(8)) for t in range(40))
    s.observe(norms(lower=0.0, upper=1.0))  # a late observation changes nothing
    assert s.decision()["schedule"] == "full"
    resumed = switch()
    resumed.load_state_dict(s.state_dict())
    assert resumed.decision() == s.decision()
    fresh = switch()
    fresh.load_state_dict(None)
    assert fresh.decision() is None and fresh.needs_probe(0)


def test_the_threshold_decides_at_the_boundary_and_zero_gradients_do_not_divide_by_zero():
    s = switch(threshold=0.75)  # share exactly 0.75: 6 x 1 of 6 + 2 x 1: not under the threshold
    for _ in range(PROBE_STEPS):
        s.observe(norms(lower=1.0, upper=1.0))
    assert s.decision()["lower_share"] == 0.75 and s.decision()["schedule"] == "full"
    assert switch().lower_share({i: 0.0 for i in range(8)}) == 0.0


def test_an_unresolved_auto_cannot_build_a_schedule():
    with pytest.raises(ConfigError) as err:
        LCSBSettings(schedule=AUTO).schedule_for(num_layers=8)
    assert err.value.field == "lcsb.schedule"
