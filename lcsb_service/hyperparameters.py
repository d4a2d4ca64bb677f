"""A job request's hyperparameters, resolved: OpenAI's two places for them (top level, or the method's
own: `method.supervised.hyperparameters` or `method.dpo.hyperparameters`, by `method.type`), and its
"auto" values (`n_epochs` by OpenAI's rule from the example count, `batch_size` from `Settings`,
`learning_rate_multiplier` 1, applied by `lcsb_service.jobspec` to the job's base learning rate once the
trainer's config has resolved its schedule: `Settings.base_learning_rate` when an operator sets it, else
`TrainConfig.base_learning_rate`, the core's one home for the measured rule; DPO's `beta` "auto":
`lcsb_core.training.config.DPO_DEFAULT_BETA`). Used by `lcsb_service.jobspec`."""

from __future__ import annotations

from typing import Any

from lcsb_core.training.config import DPO_DEFAULT_BETA
from lcsb_service.errors import InvalidRequest
from lcsb_service.settings import Settings

SUPERVISED, DPO = "supervised", "dpo"
METHOD_TYPES = (SUPERVISED, DPO)  # OpenAI's `method.type` values this service trains


def method_type(request: dict[str, Any]) -> str:
    """The request's `method.type` (`supervised` when left out), checked against the sections it gives:
    `method.supervised` belongs to a supervised job, `method.dpo` to a DPO job.

    Raises:
        InvalidRequest: an unknown type (`method.type`), or the other type's section (naming it).
    """
    method = request.get("method") or {}
    kind = method.get("type") or SUPERVISED
    if kind not in METHOD_TYPES:
        raise InvalidRequest(f"method.type: {kind!r} is not one of {', '.join(METHOD_TYPES)}", param="method.type")
    for other in METHOD_TYPES:
        if other != kind and method.get(other) is not None:
            raise InvalidRequest(f"method.{other}: given with method.type {kind!r}; a {kind} job takes its "
                                 f"hyperparameters in method.{kind} (or set method.type to {other!r})",
                                 param=f"method.{other}")
    return kind


def merged_hyperparameters(request: dict[str, Any]) -> dict[str, Any]:
    """Hyperparameters from the top level or from the method's own section (`method.supervised.hyperparameters`,
    or `method.dpo.hyperparameters` for a DPO job, which adds `beta`), not both.

    Raises:
        InvalidRequest: both places are set; the other method type's section is given (`method_type`).
    """
    kind = method_type(request)
    top = {k: v for k, v in (request.get("hyperparameters") or {}).items() if v is not None}
    section = ((request.get("method") or {}).get(kind) or {}).get("hyperparameters") or {}
    nested = {k: v for k, v in section.items() if v is not None}
    if top and nested:
        raise InvalidRequest(f"give hyperparameters either at the top level or in method.{kind}, not both",
                             param="hyperparameters")
    return top or nested


def dpo_beta(hp: dict[str, Any]) -> float:
    """DPO's `beta` from merged hyperparameters: "auto" or missing -> `DPO_DEFAULT_BETA` (the range is
    `DPOSettings`' to check)."""
    return _or_default(hp, "beta", DPO_DEFAULT_BETA)


def _or_default(hp: dict[str, Any], name: str, default: Any) -> Any:
    value = hp.get(name, "auto")
    return default if value == "auto" else value


# OpenAI's documented n_epochs "auto" (openai-cookbook, examples/Chat_finetuning_data_prep.ipynb,
# "Pricing and default n_epochs estimate"): 3 epochs, raised so that a small file is seen about 100
# times in all, lowered so that a large one is seen at most 25,000 times, within [1, 25] epochs.
AUTO_TARGET_EPOCHS = 3
AUTO_MIN_TARGET_EXAMPLES, AUTO_MAX_TARGET_EXAMPLES = 100, 25_000
AUTO_MIN_EPOCHS, AUTO_MAX_EPOCHS = 1, 25


def auto_epochs(train_examples: int | None, settings: Settings) -> int:
    """`n_epochs` "auto" for a training file of `train_examples` examples: `AUTO_TARGET_EPOCHS` (3);
    fewer than 34 examples get min(25, 100 // n), more than 8,333 get max(1, 25000 // n) (OpenAI's rule,
    constants above). An unknown count (a `.txt` corpus, counted by the worker) gets
    `Settings.default_epochs`."""
    if not train_examples:
        return settings.default_epochs
    if train_examples * AUTO_TARGET_EPOCHS < AUTO_MIN_TARGET_EXAMPLES:
        return min(AUTO_MAX_EPOCHS, AUTO_MIN_TARGET_EXAMPLES // train_examples)
    if train_examples * AUTO_TARGET_EPOCHS > AUTO_MAX_TARGET_EXAMPLES:
        return max(AUTO_MIN_EPOCHS, AUTO_MAX_TARGET_EXAMPLES // train_examples)
    return AUTO_TARGET_EPOCHS


def resolve_hyperparameters(hp: dict[str, Any], settings: Settings, *,
                            train_examples: int | None = None) -> dict[str, Any]:
    """Replace OpenAI's "auto" (or missing) `n_epochs` (`auto_epochs` of `train_examples`), `batch_size`
    and `learning_rate_multiplier` (1.0) by the service defaults; `learning_rate` stays as given (None: the
    multiplier times the job's base rate, which `lcsb_service.jobspec` applies once the trainer's config has
    resolved the schedule); the other optimizer settings are passed on only when given (the trainer's
    defaults apply otherwise, and `build_spec` reports them from the resolved config).

    Raises:
        InvalidRequest: both `learning_rate` and a non-auto `learning_rate_multiplier` are given.
    """
    mult, lr = hp.get("learning_rate_multiplier", "auto"), hp.get("learning_rate")
    if lr is not None and mult != "auto":
        raise InvalidRequest("give learning_rate or learning_rate_multiplier, not both",
                             param="hyperparameters.learning_rate")
    return {"n_epochs": int(_or_default(hp, "n_epochs", auto_epochs(train_examples, settings))),
            "batch_size": int(_or_default(hp, "batch_size", settings.default_batch_size)),
            "learning_rate_multiplier": 1.0 if mult == "auto" else float(mult), "learning_rate": lr,
            "max_steps": hp.get("max_steps"), **given(hp, *OPTIM)}


OPTIM = ("warmup_steps", "weight_decay", "lr_schedule")  # hyperparameters -> optim.*, unchanged


def given(values: dict[str, Any], *names: str) -> dict[str, Any]:
    """The named entries of `values` that are set (not missing, not None)."""
    return {n: values[n] for n in names if values.get(n) is not None}
