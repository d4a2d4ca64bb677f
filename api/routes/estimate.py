"""`POST /v1/fine_tuning/jobs/estimate`: what a job with this create body would need (the core's memory
estimate) and which worker class would run it, checked like a create, nothing stored."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from api.deps import OwnerDep, SessionDep, SettingsDep
from api.schemas.common import errors
from api.schemas.jobs import JobCreate
from lcsb_service.estimates import estimate_job

router = APIRouter(prefix="/v1/fine_tuning/jobs", tags=["fine-tuning"])


class JobEstimate(BaseModel):
    """`memory_estimate`: MiB by component, `total_mib`, `required_mib` (with headroom) and the chosen
    class's `memory_cap_mib`; `queue`: that worker class; the resolved hyperparameters and method;
    `total_steps`: the run's optimizer steps."""

    object: str = "fine_tuning.job.estimate"
    model: str
    queue: str
    memory_estimate: dict[str, Any]
    hyperparameters: dict[str, Any]
    method: dict[str, Any]
    total_steps: int | None = Field(default=None, description=(
        "the run's optimizer steps, from the training file's examples, batch size, epochs and max_steps; "
        "null for a .txt corpus (its packed blocks are counted by the worker)"))


@router.post("/estimate", response_model=JobEstimate, responses=errors(400, 401, 404, 409, 422))
def estimate(body: JobCreate, session: SessionDep, owner: OwnerDep, settings: SettingsDep) -> JobEstimate:
    """The memory estimate and worker class of a job with this body (the body of `POST
    /v1/fine_tuning/jobs`), with the same 400 / 422 errors; creates nothing."""
    return JobEstimate(**estimate_job(session, settings, owner_id=owner.id,
                                      request=body.model_dump(mode="json", exclude_unset=True, exclude_none=True)))
