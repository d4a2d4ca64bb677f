"""The trainer callback of a worker job: writes the job's events and progress to the database as the
run goes, publishes each checkpoint's adapter to storage, and answers the loop's per-step cancel
question from the job row (`transitions.should_stop`) or the supervisor's time-limit signal.

Events (OpenAI `fine_tuning.job.event`; `type` metrics carry `data`):
    on_start       "Training started: 100 steps, 30 layers (8 trained per step, cyclic), cpu, 2 CPU threads (2 CPUs
                   by the CPU affinity / 1 training slot), OpenMP wait PASSIVE; learning rate 0.0008 after 5
                   warmup steps, linear after that" (on a CPU without native bf16, "...; the NF4 base computes in
                   fp32 (this CPU has no native bf16); learning rate ..."); data: the run's facts, with the
                   resolved learning_rate, compute_dtype, warmup_steps and lr_schedule, torch_threads (what
                   torch runs with) and thread_policy (the supervisor's choice and where it came from,
                   `worker.threads`; None outside a worker)
    on_step        "Step 5/100: training loss=1.2345" (every `log_every` steps and the last); data: step,
                   total_steps, train_loss, lr, grad_norm, tokens, tokens_per_s, step_time_s,
                   peak_memory_mib, selected_layers; a DPO job's step adds its `rewards/...` metrics (TRL's
                   names: rewards/chosen, rewards/rejected, rewards/margins, rewards/accuracies), as the
                   trainer's train log row has them (`StepReport.to_dict`), and its message the margin and
                   accuracy ("..., reward margin=0.42, reward accuracy=0.75")
    on_schedule_decision  "auto: the lower 22 layers carried 31.2% of the gradient over the first 4 steps
                   (threshold 80.8%): switching to tail from step 5" (once, with `lcsb.schedule` auto's
                   probe-then-switch schedule); data: `schedule_decision`, which the job object's
                   `method.lcsb.auto.decision` shows from then on
    on_eval_progress  "Evaluating at step 0: 12/40 validation batches, 21 s" (at most every
                   `EVAL_PROGRESS_EVERY_S` seconds of an evaluation, so `lcsb jobs follow` prints a
                   line at least every 30 s during a long one); data: step, eval_batches_done,
                   eval_batches_total, eval_elapsed_s; a graded evaluation's generation reports
                   decoding steps the same way, with eval_phase "graded" ("Evaluating at step 0: answering prompts,
                   40/384 decoding steps, 21 s"), which keeps the heartbeat through a long one
    on_eval        "Step 10/100: validation loss=1.1, token accuracy=0.61" (with graders: ", grader/numeric=0.25";
                   a DPO job: "validation DPO loss=0.65, token accuracy on the preferred answers=0.48, reward
                   margin=0.42, reward accuracy=0.75");
                   data: step, valid_loss, valid_mean_token_accuracy, eval_target_tokens and each
                   `grader/<name>` score, and a DPO job's `eval_rewards/...` (the eval log row's, `EvalReport.to_dict`),
                   which the checkpoint of the same step carries in its `metrics`
    on_checkpoint  "Checkpoint saved at step 50" (+ a `checkpoints` row with the adapter .tar.gz); every
                   `save_every` steps and after the last step that ran, so a job's checkpoints end with it
    on_end         "Training stopped early at step 30 of 100: eval_loss did not improve by more than 0 in 2
                   evaluations (best 1.21 at step 10, 1.25 at step 30)" (with method.early_stopping; data: the
                   summary's `stopped_early`, and the job's progress becomes 30 of 30 steps: the run's real length);
                   "Selected step 10 (eval_loss 1.21) as the job's model; the last step's adapter (step 30) is
                   checkpoint ft:...:ckpt-step-30" (with method.select_checkpoint best; data: `selected_checkpoint`
                   and `final_checkpoint`); "Training finished: 100 steps in 812 s, peak memory 1530 MiB"
Each step also updates the job's progress, trained tokens, peak memory and heartbeat. `result` (set at the
end) is what the job object's `result` shows: `job_result`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from lcsb_core.training.callbacks import EvalProgress, EvalReport, StepReport, TrainerCallback
from lcsb_service import transitions
from lcsb_service.artifacts import publish_checkpoint
from lcsb_service.db import Database
from lcsb_service.events import add_event, heartbeat, record_progress
from lcsb_service.job_records import record_auto_decision
from lcsb_service.storage import Storage
from worker.threads import ThreadPolicy

log = logging.getLogger(__name__)

# a DPO run's log-row keys (TRL's names), passed on as they are
TRAIN_REWARDS, EVAL_REWARDS = "rewards/", "eval_rewards/"


def reward_metrics(row: dict[str, Any], prefix: str) -> dict[str, float]:
    """The DPO reward metrics of a trainer log row (`StepReport.to_dict`, `EvalReport.to_dict`): its keys
    under `prefix` (`TRAIN_REWARDS` or `EVAL_REWARDS`), unchanged; {} for a supervised run."""
    return {k: v for k, v in row.items() if k.startswith(prefix) and v is not None}


def _rewards_words(rewards: dict[str, float], prefix: str) -> str:
    """", reward margin=0.42, reward accuracy=0.75" for an event message, or "" without rewards."""
    shown = (("margins", "reward margin"), ("accuracies", "reward accuracy"))
    return "".join(f", {label}={rewards[prefix + name]:.3f}" for name, label in shown if prefix + name in rewards)


# Seconds between an evaluation's progress events: under the 30 s of silence that `lcsb jobs follow`
# allows between its progress lines (lcsb_client.progress.FollowDisplay.line_every_s).
EVAL_PROGRESS_EVERY_S = 20.0


@contextmanager
def _reporting(what: str, job_id: str) -> Iterator[None]:
    """A failed progress write (database or storage blip) is logged, never raised into the training
    loop: a long run must not end for it. A lasting outage stops the heartbeat, and the reaper ends
    the job."""
    try:
        yield
    except Exception:
        log.warning("job %s: could not record %s", job_id, what, exc_info=True)


class JobReporter(TrainerCallback):
    """Reports one job. `stop` is set by the child's time-limit signal handler; `thread_policy` is the
    threads and OpenMP wait policy the supervisor gave the process (`ThreadPolicy.from_env`), stated in
    the start event."""

    def __init__(self, db: Database, storage: Storage, job_id: str, fine_tuned_model: str,
                 stop: threading.Event, *, thread_policy: ThreadPolicy | None = None) -> None:
        self.db, self.storage, self.job_id = db, storage, job_id
        self.thread_policy = thread_policy
        self.fine_tuned_model, self.stop = fine_tuned_model, stop
        self.steps_done, self.trained_tokens, self.peak_mib = 0, 0, 0.0
        self.total_steps: int | None = None
        self.log_every = 1
        self.last_metrics: dict = {}
        self.first_step: tuple[int, float] | None = None  # (steps done, trainer s) as this run's first step began
        self.eval_noted_s = 0.0  # the current evaluation's elapsed seconds at its last progress event
        self.checkpoints: dict[int, str] = {}  # step -> published fine_tuned_model_checkpoint
        self.result: dict[str, Any] | None = None

    def on_start(self, info: dict) -> None:
        self.total_steps, self.steps_done = info["total_steps"], info["start_step"]
        cfg = info["config"]
        self.log_every = int(cfg.get("log_every", 1))
        policy = self.thread_policy
        threads = f", {policy.describe()}" if policy else ""
        # an NF4 base on a CPU without native bf16 computes in fp32 (`compute_dtype`): other losses and peaks
        fp32 = ("the NF4 base computes in fp32 (this CPU has no native bf16); "
                if info.get("compute_dtype") == "float32" and cfg.get("model", {}).get("quantization") == "nf4"
                and str(info["device"]).startswith("cpu") else "")
        with _reporting("the start", self.job_id), self.db.session() as s:
            add_event(s, self.job_id, f"Training started: {info['total_steps']} steps, "
                      f"{info['schedule_description']}, {info['train_examples']} examples, {info['device']}{threads}; "
                      f"{fp32}learning rate {info['learning_rate']:.3g} after {info['warmup_steps']} warmup steps, "
                      f"{info['lr_schedule']} after that",
                      data={**{k: info[k] for k in ("total_steps", "num_layers", "k", "schedule", "full_every",
                                                    "device", "torch_threads", "c_allocator", "train_examples",
                                                    "eval_examples", "lora_parameters", "start_step",
                                                    "learning_rate", "warmup_steps", "lr_schedule")},
                            **{k: info.get(k) for k in ("auto", "schedule_decision", "compute_dtype")},
                            "thread_policy": policy.to_dict() if policy else None})
            record_progress(s, self.job_id, steps_completed=self.steps_done, total_steps=self.total_steps)

    def on_step(self, r: StepReport) -> None:
        self.steps_done, self.total_steps = r.step, r.total_steps
        self.trained_tokens += r.tokens
        self.peak_mib = max(self.peak_mib, r.peak_memory_mib)
        self.last_metrics = {"step": r.step, "train_loss": r.loss}
        data = {"step": r.step, "total_steps": r.total_steps, "train_loss": r.loss, "lr": r.lr,
                "grad_norm": r.grad_norm, "tokens": r.tokens, "tokens_per_s": round(r.tokens_per_s, 1),
                "step_time_s": round(r.step_time_s, 4), "peak_memory_mib": round(r.peak_memory_mib, 1),
                "selected_layers": r.selected_layers}
        rewards = reward_metrics(r.to_dict(), TRAIN_REWARDS)
        data.update(rewards)
        if self.first_step is None:
            self.first_step = (r.step - 1, r.elapsed_s - r.step_time_s)
        # the step rate since this run's first step: the model load, the step-0 evaluation (run after
        # the first step, see on_eval) and steps done before a resume are not steps of this run;
        # evaluations and checkpoints between steps are
        with _reporting("step progress", self.job_id), self.db.session() as s:
            record_progress(s, self.job_id, steps_completed=r.step, total_steps=r.total_steps,
                            trained_tokens=self.trained_tokens, peak_memory_mib=round(self.peak_mib, 1),
                            elapsed_s=r.elapsed_s - self.first_step[1], steps_timed=r.step - self.first_step[0])
            if (self.log_every and r.step % self.log_every == 0) or r.step == r.total_steps:
                add_event(s, self.job_id, f"Step {r.step}/{r.total_steps}: training loss={r.loss:.4f}"
                          f"{_rewards_words(rewards, TRAIN_REWARDS)}", type="metrics", data=data)

    def on_schedule_decision(self, decision: dict) -> None:
        chosen = ("switching to " + decision["schedule"]) if decision["switched"] \
            else "staying at full depth (all layers)"
        with _reporting("auto's decision", self.job_id), self.db.session() as s:
            add_event(s, self.job_id, f"auto: the lower {decision['lower_layers']} layers carried "
                      f"{decision['lower_share']:.1%} of the gradient over the first {decision['probe_steps']} steps "
                      f"(threshold {decision['threshold']:.1%}): {chosen} from step {decision['from_step']}",
                      data={"schedule_decision": decision})
            record_auto_decision(s, self.job_id, decision)

    def on_eval_progress(self, p: EvalProgress) -> None:
        if p.batches_done == 1:
            self.eval_noted_s = 0.0
        if p.batches_done >= p.batches_total or p.elapsed_s - self.eval_noted_s < EVAL_PROGRESS_EVERY_S:
            return  # the evaluation's own event follows at once after its last batch
        self.eval_noted_s = p.elapsed_s
        what = ("answering prompts, {}/{} decoding steps" if p.phase == "graded" else "{}/{} validation batches")
        with _reporting("evaluation progress", self.job_id), self.db.session() as s:
            add_event(s, self.job_id, f"Evaluating at step {p.step}: {what.format(p.batches_done, p.batches_total)}, "
                      f"{p.elapsed_s:.0f} s",
                      data={"step": p.step, "eval_batches_done": p.batches_done,
                            "eval_batches_total": p.batches_total, "eval_elapsed_s": round(p.elapsed_s, 1),
                            **({"eval_phase": p.phase} if p.phase == "graded" else {})})
            heartbeat(s, self.job_id)

    def on_eval(self, r: EvalReport) -> None:
        if r.step == 0 and self.first_step is not None:  # the deferred step-0 evaluation is not a step's time
            self.first_step = (self.first_step[0], self.first_step[1] + r.eval_time_s)
        rewards = reward_metrics(r.to_dict(), EVAL_REWARDS)
        self.last_metrics.update(valid_loss=r.eval_loss, valid_mean_token_accuracy=r.eval_token_accuracy, **r.graded,
                                 **rewards)
        scores = "".join(f", {key}={value:.3f}" for key, value in r.graded.items()) + \
            _rewards_words(rewards, EVAL_REWARDS)
        with _reporting("an evaluation", self.job_id), self.db.session() as s:
            # a DPO evaluation's loss is the DPO loss per pair, its token accuracy the preferred answers'
            loss, accuracy = (("DPO loss", "token accuracy on the preferred answers") if rewards
                              else ("loss", "token accuracy"))
            add_event(s, self.job_id, f"Step {r.step}/{self.total_steps}: validation {loss}={r.eval_loss:.4f}, "
                      f"{accuracy}={r.eval_token_accuracy:.3f}{scores}", type="metrics",
                      data={"step": r.step, "valid_loss": r.eval_loss,
                            "valid_mean_token_accuracy": r.eval_token_accuracy,
                            "eval_target_tokens": r.eval_target_tokens, **r.graded, **rewards})

    def on_checkpoint(self, step: int, path: str) -> None:
        with _reporting("a checkpoint", self.job_id), self.db.session() as s:
            row = publish_checkpoint(s, self.storage, job_id=self.job_id, step=step, folder=path,
                                     fine_tuned_model=self.fine_tuned_model,
                                     metrics={**self.last_metrics, "step": step})
            self.checkpoints[step] = row.fine_tuned_model_checkpoint
            add_event(s, self.job_id, f"Checkpoint saved at step {step}",
                      data={"step": step, "checkpoint": row.id,
                            "fine_tuned_model_checkpoint": row.fine_tuned_model_checkpoint})

    def on_end(self, summary: dict) -> None:
        peak = summary.get("peak_memory_mib") or self.peak_mib
        self.result = job_result(summary, self.checkpoints)
        stopped, chosen = self.result["stopped_early"], self.result["selected_checkpoint"]
        with _reporting("the end", self.job_id), self.db.session() as s:
            if stopped:
                add_event(s, self.job_id, f"Training stopped early at step {stopped['step']} of "
                          f"{summary['planned_steps']}: {stopped['reason']}", data=stopped)
                record_progress(s, self.job_id, steps_completed=stopped["step"], total_steps=stopped["step"])
            if chosen["mode"] == "best" and chosen["value"] is not None:
                final = self.result["final_checkpoint"]
                last = (f"; the last step's adapter (step {final['step']}) is checkpoint "
                        f"{final['fine_tuned_model_checkpoint']}"
                        if final["step"] != chosen["step"] and final["fine_tuned_model_checkpoint"] else "")
                add_event(s, self.job_id, f"Selected step {chosen['step']} ({chosen['metric']} {chosen['value']:.4g}) "
                          f"as the job's model{last}", data={**chosen, "final_checkpoint": final})
            add_event(s, self.job_id, f"Training finished: {summary['steps']} steps in "
                      f"{summary['train_seconds']:.0f} s, peak memory {peak:.0f} MiB",
                      data={k: summary.get(k) for k in ("steps", "train_seconds", "peak_memory_mib", "trained_tokens",
                                                        "eval_loss_before", "eval_loss_after",
                                                        "eval_token_accuracy_after")})

    def should_cancel(self) -> bool:
        """Checked by the loop before every step: the time limit, or the job left `running`."""
        if self.stop.is_set():
            return True
        try:
            with self.db.session() as s:
                return transitions.should_stop(s, self.job_id)
        except Exception:
            log.warning("could not read job %s's status; going on", self.job_id, exc_info=True)
            return False


def job_result(summary: dict, checkpoints: dict[int, str]) -> dict[str, Any]:
    """The job object's `result` from the trainer's summary: `selected_checkpoint` {mode, metric, step,
    value, fine_tuned_model_checkpoint (the published checkpoint of that step, else None)}: the adapter
    that is `fine_tuned_model`; `final_checkpoint` {step, fine_tuned_model_checkpoint}: the last step
    that ran (the trainer always saves it; None only when publishing it failed), the same step as the
    selected one unless select_checkpoint best chose another; `stopped_early` (the summary's, or None),
    `steps` (run) and `planned_steps`."""
    chosen = dict(summary.get("selected_checkpoint") or {"mode": "last", "metric": None, "step": summary["steps"],
                                                          "value": None})
    chosen["fine_tuned_model_checkpoint"] = checkpoints.get(chosen["step"])
    final = {"step": summary["steps"], "fine_tuned_model_checkpoint": checkpoints.get(summary["steps"])}
    return {"selected_checkpoint": chosen, "final_checkpoint": final, "stopped_early": summary.get("stopped_early"),
            "steps": summary["steps"], "planned_steps": summary.get("planned_steps", summary["steps"])}
