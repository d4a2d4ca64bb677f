"""Which evaluated adapter a run delivers (`select_checkpoint`: `last` or `best` by a named metric) and
when a run stops before its planned end (`early_stopping`: `patience` evaluations in a row without an
improvement of more than `min_delta`, as Keras' and Hugging Face's `EarlyStopping` count them).

    watch = SelectionWatch(cfg.select_checkpoint, cfg.early_stopping)
    watch.observe(report, params)               # the trainer, after every evaluation
    if watch.stops_run(done, total_steps): ...  # early stopping asked the loop to end after step `done`
    chosen = watch.restore(params)              # at the end: `best` puts the best step's tensors back

Metrics are read by name from `EvalReport.named_metrics()`: `eval_loss` (lower is better),
`eval_token_accuracy` (higher is better) and graded evaluation's `grader/<name>` scores (higher is
better). The step-0 evaluation (the base model, adapter disabled) is no candidate: a job's output is an
adapter trained for at least one step, and patience counts evaluations of trained adapters only; a
NaN value never improves. With `best`, the best evaluation's LoRA tensors are kept in host memory (one
copy of the adapter, exact, so the delivered adapter is bit-identical to a checkpoint saved at that
step); ties keep the earlier step. Torch-free at import: the service validates metric names with it.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lcsb_core.errors import ConfigError, require

if TYPE_CHECKING:
    from lcsb_core.training.callbacks import EvalReport

SELECT_MODES = ("last", "best")
LOWER_IS_BETTER = {"eval_loss": True, "eval_token_accuracy": False}  # the evaluation's own metrics
GRADER_PREFIX = "grader/"  # graded evaluation's scores, e.g. "grader/exact": higher is better


@dataclass
class SelectCheckpointSettings:
    """Which adapter the run delivers (`lcsb_core.training.selection`): `last` (after the final step) or `best`
    (the evaluated step with the best `metric`: `eval_loss`, lower is better; `eval_token_accuracy` or
    a grader's `grader/<name>`, higher is better). `best` needs periodic evaluation
    (`TrainConfig.check_honoured`)."""

    mode: str = "last"
    metric: str = "eval_loss"

    def __post_init__(self) -> None:
        require(self.mode in SELECT_MODES, "select_checkpoint.mode",
               f"must be one of {', '.join(SELECT_MODES)}, got {self.mode!r}")
        check_metric_name(self.metric, "select_checkpoint.metric")


@dataclass
class EarlyStoppingSettings:
    """End the run after `patience` evaluations in a row that do not improve `metric` (named as in
    `SelectCheckpointSettings`) by more than `min_delta` (in the metric's units); the run then ends
    normally, short of its planned steps (`lcsb_core.training.selection`)."""

    metric: str = "eval_loss"
    patience: int = 3
    min_delta: float = 0.0

    def __post_init__(self) -> None:
        check_metric_name(self.metric, "early_stopping.metric")
        require(isinstance(self.patience, int) and self.patience >= 1, "early_stopping.patience",
               f"must be an integer >= 1 (evaluations), got {self.patience!r}")
        require(self.min_delta >= 0 and math.isfinite(self.min_delta), "early_stopping.min_delta",
               f"must be a finite number >= 0, got {self.min_delta!r}")


def lower_is_better(metric: str) -> bool:
    """Whether a smaller value of `metric` is better (only `eval_loss`; accuracy and grader scores
    are better higher)."""
    return LOWER_IS_BETTER.get(metric, False)


def check_metric_name(metric: str, field: str) -> None:
    """A metric's own form: one of `LOWER_IS_BETTER`'s names or `grader/<name>`.

    Raises:
        ConfigError: naming `field`.
    """
    if metric in LOWER_IS_BETTER or (metric.startswith(GRADER_PREFIX) and len(metric) > len(GRADER_PREFIX)):
        return
    raise ConfigError(field, f"must be one of {', '.join(LOWER_IS_BETTER)} or {GRADER_PREFIX}<grader name>, "
                             f"got {metric!r}")


def check_metric_available(metric: str, field: str, graders: Collection[str]) -> None:
    """A `grader/<name>` metric needs a grader of that name in the job (`graders`: the job's grader
    names; none until graded evaluation is configured).

    Raises:
        ConfigError: naming `field` and the graders there are.
    """
    if not metric.startswith(GRADER_PREFIX) or metric[len(GRADER_PREFIX):] in graders:
        return
    names = [*LOWER_IS_BETTER, *(GRADER_PREFIX + g for g in sorted(graders))]
    have = f"its graders are {', '.join(sorted(graders))}" if graders else "the job has no graded evaluation"
    raise ConfigError(field, f"names {metric!r}, but {have}; use one of {', '.join(names)}")


def metric_value(report: EvalReport, metric: str) -> float:
    """`metric` of one evaluation (`EvalReport.named_metrics`).

    Raises:
        ConfigError: the evaluation has no such metric (a grader the run does not run).
    """
    metrics = report.named_metrics()
    if metric not in metrics:
        raise ConfigError(None, f"the evaluation at step {report.step} has no metric {metric!r} "
                                f"(it has {', '.join(sorted(metrics))})")
    return float(metrics[metric])


def improves(value: float, best: float | None, metric: str, min_delta: float = 0.0) -> bool:
    """True when `value` beats `best` by more than `min_delta` in `metric`'s direction (anything
    finite beats no best yet; NaN never improves)."""
    if math.isnan(value):
        return False
    if best is None:
        return True
    return value < best - min_delta if lower_is_better(metric) else value > best + min_delta


class SelectionWatch:
    """Watches a run's evaluations (see the module docstring). `best` is `(step, value)` of the best
    evaluation of `select.metric` so far (kept with `mode` best only); `stop` is set once early stopping
    gives up: `{step, reason, metric, best_step, best_value, patience, min_delta}`."""

    def __init__(self, select: SelectCheckpointSettings, stopping: EarlyStoppingSettings | None) -> None:
        self.select, self.stopping = select, stopping
        self.best: tuple[int, float] | None = None
        self.best_tensors: list[Any] | None = None   # host copies of the LoRA parameters, in their order
        self.stopping_best: tuple[int, float] | None = None
        self.evals_without_gain = 0
        self.stop: dict[str, Any] | None = None

    def observe(self, report: EvalReport, params: Sequence[Any]) -> None:
        """Take one evaluation of the adapter in `params` (the trainer's LoRA parameters, after
        `report.step` optimizer steps)."""
        if report.step == 0:
            return
        if self.select.mode == "best":
            value = metric_value(report, self.select.metric)
            if improves(value, self.best[1] if self.best else None, self.select.metric):
                self.best = (report.step, value)
                self.best_tensors = [p.detach().to("cpu", copy=True) for p in params]
        if self.stopping is not None and self.stop is None:
            self._count(report)

    def _count(self, report: EvalReport) -> None:
        s = self.stopping
        assert s is not None
        value = metric_value(report, s.metric)
        if improves(value, self.stopping_best[1] if self.stopping_best else None, s.metric, s.min_delta):
            self.stopping_best, self.evals_without_gain = (report.step, value), 0
            return
        self.evals_without_gain += 1
        if self.evals_without_gain < s.patience or self.stopping_best is None:
            return
        best_step, best_value = self.stopping_best
        self.stop = {"step": report.step, "metric": s.metric, "best_step": best_step, "best_value": best_value,
                     "patience": s.patience, "min_delta": s.min_delta,
                     "reason": f"{s.metric} did not improve by more than {s.min_delta:g} in {s.patience} "
                               f"evaluation{'s' if s.patience != 1 else ''} (best {best_value:.4g} at step "
                               f"{best_step}, {value:.4g} at step {report.step})"}

    def stops_run(self, done: int, total_steps: int) -> bool:
        """Whether the loop ends after step `done`: early stopping gave up before the planned end."""
        return self.stop is not None and done < total_steps

    def stopped_early(self, total_steps: int) -> dict[str, Any] | None:
        """The stop entry when early stopping ended the run before `total_steps`, else None."""
        return self.stop if self.stop is not None and self.stop["step"] < total_steps else None

    def restore(self, params: Sequence[Any], steps_run: int) -> dict[str, Any]:
        """The adapter the run delivers: with `best` and an evaluation seen, the best step's tensors are
        copied back into `params` (exact); otherwise `params` stay the last step's. Returns
        `{mode, metric, step, value}` (`metric` and `value` None with `last`; `value` None with `best`
        when no trained adapter was evaluated, and `step` is then `steps_run`)."""
        if self.select.mode != "best":
            return {"mode": "last", "metric": None, "step": steps_run, "value": None}
        if self.best is None or self.best_tensors is None:
            return {"mode": "best", "metric": self.select.metric, "step": steps_run, "value": None}
        for p, saved in zip(params, self.best_tensors, strict=True):
            p.data.copy_(saved.to(p.device))
        return {"mode": "best", "metric": self.select.metric, "step": self.best[0], "value": self.best[1]}

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps so that a resumed run selects and stops as the uninterrupted one."""
        return {"best": self.best, "best_tensors": self.best_tensors, "stopping_best": self.stopping_best,
                "evals_without_gain": self.evals_without_gain, "stop": self.stop}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """Restore `state_dict()`'s values (None: a checkpoint written before selection existed)."""
        if not state:
            return
        self.best = tuple(state["best"]) if state.get("best") else None
        self.best_tensors = state.get("best_tensors")
        self.stopping_best = tuple(state["stopping_best"]) if state.get("stopping_best") else None
        self.evals_without_gain = int(state.get("evals_without_gain", 0))
        self.stop = state.get("stop")
