"""Fine-tuning job bodies: the create request (OpenAI fields plus LoRA/quantization/LCSB settings under
`method`) and the `fine_tuning.job` object (plus progress, memory estimate and queue)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, model_validator

from api.schemas.common import Strict
from api.schemas.evaluation import EarlyStoppingMethod, EvalMethod, SelectCheckpointMethod
from api.schemas.hyperparameters import DPOMethod, Hyperparameters, SupervisedMethod
from lcsb_core.data.settings import GROUP_BY_LENGTH_DPO, ON_TRUNCATION, DataSettings
from lcsb_core.training.config import (
    LORA_ALPHA_RANGE,
    LORA_TARGETS_ALL,
    QUANTIZATIONS,
    LoraSettings,
    ModelSettings,
    TrainConfig,
)
from lcsb_core.training.default_schedule import AUTO, MIN_SWITCH_STEPS, PROBE_STEPS, SWITCH_TO
from lcsb_core.training.schedules import (
    DEFAULT_DEEP_FRACTION,
    DEFAULT_FRACTION,
    DEFAULT_FULL_EVERY,
    LAYER_LR_SCALINGS,
    SCHEDULES,
    LCSBSettings,
)
from lcsb_service.hyperparameters import METHOD_TYPES, SUPERVISED
from lcsb_service.ids import unix
from lcsb_service.models import Job
from lcsb_service.status import JobStatus

# Every training setting defaults to None (left out): the trainer's `TrainConfig` is the one home of the
# defaults, which the descriptions below read from it (the hyperparameter sections: api.schemas.hyperparameters).


class LoraMethod(BaseModel):
    """LoRA: rank r, alpha (scale alpha/r), dropout on the adapter input, projections to adapt."""

    model_config = Strict
    rank: int | None = Field(default=None, ge=1, le=1024, description=f"LoRA rank r (default {LoraSettings.rank})")
    alpha: float | None = Field(default=None, ge=LORA_ALPHA_RANGE[0], le=LORA_ALPHA_RANGE[1],
                                description=f"scale alpha/r, in [{LORA_ALPHA_RANGE[0]:g}, {LORA_ALPHA_RANGE[1]:g}] "
                                            f"(default {LoraSettings.alpha:g})")
    dropout: float | None = Field(default=None, ge=0, lt=1,
                                  description=f"dropout on the adapter input (default {LoraSettings.dropout:g})")
    target_modules: list[Literal[LORA_TARGETS_ALL]] | None = Field(  # type: ignore[valid-type]
        default=None, min_length=1, max_length=7,
        description=f"projections to adapt (default all: {', '.join(LoraSettings.target_modules)})")


class LCSBMethod(BaseModel):
    """Selective backprop: the schedule (`auto`, the default: the model's schedule by the default rule;
    exact-gradient `top`, `topfull`, `tail`, `freeze`, `split`, the paper's surrogate-gradient LCSB
    `cyclic`, `random`, `importance`, and `full`; docs/training.md says what each means), `k` layers
    per step or a `fraction` of them, `full_every` (`topfull`: a full backward every N-th step, N >= 2),
    momentum updates of untrained layers, gradient checkpointing. Unset fields take the trainer's defaults
    (`lcsb_core.training.config`), which the field descriptions read. This schema checks types and simple
    bounds (and `k` with `fraction`); the trainer's `LCSBSettings` checks the rest at creation
    (`lcsb_service.jobspec`)."""

    model_config = Strict
    schedule: Literal[(AUTO, *SCHEDULES)] | None = Field(  # type: ignore[valid-type]
        default=None, description="Which decoder layers train at each step "
        f"(default {AUTO}: chosen per job, the fastest schedule measured to keep 95 % of full backprop's gain: "
        f"on SmolLM2-135M, jobs of {MIN_SWITCH_STEPS} steps or more train all layers for {PROBE_STEPS} steps, then "
        f"{SWITCH_TO} when the lower layers carry little of the gradient; otherwise full backprop, or split when "
        "full backprop would not fit in memory; the job object's lcsb.auto states the choice and why). "
        "Exact gradient: top (the top k every step), topfull (top k, and all "
        "layers every full_every-th step), tail (every layer above a cut that moves down by k each step), freeze "
        "(cyclic blocks, others frozen but back-propagated), split (the top k on every example, all layers on "
        "deep_fraction of each step's examples), full (plain LoRA). The paper's LCSB with a surrogate "
        "gradient (layers above the block are identity in backward): cyclic, random, importance.")
    k: int | None = Field(default=None, ge=1, le=1024, description="Layers trained per step, at most the model's "
                          "decoder layers (num_layers in /v1/models); not with fraction, not with schedule full.")
    fraction: float | None = Field(default=None, gt=0, le=1, description="Layers per step as a fraction of the "
                                   f"decoder layers (default {DEFAULT_FRACTION:g}); not with k, not with schedule "
                                   "full.")
    full_every: int | None = Field(default=None, ge=2, le=1_000_000, description="topfull only: a full backward "
                                   f"every N-th step (default {DEFAULT_FULL_EVERY}); at most max_steps.")
    deep_fraction: float | None = Field(
        default=None, gt=0, lt=1, description="split only: the share of each step's examples back-propagated "
        f"through every layer (default {DEFAULT_DEEP_FRACTION:g})")
    layer_lr_scaling: Literal[LAYER_LR_SCALINGS] | None = Field(  # type: ignore[valid-type]
        default=None, description="frequency: each layer's learning rate divided by the share of step-examples "
        "that train it; sqrt: by its square root (not with full or importance); default "
        f"{LCSBSettings.layer_lr_scaling}")
    momentum_for_skipped: bool | None = Field(default=None, description=(
        "zero, not absent, gradients for the layers not trained at a step, so AdamW moves them by momentum "
        f"(default {str(LCSBSettings.momentum_for_skipped).lower()})"))
    gradient_checkpointing: bool | None = Field(default=None, description=(
        "recompute the trained layers' activations in backward (default "
        f"{str(LCSBSettings.gradient_checkpointing).lower()})"))
    recompute_deep: bool | None = Field(default=None, description=(
        "on steps that train more than k layers (topfull's full-depth steps, tail's deeper ones, split's deep "
        "pass), the layers below the top k recompute their activations in backward: the same gradients in less "
        "memory, more compute on those steps; not with gradient_checkpointing, not with a schedule that never "
        f"trains more than k layers (default {str(LCSBSettings.recompute_deep).lower()})"))

    @model_validator(mode="after")
    def _one_of(self) -> LCSBMethod:
        if self.k is not None and self.fraction is not None:
            raise ValueError("give k or fraction, not both")
        return self


class Method(BaseModel):
    """`type`: `supervised` (the default; hyperparameters in `supervised`) or `dpo` (preference pairs;
    hyperparameters, with `beta`, in `dpo`); the rest are this service's training settings, which apply
    to both (`lcsb_service.hyperparameters.method_type` refuses the other type's section)."""

    model_config = Strict
    type: Literal[METHOD_TYPES] = SUPERVISED  # type: ignore[valid-type]
    supervised: SupervisedMethod | None = None
    dpo: DPOMethod | None = Field(default=None, description="with type dpo: its hyperparameters (beta included)")
    lora: LoraMethod | None = None
    quantization: Literal[QUANTIZATIONS] | None = Field(  # type: ignore[valid-type]
        default=None, description=f"of the base model's weights (default {ModelSettings.quantization})")
    lcsb: LCSBMethod | None = None
    max_seq_len: int | None = Field(default=None, ge=16, le=131072, description=(
        f"tokens per example (default {DataSettings.max_seq_len}, at most the model's context_length)"))
    train_on_inputs: bool | None = Field(default=None, description=(
        f"loss on prompt tokens too (default {str(DataSettings.train_on_inputs).lower()}: assistant tokens only); "
        "not with type dpo, which scores the answers only"))
    group_by_length: bool | None = Field(default=None, description=(
        f"each epoch's shuffled batches hold examples (dpo: pairs) of similar length, so a step pads and "
        f"computes less (default: {str(GROUP_BY_LENGTH_DPO).lower()} for type dpo, false for supervised; "
        "transformers' group_by_length; not measured on supervised data)"))
    eval_every: int | None = Field(default=None, ge=0, le=10_000_000, description=(
        f"optimizer steps between evaluations (default {TrainConfig.eval_every}: at the end only)"))
    save_every: int | None = Field(default=None, ge=0, le=10_000_000, description=(
        f"optimizer steps between checkpoints (default {TrainConfig.save_every}: at the end only); the last "
        "step that ran is always a checkpoint, the list's last"))
    eval_at_start: bool | None = Field(default=None, description=(
        "measure the step-0 (\"before\") validation loss (default "
        f"{str(TrainConfig.eval_at_start).lower()}); it runs on the base model after the first step, so "
        "training starts at once; false saves that one pass over the validation file"))
    on_truncation: Literal[ON_TRUNCATION] | None = Field(  # type: ignore[valid-type]
        default=None, description=f"{' or '.join(ON_TRUNCATION)} (default {DataSettings.on_truncation}): what "
                                  "an example longer than max_seq_len does")
    eval: EvalMethod | None = Field(default=None, description="graded evaluation (default: none)")
    stop_on_divergence: bool | None = Field(default=None, description=(
        "fail the job with code `diverged` when training diverges without NaN (the mean train loss of "
        "the last 3 steps past 3x the first step's, or the eval loss past 1.25x its start); without it "
        "(the default) the job succeeds with a `diverged` warning"))
    select_checkpoint: SelectCheckpointMethod | None = Field(default=None, description=(
        "which evaluated adapter the job delivers: {\"mode\": \"best\", \"metric\": \"eval_loss\"} (default last)"))
    early_stopping: EarlyStoppingMethod | None = Field(default=None, description=(
        "{metric, patience, min_delta}: end the job early when the metric stops improving (default off)"))


NO_NUL = r"^[^\x00]*$"  # PostgreSQL text and JSONB cannot hold NUL characters
MetadataKey = Annotated[str, Field(min_length=1, max_length=64, pattern=NO_NUL)]
MetadataValue = Annotated[str, Field(max_length=512, pattern=NO_NUL)]


class JobCreate(BaseModel):
    """`POST /v1/fine_tuning/jobs`."""

    model_config = Strict
    model: str = Field(min_length=1, max_length=400, description=(
        "a base model (GET /v1/models), or one of your fine-tuned models (`fine_tuned_model`) or checkpoints "
        "(`fine_tuned_model_checkpoint`) of a succeeded job, to continue training it from its LoRA weights"))
    training_file: str = Field(min_length=1, max_length=64)
    validation_file: str | None = Field(default=None, max_length=64)
    seed: int | None = Field(default=None, ge=0, le=2**31 - 1)
    suffix: str | None = Field(default=None, max_length=64, pattern=r"^[A-Za-z0-9_.-]*$")
    metadata: dict[MetadataKey, MetadataValue] | None = Field(default=None, max_length=16)
    hyperparameters: Hyperparameters | None = None
    method: Method | None = None
    integrations: list[dict[str, Any]] | None = Field(default=None, max_length=0,
                                                      description="not supported: must be empty")


class JobError(BaseModel):
    code: str
    message: str
    param: str | None = None


class Progress(BaseModel):
    """Optimizer steps done / planned, the training process's peak memory (MiB) so far, last heartbeat."""

    steps_completed: int
    total_steps: int | None = Field(default=None, description=(
        "the run's real number of optimizer steps (examples, batch size, epochs, max_steps): from the "
        "upload's example count at creation, restated by the worker once the model's tokenizer has counted "
        "the usable examples (a .txt corpus: null until then)"))
    percent: float | None = None
    peak_memory_mib: float | None = None
    heartbeat_at: int | None = None


class JobObject(BaseModel):
    """OpenAI's `fine_tuning.job` plus `progress`, `memory_estimate` (MiB, by component) and `queue`."""

    id: str
    object: Literal["fine_tuning.job"] = "fine_tuning.job"
    created_at: int
    error: JobError | None = None
    fine_tuned_model: str | None = None
    finished_at: int | None = None
    hyperparameters: dict[str, Any]
    model: str = Field(description="the base model (for a continued job its root base, not the `ft:` id)")
    parent_model: str | None = Field(default=None, description=(
        "the `ft:` model or checkpoint id this job continued from (its LoRA weights were the start); null "
        "for a job trained from the base model"))
    parent_job_id: str | None = Field(default=None, description="the job that trained `parent_model`")
    organization_id: str
    result_files: list[str]
    seed: int
    status: JobStatus  # jobs start queued (files are validated at upload): OpenAI's validating_files never shows
    trained_tokens: int | None = None
    training_file: str
    validation_file: str | None = None
    estimated_finish: int | None = None
    integrations: list[dict[str, Any]] = Field(default_factory=list)
    metadata: dict[str, str] | None = None
    method: dict[str, Any]
    user_provided_suffix: str | None = None
    progress: Progress
    memory_estimate: dict[str, Any]
    queue: str
    warnings: list[dict[str, Any]] = Field(default_factory=list, description=(
        "what went wrong in a run that did not fail: `{code: \"diverged\", criterion, step, start, now, "
        "message}` when the train or eval loss diverged without NaN; `{code: \"setting_not_honoured\", param, "
        "total_steps, message}` when the worker found fewer usable examples than the upload, so a setting "
        "(e.g. method.save_every) needs more steps than the run has"))
    data_report: dict[str, Any] | None = Field(default=None, description=(
        "the worker's check of the datasets with the model's tokenizer, per file (`training_file`, "
        "`validation_file`): examples, usable, truncated and dropped (no target token left) with their "
        "lines, ignored keys, warnings; null until the job starts"))
    result: dict[str, Any] | None = Field(default=None, description=(
        "what a succeeded job delivered (null before): `selected_checkpoint` {mode (last | best), metric, step "
        "(the optimizer step whose adapter is fine_tuned_model), value (the metric there), "
        "fine_tuned_model_checkpoint (that step's checkpoint, when one was saved)}: what fine_tuned_model holds; "
        "`final_checkpoint` {step, fine_tuned_model_checkpoint}: the last step that ran, always saved as a "
        "checkpoint (another step than the selected one only with select_checkpoint best); `stopped_early` {step, "
        "reason, metric, best_step, best_value, patience, min_delta} or null; `steps` run and `planned_steps`"))

    @classmethod
    def of(cls, job: Job) -> JobObject:
        error = JobError(code=job.error_code, message=job.error_message or "", param=job.error_param) \
            if job.error_code else None
        percent = round(100 * job.steps_completed / job.total_steps, 1) if job.total_steps else None
        return cls(
            id=job.id, created_at=unix(job.created_at), error=error, fine_tuned_model=job.fine_tuned_model,
            finished_at=unix(job.finished_at), hyperparameters=job.hyperparameters, model=job.model,
            parent_model=job.parent_model, parent_job_id=job.parent_job_id,
            organization_id=job.owner_id, result_files=list(job.result_files or []), seed=job.seed,
            status=JobStatus(job.status),
            trained_tokens=job.trained_tokens, training_file=job.training_file, validation_file=job.validation_file,
            estimated_finish=unix(job.estimated_finish), metadata=job.metadata_, method=job.method,
            user_provided_suffix=job.suffix, memory_estimate=job.memory_estimate, queue=job.queue,
            data_report=job.data_report, warnings=list(job.warnings or []), result=job.result,
            progress=Progress(steps_completed=job.steps_completed, total_steps=job.total_steps, percent=percent,
                              peak_memory_mib=job.peak_memory_mib, heartbeat_at=unix(job.heartbeat_at)))

