"""Downloading a job's outputs: choose artifacts by kind, stream them into a folder, unpack adapter
archives into PEFT folders (`adapter_config.json` + `adapter_model.safetensors`).

    written = download_outputs(svc, "ftjob-...", Path("out"), parse_what("adapter,metrics"))
    # out/adapter/adapter_config.json, out/adapter/adapter_model.safetensors, out/metrics.csv, ...
"""

from __future__ import annotations

import shutil
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from lcsb_client.errors import ClientError
from lcsb_client.service import Service

# --what names -> artifact kinds (as the service labels them, lcsb_service.artifacts)
WHAT_KINDS = {"adapter": "adapter", "selection_history": "selection_history", "metrics": "metrics",
              "plots": "plot", "summary": "summary", "config": "config", "eval_samples": "eval_samples"}
ADAPTER_ARCHIVE = "adapter.tar.gz"
Track = Callable[[str, int], Callable[[int], None]]  # (name, bytes) -> per-chunk callback


def parse_what(value: str) -> set[str] | None:
    """`adapter,metrics` -> the artifact kinds to fetch; `all` -> None (every artifact).

    Raises:
        ClientError: `invalid_value` for a name not in WHAT_KINDS.
    """
    names = {v.strip() for v in value.split(",") if v.strip()}
    if not names or "all" in names:
        return None
    unknown = sorted(names - set(WHAT_KINDS))
    if unknown:
        raise ClientError("invalid_value", f"unknown output {unknown[0]!r} (choose from "
                          f"{', '.join([*WHAT_KINDS, 'all'])})", "--what")
    return {WHAT_KINDS[n] for n in names}


def _safe_relative(name: str) -> Path:
    """An artifact name as a relative local path; refuses absolute names and `..`."""
    pure = PurePosixPath(name)
    if pure.is_absolute() or ".." in pure.parts or not pure.parts:
        raise ClientError("invalid_artifact", f"refusing to write artifact {name!r} outside the output folder")
    return Path(*pure.parts)


def _readable_member(info: tarfile.TarInfo, dest: str) -> tarfile.TarInfo:
    """tarfile's `data` filter, then files 0644 and folders 0755: the weights of an archive published
    before the service stored public modes (a 0600 safetensors) still extract readable by other users
    (a serving daemon, a container user)."""
    info = tarfile.data_filter(info, dest)
    return info.replace(mode=0o755 if info.isdir() else 0o644, deep=False)


def unpack_adapter(archive: Path, dest: Path) -> Path:
    """Unpack an adapter .tar.gz (one top folder: `adapter/` or `step-N/`) into `dest`, replacing
    what was there. Only plain files and folders inside the archive's folder are extracted (tarfile's
    `data` filter refuses links, devices and paths leaving it), files as 0644 and folders 0755."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".unpack-") as tmp:
        with tarfile.open(archive, "r:gz") as tar:
            try:
                tar.extractall(tmp, filter=_readable_member)
            except tarfile.FilterError as exc:
                raise ClientError("invalid_archive", f"{archive.name}: {exc}") from None
        tops = list(Path(tmp).iterdir())
        if dest.exists():
            shutil.rmtree(dest)
        if len(tops) == 1 and tops[0].is_dir():
            shutil.move(str(tops[0]), dest)
        else:  # files at the top: they form the folder
            dest.mkdir(parents=True)
            for top in tops:
                shutil.move(str(top), dest / top.name)
    return dest


def download_outputs(svc: Service, job_id: str, out_dir: Path, kinds: set[str] | None,
                     track: Track | None = None) -> list[Path]:
    """Download the job's artifacts of `kinds` (None: all) into `out_dir`; the adapter archive is
    unpacked to `out_dir/adapter/`. Returns the paths written (files, and the adapter folder).

    Raises:
        ClientError: `no_artifacts` when the job has none (yet) or none of those kinds; API errors.
    """
    artifacts = svc.list_artifacts(job_id)
    if not artifacts:
        status = svc.get_job(job_id).get("status")
        raise ClientError("no_artifacts", f"job {job_id} has no outputs to download (status {status}; outputs "
                          "appear when it has succeeded)")
    chosen = [a for a in artifacts if kinds is None or a["kind"] in kinds]
    if not chosen:
        have = ", ".join(sorted(a["name"] for a in artifacts))
        raise ClientError("no_artifacts", f"job {job_id} has no outputs of that kind (it has: {have})", "--what")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for artifact in chosen:
        name = artifact["name"]
        target = out_dir / _safe_relative(name)
        on_chunk = track(name, artifact.get("bytes") or 0) if track else None
        svc.download(svc.job_path(job_id, "artifacts", name), target, on_chunk)
        if name == ADAPTER_ARCHIVE:
            written.append(unpack_adapter(target, out_dir / "adapter"))
            target.unlink()
        else:
            written.append(target)
    return written


def download_checkpoint(svc: Service, job_id: str, checkpoint: dict, out_dir: Path,
                        track: Track | None = None) -> Path:
    """Download one checkpoint's adapter and unpack it to `out_dir/step-<N>/` (a PEFT folder)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    step = checkpoint["step_number"]
    archive = out_dir / f"step-{step}-adapter.tar.gz"
    on_chunk = track(archive.name, checkpoint.get("bytes") or 0) if track else None
    svc.download(svc.job_path(job_id, "checkpoints", checkpoint["id"], "adapter"), archive, on_chunk)
    try:
        return unpack_adapter(archive, out_dir / f"step-{step}")
    finally:
        archive.unlink(missing_ok=True)
