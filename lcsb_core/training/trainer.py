"""The LCSB trainer: setup -> train -> save, in the shape of torchtune's recipe interface.

    trainer = Trainer(TrainConfig.from_dict(yaml.safe_load(open("job.yaml"))), callbacks=[MyCallback()])
    summary = trainer.train()              # or trainer.train(resume_from="latest")

The step loop (`train`) fits on one screen; the step itself is `lcsb_core.training.step.run_step`; evaluation,
checkpointing and reporting are small methods; `lcsb_core.training.selection.SelectionWatch` watches the
evaluations (the best adapter kept, early stopping). Raises `DivergenceError` (NaN/Inf), `TrainingCancelled`
(a callback asked to stop), `DataError`, `ModelLoadError`, `ConfigError`.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from lcsb_core.data.run_length import planned_steps
from lcsb_core.errors import TrainingCancelled
from lcsb_core.models.modules import decoder_layers
from lcsb_core.models.quantization import base_dtype
from lcsb_core.run_files import RunFiles
from lcsb_core.training.callbacks import EvalProgress, EvalReport, StepReport, TrainerCallback
from lcsb_core.training.checkpoint import load_checkpoint, save_adapter, save_checkpoint
from lcsb_core.training.config import TrainConfig
from lcsb_core.training.history import UpdateTracker, history_row
from lcsb_core.training.init_adapter import initialise_from
from lcsb_core.training.lora import adapter_is_identity
from lcsb_core.training.loss import evaluate_batches
from lcsb_core.training.memory_probe import MIB, FreeMemoryReleaser, c_allocator, peak_mib, reset_peak
from lcsb_core.training.optim import build_optimizer, layer_lr_scales, lr_multiplier, set_lr
from lcsb_core.training.selection import SelectionWatch
from lcsb_core.training.selective import LayerMode, SelectiveBackprop
from lcsb_core.training.step import run_step


@dataclass
class RunState:
    """What one `train()` call accumulates: `t_start` (perf_counter seconds at the first step),
    `peak_memory_mib` (largest step peak, MiB), `trained_tokens` (tokens in trained batches, padding
    excluded), `eval_history` (every evaluation, in order), `saved_steps` (the steps whose checkpoint is
    on disk for this run: those saved, and the one a resumed run started from)."""

    t_start: float = field(default_factory=time.perf_counter)
    peak_memory_mib: float = 0.0
    trained_tokens: int = 0
    eval_history: list[EvalReport] = field(default_factory=list)
    saved_steps: set[int] = field(default_factory=set)


class Trainer:
    """Runs one `TrainConfig`. For tests and benchmarks, `model` (a PeftModel), `tokenizer` and the
    datasets (`lcsb_core.data.TokenizedDataset`) may be passed in instead of loaded from the config."""

    def __init__(self, config: TrainConfig, *, callbacks: Sequence[TrainerCallback] = (), model=None,
                 tokenizer=None, train_dataset=None, eval_dataset=None, device: torch.device | None = None):
        self.config = config
        self.callbacks = list(callbacks)
        self.model, self.tokenizer = model, tokenizer
        self.train_dataset, self.eval_dataset = train_dataset, eval_dataset
        self.device: torch.device = device  # type: ignore[assignment]  # resolved by setup()
        self.files = RunFiles(config.output_dir)
        self.run = RunState()
        self.selection = SelectionWatch(config.select_checkpoint, config.early_stopping)  # anew in each train()
        self._ready = False

    # ---- setup -------------------------------------------------------------------------------
    def setup(self) -> None:
        """Load model, tokenizer and data (unless given), apply LoRA and selective backprop, build the
        optimizer over every LoRA parameter and the schedule. Idempotent: `train()` calls it, and a
        second call does nothing (layers are wrapped and the optimizer built once)."""
        from lcsb_core.training.setup import load_components

        if self._ready:
            return
        cfg = self.config
        if self.model is None:
            self.model, self.tokenizer, self.device = load_components(cfg)
        self.device = self.device or next(self.model.parameters()).device
        if self.train_dataset is None:
            from lcsb_core.training.setup import load_datasets

            self.train_dataset, self.eval_dataset = load_datasets(cfg, self.tokenizer)
        torch.manual_seed(cfg.seed)
        self.schedule = cfg.lcsb.schedule_for(num_layers=len(decoder_layers(self.model)), seed=cfg.seed)
        self.k = self.schedule.k
        skip_mode = LayerMode.SKIP if self.schedule.identity_skip else LayerMode.FROZEN
        self.selective = SelectiveBackprop(self.model, skip_mode=skip_mode,
                                           gradient_checkpointing=cfg.lcsb.gradient_checkpointing)
        num_layers = self.selective.num_layers
        self.params = [p for i in range(num_layers) for p in self.selective.params_by_layer[i]]
        scales = layer_lr_scales(self.schedule.update_shares(), num_layers, cfg.lcsb.layer_lr_scaling)
        per_param = [scales[i] for i in range(num_layers) for _ in self.selective.params_by_layer[i]]
        self.optimizer = build_optimizer(self.params, cfg.optim, per_param)
        self.tracker = UpdateTracker(self.selective.params_by_layer)
        self.releaser = FreeMemoryReleaser(self.device)
        self.param_names = _names_of(self.model, self.params)
        self.total_steps = self._total_steps()
        self.warmup_steps = cfg.warmup_steps_for(self.total_steps)
        self.peak_lr = cfg.peak_learning_rate
        self.graded = self._graded_evaluator()
        self.objective = None  # the language-model loss; DPO: lcsb_core.training.dpo.DPOObjective
        if cfg.dpo is not None:
            from lcsb_core.training.dpo import DPOObjective, reference_for

            self.objective = DPOObjective(cfg.dpo.beta, reference_for(cfg.init_adapter, self.model, self.params),
                                          chunk_bytes=cfg.loss_chunk_mib * MIB)
        self._ready = True

    def _graded_evaluator(self):
        """The run's `GradedEvaluator` when the config has an `eval` section and the run evaluates (a
        validation set), else None. Its prompts come from `eval.eval_file` or the validation file."""
        graded = self.config.eval
        if graded is None or self.eval_dataset is None:
            return None
        from lcsb_core.eval.graded import GradedEvaluator
        from lcsb_core.eval.samples import read_samples

        source = graded.eval_file or self.config.data.validation_file
        if not source:
            return None
        served = self._serving_engine(graded.max_new_tokens, graded.n_samples)
        return GradedEvaluator(graded, read_samples(source, graded.n_samples), self.tokenizer, self.files.root,
                               max_prompt_tokens=self.config.data.max_seq_len, served=served,
                               save_adapter=lambda out: save_adapter(self.model, self.params, out,
                                                                     chat_template=self.chat_template()))

    def _serving_engine(self, max_new_tokens: int, n_samples: int):
        """The serving engine graded evaluation answers on (`eval.served.ServedAnswers`): llama.cpp on the
        catalog's base GGUF, as a CPU inference worker serves this model (`gguf_import.serving_gguf`);
        None (transformers on the training model) on a GPU or for a model without a base GGUF."""
        from lcsb_core.errors import ModelLoadError
        from lcsb_core.eval.served import ServedAnswers, eval_slots
        from lcsb_core.models.gguf_import import serving_gguf
        from lcsb_core.models.loading import resolve_model_path

        if self.device.type != "cpu":
            return None
        try:
            gguf = serving_gguf(self.config.model.name_or_path)
        except ModelLoadError:
            return None
        base_dir = resolve_model_path(self.config.model.name_or_path)
        return ServedAnswers(base_dir, gguf, self.files.root / "eval_engine",
                             slots=eval_slots(base_dir.name, n_samples),
                             seq_tokens=self.config.data.max_seq_len + max_new_tokens,
                             threads=torch.get_num_threads())

    def _total_steps(self) -> int:
        """The run's optimizer steps: `run_length.planned_steps`, the count the service checks jobs by."""
        cfg = self.config
        return planned_steps(self._units(self.train_dataset), cfg.batch_size, cfg.gradient_accumulation_steps,
                             cfg.epochs, cfg.max_steps)

    def _units(self, dataset) -> int:
        """What a batch counts: examples, or preference pairs (two examples each) for DPO."""
        from lcsb_core.data.pairs import num_pairs

        return len(dataset.examples) if self.config.dpo is None else num_pairs(dataset)

    def _batches(self, dataset, *, epoch: int, shuffle: bool, by_length: bool = False
                 ) -> Iterator[dict[str, torch.Tensor]]:
        """Batches of `dataset` on the device, padded/packed/grouped by length as the config says;
        `by_length`: shortest first (an evaluation's order: less padding, the same means)."""
        from lcsb_core.data import iter_batches
        from lcsb_core.data.pairs import iter_pair_batches

        d = self.config.data
        pad_id = self.tokenizer.pad_token_id if self.tokenizer is not None else 0
        if self.config.dpo is not None:
            for batch in iter_pair_batches(dataset, self.config.batch_size, seed=self.config.seed, epoch=epoch,
                                           pad_token_id=pad_id, shuffle=shuffle,
                                           pad_to_multiple_of=d.pad_to_multiple_of, by_length=by_length,
                                           group_by_length=bool(d.group_by_length)):
                yield {k: v.to(self.device) for k, v in batch.items()}
            return
        for batch in iter_batches(dataset, self.config.batch_size, seed=self.config.seed, epoch=epoch,
                                  pad_token_id=pad_id, shuffle=shuffle, pad_to_multiple_of=d.pad_to_multiple_of,
                                  pack=d.pack, max_seq_len=d.max_seq_len, by_length=by_length,
                                  group_by_length=bool(d.group_by_length)):
            yield {k: v.to(self.device) for k, v in batch.items()}

    def _micro_batches(self, start_step: int) -> Iterator[dict[str, torch.Tensor]]:
        stream = (b for epoch in itertools.count()
                  for b in self._batches(self.train_dataset, epoch=epoch, shuffle=True))
        skip = start_step * self.config.gradient_accumulation_steps
        yield from itertools.islice(stream, skip, None)

    # ---- train -------------------------------------------------------------------------------
    def train(self, resume_from: str | Path | None = None) -> dict:
        """Train to `total_steps` (or until early stopping ends the run); returns the summary (also
        written to summary.json)."""
        self.setup()
        cfg = self.config
        self.selection = SelectionWatch(cfg.select_checkpoint, cfg.early_stopping)
        start = self._resume(resume_from) if resume_from else self._fresh_start()
        batches = self._micro_batches(start)
        self._emit("on_start", self._start_info(start))
        resumed_here = start and (self.files.checkpoint_dir(start) / "trainer_state.pt").is_file()
        self.run = RunState(saved_steps={start} if resumed_here else set())
        base_eval_pending = self._start_evaluation(start)
        for step in range(start, self.total_steps):
            if any(cb.should_cancel() for cb in self.callbacks):
                raise TrainingCancelled(f"cancelled before step {step + 1} of {self.total_steps}")
            selected = self.schedule.layers_for_step(step)
            micro = [next(batches) for _ in range(cfg.gradient_accumulation_steps)]
            lr = self.peak_lr * lr_multiplier(step, total_steps=self.total_steps,
                                                         warmup_steps=self.warmup_steps,
                                                         schedule=cfg.optim.lr_schedule)
            set_lr(self.optimizer, lr)
            reset_peak(self.device)
            self.tracker.snapshot()
            t0 = time.perf_counter()
            stats = run_step(self.model, self.selective, self.optimizer, micro, selected, step=step,
                             momentum_for_skipped=cfg.lcsb.momentum_for_skipped,
                             max_grad_norm=cfg.optim.max_grad_norm, deep_fraction=self.schedule.deep_fraction,
                             shallow=self.schedule.shallow_layers(step),
                             loss_chunk_bytes=cfg.loss_chunk_mib * MIB,
                             recompute_top=self.schedule.k if cfg.lcsb.recompute_deep else None,
                             objective=self.objective)
            self._record_step(step, selected, stats, lr, time.perf_counter() - t0)
            self.releaser.after_step()
            if base_eval_pending:
                base_eval_pending = self._evaluate_base_model()
            done = step + 1
            if self._due(cfg.eval_every, done):
                self.evaluate(done)
            if self.selection.stops_run(done, self.total_steps):
                break  # early stopping: `_finish` saves this last step's checkpoint
            if self._due(cfg.save_every, done) and done < self.total_steps:
                self.save_checkpoint(done)  # the last step's is `_finish`'s, whatever `save_every` says
        return self._finish()

    @staticmethod
    def _due(every: int, done: int) -> bool:
        return every > 0 and done % every == 0

    def _fresh_start(self) -> int:
        self.files.create()
        for path in (self.files.metrics, self.files.history):
            path.unlink(missing_ok=True)
        self.files.write_json(self.files.config, {**self.config.to_dict(), "resolved": self._model_facts()})
        return initialise_from(self.config, model=self.model, params=self.params, names=self.param_names,
                               optimizer=self.optimizer, schedule=self.schedule, total_steps=self.total_steps)

    def _resume(self, resume_from: str | Path) -> int:
        ckpt = self.files.latest_checkpoint() if str(resume_from) == "latest" else Path(resume_from)
        if ckpt is None:
            return self._fresh_start()
        state = load_checkpoint(ckpt, params=self.params, names=self.param_names, optimizer=self.optimizer)
        self.schedule.load_state_dict(state.get("schedule"))
        self.selection.load_state_dict(state.get("selection"))
        start = int(state["step"])
        self.files.truncate_after(self.files.metrics, start)
        self.files.truncate_after(self.files.history, start - 1)
        return start

    # ---- per-step reporting, eval, checkpoints ---------------------------------------------------
    def _record_step(self, step, selected, stats, lr, seconds) -> None:
        if self.schedule.needs_probe(step):
            decided = self.schedule.decision() is not None
            self.schedule.observe(stats.layer_grad_norms)
            decision = self.schedule.decision()
            if decision is not None and not decided:
                self._emit("on_schedule_decision", decision)
        self.files.append(self.files.history, history_row(step, self.selective.num_layers, selected,
                                                          stats.layer_grad_norms, self.tracker.update_norms()))
        report = StepReport(step=step + 1, total_steps=self.total_steps, loss=stats.loss, lr=lr,
                            grad_norm=stats.grad_norm, tokens=stats.tokens, target_tokens=stats.target_tokens,
                            tokens_per_s=stats.tokens / seconds, step_time_s=seconds,
                            peak_memory_mib=peak_mib(self.device), selected_layers=sorted(selected),
                            elapsed_s=time.perf_counter() - self.run.t_start, rewards=stats.rewards)
        self.run.peak_memory_mib = max(self.run.peak_memory_mib, report.peak_memory_mib)
        self.run.trained_tokens += stats.tokens
        if self.config.log_every and (step + 1) % self.config.log_every == 0 or step + 1 == self.total_steps:
            self.files.append(self.files.metrics, {"split": "train", **report.to_dict()})
        self._emit("on_step", report)

    def _start_evaluation(self, start: int) -> bool:
        """The step-0 ("before") evaluation of a fresh run with a validation set and `eval_at_start`.
        A fresh adapter is the identity (every LoRA B is zero, as `apply_lora` makes it), so the step-0
        model is the base model: returns True to measure it after the first optimizer step with the
        adapter disabled, the same numbers, and training starts sooner by one evaluation pass. An adapter
        that is not the identity (one passed in), and a DPO run (whose reference itself switches the adapter
        off), are evaluated now (returns False); where a DPO run's policy still equals its reference, that
        evaluation runs one forward per batch, not two (`DPOObjective.evaluate`)."""
        if start != 0 or self.eval_dataset is None or not self.config.eval_at_start:
            return False
        if hasattr(self.model, "disable_adapter") and adapter_is_identity(self.model) and self.objective is None:
            return True
        self.evaluate(0)
        return False

    def _evaluate_base_model(self) -> bool:
        """The deferred step-0 evaluation: the base model, LoRA disabled (PEFT `disable_adapter`).
        Returns False: nothing is pending any more."""
        with self.model.disable_adapter():
            self._base_model_eval = True  # the graded evaluation keeps these answers as the base's
            try:
                self.evaluate(0)
            finally:
                self._base_model_eval = False
        return False

    def evaluate(self, step: int) -> EvalReport:
        """Mean eval loss and token accuracy over the validation set (dropout off; `evaluate_batches`),
        and with an `eval` section the graded scores (`EvalReport.graded`); callbacks get
        `on_eval_progress` after each validation batch and `on_eval` at the end."""
        total = -(-self._units(self.eval_dataset) // self.config.batch_size)
        t0 = time.perf_counter()
        batches = self._batches(self.eval_dataset, epoch=0, shuffle=False, by_length=True)
        on_batch = lambda n: self._emit("on_eval_progress", EvalProgress(step, n, total, time.perf_counter() - t0))  # noqa: E731
        rewards: dict[str, float] = {}
        if self.objective is None:
            totals = evaluate_batches(self.model, batches, on_batch=on_batch)
            loss, accuracy, targets = totals.mean_loss, totals.token_accuracy, totals.num_targets
        else:
            pairs = self.objective.evaluate(self.model, batches, on_batch=on_batch)
            loss, accuracy, targets = pairs.mean_loss, pairs.chosen_token_accuracy, pairs.chosen_tokens
            rewards = pairs.metrics("eval_")
        graded = ({} if self.graded is None else self.graded.evaluate(
            self.model, step, base=getattr(self, "_base_model_eval", False),
            on_token=lambda n, of: self._emit("on_eval_progress", EvalProgress(
                step, n, of, time.perf_counter() - t0, phase="graded"))))
        report = EvalReport(step=step, eval_loss=loss, eval_token_accuracy=accuracy, eval_target_tokens=targets,
                            elapsed_s=time.perf_counter() - self.run.t_start, eval_time_s=time.perf_counter() - t0,
                            graded=graded, rewards=rewards)
        self.run.eval_history.append(report)
        self.selection.observe(report, self.params)
        self.files.append(self.files.metrics, {"split": "eval", **report.to_dict()})
        self._emit("on_eval", report)
        return report

    def chat_template(self) -> str | None:
        """The chat template the training data was rendered with: the tokenizer's, when the training
        file is chat or preference data; None for text and prompt/completion data (no template shaped the model)."""
        report = getattr(self.train_dataset, "report", None)
        if report is None or report.format not in ("chat", "preference") or self.tokenizer is None:
            return None
        template = getattr(self.tokenizer, "chat_template", None)
        return template if isinstance(template, str) and template else None

    def save_checkpoint(self, step: int) -> Path:
        """Adapter + trainer state after `step` optimizer steps."""
        path = save_checkpoint(self.files.checkpoint_dir(step), model=self.model, params=self.params,
                               names=self.param_names, optimizer=self.optimizer, step=step,
                               schedule_state=self.schedule.state_dict(),
                               selection_state=self.selection.state_dict(),
                               chat_template=self.chat_template())
        self.run.saved_steps.add(step)
        self._emit("on_checkpoint", step, str(path))
        return path

    def _finish(self) -> dict:
        """The final evaluation (unless the last step had one), the last step's checkpoint (every run's
        checkpoints end with the last step that ran, also when `select_checkpoint` best delivers another
        step's adapter or early stopping ended the run; saved once), the delivered adapter (the best
        evaluated one with `select_checkpoint` best), metrics, plots and the summary. `steps` are the
        steps run (short of `planned_steps` when `stopped_early`); the `*_after` numbers are the delivered
        adapter's evaluation; `final_checkpoint` is the last step's checkpoint folder."""
        from lcsb_core.training.plots import write_plots

        stopped = self.selection.stopped_early(self.total_steps)
        steps = stopped["step"] if stopped else self.total_steps
        evals = list(self.run.eval_history)
        if self.eval_dataset is not None and (not evals or evals[-1].step != steps):
            evals = evals + [self.evaluate(steps)]
        if steps not in self.run.saved_steps:  # after its evaluation: the checkpoint carries its metrics
            self.save_checkpoint(steps)
        selected = self.selection.restore(self.params, steps)
        after = next((e for e in reversed(evals) if e.step == selected["step"]), evals[-1] if evals else None)
        save_adapter(self.model, self.params, self.files.adapter, chat_template=self.chat_template())
        self.files.write_metrics_csv()
        plots = write_plots(self.files)
        summary = {
            "steps": steps, "planned_steps": self.total_steps, "k": self.k, "num_layers": self.selective.num_layers,
            "schedule": self.config.lcsb.schedule, "schedule_decision": self.schedule.decision(),
            "selected_checkpoint": selected, "stopped_early": stopped,
            "eval_loss_before": evals[0].eval_loss if evals and evals[0].step == 0 else None,
            "eval_loss_after": after.eval_loss if after else None,
            "eval_token_accuracy_after": after.eval_token_accuracy if after else None,
            "train_seconds": time.perf_counter() - self.run.t_start,
            "peak_memory_mib": self.run.peak_memory_mib or None,
            "trained_tokens": self.run.trained_tokens,
            "adapter_dir": str(self.files.adapter), "run_dir": str(self.files.root),
            "final_checkpoint": str(self.files.checkpoint_dir(steps)),
            "plots": [str(p) for p in plots],
            **self._graded_summary(evals),
            **self._dpo_summary(evals, after),
        }
        self.files.write_json(self.files.summary, summary)
        self._emit("on_end", summary)
        return summary

    def _graded_summary(self, evals: list[EvalReport]) -> dict:
        """The summary's graded scores: `graded_before` (step 0, the base model; None without it) and
        `graded_after` (the last evaluation), each {`grader/<name>`: mean score}; {} without graders."""
        if self.graded is None or not evals:
            return {}
        return {"graded_before": evals[0].graded if evals[0].step == 0 else None, "graded_after": evals[-1].graded,
                "eval_samples": str(self.files.eval_samples)}

    def _dpo_summary(self, evals: list[EvalReport], after: EvalReport | None) -> dict:
        """A DPO run's `dpo`: beta and the validation rewards before (step 0) and after (the delivered
        adapter's evaluation); {} for a supervised run."""
        if self.config.dpo is None:
            return {}
        return {"dpo": {"beta": self.config.dpo.beta,
                        "eval_rewards_before": evals[0].rewards if evals and evals[0].step == 0 else None,
                        "eval_rewards_after": after.rewards if after else None}}

    def _model_facts(self) -> dict:
        return {"num_layers": self.selective.num_layers, "k": self.k, "schedule": self.schedule.name,
                "schedule_description": self.schedule.describe(), "auto": self.config.lcsb.auto,
                "schedule_decision": self.schedule.decision(),
                "full_every": self.schedule.full_every, "device": str(self.device),
                "compute_dtype": str(base_dtype(self.config.model.quantization, self.device)).removeprefix("torch."),
                "torch_threads": torch.get_num_threads(),
                "c_allocator": c_allocator() if self.device.type == "cpu" else None,
                "lora_parameters": sum(p.numel() for p in self.params),
                "train_examples": self._units(self.train_dataset),  # DPO: pairs
                "eval_examples": self._units(self.eval_dataset) if self.eval_dataset is not None else 0,
                "total_steps": self.total_steps, "learning_rate": self.peak_lr,
                "warmup_steps": self.warmup_steps, "lr_schedule": self.config.optim.lr_schedule}

    def _start_info(self, start: int) -> dict:
        data = {name: ds.report.summary() for name, ds in (("train_data", self.train_dataset),
                                                           ("eval_data", self.eval_dataset))
                if ds is not None and hasattr(ds.report, "summary")}
        return {"config": self.config.to_dict(), "start_step": start, **self._model_facts(), **data}

    def _emit(self, hook: str, *args) -> None:
        for cb in self.callbacks:
            getattr(cb, hook)(*args)


def _names_of(model: torch.nn.Module, params: list[torch.nn.Parameter]) -> list[str]:
    """The qualified names (`model.named_parameters()`) of `params`, in their order: what checkpoints
    key the LoRA tensors by."""
    by_id = {id(p): name for name, p in model.named_parameters()}
    return [by_id[id(p)] for p in params]
