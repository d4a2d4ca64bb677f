"""Job events, checkpoints and artifacts (OpenAI `fine_tuning.job.event` / `.checkpoint`, plus
`fine_tuning.job.artifact` for this service's downloads)."""

from __future__ import annotations

from typing import Any, Literal, cast

from pydantic import BaseModel

from lcsb_service.ids import unix
from lcsb_service.models import Artifact, Checkpoint, JobEvent

Level = Literal["info", "warn", "error"]        # lcsb_service.events.LEVELS
EventType = Literal["message", "metrics"]       # lcsb_service.events.TYPES


class EventObject(BaseModel):
    id: str
    object: Literal["fine_tuning.job.event"] = "fine_tuning.job.event"
    created_at: int
    level: Level
    message: str
    data: dict[str, Any] | None = None
    type: EventType = "message"

    @classmethod
    def of(cls, row: JobEvent) -> EventObject:
        return cls(id=row.id, created_at=unix(row.created_at), level=cast(Level, row.level), message=row.message,
                   data=row.data, type=cast(EventType, row.type))


class CheckpointObject(BaseModel):
    """A checkpoint; `download_url` serves its PEFT adapter as a .tar.gz."""

    id: str
    object: Literal["fine_tuning.job.checkpoint"] = "fine_tuning.job.checkpoint"
    created_at: int
    fine_tuned_model_checkpoint: str
    fine_tuning_job_id: str
    metrics: dict[str, Any]
    step_number: int
    bytes: int
    download_url: str

    @classmethod
    def of(cls, row: Checkpoint) -> CheckpointObject:
        return cls(id=row.id, created_at=unix(row.created_at),
                   fine_tuned_model_checkpoint=row.fine_tuned_model_checkpoint, fine_tuning_job_id=row.job_id,
                   metrics=row.metrics or {}, step_number=row.step_number, bytes=row.bytes,
                   download_url=f"/v1/fine_tuning/jobs/{row.job_id}/checkpoints/{row.id}/adapter")


class ArtifactObject(BaseModel):
    """A run output: `adapter.tar.gz`, `selection_history.jsonl`, `metrics.csv`, `plots/<name>.png`, ..."""

    object: Literal["fine_tuning.job.artifact"] = "fine_tuning.job.artifact"
    name: str
    kind: str
    content_type: str
    bytes: int
    created_at: int
    download_url: str

    @classmethod
    def of(cls, row: Artifact) -> ArtifactObject:
        return cls(name=row.name, kind=row.kind, content_type=row.content_type, bytes=row.bytes,
                   created_at=unix(row.created_at),
                   download_url=f"/v1/fine_tuning/jobs/{row.job_id}/artifacts/{row.name}")


class ArtifactList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ArtifactObject]
