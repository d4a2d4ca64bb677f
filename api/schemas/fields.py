"""Where each field of the job request lives, so that a field sent in the wrong section is answered with
the place it belongs (`api.errors`)."""

from __future__ import annotations

from typing import Any, get_args

from pydantic import BaseModel

from api.schemas.jobs import JobCreate


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds (`Method | None` -> [Method])."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]


def request_field_paths(model: type[BaseModel] = JobCreate, prefix: str = "") -> dict[str, list[str]]:
    """Each field name of the job request -> the dotted paths where it lives (`warmup_steps` ->
    [`hyperparameters.warmup_steps`]), so an unknown field can be answered with where it belongs."""
    paths: dict[str, list[str]] = {}
    for name, field in model.model_fields.items():
        key = field.alias or name
        paths.setdefault(key, []).append(prefix + key)
        for sub in _models_in(field.annotation):
            for inner, found in request_field_paths(sub, f"{prefix}{key}.").items():
                paths.setdefault(inner, []).extend(found)
    return paths
