"""A real worker job (tiny Llama with SmolLM2's tokenizer) with `method.select_checkpoint` best and
`method.early_stopping`: the job succeeds short of its planned steps, says why in its events, states its
progress as the steps it ran, and its `result` names the selected step, whose checkpoint's adapter is
bit for bit the job's final adapter download. The last step that ran is not lost (issue 48): it is the
checkpoint list's newest entry, `result.final_checkpoint`, with its own weights, with or without
`save_every`."""

from __future__ import annotations

import pytest

from tests.worker.conftest import chat_rows, safetensors_of

pytestmark = pytest.mark.worker

JOB_BOUND_S = 90.0


@pytest.mark.parametrize("save_every", [2, 0])
def test_best_checkpoint_and_early_stop_on_the_job(make_settings, start_worker, make_service, save_every):
    settings = make_settings()
    service = make_service(settings)
    start_worker(settings)
    # 12 examples in batches of 2 for 2 epochs: 12 planned steps. Evaluated (and saved) every 2 steps; no
    # evaluation gains more than 100 nats, so after the first trained one (step 2) two more (4, 6) end the run.
    # A learning rate high for this model makes the eval loss fall, then rise
    job = service.create_job(validation_file=service.upload(chat_rows(4)),
                             hyperparameters={"n_epochs": 2, "learning_rate": 0.05},
                             method={"eval_every": 2, "save_every": save_every,
                                     "select_checkpoint": {"mode": "best", "metric": "eval_loss"},
                                     "early_stopping": {"metric": "eval_loss", "patience": 2, "min_delta": 100.0}})
    assert job["progress"]["total_steps"] == 12
    done = service.wait(job["id"], {"succeeded", "failed", "cancelled"}, JOB_BOUND_S)
    events = service.events(job["id"])
    messages = [e["message"] for e in events]
    assert done["status"] == "succeeded", (done["error"], messages)
    assert done["progress"]["steps_completed"] == done["progress"]["total_steps"] == 6
    assert done["progress"]["percent"] == 100.0
    assert [e["data"]["step"] for e in events if "train_loss" in (e["data"] or {})] == [1, 2, 3, 4, 5, 6]
    evals = {e["data"]["step"]: e["data"]["valid_loss"] for e in events
             if "valid_loss" in (e["data"] or {})}
    assert sorted(evals) == [0, 2, 4, 6]
    best = min((s for s in evals if s > 0), key=lambda s: (evals[s], s))  # the lowest; the earlier of a tie
    assert best == 4  # at this learning rate the eval loss falls, then rises: a mid-run best with a checkpoint

    stopped = next(e for e in events if e["message"].startswith("Training stopped early"))
    assert stopped["message"].startswith("Training stopped early at step 6 of 12: eval_loss did not improve by "
                                         "more than 100 in 2 evaluations (best ")
    assert stopped["data"]["step"] == 6 and stopped["data"]["best_step"] == 2
    ckpts = service.client.get(f"/v1/fine_tuning/jobs/{job['id']}/checkpoints", headers=service.headers).json()["data"]
    by_step = {c["step_number"]: c for c in ckpts}
    # newest first; the stop step (the last that ran) is saved too, so its weights are not lost
    assert [c["step_number"] for c in ckpts] == ([6, 4, 2] if save_every else [6])
    fine_tuned_model = done["fine_tuned_model"]
    assert by_step[6]["fine_tuned_model_checkpoint"] == f"{fine_tuned_model}:ckpt-step-6"

    result = done["result"]
    chosen = result["selected_checkpoint"]
    assert {k: chosen[k] for k in ("mode", "metric", "step")} == {"mode": "best", "metric": "eval_loss", "step": best}
    assert chosen["value"] == evals[best]
    assert chosen["fine_tuned_model_checkpoint"] == (by_step[best]["fine_tuned_model_checkpoint"] if save_every
                                                      else None)  # fine_tuned_model is step 4's; no checkpoint then
    assert result["final_checkpoint"] == {"step": 6, "fine_tuned_model_checkpoint": f"{fine_tuned_model}:ckpt-step-6"}
    assert result["stopped_early"] == stopped["data"] and (result["steps"], result["planned_steps"]) == (6, 12)
    selected = next(e for e in events if e["message"].startswith("Selected step"))
    assert selected["message"].startswith(f"Selected step {best} (eval_loss ")
    assert selected["message"].endswith(f"as the job's model; the last step's adapter (step 6) is checkpoint "
                                        f"{fine_tuned_model}:ckpt-step-6")
    assert selected["data"]["step"] == best

    final = service.client.get(f"/v1/fine_tuning/jobs/{job['id']}/artifacts/adapter.tar.gz", headers=service.headers)
    assert final.status_code == 200
    a = safetensors_of(final.content)
    assert len(a) > 0

    def checkpoint(step: int) -> dict:
        r = service.client.get(f"/v1/fine_tuning/jobs/{job['id']}/checkpoints/{by_step[step]['id']}/adapter",
                               headers=service.headers)
        assert r.status_code == 200
        return safetensors_of(r.content)

    last = checkpoint(6)  # the last step's weights: kept, and not the delivered ones
    assert last.keys() == a.keys() and any(not a[k].equal(last[k]) for k in a)
    if save_every:
        b = checkpoint(best)  # the delivered adapter is step 4's, bit for bit
        assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)
        other = checkpoint(2)
        assert any(not a[k].equal(other[k]) for k in a)
    summary = service.client.get(f"/v1/fine_tuning/jobs/{job['id']}/artifacts/summary.json", headers=service.headers)
    assert summary.json()["stopped_early"]["step"] == 6 and summary.json()["selected_checkpoint"]["step"] == best
    print(f"[worker] selection job: eval loss by step {evals}, selected {best}")
