"""The evaluation sections of a job request's `method`: graded evaluation (`method.eval`), which adapter
becomes the job's model (`method.select_checkpoint`) and early stopping (`method.early_stopping`). Types
and simple bounds only; the trainer's config checks the rest once (docs/ARCHITECTURE.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from api.schemas.common import Strict
from lcsb_core.eval.graders import GRADER_TYPES, STRING_CHECK
from lcsb_core.eval.settings import MAX_NEW_TOKENS_RANGE, N_SAMPLES_RANGE, PENALTY_RANGE, EvalSettings
from lcsb_core.training.selection import (
    GRADER_PREFIX,
    LOWER_IS_BETTER,
    SELECT_MODES,
    EarlyStoppingSettings,
    SelectCheckpointSettings,
)

_METRICS = (f"{', '.join(LOWER_IS_BETTER)} (lower, higher is better) or {GRADER_PREFIX}<name> (a grader's "
            "score, higher is better; needs that grader in the job)")


class SelectCheckpointMethod(BaseModel):
    """Which adapter becomes the job's `fine_tuned_model` and final download."""

    model_config = Strict
    mode: Literal[SELECT_MODES] | None = Field(  # type: ignore[valid-type]
        default=None, description=f"last (the adapter after the final step) or best (the evaluated step with the best "
        f"metric; needs validation_file and method.eval_every) (default {SelectCheckpointSettings.mode})")
    metric: str | None = Field(default=None, min_length=1, max_length=128, description=(
        f"what best compares: {_METRICS} (default {SelectCheckpointSettings.metric})"))


class EarlyStoppingMethod(BaseModel):
    """End the job, succeeded, after `patience` evaluations without an improvement of the metric by more
    than `min_delta`; needs validation_file and method.eval_every."""

    model_config = Strict
    metric: str | None = Field(default=None, min_length=1, max_length=128, description=(
        f"what is watched: {_METRICS} (default {EarlyStoppingSettings.metric})"))
    patience: int | None = Field(default=None, ge=1, le=1_000_000, description=(
        f"evaluations in a row without an improvement before the run ends (default {EarlyStoppingSettings.patience})"))
    min_delta: float | None = Field(default=None, ge=0, allow_inf_nan=False, description=(
        f"the smallest change that counts as an improvement, in the metric's units (default "
        f"{EarlyStoppingSettings.min_delta:g})"))


class GraderSpec(BaseModel):
    """One grader (`lcsb_core.eval.graders`, whose docstring says what each type scores). This schema
    checks types and lengths; the trainer's `parse_graders` checks the rest at creation (a pattern that
    does not compile, a string_check operation other than eq/like/ilike, options of another type)."""

    model_config = Strict
    type: Literal[(*GRADER_TYPES, STRING_CHECK)] = Field(description=(  # type: ignore[valid-type]
        "exact_match, numeric (the answer's final number: after GSM8K's ####, else the last one), regex "
        "(pattern), contains (value, default the reference; case_sensitive), json_valid, or OpenAI's "
        "string_check (operation eq, like or ilike)"))
    name: str | None = Field(default=None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$", description=(
        "unique in the job (default the type); the score is reported as the metric grader/<name>"))
    pattern: str | None = Field(default=None, min_length=1, max_length=1000, description="regex: a Python pattern")
    value: str | None = Field(default=None, min_length=1, max_length=1000, description="contains: the text to find")
    case_sensitive: bool | None = Field(default=None, description="contains (default true)")
    operation: str | None = Field(default=None, max_length=16, description="string_check: eq, like or ilike")
    input: str | None = Field(default=None, max_length=200, description="string_check: {{sample.output_text}}")
    reference: str | None = Field(default=None, max_length=1000, description=(
        "string_check: {{item.reference}} (default) or a literal string"))


class EvalMethod(BaseModel):
    """Graded evaluation: at the step-0 evaluation (the base model), every eval_every steps and at the
    end, the model answers the first n_samples prompts of eval_file (default: the validation file)
    greedily, on the engine that serves it (llama.cpp on a CPU worker: the answer /v1/chat/completions
    gives at temperature 0), and the graders score the answers; needs a validation file of chat or
    prompt/completion lines, or an eval_file of them."""

    model_config = Strict
    graders: list[GraderSpec] = Field(min_length=1, max_length=16)
    n_samples: int | None = Field(default=None, ge=N_SAMPLES_RANGE[0], le=N_SAMPLES_RANGE[1], description=(
        f"prompts answered per evaluation (default {EvalSettings.n_samples})"))
    max_new_tokens: int | None = Field(default=None, ge=MAX_NEW_TOKENS_RANGE[0], le=MAX_NEW_TOKENS_RANGE[1],
                                       description=f"tokens per answer (default {EvalSettings.max_new_tokens})")
    frequency_penalty: float | None = Field(default=None, ge=PENALTY_RANGE[0], le=PENALTY_RANGE[1], description=(
        "OpenAI's frequency_penalty on the graded answers, as on /v1/chat/completions (default 0)"))
    presence_penalty: float | None = Field(default=None, ge=PENALTY_RANGE[0], le=PENALTY_RANGE[1], description=(
        "OpenAI's presence_penalty on the graded answers, as on /v1/chat/completions (default 0)"))
    eval_file: str | None = Field(default=None, min_length=1, max_length=64, description=(
        "a fine-tune file of chat or prompt/completion lines to take prompts and references from"))
