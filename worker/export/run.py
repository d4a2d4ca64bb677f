"""Make one job export's files (`TaskName.RUN_EXPORT`): claim it, fetch the job's adapter (final or a
checkpoint's) from storage, run `lcsb_core.export` against the catalog's shipped base GGUF, upload every
file under `jobs/<job>/exports/<export>/` and record them. Torch-free and in the task's own process:
a SmolLM2 export takes seconds (BENCHMARKS.md, "GGUF export"). A repeated delivery finds the export no
longer queued and does nothing. A failure ends the export `failed` with the code and message of
`worker.export.failures.classify` (adapter missing or damaged, base GGUF missing or not the catalog's,
what the format cannot hold, else `internal_error`).
"""

from __future__ import annotations

import gzip
import logging
import tarfile
import tempfile
import zlib
from pathlib import Path
from typing import Any

from lcsb_core.errors import AdapterError, AdapterMissingError, ExportError, LCSBError
from lcsb_core.export.base import BaseGGUF
from lcsb_core.export.bundle import export_adapter
from lcsb_core.export.formats import FILE_NAMES
from lcsb_core.export.templates import training_template
from lcsb_core.models.catalog import catalog_entry
from lcsb_core.models.gguf_import import model_cache_dir, shipped_gguf_path
from lcsb_service.artifacts import fetch_adapter
from lcsb_service.errors import NotFound
from lcsb_service.exports import checkpoint_key, claim_export, export_job, fail_export, finish_export
from lcsb_service.job_records import training_data_format
from lcsb_service.outputs import find_artifact
from lcsb_service.storage import Storage
from worker.context import WorkerContext
from worker.export.failures import classify

log = logging.getLogger(__name__)
_FORMAT_OF = {name: fmt for fmt, name in FILE_NAMES.items()}
# What a damaged archive raises while it is opened and extracted (tarfile, gzip, zlib), and
# `fetch_adapter`'s ValueError for an archive without one adapter folder.
_DAMAGED = (tarfile.TarError, gzip.BadGzipFile, zlib.error, EOFError, ValueError)


def run_export(ctx: WorkerContext, export_id: str) -> str:
    """Run the export `export_id` once: "succeeded", "failed" (its error recorded) or "skipped"."""
    with ctx.db.session() as s:
        if claim_export(s, export_id) is None or (found := export_job(s, export_id)) is None:
            return "skipped"
        export, job = found
        step, formats, job_id, model = export.checkpoint_step, list(export.formats), job.id, job.model
        if step is not None:
            key = checkpoint_key(s, job.id, step)
        else:
            try:
                key = find_artifact(s, job.id, "adapter.tar.gz").storage_key
            except NotFound:
                key = None
        data_format = training_data_format(job.data_report)
    entry = catalog_entry(model)
    try:
        with tempfile.TemporaryDirectory(prefix=f"{export_id}.") as tmp:
            files, manifest = _make(ctx.storage, Path(tmp), export_id=export_id, job_id=job_id, model=model,
                                    key=key, step=step, formats=formats, data_format=data_format)
    except Exception as exc:  # every failure ends the export `failed`, with a code
        failure = classify(exc, entry=entry, checkpoint_step=step)
        if failure.code == "internal_error":
            log.exception("export %s of job %s failed", export_id, job_id)
        else:
            log.warning("export %s of job %s failed (%s): %s: %s", export_id, job_id, failure.code,
                        type(exc).__name__, exc)
        with ctx.db.session() as s:
            fail_export(s, export_id, failure.code, failure.message)
        return "failed"
    with ctx.db.session() as s:
        finish_export(s, export_id, files=files, manifest=manifest)
    return "succeeded"


def _make(storage: Storage, tmp: Path, *, export_id: str, job_id: str, model: str, key: str | None,
          step: int | None, formats: list[str], data_format: str | None) -> tuple[list[dict[str, Any]], dict]:
    """The export's files, made in `tmp` and uploaded: (file entries for the row, the manifest).

    Raises:
        AdapterMissingError, AdapterError, BaseGGUFMissingError, BaseGGUFMismatchError, ExportError
            (see `worker.export.failures`); LCSBError: the job's record names no training data format.
    """
    entry = catalog_entry(model)
    if entry is None:
        raise ExportError(f"the base model {model!r} is not a catalog model with a shipped GGUF")
    if key is None:
        raise AdapterMissingError(f"job {job_id} has no adapter record" + (f" at step {step}" if step else ""))
    if data_format is None:
        raise LCSBError(f"job {job_id}'s record has no training data format")
    try:
        folder = fetch_adapter(storage, key, tmp / "adapter")
    except FileNotFoundError as exc:
        raise AdapterMissingError(f"the stored archive {key} is gone") from exc
    except _DAMAGED as exc:
        raise AdapterError("the stored archive is not a .tar.gz holding one adapter folder") from exc
    base = shipped_gguf_path(entry, assemble_dir=tmp)
    cached = model_cache_dir() / entry.name
    opened = BaseGGUF.open(base)
    template = training_template(cached if cached.is_dir() else None, data_format, gguf_template=opened.chat_template,
                                 adapter_dir=folder)
    result = export_adapter(folder, tmp / "out", base_gguf=base, entry=entry, formats=formats, chat_template=template,
                            data_format=data_format, job_id=job_id, checkpoint_step=step, base=opened)
    by_name = {f["file"]: f for f in result.manifest["files"]}
    files = []
    for path in [*result.files.values(), *result.extra]:
        stored = f"jobs/{job_id}/exports/{export_id}/{path.name}"
        size = storage.put_file(path, stored)
        facts = by_name.get(path.name, {})
        files.append({"name": path.name, "format": _FORMAT_OF.get(path.name), "bytes": size,
                      "sha256": facts.get("sha256"), "effect_kept": facts.get("effect_kept"),
                      "storage_key": stored})
    return files, result.manifest
