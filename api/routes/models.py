"""`/v1/models`: the base models this installation can train and serve (with layer and parameter
counts and limits, read from each model folder's config.json; no torch), and the caller's fine-tuned
models and checkpoints (`lcsb_service.served_models`), which `DELETE` removes (404 afterwards)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path

from api.deps import OwnerDep, SessionDep, SettingsDep
from api.schemas.common import errors
from api.schemas.models import DeletedModelObject, FineTunedModelObject, ModelList, ModelObject
from lcsb_service.served_models import delete_served, find_served, list_served

router = APIRouter(prefix="/v1/models", tags=["models"])
ModelId = Annotated[str, Path(max_length=400)]


def _object(row: dict[str, Any]) -> ModelObject | FineTunedModelObject:
    return FineTunedModelObject(**row) if "job_id" in row else ModelObject(**row)


@router.get("", response_model=ModelList, responses=errors(401))
def models(owner: OwnerDep, settings: SettingsDep, session: SessionDep) -> ModelList:
    return ModelList(data=[_object(m) for m in list_served(session, owner.id, settings.resolved_model_dirs)])


@router.get("/{model}", response_model=ModelObject | FineTunedModelObject, responses=errors(401, 404))
def model(model: ModelId, owner: OwnerDep, settings: SettingsDep,
          session: SessionDep) -> ModelObject | FineTunedModelObject:
    return _object(find_served(session, owner.id, model, settings.resolved_model_dirs))


@router.delete("/{model}", response_model=DeletedModelObject, responses=errors(400, 401, 404))
def delete_model(model: ModelId, owner: OwnerDep, settings: SettingsDep, session: SessionDep) -> DeletedModelObject:
    """Delete one of your fine-tuned models or checkpoints: chat, completions and continued jobs answer
    404 for it afterwards; its job, artifacts and other checkpoints stay."""
    delete_served(session, owner.id, model, settings.resolved_model_dirs)
    return DeletedModelObject(id=model)
