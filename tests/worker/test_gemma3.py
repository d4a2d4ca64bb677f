"""Once with the real Gemma-3-270M: a text job in NF4 through a worker (CPU), 4 LCSB steps of the model's
default schedule (`tail`), and an adapter that names `google/gemma-3-270m` as its base; chat data for the
same model is refused at creation.
Skips only when the model's package is absent (scripts/setup.sh installs and imports it)."""

from __future__ import annotations

import io
import json
import tarfile
import time
from pathlib import Path

import pytest

from lcsb_core.errors import ModelLoadError
from lcsb_core.models.gguf_import import ensure_model
from tests.worker.conftest import chat_rows

pytestmark = [pytest.mark.worker, pytest.mark.integration]

BOUND_S = 400.0  # measured 41 s here (2 CPU cores shared with other jobs); peak 2,431 MiB, estimate 2,699
WIKITEXT = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "wikitext-2" / "valid.txt"


def test_gemma_text_job_on_a_worker(make_settings, start_worker, make_service, tmp_path):
    try:
        base = ensure_model("gemma-3-270m")
    except ModelLoadError as exc:
        if "needs the PyPI package" not in str(exc):
            raise
        pytest.skip(str(exc))
    settings = make_settings(model_dirs=[base.parent])
    service = make_service(settings)
    r = service.client.post("/v1/fine_tuning/jobs", headers=service.headers,
                            json={"model": "gemma-3-270m", "training_file": service.upload(chat_rows(12))})
    assert r.status_code == 400 and r.json()["error"]["param"] == "training_file", r.text
    assert "gemma-3-270m" in r.json()["error"]["message"]
    lines = [ln.strip() for ln in WIKITEXT.read_text().splitlines() if len(ln.strip()) >= 200][:16]
    start_worker(settings)
    t0 = time.monotonic()
    job = service.create_job(service.upload([{"text": t} for t in lines]), model="gemma-3-270m",
                             hyperparameters={"batch_size": 2, "max_steps": 4},
                             method={"quantization": "nf4", "max_seq_len": 128, "lora": {"rank": 8, "alpha": 16},
                                     "lcsb": {}})
    done = service.wait(job["id"], {"succeeded", "failed"}, BOUND_S)
    print(f"[worker] Gemma-3-270M NF4 text job, 4 steps: {time.monotonic() - t0:.0f} s; peak "
          f"{done['progress']['peak_memory_mib']} MiB, estimate {job['memory_estimate']['total_mib']} MiB")
    assert done["status"] == "succeeded", done["error"]
    losses = [e["data"]["train_loss"] for e in service.events(job["id"]) if "train_loss" in (e["data"] or {})]
    assert len(losses) == 4 and all(0 < x < 20 for x in losses)
    started = [e["data"] for e in service.events(job["id"]) if e["message"].startswith("Training started")][0]
    assert started["num_layers"] == 18 and started["k"] == 18
    # no schedule named: `auto` for Gemma is full backprop (lcsb_core.training.default_schedule: no faster schedule was
    # measured to keep 95 % on it), stated with its reason before and at the start
    assert job["method"]["lcsb"]["schedule"] == started["schedule"] == "full"
    assert job["method"]["lcsb"]["auto"] == started["auto"] and started["auto"]["schedule"] == "full"
    r = service.client.get(f"/v1/fine_tuning/jobs/{job['id']}/artifacts/adapter.tar.gz", headers=service.headers)
    tarfile.open(fileobj=io.BytesIO(r.content)).extractall(tmp_path, filter="data")
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "google/gemma-3-270m"
