"""The models a caller can use for chat and completions: the catalog's bases, and the caller's own
fine-tuned models (a succeeded job's `fine_tuned_model`) and checkpoints (`...:ckpt-step-N`).

    target = resolve(session, owner_id, "ft:SmolLM2-135M-Instruct:alice::ftjob-abc", model_dirs)
    rows = list_served(session, owner_id, model_dirs)        # `model` objects, bases first
    delete_served(session, owner_id, model_id)               # 404 afterwards

Found by exact lookup with tenancy (`lcsb_service.lineage.find_parent`, the lookup a continued job
uses): unknown, another owner's, not yet succeeded, deleted, or naming another base: 404
`model_not_found`, never a fallback to another model.

Chat (`require_chat`): a model renders chat with the template it trained with. A base without a chat
template (Gemma-3-270M's) has none, and neither has a model whose job trained on prompt/completion or text
data: it learnt the raw prompt (`lcsb_core.data.tokenization`), so it answers `/v1/completions` with that
prompt, and chat is refused for it as for such a base (400 `model_has_no_chat_template` naming the model).
The one record of how a job trained is its data report (`job_records.training_data_format`), which serving
(API and inference worker) and exports read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from lcsb_core.data.formats import CHAT_TEMPLATE_FORMATS, PROMPT_COMPLETION
from lcsb_service.catalog import ModelInfo, find_model, list_models, model_object
from lcsb_service.errors import Conflict, InvalidRequest, NotFound
from lcsb_service.ids import unix, utcnow
from lcsb_service.lineage import FT_PREFIX, find_parent
from lcsb_service.models import Checkpoint, DeletedModel, Job, Owner
from lcsb_service.status import JobStatus


@dataclass(frozen=True)
class ServedModel:
    """What serves `model_id`: the base folder `base` (a catalog `ModelInfo`) and, for a fine-tuned
    model or checkpoint, the storage key of its adapter archive (`adapter_key`, a .tar.gz holding one
    PEFT folder), its job (`job_id`, `step`: None for the job's final adapter) and the format of the data
    the job trained on (`data_format`: `chat`, `preference` (rendered as chat too), `prompt_completion`,
    `text`; None for a base, or a job that recorded none)."""

    model_id: str
    base: ModelInfo
    adapter_key: str | None = None
    job_id: str | None = None
    step: int | None = None
    data_format: str | None = None

    def chat_refusal(self) -> str | None:
        """Why chat cannot be served with this model, naming it (None: it can): its base has no chat
        template, or its job trained on prompt/completion or text data, without a chat template."""
        if not self.base.has_chat_template:
            return (f"model {self.model_id!r} has no chat template (its base {self.base.name} has none); "
                    "use POST /v1/completions with a prompt")
        if self.data_format is not None and self.data_format not in CHAT_TEMPLATE_FORMATS:
            data = "prompt/completion" if self.data_format == PROMPT_COMPLETION else self.data_format
            return (f"model {self.model_id!r} has no chat template: job {self.job_id} trained it on {data} data, "
                    "on the raw prompt without a chat template; use POST /v1/completions with a prompt as it "
                    "trained on")
        return None


NO_CHAT_TEMPLATE = "model_has_no_chat_template"
"""The error code of chat with a model that has no chat template (`ServedModel.chat_refusal`)."""


def require_chat(target: ServedModel) -> None:
    """Refuse chat with `target` where it has no chat template (`ServedModel.chat_refusal`).

    Raises:
        InvalidRequest: 400 `model_has_no_chat_template`, param `model`.
    """
    why = target.chat_refusal()
    if why is not None:
        raise InvalidRequest(why, code=NO_CHAT_TEMPLATE, param="model")


def not_found(model_id: str) -> NotFound:
    """404 `model_not_found` naming `model_id` (the `openai` client's NotFoundError)."""
    return NotFound(f"The model {model_id!r} does not exist or you do not have access to it.",
                    code="model_not_found", param="model")


def resolve(session: Session, owner_id: str, model_id: str, model_dirs: list[Path]) -> ServedModel:
    """The base or the owner's fine-tuned model / checkpoint called exactly `model_id`.

    Raises:
        NotFound: `model_not_found` (unknown, another owner's, deleted, its job not succeeded).
    """
    if not model_id.startswith(FT_PREFIX):
        info = find_model(model_dirs, model_id)
        if info is None:
            raise not_found(model_id)
        return ServedModel(model_id, info)
    try:
        parent = find_parent(session, owner_id, model_id)
    except (NotFound, Conflict, InvalidRequest):
        raise not_found(model_id) from None
    info = find_model(model_dirs, parent.base_model) if parent is not None else None
    if parent is None or info is None:
        raise not_found(model_id)
    return ServedModel(model_id, info, parent.adapter_key, parent.job_id, parent.step, parent.data_format)


def list_served(session: Session, owner_id: str, model_dirs: list[Path]) -> list[dict[str, Any]]:
    """OpenAI `model` objects: the bases (`model_object`), then the owner's fine-tuned models (newest
    job first) each followed by its checkpoints (latest step first); deleted ones left out. A
    fine-tuned object has `owned_by` (the owner's name), `root` (its base), `parent` (the job's own
    parent model, if continued), `job_id` and `step`."""
    out = [model_object(m) for m in list_models(model_dirs)]
    deleted = set(session.execute(select(DeletedModel.model_id).where(DeletedModel.owner_id == owner_id)).scalars())
    rows = session.execute(select(Job, Owner.name).join(Owner, Owner.id == Job.owner_id)
                           .where(Job.owner_id == owner_id, Job.status == JobStatus.SUCCEEDED,
                                  Job.fine_tuned_model.is_not(None))
                           .order_by(Job.created_at.desc(), Job.id.desc())).all()
    ckpts: dict[str, list[Checkpoint]] = {}
    for c in session.execute(select(Checkpoint).where(Checkpoint.job_id.in_([j.id for j, _ in rows]))
                             .order_by(Checkpoint.step_number.desc())).scalars():
        ckpts.setdefault(c.job_id, []).append(c)
    for job, owner in rows:
        common = {"object": "model", "owned_by": owner, "root": job.model, "parent": job.parent_model,
                  "job_id": job.id}
        if job.fine_tuned_model not in deleted:
            out.append({"id": job.fine_tuned_model, "created": unix(job.finished_at or job.created_at),
                        "step": None, **common})
        out += [{"id": c.fine_tuned_model_checkpoint, "created": unix(c.created_at), "step": c.step_number, **common}
                for c in ckpts.get(job.id, []) if c.fine_tuned_model_checkpoint not in deleted]
    return out


def find_served(session: Session, owner_id: str, model_id: str, model_dirs: list[Path]) -> dict[str, Any]:
    """The `model` object of `model_id` as `list_served` shows it.

    Raises:
        NotFound: `model_not_found`.
    """
    target = resolve(session, owner_id, model_id, model_dirs)
    if target.job_id is None:
        return model_object(target.base)
    return next(m for m in list_served(session, owner_id, model_dirs) if m["id"] == model_id)


def delete_served(session: Session, owner_id: str, model_id: str, model_dirs: list[Path]) -> None:
    """Delete the owner's fine-tuned model or checkpoint `model_id` (its job and artifacts stay).

    Raises:
        NotFound: `model_not_found` (also once deleted).
        InvalidRequest: `model_id` is a base model (`model`, 400).
    """
    target = resolve(session, owner_id, model_id, model_dirs)
    if target.job_id is None:
        raise InvalidRequest(f"{model_id!r} is a base model; only your fine-tuned models and checkpoints can be "
                             "deleted", param="model")
    session.add(DeletedModel(model_id=model_id, owner_id=owner_id, job_id=target.job_id, deleted_at=utcnow()))
