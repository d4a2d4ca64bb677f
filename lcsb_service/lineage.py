"""Continue from a model: a job's `model` may be one of the owner's fine-tuned models (`ft:...:<job id>`,
a succeeded job's `fine_tuned_model`) or checkpoints (`...:ckpt-step-N`, a `fine_tuned_model_checkpoint`).

    parent = find_parent(session, owner_id, "ft:SmolLM2-135M-Instruct:alice::ftjob-abc")  # None for a base name
    request = inherit_shape(request, parent)      # the base model, LoRA shape and quantization of the parent

Found by exact lookup with tenancy: the job id at the end of the name is looked up among the owner's jobs
and the whole name must be that job's (its `fine_tuned_model`, or the name a checkpoint row records). An
unknown, deleted or another owner's name is 404 `model_not_found`, never a fallback. A job that has not
succeeded is 409 `model_not_ready`, its published checkpoints too: a running job's checkpoints are
not its result yet, and a failed or cancelled job's are what the issue asks to refuse (issue 34).

The new job trains the same base with the same quantization and LoRA shape (rank, alpha, target
modules): a request that gives another value is 400 naming the field; what it leaves out is the
parent's. It starts from the parent's LoRA weights with a fresh optimizer (`TrainConfig.init_adapter`;
published adapters hold no optimizer state, and OpenAI and Together start afresh too).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from lcsb_service.errors import Conflict, InvalidRequest, NotFound
from lcsb_service.job_records import training_data_format
from lcsb_service.jobspec import fine_tuned_model_name
from lcsb_service.models import Artifact, Checkpoint, DeletedModel, Job, Owner
from lcsb_service.status import JobStatus

FT_PREFIX = "ft:"
ADAPTER_ARTIFACT = "adapter.tar.gz"
_NAME = re.compile(r"ft:(?P<base>[^:]*):.*:(?P<job>ftjob-[A-Za-z0-9]{1,58})(?::ckpt-step-(?P<step>[0-9]{1,9}))?")


@dataclass(frozen=True)
class Parent:
    """A model a job continues from: `model_id` (the `ft:` or checkpoint id as requested), its job
    (`job_id`, `base_model` the root base, `train_config` the parent's trainer config), `step` (the
    checkpoint's step; None for the job's final adapter), `adapter_key` (the storage key of its
    adapter archive, `.tar.gz` of one PEFT folder) and `data_format`, the format of the data it trained on
    (`chat`, `prompt_completion`, `text`: the job record's data report, `job_records.training_data_format`;
    None where the job recorded none)."""

    model_id: str
    job_id: str
    base_model: str
    train_config: dict[str, Any]
    step: int | None
    adapter_key: str
    data_format: str | None = None

    def describe(self) -> str:
        """"checkpoint at step 4 of ftjob-..." or "final adapter of ftjob-..."."""
        what = f"checkpoint at step {self.step}" if self.step is not None else "final adapter"
        return f"{what} of {self.job_id}"


def _not_found(model_id: str) -> NotFound:
    return NotFound(f"model {model_id!r} is not one of your fine-tuned models or checkpoints",
                    code="model_not_found", param="model")


def find_parent(session: Session, owner_id: str, model_id: str) -> Parent | None:
    """The owner's fine-tuned model or checkpoint called `model_id`; None when `model_id` is no `ft:`
    name (a base model's name).

    Raises:
        NotFound: unknown, or another owner's (`model_not_found`, 404).
        InvalidRequest: the name's base is not the base its job trained (`model`, 400).
        Conflict: its job has not succeeded (`model_not_ready`, 409).
    """
    if not model_id.startswith(FT_PREFIX):
        return None
    match = _NAME.fullmatch(model_id)
    if match is None or is_deleted(session, owner_id, model_id):
        raise _not_found(model_id)
    found = session.execute(select(Job, Owner.name).join(Owner, Owner.id == Job.owner_id)
                            .where(Job.id == match["job"], Job.owner_id == owner_id)).first()
    if found is None:
        raise _not_found(model_id)
    job, owner = found
    if match["base"] != job.model:
        raise InvalidRequest(f"model {model_id!r} names base {match['base']!r}, but job {job.id} trained "
                             f"{job.model!r}: a continued job keeps its parent's base model", param="model")
    if match["step"] is not None:
        ckpt = session.execute(select(Checkpoint).where(Checkpoint.job_id == job.id,
                                                        Checkpoint.fine_tuned_model_checkpoint == model_id)
                               ).scalar_one_or_none()
        if ckpt is None:
            raise _not_found(model_id)
        _require_succeeded(job, model_id)
        return Parent(model_id, job.id, job.model, dict(job.train_config), ckpt.step_number, ckpt.storage_key,
                      training_data_format(job.data_report))
    if model_id != (job.fine_tuned_model or fine_tuned_model_name(job.model, owner, job.suffix, job.id)):
        raise _not_found(model_id)
    _require_succeeded(job, model_id)
    key = session.execute(select(Artifact.storage_key).where(Artifact.job_id == job.id,
                                                             Artifact.name == ADAPTER_ARTIFACT)).scalar_one_or_none()
    if key is None:
        raise Conflict(f"model {model_id!r}: job {job.id} has no adapter to continue from", code="model_not_ready",
                       param="model")
    return Parent(model_id, job.id, job.model, dict(job.train_config), None, key, training_data_format(job.data_report))


def is_deleted(session: Session, owner_id: str, model_id: str) -> bool:
    """Whether the owner deleted the model `model_id` (`DELETE /v1/models/{id}`)."""
    return session.get(DeletedModel, (model_id, owner_id)) is not None


def _require_succeeded(job: Job, model_id: str) -> None:
    if job.status != JobStatus.SUCCEEDED:
        raise Conflict(f"model {model_id!r}: its job {job.id} is {job.status}; only a succeeded job's model "
                       "and checkpoints can be continued", code="model_not_ready", param="model")


_SHAPE = (("rank", "method.lora.rank"), ("alpha", "method.lora.alpha"),
          ("target_modules", "method.lora.target_modules"))


def inherit_shape(request: dict[str, Any], parent: Parent) -> dict[str, Any]:
    """`request` with the parent's base model (`model`) and, where the request leaves them out, its
    LoRA rank, alpha, dropout, target modules and quantization (`method.*`).

    Raises:
        InvalidRequest: the request gives another rank, alpha, target modules or quantization (400,
            `param` names the field).
    """
    method = dict(request.get("method") or {})
    lora = {k: v for k, v in (method.get("lora") or {}).items() if v is not None}
    theirs = parent.train_config.get("lora") or {}
    for name, param in _SHAPE:
        given, had = lora.get(name), theirs.get(name)
        same = sorted(given) == sorted(had) if name == "target_modules" and given is not None and had else given == had
        if given is not None and not same:
            raise InvalidRequest(f"{param} is {given!r}, but {parent.model_id} has {had!r}: a continued job keeps "
                                 "its parent's LoRA shape (leave it out to inherit it)", param=param)
    quantization = (parent.train_config.get("model") or {}).get("quantization")
    if method.get("quantization") is not None and method["quantization"] != quantization:
        raise InvalidRequest(f"method.quantization is {method['quantization']!r}, but {parent.model_id} was trained "
                             f"on a {quantization!r} base: a continued job keeps it", param="method.quantization")
    inherited = {name: theirs[name] for name in ("rank", "alpha", "dropout", "target_modules") if name in theirs}
    method["lora"] = {**inherited, **lora}
    method["quantization"] = quantization
    return {**request, "model": parent.base_model, "method": method}
