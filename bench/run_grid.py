"""Run a benchmark grid: a data file under bench/grids/ (YAML) read by this one runner, as peft's
`method_comparison` keeps one experiment per config and one `run.py`.

    python bench/run_grid.py bench/grids/schedules_confirm.yaml --dry-run   # what is done, what would run
    python bench/run_grid.py bench/grids/schedules_confirm.yaml             # scratch: bench/results/scratch/<grid>/
    python bench/run_grid.py bench/grids/schedules_confirm.yaml --record    # into the grid's `results` folder
    python bench/run_grid.py bench/grids/dpo_hh.yaml --record --folder grouped   # only the entries of one folder
    python bench/run_grid.py bench/grids/paper_setting.yaml --shard 0/2 &   # lanes side by side: each runs
    python bench/run_grid.py bench/grids/paper_setting.yaml --shard 1/2 &   #   every 2nd run still to run

A grid file holds `description` (what it measures, the BENCHMARKS.md section), `runner` and `runs`, and
optionally `results` (the committed folder `--record` writes to) and `defaults` (options every run shares):
- `runner: quality`: each entry of `runs` is a set of bench/quality.py options (`task`, `schedules`,
  `seeds`, `lrs`, `steps`, `extend`, ...; a list is that option's comma list, a mapping `extend` its
  `token=steps` list, `true` a flag) plus an optional `folder` under the results folder; it expands to one
  run per (seed, lr, schedule, ...) exactly as bench/quality.py does, each named by its RunSpec.
- `runner: command`: each entry is `{name, script, args}`: `python <script> <args> --json <file>`; the
  script's printed table goes to `<name>.md` beside the result.

Each run writes `<results>/<folder>/<name>.json` with its result, `run_info` (commit, dirty flag,
machine, load average before and after, times, command) and `config` (the run's full configuration)
(`bench.common.results`). A run whose file exists is skipped, so an interrupted grid resumes; the file
appears only when the run ends (written atomically). Nothing but the result goes to the results folder:
progress goes to the terminal.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import quality
from bench.common.paths import ROOT
from bench.common.results import write_result

SCRATCH = ROOT / "bench" / "results" / "scratch"
"""Where a grid writes unless `--record` or `--out` says otherwise (ignored by git)."""
RUNNERS = ("quality", "command")
GRID_KEYS = {"description", "runner", "runs", "results", "defaults"}


class GridError(ValueError):
    """A grid file that cannot be run; the message names the file and the key (`runs[2].script`)."""


@dataclass(frozen=True)
class GridRun:
    """One run of a grid: its result file is `<out>/<folder>/<name>.json`; `config` is everything that
    defines it (recorded in that file); `argv` is the command line it runs with (the runner's)."""

    name: str
    folder: str
    runner: str
    config: dict[str, Any]
    argv: tuple[str, ...] = field(default=())

    def path(self, out: Path) -> Path:
        """The run's result file under the output folder `out`."""
        return out / self.folder / f"{self.name}.json"


def load_grid(path: Path) -> dict[str, Any]:
    """The grid file at `path`, checked: a mapping with `description`, `runner` (one of RUNNERS) and a
    non-empty list `runs` of mappings; no other top-level keys. Raises GridError naming the key."""
    grid = yaml.safe_load(Path(path).read_text())
    if not isinstance(grid, dict):
        raise GridError(f"{path}: a grid file is a mapping (description, runner, runs, ...)")
    unknown = sorted(set(grid) - GRID_KEYS)
    if unknown:
        raise GridError(f"{path}: unknown key(s) {', '.join(unknown)} (allowed: {', '.join(sorted(GRID_KEYS))})")
    for key in ("description", "runner", "runs"):
        if key not in grid:
            raise GridError(f"{path}: `{key}` is required")
    if grid["runner"] not in RUNNERS:
        raise GridError(f"{path}: runner: {grid['runner']!r} is not one of {', '.join(RUNNERS)}")
    runs = grid["runs"]
    if not isinstance(runs, list) or not runs or not all(isinstance(r, dict) for r in runs):
        raise GridError(f"{path}: runs: a non-empty list of mappings")
    if not isinstance(grid.get("defaults", {}), dict):
        raise GridError(f"{path}: defaults: a mapping of options")
    return grid


def option_argv(options: dict[str, Any]) -> list[str]:
    """Command-line options of a mapping: `eval_every: 16` -> `--eval-every 16`, a list -> its comma
    list, a mapping -> `key=value,...`, `true` -> the bare flag, `false` / null -> left out."""
    argv: list[str] = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, list):
            argv += [flag, ",".join(str(v) for v in value)]
        elif isinstance(value, dict):
            argv += [flag, ",".join(f"{k}={v}" for k, v in value.items())]
        else:
            argv += [flag, str(value)]
    return argv


