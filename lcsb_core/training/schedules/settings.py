"""`LCSBSettings`: a job's selective-backprop settings, checked where the schedules' rules live,
and `LCSBSettings.schedule_for`, the one way a job's schedule is built."""

from __future__ import annotations

from dataclasses import dataclass

from lcsb_core.errors import ConfigError, require
from lcsb_core.training.default_schedule import AUTO, choose_auto
from lcsb_core.training.schedules.checks import (
    DEFAULT_FRACTION,
    DEFAULT_REFRESH_EVERY,
    check_deep_fraction,
    check_full_every,
    check_k_or_fraction,
)
from lcsb_core.training.schedules.kinds import PureSchedule, SwitchSchedule
from lcsb_core.training.schedules.protocol import Schedule
from lcsb_core.training.schedules.registry import (
    check_schedule,
    layer_lr_scaling_blocker,
    make_schedule,
    schedule_takes,
)

LAYER_LR_SCALINGS = ("none", "frequency", "sqrt")


@dataclass
class LCSBSettings:
    """Selective backprop: `schedule` (one of `lcsb_core.training.schedules.SCHEDULES`, whose module docstring
    says what each means, or "auto", the default: the rule's schedule for the run's model, which
    `TrainConfig` resolves through `lcsb_core.training.default_schedule` before anything reads it), `k` layers
    per step or `fraction` of the decoder layers (neither: `lcsb_core.training.schedules.DEFAULT_FRACTION`, a
    quarter; `full` uses all), `full_every` (`topfull` only: a
    full backward every N-th step; None: `lcsb_core.training.schedules.DEFAULT_FULL_EVERY`), `momentum_for_skipped`
    (zero, not None, gradients for non-selected LoRA parameters so AdamW moves them by momentum),
    `deep_fraction` (`split` only: the share of a step's examples back-propagated through every layer;
    None: `lcsb_core.training.schedules.DEFAULT_DEEP_FRACTION`), `layer_lr_scaling` (`frequency`: each layer's
    learning rate divided by its update share, the share of the step-examples that train it; `sqrt`:
    by the square root of that share; `lcsb_core.training.optim.layer_lr_scales`; `none`),
    `gradient_checkpointing` (non-reentrant recomputation of the selected layers), `recompute_deep` (on a
    step that back-propagates more than k layers, such as `topfull`'s full-depth steps, the layers below
    the top k recompute their activations in backward, so the step keeps about a top-k step's autograd
    state: `lcsb_core.training.selective.recompute_below_top`; the same gradients, more forward work on those
    steps; a schedule with no such step refuses it, `LCSBSettings.schedule_for`), and
    `importance_refresh_every` (steps between full-backward probes of the importance schedule).

    The core's one check of these fields' own values (the rules themselves are stated once, in
    `lcsb_core.training.schedules`); `k` against the model's layers is checked when the schedule is resolved
    (`LCSBSettings.schedule_for`), `full_every` against `max_steps` by `TrainConfig.check_honoured`."""

    schedule: str = AUTO  # the rule's schedule for the run's model: lcsb_core.training.default_schedule (issue 30)
    k: int | None = None
    fraction: float | None = None
    full_every: int | None = None
    deep_fraction: float | None = None
    layer_lr_scaling: str = "none"
    momentum_for_skipped: bool = True
    gradient_checkpointing: bool = False
    recompute_deep: bool = False
    importance_refresh_every: int = DEFAULT_REFRESH_EVERY
    auto: dict | None = None  # what "auto" resolved to and why (default_schedule.AutoChoice.to_dict); None: named

    def __post_init__(self) -> None:
        check_schedule(self.schedule, also=(AUTO,))
        check_k_or_fraction(self.k, self.fraction)
        if self.k is None and self.fraction is None:
            self.fraction = DEFAULT_FRACTION
        require(self.importance_refresh_every >= 1, "lcsb.importance_refresh_every", "must be >= 1")
        require(not (self.recompute_deep and self.gradient_checkpointing), "lcsb.recompute_deep",
               "has no effect with lcsb.gradient_checkpointing, which recomputes every trained layer; use one")
        require(self.layer_lr_scaling in LAYER_LR_SCALINGS, "lcsb.layer_lr_scaling",
               f"must be one of {', '.join(LAYER_LR_SCALINGS)}, got {self.layer_lr_scaling!r}")
        if self.full_every is not None:
            check_full_every(self.full_every)
        if self.deep_fraction is not None:
            check_deep_fraction(self.deep_fraction)
        if self.schedule != AUTO:
            self.check_schedule_options()

    def resolve(self, model_name_or_path: str, total_steps: int | None = None) -> None:
        """Resolve `schedule` "auto" for this job (`lcsb_core.training.default_schedule.choose_auto`: the model and
        the planned steps; None when unknown) into `auto` (the choice and its reason) and `schedule` (the
        schedule chosen, or "auto" itself for the probe-then-switch schedule), and check the options that
        depend on it. A schedule the user named, or one already resolved (`auto` set), is kept.

        Raises:
            ConfigError: an option the resolved schedule does not take (naming the option and the
                schedule, so a user sees what "auto" chose).
        """
        if self.schedule == AUTO and self.auto is None:
            choice = choose_auto(model_name_or_path, total_steps)
            self.auto, self.schedule = choice.to_dict(), choice.schedule
            self.check_schedule_options(default_of=str(model_name_or_path))

    def check_schedule_options(self, default_of: str | None = None) -> None:
        """The options that only some schedules take, against `schedule` (a name, not "auto").
        `default_of`: the model whose default `schedule` is (it was not named), which the messages say,
        with the schedule to name instead.

        Raises:
            ConfigError: naming `lcsb.full_every`, `lcsb.deep_fraction` or `lcsb.layer_lr_scaling`.
        """
        chosen = f" (what auto chose for this {default_of} job)" if default_of else ""
        mentions = ("lcsb.schedule",) if default_of else ()

        def instead(schedule: str) -> str:
            return f", or name {{lcsb.schedule}} {schedule}" if default_of else ""
        if self.full_every is not None:
            require(schedule_takes("full_every", self.schedule), "lcsb.full_every",
                   f"has no effect with schedule {self.schedule!r}{chosen} (only topfull has full backward "
                   f"steps); remove it{instead('topfull')}", mentions)
        if self.deep_fraction is not None:
            require(schedule_takes("deep_fraction", self.schedule), "lcsb.deep_fraction",
                   f"has no effect with schedule {self.schedule!r}{chosen} (only split divides a step's examples "
                   f"by depth); remove it{instead('split')}", mentions)
        blocker = layer_lr_scaling_blocker(self.schedule)
        require(self.layer_lr_scaling == "none" or blocker is None, "lcsb.layer_lr_scaling",
               f"{self.layer_lr_scaling} has no effect with schedule {self.schedule!r}{chosen} ({blocker}); "
               "use none", mentions)

    def schedule_for(self, *, num_layers: int, seed: int = 0) -> Schedule:
        """This job's schedule for a model with `num_layers` decoder layers: the one way the trainer, the
        memory estimate and the service build a job's schedule. `schedule` "auto" (after `resolve` chose the
        probe-then-switch schedule, whose settings are in `auto`): a `SwitchSchedule` over `auto["then"]`
        with the job's k.

        Raises:
            ConfigError: as `make_schedule`; "auto" not resolved (no `auto` plan); `lcsb.recompute_deep`
                with a schedule none of whose steps trains more than its k layers (it would not take effect).
        """
        if self.schedule == SwitchSchedule.name:
            plan = self.auto or {}
            if plan.get("then") is None:
                raise ConfigError("lcsb.schedule", "is auto but was not resolved for the job (TrainConfig resolves it)")
            then = make_schedule(plan["then"], num_layers=num_layers, k=self.k, fraction=self.fraction, seed=seed)
            if not isinstance(then, PureSchedule):
                raise ConfigError("lcsb.schedule", f"auto cannot switch to {plan['then']!r}, a schedule with state")
            schedule: Schedule = SwitchSchedule(num_layers, then.k, then, int(plan["probe_steps"]),
                                                float(plan["threshold"]))
        else:
            schedule = make_schedule(self.schedule, num_layers=num_layers, k=self.k, fraction=self.fraction,
                                     seed=seed, refresh_every=self.importance_refresh_every, full_every=self.full_every,
                                     deep_fraction=self.deep_fraction)
        deepest = max(len(schedule.layers_for_step(t)) for t in range(schedule.cycle_length))
        if self.recompute_deep and deepest <= schedule.k:
            raise ConfigError("lcsb.recompute_deep", f"has no effect with schedule {self.schedule!r} at k = "
                              f"{schedule.k} (no step trains more than k layers); remove it")
        return schedule
