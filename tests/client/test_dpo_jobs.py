"""`lcsb jobs submit --method dpo --beta B` against the live API: a DPO job on a preference file, its
method, beta and length-grouped batches (DPO's default) shown by `lcsb jobs get`; `--beta` without dpo is
refused before anything is uploaded, and the service's 400 for a chat file given to a DPO job names
`training_file`."""

from __future__ import annotations

import json

import yaml

from tests.api.helpers import SMOL, preference_lines
from tests.client.conftest import ONE_BACKEND
from tests.client.helpers import write_dataset

pytestmark = ONE_BACKEND


def _spec(tmp_path, data: str) -> str:
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({"model": SMOL, "training_path": data, "hyperparameters": {"n_epochs": 1}}))
    return str(spec)


def test_submit_a_dpo_job_and_get_shows_its_method(lcsb, tmp_path):
    (tmp_path / "pairs.jsonl").write_bytes(preference_lines(12))
    r = lcsb("jobs", "submit", _spec(tmp_path, "pairs.jsonl"), "--method", "dpo", "--beta", "0.25", "--json")
    assert r.exit_code == 0, r.output
    job = json.loads(r.stdout)
    assert job["method"]["type"] == "dpo" and job["method"]["dpo"]["hyperparameters"]["beta"] == 0.25
    shown = lcsb("jobs", "get", job["id"])
    assert shown.exit_code == 0 and "dpo (beta 0.25)" in shown.stdout, shown.stdout
    assert "batches grouped by length" in shown.stdout, shown.stdout   # DPO's default, shown resolved
    auto = json.loads(lcsb("jobs", "submit", _spec(tmp_path, "pairs.jsonl"), "--method", "dpo", "--json").stdout)
    assert "dpo (beta 0.1)" in lcsb("jobs", "get", auto["id"]).stdout
    for job_id in (job["id"], auto["id"]):
        lcsb("jobs", "cancel", job_id)


def test_beta_needs_dpo_and_a_chat_file_is_refused(lcsb, tmp_path):
    write_dataset(tmp_path / "train.jsonl", n=12)
    r = lcsb("jobs", "submit", _spec(tmp_path, "train.jsonl"), "--beta", "0.2")
    assert r.exit_code == 2 and "--beta is DPO's: give --method dpo" in r.stderr and "uploaded" not in r.stderr
    r = lcsb("jobs", "submit", _spec(tmp_path, "train.jsonl"), "--method", "dpo")
    assert r.exit_code == 2, r.output
    assert "error (invalid_file): training_file: file-" in r.stderr and r.stderr.rstrip().endswith("[training_file]")
    assert "is chat data; a dpo job needs preference pairs" in r.stderr and "removed file-" in r.stderr
    shown = lcsb("jobs", "submit", _spec(tmp_path, "train.jsonl"), "--json")  # supervised: shown as such
    job = json.loads(shown.stdout)
    shown = lcsb("jobs", "get", job["id"]).stdout
    assert "supervised | " in shown and "grouped by length" not in shown, shown
    lcsb("jobs", "cancel", job["id"])
