"""Estimate a job before creating it: the same checks as `jobs.create_job` (model, files, every rule
of the trainer's config) and the core's pure-Python memory estimate with its worker-class routing,
without storing anything. The dashboard's create-job form shows it before submitting.

    estimate = estimate_job(session, settings, owner_id=..., request=body)   # {"memory_estimate", "queue", ...}
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from lcsb_service.hyperparameters import method_type
from lcsb_service.jobs import base_model, check_file_format, upload_examples, usable_file
from lcsb_service.jobspec import build_spec
from lcsb_service.lineage import find_parent, inherit_shape
from lcsb_service.settings import Settings

ESTIMATE_SEED = 0  # the seed changes nothing the estimate reads


def estimate_job(session: Session, settings: Settings, *, owner_id: str, request: dict[str, Any]) -> dict[str, Any]:
    """The memory estimate (MiB by component, the worker class's cap) and the queue a job with this
    create body would get, plus its resolved hyperparameters and method and its optimizer steps
    (`total_steps`, None for a `.txt` corpus until the worker tokenizes it).

    Raises:
        InvalidRequest: unknown model, unusable file, a file of another method's format (a chat file
            for a dpo job, preference pairs for a supervised one), a value the trainer refuses (400,
            `param` names the request field), as job creation does; NotFound and Conflict for an `ft:` model as there.
        Unprocessable: no worker class can hold the estimated peak (422, `insufficient_memory`).
    """
    parent = find_parent(session, owner_id, request["model"])
    body = inherit_shape(request, parent) if parent else request
    model = base_model(settings, body)
    train = usable_file(session, owner_id, request["training_file"], "training_file")
    kind = method_type(request)
    check_file_format(train, kind, "training_file")
    if request.get("validation_file"):
        check_file_format(usable_file(session, owner_id, request["validation_file"], "validation_file"), kind,
                          "validation_file")
    spec = build_spec({**body, "seed": request.get("seed", ESTIMATE_SEED)}, model, settings, "ftjob-estimate",
                      train_examples=upload_examples(train), init_adapter=parent.adapter_key if parent else None)
    return {"object": "fine_tuning.job.estimate", "model": model.name, "queue": spec.queue,
            "memory_estimate": spec.memory_estimate, "hyperparameters": spec.hyperparameters,
            "method": spec.method, "total_steps": spec.total_steps}
