"""Every import rule of docs/ARCHITECTURE.md ("Packages and who imports whom"), read from the source: each
module of a package is parsed and every import statement in it (module level or inside a function,
relative ones resolved) is checked against its package's rule. The layers, bottom to top:

    lcsb_core                       the trainer; imports no service code
    lcsb_service                    imports lcsb_core's torch-free parts; no api, no worker
    api | worker/<kind> | ...       side by side: api imports no torch and no worker; the shared worker
                                    modules (worker/*.py) import no kind's folder; the export worker
                                    (worker/export) imports no torch and no other kind's folder
    bench                           on top; imports no tests
    lcsb_client                     beside them all: no torch, no service code (the core's commands
                                    import lcsb_core inside a function, only with the `train` extra)

The API's runtime imports (no torch once the app is built) are tested by
tests/api/test_import_hygiene.py; the SQL rule there too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from lcsb_service.tasks import WorkerKind

ROOT = Path(__file__).resolve().parents[1]
HEAVY = {"torch", "transformers", "peft", "bitsandbytes"}
SERVICE = {"lcsb_service", "api", "worker"}
KIND_FOLDERS = {f"worker.{kind.value}" for kind in WorkerKind}

# (the modules a rule covers, the modules they must not import, the rule in words)
RULES = {
    "api": ("api", HEAVY | {"worker"}, "api imports no torch and no worker module"),
    "lcsb_core": ("lcsb_core", SERVICE | {"lcsb_client"}, "lcsb_core imports no service, api, worker or client code"),
    "lcsb_service": ("lcsb_service", {"api", "worker", "lcsb_client"}, "lcsb_service imports no api or worker"),
    "lcsb_client": ("lcsb_client", HEAVY | SERVICE, "lcsb_client imports no torch and no service code"),
    "worker_shared": ("worker/*.py", KIND_FOLDERS, "the shared worker modules import no kind's folder"),
    "worker_export": ("worker/export", HEAVY | KIND_FOLDERS - {"worker.export"},
                      "the export worker imports no torch and no other kind's folder"),
    "bench": ("bench", {"tests"}, "bench imports no tests"),
}


def module_name(path: Path) -> str:
    """`worker/training/child.py` -> `worker.training.child`; a package's `__init__.py` -> the package."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_in(source: str, module: str, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, imported module) for every import in `source`, which is module `module`; relative imports
    resolved; `from a import b` gives `a.b` (b may be a module)."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[:len(package) - node.level + 1], *([base] if base else [])])
            found += [(node.lineno, f"{base}.{a.name}" if base else a.name) for a in node.names]
    return found


def forbidden(imported: str, banned: set[str]) -> bool:
    """Whether `imported` is one of `banned` or inside one of them (`torch.nn` is inside `torch`)."""
    return any(imported == b or imported.startswith(b + ".") for b in banned)


def violations(where: str, banned: set[str]) -> list[str]:
    """"path:line imports module" for each import of a `banned` module in the modules of `where` (a
    package folder, or a glob such as `worker/*.py`)."""
    paths = sorted(ROOT.glob(where)) if "*" in where else sorted((ROOT / where).rglob("*.py"))
    assert paths, f"no modules in {where}"
    found = []
    for path in paths:
        names = imports_in(path.read_text(), module_name(path), path.name == "__init__.py")
        found += [f"{path.relative_to(ROOT)}:{line} imports {name}" for line, name in names if forbidden(name, banned)]
    return found


@pytest.mark.parametrize("rule", list(RULES))
def test_import_rule(rule):
    where, banned, words = RULES[rule]
    assert violations(where, banned) == [], words


