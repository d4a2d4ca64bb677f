"""Dataset files: stream an upload into storage with a size cap, hash it, validate it with the trainer
core's validator, and record it; register result files written by a job.

Validation at upload is structural (no tokenizer: the API process loads no model and no torch): format,
roles, lines, duplicates, example count. Token statistics need the base model's tokenizer and chat
template, so the worker measures them (same validator, with the tokenizer) before training.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import BinaryIO

from sqlalchemy import exists, select
from sqlalchemy.orm import Session

from lcsb_core.data.limits import ValidationLimits
from lcsb_core.data.validator import validate_file
from lcsb_service.db import Database, after_commit
from lcsb_service.errors import Conflict, InvalidRequest, NotFound, PayloadTooLarge
from lcsb_service.ids import new_id, utcnow
from lcsb_service.models import File, Job
from lcsb_service.pagination import cursor_row, keyset_page
from lcsb_service.settings import Settings
from lcsb_service.status import TERMINAL_STATUSES
from lcsb_service.storage import Storage

FINE_TUNE, RESULTS = "fine-tune", "fine-tune-results"
PARTIAL_SUFFIX = ".partial"
log = logging.getLogger(__name__)
UPLOAD_SUFFIXES = (".jsonl", ".json", ".txt", ".text")


def _copy_capped(src: BinaryIO, storage: Storage, key: str, cap: int, chunk_bytes: int) -> tuple[int, str]:
    """Copy `src` to `key` in chunks; returns (bytes, sha256 hex). Removes the partial object and raises
    PayloadTooLarge once more than `cap` bytes were read."""
    digest, total = hashlib.sha256(), 0
    try:
        with storage.open(key, "wb") as dst:
            while chunk := src.read(chunk_bytes):
                total += len(chunk)
                if total > cap:
                    raise PayloadTooLarge(f"the file is larger than the upload limit of {cap:,} bytes", param="file")
                digest.update(chunk)
                dst.write(chunk)
    except BaseException:
        storage.delete(key)
        raise
    return total, digest.hexdigest()


def store_upload(session: Session, storage: Storage, settings: Settings, *, owner_id: str, filename: str,
                 purpose: str, stream: BinaryIO) -> File:
    """Stream an uploaded dataset to storage, validate it and add its row (flushed, not committed).

    The bytes go to `files/<id>.partial` and are renamed to `files/<id>` once complete and validated;
    a process killed before that leaves only a `.partial` object, and one killed between the rename and
    the commit an object with no row: `sweep_orphan_uploads` removes both.

    A file that fails validation is still stored, with status `error`, `status_details` naming the
    first bad lines, and the full report in `validation`; jobs refuse it.

    Raises:
        InvalidRequest: purpose other than `fine-tune`, or a file name without a dataset suffix.
        PayloadTooLarge: more than `settings.max_upload_bytes` bytes.
    """
    if purpose != FINE_TUNE:
        raise InvalidRequest(f"purpose must be '{FINE_TUNE}', got {purpose!r}", code="invalid_purpose",
                             param="purpose")
    name = Path(filename or "").name
    if not name or Path(name).suffix.lower() not in UPLOAD_SUFFIXES or not name.isprintable() or len(name) > 255:
        raise InvalidRequest(f"the file name must be printable, at most 255 characters, and end in one of "
                             f"{', '.join(UPLOAD_SUFFIXES)}; got {filename!r} (uploading bytes with the openai "
                             "client? pass a name with them: file=('train.jsonl', data))",
                             code="invalid_file_name", param="file")
    file_id = new_id("file")
    key, partial = f"files/{file_id}", f"files/{file_id}{PARTIAL_SUFFIX}"
    size, sha = _copy_capped(stream, storage, partial, settings.max_upload_bytes, settings.upload_chunk_bytes)
    # A file is judged on its lines here; the number of examples a job needs (`Settings.min_examples`) is
    # checked when a job is created from it (`jobs.check_example_count`), as OpenAI's API does.
    limits = ValidationLimits(max_bytes=settings.max_upload_bytes, min_examples=1)
    kind = "txt" if Path(name).suffix.lower() in (".txt", ".text") else "jsonl"
    try:
        with storage.local_copy(partial) as local:
            report = validate_file(local, limits=limits, file_type=kind)
        if report.ok and kind == "jsonl" and report.valid_examples < settings.min_examples:
            n = report.valid_examples
            report.warnings.append(f"{n} valid example{'' if n == 1 else 's'}: a fine-tuning job's training_file "
                                   f"needs at least {settings.min_examples} (a validation_file any number); add "
                                   "examples before training on this file")
        storage.rename(partial, key)
    except BaseException:
        storage.delete(partial)
        raise
    validation = report.to_dict()
    validation["path"] = name  # never expose the storage path
    row = File(id=file_id, owner_id=owner_id, filename=name, purpose=purpose, bytes=size, sha256=sha,
               status="processed" if report.ok else "error",
               status_details=None if report.ok else report.summary().replace(str(local), name),
               validation=validation, storage_key=key, created_at=utcnow())
    session.add(row)
    session.flush()
    return row


def register_result_file(session: Session, storage: Storage, *, owner_id: str, job_id: str,
                         local_path: str | Path, filename: str | None = None) -> File:
    """Store a job's result file (e.g. its metrics CSV) as an owner-visible file of purpose
    `fine-tune-results` (the job's `result_files`); flushed, not committed."""
    local_path = Path(local_path)
    file_id = new_id("file")
    key = f"jobs/{job_id}/results/{file_id}"
    digest = hashlib.sha256()
    with open(local_path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    size = storage.put_file(local_path, key)
    row = File(id=file_id, owner_id=owner_id, filename=filename or local_path.name, purpose=RESULTS, bytes=size,
               sha256=digest.hexdigest(), status="processed", storage_key=key, created_at=utcnow())
    session.add(row)
    session.flush()
    return row


def sweep_orphan_uploads(db: Database, storage: Storage, stale_after_s: float) -> list[str]:
    """Remove uploads left behind by a killed API process: `files/*.partial` objects and `files/<id>`
    objects with no file row, each only once it has not been written for `stale_after_s` seconds (an
    upload in progress in another API process keeps writing). Returns the removed keys. Storage or
    database errors are logged, not raised (the API starts anyway; the next start retries).
    """
    removed = []
    try:
        for key, age_s in storage.list_with_age("files"):
            if age_s < stale_after_s:
                continue
            name = key.rsplit("/", 1)[-1]
            if not name.endswith(PARTIAL_SUFFIX):
                with db.session() as s:
                    if s.scalar(select(File.id).where(File.storage_key == key)) is not None:
                        continue
            storage.delete(key)
            removed.append(key)
    except Exception:  # a sweep must not stop the API from starting
        log.warning("sweeping orphan uploads failed", exc_info=True)
    if removed:
        log.info("removed %d upload objects left by an interrupted upload", len(removed))
    return removed


def list_files(session: Session, owner_id: str, *, purpose: str | None = None, after: str | None = None,
               limit: int = 20, descending: bool = True) -> tuple[list[File], bool]:
    """The owner's files (of `purpose` when given), newest first unless not `descending`, after the file
    `after`. Returns (files, has_more).

    Raises:
        InvalidRequest: `after` is not one of the owner's files (`invalid_cursor`).
    """
    stmt = select(File).where(File.owner_id == owner_id)
    if purpose:
        stmt = stmt.where(File.purpose == purpose)
    cursor = None
    if after:
        anchor = cursor_row(session, File, after, owner_id=owner_id)
        cursor = (anchor.created_at, anchor.id)
    return keyset_page(session, stmt, sort=(File.created_at, File.id), cursor=cursor, limit=limit,
                       descending=descending)


def remove_file(session: Session, storage: Storage, file_id: str) -> None:
    """Delete the file's row; its stored object goes after the commit.

    Raises:
        Conflict: a queued or running job uses the file (`file_in_use`).
        NotFound: the row is gone (a concurrent delete got there first; `file_not_found`).
    """
    in_use = session.scalar(select(exists().where(
        (Job.training_file == file_id) | (Job.validation_file == file_id), Job.status.not_in(TERMINAL_STATUSES))))
    if in_use:
        raise Conflict(f"file {file_id} is used by a job that has not finished", code="file_in_use",
                       param="file_id")
    row = session.get(File, file_id)
    if row is None:
        raise NotFound(f"no such file: {file_id}", code="file_not_found", param="file_id")
    session.delete(row)
    key = row.storage_key
    after_commit(session, lambda: storage.delete(key))
