"""`lcsb files upload`, `lcsb jobs submit/list/get/cancel` against the live API, and how API errors are
printed (`error (<code>): <message> [param]`, exit 2, no traceback)."""

from __future__ import annotations

import json
import re
import secrets
from pathlib import Path

import pytest
import yaml

from lcsb_service import transitions
from tests.api.helpers import SMOL, chat_lines
from tests.client.conftest import ONE_BACKEND
from tests.client.helpers import new_job, run_to_success, start, write_dataset

pytestmark = ONE_BACKEND


def test_upload_prints_the_validation_summary(lcsb, tmp_path):
    path = write_dataset(tmp_path / "train.jsonl", n=12)
    r = lcsb("files", "upload", path)
    assert r.exit_code == 0, r.output
    assert "file-" in r.stdout and "processed" in r.stdout and "train.jsonl" in r.stdout
    assert "12 (12 valid, 0 invalid, 0 duplicates)" in r.stdout and "format    chat" in r.stdout
    as_json = lcsb("files", "upload", path, "--json")
    f = json.loads(as_json.stdout)
    assert f["status"] == "processed" and f["validation"]["valid_examples"] == 12
    assert f["bytes"] == path.stat().st_size
    got = lcsb("files", "get", f["id"], "--json")
    assert got.exit_code == 0 and json.loads(got.stdout)["id"] == f["id"]
    listed = lcsb("files", "list")
    assert listed.exit_code == 0 and f["id"] in listed.stdout


def test_rejected_upload_exits_2_with_the_reasons(lcsb, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(chat_lines(12) + b'{"messages": [{"role": "user", "content": "hi"}]}\nnot json\n')
    r = lcsb("files", "upload", bad)
    assert r.exit_code == 2, r.output
    assert "error" in r.stdout  # the file object is still printed, status error
    # several lines, one per bad line: the param is named on the first, not after the last line's text
    assert r.stderr.startswith("error (invalid_file) [file]: bad.jsonl (file-")
    assert "line 13" in r.stderr and "line 14" in r.stderr and not r.stderr.rstrip().endswith("[file]")
    assert "Traceback" not in r.output
    few = write_dataset(tmp_path / "few.jsonl", n=3)   # valid lines: uploaded, with a warning; a job is refused
    r = lcsb("files", "upload", few)
    assert r.exit_code == 0 and "training_file needs at least 10" in r.stdout, r.output


def test_submit_from_yaml_uploads_local_files(lcsb, tmp_path):
    tag = secrets.token_hex(4)
    write_dataset(tmp_path / "data" / "train.jsonl", n=16)
    write_dataset(tmp_path / "data" / "valid.jsonl", n=10)
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({
        "model": SMOL, "training_path": "data/train.jsonl", "validation_path": "data/valid.jsonl",
        "hyperparameters": {"n_epochs": 1, "batch_size": 2, "learning_rate": 2e-4},
        "method": {"lora": {"rank": 8, "alpha": 16}, "lcsb": {"schedule": "cyclic", "k": 5}, "max_seq_len": 256},
        "suffix": "cli", "seed": 7, "metadata": {"suite": tag}}))
    r = lcsb("jobs", "submit", spec, "--json", "--set", "hyperparameters.batch_size=4")
    assert r.exit_code == 0, r.output
    job = json.loads(r.stdout)
    assert job["status"] == "queued" and job["model"] == SMOL and job["seed"] == 7
    assert job["user_provided_suffix"] == "cli" and job["metadata"] == {"suite": tag}
    assert job["hyperparameters"]["batch_size"] == 4  # the --set override
    assert job["method"]["lcsb"]["layers_per_step"] == 5 and job["method"]["lora"]["rank"] == 8
    assert job["training_file"].startswith("file-") and job["validation_file"].startswith("file-")
    assert r.stderr.count("uploaded ") == 2 and "(16 examples)" in r.stderr

    listed = lcsb("jobs", "list", "--metadata", f"suite={tag}", "--json")
    assert [j["id"] for j in json.loads(listed.stdout)["data"]] == [job["id"]]
    table = lcsb("jobs", "list", "--limit", "1")
    assert table.exit_code == 0 and job["id"] in table.stdout and "queued" in table.stdout
    shown = lcsb("jobs", "get", job["id"])
    assert shown.exit_code == 0
    assert "LCSB cyclic, 5 layers/step" in shown.stdout and "LoRA r8" in shown.stdout
    assert f"suite={tag}" in shown.stdout and "cpu-6g" in shown.stdout

    cancelled = lcsb("jobs", "cancel", job["id"])
    assert cancelled.exit_code == 0 and cancelled.stdout.strip() == f"{job['id']} cancelled"
    again = lcsb("jobs", "cancel", job["id"])  # cancelling a cancelled job returns it
    assert again.exit_code == 0 and again.stdout.strip() == f"{job['id']} cancelled"


