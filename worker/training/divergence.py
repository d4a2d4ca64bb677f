"""Divergence that stays finite: a trainer callback that notices when a run is getting worse instead of
better, without any NaN (those fail the job as `nan_loss` on their own).

    watch = DivergenceWatch(db, job_id, run_dir, stop=job.method.get("stop_on_divergence", False))
    Trainer(cfg, callbacks=[watch, reporter], ...)

A run has diverged when either
- the train loss explodes: the mean of the last `WINDOW` step losses exceeds `TRAIN_FACTOR` times
  the first step's loss (the base model's, before any update: a high learning rate can blow up from
  the second step on), checked from step WINDOW + 1 on, or
- the eval loss rises well above its start: an evaluation's loss exceeds `EVAL_FACTOR` times the
  first evaluation's (at step 0 when the job evaluates; also checked on the run's final numbers).

The first time it happens the job gets a `warn` event and a `diverged` entry in its `warnings`
(job object); at the end the run's summary (`summary.json`, the `summary` artifact) gets a
`divergence` entry. With `method.stop_on_divergence` the run stops before its next step and
`stopped` is set: the job then fails with code `diverged`.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

from lcsb_core.training.callbacks import EvalReport, StepReport, TrainerCallback
from lcsb_service.db import Database
from lcsb_service.events import add_event, add_warning

TRAIN_FACTOR = 3.0   # recent mean train loss / the first step's loss
EVAL_FACTOR = 1.25   # eval loss / first eval loss
WINDOW = 3           # steps in the recent mean
log = logging.getLogger(__name__)


class DivergenceWatch(TrainerCallback):
    """See the module docstring. `verdict` is the first divergence found (a dict with `code`,
    `criterion`, `step`, `message` and the losses compared), or None."""

    def __init__(self, db: Database, job_id: str, run_dir: str | Path, *, stop: bool = False) -> None:
        self.db, self.job_id, self.run_dir, self.stop = db, job_id, Path(run_dir), stop
        self.losses: list[float] = []
        self.first_eval: float | None = None
        self.verdict: dict[str, Any] | None = None

    @property
    def stopped(self) -> bool:
        """True when the watch asked the trainer to stop (diverged, with `stop_on_divergence`)."""
        return self.stop and self.verdict is not None

    def on_step(self, report: StepReport) -> None:
        if not math.isfinite(report.loss):
            return
        self.losses.append(report.loss)
        if len(self.losses) <= WINDOW:
            return
        first = self.losses[0]
        recent = sum(self.losses[-WINDOW:]) / WINDOW
        if first > 0 and recent > TRAIN_FACTOR * first:
            self._flag("train_loss", report.step, first, recent,
                       f"the train loss exploded: mean {recent:.3g} over the last {WINDOW} steps, "
                       f"{recent / first:.1f}x the first step's {first:.3g} (limit {TRAIN_FACTOR:g}x)")

    def on_eval(self, report: EvalReport) -> None:
        if not math.isfinite(report.eval_loss):
            return
        if self.first_eval is None:
            self.first_eval = report.eval_loss
        else:
            self._check_eval(report.step, self.first_eval, report.eval_loss)

    def on_end(self, summary: dict) -> None:
        before, after = summary.get("eval_loss_before"), summary.get("eval_loss_after")
        if isinstance(before, (int, float)) and isinstance(after, (int, float)) and math.isfinite(after):
            self._check_eval(summary.get("steps", 0), float(before), float(after))
        if self.verdict is None:
            return
        summary["divergence"] = self.verdict
        path = self.run_dir / "summary.json"
        try:
            data = json.loads(path.read_text())
            data["divergence"] = self.verdict
            path.write_text(json.dumps(data, indent=2))
        except (OSError, ValueError):
            log.warning("job %s: could not add the divergence to %s", self.job_id, path, exc_info=True)

    def should_cancel(self) -> bool:
        return self.stopped

    def _check_eval(self, step: int, first: float, loss: float) -> None:
        if first > 0 and loss > EVAL_FACTOR * first:
            self._flag("eval_loss", step, first, loss,
                       f"the eval loss rose to {loss:.3g}, {loss / first:.2f}x its start {first:.3g} "
                       f"(limit {EVAL_FACTOR:g}x)")

    def _flag(self, criterion: str, step: int, start: float, now: float, why: str) -> None:
        if self.verdict is not None:
            return
        action = ("stopping (method.stop_on_divergence)" if self.stop
                  else "training goes on; set method.stop_on_divergence to stop such runs")
        self.verdict = {"code": "diverged", "criterion": criterion, "step": step, "start": start, "now": now,
                        "message": f"Training diverged at step {step}: {why}"}
        try:
            with self.db.session() as s:
                add_event(s, self.job_id, f"{self.verdict['message']}; {action}", level="warn",
                          data={k: v for k, v in self.verdict.items() if k != "message"})
                add_warning(s, self.job_id, self.verdict)
        except Exception:  # a database blip must not end the run; the summary still says so
            log.warning("job %s: could not record the divergence", self.job_id, exc_info=True)
