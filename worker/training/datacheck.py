"""The worker's dataset check, before the model loads: validate and tokenize the job's files with the
base model's tokenizer (`lcsb_core.training.setup.load_datasets`, the same check `lcsb train` runs), then state
what training will see in the job's `data_report` and in a validation event: examples, how many are
used, examples truncated to `max_seq_len` and examples dropped for having no target token left (with
their lines), ignored keys and other warnings. Nothing is left out without being named.

    train, evals = check_datasets(cfg, db, job_id)     # raises DataError / ConfigError like load_datasets
"""

from __future__ import annotations

from typing import Any

from lcsb_core.data.report import ValidationReport
from lcsb_core.errors import DataError
from lcsb_service.db import Database
from lcsb_service.events import add_event
from lcsb_service.job_records import job_inputs, record_data_report
from lcsb_service.models import File
from lcsb_service.run_length import record_run_length

ROLES = ("training_file", "validation_file")


def _uploads(db: Database, job_id: str) -> dict[str, File]:
    with db.session() as s:
        return job_inputs(s, job_id).uploads()


def describe(role: str, upload: File, report: ValidationReport) -> str:
    """One event line: the file, its counts (its invalid lines first, with the first of them: the job is
    rejected), what truncation did (with lines), its warnings."""
    head = f"Checked {role.replace('_', ' ')} {upload.id} ({upload.filename}) with the model's tokenizer: "
    if report.invalid_examples or report.file_errors:
        return head + report.findings() + f" (max_seq_len {report.max_seq_len}); rejected"
    used = report.usable_examples if report.usable_examples is not None else report.valid_examples
    parts = [head + f"{report.valid_examples} examples, {used} used (max_seq_len {report.max_seq_len})"]
    parts += report.truncation_notes()
    parts += report.warnings
    return "; ".join(parts)


def rejected_lines_hint(report: ValidationReport) -> str:
    """What a user of the API can do about lines that passed the upload check but not the check with the
    model's tokenizer (in the service no line is ever left out: the core's `skip_invalid` is not offered).
    The only such lines today are preference pairs longer than `max_seq_len`."""
    hint = "rejected by the check with the model's tokenizer before training; a job trains on every line or none"
    if any("max_seq_len" in issue.message for issue in report.errors):
        hint += (f"; max_seq_len is the job's method.max_seq_len (now {report.max_seq_len}, at most the model's "
                 "context_length)")
    return hint


def public_report(report: ValidationReport, upload: File) -> dict[str, Any]:
    """The report as JSON, with the upload's name in place of the worker's path."""
    return {**report.to_dict(), "path": upload.filename, "file_id": upload.id}


def _record(db: Database, job_id: str, reports: dict[str, tuple[File, ValidationReport]]) -> None:
    data = {role: public_report(report, upload) for role, (upload, report) in reports.items()}
    with db.session() as s:
        record_data_report(s, job_id, data)
        for role, (upload, report) in reports.items():
            cut = report.truncated or report.dropped_no_target or report.warnings
            add_event(s, job_id, describe(role, upload, report), level="warn" if cut else "info",
                      data={"file": role, **data[role]})


def check_datasets(cfg, db: Database, job_id: str):  # TrainConfig, TokenizedDatasets
    """(train, eval or None) TokenizedDatasets for `cfg` (local paths), recorded on the job.

    Raises:
        DataError: a file fails the check (its report is recorded first; `err.field` names the file's
            request field).
        ConfigError: a cross-field rule is broken. ModelLoadError: no tokenizer for the model.
    """
    from lcsb_core.models.loading import load_tokenizer, resolve_model_path
    from lcsb_core.training.setup import load_datasets

    uploads = _uploads(db, job_id)
    tokenizer = load_tokenizer(resolve_model_path(cfg.model.name_or_path))
    try:
        train, evals = load_datasets(cfg, tokenizer)
    except DataError as exc:
        report = getattr(exc, "report", None)
        role = "validation_file" if report is not None and report.path == cfg.data.validation_file else "training_file"
        exc.field = role
        if report is not None and role in uploads:
            _record(db, job_id, {role: (uploads[role], report)})
        if report is not None and report.invalid_examples and not report.file_errors:
            public = DataError(f"{report.summary()} ({rejected_lines_hint(report)})")
            public.field, public.report = role, report  # type: ignore[attr-defined]
            raise public from exc
        raise
    found = {"training_file": train, "validation_file": evals}
    _record(db, job_id, {role: (uploads[role], found[role].report) for role in ROLES
                         if found[role] is not None and role in uploads})
    record_run_length(db, job_id, cfg, len(train.examples))  # the real step count; warns of unreachable settings
    return train, evals
