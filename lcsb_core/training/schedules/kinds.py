"""The schedule classes (the package docstring's table): the pure ones as frozen `PureSchedule`
dataclasses, `importance` with its probe state, and `auto`'s probe-then-switch `SwitchSchedule`."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import ClassVar

from lcsb_core.training.schedules.checks import (
    DEFAULT_DEEP_FRACTION,
    DEFAULT_FULL_EVERY,
    DEFAULT_REFRESH_EVERY,
)
from lcsb_core.training.schedules.protocol import BaseSchedule


@dataclass(frozen=True)
class PureSchedule(BaseSchedule):
    """A stateless schedule: its selection is a function of the step (and its fields) alone."""

    num_layers: int
    k: int


@dataclass(frozen=True)
class CyclicSchedule(PureSchedule):
    """The paper's default: layers split into `ceil(L/k)` contiguous blocks; step `t` trains block
    `t mod ceil(L/k)` (the last block may be shorter); layers above the block are identity-skipped.
    Contiguous blocks rather than stride order: the gradient of a contiguous block passes through no
    skipped layer between its members, so within the block it is exact; with stride order every
    selected layer but the top one sees the skipped layers' residual-only approximation."""

    name: ClassVar[str] = "cyclic"
    identity_skip: ClassVar[bool] = True

    def layers_for_step(self, step: int) -> frozenset[int]:
        block = step % self.cycle_length
        return frozenset(range(block * self.k, min(self.num_layers, (block + 1) * self.k)))


@dataclass(frozen=True)
class FreezeSchedule(CyclicSchedule):
    """LISA/BAdam-style peer: the same blocks as `cyclic`, but the other layers are frozen and
    back-propagated through, so the block gets its exact gradient (backward runs from the top down to
    the block)."""

    name: ClassVar[str] = "freeze"
    identity_skip: ClassVar[bool] = False


@dataclass(frozen=True)
class RandomSchedule(PureSchedule):
    """The paper's random variant: `k` layers drawn uniformly without replacement at each step, from a
    generator seeded by `(seed, step)` so any step's answer is reproducible on its own (resume-safe).
    Unselected layers are identity-skipped."""

    seed: int = 0
    name: ClassVar[str] = "random"
    identity_skip: ClassVar[bool] = True

    def layers_for_step(self, step: int) -> frozenset[int]:
        rng = random.Random(self.seed * 1_000_003 + step)
        return frozenset(rng.sample(range(self.num_layers), self.k))


@dataclass(frozen=True)
class FullSchedule(PureSchedule):
    """All layers every step: plain LoRA back-propagation, the baseline (k = L)."""

    name: ClassVar[str] = "full"
    uses_k: ClassVar[bool] = False
    fixed_shares: ClassVar[str | None] = "it trains every layer on every step"

    def layers_for_step(self, step: int) -> frozenset[int]:
        return frozenset(range(self.num_layers))

    def describe(self) -> str:
        return f"all {self.num_layers} layers per step (full backprop)"


@dataclass(frozen=True)
class TopSchedule(PureSchedule):
    """The top `k` decoder layers (nearest the LM head) every step, with their exact gradient; the
    backward stops below them, so a step costs a forward plus k layers' backward. Layers below never
    train (their LoRA B stays at its zero init)."""

    name: ClassVar[str] = "top"

    @property
    def cycle_length(self) -> int:
        return 1

    def layers_for_step(self, step: int) -> frozenset[int]:
        return frozenset(range(self.num_layers - self.k, self.num_layers))


@dataclass(frozen=True)
class TopFullSchedule(PureSchedule):
    """`top` on most steps and a full backward (all L layers, exact) on every `full_every`-th step
    (1-based steps N, 2N, ...), so every layer trains once per `full_every` steps. Average backward
    work per step: (k (N-1) + L) / N layers."""

    full_every: int = DEFAULT_FULL_EVERY
    name: ClassVar[str] = "topfull"

    @property
    def cycle_length(self) -> int:
        return self.full_every

    def is_full_step(self, step: int) -> bool:
        """True when 0-based `step` back-propagates every layer."""
        return (step + 1) % self.full_every == 0

    def layers_for_step(self, step: int) -> frozenset[int]:
        low = 0 if self.is_full_step(step) else self.num_layers - self.k
        return frozenset(range(low, self.num_layers))

    def describe(self) -> str:
        return (f"top {self.k} of {self.num_layers} layers per step, all {self.num_layers} once every "
                f"{self.full_every} steps (topfull, exact gradient)")


