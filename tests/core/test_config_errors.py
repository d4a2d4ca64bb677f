"""Config errors carry their field (`ConfigError(field, message)`): callers read `field` and rename
the fields a message mentions through `describe`, never by parsing the text."""

from __future__ import annotations

import pickle

import pytest

from lcsb_core.errors import ConfigError
from lcsb_core.training.config import TrainConfig


def _error(raw: dict) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        TrainConfig.from_dict({"data": {"train_file": "train.jsonl"}, **raw}).check_honoured()
    return info.value


@pytest.mark.parametrize("raw, field, text", [
    ({"lora": {"rank": 0}}, "lora.rank", "lora.rank: must be an integer in [1, 1024], got 0"),
    ({"lcsb": {"k": 2, "fraction": 0.5}}, "lcsb", "lcsb: give `k` or `fraction`, not both"),
    ({"lora": {"rnak": 8}}, "lora.rnak", "lora.rnak: unknown field; valid: alpha, dropout, rank, target_modules"),
    ({"optim": 3}, "optim", "optim: must be a mapping, got int"),
    ({"max_steps": 5, "save_every": 6}, "save_every",
     "save_every: is 6, more than max_steps (5): it would never happen"),
])
def test_the_field_is_carried_not_parsed(raw, field, text):
    err = _error(raw)
    assert (err.field, str(err), err.code) == (field, text, "invalid_config")


def test_describe_renames_the_field_and_the_fields_mentioned():
    err = _error({"eval_every": 3})
    assert err.field == "eval_every" and err.mentions == ("data.validation_file", "eval_every")
    assert err.describe(lambda f: f"<{f}>") == (
        "<eval_every>: is 3, but periodic evaluation needs <data.validation_file>; give a validation file or set "
        "<eval_every> to 0")


def test_several_unknown_fields_name_no_single_field():
    err = _error({"lora": {"a": 1, "b": 2}})
    assert err.field is None and str(err).startswith("unknown fields lora.a, lora.b; valid: ")


def test_the_field_survives_pickling():  # exceptions cross process boundaries that way
    err = pickle.loads(pickle.dumps(_error({"eval_every": 3})))
    assert (err.field, err.mentions) == ("eval_every", ("data.validation_file", "eval_every"))
    assert str(err).startswith("eval_every: is 3, but periodic evaluation needs data.validation_file;")


def test_the_schedules_errors_name_their_field():
    from lcsb_core.training.schedules import LCSBSettings

    with pytest.raises(ConfigError) as info:
        LCSBSettings(schedule="topfull", k=31).schedule_for(num_layers=30)
    assert (info.value.field, info.value.message) == ("lcsb.k",
                                                      "must be in [1, 30] (the model's decoder layers), got 31")


@pytest.mark.parametrize("value", [-1, 1025, 1.5, True, "16"])
def test_a_bad_loss_chunk_size_names_its_field(value):
    error = _error({"loss_chunk_mib": value})
    assert error.field == "loss_chunk_mib" and "0 (no chunks) to 1024" in error.message


def test_recompute_deep_that_could_not_take_effect_is_an_error_naming_it():
    """`lcsb.recompute_deep` with gradient checkpointing (which recomputes every trained layer already) is
    refused by the config; with a schedule none of whose steps trains more than k layers (`top`, `cyclic`;
    `freeze` back-propagates through more but trains k) by the schedule's resolution, which the trainer
    and the memory estimate share."""
    from lcsb_core.training.schedules import LCSBSettings

    err = _error({"lcsb": {"recompute_deep": True, "gradient_checkpointing": True}})
    assert err.field == "lcsb.recompute_deep" and "recomputes every trained layer" in str(err)
    for name in ("top", "cyclic", "freeze"):
        with pytest.raises(ConfigError) as info:
            LCSBSettings(schedule=name, recompute_deep=True).schedule_for(num_layers=30)
        assert info.value.field == "lcsb.recompute_deep" and f"schedule {name!r} at k = 8" in str(info.value)
    for name in ("topfull", "tail", "split"):
        assert LCSBSettings(schedule=name, recompute_deep=True).schedule_for(num_layers=30).k == 8
