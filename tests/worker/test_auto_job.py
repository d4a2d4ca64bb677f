"""A real SmolLM2-135M job with `lcsb.schedule` auto through the service and a real worker (issue 47):
32 GSM8K examples at batch 1, so 32 planned steps, the shortest run on which `auto` may switch. The job
object states the plan and why at creation; the first 4 steps train every layer; after them one event and
the job object's `method.lcsb.auto.decision` state the lower-layer share the probe measured, the threshold
and the schedule chosen, and the later steps train what that decision says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lcsb_core.data import gsm8k_to_chat
from lcsb_core.training.default_schedule import PROBE_STEPS, SWITCH_THRESHOLD, choose_auto
from lcsb_core.training.schedules import make_schedule

pytestmark = [pytest.mark.worker, pytest.mark.integration]
GSM8K = Path(__file__).resolve().parents[3] / "shared" / "data" / "gsm8k" / "train.jsonl"
STEPS = 32
LAYERS = 30


def test_auto_probes_then_states_and_follows_its_decision(make_settings, start_worker, make_service, model_dir):
    from lcsb_core.models.gguf_import import ensure_default_model

    smol = ensure_default_model()
    settings = make_settings(model_dirs=[model_dir, smol.parent])
    service = make_service(settings)
    start_worker(settings)
    rows = [gsm8k_to_chat(json.loads(line)) for line in GSM8K.read_text().splitlines()[:STEPS]]
    job = service.create_job(service.upload(rows), model=smol.name, hyperparameters={"batch_size": 1, "n_epochs": 1},
                             method={"quantization": "nf4", "max_seq_len": 512, "lcsb": {},
                                     "lora": {"rank": 8, "alpha": 16}})
    plan = choose_auto(smol.name, STEPS).to_dict()
    assert job["progress"]["total_steps"] == STEPS
    assert (job["method"]["lcsb"]["schedule"], job["method"]["lcsb"]["auto"]) == ("auto", plan)
    done = service.wait(job["id"], {"succeeded", "failed", "cancelled"}, 300)
    events = service.events(job["id"])
    assert done["status"] == "succeeded", (done["error"], [e["message"] for e in events])

    started = next(e for e in events if e["message"].startswith("Training started"))
    assert started["data"]["auto"] == plan and started["data"]["schedule"] == "auto"
    assert "auto: all 30 layers for 4 probe steps, then tail" in started["message"]
    decided = [e for e in events if e["message"].startswith("auto: ")]
    assert len(decided) == 1
    decision = decided[0]["data"]["schedule_decision"]
    threshold = SWITCH_THRESHOLD[smol.name]
    assert (decision["probe_steps"], decision["lower_layers"], decision["threshold"], decision["from_step"]) == (
        PROBE_STEPS, 22, threshold, PROBE_STEPS + 1)
    shares = decision["lower_share_per_step"]
    assert len(shares) == PROBE_STEPS and all(0.0 < s < 1.0 for s in shares)
    assert decision["lower_share"] == pytest.approx(sum(shares) / len(shares), abs=1e-4)
    chosen = "tail" if decision["lower_share"] < threshold else "full"
    assert decision["schedule"] == chosen
    assert decided[0]["message"] == (
        f"auto: the lower 22 layers carried {decision['lower_share']:.1%} of the gradient over the first 4 steps "
        f"(threshold {threshold:.1%}): " + ("switching to tail" if chosen == "tail" else
                                             "staying at full depth (all layers)") + " from step 5")
    assert done["method"]["lcsb"]["auto"] == {**plan, "decision": decision}  # the job object states it too

    selected = {e["data"]["step"]: e["data"]["selected_layers"] for e in events
                if e["type"] == "metrics" and "selected_layers" in (e["data"] or {})}
    assert sorted(selected) == list(range(1, STEPS + 1))
    assert all(selected[s] == list(range(LAYERS)) for s in range(1, PROBE_STEPS + 1))
    after = make_schedule("tail", num_layers=LAYERS, k=8) if chosen == "tail" else None
    for step in range(PROBE_STEPS + 1, STEPS + 1):
        expected = sorted(after.layers_for_step(step - 1 - PROBE_STEPS)) if after else list(range(LAYERS))
        assert selected[step] == expected, step