@dataclass(frozen=True)
class TailSchedule(PureSchedule):
    """Every layer above a cut trains; the cut moves down by `k` layers each step and wraps, from the
    top down: step t trains layers [max(0, L - (t mod c + 1) k), L) with c = ceil(L/k), so the whole
    model is reached in c steps (the last step of a cycle is a full step). A step back-propagates what
    `freeze`'s would on average, but trains every layer it back-propagates through, exactly."""

    name: ClassVar[str] = "tail"

    def layers_for_step(self, step: int) -> frozenset[int]:
        depth = (step % self.cycle_length + 1) * self.k
        return frozenset(range(max(0, self.num_layers - depth), self.num_layers))

    def describe(self) -> str:
        return (f"the top {self.k}, {2 * self.k}, ... of {self.num_layers} layers in turn, all {self.num_layers} "
                f"once every {self.cycle_length} steps (tail, exact gradient)")


@dataclass(frozen=True)
class SplitSchedule(PureSchedule):
    """Depth split over examples: every step trains all L layers, but only the first `deep_fraction`
    of the step's examples (at least one) back-propagate through every layer; the others back-propagate
    through the top `k` only (exact gradients both; `lcsb_core.training.step.run_step`). The top k layers get
    the whole batch's gradient, the layers below the exact mean gradient of the deep examples. Same
    backward work per step as `topfull` with N = 1/`deep_fraction` (k (1 - f) + L f layers per example),
    but the lower layers update every step, and the activation peak is the larger of the two passes'
    (the deep rows through all L, the others through the top k; issue 30), not the whole batch's."""

    deep_fraction: float = DEFAULT_DEEP_FRACTION
    name: ClassVar[str] = "split"

    @property
    def cycle_length(self) -> int:
        return 1

    def layers_for_step(self, step: int) -> frozenset[int]:
        return frozenset(range(self.num_layers))

    def shallow_layers(self, step: int) -> frozenset[int]:
        return frozenset(range(self.num_layers - self.k, self.num_layers))

    def update_shares(self) -> dict[int, float]:
        """The top k: 1.0 (every example); the layers below: `deep_fraction` (the deep examples only; the
        nominal share, which a small batch rounds, `deep_rows`)."""
        low = self.num_layers - self.k
        return {i: (1.0 if i >= low else self.deep_fraction) for i in range(self.num_layers)}

    def describe(self) -> str:
        return (f"top {self.k} of {self.num_layers} layers on every example, all {self.num_layers} on "
                f"{self.deep_fraction:.0%} of each step's examples (split, exact gradient)")


@dataclass
class ImportanceSchedule(BaseSchedule):
    """Importance-based selection (the paper's comparison): every `refresh_every` steps the trainer
    runs one full backward (`needs_probe(step)` is True) and reports per-layer LoRA gradient norms
    via `observe`; the following steps train the `k` layers with the largest norms, identity-skipping
    the others. Until the first probe it behaves like the cyclic schedule. The probe costs a full
    backward, which is why this schedule is slower per step on average; the benchmark measures it.

    It holds state (the last scores), so it is mutable (not a `PureSchedule`) and resumed from
    `state_dict()`."""

    num_layers: int
    k: int
    refresh_every: int = DEFAULT_REFRESH_EVERY
    scores: dict[int, float] = field(default_factory=dict)

    name: ClassVar[str] = "importance"
    identity_skip: ClassVar[bool] = True
    fixed_shares: ClassVar[str | None] = "its selection follows its probes, so no layer has a fixed share of steps"

    @property
    def cycle_length(self) -> int:
        """Steps between probes: the selection may change after each."""
        return self.refresh_every

    def needs_probe(self, step: int) -> bool:
        """True every `refresh_every` steps, from step 0."""
        return step % self.refresh_every == 0

    def observe(self, grad_norms: dict[int, float]) -> None:
        """Record per-layer gradient norms measured by a probe step (layer index -> L2 norm)."""
        self.scores = {int(i): float(v) for i, v in grad_norms.items()}

    def layers_for_step(self, step: int) -> frozenset[int]:
        """All layers at a probe step; else the `k` highest-scored (cyclic blocks before the first probe)."""
        if self.needs_probe(step):
            return frozenset(range(self.num_layers))
        if not self.scores:
            return CyclicSchedule(self.num_layers, self.k).layers_for_step(step)
        ranked = sorted(range(self.num_layers), key=lambda i: (-self.scores.get(i, 0.0), i))
        return frozenset(ranked[: self.k])

    def state_dict(self) -> dict:
        """The last probe's scores, with string keys (JSON-safe)."""
        return {"scores": {str(i): v for i, v in self.scores.items()}}

    def load_state_dict(self, state: dict | None) -> None:
        """Restore the scores of `state_dict()` (None: no probe yet)."""
        self.observe({int(i): v for i, v in (state or {}).get("scores", {}).items()})


