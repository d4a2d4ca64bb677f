"""Publish a run's outputs (the trainer's run folder, see `lcsb_core.run_files`) to storage and record
them, for the worker (and for tests standing in for it). Nothing here commits.

    publish_checkpoint(session, storage, job_id=..., step=200, folder=run/"checkpoints/step-000200",
                       fine_tuned_model="ft:...", metrics={"step": 200, "train_loss": 1.1})
    result_files = publish_run(session, storage, job_id=..., owner_id=..., run_dir=run)
    folder = fetch_adapter(storage, "jobs/<id>/adapter.tar.gz", work / "init_adapter")   # a continued job's start

Adapters are stored as `.tar.gz` of the PEFT folder (adapter_config.json + adapter_model.safetensors, and a
chat job's chat_template.jinja;
a checkpoint's optimizer/RNG state `trainer_state.pt` is left out). Every member is stored readable by
all (files 0644, folders 0755, owner root, no user or group names), whatever the worker's umask and the
files' modes on disk (the trainer's safetensors may be 0600): a serving daemon or container user
extracting it as another user must be able to read the weights. Each file of a run becomes an
`Artifact` row named by its path in the run folder.
"""

from __future__ import annotations

import gzip
import json
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from sqlalchemy import delete
from sqlalchemy.orm import Session

from lcsb_core.run_files import RunFiles
from lcsb_service.files import register_result_file
from lcsb_service.ids import new_id, utcnow
from lcsb_service.models import Artifact, Checkpoint
from lcsb_service.scrub import scrub_paths, scrub_text
from lcsb_service.storage import Storage

EXCLUDED = {"trainer_state.pt"}
CONTENT_TYPES = {".gz": "application/gzip", ".jsonl": "application/x-ndjson", ".csv": "text/csv",
                 ".json": "application/json", ".png": "image/png"}
_LAYOUT = RunFiles(".")  # the trainer's names for the files of a run folder
RUN_FILES = {path.name: kind for path, kind in (   # file name -> artifact kind
    (_LAYOUT.history, "selection_history"), (_LAYOUT.metrics_csv, "metrics"), (_LAYOUT.metrics, "metrics"),
    (_LAYOUT.summary, "summary"), (_LAYOUT.config, "config"), (_LAYOUT.eval_samples, "eval_samples"))}


FILE_MODE, DIR_MODE = 0o644, 0o755  # of every archive member