def test_tables_without_a_terminal_keep_their_full_width(lcsb, svc, app, tmp_path):
    job_id = new_job(svc, tmp_path, metadata={"suite": "width"})["id"]
    start(app, job_id, total=3)
    model = f"ft:SmolLM2-135M-Instruct:{'x' * 40}:{job_id}"  # a row far wider than rich's default 80 columns
    with app.state.db.session() as s:
        transitions.finish(s, job_id, fine_tuned_model=model, trained_tokens=1536)
    piped = lcsb("jobs", "list", "--metadata", "suite=width", COLUMNS=None)  # not a terminal, no COLUMNS
    assert piped.exit_code == 0, piped.output
    header, row = piped.stdout.splitlines()
    assert header.split() == ["id", "status", "model", "steps", "created", "fine-tuned", "model"]
    assert row.split()[:3] == [job_id, "succeeded", SMOL] and row.split()[-1] == model and len(row) > 120
    narrow = lcsb("jobs", "list", "--metadata", "suite=width", COLUMNS="80")  # COLUMNS is still obeyed
    assert len(narrow.stdout.splitlines()) > 2 and max(len(line) for line in narrow.stdout.splitlines()) <= 80


def test_submit_with_a_rejected_dataset_creates_no_job(lcsb, svc, tmp_path):
    tag = secrets.token_hex(4)
    (tmp_path / "train.jsonl").write_bytes(chat_lines(12) + b"not json\n")
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({"model": SMOL, "training_path": "train.jsonl", "metadata": {"suite": tag}}))
    r = lcsb("jobs", "submit", spec)
    assert r.exit_code == 2 and "line 13" in r.stderr
    removed, error = r.stderr.split("\n", 1)
    assert re.fullmatch(r"removed file-\w+, uploaded by this submit", removed), r.stderr
    assert error.startswith("error (invalid_file) [file]: train.jsonl")
    assert json.loads(lcsb("jobs", "list", "--metadata", f"suite={tag}", "--json").stdout)["data"] == []
    assert removed.split()[1].rstrip(",") not in {f["id"] for f in svc.list_files(100)}


def test_a_submit_the_service_refuses_removes_the_files_it_uploaded(lcsb, svc, tmp_path):
    write_dataset(tmp_path / "train.jsonl", n=12)
    write_dataset(tmp_path / "valid.jsonl", n=10)
    kept = svc.upload_file(write_dataset(tmp_path / "named.jsonl", n=12))  # named by id: never removed
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({"model": SMOL, "training_path": "train.jsonl", "validation_path": "valid.jsonl",
                                    "method": {"lcsb": {"k": 0}}}))
    r = lcsb("jobs", "submit", spec)
    assert r.exit_code == 2 and r.stderr.splitlines()[-1].startswith("error (invalid_value): "), r.stderr
    removed = re.findall(r"^removed (file-\w+), uploaded by this submit$", r.stderr, flags=re.M)
    uploaded = re.findall(r"^uploaded \S+ as (file-\w+)", r.stderr, flags=re.M)
    assert len(removed) == 2 and removed == uploaded
    listed = {f["id"] for f in svc.list_files(100)}
    assert not set(removed) & listed and kept["id"] in listed
    spec.write_text(yaml.safe_dump({"model": SMOL, "training_file": kept["id"], "method": {"lcsb": {"k": 0}}}))
    r = lcsb("jobs", "submit", spec)
    assert r.exit_code == 2 and "removed" not in r.stderr
    assert kept["id"] in {f["id"] for f in svc.list_files(100)}