def quality_args(argv: list[str], where: str) -> argparse.Namespace:
    """bench/quality.py's options parsed from `argv`; an unknown or malformed option raises GridError
    naming `where` (argparse would exit the process)."""
    try:
        return quality.parse_args(argv)
    except SystemExit as exc:
        raise GridError(f"{where}: not valid bench/quality.py options: {' '.join(argv)}") from exc


def expand(grid: dict[str, Any], out: Path, where: str = "grid") -> list[GridRun]:
    """Every run of `grid` (see the module docstring), in file order, with results under `out`. Raises
    GridError naming `runs[i]` and the key for an entry that cannot run."""
    runs: list[GridRun] = []
    defaults = grid.get("defaults", {})
    for i, entry in enumerate(grid["runs"]):
        at = f"{where}: runs[{i}]"
        options = {**defaults, **entry}
        folder = str(options.pop("folder", ""))
        if grid["runner"] == "quality":
            argv = option_argv(options) + ["--out", str(out / folder)]
            args = quality_args(argv, at)
            for spec in quality.grid(args):
                runs.append(GridRun(spec.name, folder, "quality", quality.run_config(args, spec), tuple(argv)))
        else:
            for key in ("name", "script"):
                if key not in options:
                    raise GridError(f"{at}.{key} is required for runner: command")
            if not (ROOT / options["script"]).is_file():
                raise GridError(f"{at}.script: no file {options['script']} in the repository")
            extra = options.get("args", [])
            if not isinstance(extra, list):
                raise GridError(f"{at}.args: a list of command-line words")
            argv = [options["script"], *map(str, extra)]
            runs.append(GridRun(str(options["name"]), folder, "command",
                                {"runner": "command", "script": options["script"], "args": argv[1:]}, tuple(argv)))
    names = [(r.folder, r.name) for r in runs]
    duplicates = sorted({f"{f}/{n}".lstrip("/") for f, n in names if names.count((f, n)) > 1})
    if duplicates:
        raise GridError(f"{where}: two runs would write the same result file: {', '.join(duplicates)}")
    return runs


def run_grid(runs: Iterable[GridRun], out: Path, execute: Callable[[GridRun], dict | list], *,
             dry_run: bool = False, log: Callable[[str], None] = print) -> list[Path]:
    """Run each of `runs` whose result file under `out` does not exist yet, through `execute(run)` (the
    result: a dict, or a list of table rows), and write its file (`bench.common.results.write_result`:
    result, run_info, config). With `dry_run` nothing runs and nothing is written. Returns the files
    written. An exception from `execute` propagates; the files of the runs before it stay."""
    written: list[Path] = []
    for run in runs:
        path = run.path(out)
        if path.exists():
            log(f"done     {path.relative_to(out)}")
            continue
        if dry_run:
            log(f"to run   {path.relative_to(out)}: {' '.join(run.argv)}")
            continue
        log(f"running  {path.relative_to(out)}")
        started, load = datetime.now(UTC), list(os.getloadavg())
        result = execute(run)
        written.append(write_result(path, result, run.config, started=started, load_before=load,
                                    command=[sys.executable, *run.argv] if run.runner == "command" else None))
    return written


