"""The schedule a run gets when it names none (`lcsb.schedule: auto`): the rule's outcome per base model,
resolved once by `TrainConfig`, with the options that depend on it checked against the resolved schedule."""

from __future__ import annotations

import pytest

from lcsb_core.config import DataSettings, LCSBSettings, ModelSettings, TrainConfig
from lcsb_core.default_schedule import AUTO, BY_MODEL, DEFAULT_SCHEDULE, default_schedule, resolve_schedule
from lcsb_core.errors import ConfigError
from lcsb_core.learning_rate import default_learning_rate
from lcsb_core.models.catalog import CATALOG
from lcsb_core.schedules import SCHEDULES

GEMMA = ModelSettings(name_or_path="gemma-3-270m")


def config(**kw) -> TrainConfig:
    """A TrainConfig on a named file (nothing is read)."""
    return TrainConfig(data=DataSettings(train_file="t.jsonl"), **kw)


def test_every_catalog_model_has_a_known_default_and_the_values_are_the_measured_ones():
    assert set(BY_MODEL) == set(CATALOG)
    assert set(BY_MODEL.values()) <= set(SCHEDULES)
    assert (BY_MODEL["SmolLM2-135M-Instruct"], BY_MODEL["gemma-3-270m"], DEFAULT_SCHEDULE) == (
        "topfull", "tail", "topfull")


@pytest.mark.parametrize("name, expected", [
    ("gemma-3-270m", "tail"), ("google/gemma-3-270m", "tail"), ("/root/.cache/lcsb/models/gemma-3-270m", "tail"),
    ("SmolLM2-135M-Instruct", "topfull"), ("HuggingFaceTB/SmolLM2-135M-Instruct", "topfull"),
    ("/data/models/my-own-llama", "topfull"), ("gemma-3-270m-copy", "topfull"),
])
def test_the_default_follows_the_model_by_catalog_name_hub_id_or_folder_name(name, expected):
    assert default_schedule(name) == expected
    assert resolve_schedule(None, name) == resolve_schedule(AUTO, name) == expected
    assert resolve_schedule("tail", name) == "tail"  # a named schedule is kept


def test_train_config_resolves_auto_before_the_learning_rate_and_states_it():
    cfg = config(model=GEMMA)
    assert cfg.lcsb.schedule == "tail"
    assert cfg.optim.learning_rate == default_learning_rate("tail")
    assert config().lcsb.schedule == "topfull"  # SmolLM2, the config's default model
    again = TrainConfig.from_dict(cfg.to_dict())  # what the worker reads is the resolved name
    assert again.to_dict()["lcsb"]["schedule"] == "tail"
    assert config(model=GEMMA, lcsb=LCSBSettings(schedule="topfull")).lcsb.schedule == "topfull"
    assert config(model=GEMMA, batch_size=1).lcsb.schedule == "tail"  # tail trains on a single example too


def test_options_of_another_schedule_are_refused_against_the_resolved_one():
    with pytest.raises(ConfigError) as err:  # Gemma's auto is tail, which has no full-depth steps of its own
        config(model=GEMMA, lcsb=LCSBSettings(full_every=3))
    assert err.value.field == "lcsb.full_every"
    assert "schedule 'tail' (gemma-3-270m's default)" in str(err.value)
    assert str(err.value).endswith("remove it, or name lcsb.schedule topfull")
    with pytest.raises(ConfigError) as err:  # SmolLM2's auto is topfull, which does not split examples
        config(lcsb=LCSBSettings(deep_fraction=0.5))
    assert err.value.field == "lcsb.deep_fraction"
    assert "schedule 'topfull' (SmolLM2-135M-Instruct's default)" in str(err.value)
    assert str(err.value).endswith("remove it, or name lcsb.schedule split")
    with pytest.raises(ConfigError) as err:  # named: the option is simply refused
        config(lcsb=LCSBSettings(schedule="topfull", deep_fraction=0.5))
    assert str(err.value).endswith("; remove it") and "default" not in str(err.value)
    assert config(lcsb=LCSBSettings(full_every=3)).lcsb.full_every == 3
    assert config(model=GEMMA, lcsb=LCSBSettings(schedule="split", deep_fraction=0.5)).lcsb.deep_fraction == 0.5


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