@dataclass
class SwitchSchedule(BaseSchedule):
    """`auto`'s probe-then-switch schedule (issue 47): the first `probe_steps` optimizer steps
    back-propagate every layer (they train like full backprop's, so nothing is spent on the probe), and
    the trainer reports each of them's per-layer LoRA gradient norms (`needs_probe` / `observe`). From
    them the schedule computes the **lower-layer share**: over the probe steps, the sum over the layers
    below the top `k` of the squared gradient norm, divided by the sum over all layers (a number in
    [0, 1]; the share of the first steps' update those layers would carry). After the probe the run
    switches to `then` (a pure schedule, e.g. `tail`, its step 0 at step `probe_steps`) when that share
    is below `threshold`, and keeps every layer (full backprop) otherwise. The rule that sets
    `threshold` and `then` per model, and its measurements, are `lcsb_core.training.default_schedule`'s.

    Mutable (the observed shares and the decision) and resumed from `state_dict()`, like `importance`.
    `decision()` is what the job reports: the numbers it saw and what it chose."""

    num_layers: int
    k: int
    then: PureSchedule
    probe_steps: int
    threshold: float
    shares: list[float] = field(default_factory=list)
    switched: bool | None = None

    name: ClassVar[str] = "auto"
    fixed_shares: ClassVar[str | None] = "its selection follows its probe, so no layer has a fixed share of steps"

    @property
    def cycle_length(self) -> int:
        """The probe, then `then`'s cycle: every selection the run can make appears in this many steps."""
        return self.probe_steps + self.then.cycle_length

    def needs_probe(self, step: int) -> bool:
        """True for the first `probe_steps` steps."""
        return step < self.probe_steps

    def lower_share(self, grad_norms: dict[int, float]) -> float:
        """The layers below the top `k`'s share of the squared LoRA gradient norm of one step (0.0 when
        every norm is 0)."""
        cut = self.num_layers - self.k
        total = sum(v * v for v in grad_norms.values())
        return sum(v * v for i, v in grad_norms.items() if i < cut) / total if total > 0 else 0.0

    def observe(self, grad_norms: dict[int, float]) -> None:
        """Record one probe step's per-layer gradient norms; after the last probe step, decide."""
        if self.switched is not None:
            return
        self.shares.append(self.lower_share(grad_norms))
        if len(self.shares) >= self.probe_steps:
            self.switched = sum(self.shares) / len(self.shares) < self.threshold

    def mean_share(self) -> float | None:
        """The probe steps' mean lower-layer share (None before the first)."""
        return sum(self.shares) / len(self.shares) if self.shares else None

    def layers_for_step(self, step: int) -> frozenset[int]:
        """Every layer during the probe and after a decision to stay at full depth; `then`'s selection
        (shifted by the probe) after a switch."""
        if step < self.probe_steps or not self.switched:
            return frozenset(range(self.num_layers))
        return self.then.layers_for_step(step - self.probe_steps)

    def decision(self) -> dict | None:
        """What `auto` saw and chose, once the probe is over (None before): `probe_steps`,
        `lower_layers` (how many layers the share counts), `lower_share` (mean over the probe steps),
        `lower_share_per_step`, `threshold`, `switched` (True: `then` from then on; False: every layer),
        `schedule` (`then`'s name or "full", for people) and `from_step` (the
        1-based first step of the schedule chosen)."""
        if self.switched is None:
            return None
        return {"probe_steps": self.probe_steps, "lower_layers": self.num_layers - self.k,
                "lower_share": round(self.mean_share() or 0.0, 4),
                "lower_share_per_step": [round(v, 4) for v in self.shares], "threshold": self.threshold,
                "switched": self.switched, "schedule": self.then.name if self.switched else "full",
                "from_step": self.probe_steps + 1}

    def state_dict(self) -> dict:
        """The probe's shares and the decision (JSON-safe)."""
        return {"shares": list(self.shares), "switched": self.switched}

    def load_state_dict(self, state: dict | None) -> None:
        """Restore `state_dict()`'s output (None: the probe has not started)."""
        state = state or {}
        self.shares = [float(v) for v in state.get("shares", [])]
        self.switched = state.get("switched")

    def describe(self) -> str:
        return (f"auto: all {self.num_layers} layers for {self.probe_steps} probe steps, then {self.then.name} "
                f"({self.then.describe()}) if the lower {self.num_layers - self.k} layers carry under "
                f"{self.threshold:.1%} of the gradient, else all layers (exact gradient)")
