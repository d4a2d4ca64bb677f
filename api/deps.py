"""Typed dependencies: routes read like their signatures.

    def cancel(job: JobDep, session: SessionDep) -> JobObject: ...

`SessionDep` is the route's unit of work: committed when the route returns (before the response is
sent), rolled back on an error; actions registered with `db.after_commit` (sending a job to its queue,
deleting a stored object) run only after that commit. `OwnerDep` authenticates the bearer key (401).
`FileDep` / `JobDep` authenticate and load an object of the caller's in one step: a missing id and
another owner's id both answer 404.

Connections are never held while a request waits: FastAPI runs each sync dependency and the route in
its own worker-thread hop, so every hop that reads the database opens and closes its own short
session (`OwnerDep`, `FileDep`, `JobDep`: one hop and one read-only query each, the key checked in
the same query as the lookup; the route's `SessionDep` is used inside the
route's hop and committed without waiting for a thread). The objects they return are detached (loaded
columns stay readable). With at most `Settings.api_max_concurrency` requests admitted
(`api.admission`) and a pool sized for them (`Settings.db_pool_size`), a request never waits for a
connection that another request holds while it waits for a thread.
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
from lcsb_service.keys import owner_and_object, owner_for_key
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


CredentialsDep = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def get_owner(db: DatabaseDep, settings: SettingsDep, credentials: CredentialsDep) -> Owner:
    """The owner of the bearer key (read in a short session of its own). Raises AuthenticationFailed (401)."""
    with db.read_session() as session:
        return owner_for_key(session, settings.secret_key.get_secret_value(),
                             credentials.credentials if credentials else None)


OwnerDep = Annotated[Owner, Depends(get_owner)]


def _owned(db: Database, settings: Settings, credentials: HTTPAuthorizationCredentials | None, model: type,
           object_id: str):
    """The caller's row `object_id` of `model`, or None; the key is checked in the same query."""
    with db.read_session() as session:
        _, row = owner_and_object(session, settings.secret_key.get_secret_value(),
                                  credentials.credentials if credentials else None, model,
                                  object_id if looks_like_id(object_id) else None)
    return row


def get_file(file_id: Annotated[str, Path(max_length=64)], db: DatabaseDep, settings: SettingsDep,
             credentials: CredentialsDep) -> File:
    """The caller's file `file_id` (detached). Raises AuthenticationFailed (401); NotFound (404) for a
    missing or foreign id."""
    row = _owned(db, settings, credentials, File, file_id)
    if row is None:
        raise NotFound(f"no such file: {file_id}", code="file_not_found", param="file_id")
    return row


def get_job(fine_tuning_job_id: Annotated[str, Path(max_length=64)], db: DatabaseDep, settings: SettingsDep,
            credentials: CredentialsDep) -> Job:
    """The caller's job (detached). Raises AuthenticationFailed (401); NotFound (404) for a missing or
    foreign id."""
    job = _owned(db, settings, credentials, Job, fine_tuning_job_id)
    if job is None:
        raise NotFound(f"no such fine-tuning job: {fine_tuning_job_id}", code="job_not_found",
                       param="fine_tuning_job_id")
    return job


FileDep = Annotated[File, Depends(get_file)]
JobDep = Annotated[Job, Depends(get_job)]


def get_metrics(request: Request) -> ServiceMetrics:
    return request.app.state.metrics


MetricsDep = Annotated[ServiceMetrics, Depends(get_metrics)]
