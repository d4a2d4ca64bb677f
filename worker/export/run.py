"""Make one job export's files (`TaskName.RUN_EXPORT`): claim it, fetch the job's adapter (final or a
checkpoint's) from storage, run `lcsb_core.export` against the catalog's shipped base GGUF, upload every
file under `jobs/<job>/exports/<export>/` and record them. Torch-free and in the task's own process:
a SmolLM2 export takes seconds (BENCHMARKS.md, "GGUF export"). A repeated delivery finds the export no
longer queued and does nothing.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from lcsb_core.errors import LCSBError
from lcsb_core.export.base import BaseGGUF
from lcsb_core.export.bundle import export_adapter
from lcsb_core.export.formats import FILE_NAMES
from lcsb_core.export.templates import training_template
from lcsb_core.models.catalog import catalog_entry
from lcsb_core.models.gguf_import import model_cache_dir, shipped_gguf_path
from lcsb_service.artifacts import fetch_adapter
from lcsb_service.exports import checkpoint_key, claim_export, export_job, fail_export, finish_export
from lcsb_service.job_records import training_data_format
from lcsb_service.outputs import find_artifact
from worker.context import WorkerContext

log = logging.getLogger(__name__)
_FORMAT_OF = {name: fmt for fmt, name in FILE_NAMES.items()}


def run_export(ctx: WorkerContext, export_id: str) -> str:
    """Run the export `export_id` once: "succeeded", "failed" (its error recorded) or "skipped"."""
    with ctx.db.session() as s:
        if claim_export(s, export_id) is None or (found := export_job(s, export_id)) is None:
            return "skipped"
        export, job = found
        step, formats, job_id, model = export.checkpoint_step, list(export.formats), job.id, job.model
        key = (checkpoint_key(s, job.id, step) if step is not None
               else find_artifact(s, job.id, "adapter.tar.gz").storage_key)
        data_format = training_data_format(job.data_report)
    try:
        entry = catalog_entry(model)
        if entry is None or key is None or data_format is None:
            raise LCSBError(f"job {job_id} has no catalog base, adapter or data format to export")
        with tempfile.TemporaryDirectory(prefix=f"{export_id}.") as tmp:
            folder = fetch_adapter(ctx.storage, key, Path(tmp) / "adapter")
            base = shipped_gguf_path(entry, assemble_dir=Path(tmp))
            cached = model_cache_dir() / entry.name
            opened = BaseGGUF.open(base)
            template = training_template(cached if cached.is_dir() else None, data_format,
                                         gguf_template=opened.chat_template)
            result = export_adapter(folder, Path(tmp) / "out", base_gguf=base, entry=entry, formats=formats,
                                    chat_template=template, data_format=data_format, job_id=job_id,
                                    checkpoint_step=step, base=opened)
            by_name = {f["file"]: f for f in result.manifest["files"]}
            files = []
            for path in [*result.files.values(), *result.extra]:
                stored = f"jobs/{job_id}/exports/{export_id}/{path.name}"
                size = ctx.storage.put_file(path, stored)
                facts = by_name.get(path.name, {})
                files.append({"name": path.name, "format": _FORMAT_OF.get(path.name), "bytes": size,
                              "sha256": facts.get("sha256"), "effect_kept": facts.get("effect_kept"),
                              "storage_key": stored})
    except LCSBError as exc:
        log.warning("export %s of job %s failed: %s", export_id, job_id, exc)
        with ctx.db.session() as s:
            fail_export(s, export_id, exc.code, str(exc))
        return "failed"
    except Exception:
        log.exception("export %s of job %s failed", export_id, job_id)
        with ctx.db.session() as s:
            fail_export(s, export_id, "internal_error", "the export failed on the worker; see its log")
        return "failed"
    with ctx.db.session() as s:
        finish_export(s, export_id, files=files, manifest=result.manifest)
    return "succeeded"
