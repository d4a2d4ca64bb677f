"""Typed dependencies: routes read like their signatures.

    def get_job(job: JobDep, session: SessionDep) -> JobObject: ...

`SessionDep` is the request's one unit of work: committed when the route returns (before the response
is sent), rolled back on an error; actions registered with `db.after_commit` (sending a job to its
queue, deleting a stored object) run only after that commit. `OwnerDep` authenticates the bearer key
(401). `FileDep` / `JobDep` load an object of the caller's: a missing id and another owner's id both
answer 404.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Path, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from api.metrics import ServiceMetrics
from lcsb_service.db import Database
from lcsb_service.enqueue import Enqueuer
from lcsb_service.errors import NotFound
from lcsb_service.ids import looks_like_id
from lcsb_service.keys import owner_for_key
from lcsb_service.models import File, Job, Owner
from lcsb_service.settings import Settings
from lcsb_service.storage import Storage

_bearer = HTTPBearer(auto_error=False, description="an API key: `Authorization: Bearer sk-lcsb-...`")


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_database(request: Request) -> Database:
    return request.app.state.db


def get_storage(request: Request) -> Storage:
    return request.app.state.storage


def get_enqueuer(request: Request) -> Enqueuer:
    return request.app.state.enqueuer


SettingsDep = Annotated[Settings, Depends(get_settings)]
DatabaseDep = Annotated[Database, Depends(get_database)]
StorageDep = Annotated[Storage, Depends(get_storage)]
EnqueuerDep = Annotated[Enqueuer, Depends(get_enqueuer)]


def get_session(db: DatabaseDep) -> Iterator[Session]:
    """The request's session: commit after the route, then run its after-commit actions
    (`Database.session`: rollback and discard them on an error)."""
    with db.session() as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session, scope="function")]


def get_owner(session: SessionDep, settings: SettingsDep,
              credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> Owner:
    """The owner of the bearer key. Raises AuthenticationFailed (401)."""
    key = credentials.credentials if credentials else None
    return owner_for_key(session, settings.secret_key.get_secret_value(), key)


OwnerDep = Annotated[Owner, Depends(get_owner)]


def get_file(file_id: Annotated[str, Path(max_length=64)], session: SessionDep, owner: OwnerDep) -> File:
    """The caller's file `file_id`. Raises NotFound (404) for a missing or foreign id."""
    row = session.get(File, file_id) if looks_like_id(file_id) else None
    if row is None or row.owner_id != owner.id:
        raise NotFound(f"no such file: {file_id}", code="file_not_found", param="file_id")
    return row


def get_job(fine_tuning_job_id: Annotated[str, Path(max_length=64)], session: SessionDep, owner: OwnerDep) -> Job:
    """The caller's job. Raises NotFound (404) for a missing or foreign id."""
    job = session.get(Job, fine_tuning_job_id) if looks_like_id(fine_tuning_job_id) else None
    if job is None or job.owner_id != owner.id:
        raise NotFound(f"no such fine-tuning job: {fine_tuning_job_id}", code="job_not_found",
                       param="fine_tuning_job_id")
    return job


FileDep = Annotated[File, Depends(get_file)]
JobDep = Annotated[Job, Depends(get_job)]


def get_metrics(request: Request) -> ServiceMetrics:
    return request.app.state.metrics


MetricsDep = Annotated[ServiceMetrics, Depends(get_metrics)]
