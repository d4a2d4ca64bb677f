"""Once with the real base model: SmolLM2-135M-Instruct in NF4 through a worker (CPU), 4 LCSB steps,
a checkpoint, and a PEFT adapter that loads on the base model."""

from __future__ import annotations

import io
import json
import tarfile
import time

import pytest

from lcsb_core.models.gguf_import import ensure_default_model

pytestmark = [pytest.mark.worker, pytest.mark.integration]

BOUND_S = 240.0  # measured about 12 s here (2 CPU cores)


def test_smollm2_job_on_a_worker(make_settings, start_worker, make_service, tmp_path):
    base = ensure_default_model()
    settings = make_settings(model_dirs=[base.parent])
    service = make_service(settings)
    start_worker(settings)
    t0 = time.monotonic()
    job = service.create_job(model=base.name, hyperparameters={"batch_size": 2, "max_steps": 4},
                             method={"quantization": "nf4", "max_seq_len": 128, "lora": {"rank": 8, "alpha": 16},
                                     "lcsb": {"schedule": "topfull", "fraction": 0.25}, "save_every": 2})
    done = service.wait(job["id"], {"succeeded", "failed"}, BOUND_S)
    print(f"[worker] SmolLM2 NF4 job, 4 steps: {time.monotonic() - t0:.0f} s (bound {BOUND_S:.0f} s); "
          f"peak {done['progress']['peak_memory_mib']} MiB, estimate {job['memory_estimate']['total_mib']} MiB")
    assert done["status"] == "succeeded", done["error"]
    losses = [e["data"]["train_loss"] for e in service.events(job["id"]) if "train_loss" in (e["data"] or {})]
    assert len(losses) == 4 and all(0 < x < 20 for x in losses)
    layers = [e["data"] for e in service.events(job["id"]) if e["message"].startswith("Training started")][0]
    assert layers["num_layers"] == 30 and layers["k"] == 8
    r = service.client.get(f"/v1/fine_tuning/jobs/{job['id']}/artifacts/adapter.tar.gz", headers=service.headers)
    tarfile.open(fileobj=io.BytesIO(r.content)).extractall(tmp_path, filter="data")
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "HuggingFaceTB/SmolLM2-135M-Instruct"  # loads anywhere, no path
    assert "base_model: HuggingFaceTB/SmolLM2-135M-Instruct" in (tmp_path / "adapter" / "README.md").read_text()
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), tmp_path / "adapter")
    assert any("lora_A" in n for n, _ in model.named_parameters())
