"""`/v1/models`: the base models this installation can train, with layer and parameter counts and
limits (read from each model folder's config.json; no torch)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from api.deps import OwnerDep, SettingsDep
from api.schemas.common import errors
from api.schemas.models import ModelList, ModelObject
from lcsb_service.catalog import find_model, list_models, model_object
from lcsb_service.errors import NotFound

router = APIRouter(prefix="/v1/models", tags=["models"])


@router.get("", response_model=ModelList, responses=errors(401))
def models(owner: OwnerDep, settings: SettingsDep) -> ModelList:
    return ModelList(data=[ModelObject(**model_object(m)) for m in list_models(settings.resolved_model_dirs)])


@router.get("/{model}", response_model=ModelObject, responses=errors(401, 404))
def model(model: Annotated[str, Path(max_length=200)], owner: OwnerDep, settings: SettingsDep) -> ModelObject:
    info = find_model(settings.resolved_model_dirs, model)
    if info is None:
        raise NotFound(f"no base model {model!r}", code="model_not_found", param="model")
    return ModelObject(**model_object(info))
