"""The trainer's callback protocol: the loop reports progress and asks whether to stop; it never
knows who listens (a progress bar, a worker writing events to a database, a test).

Subclass `TrainerCallback` and override what you need; every method has a no-op default.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class StepReport:
    """One optimizer step. `loss` is the mean next-token loss over the step's target tokens (nats);
    `lr` the learning rate used; `tokens` the non-padding input tokens processed; `tokens_per_s` over
    the step's wall time `step_time_s` (seconds); `peak_memory_mib` the process peak since the last
    report (CPU: resident set; CUDA: allocated tensors), in MiB."""

    step: int
    total_steps: int
    loss: float
    lr: float
    grad_norm: float
    tokens: int
    target_tokens: int
    tokens_per_s: float
    step_time_s: float
    peak_memory_mib: float
    selected_layers: list[int] = field(default_factory=list)
    elapsed_s: float = 0.0
    rewards: dict[str, float] = field(default_factory=dict)  # DPO: `rewards/chosen`, ... (lcsb_core.training.dpo)

    def to_dict(self) -> dict:
        """Plain metrics: the fields, with each DPO reward metric as its own `rewards/<name>` key."""
        out = asdict(self)
        rewards = out.pop("rewards")
        return {**out, **rewards}


@dataclass
class EvalReport:
    """An evaluation after `step` optimizer steps: mean loss over target tokens (nats) and the share
    of target tokens whose argmax prediction is right (a DPO run: the mean DPO loss per pair, the token
    accuracy on the preferred answers, and `rewards` by TRL's names); `elapsed_s` since the run's start and
    `eval_time_s` of the evaluation itself (seconds, graded evaluation included); `graded`: the mean
    score in [0, 1] per grader of a graded evaluation, keyed `grader/<name>` (`lcsb_core.eval.graders`),
    empty without one."""

    step: int
    eval_loss: float
    eval_token_accuracy: float
    eval_target_tokens: int
    elapsed_s: float = 0.0
    eval_time_s: float = 0.0
    graded: dict[str, float] = field(default_factory=dict)
    rewards: dict[str, float] = field(default_factory=dict)  # DPO: `eval_rewards/chosen`, ... (lcsb_core.training.dpo)

    def to_dict(self) -> dict:
        """Plain metrics: the fields, with each graded score as its own `grader/<name>` key and each DPO
        reward metric as its own `eval_rewards/<name>` key."""
        out = asdict(self)
        graded, rewards = out.pop("graded"), out.pop("rewards")
        return {**out, **graded, **rewards}

    def named_metrics(self) -> dict[str, float]:
        """The evaluation's metrics by the names that checkpoint selection and early stopping take
        (`lcsb_core.training.selection`): `eval_loss`, `eval_token_accuracy` and a graded evaluation's
        `grader/<name>` scores."""
        return {"eval_loss": self.eval_loss, "eval_token_accuracy": self.eval_token_accuracy, **self.graded}


@dataclass
class EvalProgress:
    """Progress inside one evaluation, after each of its batches: `batches_done` of `batches_total`
    validation batches at optimizer step `step`, `elapsed_s` seconds since the evaluation began. With
    `phase` "graded" (a graded evaluation's generation), the counts are decoding steps instead: after
    each token generated for a batch of prompts, of (batches x max_new_tokens) at most."""

    step: int
    batches_done: int
    batches_total: int
    elapsed_s: float
    phase: str = "loss"


class TrainerCallback:
    """Base class with no-op hooks. `should_cancel` is polled between optimizer steps; returning True
    ends the run with `TrainingCancelled` after the current step (the last checkpoint is kept)."""

    def on_start(self, info: dict) -> None:
        """Called once after setup with the resolved config, layer count and dataset sizes."""

    def on_step(self, report: StepReport) -> None:
        """Called after every optimizer step."""

    def on_schedule_decision(self, decision: dict) -> None:
        """Called once when `auto`'s schedule has decided after its probe steps
        (`lcsb_core.training.schedules.SwitchSchedule.decision`: the numbers it saw and the schedule chosen)."""

    def on_eval_progress(self, progress: EvalProgress) -> None:
        """Called after every batch of an evaluation (an evaluation of a large validation set can take
        minutes; listeners throttle what they write)."""

    def on_eval(self, report: EvalReport) -> None:
        """Called after every evaluation."""

    def on_checkpoint(self, step: int, path: str) -> None:
        """Called after a checkpoint folder is written."""

    def on_end(self, summary: dict) -> None:
        """Called once when training finished and outputs are written."""

    def should_cancel(self) -> bool:
        return False
