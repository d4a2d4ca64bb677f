"""Turn a job request (OpenAI fields + this service's `method` settings) into the trainer's
`TrainConfig` input, resolve "auto" hyperparameters, estimate peak memory and pick a worker queue.

Mapping (API -> TrainConfig):
    model                                  -> model.name_or_path (a folder name in the model catalog)
    training_file / validation_file        -> data.train_file / data.validation_file (file ids here;
                                              the worker substitutes local paths: `train_config_for`)
    seed                                   -> seed
    method.type ("supervised", the default, or "dpo")                   -> dpo: absent (supervised) or
                                                                           {"beta": ...} (DPOSettings)
    method.dpo.hyperparameters.beta ("auto": DPO_DEFAULT_BETA)          -> dpo.beta
    hyperparameters.*: the top level, or method.supervised.hyperparameters (supervised) or
                       method.dpo.hyperparameters (dpo), not both; the other type's section is an error
    hyperparameters.n_epochs ("auto": `auto_epochs` of the example count) -> epochs
    hyperparameters.batch_size ("auto": Settings.default_batch_size)   -> batch_size
    hyperparameters.learning_rate_multiplier ("auto": 1) x the job's base learning rate (Settings.base_learning_rate,
    else `TrainConfig.base_learning_rate`: the measured rule for the schedule its config resolved), or
    hyperparameters.learning_rate                                       -> optim.learning_rate
    hyperparameters.warmup_steps (absent: `auto_warmup_steps` of the run's length) -> optim.warmup_steps
    hyperparameters.max_steps / warmup_steps / weight_decay / lr_schedule -> max_steps / optim.*
    method.lora.{rank, alpha, dropout, target_modules}                  -> lora.*
    method.quantization                                                 -> model.quantization
    method.lcsb.{schedule, k, fraction, full_every, deep_fraction, layer_lr_scaling, momentum_for_skipped,
                 gradient_checkpointing}                                -> lcsb.*
    method.max_seq_len (default: the trainer's, at most the model's context_length), method.train_on_inputs -> data.*
    method.eval_every / method.save_every (optimizer steps)             -> eval_every / save_every
    method.eval_at_start                                                -> eval_at_start
    method.on_truncation                                                -> data.on_truncation
    method.group_by_length                                              -> data.group_by_length
    method.select_checkpoint.{mode, metric}                             -> select_checkpoint.*
    method.early_stopping.{metric, patience, min_delta}                 -> early_stopping.* (absent: off)
    method.eval.{graders, n_samples, max_new_tokens, eval_file,         -> eval.* (graded evaluation; eval_file
                 frequency_penalty, presence_penalty}
                                              a file id here, a local path in the worker)

A DPO job trains on preference pairs (the files' formats are checked by `lcsb_service.jobs.check_file_format`);
`method.train_on_inputs` true is refused for it (DPO scores the answers only). The LCSB, LoRA and
evaluation settings apply to both types.

Every rule the trainer can check without the model is checked here, at creation: the config's own
fields, its cross-field rules (`TrainConfig.check_honoured`, with the training file's example count: an
interval longer than the run's real number of optimizer steps is refused), `k` against the model's
layer count, `max_seq_len` against its context. Errors name the request's fields, not the trainer's.

Defaults: a field the request leaves out is left out of the trainer's input too, so `TrainConfig` (and
its sections' dataclass defaults) is the one home of every default; this module resolves only OpenAI's
`"auto"` values (and the `max_seq_len` default, which must fit the model's context).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from lcsb_core.data.settings import DataSettings
from lcsb_core.errors import ConfigError
from lcsb_core.training.config import TrainConfig
from lcsb_core.training.schedules import Schedule
from lcsb_service.catalog import ModelInfo
from lcsb_service.errors import InvalidRequest
from lcsb_service.hyperparameters import DPO, SUPERVISED, dpo_beta, merged_hyperparameters, resolve_hyperparameters
from lcsb_service.hyperparameters import OPTIM as _OPTIM
from lcsb_service.hyperparameters import given as _given
from lcsb_service.routing import route_auto
from lcsb_service.settings import Settings

_PARAM_OF_SECTION = {"data.max_seq_len": "method.max_seq_len", "data": "method", "lora": "method.lora",
                     "lcsb": "method.lcsb", "optim": "hyperparameters", "model.quantization": "method.quantization",
                     "batch_size": "hyperparameters.batch_size", "epochs": "hyperparameters.n_epochs",
                     "max_steps": "hyperparameters.max_steps", "eval_every": "method.eval_every",
                     "save_every": "method.save_every", "eval_at_start": "method.eval_at_start",
                     "data.on_truncation": "method.on_truncation",
                     "data.validation_file": "validation_file", "data.train_file": "training_file",
                     "select_checkpoint": "method.select_checkpoint", "early_stopping": "method.early_stopping",
                     "eval": "method.eval", "dpo": "method.dpo.hyperparameters"}


@dataclass
class JobSpec:
    """What the API stores on a new job."""

    train_config: dict[str, Any]
    hyperparameters: dict[str, Any]
    method: dict[str, Any]
    memory_estimate: dict[str, Any]
    queue: str
    total_steps: int | None = None  # optimizer steps; None when the example count is not known yet


def request_hash(body: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of a request body (idempotency: same key, same body)."""
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def request_name(field: str) -> str:
    """A trainer field ("lora.rank", "eval_every") as the request names it ("method.lora.rank"); a field
    the request has no name for is returned unchanged."""
    for prefix in sorted(_PARAM_OF_SECTION, key=len, reverse=True):
        if field == prefix or field.startswith(prefix + "."):
            return _PARAM_OF_SECTION[prefix] + field[len(prefix):]
    return field


