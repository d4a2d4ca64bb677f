"""`/v1/files`: upload (multipart, streamed to storage with a size cap, validated), list, get, content,
delete."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Form, Query, UploadFile
from fastapi import File as FileParam
from fastapi.responses import StreamingResponse

from api.deps import FileDep, MetricsDep, OwnerDep, SessionDep, SettingsDep, StorageDep
from api.downloads import download
from api.pagination import AfterQuery, LimitQuery, page
from api.schemas.common import Page, errors
from api.schemas.files import FileDeleted, FileObject
from lcsb_service import files as file_service
from lcsb_service.errors import InvalidRequest
from lcsb_service.files import remove_file, store_upload

router = APIRouter(prefix="/v1/files", tags=["files"])


NOT_A_FILE_PART = ("file must be a file part with a filename, but a form text field was sent (or a part named "
                   "only by filename*, which is not supported); with curl use -F file=@train.jsonl, not "
                   "-F file=<train.jsonl")


@router.post("", response_model=FileObject, responses=errors(400, 401, 413))
def upload_file(file: Annotated[UploadFile | str, FileParam(description="a JSONL dataset (or .txt corpus)")],
                purpose: Annotated[str, Form(max_length=64)], session: SessionDep, owner: OwnerDep,
                storage: StorageDep, settings: SettingsDep, metrics: MetricsDep) -> FileObject:
    """Upload a dataset. Streamed to storage in chunks (413 past `LCSB_MAX_UPLOAD_BYTES`), hashed
    (SHA-256) and validated; a file that fails validation is kept with status `error` and its report.
    A text field in place of the file part is refused (400, `param: file`): declared `UploadFile | str`
    so that case reaches this function instead of FastAPI's generic type error."""
    if isinstance(file, str):
        raise InvalidRequest(NOT_A_FILE_PART, code="invalid_file", param="file")
    row = store_upload(session, storage, settings, owner_id=owner.id, filename=file.filename or "",
                       purpose=purpose, stream=file.file)
    metrics.upload_bytes.inc(row.bytes)
    return FileObject.of(row)


@router.get("", response_model=Page[FileObject], responses=errors(400, 401))
def list_files(session: SessionDep, owner: OwnerDep, limit: LimitQuery = 20, after: AfterQuery = None,
               order: Literal["asc", "desc"] = "desc",
               purpose: Annotated[str | None, Query(max_length=64)] = None) -> dict:
    """The caller's files, newest first by default."""
    rows, more = file_service.list_files(session, owner.id, purpose=purpose, after=after, limit=limit,
                                         descending=order == "desc")
    return page([FileObject.of(r) for r in rows], more)


@router.get("/{file_id}", response_model=FileObject, responses=errors(401, 404))
async def get_file(file: FileDep) -> FileObject:  # async: no I/O here, so no second thread hop
    return FileObject.of(file)


@router.get("/{file_id}/content", response_class=StreamingResponse, responses=errors(401, 404))
def file_content(file: FileDep, storage: StorageDep) -> StreamingResponse:
    """The file's bytes, streamed, named as uploaded (`Content-Disposition` with RFC 6266 `filename*`)."""
    return download(storage.iter_bytes(file.storage_key), size=file.bytes, media_type="application/octet-stream",
                    filename=file.filename or file.id, fallback=file.id)


@router.delete("/{file_id}", response_model=FileDeleted, responses=errors(401, 404, 409))
def delete_file(file: FileDep, session: SessionDep, storage: StorageDep) -> FileDeleted:
    """Delete a file; refused (409) while a queued or running job uses it."""
    remove_file(session, storage, file.id)
    return FileDeleted(id=file.id, deleted=True)
