"""The light client: `pip install lcsb-service` (no extra) into a fresh virtual environment installs
no torch, `lcsb jobs list` works against a live API, and the trainer core's commands say how to
install the core. pip reaches the package index (its wheel cache makes later runs quick)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.client.conftest import ONE_BACKEND
from tests.client.helpers import new_job

pytestmark = ONE_BACKEND
ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "peft", "bitsandbytes", "accelerate", "numpy", "sqlalchemy", "fastapi", "celery")


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_client_installs_alone_and_lists_jobs(tmp_path, svc, base_url, alice):
    job = new_job(svc, tmp_path / "data")
    venv = tmp_path / "venv"
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": os.environ.get("HOME", str(tmp_path)),
           "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    assert _run([sys.executable, "-m", "venv", str(venv)], tmp_path, env).returncode == 0
    out = _run([str(venv / "bin" / "pip"), "install", "--quiet", str(ROOT)], tmp_path, env)
    assert out.returncode == 0, out.stderr[-3000:]

    probe = ("import importlib.util, json\n"
             f"print(json.dumps([m for m in {HEAVY!r} if importlib.util.find_spec(m) is not None]))\n")
    found = _run([str(venv / "bin" / "python"), "-c", probe], tmp_path, env)
    assert found.returncode == 0 and json.loads(found.stdout) == [], found.stdout + found.stderr

    client_env = {**env, "LCSB_BASE_URL": base_url, "LCSB_API_KEY": alice.key, "COLUMNS": "200"}
    listed = _run([str(venv / "bin" / "lcsb"), "jobs", "list", "--json"], tmp_path, client_env, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert job["id"] in [j["id"] for j in json.loads(listed.stdout)["data"]]
    table = _run([str(venv / "bin" / "lcsb"), "jobs", "list"], tmp_path, client_env, timeout=120)
    assert table.returncode == 0 and job["id"] in table.stdout

    train = _run([str(venv / "bin" / "lcsb"), "train", "job.yaml", "--set", "max_steps=2"], tmp_path, client_env,
                 timeout=120)
    assert train.returncode == 2 and 'pip install "lcsb-service[train]"' in train.stderr, train.stderr
    helped = _run([str(venv / "bin" / "lcsb"), "--help"], tmp_path, client_env, timeout=120)
    assert helped.returncode == 0 and "train" in helped.stdout and "Needs the trainer core" in helped.stdout