def _request_error(exc: ConfigError) -> InvalidRequest:
    """The trainer's ConfigError restated with the request's field names: its `field` (in `param`
    when the request has a name for it) and the fields its message mentions."""
    param = request_name(exc.field) if exc.field else None
    return InvalidRequest(exc.describe(request_name), code="invalid_hyperparameters",
                          param=param if param != exc.field else None)



def build_spec(request: dict[str, Any], model: ModelInfo, settings: Settings, job_id: str, *,
               train_examples: int | None = None, init_adapter: str | None = None) -> JobSpec:
    """Validate a job request against the model and the trainer's config; estimate memory; route it.
    With `train_examples` (the training file's example count, known at upload for JSONL), the run's
    real number of optimizer steps is computed (`JobSpec.total_steps`) and every interval must fit in it,
    and `n_epochs` "auto" follows `auto_epochs`. `init_adapter`: the storage key of the adapter archive a
    continued job starts from (`lcsb_service.lineage`; the worker puts a local folder in its place).

    Raises:
        InvalidRequest: a value the trainer refuses (the param names the request field).
        Unprocessable: no worker class has enough memory (code `insufficient_memory`).
    """
    method = request.get("method") or {}
    given_hp = merged_hyperparameters(request)
    dpo = (method.get("type") or SUPERVISED) == DPO
    if dpo and method.get("train_on_inputs"):
        raise InvalidRequest("method.train_on_inputs: a dpo job scores only the answers (preferred_output and "
                             "non_preferred_output) against the input; leave train_on_inputs out or false",
                             param="method.train_on_inputs")
    hp = resolve_hyperparameters(given_hp, settings, train_examples=train_examples)
    max_seq_len = method.get("max_seq_len") or min(DataSettings.max_seq_len, model.context_length)
    if max_seq_len > model.context_length:
        raise InvalidRequest(f"max_seq_len {max_seq_len} exceeds {model.name}'s context of {model.context_length} "
                             "tokens", param="method.max_seq_len")
    raw = {
        "data": {"train_file": request["training_file"], "validation_file": request.get("validation_file"),
                 "max_seq_len": max_seq_len, "min_examples": settings.min_examples,
                 **_given(method, "train_on_inputs", "on_truncation", "group_by_length")},
        "model": {"name_or_path": model.name, **_given(method, "quantization")},
        "lora": _given(method.get("lora") or {}, "rank", "alpha", "dropout", "target_modules"),
        "lcsb": {k: v for k, v in (method.get("lcsb") or {}).items() if v is not None},
        "optim": {"learning_rate": hp["learning_rate"], **_given(hp, *_OPTIM)},
        "batch_size": hp["batch_size"], "epochs": hp["n_epochs"], "max_steps": hp["max_steps"],
        "seed": request["seed"], **_given(method, "eval_every", "save_every", "eval_at_start"),
        "output_dir": f"runs/{job_id}", **_graded_eval(method),
        **({"init_adapter": init_adapter} if init_adapter else {}),
        "select_checkpoint": _given(method.get("select_checkpoint") or {}, "mode", "metric"),
        **({"dpo": {"beta": dpo_beta(given_hp)}} if dpo else {}),
    }
    if method.get("early_stopping") is not None:
        raw["early_stopping"] = _given(method["early_stopping"], "metric", "patience", "min_delta")
    try:
        cfg = TrainConfig.from_dict(raw, train_examples=train_examples)   # "auto" resolved once, for this length
        hp = _learning_rate(hp, cfg, settings)
        cfg.check_honoured(train_examples)
        schedule = cfg.lcsb.schedule_for(num_layers=model.num_layers)
        _check_schedule_options(method.get("lcsb") or {}, schedule, cfg.lcsb.auto)
    except ConfigError as exc:
        raise _request_error(exc) from exc
    hp = {**hp, **{name: getattr(cfg.optim, name) for name in _OPTIM}}
    total = cfg.total_steps(train_examples)
    if hp["warmup_steps"] is None:  # "auto": resolved now when the run's length is known, else by the worker
        hp["warmup_steps"] = cfg.warmup_steps_for(total) if total is not None else "auto"
    estimate, queue, schedule = route_auto(model, cfg, schedule, settings)
    resolved = {**describe_method(cfg, hp, schedule), "stop_on_divergence": bool(method.get("stop_on_divergence"))}
    return JobSpec(train_config=cfg.to_dict(), hyperparameters=hp, method=resolved,
                   memory_estimate=estimate, queue=queue, total_steps=total)


