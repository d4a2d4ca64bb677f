"""Result files that describe themselves: every benchmark result written through `write_result` records
the commit it ran on (`git rev-parse HEAD` and whether the work tree had uncommitted changes), the
machine (CPU model, cores, memory, load average before and after: what else ran, as far as the kernel
says) and the run's full configuration, beside the result itself. The pattern of peft's
`method_comparison` result files (run_info / train_info / meta_info)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.common.paths import ROOT


def git_state(root: Path = ROOT) -> dict[str, Any]:
    """{"commit": HEAD's sha or None outside a git checkout, "dirty": True when tracked files differ
    from HEAD (uncommitted changes: the result may not be reproducible from the commit alone)}."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                check=True).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "dirty": None}
    return {"commit": commit, "dirty": bool(status.strip())}


def _proc_field(path: str, key: str) -> str | None:
    """The value of the first `key: value` line of a /proc file, or None (not Linux, no such line)."""
    try:
        for line in Path(path).read_text().splitlines():
            name, _, value = line.partition(":")
            if name.strip() == key:
                return value.strip()
    except OSError:
        return None
    return None


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def machine() -> dict[str, Any]:
    """The machine as far as this process can see it: CPU model, logical cores (all, and those this
    process may run on), memory (GiB), the 1/5/15-minute load averages (other work on the machine),
    OS, Python and the versions of torch, transformers, peft and bitsandbytes."""
    mem_kib = _proc_field("/proc/meminfo", "MemTotal")
    return {
        "cpu_model": _proc_field("/proc/cpuinfo", "model name") or platform.processor() or None,
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory_gib": round(int(mem_kib.split()[0]) / 2**20, 1) if mem_kib else None,
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "packages": {p: _version(p) for p in ("torch", "transformers", "peft", "bitsandbytes")},
    }


def run_info(started: datetime, command: list[str] | None = None) -> dict[str, Any]:
    """What `write_result` records besides the result and the config: git state, the machine (its
    load average read now, at the end), start and end time (UTC, ISO 8601) and the command line."""
    now = datetime.now(UTC)
    return {**git_state(), "machine": machine(), "started": started.isoformat(timespec="seconds"),
            "finished": now.isoformat(timespec="seconds"), "seconds": round((now - started).total_seconds(), 1),
            "command": command if command is not None else [sys.executable, *sys.argv]}


def write_result(path: Path, result: dict[str, Any] | list[Any], config: dict[str, Any], *, started: datetime,
                 load_before: list[float] | None = None, command: list[str] | None = None) -> Path:
    """Write `path` (JSON) atomically (a temporary file renamed into place, so a run killed while writing
    leaves no file and a resumed grid runs it again). A dict result keeps its keys at the top level (the
    readers of bench/quality.py's files read `spec`, `evals`, `steps` there); a list result (the rows of
    bench/step_time.py and its kin) goes under `rows`. Added: `run_info` (see `run_info`; with
    `load_before`, the load average when the run started) and `config` (the run's full configuration)."""
    info = run_info(started, command)
    if load_before is not None:
        info["machine"]["load_average_before"] = load_before
    body: dict[str, Any] = {**result} if isinstance(result, dict) else {"rows": result}
    body.update(run_info=info, config=config)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(body, indent=1))
    tmp.replace(path)
    return path


def read_rows(path: Path | str) -> list[dict[str, Any]]:
    """The rows of a table benchmark's JSON file: the file itself when it is a list (a script's own
    `--json`), or its `rows` (a file written by `write_result`)."""
    data = json.loads(Path(path).read_text())
    return data if isinstance(data, list) else data["rows"]
