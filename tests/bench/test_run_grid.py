"""bench/run_grid.py without training anything: grid files expand to the runs bench/quality.py would make,
every run writes one self-describing result file (commit, dirty flag, machine, full config), a grid
resumes where it stopped, scratch runs land in a folder git ignores, and every shipped grid file is valid."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from bench import run_grid
from bench.common.paths import ROOT
from bench.common.results import read_rows

GRID = {
    "description": "a test grid",
    "runner": "quality",
    "results": "bench/results/test_grid",
    "defaults": {"threads": 1, "warmup": 0, "lrs": [1e-4, 2e-4]},
    "runs": [
        {"folder": "gsm8k", "task": "gsm8k", "schedules": ["full", "topfull/4"], "seeds": [0, 1], "steps": 8,
         "extend": {"topfull/4": 12}, "eval_every": 4},
    ],
}


def _write(tmp_path: Path, grid: dict) -> Path:
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(grid))
    return path


def _runs(tmp_path: Path, grid: dict = GRID) -> list[run_grid.GridRun]:
    return run_grid.expand(run_grid.load_grid(_write(tmp_path, grid)), tmp_path / "out")


class FakeTrain:
    """Stands in for training: returns a result built from the run's spec, counts its calls, and raises
    on the run named `fail_on`."""

    def __init__(self, fail_on: str = "") -> None:
        self.calls: list[str] = []
        self.fail_on = fail_on

    def __call__(self, run: run_grid.GridRun) -> dict:
        if run.name == self.fail_on:
            raise RuntimeError("killed")
        self.calls.append(run.name)
        spec = run.config["spec"]
        return {"spec": spec, "name": run.name, "evals": [{"step": spec["steps"], "eval_loss": spec["lr"] * 1000}]}


def test_a_quality_grid_expands_to_one_run_per_spec_with_its_full_config(tmp_path):
    runs = _runs(tmp_path)
    assert len(runs) == 2 * 2 * 2  # seeds x lrs x schedules
    names = {r.name for r in runs}
    assert "gsm8k-nf4-full-f0.25-lr0.0001-s0-n8-mom1-repack0" in names
    assert "gsm8k-nf4-topfullN4-f0.25-lr0.0002-s1-n12-mom1-repack0" in names  # extended to 12 steps
    run = next(r for r in runs if r.name == "gsm8k-nf4-topfullN4-f0.25-lr0.0002-s1-n12-mom1-repack0")
    assert run.folder == "gsm8k" and run.path(tmp_path) == tmp_path / "gsm8k" / f"{run.name}.json"
    assert run.config["spec"] == {"task": "gsm8k", "schedule": "topfull", "seed": 1, "lr": 2e-4, "steps": 12,
                                  "momentum": True, "repacking": False, "quant": "nf4", "fraction": 0.25,
                                  "full_every": 4, "batch": 4, "layer_lr_scaling": "none",
                                  "deep_fraction": 0.25}
    options = run.config["options"]
    assert (options["threads"], options["warmup"], options["eval_every"], options["seq"]) == (1, 0, 4, 384)
    assert options["out"] == str(tmp_path / "out" / "gsm8k")


def test_each_run_writes_its_result_with_commit_machine_and_config_and_a_rerun_resumes(tmp_path):
    runs, out = _runs(tmp_path), tmp_path / "out"
    train = FakeTrain()
    written = run_grid.run_grid(runs, out, train, log=lambda _: None)
    assert len(written) == len(train.calls) == 8
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    for run in runs:
        data = json.loads(run.path(out).read_text())
        assert data["name"] == run.name
        assert data["evals"][0]["eval_loss"] == pytest.approx(run.config["spec"]["lr"] * 1000)
        assert data["config"] == run.config
        info = data["run_info"]
        assert info["commit"] == head and isinstance(info["dirty"], bool)
        assert info["machine"]["cores"] == os.cpu_count() and info["machine"]["cpu_model"]
        assert len(info["machine"]["load_average_before"]) == 3 and info["seconds"] >= 0
    again = FakeTrain()
    assert run_grid.run_grid(runs, out, again, log=lambda _: None) == [] and again.calls == []
    runs[3].path(out).unlink()
    assert run_grid.run_grid(runs, out, again, log=lambda _: None) == [runs[3].path(out)]
    assert again.calls == [runs[3].name]


def test_a_run_that_dies_leaves_no_file_and_the_next_invocation_runs_only_what_is_missing(tmp_path):
    runs, out = _runs(tmp_path), tmp_path / "out"
    with pytest.raises(RuntimeError, match="killed"):
        run_grid.run_grid(runs, out, FakeTrain(fail_on=runs[2].name), log=lambda _: None)
    assert [r.path(out).exists() for r in runs[:3]] == [True, True, False]
    assert not list(out.rglob("*.tmp"))
    resumed = FakeTrain()
    run_grid.run_grid(runs, out, resumed, log=lambda _: None)
    assert resumed.calls == [r.name for r in runs[2:]]


def test_dry_run_lists_and_writes_nothing(tmp_path):
    runs, out = _runs(tmp_path), tmp_path / "out"
    lines: list[str] = []
    train = FakeTrain()
    assert run_grid.run_grid(runs, out, train, dry_run=True, log=lines.append) == []
    assert train.calls == [] and not out.exists()
    assert len(lines) == 8 and all(line.startswith("to run") for line in lines)


def test_command_runs_wrap_a_table_scripts_rows(tmp_path):
    grid = {"description": "d", "runner": "command",
            "runs": [{"name": "t_a", "script": "bench/step_time.py", "args": ["--rounds", 2]}]}
    (run,) = _runs(tmp_path, grid)
    assert run.argv == ("bench/step_time.py", "--rounds", "2")
    assert run.config == {"runner": "command", "script": "bench/step_time.py", "args": ["--rounds", "2"]}
    out = tmp_path / "out"
    run_grid.run_grid([run], out, lambda r: [{"schedule": "full", "step_s": 1.5}], log=lambda _: None)
    assert read_rows(run.path(out)) == [{"schedule": "full", "step_s": 1.5}]
    assert json.loads(run.path(out).read_text())["run_info"]["command"][1:] == list(run.argv)


@pytest.mark.parametrize("change, message", [
    ({"runner": "shell"}, "runner: 'shell' is not one of quality, command"),
    ({"runs": []}, "runs: a non-empty list"),
    ({"lanes": 2}, "unknown key(s) lanes"),
    ({"runs": [{"task": "gsm8k", "schedule": "full"}]}, "runs[0]: not valid bench/quality.py options"),
    ({"runner": "command", "runs": [{"name": "x"}]}, "runs[0].script is required"),
    ({"runner": "command", "runs": [{"name": "x", "script": "bench/nope.py"}]}, "runs[0].script: no file"),
    ({"runs": [{"task": "gsm8k", "schedules": ["full"]}, {"task": "gsm8k", "schedules": ["full"]}]},
     "two runs would write the same result file"),
])
def test_a_grid_that_cannot_run_is_refused_naming_the_key(tmp_path, change, message):
    with pytest.raises(run_grid.GridError) as exc:
        _runs(tmp_path, {**GRID, **change})
    assert message in str(exc.value)


def test_scratch_runs_go_to_an_ignored_folder_and_record_to_the_grids_results(tmp_path):
    path = _write(tmp_path, GRID)
    grid = run_grid.load_grid(path)
    scratch = run_grid.output_folder(path, grid, record=False, out="")
    assert scratch == ROOT / "bench" / "results" / "scratch" / "grid"
    probe = scratch / "gsm8k" / "x.json"
    ignored = subprocess.run(["git", "check-ignore", "-q", str(probe)], cwd=ROOT)
    assert ignored.returncode == 0, f"{probe} is not ignored by git"
    assert run_grid.output_folder(path, grid, record=True, out="") == ROOT / "bench/results/test_grid"
    with pytest.raises(run_grid.GridError, match="--record needs `results`"):
        run_grid.output_folder(path, {k: v for k, v in grid.items() if k != "results"}, record=True, out="")


def test_shards_split_the_runs_into_lanes(tmp_path):
    runs = _runs(tmp_path)
    lanes = [run_grid.shard(runs, f"{i}/3") for i in range(3)]
    assert [len(lane) for lane in lanes] == [3, 3, 2]
    assert sorted(r.name for lane in lanes for r in lane) == sorted(r.name for r in runs)
    with pytest.raises(run_grid.GridError, match="--shard"):
        run_grid.shard(runs, "3/3")


def test_folder_picks_entries_and_lanes_split_only_the_runs_left(tmp_path, capsys):
    """`--folder` keeps one folder's entries; `--shard i/n` deals out the runs without a result file, so
    two lanes started on a half-done folder each get half of what is left (not of the whole list)."""
    other = {**GRID["runs"][0], "folder": "other", "seeds": [0]}
    path = _write(tmp_path, {**GRID, "runs": [GRID["runs"][0], other]})
    out = tmp_path / "out"
    runs = [r for r in run_grid.expand(run_grid.load_grid(path), out) if r.folder == "gsm8k"]
    assert len(runs) == 8
    for done in runs[:4]:   # the first half already ran
        done.path(out).parent.mkdir(parents=True, exist_ok=True)
        done.path(out).write_text("{}")
    planned = []
    for lane in ("0/2", "1/2"):
        run_grid.main([str(path), "--out", str(out), "--folder", "gsm8k", "--shard", lane, "--dry-run"])
        printed = capsys.readouterr().out
        planned.append([line.split()[2].rstrip(":") for line in printed.splitlines() if line.startswith("to run")])
        assert "done " not in printed and "other/" not in printed
    assert [len(lane) for lane in planned] == [2, 2]
    assert sorted(planned[0] + planned[1]) == sorted(str(r.path(out).relative_to(out)) for r in runs[4:])
    with pytest.raises(SystemExit, match="no entry has folder 'nope'"):
        run_grid.main([str(path), "--out", str(out), "--folder", "nope", "--dry-run"])


@pytest.mark.parametrize("grid_file", sorted((ROOT / "bench" / "grids").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_grid_file_expands(grid_file, tmp_path):
    grid = run_grid.load_grid(grid_file)
    runs = run_grid.expand(grid, tmp_path, str(grid_file))
    assert runs and "results" in grid and grid["results"].startswith("bench/results/")
