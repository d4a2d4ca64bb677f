"""SQLAlchemy 2 models: the one schema shared by the API and the worker. The tables are created by the
Alembic migrations in `migrations/` only (never `create_all`).

    owners 1-n api_keys          keys are stored as HMAC-SHA256 hashes
    owners 1-n files             uploaded datasets and result files, with the validation report
    owners 1-n jobs 1-n job_events, checkpoints, artifacts

Object ids are public strings (`file-...`, `ftjob-...`); events and checkpoints also have an integer
`seq` that orders them (cursor pages, SSE ids). Times are timezone-aware UTC.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, DateTime, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from lcsb_service.ids import utcnow
from lcsb_service.status import JobStatus

JSONType = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")  # None -> SQL NULL
SeqType = BigInteger().with_variant(Integer(), "sqlite")  # SQLite autoincrements INTEGER PRIMARY KEY only
TZDateTime = DateTime(timezone=True)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSONType, list[Any]: JSONType, datetime: TZDateTime}


class Owner(Base):
    """A tenant: every file and job belongs to exactly one owner."""

    __tablename__ = "owners"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ApiKey(Base):
    """An API key: only `key_hash` (HMAC-SHA256 with the settings secret) and a display prefix are kept."""

    __tablename__ = "api_keys"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner_id: Mapped[str] = mapped_column(ForeignKey("owners.id", ondelete="CASCADE"), index=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(32))
    name: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None]


class File(Base):
    """An uploaded dataset (`purpose` fine-tune) or a job's result file (`fine-tune-results`)."""

    __tablename__ = "files"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner_id: Mapped[str] = mapped_column(ForeignKey("owners.id", ondelete="CASCADE"))
    filename: Mapped[str] = mapped_column(String(512))
    purpose: Mapped[str] = mapped_column(String(32))
    bytes: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16))          # processed | error
    status_details: Mapped[str | None] = mapped_column(Text)
    validation: Mapped[dict[str, Any] | None]
    storage_key: Mapped[str] = mapped_column(String(512))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    __table_args__ = (Index("ix_files_owner_created", "owner_id", "created_at", "id"),)


class Job(Base):
    """A fine-tuning job. `status` changes only through `lcsb_service.transitions`."""

    __tablename__ = "jobs"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner_id: Mapped[str] = mapped_column(ForeignKey("owners.id", ondelete="CASCADE"))
    model: Mapped[str] = mapped_column(String(200))
    training_file: Mapped[str] = mapped_column(String(64))
    validation_file: Mapped[str | None] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16), default=JobStatus.QUEUED, index=True)  # a JobStatus
    seed: Mapped[int] = mapped_column(BigInteger)
    suffix: Mapped[str | None] = mapped_column(String(64))
    metadata_: Mapped[dict[str, Any] | None] = mapped_column("metadata", JSONType)
    hyperparameters: Mapped[dict[str, Any]]
    method: Mapped[dict[str, Any]]
    train_config: Mapped[dict[str, Any]]       # TrainConfig.from_dict input; file ids in place of paths
    memory_estimate: Mapped[dict[str, Any]]
    data_report: Mapped[dict[str, Any] | None]  # the worker's dataset check with the model's tokenizer
    warnings: Mapped[list[Any] | None] = mapped_column(JSONType)  # e.g. a finite divergence (worker.training)
    result: Mapped[dict[str, Any] | None]      # a succeeded run's selected checkpoint and early stop (worker.training)
    queue: Mapped[str] = mapped_column(String(100))
    idempotency_key: Mapped[str | None] = mapped_column(String(255))
    request_hash: Mapped[str | None] = mapped_column(String(64))
    error_code: Mapped[str | None] = mapped_column(String(64))
    error_message: Mapped[str | None] = mapped_column(Text)
    error_param: Mapped[str | None] = mapped_column(String(200))
    trained_tokens: Mapped[int | None] = mapped_column(BigInteger)
    steps_completed: Mapped[int] = mapped_column(Integer, default=0)
    total_steps: Mapped[int | None] = mapped_column(Integer)
    peak_memory_mib: Mapped[float | None] = mapped_column(Float)
    estimated_finish: Mapped[datetime | None]
    fine_tuned_model: Mapped[str | None] = mapped_column(String(400))
    parent_model: Mapped[str | None] = mapped_column(String(400))   # the ft: or checkpoint id it continued from
    parent_job_id: Mapped[str | None] = mapped_column(String(64))   # that model's job (lcsb_service.lineage)
    result_files: Mapped[list[Any]] = mapped_column(JSONType, default=list)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    heartbeat_at: Mapped[datetime | None]
    __table_args__ = (
        UniqueConstraint("owner_id", "idempotency_key", name="uq_jobs_owner_idempotency_key"),
        Index("ix_jobs_owner_created", "owner_id", "created_at", "id"),
    )