def public_member(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """A tar member as published: 0644 (a folder 0755), owned by uid/gid 0 with no names, whatever it
    had on disk (a `tarfile.add` filter)."""
    return info.replace(mode=DIR_MODE if info.isdir() else FILE_MODE, uid=0, gid=0, uname="", gname="",
                        deep=False)


def _archive(folder: Path, key: str, storage: Storage, arcname: str = "adapter") -> int:
    """Store `folder` (minus EXCLUDED) as a gzipped tar under `key`, its folders included so they
    extract as 0755 too (`public_member`); returns its size in bytes."""
    with tempfile.NamedTemporaryFile(suffix=".tar.gz") as tmp:
        # gzip records the name of the file it writes; give it none (not the worker's temporary file)
        with gzip.GzipFile(filename="", mode="wb", fileobj=tmp) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
            tar.add(folder, arcname=arcname, recursive=False, filter=public_member)
            for path in sorted(folder.rglob("*")):
                if (path.is_dir() or path.is_file()) and path.name not in EXCLUDED:
                    tar.add(path, arcname=f"{arcname}/{path.relative_to(folder).as_posix()}", recursive=False,
                            filter=public_member)
        tmp.flush()
        return storage.put_file(tmp.name, key)


def fetch_adapter(storage: Storage, key: str, dest: str | Path) -> Path:
    """Extract the adapter archive stored under `key` (one PEFT folder, as `_archive` writes it) into
    `dest`; returns the adapter's folder (`dest/<its one top folder>`). Members are extracted with
    tarfile's `data` filter (no absolute paths, links out of `dest` or special files).

    Raises:
        ValueError: the archive does not hold exactly one top folder with `adapter_config.json`.
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    with storage.local_copy(key) as local, tarfile.open(local, mode="r:gz") as tar:
        tops = {Path(m.name).parts[0] for m in tar.getmembers()}
        tar.extractall(dest, filter="data")
    folder = dest / next(iter(tops)) if len(tops) == 1 else None
    if folder is None or not (folder / "adapter_config.json").is_file():
        raise ValueError(f"{key} holds no single adapter folder")
    return folder


def publish_checkpoint(session: Session, storage: Storage, *, job_id: str, step: int, folder: str | Path,
                       fine_tuned_model: str, metrics: dict[str, Any] | None = None) -> Checkpoint:
    """Upload a checkpoint's adapter and add its `Checkpoint` row (OpenAI `fine_tuning.job.checkpoint`);
    `fine_tuned_model` is the job's final adapter name, suffixed here with `:ckpt-step-<N>`."""
    key = f"jobs/{job_id}/checkpoints/step-{step:06d}/adapter.tar.gz"
    size = _archive(Path(folder), key, storage, arcname=f"step-{step}")
    row = Checkpoint(id=new_id("ftckpt"), job_id=job_id, step_number=step, metrics=metrics,
                     fine_tuned_model_checkpoint=f"{fine_tuned_model}:ckpt-step-{step}", storage_key=key,
                     bytes=size, created_at=utcnow())
    session.add(row)
    session.flush()
    return row


def _add_artifact(session: Session, job_id: str, name: str, kind: str, key: str, size: int) -> Artifact:
    session.execute(delete(Artifact).where(Artifact.job_id == job_id, Artifact.name == name))
    row = Artifact(job_id=job_id, name=name, kind=kind, storage_key=key, bytes=size, created_at=utcnow(),
                   content_type=CONTENT_TYPES.get(Path(name).suffix, "application/octet-stream"))
    session.add(row)
    return row


def _put_public_json(path: Path, key: str, storage: Storage, public_paths: dict[str, str]) -> int:
    """Store a run's JSON file with its local paths scrubbed (`scrub.scrub_paths`; a file that is not
    JSON is scrubbed as text); returns its size."""
    prefixes = {str(run): "" for run in (path.parent, path.parent.resolve())} | public_paths
    text = path.read_text()
    try:
        text = json.dumps(scrub_paths(json.loads(text), prefixes), indent=2) + "\n"
    except ValueError:
        text = scrub_text(text, prefixes)
    with tempfile.NamedTemporaryFile("w", suffix=".json") as tmp:
        tmp.write(text)
        tmp.flush()
        return storage.put_file(tmp.name, key)


def publish_run(session: Session, storage: Storage, *, job_id: str, owner_id: str, run_dir: str | Path,
                public_paths: dict[str, str] | None = None) -> list[str]:
    """Upload a finished run's adapter, selection history, metrics, summary, config, plots and every
    graded evaluation's answers (`eval_samples/step-<N>.jsonl`) as artifacts; register `metrics.csv`
    as a result file. Returns the result file ids (for `finish`).

    The JSON files name no worker path: paths under the run folder become relative to it, paths under
    a folder of `public_paths` (local folder -> public name, "" to drop it) are renamed, any other
    absolute path is cut to its last component."""
    run, files = Path(run_dir), RunFiles(run_dir)
    prefix = f"jobs/{job_id}"
    if files.adapter.is_dir():
        size = _archive(files.adapter, f"{prefix}/adapter.tar.gz", storage)
        _add_artifact(session, job_id, "adapter.tar.gz", "adapter", f"{prefix}/adapter.tar.gz", size)
    for name, kind in RUN_FILES.items():
        if (run / name).is_file():
            key = f"{prefix}/{name}"
            size = (_put_public_json(run / name, key, storage, public_paths or {}) if name.endswith(".json")
                    else storage.put_file(run / name, key))
            _add_artifact(session, job_id, name, kind, key, size)
    for plot in sorted(files.plots.glob("*.png")) if files.plots.is_dir() else []:
        name = f"plots/{plot.name}"
        _add_artifact(session, job_id, name, "plot", f"{prefix}/{name}", storage.put_file(plot, f"{prefix}/{name}"))
    samples = files.eval_samples_dir
    for step_file in sorted(samples.glob("step-*.jsonl")) if samples.is_dir() else []:
        name = f"{samples.name}/{step_file.name}"   # every evaluation's answers, the base's at step 0
        _add_artifact(session, job_id, name, "eval_samples", f"{prefix}/{name}",
                      storage.put_file(step_file, f"{prefix}/{name}"))
    session.flush()
    result_files = []
    if files.metrics_csv.is_file():
        result_files.append(register_result_file(session, storage, owner_id=owner_id, job_id=job_id,
                                                 local_path=files.metrics_csv, filename=f"{job_id}-metrics.csv").id)
    return result_files
