"""Base models (OpenAI `model` objects plus layer count, parameter count and limits) and health."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class ModelObject(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str
    num_layers: int
    num_parameters: int
    max_seq_len: int
    architectures: list[str]
    quantizations: list[str]
    hub_id: str  # the base a trained adapter names in adapter_config.json (base_model_name_or_path)
    context_length: int  # tokens (the same as max_seq_len)
    has_chat_template: bool  # False: chat (`messages`) files are refused at job creation for this model
    # shipped catalog models (lcsb_core.models.catalog); None for other model folders
    package: str | None = None  # the pinned PyPI package holding the GGUF file
    package_version: str | None = None
    gguf_file: str | None = None
    gguf_sha256: str | None = None
    license: str | None = None
    license_url: str | None = None


class FineTunedModelObject(BaseModel):
    """One of the caller's fine-tuned models (`step` None) or checkpoints, as chat and completions take it."""

    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str          # the owner's name
    root: str              # the base model
    parent: str | None     # the model its job continued from, if any
    job_id: str
    step: int | None       # the checkpoint's step; None for the job's final adapter


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelObject | FineTunedModelObject]


class DeletedModelObject(BaseModel):
    """OpenAI's answer to `DELETE /v1/models/{id}`."""

    id: str
    object: Literal["model"] = "model"
    deleted: Literal[True] = True


class Health(BaseModel):
    """`status` is `ok` when every check (database, broker, storage) is `ok`; a failed one is `error`
    (its reason is logged, not shown: the endpoint needs no key)."""

    status: Literal["ok", "unavailable"]
    checks: dict[str, Literal["ok", "error"]]
