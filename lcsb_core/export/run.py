"""Export a run folder's adapter (the final one, or a checkpoint's): the entry point of `lcsb export RUN_DIR`
and of the export worker.

    export_run(run_dir, run_dir / "export")                          # final adapter, default formats
    export_run(run_dir, out, formats=["merged-f16"], checkpoint_step=10)

The base model is the catalog model the run's `config.json` names (`model.name_or_path`), read from its
shipped GGUF (hash-checked; Gemma's is assembled from its chunk packages into a temporary folder); the
data format (which decides the chat template) is sniffed from the run's training file unless given.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from lcsb_core.errors import ExportError
from lcsb_core.export.base import BaseGGUF
from lcsb_core.export.bundle import ExportResult, export_adapter
from lcsb_core.export.templates import training_template
from lcsb_core.models.catalog import CATALOG, CatalogEntry, catalog_entry
from lcsb_core.run_files import RunFiles


def sniff_format(path: str) -> str | None:
    """The training file's format from its first valid line ("text" for a .txt corpus); torch-free
    (`lcsb_core.data.dataset.sniff_format` does the same but its module imports torch)."""
    from lcsb_core.data.formats import parse_record
    from lcsb_core.data.json_lines import RecordError
    from lcsb_core.data.limits import ValidationLimits
    from lcsb_core.data.reader import LineReader
    from lcsb_core.data.validator import TXT_SUFFIXES

    if path.lower().endswith(TXT_SUFFIXES):
        return "text"
    for line in LineReader(path, ValidationLimits()):
        if line.text is None:
            continue
        try:
            return parse_record(line.text).format
        except RecordError:
            continue
    return None


def run_entry(config: dict) -> CatalogEntry:
    """The catalog base of a run's `config.json` (`model.name_or_path`: a catalog name, hub id, or the
    imported folder, whose name is the catalog name).

    Raises:
        ExportError: the run's base is not a catalog model (only those have a shipped GGUF).
    """
    name = str((config.get("model") or {}).get("name_or_path", ""))
    entry = catalog_entry(name) or catalog_entry(Path(name).name)
    if entry is None:
        raise ExportError(f"the run's base model {name!r} is not a catalog model ({', '.join(CATALOG)}); "
                          "only those have a shipped GGUF to export for", field=None)
    return entry


def adapter_folder(run_dir: Path, checkpoint_step: int | None) -> Path:
    """`run_dir/adapter`, or the checkpoint folder of `checkpoint_step`.

    Raises:
        ExportError: no such adapter (field `checkpoint` for a missing step).
    """
    files = RunFiles(run_dir)
    folder = files.adapter if checkpoint_step is None else files.checkpoint_dir(checkpoint_step)
    if not (folder / "adapter_config.json").is_file():
        if checkpoint_step is None:
            raise ExportError(f"{run_dir} has no final adapter ({folder} is missing)", field=None)
        raise ExportError(f"{run_dir} has no checkpoint at step {checkpoint_step}", field="checkpoint")
    return folder


# lcsb_core.training.checkpoint.CHAT_TEMPLATE_FILE (that module imports torch)
SAVED_CHAT_TEMPLATE = "chat_template.jinja"


def read_config(run_dir: Path, checkpoint_step: int | None) -> tuple[dict, Path | None]:
    """(the run's config, None) from `run_dir/config.json` (a run folder, or a folder `lcsb jobs
    download` wrote); for a bare adapter folder (`adapter_config.json` in `run_dir` or in
    `run_dir/adapter`, no `config.json`), a config naming its PEFT `base_model_name_or_path`, and the
    adapter folder.

    Raises:
        ExportError: `run_dir` is none of these, its config.json is not JSON, or a checkpoint step is
            asked of a bare adapter folder (it holds none).
    """
    path = run_dir / "config.json"
    if path.is_file():
        try:
            return json.loads(path.read_text()), None
        except ValueError as exc:
            raise ExportError(f"{run_dir.name}/config.json is not JSON ({exc})", field=None) from None
    adapter = next((d for d in (run_dir, run_dir / "adapter") if (d / "adapter_config.json").is_file()), None)
    if adapter is None:
        raise ExportError(f"{run_dir.name} is not a run folder (no config.json) nor an adapter folder (no "
                          "adapter_config.json, here or in adapter/); give the folder `lcsb train` or `lcsb jobs "
                          "download` wrote", field=None)
    if checkpoint_step is not None:
        raise ExportError(f"{run_dir.name} is an adapter folder without checkpoints; export a checkpoint from "
                          "its run folder, or download it (lcsb jobs checkpoints JOB --download STEP) and export "
                          "that folder", field="checkpoint")
    try:
        base = json.loads((adapter / "adapter_config.json").read_text()).get("base_model_name_or_path")
    except ValueError as exc:
        raise ExportError(f"{adapter.name}/adapter_config.json is not JSON ({exc})", field=None) from None
    return {"model": {"name_or_path": base or ""}}, adapter


def export_run(run_dir: Path, out: Path, *, formats: list[str] | tuple[str, ...] | None = None,
               checkpoint_step: int | None = None, data_format: str | None = None,
               job_id: str | None = None, adapter_dir: Path | None = None) -> ExportResult:
    """Export a run's adapter (or `adapter_dir`, an adapter published elsewhere) into `out`.

    Raises:
        ExportError: see `bundle.export_adapter`, `run_entry`, `adapter_folder`; or the training
            file is gone and `data_format` was not given.
        ModelLoadError: the base model's package is missing or its GGUF hash differs.
    """
    from lcsb_core.models.gguf_import import model_cache_dir, shipped_gguf_path

    run_dir = Path(run_dir)
    config, adapter_only = read_config(run_dir, checkpoint_step)
    entry = run_entry(config)
    folder = adapter_dir or adapter_only or adapter_folder(run_dir, checkpoint_step)
    if data_format is None:
        train_file = str((config.get("data") or {}).get("train_file", ""))
        data_format = sniff_format(train_file) if train_file and Path(train_file).is_file() else None
        if data_format is None and (folder / SAVED_CHAT_TEMPLATE).is_file():
            data_format = "chat"   # the trainer saves its chat template beside a chat job's adapter only
        if data_format is None:
            raise ExportError(f"cannot tell the run's data format (training file {train_file!r} is not readable "
                              "and the adapter holds no chat template); give it "
                              "(--data-format chat|prompt_completion|text)", field=None)
    model_dir = model_cache_dir() / entry.name
    scratch = Path(out).parent if Path(out).parent.is_dir() else None
    with tempfile.TemporaryDirectory(prefix=".gguf-", dir=scratch) as tmp:
        base_gguf = shipped_gguf_path(entry, assemble_dir=Path(tmp))
        base = BaseGGUF.open(base_gguf)
        template = training_template(model_dir if model_dir.is_dir() else None, data_format,
                                     gguf_template=base.chat_template, adapter_dir=folder)
        return export_adapter(folder, Path(out), base_gguf=base_gguf, entry=entry, formats=formats,
                              chat_template=template, data_format=data_format, job_id=job_id,
                              checkpoint_step=checkpoint_step, base=base)
