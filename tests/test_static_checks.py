"""The linter and the type checker, run with the suite (so by scripts/test.sh and CI): ruff with the
rules of pyproject.toml on the whole tree, and mypy on lcsb_core, lcsb_service, api, worker,
lcsb_client and bench. A finding fails the test with the tool's own report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=900)


def test_ruff_finds_nothing():
    out = _run("ruff", "check", "--output-format", "concise", ".")
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]


def test_mypy_finds_nothing():
    out = _run("mypy")  # files, strictness and the untyped third-party packages: pyproject.toml
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
