"""`lcsb_service.scrub.scrub_paths`: the run's JSON files name no worker folder once published."""

from __future__ import annotations

from lcsb_service.scrub import scrub_paths, scrub_text


def test_paths_become_relative_or_public_names():
    run, work, models = "/srv/runs/ftjob-1", "/srv/runs/.ftjob-1", "/home/w/.cache/lcsb/models"
    data = {"output_dir": run, "adapter_dir": f"{run}/adapter", "plots": [f"{run}/plots/loss.png"],
            "data": {"train_file": f"{work}/file-abc.jsonl", "validation_file": None},
            "model": {"name_or_path": f"{models}/SmolLM2-135M-Instruct"}, "steps": 4, "note": "a /b c",
            "elsewhere": "/opt/other/thing.bin", "windows": "C:\\\\Users\\\\w\\\\x.json", "home": "~/secret/y"}
    out = scrub_paths(data, {run: "", work: "", models: "", "/srv/runs": "runs"})
    assert out == {"output_dir": ".", "adapter_dir": "adapter", "plots": ["plots/loss.png"],
                   "data": {"train_file": "file-abc.jsonl", "validation_file": None},
                   "model": {"name_or_path": "SmolLM2-135M-Instruct"}, "steps": 4, "note": "a /b c",
                   "elsewhere": "thing.bin", "windows": "x.json", "home": "y"}


def test_longest_prefix_wins_and_names_are_kept():
    assert scrub_paths(["/a/b/c", "/a/x"], {"/a": "top", "/a/b": "inner"}) == ["inner/c", "top/x"]
    assert scrub_paths("/a/b/", {"/a/b/": "named"}) == "named/"  # a trailing slash is the same folder
    assert scrub_paths("relative/path.txt", {"/a": ""}) == "relative/path.txt"


def test_text_that_is_not_json_is_scrubbed_too():
    text = "trained /srv/runs/ftjob-1/adapter from /srv/models/Smol in /srv/runs/ftjob-1 ok"
    assert scrub_text(text, {"/srv/runs/ftjob-1": "", "/srv/models": ""}) == "trained adapter from Smol in . ok"
