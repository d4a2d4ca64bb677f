"""The timing benches' own machinery on the tiny model: bench/common/timing.py's interleaved rounds and
per-round ratios, bench/step_time.py's speed-up tables, bench/trainer_overhead.py's stepped Trainer loop
(one optimizer step per call, the same weights as an uninterrupted `train()`) and its service-job mode's
callbacks, and bench/rss_flat.py's step-by-step pairing of two modes."""

from __future__ import annotations

import pytest
import torch

from bench import rss_flat, step_time
from bench import trainer_overhead as overhead
from bench.common import timing
from lcsb_core.training.config import TrainConfig
from lcsb_core.training.trainer import Trainer
from tests.core.tiny import VOCAB, tiny_lora


def test_interleave_rotates_the_order_and_times_only_the_timed_rounds():
    calls: list[str] = []
    cycles = [[lambda: calls.append("a")], [lambda: calls.append("b1"), lambda: calls.append("b2")]]
    times, peaks = timing.interleave(cycles, ["a", "b"], torch.device("cpu"), rounds=2, warmup_rounds=1)
    assert calls == ["a", "b1", "b2", "b1", "b2", "a", "a", "b1", "b2"]
    assert [len(t) for t in times] == [2, 2] and all(p > 0 for p in peaks)
    assert timing.round_ratio([2.0, 6.0, 3.0], [1.0, 2.0, 3.0]) == pytest.approx(2.0)


def _row(schedule: str, k: int, rounds: list[float]) -> dict:
    return dict(model="m", quant="nf4", schedule=schedule, k=k, checkpointing=False, step_s_rounds=rounds)


def test_speedups_are_per_round_ratios_and_compare_shows_both_runs():
    # per-round ratios of top: 2.0, 1.6, 2.5 to full and 1.5, 1.2, 1.875 to freeze (medians 2.0 and 1.5);
    # the ratios of the medians would be 4.0 / 2.5 = 1.6 and 3.0 / 2.5 = 1.2
    run_a = [_row("full", 4, [2.0, 4.0, 10.0]), _row("freeze", 1, [1.5, 3.0, 7.5]), _row("top", 1, [1.0, 2.5, 4.0])]
    ratios = step_time.speedups(run_a)
    assert ratios[("m", "nf4", "top", 1, False)] == pytest.approx({"vs full": 2.0, "vs freeze": 1.5})
    assert ratios[("m", "nf4", "full", 4, False)] == {}
    run_b = [_row("full", 4, [2.2]), _row("freeze", 1, [1.5]), _row("top", 1, [1.0])]
    lines = step_time.compare(run_a, run_b).splitlines()
    top_vs_full = next(x for x in lines if "| top |" in x and "vs full" in x)
    assert "2.00x | 2.20x | +10.0% |" in top_vs_full
    assert not any("| full |" in x for x in lines[2:])  # full has no ratio to itself


def _trainer(tmp_path, name: str, callbacks=()) -> Trainer:
    cfg = TrainConfig.from_dict({
        "data": {"train_file": "random"}, "output_dir": str(tmp_path / name), "batch_size": 2, "max_steps": 5,
        "seed": 0, "lcsb": {"schedule": "topfull", "k": 1, "full_every": 2}, "lora": {"rank": 4, "alpha": 8},
        "optim": {"learning_rate": 1e-2, "lr_schedule": "constant"}})
    return Trainer(cfg, model=tiny_lora(0), train_dataset=overhead.random_dataset(VOCAB, 2, 12), callbacks=callbacks)


def test_stepped_loop_runs_one_step_per_call_and_trains_as_train_does(tmp_path):
    loop = overhead.SteppedLoop()
    stepped = loop.trainer = _trainer(tmp_path, "stepped", callbacks=[loop])
    for n in range(1, 6):
        loop.step()
        assert [r.step for r in loop.reports] == list(range(1, n + 1))
    summary = loop.finish()
    assert summary is not None and summary["steps"] == 5
    plain = _trainer(tmp_path, "plain")
    plain.train()
    for a, b in zip(stepped.params, plain.params, strict=True):
        assert torch.equal(a, b)


def test_service_job_callbacks_report_each_step_to_the_job_row_as_the_worker_does(tmp_path):
    from sqlalchemy import select

    from lcsb_service.models import Job, JobEvent

    callbacks = overhead.service_job_callbacks(tmp_path, "tiny")
    loop = overhead.SteppedLoop()
    loop.trainer = _trainer(tmp_path, "job", callbacks=[*callbacks, loop])
    loop.step()
    loop.step()
    reporter = callbacks[1]
    with reporter.db.session() as s:
        job = s.get(Job, "ftjob-bench")
        assert (job.status, job.steps_completed, job.total_steps) == ("running", 2, 5)
        assert job.heartbeat_at is not None and job.trained_tokens == 2 * 2 * 12
        steps = [e.data["step"] for e in s.scalars(select(JobEvent).where(JobEvent.type == "metrics"))]
    assert steps == [1, 2]
    assert loop.finish()["steps"] == 5


def test_rss_flat_pairs_two_modes_step_by_step():
    def result(mode: str, seconds: list[float], peaks: list[float]) -> dict:
        return {"mode": mode, "rows": [{"seconds": t, "peak_mib": p} for t, p in zip(seconds, peaks, strict=True)]}

    # 8 steps; steps 4 and 8 are topfull's full steps
    base = result("a", [2, 2, 2, 6, 2, 2, 2, 6], [100, 100, 100, 200, 100, 100, 100, 200])
    other = result("b", [1, 2, 2, 3, 1, 2, 2, 3], [150, 150, 150, 300, 150, 150, 150, 300])
    line = rss_flat.pair_ratios(base, other)
    assert line.startswith("b vs a: total 24 / 16 s = 1.500x; per step 1.500x (IQR 1.000-2.000)")
    assert "full steps 2.000x, top-k 1.000x" in line and "step peak 1.500x" in line
    assert line.endswith("highest 200 / 300 MiB")
