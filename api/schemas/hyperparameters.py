"""The hyperparameter sections of a job request, by `method.type`: OpenAI's `hyperparameters` (top level or
`method.supervised.hyperparameters`) and `method.dpo.hyperparameters` (the same plus DPO's `beta`). Every
setting defaults to None (left out): the trainer's `TrainConfig` is the one home of the defaults, which the
descriptions read from it."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from api.schemas.common import Strict
from lcsb_core.training.config import DPO_DEFAULT_BETA, LEARNING_RATE_RANGE, LR_SCHEDULES, OptimSettings
from lcsb_core.training.learning_rate import AUTO_WARMUP_MAX

Auto = Literal["auto"]


class Hyperparameters(BaseModel):
    """OpenAI's three (each may be "auto") plus optional explicit optimizer settings."""

    model_config = Strict
    n_epochs: Auto | Annotated[int, Field(ge=1, le=100)] | None = None
    batch_size: Auto | Annotated[int, Field(ge=1, le=512)] | None = None
    learning_rate_multiplier: Auto | Annotated[float, Field(ge=1e-3, le=100)] | None = Field(
        default=None, description="x the job's base learning rate (auto: 1): the measured best for its schedule "
                                  "(8e-4 for topfull, split, tail and full backprop; BENCHMARKS.md); the product must "
                                  "lie in the learning_rate range")
    learning_rate: Annotated[float, Field(ge=LEARNING_RATE_RANGE[0], lt=LEARNING_RATE_RANGE[1])] | None = Field(
        default=None, description=f"AdamW's peak learning rate, in [{LEARNING_RATE_RANGE[0]:g}, "
                                  f"{LEARNING_RATE_RANGE[1]:g})")
    max_steps: Annotated[int, Field(ge=1, le=10_000_000)] | None = None
    warmup_steps: Annotated[int, Field(ge=0, le=10_000_000)] | None = Field(
        default=None, description=f"linear warmup steps (default: a quarter of the run, at most {AUTO_WARMUP_MAX})")
    weight_decay: Annotated[float, Field(ge=0, le=1)] | None = Field(
        default=None, description=f"AdamW weight decay (default {OptimSettings.weight_decay})")
    lr_schedule: Literal[LR_SCHEDULES] | None = Field(  # type: ignore[valid-type]
        default=None, description=f"after warmup (default {OptimSettings.lr_schedule})")


class SupervisedMethod(BaseModel):
    """`method.supervised` (with `method.type` supervised, the default)."""

    model_config = Strict
    hyperparameters: Hyperparameters | None = None


class DPOHyperparameters(Hyperparameters):
    """A DPO job's hyperparameters: the supervised ones plus DPO's `beta`."""

    beta: Auto | float | None = Field(default=None, description=(
        f"DPO's beta (auto: {DPO_DEFAULT_BETA:g}): how strongly the model is held to its reference (the "
        "starting model) while it learns to prefer preferred_output; larger stays closer to the reference. "
        "The trainer's DPOSettings checks its range"))


class DPOMethod(BaseModel):
    """`method.dpo` (with `method.type` dpo): preference fine-tuning on a file of preference pairs."""

    model_config = Strict
    hyperparameters: DPOHyperparameters | None = None
