"""A job's outputs as the API reads them: checkpoints (cursor pages, latest step first) and artifacts
(by name). The worker writes both (`lcsb_service.artifacts`).

    rows, has_more = list_checkpoints(session, job_id, after=None, limit=10)
    row = find_checkpoint(session, job_id, "ftckpt-...")       # NotFound when not this job's
    row = find_artifact(session, job_id, "adapter.tar.gz")
"""

from __future__ import annotations

import re

from sqlalchemy import select
from sqlalchemy.orm import Session

from lcsb_service.errors import NotFound
from lcsb_service.ids import looks_like_id
from lcsb_service.models import Artifact, Checkpoint
from lcsb_service.pagination import keyset_page, missing_cursor

_ARTIFACT_NAME = re.compile(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*")


def _checkpoint(session: Session, job_id: str, checkpoint_id: str) -> Checkpoint | None:
    if not looks_like_id(checkpoint_id):
        return None
    return session.execute(select(Checkpoint).where(Checkpoint.id == checkpoint_id, Checkpoint.job_id == job_id)
                           ).scalar_one_or_none()


def list_checkpoints(session: Session, job_id: str, *, after: str | None = None,
                     limit: int = 10) -> tuple[list[Checkpoint], bool]:
    """The job's checkpoints, latest step first, after the checkpoint `after`. Returns (rows, has_more).

    Raises:
        InvalidRequest: `after` is not a checkpoint of this job (`invalid_cursor`).
    """
    cursor = None
    if after:
        anchor = _checkpoint(session, job_id, after)
        if anchor is None:
            raise missing_cursor(after)
        cursor = (anchor.step_number,)
    return keyset_page(session, select(Checkpoint).where(Checkpoint.job_id == job_id),
                       sort=(Checkpoint.step_number,), cursor=cursor, limit=limit)


def find_checkpoint(session: Session, job_id: str, checkpoint_id: str) -> Checkpoint:
    """The job's checkpoint `checkpoint_id`.

    Raises:
        NotFound: the job has no such checkpoint (`checkpoint_not_found`).
    """
    row = _checkpoint(session, job_id, checkpoint_id)
    if row is None:
        raise NotFound(f"no checkpoint {checkpoint_id} in job {job_id}", code="checkpoint_not_found",
                       param="checkpoint_id")
    return row


def list_artifacts(session: Session, job_id: str) -> list[Artifact]:
    """The job's artifacts, by name (none until the job succeeded)."""
    return list(session.execute(select(Artifact).where(Artifact.job_id == job_id).order_by(Artifact.name)).scalars())


def find_artifact(session: Session, job_id: str, name: str) -> Artifact:
    """The job's artifact called `name` (e.g. `adapter.tar.gz`, `plots/loss.png`).

    Raises:
        NotFound: the job has no such artifact (`artifact_not_found`).
    """
    row = session.execute(select(Artifact).where(Artifact.job_id == job_id, Artifact.name == name)
                          ).scalar_one_or_none() if _ARTIFACT_NAME.fullmatch(name) else None
    if row is None:
        raise NotFound(f"no artifact {name!r} in job {job_id} (GET .../artifacts lists them)",
                       code="artifact_not_found", param="name")
    return row
