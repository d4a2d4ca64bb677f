"""`worker.training.divergence.DivergenceWatch` on both database backends, fed the trainer's reports: a train
loss whose last-3-step mean explodes past 3x the first step's, or an eval loss past 1.25x its start, gives one
`warn` event, the job's `warnings` entry and the summary's `divergence`; with `stop_on_divergence` it asks the trainer
to stop. Steady, improving or briefly spiking runs, and NaN losses, give nothing."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from lcsb_core.training.callbacks import EvalReport, StepReport
from lcsb_service.models import Job, JobEvent
from tests.worker.test_reaper import add_job, db  # noqa: F401 - the two-backend database fixture
from worker.training.divergence import DivergenceWatch


def step(n: int, loss: float) -> StepReport:
    return StepReport(step=n, total_steps=100, loss=loss, lr=0.9, grad_norm=1.0, tokens=64, target_tokens=32,
                      tokens_per_s=100.0, step_time_s=0.1, peak_memory_mib=100.0)


def feed(watch: DivergenceWatch, losses: list[float]) -> None:
    for n, loss in enumerate(losses, start=1):
        if watch.should_cancel():
            return
        watch.on_step(step(n, loss))


def warnings_of(db, job_id: str) -> tuple[list, list[JobEvent]]:  # noqa: F811
    with db.session() as s:
        job = s.get(Job, job_id)
        events = list(s.scalars(select(JobEvent).where(JobEvent.job_id == job_id)))
        return job.warnings, events


# a run like the (learning rate 0.9, loss 1.1 -> 18.3, all finite)
EXPLODING = [1.1, 1.0, 1.2, 1.1, 1.1, 1.5, 2.4, 3.9, 6.0, 9.5, 13.0, 18.3]


def test_an_exploding_train_loss_warns_once_and_the_summary_says_so(db, tmp_path):  # noqa: F811
    job_id = add_job(db, running=True)
    (tmp_path / "summary.json").write_text(json.dumps({"steps": 12, "final_train_loss": 18.3}))
    watch = DivergenceWatch(db, job_id, tmp_path)
    feed(watch, EXPLODING)
    assert watch.verdict is not None and not watch.should_cancel()  # warning only: training goes on
    # first step 1.1; at step 8 the last three average (1.5 + 2.4 + 3.9) / 3 = 2.6 < 3.3, at step 9
    # (2.4 + 3.9 + 6.0) / 3 = 4.1 > 3 x 1.1
    assert watch.verdict["criterion"] == "train_loss" and watch.verdict["step"] == 9
    assert watch.verdict["start"] == pytest.approx(1.1) and watch.verdict["now"] == pytest.approx(4.1)
    warnings, events = warnings_of(db, job_id)
    assert warnings == [watch.verdict]
    warned = [e for e in events if e.level == "warn"]
    assert len(warned) == 1 and warned[0].message.startswith("Training diverged at step 9: the train loss exploded")
    assert "stop_on_divergence" in warned[0].message and warned[0].data["criterion"] == "train_loss"
    summary = {"steps": 12, "final_train_loss": 18.3}
    watch.on_end(summary)
    assert summary["divergence"] == watch.verdict
    assert json.loads((tmp_path / "summary.json").read_text())["divergence"] == watch.verdict


def test_stop_on_divergence_asks_the_trainer_to_stop(db, tmp_path):  # noqa: F811
    watch = DivergenceWatch(db, add_job(db, running=True), tmp_path, stop=True)
    feed(watch, EXPLODING)
    assert watch.stopped and watch.should_cancel() and watch.verdict["step"] == 9


@pytest.mark.parametrize("losses", [
    [2.0, 1.8, 1.7, 1.5, 1.4, 1.3, 1.2, 1.1, 1.0, 0.9, 0.9, 0.8],       # learning
    [1.1] * 12,                                                           # flat
    [1.1, 1.0, 1.2, 1.1, 1.1, 1.0, 1.0, 1.0, 1.0, 6.0, 1.0, 1.0],         # one spike: the recent mean stays < 3x
    [1.1, 1.0, 1.2, 1.1, 1.1, float("nan"), 2.0, 2.5, 3.0, 3.2, 3.2, 3.1],  # NaN skipped; 2.9x stays under 3x
])
def test_steady_runs_give_nothing(db, tmp_path, losses):  # noqa: F811
    job_id = add_job(db, running=True)
    watch = DivergenceWatch(db, job_id, tmp_path)
    feed(watch, losses)
    summary = {"steps": len(losses)}
    watch.on_end(summary)
    assert watch.verdict is None and "divergence" not in summary
    warnings, events = warnings_of(db, job_id)
    assert warnings is None and not [e for e in events if e.level == "warn"]


def test_eval_loss_well_above_its_start(db, tmp_path):  # noqa: F811
    job_id = add_job(db, running=True)
    watch = DivergenceWatch(db, job_id, tmp_path)
    for n, loss in ((0, 2.0), (5, 1.8), (10, 2.4)):  # 1.2x: within the limit
        watch.on_eval(EvalReport(step=n, eval_loss=loss, eval_token_accuracy=0.1, eval_target_tokens=100))
    assert watch.verdict is None
    watch.on_eval(EvalReport(step=15, eval_loss=2.6, eval_token_accuracy=0.1, eval_target_tokens=100))  # 1.3x
    assert watch.verdict["criterion"] == "eval_loss" and watch.verdict["step"] == 15
    assert watch.verdict["start"] == 2.0 and watch.verdict["now"] == 2.6


def test_the_final_eval_loss_is_checked_at_the_end(db, tmp_path):  # noqa: F811
    """A job whose only evaluations are the trainer's before and after numbers."""
    watch = DivergenceWatch(db, add_job(db, running=True), tmp_path)
    summary = {"steps": 40, "eval_loss_before": 1.1, "eval_loss_after": 18.3}
    watch.on_end(summary)
    assert summary["divergence"]["criterion"] == "eval_loss" and summary["divergence"]["step"] == 40