def test_api_errors_are_one_line_and_exit_2(lcsb, svc, app, tmp_path):
    r = lcsb("jobs", "get", "ftjob-missing")
    assert r.exit_code == 2
    assert r.stderr == "error (job_not_found): no such fine-tuning job: ftjob-missing [fine_tuning_job_id]\n"
    f = svc.upload_file(write_dataset(tmp_path / "t.jsonl"))
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({"model": "gpt-4o-mini", "training_file": f["id"]}))
    r = lcsb("jobs", "submit", spec)
    assert r.exit_code == 2 and r.stderr.startswith("error (model_not_found): ") and r.stderr.endswith(" [model]\n")
    r = lcsb("jobs", "submit", spec, "--set", "model=Giant-70B")
    assert r.exit_code == 2 and r.stderr.startswith("error (insufficient_memory): ")
    r = lcsb("jobs", "submit", spec, "--set", f"model={SMOL}", "--set", "method.lcsb.k=0")
    assert r.exit_code == 2 and r.stderr.startswith("error (invalid_value): ") and "[method.lcsb.k]" in r.stderr
    spec.write_text(yaml.safe_dump({"model": SMOL, "training_file": f["id"], "epochs": 3}))
    r = lcsb("jobs", "submit", spec)
    assert r.exit_code == 2 and r.stderr.startswith("error (invalid_spec): unknown field 'epochs'")
    r = lcsb("jobs", "list", LCSB_API_KEY="sk-lcsb-wrong")
    assert r.exit_code == 2 and r.stderr.startswith("error (invalid_api_key): ")
    done = new_job(svc, tmp_path)
    run_to_success(app, done["id"])
    r = lcsb("jobs", "cancel", done["id"])
    assert r.exit_code == 2 and r.stderr.startswith("error (job_not_cancellable): ")
    r = lcsb("jobs", "download", done["id"], "--base-url", "http://127.0.0.1:9/v1")  # httpx, no retries
    assert r.exit_code == 2 and r.stderr.startswith("error (connection_error): cannot reach the service at "
                                                   "http://127.0.0.1:9/v1")
    assert "Traceback" not in r.output


@pytest.mark.parametrize("name", ["final_answer_job.yaml", "gsm8k_job.yaml"])
def test_the_example_job_spec_is_accepted(lcsb, tmp_path, name):
    """examples/final_answer_job.yaml (the README's main job) and gsm8k_job.yaml against the live API, on
    stand-in datasets at the paths they name, as many training lines as the real ones (400): their eval_every
    and save_every (50) must fit the run's real step count (100), which creation now checks. A spec that
    names no schedule gets `auto` resolved for its 100 steps on SmolLM2: the probe-then-switch schedule."""
    example = Path(__file__).resolve().parents[2] / "examples" / name
    (tmp_path / "examples").mkdir()
    spec = tmp_path / "examples" / example.name
    spec.write_text(example.read_text())
    raw = yaml.safe_load(example.read_text())
    write_dataset(spec.parent / raw["training_path"], n=400)
    write_dataset(spec.parent / raw["validation_path"], n=10)
    r = lcsb("jobs", "submit", spec, "--json")
    assert r.exit_code == 0, r.output
    job = json.loads(r.stdout)
    expected = raw["method"].get("lcsb", {}).get("schedule", "auto")
    assert job["status"] == "queued" and job["method"]["lcsb"]["schedule"] == expected
    assert lcsb("jobs", "cancel", job["id"]).exit_code == 0


def test_jobs_get_states_what_auto_chose_and_why(lcsb, tmp_path):
    write_dataset(tmp_path / "data" / "train.jsonl", n=16)
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({"model": SMOL, "training_path": "data/train.jsonl",
                                    "hyperparameters": {"n_epochs": 1, "batch_size": 2}}))
    job = json.loads(lcsb("jobs", "submit", spec, "--json").stdout)
    assert job["method"]["lcsb"]["schedule"] == "full"
    shown = lcsb("jobs", "get", job["id"])
    assert shown.exit_code == 0
    assert "full backprop: 8 planned steps are fewer than the 32 on which a selective schedule" in shown.stdout
    lcsb("jobs", "cancel", job["id"])