class Executor:
    """Runs a GridRun for real: `quality` runs in this process (bench/quality.py's QualityRunner, one per
    distinct set of options, so the tokenizer and data load once), `command` runs as a child process."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.quality: dict[tuple[str, ...], quality.QualityRunner] = {}

    def __call__(self, run: GridRun) -> dict | list:
        if run.runner == "quality":
            return self.train(run)
        return self.command(run)

    def train(self, run: GridRun) -> dict:
        """One bench/quality.py run (its RunSpec is `run.config["spec"]`)."""
        if run.argv not in self.quality:
            args = quality.parse_args(list(run.argv))
            if args.threads:
                torch.set_num_threads(args.threads)
            self.quality[run.argv] = quality.QualityRunner(args)
        runner = self.quality[run.argv]
        spec = quality.RunSpec(**run.config["spec"])
        result = runner.train(spec)
        (Path(runner.args.out) / f"{spec.name}.partial.json").unlink(missing_ok=True)
        return result

    def command(self, run: GridRun) -> list | dict:
        """`python <script> <args> --json <temporary file>` from the repository root; its stdout (the
        printed table) goes to `<name>.md` beside the result. Raises RuntimeError on a non-zero exit."""
        table = run.path(self.out).with_suffix(".md")
        table.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            result_file = Path(tmp) / "result.json"
            with open(table, "w") as fh:
                proc = subprocess.run([sys.executable, *run.argv, "--json", str(result_file)], cwd=ROOT,
                                      stdout=fh)
            if proc.returncode != 0:
                raise RuntimeError(f"{run.name}: {' '.join(run.argv)} exited with {proc.returncode}")
            return json.loads(result_file.read_text())


def output_folder(grid_file: Path, grid: dict[str, Any], *, record: bool, out: str) -> Path:
    """`out` if given; with `record`, the grid's `results` folder (GridError without one); else the
    scratch folder `bench/results/scratch/<grid file's stem>`."""
    if out:
        return Path(out)
    if record:
        if "results" not in grid:
            raise GridError(f"{grid_file}: --record needs `results` (the committed folder) in the grid file")
        return ROOT / grid["results"]
    return SCRATCH / grid_file.stem


def shard(runs: list[GridRun], spec: str) -> list[GridRun]:
    """The runs of lane `i/n` (`spec`): every n-th run starting at the i-th. `main` passes only the runs
    still to run (no result file yet), so lanes started together split the work left, not the whole
    list. Raises GridError on a malformed spec."""
    try:
        i, n = (int(x) for x in spec.split("/"))
    except ValueError as exc:
        raise GridError(f"--shard: i/n with whole numbers, got {spec!r}") from exc
    if not 0 <= i < n:
        raise GridError(f"--shard: need 0 <= i < n, got {spec!r}")
    return runs[i::n]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("grid", type=Path, help="a grid file (bench/grids/*.yaml)")
    ap.add_argument("--record", action="store_true", help="write into the grid's committed `results` folder")
    ap.add_argument("--out", default="", help="write into this folder instead")
    ap.add_argument("--dry-run", action="store_true", help="list each run as done or to run; run nothing")
    ap.add_argument("--shard", default="0/1", help="i/n: of the runs still to run, every n-th from the i-th "
                    "(parallel lanes)")
    ap.add_argument("--folder", default="", help="only the entries whose `folder` is this")
    args = ap.parse_args(argv)
    try:
        grid = load_grid(args.grid)
        out = output_folder(args.grid, grid, record=args.record, out=args.out)
        runs = [run for run in expand(grid, out, str(args.grid)) if not args.folder or run.folder == args.folder]
        if not runs:
            raise GridError(f"{args.grid}: no entry has folder {args.folder!r}")
        if args.shard != "0/1":
            runs = shard([run for run in runs if not run.path(out).exists()], args.shard)
    except GridError as exc:
        raise SystemExit(str(exc)) from exc
    print(f"{args.grid}: {len(runs)} runs -> {out}", flush=True)
    written = run_grid(runs, out, Executor(out), dry_run=args.dry_run, log=lambda m: print(m, flush=True))
    print(f"{len(written)} written", flush=True)


if __name__ == "__main__":
    main()
