"""The bench package's import structure (docs/ARCHITECTURE.md: bench sits on top of the layers): the
modules import each other without a cycle (counting imports inside functions too), and only the benchmark
of the worker's training loop and the one of its thread policy import worker code. (That bench imports
no tests is one of the house's import rules, tests/test_import_rules.py.)"""

from __future__ import annotations

import ast
import re
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

from bench.common.paths import ROOT

BENCH = ROOT / "bench"
# trainer_overhead's mode (c) times the worker child's own callbacks; contention measures the worker's thread
# policy (`worker.threads`) with the child's allocator
WORKER_IMPORTERS = {"bench.trainer_overhead", "bench.contention"}


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """Module -> every module it imports (top level and inside functions), for each .py file of bench/."""
    graph: dict[str, set[str]] = {}
    for path in BENCH.rglob("*.py"):
        if "results" in path.relative_to(BENCH).parts:
            continue
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
                names.update(f"{node.module}.{a.name}" for a in node.names)
        graph[_module(path)] = names
    return graph


def test_bench_modules_import_each_other_without_a_cycle():
    graph = _imports()
    local = {m: {n for n in names if n in graph and n != m} for m, names in graph.items()}
    assert local["bench.quality_report"] >= {"bench.schedule_decision", "bench.common.curves"}
    assert "bench.quality_report" not in local["bench.schedule_decision"]
    try:
        tuple(TopologicalSorter(local).static_order())
    except CycleError as exc:
        raise AssertionError(f"import cycle in bench/: {' -> '.join(exc.args[1])}") from exc


def test_only_the_training_loop_benchmark_imports_worker_code():
    importers = {m for m, names in _imports().items() if any(n == "worker" or n.startswith("worker.") for n in names)}
    assert importers == WORKER_IMPORTERS


def test_bench_readme_names_every_script_and_no_retired_one():
    """bench/README.md lists each script of bench/ with the claim it guards; a retired one (bench/LOG.md) is
    gone from both."""
    readme = (BENCH / "README.md").read_text()
    scripts = sorted(p.name for p in BENCH.iterdir() if p.suffix in (".py", ".sh") and p.name != "__init__.py")
    assert [s for s in scripts if f"`{s}`" not in readme] == []
    named = set(re.findall(r"^\| `([\w.]+\.(?:py|sh))`", readme, flags=re.M))
    assert named <= set(scripts), f"bench/README.md's table names scripts that are gone: {named - set(scripts)}"
