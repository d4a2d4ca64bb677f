"""Build a run's components from its config: base model (quantized) + LoRA, tokenizer, datasets."""

from __future__ import annotations

import json
from pathlib import Path

from lcsb_core.errors import ConfigError, DataError
from lcsb_core.models.loading import load_base_model, load_tokenizer, resolve_device, resolve_model_path
from lcsb_core.training.config import TrainConfig
from lcsb_core.training.lora import apply_lora


def check_packing(cfg: TrainConfig, model_config: dict) -> None:
    """Refuse `data.pack` where the block-diagonal 4-D mask would override sliding-window attention:
    transformers passes a prepared 4-D mask to every layer unchanged, so a sliding-window layer (Gemma-3:
    15 of 18 layers, window 512) would attend past its window in rows longer than the window.

    Raises:
        ConfigError: `data.pack` with `data.max_seq_len` above the model's `sliding_window` on a model
            with sliding-window layers.
    """
    window = model_config.get("sliding_window")
    sliding = "sliding_attention" in (model_config.get("layer_types") or [])
    if cfg.data.pack and sliding and window and cfg.data.max_seq_len > window:
        raise ConfigError("data.pack", f"cannot pack rows of {cfg.data.max_seq_len} tokens on a model with "
                          f"sliding-window attention (window {window} tokens): the packing mask would override "
                          "the window; set {data.max_seq_len} to at most the window or turn packing off",
                          mentions=("data.max_seq_len",))


def load_components(cfg: TrainConfig):
    """(PeftModel with LoRA on the quantized base, tokenizer, torch.device).

    Raises:
        ModelLoadError: see `lcsb_core.models.loading`.
        ConfigError: packing that would override sliding-window attention (`check_packing`), before
            the model loads.
    """
    device = resolve_device(cfg.model.device)
    path = resolve_model_path(cfg.model.name_or_path)
    check_packing(cfg, json.loads((Path(path) / "config.json").read_text()))
    tokenizer = load_tokenizer(path)
    base = load_base_model(path, quantization=cfg.model.quantization, device=device)
    return apply_lora(base, cfg.lora, seed=cfg.seed), tokenizer, device


def load_datasets(cfg: TrainConfig, tokenizer):
    """(train TokenizedDataset, eval TokenizedDataset or None), validated and tokenized, after
    `cfg.check_honoured()` (e.g. periodic evaluation needs a validation file).

    With `data.on_truncation == "fail"`, an example longer than `data.max_seq_len` (truncated, or left
    with no target token and dropped) raises instead of being reported.

    Raises:
        ConfigError: a cross-field rule is broken (`TrainConfig.check_honoured`), or a file's format does
            not fit the run (preference pairs for `dpo`, supervised data otherwise).
        DataError: the file fails validation, or truncates with `on_truncation: fail` (the message names
            lines and fields; `err.report` is the ValidationReport).
        ModelLoadError: chat data with a tokenizer that has no chat template.
    """
    from lcsb_core.data import build_dataset

    cfg.check_honoured()
    d = cfg.data
    train = build_dataset(Path(d.train_file), tokenizer, max_seq_len=d.max_seq_len,
                          train_on_inputs=d.train_on_inputs, skip_invalid=d.skip_invalid,
                          min_examples=d.min_examples)
    _check_truncation(train, d.on_truncation)
    _check_method(cfg, train, "data.train_file")
    evals = None
    if d.validation_file:
        evals = build_dataset(Path(d.validation_file), tokenizer, max_seq_len=d.max_seq_len,
                              train_on_inputs=d.train_on_inputs, skip_invalid=d.skip_invalid, min_examples=1)
        _check_truncation(evals, d.on_truncation)
        _check_method(cfg, evals, "data.validation_file")
        if d.max_eval_examples is not None:  # pairs for DPO: two examples each
            evals.examples = evals.examples[: d.max_eval_examples * (1 if cfg.dpo is None else 2)]
    return train, evals


def _check_method(cfg: TrainConfig, dataset, field: str) -> None:
    """A DPO run needs preference pairs, a supervised run supervised data.

    Raises:
        ConfigError: naming `field`, with the format found and the one expected.
    """
    if dataset.is_preference == (cfg.dpo is not None):
        return
    wanted = ("preference pairs (input, preferred_output, non_preferred_output)" if cfg.dpo is not None
              else "chat, prompt_completion or text data (preference pairs need dpo)")
    raise ConfigError(field, f"is {dataset.format} data; this run needs {wanted}")


def _check_truncation(dataset, policy: str) -> None:
    report = dataset.report
    if policy == "fail" and (report.truncated or report.dropped_no_target):
        err = DataError(f"{report.summary()} (rejected: on_truncation is 'fail'; raise max_seq_len or shorten "
                        "those examples)")
        err.report = report  # type: ignore[attr-defined]
        raise err
