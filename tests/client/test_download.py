"""`lcsb jobs download` and `lcsb jobs checkpoints` against the live API: a run folder built here (a
small PEFT adapter, selection history, metrics, plots, checkpoints) is published with
lcsb_service.artifacts the way the worker publishes it, then downloaded; the adapter arrives unpacked
as a PEFT folder whose tensors load."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from lcsb_service import transitions
from lcsb_service.artifacts import publish_checkpoint, publish_run
from tests.client.conftest import ONE_BACKEND
from tests.client.helpers import new_job

pytestmark = ONE_BACKEND
RUN_FILES = ("selection_history.jsonl", "metrics.csv", "metrics.jsonl", "summary.json", "config.json",
             "plots/loss.png", "plots/selection_heatmap.png")


def peft_adapter(folder, seed: int) -> None:
    """adapter_config.json + adapter_model.safetensors for LoRA r4 on two layers' q_proj."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    tensors = {f"base_model.model.model.layers.{i}.self_attn.q_proj.lora_{ab}.weight":
               rng.standard_normal(shape).astype(np.float32)
               for i in range(2) for ab, shape in (("A", (4, 64)), ("B", (64, 4)))}
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    (folder / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 4, "lora_alpha": 8, "lora_dropout": 0.0,
        "target_modules": ["q_proj"], "base_model_name_or_path": "SmolLM2-135M-Instruct"}))


@pytest.fixture
def trained(svc, app, alice, tmp_path) -> dict:
    """A succeeded job with checkpoints at steps 2 and 4 and its run folder published."""
    job_id = new_job(svc, tmp_path)["id"]
    run = tmp_path / "run"
    peft_adapter(run / "adapter", seed=0)
    for step in (2, 4):
        peft_adapter(run / "checkpoints" / f"step-{step:06d}", seed=step)
        (run / "checkpoints" / f"step-{step:06d}" / "trainer_state.pt").write_bytes(b"optimizer state")
    (run / "plots").mkdir()
    for name in RUN_FILES:
        (run / name).write_bytes(f"{name} of {job_id}\n".encode() * 50)
    with app.state.db.session() as s:
        transitions.claim(s, job_id)
    for step in (2, 4):
        with app.state.db.session() as s:
            publish_checkpoint(s, app.state.storage, job_id=job_id, step=step, fine_tuned_model="ft:smol:dl",
                               folder=run / "checkpoints" / f"step-{step:06d}",
                               metrics={"step": step, "train_loss": 2.0 - step / 10, "valid_loss": 2.5 - step / 10})
    with app.state.db.session() as s:
        result_files = publish_run(s, app.state.storage, job_id=job_id, owner_id=alice.owner_id, run_dir=run)
        transitions.finish(s, job_id, fine_tuned_model="ft:smol:dl", result_files=result_files)
    return {"id": job_id, "run": run}


def same_adapter(got, want) -> None:
    assert sorted(p.name for p in got.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
    assert json.loads((got / "adapter_config.json").read_text())["peft_type"] == "LORA"
    loaded = load_file(str(got / "adapter_model.safetensors"))
    expected = load_file(str(want / "adapter_model.safetensors"))
    assert loaded.keys() == expected.keys() and all(np.array_equal(loaded[k], expected[k]) for k in expected)


def test_download_everything(lcsb, trained, tmp_path):
    out = tmp_path / "out"
    r = lcsb("jobs", "download", trained["id"], "--out", out)
    assert r.exit_code == 0, r.output
    run = trained["run"]
    same_adapter(out / "adapter", run / "adapter")
    for name in RUN_FILES:
        assert (out / name).read_bytes() == (run / name).read_bytes(), name
    written = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert written == sorted(["adapter/adapter_config.json", "adapter/adapter_model.safetensors", *RUN_FILES])
    assert r.stdout.splitlines()[0] == f"{out / 'adapter'}/" and f"{out / 'plots' / 'loss.png'}" in r.stdout
    assert "adapter.tar.gz" in r.stderr  # the download bars


def test_download_a_selection_into_the_default_folder(lcsb, trained, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = lcsb("jobs", "download", trained["id"], "--what", "adapter,selection_history,plots")
    assert r.exit_code == 0, r.output
    out = tmp_path / trained["id"]
    written = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert written == ["adapter/adapter_config.json", "adapter/adapter_model.safetensors",
                       "plots/loss.png", "plots/selection_heatmap.png", "selection_history.jsonl"]
    again = lcsb("jobs", "download", trained["id"], "--what", "metrics")  # into the same folder
    assert again.exit_code == 0 and (out / "metrics.csv").is_file() and (out / "metrics.jsonl").is_file()
    bad = lcsb("jobs", "download", trained["id"], "--what", "weights")
    assert bad.exit_code == 2 and bad.stderr.startswith("error (invalid_value): unknown output 'weights'")
    assert bad.stderr.rstrip().endswith("[--what]")


def test_download_before_the_job_succeeded(lcsb, svc, tmp_path):
    job_id = new_job(svc, tmp_path)["id"]
    r = lcsb("jobs", "download", job_id, "--out", tmp_path / "out")
    assert r.exit_code == 2 and r.stderr.startswith(f"error (no_artifacts): job {job_id} has no outputs")
    assert "status queued" in r.stderr and not (tmp_path / "out").exists()


def test_checkpoints_list_and_download(lcsb, trained, tmp_path):
    r = lcsb("jobs", "checkpoints", trained["id"])
    assert r.exit_code == 0, r.output
    rows = [line.split() for line in r.stdout.splitlines()[1:]]
    assert [(row[1], row[2], row[3]) for row in rows] == [("4", "1.6000", "2.1000"), ("2", "1.8000", "2.3000")]
    assert "ft:smol:dl:ckpt-step-4" in r.stdout
    listed = json.loads(lcsb("jobs", "checkpoints", trained["id"], "--json").stdout)
    out = tmp_path / "ckpts"
    by_step = lcsb("jobs", "checkpoints", trained["id"], "--download", "2", "--out", out)
    assert by_step.exit_code == 0, by_step.output
    assert by_step.stdout.strip() == f"{out / 'step-2'}/"
    same_adapter(out / "step-2", trained["run"] / "checkpoints" / "step-000002")  # no optimizer state
    by_id = lcsb("jobs", "checkpoints", trained["id"], "--download", listed[0]["id"], "--out", out)
    assert by_id.exit_code == 0 and (out / "step-4" / "adapter_model.safetensors").is_file()
    assert sorted(p.name for p in out.iterdir()) == ["step-2", "step-4"]  # archives removed
    missing = lcsb("jobs", "checkpoints", trained["id"], "--download", "99")
    assert missing.exit_code == 2 and missing.stderr.startswith("error (checkpoint_not_found): ")