def _learning_rate(hp: dict[str, Any], cfg: TrainConfig, settings: Settings) -> dict[str, Any]:
    """`hp` with the job's learning rate and multiplier, against its base rate (`Settings.base_learning_rate`,
    else `cfg.base_learning_rate` for the schedule the config resolved): a given `learning_rate` is kept
    and its multiplier reported; else the multiplier times the base, set on `cfg.optim` (checked again).

    Raises:
        ConfigError: the resulting rate is out of range, naming `optim.learning_rate`.
    """
    base = settings.base_learning_rate or cfg.base_learning_rate
    if hp["learning_rate"] is not None:
        return {**hp, "learning_rate_multiplier": hp["learning_rate"] / base}
    lr = base * hp["learning_rate_multiplier"]
    if lr != cfg.optim.learning_rate:
        cfg.optim = dataclasses.replace(cfg.optim, learning_rate=lr)
    return {**hp, "learning_rate": lr}


def _graded_eval(method: dict[str, Any]) -> dict[str, Any]:
    """`{"eval": ...}` for the trainer from `method.eval` (its unset options left out), or {}."""
    graded = method.get("eval")
    if not graded:
        return {}
    graders = [{k: v for k, v in g.items() if v is not None} for g in graded.get("graders") or []]
    return {"eval": {**_given(graded, "n_samples", "max_new_tokens", "eval_file", "frequency_penalty",
                              "presence_penalty"), "graders": graders}}


def _check_schedule_options(given: dict[str, Any], schedule: Schedule, auto: dict[str, Any] | None) -> None:
    """`k` / `fraction` with `full` is an error, not a silent no-op (`full_every` on a schedule without
    full steps is refused by the core's `LCSBSettings`).

    Raises:
        ConfigError: naming `lcsb.full_every`.
    """
    for name in ("k", "fraction"):
        if given.get(name) is not None and not schedule.uses_k:
            chose = f", what auto chose for this job: {auto['reason']}" if auto else ""
            raise ConfigError(f"lcsb.{name}", f"has no effect with schedule 'full' (it trains all "
                                              f"{schedule.num_layers} layers every step{chose}); remove it"
                                              + (", or name lcsb.schedule" if auto else ""))


