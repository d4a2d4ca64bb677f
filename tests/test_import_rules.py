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

Inside `lcsb_core`, the rooms (docs/ARCHITECTURE.md, "The core's rooms") import downward only and not another
room's private names; no module cycle anywhere, type-only imports counted.

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


def module_graph() -> dict[str, set[str]]:
    """Module -> the house's modules it imports (module level, inside functions, and under `if TYPE_CHECKING:`:
    a type-only import is still a circle a reader has to follow; a package's `__init__` importing its own
    submodules is not an edge back to it)."""
    paths = {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
             if "results" not in p.relative_to(ROOT).parts}
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        deps: set[str] = set()
        for _, name in imports_in(path.read_text(), module, path.name == "__init__.py"):
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


def test_the_cycle_check_counts_type_checking_imports():
    """The circle issue 51 removed, planted back on main's graph as a type-only import (schedules' settings
    naming `TrainConfig` under `if TYPE_CHECKING:`, while config imports the settings): a cycle."""
    from graphlib import CycleError, TopologicalSorter

    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
              "    from lcsb_core.training.config import TrainConfig\n")
    module = "lcsb_core.training.schedules.settings"
    assert imports_in(source, module) == [(1, "typing.TYPE_CHECKING"), (3, "lcsb_core.training.config.TrainConfig")]
    graph = module_graph()
    list(TopologicalSorter(graph).static_order())   # main has none
    assert module in graph["lcsb_core.training.config"]
    graph[module] = graph[module] | {"lcsb_core.training.config"}
    with pytest.raises(CycleError):
        list(TopologicalSorter(graph).static_order())


# The core's rooms, bottom to top (docs/ARCHITECTURE.md, "The core's rooms"): a module may import its own
# room and the rooms below it. The ground modules sit under every room.
ROOMS = ("ground", "models", "data", "export", "inference", "eval", "training", "cli")
GROUND = {"lcsb_core", "lcsb_core.errors", "lcsb_core.run_files", "lcsb_core.chat_tokens"}


def room_of(module: str) -> str:
    """`lcsb_core.training.schedules.kinds` -> "training"; a ground module -> "ground"; `lcsb_core.cli` -> "cli".

    Raises:
        AssertionError: a top-level module that is neither a room nor a ground module.
    """
    if module in GROUND:
        return "ground"
    room = module.split(".")[1]
    assert room in ROOMS, f"{module} is in no room (lcsb_core's top level holds rooms and ground modules only)"
    return room


def room_violations(graph: dict[str, set[str]], sources: dict[str, tuple[str, bool]]) -> list[str]:
    """"module imports target (why)" for each import in `lcsb_core` that goes up a room, and each import of a
    private name or module (`_name`) of another room. `sources`: module -> (its source, is a package)."""
    found = []
    for module, deps in graph.items():
        for dep in deps:
            if dep.startswith("lcsb_core") and ROOMS.index(room_of(dep)) > ROOMS.index(room_of(module)):
                found.append(f"{module} imports {dep} (room {room_of(dep)} is above {room_of(module)})")
        source, is_package = sources[module]
        for _, name in imports_in(source, module, is_package):
            parts = name.split(".")
            owner = room_of(".".join(parts[:2])) if name.startswith("lcsb_core.") else None
            if owner and owner != room_of(module) and any(p.startswith("_") for p in parts[2:]):
                found.append(f"{module} imports {name} (private to room {owner})")
    return sorted(found)


def core_sources() -> dict[str, tuple[str, bool]]:
    """Module name -> (source, is a package), for every module of `lcsb_core`."""
    return {module_name(path): (path.read_text(), path.name == "__init__.py")
            for path in (ROOT / "lcsb_core").rglob("*.py")}


def test_the_core_is_rooms_and_a_few_ground_modules():
    top = {p.stem for p in (ROOT / "lcsb_core").glob("*.py")} - {"__init__"}
    rooms = {p.name for p in (ROOT / "lcsb_core").iterdir() if (p / "__init__.py").is_file()}
    assert top == {"errors", "run_files", "chat_tokens", "cli"}
    assert rooms == set(ROOMS) - {"ground", "cli"}


def test_the_rooms_import_downward_only():
    graph = module_graph()
    core = {m: d for m, d in graph.items() if m.startswith("lcsb_core")}
    assert core and room_violations(core, core_sources()) == []


def test_the_room_rule_fails_on_a_planted_violation():
    """An import up a room (data -> training) and a reach into another room's private name are both found."""
    sources = core_sources()
    planted = {"lcsb_core.data.planted": {"lcsb_core.training.trainer"}, "lcsb_core.eval.planted2": set()}
    sources["lcsb_core.data.planted"] = ("from lcsb_core.training.trainer import Trainer\n", False)
    sources["lcsb_core.eval.planted2"] = ("from lcsb_core.inference.prompts import _hidden\n", False)
    assert room_violations(planted, sources) == [
        "lcsb_core.data.planted imports lcsb_core.training.trainer (room training is above data)",
        "lcsb_core.eval.planted2 imports lcsb_core.inference.prompts._hidden (private to room inference)"]
