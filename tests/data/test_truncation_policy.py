"""Before reading any file, `load_datasets` enforces the cross-field rules (`TrainConfig.check_honoured`),
and `data.on_truncation: fail` turns a truncated or dropped example into an error naming its lines
(the shared case `prompt_too_long.jsonl`: line 2 loses every target token at 256 tokens)."""

from __future__ import annotations

import pytest

from lcsb_core.errors import ConfigError, DataError
from lcsb_core.training.config import TrainConfig
from lcsb_core.training.setup import load_datasets


def cfg(train, **over) -> TrainConfig:
    data = {"train_file": str(train), "max_seq_len": 256, "min_examples": 1, **over.pop("data", {})}
    return TrainConfig.from_dict({"data": data, **over})


def test_report_is_the_default_and_names_the_dropped_line(case, tokenizer):
    train, evals = load_datasets(cfg(case("prompt_too_long.jsonl")), tokenizer)
    assert evals is None and [e.line for e in train.examples] == [1, 3]
    assert (train.report.dropped_no_target, train.report.dropped_lines) == (1, [2])
    assert train.report.truncation_notes() == [   # line 2 once: dropped (it was cut, but is not trained on)
        "1 example(s) dropped, no target token left after truncation to 256 tokens (lines 2)"]


def test_fail_rejects_a_truncated_file_naming_the_lines(case, tokenizer):
    with pytest.raises(DataError) as exc:
        load_datasets(cfg(case("prompt_too_long.jsonl"), data={"on_truncation": "fail"}), tokenizer)
    text = str(exc.value)
    assert "dropped" in text and "(lines 2)" in text and "on_truncation is 'fail'" in text
    assert exc.value.report.dropped_lines == [2]
    # the same file with room for line 2 passes
    train, _ = load_datasets(cfg(case("prompt_too_long.jsonl"), data={"on_truncation": "fail", "max_seq_len": 4096}),
                             tokenizer)
    assert len(train) == 3


def test_fail_applies_to_the_validation_file_too(case, tokenizer):
    with pytest.raises(DataError, match=r"prompt_too_long.jsonl.*\(lines 2\)"):
        load_datasets(cfg(case("clean_reference.jsonl"), data={"on_truncation": "fail",
                                                                "validation_file": str(case("prompt_too_long.jsonl"))}),
                      tokenizer)


def test_unknown_policy_is_a_config_error(case):
    with pytest.raises(ConfigError, match="data.on_truncation: must be one of report, fail, got 'drop'"):
        cfg(case("clean_reference.jsonl"), data={"on_truncation": "drop"})


@pytest.mark.parametrize("over, message", [
    ({"eval_every": 2}, "eval_every: is 2, but periodic evaluation needs data.validation_file"),
    ({"max_steps": 5, "eval_every": 6, "data": {"validation_file": "v.jsonl"}},
     "eval_every: is 6, more than max_steps (5)"),
    ({"max_steps": 5, "save_every": 6}, "save_every: is 6, more than max_steps (5)"),
    ({"max_steps": 5, "optim": {"warmup_steps": 6}}, "optim.warmup_steps: is 6, more than max_steps (5)"),
])
def test_cross_field_rules_are_checked_before_any_file_is_read(tmp_path, over, message):
    config = cfg(tmp_path / "never-read.jsonl", **over)  # the config itself is valid
    with pytest.raises(ConfigError) as exc:
        load_datasets(config, tokenizer=None)
    assert str(exc.value).startswith(message)


def test_settings_that_take_effect_pass(tmp_path):
    cfg(tmp_path / "t.jsonl", max_steps=5, eval_every=5, save_every=5, optim={"warmup_steps": 5},
        data={"validation_file": "v.jsonl"}).check_honoured()
    cfg(tmp_path / "t.jsonl", eval_every=0, save_every=100).check_honoured()  # no max_steps: epochs decide
