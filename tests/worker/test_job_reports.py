"""Real workers, real jobs (tiny Llama with SmolLM2's tokenizer): what the worker's dataset check
reports, and that nothing a user can read names a worker path.

1. An example that loses every target token to truncation is named: the job's `data_report` and its
   validation event give the dropped and truncated counts and lines; training uses the rest.
   With `method.on_truncation: fail` the job fails `invalid_file` naming the line, before the model loads.
2. Every download of a finished job (artifacts, the adapter and checkpoint archives, result files), its
   events and its job object are searched for the worker's folders: none appears, and the adapter
   names its base by the catalog's hub id."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from tests.worker.conftest import ROOT, TINY, chat_rows

pytestmark = pytest.mark.worker

JOB_BOUND_S = 90.0
LONG_LINE = 12  # 1-based line of the example whose user turn fills max_seq_len


def rows_with_a_long_prompt() -> list[dict]:
    rows = chat_rows(11, answer_words=2)
    long = {"messages": [{"role": "user", "content": "Tell me about this. " * 60},
                         {"role": "assistant", "content": "It is long."}]}
    rows.insert(LONG_LINE - 1, long)
    rows[0]["messages"][0]["name"] = "alice"  # a key training ignores: warned with its line
    return rows


def texts_of(data: bytes) -> list[tuple[str, str]]:
    """(name, text) of a download: the raw bytes (a gzip header names its source file), then each member
    of a .tar.gz."""
    raw = ("(raw)", data.decode("utf-8", "replace"))
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            return [raw] + [(m.name, tar.extractfile(m).read().decode("utf-8", "replace"))
                            for m in tar.getmembers() if m.isfile()]
    except tarfile.ReadError:
        return [raw]


def test_dropped_examples_are_named_and_fail_on_request(make_settings, start_worker, make_service):
    settings = make_settings()
    service = make_service(settings)
    start_worker(settings)
    file_id = service.upload(rows_with_a_long_prompt())
    method = {"max_seq_len": 64}
    # batch size 1: 12 steps for the upload's 12 examples, so save_every 12 is accepted; the tokenizer
    # leaves 11, and the run of 11 steps can never save at step 12: warned, the job goes on
    job = service.create_job(file_id, method={**method, "save_every": 12}, hyperparameters={"batch_size": 1})
    assert job["progress"]["total_steps"] == 12
    strict = service.create_job(file_id, method={**method, "on_truncation": "fail"})

    done = service.wait(job["id"], {"succeeded", "failed"}, JOB_BOUND_S)
    assert done["status"] == "succeeded", done["error"]
    report = done["data_report"]["training_file"]
    assert (report["valid_examples"], report["usable_examples"]) == (12, 11)
    assert (report["dropped_no_target"], report["dropped_lines"]) == (1, [LONG_LINE])
    assert LONG_LINE not in report["truncated_lines"] and report["max_seq_len"] == 64   # named once: dropped
    assert report["path"] == "train.jsonl" and report["file_id"] == file_id
    assert report["ignored_keys"] == {"messages[].name": {"count": 1, "lines": [1]}}
    events = service.events(job["id"])
    [checked] = [e for e in events if e["message"].startswith("Checked training file")]
    assert checked["level"] == "warn"
    assert (f"12 examples, 11 used (max_seq_len 64); 1 example(s) dropped, no target token left after truncation "
            f"to 64 tokens (lines {LONG_LINE})") in checked["message"]
    assert "messages[].name is ignored on 1 line(s) (1)" in checked["message"]
    [started] = [e for e in events if e["message"].startswith("Training started")]
    assert started["data"]["train_examples"] == 11 and started["data"]["total_steps"] == 11
    assert done["progress"]["total_steps"] == done["progress"]["steps_completed"] == 11
    [unhonoured] = done["warnings"]
    assert (unhonoured["code"], unhonoured["param"], unhonoured["total_steps"]) == (
        "setting_not_honoured", "method.save_every", 11)
    assert unhonoured["message"].startswith("method.save_every: is 12, more than the run's 11 optimizer steps (11 "
                                            "training examples in batches of hyperparameters.batch_size 1 ")
    assert any(e["level"] == "warn" and e["message"] == unhonoured["message"] for e in events)

    failed = service.wait(strict["id"], {"succeeded", "failed"}, JOB_BOUND_S)
    assert failed["status"] == "failed"
    err = failed["error"]
    assert (err["code"], err["param"]) == ("invalid_file", "training_file")
    assert err["message"].startswith("train.jsonl: ") and f"(lines {LONG_LINE})" in err["message"]
    assert "on_truncation is 'fail'" in err["message"]
    messages = [e["message"] for e in service.events(strict["id"])]
    assert not any(m.startswith("Training started") for m in messages)  # the model never loaded
    assert failed["data_report"]["training_file"]["dropped_lines"] == [LONG_LINE]


def test_no_download_event_or_object_names_a_worker_path(make_settings, start_worker, make_service, model_dir,
                                                          tmp_path_factory):
    settings = make_settings()
    service = make_service(settings)
    start_worker(settings)
    job = service.create_job(validation_file=service.upload(chat_rows(4)),
                             method={"save_every": 2, "eval_every": 2}, hyperparameters={"max_steps": 4})
    done = service.wait(job["id"], {"succeeded", "failed"}, JOB_BOUND_S)
    assert done["status"] == "succeeded", done["error"]
    get = lambda url: service.client.get(url, headers=service.headers)  # noqa: E731
    base = f"/v1/fine_tuning/jobs/{job['id']}"
    downloads: dict[str, bytes] = {}
    for art in get(f"{base}/artifacts").json()["data"]:
        downloads[art["name"]] = get(f"{base}/artifacts/{art['name']}").content
    for ck in get(f"{base}/checkpoints").json()["data"]:
        downloads[ck["id"]] = get(f"{base}/checkpoints/{ck['id']}/adapter").content
    for fid in done["result_files"]:
        downloads[fid] = get(f"/v1/files/{fid}/content").content
    downloads["job"] = json.dumps(get(base).json()).encode()
    downloads["events"] = json.dumps(service.events(job["id"])).encode()
    assert {"adapter.tar.gz", "config.json", "summary.json", "metrics.csv"} <= set(downloads)
    assert len([k for k in downloads if k.startswith("ftckpt-")]) == 2  # steps 2 and 4 (the last step's)

    forbidden = {str(tmp_path_factory.getbasetemp()), str(model_dir), str(Path.home()) + "/", str(ROOT),
                 str(settings.resolved_runs_dir), "/tmp", ".tar\x00"}  # ".tar\0": a gzip header's file name
    for name, data in downloads.items():
        for member, text in texts_of(data):
            for path in forbidden:
                assert path not in text, f"{name} {member} names {path}"

    adapter = dict(texts_of(downloads["adapter.tar.gz"]))
    assert json.loads(adapter["adapter/adapter_config.json"])["base_model_name_or_path"] == TINY
    assert f"base_model: {TINY}" in adapter["adapter/README.md"]
    config = json.loads(downloads["config.json"])
    assert config["model"]["name_or_path"] == TINY and config["output_dir"] == "."
    assert config["data"]["train_file"] == f"{done['training_file']}.jsonl"
    assert config["data"]["validation_file"] == f"{done['validation_file']}.jsonl"
    summary = json.loads(downloads["summary.json"])
    assert (summary["adapter_dir"], summary["run_dir"]) == ("adapter", ".")
    assert summary["plots"] and all(p.startswith("plots/") for p in summary["plots"])
