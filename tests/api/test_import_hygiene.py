"""The API process must stay small: importing and building the app loads no torch, transformers,
peft or bitsandbytes; and service modules stay small."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "peft", "bitsandbytes")


def test_app_imports_no_torch(tmp_path):
    code = (
        "import sys\n"
        "from api.main import create_app\n"
        "from lcsb_service import artifacts, catalog, events, files, jobs, jobspec, keys, transitions\n"
        "create_app()\n"
        f"loaded = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "print('HEAVY', loaded)\n"
        "assert not loaded, loaded\n"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LCSB_DATA_DIR": str(tmp_path / "var")}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "HEAVY []" in out.stdout


def test_modules_are_small():
    for package in ("api", "lcsb_service"):
        for path in (ROOT / package).rglob("*.py"):
            lines = len(path.read_text().splitlines())
            assert lines < 300, f"{path.relative_to(ROOT)} has {lines} lines"