def describe_method(cfg: TrainConfig, hp: dict[str, Any], schedule: Schedule) -> dict[str, Any]:
    """The job's `method` as resolved: OpenAI's `type` and `<type>.hyperparameters` (`supervised`, or `dpo`
    with `beta` from the config's `dpo`) plus the LoRA, quantization and LCSB settings the trainer will use
    (`lcsb.layers_per_step` is k resolved, L for `full`; `full_every` only for `topfull`)."""
    kind = SUPERVISED if cfg.dpo is None else DPO
    shown = {name: hp[name] for name in ("n_epochs", "batch_size", "learning_rate_multiplier", "learning_rate",
                                         "warmup_steps")}
    if cfg.dpo is not None:
        shown["beta"] = cfg.dpo.beta
    return {
        "type": kind,
        kind: {"hyperparameters": shown},
        "lora": {"rank": cfg.lora.rank, "alpha": cfg.lora.alpha, "dropout": cfg.lora.dropout,
                 "target_modules": list(cfg.lora.target_modules)},
        "quantization": cfg.model.quantization,
        "lcsb": {"schedule": cfg.lcsb.schedule, "k": cfg.lcsb.k, "fraction": cfg.lcsb.fraction,
                 "layers_per_step": schedule.k, "full_every": schedule.full_every,
                 "deep_fraction": schedule.deep_fraction, "layer_lr_scaling": cfg.lcsb.layer_lr_scaling,
                 "exact_gradient": not schedule.identity_skip, "momentum_for_skipped": cfg.lcsb.momentum_for_skipped,
                 "gradient_checkpointing": cfg.lcsb.gradient_checkpointing,
                 "recompute_deep": cfg.lcsb.recompute_deep,
                 "auto": cfg.lcsb.auto},
        "max_seq_len": cfg.data.max_seq_len, "train_on_inputs": cfg.data.train_on_inputs,
        "on_truncation": cfg.data.on_truncation, "group_by_length": cfg.data.group_by_length,
        "eval_every": cfg.eval_every, "save_every": cfg.save_every,
        "eval_at_start": cfg.eval_at_start,
        "select_checkpoint": {"mode": cfg.select_checkpoint.mode, "metric": cfg.select_checkpoint.metric},
        "early_stopping": dataclasses.asdict(cfg.early_stopping) if cfg.early_stopping else None,
        **({} if cfg.eval is None else {"eval": {"graders": [dict(g) for g in cfg.eval.graders],
                                                "n_samples": cfg.eval.n_samples,
                                                "max_new_tokens": cfg.eval.max_new_tokens,
                                                "eval_file": cfg.eval.eval_file,
                                                "frequency_penalty": cfg.eval.frequency_penalty,
                                                "presence_penalty": cfg.eval.presence_penalty}}),
    }


def fine_tuned_model_name(model: str, owner_name: str, suffix: str | None, job_id: str) -> str:
    """OpenAI-style name of the trained adapter: `ft:<model>:<owner>:<suffix>:<job id>`."""
    return f"ft:{model}:{owner_name}:{suffix or ''}:{job_id}"


def train_config_for(job_config: dict[str, Any], *, model_path: str, train_path: str,
                     validation_path: str | None, output_dir: str, device: str,
                     eval_path: str | None = None, init_adapter_path: str | None = None) -> TrainConfig:
    """For the worker: the stored config with the base model's folder (`catalog.find_model(...).path`),
    local file paths (`eval_path`: the graded evaluation's `eval_file`, when it has one), its run folder
    and device filled in; a continued job's `init_adapter` (a storage key) becomes `init_adapter_path`,
    the local folder of the fetched adapter.

    Raises:
        ConfigError: the stored config no longer validates (e.g. after a trainer upgrade), or it
            continues from an adapter and no local folder is given (`init_adapter`).
    """
    raw = json.loads(json.dumps(job_config))
    if raw.get("init_adapter"):
        if not init_adapter_path:
            raise ConfigError("init_adapter", "the job continues from an adapter, but no local copy was given")
        raw["init_adapter"] = init_adapter_path
    raw["data"]["train_file"], raw["data"]["validation_file"] = train_path, validation_path
    raw["output_dir"], raw["model"]["device"] = output_dir, device
    raw["model"]["name_or_path"] = model_path
    if raw.get("eval") and raw["eval"].get("eval_file"):
        raw["eval"]["eval_file"] = eval_path
    return TrainConfig.from_dict(raw)
