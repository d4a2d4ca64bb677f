"""A job export (`fine_tuning.job.export`): GGUF files for llama.cpp and an Ollama bundle (issue 33)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from api.schemas.common import Strict
from lcsb_core.export.formats import DEFAULT_FORMATS, FORMATS
from lcsb_service.ids import unix
from lcsb_service.models import JobExport


class ExportCreate(BaseModel):
    """`formats`: any of `adapter` (adapter.gguf, llama.cpp's LoRA for the shipped base GGUF, f16),
    `merged-f16`, `merged-q8_0`, `merged-q4_1` (the base GGUF with the adapter merged into the adapted
    tensors; 4-bit keeps little of a short job's change, see each file's `effect_kept`); default
    adapter, merged-f16, merged-q8_0. `checkpoint_step`: export that checkpoint's adapter instead of
    the final one."""

    model_config = Strict
    formats: list[str] | None = Field(default=None, max_length=len(FORMATS),
                                      description=f"of {', '.join(FORMATS)}; default {', '.join(DEFAULT_FORMATS)}")
    checkpoint_step: int | None = Field(default=None, ge=1)


class ExportFile(BaseModel):
    """One file of a succeeded export; `effect_kept` (merged files): the share of the adapter's weight
    change the file keeps (1.0 = all)."""

    name: str
    format: str | None
    bytes: int
    sha256: str | None = None
    effect_kept: float | None = None
    download_url: str


class ExportErrorBody(BaseModel):
    code: str
    message: str


class ExportObject(BaseModel):
    """An export: `queued` -> `running` -> `succeeded` (files to download) or `failed` (`error`)."""

    object: Literal["fine_tuning.job.export"] = "fine_tuning.job.export"
    id: str
    job_id: str
    status: str
    formats: list[str]
    checkpoint_step: int | None
    files: list[ExportFile]
    manifest: dict[str, Any] | None
    error: ExportErrorBody | None
    created_at: int
    finished_at: int | None

    @classmethod
    def of(cls, row: JobExport) -> ExportObject:
        base = f"/v1/fine_tuning/jobs/{row.job_id}/exports/{row.id}/files"
        files = [ExportFile(name=f["name"], format=f.get("format"), bytes=f["bytes"], sha256=f.get("sha256"),
                            effect_kept=f.get("effect_kept"), download_url=f"{base}/{f['name']}") for f in row.files]
        error = ExportErrorBody(code=row.error_code, message=row.error_message or "") if row.error_code else None
        return cls(id=row.id, job_id=row.job_id, status=row.status, formats=list(row.formats),
                   checkpoint_step=row.checkpoint_step, files=files, manifest=row.manifest, error=error,
                   created_at=unix(row.created_at), finished_at=unix(row.finished_at))


class ExportList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ExportObject]
