"""Helpers of the client tests: datasets on disk, a job created through the client's Service, and
events/transitions written the way the worker writes them."""

from __future__ import annotations

from pathlib import Path

from lcsb_client.service import Service
from lcsb_service import transitions
from lcsb_service.events import add_event, record_progress
from tests.api.helpers import SMOL, chat_lines


def write_dataset(path: Path, n: int = 12, extra: bytes = b"") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(chat_lines(n) + extra)
    return path


def new_job(svc: Service, tmp_path: Path, **request) -> dict:
    """A queued job on a fresh 12-example dataset."""
    f = svc.upload_file(write_dataset(tmp_path / "train.jsonl"))
    return svc.create_job({"model": SMOL, "training_file": f["id"], **request})


def step_data(step: int, total: int) -> dict:
    """A step's metrics event data, as worker/reporter.py writes it."""
    return {"step": step, "total_steps": total, "train_loss": round(1.0 - step / 10, 4), "lr": 1e-4,
            "grad_norm": 0.5, "tokens": 512, "tokens_per_s": 1234.5, "step_time_s": 0.4,
            "peak_memory_mib": 811.6 + step, "selected_layers": [step % 4]}


def start(app, job_id: str, total: int) -> None:
    """queued -> running, then the "Training started" event."""
    with app.state.db.session() as s:
        transitions.claim(s, job_id, worker="test-worker")
    with app.state.db.session() as s:
        add_event(s, job_id, f"Training started: {total} steps, 30 layers (8 trained per step, cyclic)",
                  data={"total_steps": total, "num_layers": 30, "k": 8, "start_step": 0})
        record_progress(s, job_id, steps_completed=0, total_steps=total)


def step(app, job_id: str, n: int, total: int) -> None:
    """One optimizer step's progress and metrics event."""
    data = step_data(n, total)
    with app.state.db.session() as s:
        record_progress(s, job_id, steps_completed=n, total_steps=total, trained_tokens=512 * n,
                        peak_memory_mib=data["peak_memory_mib"], elapsed_s=0.4 * n)
        add_event(s, job_id, f"Step {n}/{total}: training loss={data['train_loss']:.4f}", type="metrics",
                  data=data)


def evaluate(app, job_id: str, n: int, total: int) -> None:
    with app.state.db.session() as s:
        add_event(s, job_id, f"Step {n}/{total}: validation loss=0.7000, token accuracy=0.800", type="metrics",
                  data={"step": n, "valid_loss": 0.7, "valid_mean_token_accuracy": 0.8})


def run_to_success(app, job_id: str, total: int = 5) -> None:
    start(app, job_id, total)
    for n in range(1, total + 1):
        step(app, job_id, n, total)
    evaluate(app, job_id, total, total)
    with app.state.db.session() as s:
        transitions.finish(s, job_id, fine_tuned_model="ft:smol:test", trained_tokens=512 * total)