def test_the_export_worker_loads_no_torch_at_run_time(tmp_path):
    """The rule above reads worker/export's own imports; this follows them all: a fresh process that builds
    the export worker's app, imports its task modules (as `python -m worker --kind export` does) and every
    module its export path calls loads none of torch, transformers, peft or bitsandbytes. (A real export
    in a real export worker process is checked too: tests/worker/test_export_worker.py.)"""
    import subprocess
    import sys

    code = ("import sys\n"
            "from lcsb_service.settings import Settings\n"
            "from lcsb_service.tasks import WorkerKind\n"
            "from worker.app import create_app\n"
            "app = create_app(Settings(data_dir=sys.argv[1]), WorkerKind.EXPORT)\n"
            "app.loader.import_default_modules()\n"
            "import worker.export.run, lcsb_core.export.adapter, lcsb_core.export.convert, safetensors.numpy, gguf\n"
            "assert 'lcsb.run_export' in app.tasks\n"
            f"print('HEAVY', sorted(m for m in {sorted(HEAVY)!r} if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "HEAVY []" in out.stdout


def test_the_rules_see_every_kind_of_import():
    source = ("import os, torch.nn as nn\n"
              "from worker import tasks\n"
              "from . import jobs\n"
              "from ..training.child import main\n"
              "def f():\n"
              "    import tests.api.conftest\n"
              "    from lcsb_service.db import Database\n")
    found = imports_in(source, "worker.training.supervisor")
    assert found == [(1, "os"), (1, "torch.nn"), (2, "worker.tasks"), (3, "worker.training.jobs"),
                     (4, "worker.training.child.main"), (6, "tests.api.conftest"), (7, "lcsb_service.db.Database")]
    assert imports_in("from . import spec\n", "worker.training", is_package=True) == [(1, "worker.training.spec")]
    assert [n for _, n in found if forbidden(n, HEAVY | {"worker", "tests"})] == [
        "torch.nn", "worker.tasks", "worker.training.jobs", "worker.training.child.main", "tests.api.conftest"]
    assert not forbidden("workers_pool", {"worker"}) and not forbidden("torchvision", {"torch"})


PACKAGES = ("lcsb_core", "lcsb_service", "api", "worker", "lcsb_client", "bench")
# Each package's layer (docs/ARCHITECTURE.md): a package may import only packages of a lower layer.
LAYER = {"lcsb_core": 0, "lcsb_service": 1, "lcsb_client": 1, "api": 2, "worker": 2, "bench": 3}


def _runtime_source(source: str) -> str:
    """`source` without its `if TYPE_CHECKING:` blocks: imports only the type checker runs make no cycle."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        for field in ("body", "orelse"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block:
                kept = [n for n in block
                        if not (isinstance(n, ast.If) and ast.unparse(n.test).endswith("TYPE_CHECKING"))]
                setattr(node, field, kept or [ast.Pass()])
    return ast.unparse(tree)


def module_graph() -> dict[str, set[str]]:
    """Module -> the house's modules it imports at run time (module level or inside functions; a package's
    `__init__` importing its own submodules is not an edge back to it)."""
    paths = {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
             if "results" not in p.relative_to(ROOT).parts}
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        deps: set[str] = set()
        for _, name in imports_in(_runtime_source(path.read_text()), module, path.name == "__init__.py"):
            parts = name.split(".")
            target = next((".".join(parts[:i]) for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in paths), None)
            if target and target != module and not module.startswith(target + ".") \
                    and not (path.name == "__init__.py" and target.startswith(module + ".")):
                deps.add(target)
        graph[module] = deps
    return graph


def test_the_packages_read_as_layers_and_no_module_cycle():
    from graphlib import CycleError, TopologicalSorter

    graph = module_graph()
    upward = sorted(f"{m} imports {d}" for m, ds in graph.items() for d in ds
                    if LAYER[d.split(".")[0]] >= LAYER[m.split(".")[0]] and d.split(".")[0] != m.split(".")[0])
    assert upward == [], "a package imports one of its own layer or above"
    try:
        list(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        raise AssertionError(f"import cycle: {' -> '.join(exc.args[1])}") from exc


def test_the_cycle_check_sees_a_cycle_and_skips_type_checking_imports():
    assert "lcsb_core.config" not in _runtime_source(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from lcsb_core.config import X\n")
    assert "lcsb_core.config" in _runtime_source("def f():\n    from lcsb_core.config import X\n")
    from graphlib import CycleError, TopologicalSorter

    with pytest.raises(CycleError):
        list(TopologicalSorter({"a": {"b"}, "b": {"a"}}).static_order())
