"""A job's outputs: checkpoints (cursor pages, newest first) with their adapter as a .tar.gz, and the
run's artifacts (final adapter .tar.gz, selection history, metrics CSV/JSONL, summary, plots)."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Annotated

from fastapi import APIRouter, Path
from fastapi.responses import StreamingResponse

from api.deps import JobDep, SessionDep, StorageDep
from api.downloads import download
from api.pagination import AfterQuery, LimitQuery, page
from api.schemas.common import Page, errors
from api.schemas.events import ArtifactList, ArtifactObject, CheckpointObject
from lcsb_service import outputs
from lcsb_service.storage import Storage

router = APIRouter(prefix="/v1/fine_tuning/jobs/{fine_tuning_job_id}", tags=["fine-tuning"])


def _download(storage: Storage, key: str, size: int, media_type: str, filename: str) -> StreamingResponse:
    return download(storage.iter_bytes(key), size=size, media_type=media_type, filename=filename)


@router.get("/checkpoints", response_model=Page[CheckpointObject], responses=errors(400, 401, 404))
def list_checkpoints(job: JobDep, session: SessionDep, limit: LimitQuery = 10, after: AfterQuery = None) -> dict:
    """The job's checkpoints, latest step first."""
    rows, more = outputs.list_checkpoints(session, job.id, after=after, limit=limit)
    return page([CheckpointObject.of(r) for r in rows], more)


@router.get("/checkpoints/{checkpoint_id}/adapter", response_class=StreamingResponse,
            responses={**errors(401, 404), 200: {"content": {"application/gzip": {}}}})
def checkpoint_adapter(job: JobDep, checkpoint_id: Annotated[str, Path(max_length=64)], session: SessionDep,
                       storage: StorageDep) -> StreamingResponse:
    """The checkpoint's PEFT adapter (adapter_config.json + adapter_model.safetensors) as a .tar.gz."""
    row = outputs.find_checkpoint(session, job.id, checkpoint_id)
    return _download(storage, row.storage_key, row.bytes, "application/gzip",
                     f"{job.id}-step-{row.step_number}-adapter.tar.gz")


@router.get("/artifacts", response_model=ArtifactList, responses=errors(401, 404))
def list_artifacts(job: JobDep, session: SessionDep) -> ArtifactList:
    """The run's downloadable outputs (empty until the job succeeded)."""
    return ArtifactList(data=[ArtifactObject.of(r) for r in outputs.list_artifacts(session, job.id)])


@router.get("/artifacts/{name:path}", response_class=StreamingResponse, responses=errors(401, 404))
def download_artifact(job: JobDep, name: Annotated[str, Path(max_length=255)], session: SessionDep,
                      storage: StorageDep) -> StreamingResponse:
    """One artifact by name: `adapter.tar.gz` (the final PEFT adapter), `selection_history.jsonl`,
    `metrics.csv`, `metrics.jsonl`, `summary.json`, `config.json`, `plots/<name>.png`, and with graded
    evaluation `eval_samples.jsonl` (the last evaluation's prompts, references, base and final answers
    and the grades of both) and `eval_samples/step-<N>.jsonl` (each evaluation's, step 0 the base
    model's)."""
    row = outputs.find_artifact(session, job.id, name)
    return _download(storage, row.storage_key, row.bytes, row.content_type,
                     f"{job.id}-{PurePosixPath(name).name}")
