"""What the supervisor hands the training child: one JSON file (mode 0600) that `ChildSpec` writes and
reads, validated on both sides, so a field the child needs is never missing or of the wrong type.

    spec = ChildSpec(job_id=..., database_url=..., ...)
    spec.write(work / "spec.json")                      # the supervisor
    spec = ChildSpec.read(Path(argv[0]))                # the child: ChildSpecError names the bad field
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class ChildSpecError(ValueError):
    """The spec file is unreadable, not JSON, or a field is missing, unknown or of the wrong type; the
    message names the file and each bad field."""


class CageSpec(BaseModel):
    """The memory cage the child joins (`worker.limits.Cage.to_spec`, read by `worker.limits.enter_cage`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["cgroup-v1", "cgroup-v2", "rlimit", "cuda"]
    cap_mib: int = Field(gt=0)
    path: str | None = None                 # the cgroup's folder (cgroup kinds)
    address_space_bytes: int | None = None  # RLIMIT_AS (rlimit)

    def limits_spec(self) -> dict[str, Any]:
        """The plain dict `worker.limits.enter_cage` takes."""
        return self.model_dump()


class ChildSpec(BaseModel):
    """One job's training process: which job, where its records and files are, where it runs and writes
    its outcome, and its limits. Paths are absolute on the worker."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    job_id: str = Field(min_length=1)
    database_url: str = Field(min_length=1)
    storage_url: str = Field(min_length=1)
    model_dirs: tuple[str, ...]             # where installed base models are looked up
    run_dir: str                            # the trainer's output folder
    device: str                             # "cpu", "cuda", "cuda:1"
    cage: CageSpec
    parent_pid: int = Field(gt=0)           # the supervisor: the child exits when it is gone
    result_path: str                        # where the child writes its Outcome (JSON); its folder holds the inputs
    fine_tuned_model: str                   # the name the published adapters carry
    time_limit_s: float = Field(gt=0)       # for the timeout message (the supervisor enforces it)
    slot: int = Field(default=1, ge=1)      # which of the worker's job slots runs this job (1-based)
    slots: int = Field(default=1, ge=1)     # the worker's slots (`WorkerClass.max_concurrent_jobs`): jobs
                                            # that may run at once on it, sharing its cores or device

    @model_validator(mode="after")
    def _slot_in_range(self) -> ChildSpec:
        if self.slot > self.slots:
            raise ValueError(f"slot {self.slot} is not one of the worker's {self.slots} slots")
        return self

    @property
    def inputs_dir(self) -> Path:
        """The supervisor's work folder: the spec, the outcome and the links to the job's datasets."""
        return Path(self.result_path).parent

    def write(self, path: Path) -> None:
        """Write the spec as JSON, readable by its owner only (it holds the database URL)."""
        path.touch(mode=0o600)
        os.chmod(path, 0o600)
        path.write_text(self.model_dump_json())

    @classmethod
    def read(cls, path: Path) -> ChildSpec:
        """The spec in `path`.

        Raises:
            ChildSpecError: unreadable, not JSON, or a field missing, unknown or invalid (each named).
        """
        try:
            text = path.read_text()
        except OSError as exc:
            raise ChildSpecError(f"cannot read the training spec {path}: {exc}") from exc
        try:
            return cls.model_validate_json(text)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(file)'}: {e['msg']}" for e in exc.errors())
            raise ChildSpecError(f"invalid training spec {path}: {problems}") from exc