@pytest.mark.worker
@pytest.mark.integration
def test_a_real_run_that_diverges(make_settings, start_worker, make_service, model_dir):
    """On a real worker, SmolLM2-135M at learning rate 0.9 (the issue's run: the loss climbs from about 1
    to well past 3x, all finite). Without the option the job succeeds with the `diverged` warning on the
    job object and in its summary artifact; with it, the job fails `diverged`."""
    from lcsb_core.models.gguf_import import ensure_default_model

    smol = ensure_default_model()
    settings = make_settings(model_dirs=[model_dir, smol.parent])
    service = make_service(settings)
    start_worker(settings)
    hot = {"model": smol.name, "hyperparameters": {"learning_rate": 0.9, "n_epochs": 1},
           "method": {"lora": {"rank": 8, "alpha": 16}}}
    warned = service.create_job(**hot)
    done = service.wait(warned["id"], {"succeeded", "failed"}, 300)
    print("[divergence] train losses", [round(e["data"]["train_loss"], 2) for e in service.events(done["id"])
                     if e["type"] == "metrics" and "train_loss" in (e["data"] or {})])
    assert done["status"] == "succeeded", done["error"]
    assert [w["code"] for w in done["warnings"]] == ["diverged"]
    assert any(e["level"] == "warn" and e["message"].startswith("Training diverged")
               for e in service.events(done["id"]))
    summary = service.client.get(f"/v1/fine_tuning/jobs/{done['id']}/artifacts/summary.json", headers=service.headers)
    assert summary.json()["divergence"]["code"] == "diverged"
    stopped = service.create_job(**{**hot, "method": {**hot["method"], "stop_on_divergence": True}})
    failed = service.wait(stopped["id"], {"succeeded", "failed"}, 300)
    assert failed["status"] == "failed" and failed["error"]["code"] == "diverged", failed
    assert "stop_on_divergence" in failed["error"]["message"] and failed["method"]["stop_on_divergence"] is True
    assert failed["progress"]["steps_completed"] < failed["progress"]["total_steps"]
