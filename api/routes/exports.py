"""A job's exports to GGUF (llama.cpp) and Ollama: request (`POST`), list, status, and file downloads.
The files are made on an export worker (`worker.export`, `lcsb_core.export`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from fastapi.responses import StreamingResponse

from api.deps import EnqueuerDep, JobDep, SessionDep, SettingsDep, StorageDep
from api.downloads import download
from api.schemas.common import errors
from api.schemas.exports import ExportCreate, ExportList, ExportObject
from lcsb_service import exports

router = APIRouter(prefix="/v1/fine_tuning/jobs/{fine_tuning_job_id}/exports", tags=["fine-tuning"])
MEDIA = {".gguf": "application/octet-stream", ".json": "application/json", ".md": "text/markdown"}


@router.post("", response_model=ExportObject, responses=errors(400, 401, 404, 409))
def create(job: JobDep, body: ExportCreate, session: SessionDep, enqueuer: EnqueuerDep,
           settings: SettingsDep) -> ExportObject:
    """Export the job's adapter (or a checkpoint's) as GGUF files plus an Ollama Modelfile, README and
    manifest. 409 when the job has not succeeded; 400 naming an unknown format, or saying what a format
    cannot hold; 404 for a checkpoint step the job does not have. The export runs on an export worker: poll
    `GET .../exports/{export_id}` until `succeeded`."""
    return ExportObject.of(exports.request_export(session, enqueuer, job, formats=body.formats,
                                                  checkpoint_step=body.checkpoint_step,
                                                  queue=settings.export_queue))


@router.get("", response_model=ExportList, responses=errors(401, 404))
def list_exports(job: JobDep, session: SessionDep) -> ExportList:
    """The job's exports, newest first."""
    return ExportList(data=[ExportObject.of(r) for r in exports.list_exports(session, job.id)])


@router.get("/{export_id}", response_model=ExportObject, responses=errors(401, 404))
def get(job: JobDep, export_id: Annotated[str, Path(max_length=64)], session: SessionDep) -> ExportObject:
    """One export: its status, and when it succeeded its files (with download URLs) and manifest."""
    return ExportObject.of(exports.find_export(session, job.id, export_id))


@router.get("/{export_id}/files/{name}", response_class=StreamingResponse, responses=errors(401, 404))
def download_file(job: JobDep, export_id: Annotated[str, Path(max_length=64)],
                  name: Annotated[str, Path(max_length=64)], session: SessionDep,
                  storage: StorageDep) -> StreamingResponse:
    """One file of a succeeded export: `adapter.gguf`, `merged-f16.gguf`, `merged-q8_0.gguf`,
    `merged-q4_1.gguf`, `Modelfile`, `README.md`, `manifest.json`."""
    entry = exports.find_export_file(session, job.id, export_id, name)
    media = next((m for suffix, m in MEDIA.items() if name.endswith(suffix)), "text/plain")
    return download(storage.iter_bytes(entry["storage_key"]), size=entry["bytes"], media_type=media,
                    filename=name if name == "Modelfile" else f"{job.id}-{name}")
