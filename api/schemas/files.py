"""File objects (OpenAI `file`) with the validation report and content hash."""

from __future__ import annotations

from typing import Any, Literal, cast

from pydantic import BaseModel

from lcsb_service.ids import unix
from lcsb_service.models import File

FileStatus = Literal["uploaded", "processed", "error"]


class FileObject(BaseModel):
    """An uploaded dataset or a job's result file. `status`: `processed` (valid) or `error` (see
    `status_details` and `validation.errors`); `validation` is the trainer core's report (structure
    only: token statistics are measured by the worker with the base model's tokenizer)."""

    id: str
    object: Literal["file"] = "file"
    bytes: int
    created_at: int
    filename: str
    purpose: str
    status: FileStatus
    status_details: str | None = None
    expires_at: int | None = None
    sha256: str
    validation: dict[str, Any] | None = None

    @classmethod
    def of(cls, row: File) -> FileObject:
        return cls(id=row.id, bytes=row.bytes, created_at=unix(row.created_at), filename=row.filename,
                   purpose=row.purpose, status=cast(FileStatus, row.status), status_details=row.status_details,
                   sha256=row.sha256,
                   validation=row.validation)


class FileDeleted(BaseModel):
    id: str
    object: Literal["file"] = "file"
    deleted: bool
