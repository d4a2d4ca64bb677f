"""The API process must stay small: importing and building the app loads no torch, transformers,
peft or bitsandbytes; and service modules stay small."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "peft", "bitsandbytes")


def test_app_imports_no_torch(tmp_path):
    code = (
        "import sys\n"
        "from api.main import create_app\n"
        "from lcsb_service import artifacts, catalog, events, files, jobs, jobspec, keys, outputs, pagination\n"
        "from lcsb_service import status, transitions\n"
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


def test_the_api_runs_without_the_worker_package(tmp_path):
    """With an enqueuer outside the worker package, building the app and running its lifespan (the job
    sweeper included) loads no `worker` module: the API imports none (the Celery enqueuer is loaded by
    name, `Settings.enqueuer`)."""
    code = (
        "import sys\n"
        "from fastapi.testclient import TestClient\n"
        "from api.main import create_app\n"
        "from lcsb_service.settings import Settings\n"
        "app = create_app(Settings(data_dir=sys.argv[1], enqueuer='lcsb_service.enqueue:LoggingEnqueuer'))\n"
        "with TestClient(app) as client:\n"
        "    assert client.get('/healthz').status_code == 200\n"
        "loaded = sorted(m for m in sys.modules if m == 'worker' or m.startswith('worker.'))\n"
        "print('WORKER', loaded)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "WORKER []" in out.stdout


def test_modules_are_small():
    for package in ("api", "lcsb_service"):
        for path in (ROOT / package).rglob("*.py"):
            lines = len(path.read_text().splitlines())
            assert lines < 300, f"{path.relative_to(ROOT)} has {lines} lines"



QUERY_BUILDERS = {"select", "exists", "insert", "update", "delete", "text"}   # sqlalchemy's, called by name
QUERY_RUNNERS = {"execute", "scalar", "scalars", "query"}                  # Session methods
ROW_LOOKUPS = {"get", "merge", "refresh"}                                 # Session methods given a model


def sql_in(source: str) -> list[str]:
    """Where `source` imports SQLAlchemy, builds a statement, runs one, or looks a row up by its model
    class (`session.get(Job, job_id)`, a class imported from `lcsb_service.models`) ("line: what")."""
    tree = ast.parse(source)
    models = {a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
              and node.module == "lcsb_service.models" for a in node.names}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found += [f"{node.lineno}: imports {n}" for n in names if n.split(".")[0] == "sqlalchemy"]
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in QUERY_BUILDERS:
                found.append(f"{node.lineno}: calls {func.id}()")
            elif isinstance(func, ast.Attribute) and func.attr in QUERY_RUNNERS:
                found.append(f"{node.lineno}: calls .{func.attr}()")
            elif (isinstance(func, ast.Attribute) and func.attr in ROW_LOOKUPS and node.args
                  and isinstance(node.args[0], ast.Name) and node.args[0].id in models):
                found.append(f"{node.lineno}: looks up a {node.args[0].id} row (.{func.attr}())")
    return found


def sql_under(folder: str) -> dict[str, list[str]]:
    """`sql_in` of every module under `folder` (relative to the repository), by path."""
    return {str(p.relative_to(ROOT)): sql_in(p.read_text()) for p in sorted((ROOT / folder).rglob("*.py"))}


def test_routes_hold_no_sql():
    """Routes -> lcsb_service functions -> queries: no module under api/routes imports SQLAlchemy,
    builds a statement or runs one (docs/ARCHITECTURE.md, "Packages and who imports whom")."""
    found = sql_under("api/routes")
    assert len(found) >= 7 and {path: where for path, where in found.items() if where} == {}


def test_workers_hold_no_sql():
    """Workers -> lcsb_service functions -> queries: no module under worker/ (any kind) imports
    SQLAlchemy, builds or runs a statement, or looks a row up by its model class."""
    found = sql_under("worker")
    assert len(found) >= 15 and "worker/training/supervisor.py" in found
    assert {path: where for path, where in found.items() if where} == {}


def test_the_sql_rule_sees_queries():
    source = ("from sqlalchemy import select\n\n"
              "def route(session, job_id):\n"
              "    row = session.execute(select(Job).where(Job.id == job_id)).scalar_one()\n"
              "    return session.scalar(exists().where(Job.id == row.id))\n")
    assert sorted(sql_in(source)) == ["1: imports sqlalchemy", "4: calls .execute()", "4: calls select()",
                              "5: calls .scalar()", "5: calls exists()"]
    assert sql_in("@router.delete('/x')\ndef f(storage):\n    storage.delete('k')\n") == []
    lookup = ("from lcsb_service.models import File, Job as J\n"
              "def f(s, data):\n"
              "    job = s.get(J, 'x')\n"
              "    return s.get(File, job.training_file), data.get('k')\n")
    assert sql_in(lookup) == ["3: looks up a J row (.get())", "4: looks up a File row (.get())"]