class JobEvent(Base):
    """One event of a job (OpenAI `fine_tuning.job.event`): `type` message or metrics."""

    __tablename__ = "job_events"
    seq: Mapped[int] = mapped_column(SeqType, primary_key=True, autoincrement=True)
    id: Mapped[str] = mapped_column(String(64), unique=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    level: Mapped[str] = mapped_column(String(8), default="info")   # info | warn | error
    type: Mapped[str] = mapped_column(String(16), default="message")  # message | metrics
    message: Mapped[str] = mapped_column(Text)
    data: Mapped[dict[str, Any] | None]
    __table_args__ = (Index("ix_job_events_job_seq", "job_id", "seq"),)


class Checkpoint(Base):
    """A checkpoint written during training; `storage_key` holds a .tar.gz of its PEFT adapter."""

    __tablename__ = "checkpoints"
    seq: Mapped[int] = mapped_column(SeqType, primary_key=True, autoincrement=True)
    id: Mapped[str] = mapped_column(String(64), unique=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    step_number: Mapped[int] = mapped_column(Integer)
    metrics: Mapped[dict[str, Any] | None]
    fine_tuned_model_checkpoint: Mapped[str] = mapped_column(String(400))
    storage_key: Mapped[str] = mapped_column(String(512))
    bytes: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    __table_args__ = (UniqueConstraint("job_id", "step_number", name="uq_checkpoints_job_step"),)


class Artifact(Base):
    """A downloadable output of a finished run: `name` is its path in the run folder
    (`adapter.tar.gz`, `selection_history.jsonl`, `metrics.csv`, `summary.json`, `eval_samples.jsonl`,
    `plots/<x>.png`)."""

    __tablename__ = "artifacts"
    seq: Mapped[int] = mapped_column(SeqType, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(255))
    kind: Mapped[str] = mapped_column(String(32))
    content_type: Mapped[str] = mapped_column(String(100))
    storage_key: Mapped[str] = mapped_column(String(512))
    bytes: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    __table_args__ = (UniqueConstraint("job_id", "name", name="uq_artifacts_job_name"),)


class JobExport(Base):
    """An export of a succeeded job's adapter (final or a checkpoint's) to GGUF files and an Ollama bundle
    (`lcsb_core.export`). `status`: queued | running | succeeded | failed; `files`: one entry per file
    (`name`, `format`, `bytes`, `sha256`, `effect_kept`, `storage_key`); `manifest`: the export's
    manifest.json. `sent_at`: when its task was last sent to the queue; `started_at`: when a worker claimed
    it (the sweeper's clocks for a lost message and a lost worker)."""

    __tablename__ = "job_exports"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    status: Mapped[str] = mapped_column(String(16))
    formats: Mapped[list[Any]] = mapped_column(JSONType)
    checkpoint_step: Mapped[int | None] = mapped_column(Integer)
    files: Mapped[list[Any]] = mapped_column(JSONType, default=list)
    manifest: Mapped[dict[str, Any] | None]
    error_code: Mapped[str | None] = mapped_column(String(64))
    error_message: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    sent_at: Mapped[datetime | None]
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    __table_args__ = (Index("ix_job_exports_job_created", "job_id", "created_at"),)


class DeletedModel(Base):
    """A fine-tuned model or checkpoint id its owner deleted (`DELETE /v1/models/{id}`): served and
    continued from no more (404), while its job and artifacts stay."""

    __tablename__ = "deleted_models"
    model_id: Mapped[str] = mapped_column(String(400), primary_key=True)
    owner_id: Mapped[str] = mapped_column(ForeignKey("owners.id", ondelete="CASCADE"), primary_key=True)
    job_id: Mapped[str] = mapped_column(String(64))
    deleted_at: Mapped[datetime] = mapped_column(default=utcnow)
