"""Layer-selection schedules: which decoder layers are trained (their LoRA parameters get gradients) at
each optimizer step, and what happens to the others. The one place that says what a schedule name means.

A schedule is a small object (no torch) of the type `Schedule` (a runtime-checkable protocol; every
class derives its shared members from `BaseSchedule`: the pure ones as frozen `PureSchedule`
dataclasses, `importance` as a mutable one): `layers_for_step(step) -> frozenset[int]` with 0-based
decoder-layer indices (0 = nearest the embeddings), the same answer for the same (step, seed) every
time, so a resumed run selects exactly what an uninterrupted one would. Each class also states its
facts, which the trainer, the memory estimate and the service read instead of comparing names:

- `identity_skip`: True for the paper's LCSB (Park et al., arXiv 2602.13073, Sec. 3): a layer that is
  not trained but lies above a trained one runs without autograd and is the identity in backward
  (`h_out = h_in + stop_gradient(f(h_in) - h_in)`), so trained layers below it get a *surrogate*
  gradient. False for the exact-gradient schedules: untrained layers are frozen (LoRA parameters
  without grad) but back-propagated through exactly, so every trained layer gets its true gradient.
- `backprop_layers(step)`: the layers whose backward runs at that step (what a step costs and which
  activations it keeps). Under exact gradients that is every layer from the lowest trained one to the
  top; below the lowest trained layer nothing requires grad, so autograd records nothing there.
- `cycle_length`: steps after which the selection pattern repeats (every layer reached once, for the
  cycling schedules); benchmarks read schedules at whole cycles.
- `full_every`: steps between full backward passes (`topfull`), None for every other schedule.
- `deep_fraction`: `split` only (None for the others): the share of each step's examples that
  back-propagate through every layer; the rest back-propagate through the top k only
  (`lcsb_core.step.run_step` splits the batch by examples). The layers below the top k then get an
  exact gradient of those examples every step, instead of the whole batch's every N-th step as in
  `topfull`, for the same backward work (`deep_fraction` 1/N), and the activation peak is never the
  whole batch's through all layers: the larger of the deep rows' through all L and the other rows'
  through the top k (`lcsb_core.memory.depth_split_for`).
- `update_shares()`: per layer, the share of a cycle's step-examples that back-propagate into it (1.0
  for a layer trained on every example of every step; `split`'s lower layers: `deep_fraction`);
  `lcsb_core.optim.layer_lr_scales` scales a layer's learning rate by its inverse (`frequency`) or
  inverse square root (`sqrt`) when `layer_lr_scaling` asks for it.

The rules of the schedule fields' own values are stated once, here (`check_schedule`,
`check_k_or_fraction`, `check_full_every`), and applied by `LCSBSettings` and `make_schedule`; the
defaults live here too (`DEFAULT_FRACTION`, `DEFAULT_FULL_EVERY`, `DEFAULT_REFRESH_EVERY`).

The schedules (L decoder layers, k per step):

| name | trained at step t | gradient | backward through |
|---|---|---|---|
| `cyclic` | block t mod ceil(L/k) of k contiguous layers (the paper's default) | surrogate | the block |
| `random` | k layers drawn uniformly, seeded by (seed, t) (paper) | surrogate | the k layers |
| `importance` | k layers with the largest gradient norm at the last full probe (paper) | surrogate | the k layers |
| `freeze` | like `cyclic` (LISA / BAdam peer, arXiv 2403.17919, 2404.02827) | exact | block to top |
| `top` | the top k layers, every step | exact | top k |
| `topfull` | `top`, and all L layers every `full_every`-th step (the product default) | exact | top k / all |
| `tail` | every layer above a cut that moves down by k each step, cycling | exact | cut to top |
| `split` | all L: the top k on every example, the rest on `deep_fraction` of them | exact | all / top k |
| `full` | all L layers (plain LoRA) | exact | all |

Usage:
    sched = make_schedule("cyclic", num_layers=30, k=8, seed=42)
    sched.layers_for_step(0)   # frozenset({0, ..., 7})
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Protocol, runtime_checkable

from lcsb_core.errors import ConfigError

if TYPE_CHECKING:
    from lcsb_core.config import LCSBSettings

DEFAULT_FULL_EVERY = 4
"""`topfull`'s default: a full backward every 4th step. Chosen by the decision grid (BENCHMARKS.md
section 6): N = 2 recovered more of full backprop's gain per step but is only 1.26x faster per step than
full backprop on the CPU, under the product's 1.35x rule; N = 4 is 1.44x faster."""
DEFAULT_FRACTION = 0.25
"""Layers per step when neither `k` nor `fraction` is given: a quarter of the decoder layers (the paper's
k = L/4); `LCSBSettings` and `make_schedule` both apply it."""
DEFAULT_REFRESH_EVERY = 10
"""`importance`'s steps between full-backward probes (`LCSBSettings.importance_refresh_every`)."""
DEFAULT_DEEP_FRACTION = 0.25
"""`split`'s default share of a step's examples back-propagated through every layer: the backward work
of `topfull` at N = 4 (`LCSBSettings.deep_fraction`)."""


@runtime_checkable
class Schedule(Protocol):
    """What the trainer, the memory estimate and the service read from a schedule (this module's
    docstring says what each member means). Every class `make_schedule` builds satisfies it; the members
    are read-only here, whether a class holds them as fields, class constants or properties."""

    @property
    def name(self) -> str:
        """The schedule's name, one of `SCHEDULES`."""
        ...

    @property
    def num_layers(self) -> int:
        """L, the model's decoder layers."""
        ...

    @property
    def k(self) -> int:
        """Layers trained per step (L for `full`)."""
        ...

    @property
    def identity_skip(self) -> bool:
        """True: untrained layers above a trained one are the identity in backward (surrogate gradient)."""
        ...

    @property
    def uses_k(self) -> bool:
        """False where `k` / `fraction` have no effect (`full`)."""
        ...

    @property
    def full_every(self) -> int | None:
        """Steps between full backward passes (`topfull`); None for schedules without them."""
        ...

    @property
    def deep_fraction(self) -> float | None:
        """`split`: the share of a step's examples back-propagated through every layer; None otherwise."""
        ...

    @property
    def cycle_length(self) -> int:
        """Steps after which the selection pattern repeats."""
        ...

    @property
    def keeps_all_activations(self) -> bool:
        """True when some step back-propagates every layer."""
        ...

    def layers_for_step(self, step: int) -> frozenset[int]:
        """The 0-based decoder layers trained at 0-based optimizer step `step`."""
        ...

    def backprop_layers(self, step: int) -> frozenset[int]:
        """The layers whose backward runs at `step`."""
        ...

    def max_backprop_layers(self) -> int:
        """The most layers any step back-propagates."""
        ...

    def shallow_layers(self, step: int) -> frozenset[int]:
        """`split`: the layers the examples outside `deep_fraction` train at `step` (the top k); for
        every other schedule, `layers_for_step(step)`."""
        ...

    def update_shares(self) -> dict[int, float]:
        """Layer index -> share of a cycle's step-examples that train the layer, in (0, 1] (layers never
        trained, as below `top`'s k, are left out)."""
        ...

    def needs_probe(self, step: int) -> bool:
        """True when the trainer must report every layer's gradient norm after `step` (`observe`)."""
        ...

    def observe(self, grad_norms: dict[int, float]) -> None:
        """Per-layer LoRA gradient norms (layer index -> L2 norm) of a probe step."""
        ...

    def state_dict(self) -> dict | None:
        """What a checkpoint must store to resume the schedule; None for a pure schedule."""
        ...

    def load_state_dict(self, state: dict | None) -> None:
        """Restore `state_dict()`'s output."""
        ...

    def decision(self) -> dict | None:
        """What the schedule decided during the run and from what numbers (`auto`), else None."""
        ...

    def describe(self) -> str:
        """One line for people: what trains per step."""
        ...


def check_schedule(name: str, also: tuple[str, ...] = ()) -> None:
    """The one check of a schedule name; `also`: other accepted values (the config's "auto"), listed first.

    Raises:
        ConfigError: `name` is not one of `also` or `SCHEDULES` (the message lists them), naming
            `lcsb.schedule`.
    """
    if name not in _CLASSES and name not in also:
        raise ConfigError("lcsb.schedule", f"must be one of {', '.join((*also, *SCHEDULES))}, got {name!r}")


def check_k_or_fraction(k: int | None, fraction: float | None) -> None:
    """The one check of `k` and `fraction` on their own (the model's layer count bounds `k` later, in
    `resolve_k`): not both; `k` an integer >= 1; `fraction` in (0, 1]. Either or both may be None.

    Raises:
        ConfigError: naming `lcsb` (both given), `lcsb.k` or `lcsb.fraction`.
    """
    if k is not None and fraction is not None:
        raise ConfigError("lcsb", "give `k` or `fraction`, not both")
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise ConfigError("lcsb.k", f"must be an integer >= 1, got {k!r}")
    if fraction is not None and not 0 < fraction <= 1:
        raise ConfigError("lcsb.fraction", f"must be in (0, 1], got {fraction!r}")


def resolve_k(num_layers: int, k: int | None = None, fraction: float | None = None) -> int:
    """Layers per step from an absolute `k` or a `fraction` of `num_layers` (rounded, at least 1).

    Raises:
        ConfigError: both or neither given, a value out of range (`check_k_or_fraction`), or `k` above
            `num_layers`; the message names `lcsb.k` or `lcsb.fraction`.
    """
    check_k_or_fraction(k, fraction)
    if k is not None:
        if k > num_layers:
            raise ConfigError("lcsb.k", f"must be in [1, {num_layers}] (the model's decoder layers), got {k}")
        return int(k)
    if fraction is None:
        raise ConfigError("lcsb.k", "give exactly one of {lcsb.k} (layers per step) or {lcsb.fraction}",
                          mentions=("lcsb.k", "lcsb.fraction"))
    return max(1, min(num_layers, round(fraction * num_layers)))


class BaseSchedule:
    """What every schedule class shares: the derived facts (`backprop_layers`, `max_backprop_layers`,
    `keeps_all_activations`, `describe`) and the stateless defaults of the probe/state members. A
    subclass is a dataclass with the fields `num_layers` (L) and `k`, and sets `name` and
    `layers_for_step`. A plain class, not a dataclass, so frozen (pure) and mutable (`importance`)
    schedules can both derive from it."""

    num_layers: int
    k: int

    name: ClassVar[str]
    identity_skip: ClassVar[bool] = False
    uses_k: ClassVar[bool] = True
    """False where `k` / `fraction` have no effect (`full` trains every layer)."""
    fixed_shares: ClassVar[str | None] = None
    """Why per-layer learning-rate scaling by update share cannot take effect (`layer_lr_scaling_blocker`),
    or None where it can."""

    @property
    def full_every(self) -> int | None:
        """Steps between full backward passes; None: this schedule has none (`topfull` overrides it)."""
        return None

    @property
    def deep_fraction(self) -> float | None:
        """None: every example of a step trains the same layers (`split` overrides it)."""
        return None

    @property
    def cycle_length(self) -> int:
        """Steps per cycle over all layers, ceil(L/k)."""
        return math.ceil(self.num_layers / self.k)

    def shallow_layers(self, step: int) -> frozenset[int]:
        """The layers every example trains at `step`: `layers_for_step(step)` (`split` overrides it)."""
        return self.layers_for_step(step)

    def update_shares(self) -> dict[int, float]:
        """Layer index -> share of the steps of one cycle (`cycle_length`) that train it; layers no step
        trains are left out. Exact ratios of small integers (1.0 for a layer trained every step)."""
        counts: dict[int, int] = {}
        for t in range(self.cycle_length):
            for i in self.layers_for_step(t):
                counts[i] = counts.get(i, 0) + 1
        return {i: n / self.cycle_length for i, n in sorted(counts.items())}

    def layers_for_step(self, step: int) -> frozenset[int]:
        """The 0-based decoder layers trained at 0-based optimizer step `step`."""
        raise NotImplementedError

    def backprop_layers(self, step: int) -> frozenset[int]:
        """Layers whose backward runs at `step`: the trained ones under identity skip; otherwise every
        layer from the lowest trained one up to the top (the exact path)."""
        selected = self.layers_for_step(step)
        if self.identity_skip:
            return selected
        return frozenset(range(min(selected), self.num_layers)) if selected else frozenset()

    def max_backprop_layers(self) -> int:
        """The most layers any step back-propagates (sets the activation-memory peak)."""
        return max(len(self.backprop_layers(t)) for t in range(self.cycle_length))

    @property
    def keeps_all_activations(self) -> bool:
        """True when some step back-propagates every layer, so the activation peak is full backprop's
        (`full`, `topfull`, `tail`, `importance`'s probe steps)."""
        return self.max_backprop_layers() == self.num_layers

    # Stateful schedules (`importance`) override these; the defaults describe a pure schedule.
    def needs_probe(self, step: int) -> bool:
        """True when the trainer must report every layer's gradient norm after `step` (`observe`)."""
        return False

    def observe(self, grad_norms: dict[int, float]) -> None:
        """Per-layer LoRA gradient norms (layer index -> L2 norm) of a probe step; ignored by default."""

    def state_dict(self) -> dict | None:
        """What a checkpoint must store to resume the schedule; None for a pure schedule."""
        return None

    def load_state_dict(self, state: dict | None) -> None:
        """Restore `state_dict()`'s output; nothing to do for a pure schedule."""

    def decision(self) -> dict | None:
        """What a schedule that decides during the run (`auto`'s `SwitchSchedule`) decided and from what
        numbers, once it has; None for every other schedule."""
        return None

    def describe(self) -> str:
        """One line for people: what trains per step, e.g. "8 of 30 layers per step (cyclic, surrogate
        gradient)"."""
        grad = "surrogate gradient" if self.identity_skip else "exact gradient"
        return f"{self.k} of {self.num_layers} layers per step ({self.name}, {grad})"


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
    through the top `k` only (exact gradients both; `lcsb_core.step.run_step`). The top k layers get
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
    `threshold` and `then` per model, and its measurements, are `lcsb_core.default_schedule`'s.

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


_CLASSES: dict[str, type[PureSchedule] | type[ImportanceSchedule]] = {
    c.name: c for c in (CyclicSchedule, RandomSchedule, ImportanceSchedule, FreezeSchedule, TopSchedule,
                        TopFullSchedule, TailSchedule, SplitSchedule, FullSchedule)}
SCHEDULES: tuple[str, ...] = tuple(_CLASSES)
"""Every schedule name, in the order the docs list them."""
EXACT_GRADIENT_SCHEDULES: tuple[str, ...] = tuple(n for n, c in _CLASSES.items() if not c.identity_skip)
_RESOLVED: dict[str, type[BaseSchedule]] = {**_CLASSES, SwitchSchedule.name: SwitchSchedule}
"""The named schedules and `auto`'s probe-then-switch one (which a job gets by the rule, never by name)."""


def schedule_takes(option: str, name: str) -> bool:
    """True when schedule `name` has the option `option` (a dataclass field such as `full_every`);
    False for unknown names."""
    cls = _RESOLVED.get(name)
    return cls is not None and option in {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]


def layer_lr_scaling_blocker(name: str) -> str | None:
    """Why a `layer_lr_scaling` other than `none` cannot take effect with schedule `name` (every layer
    trains on every example, or the shares are not fixed), or None where it can; None for unknown names
    too (the name's own check reports those)."""
    cls = _RESOLVED.get(name)
    return None if cls is None else cls.fixed_shares


def full_every_for(name: str, full_every: int | None) -> int | None:
    """The `full_every` schedule `name` runs with: `full_every`, or `DEFAULT_FULL_EVERY` when None, for a
    schedule that takes the option; None for the others."""
    if not schedule_takes("full_every", name):
        return None
    return DEFAULT_FULL_EVERY if full_every is None else full_every


def check_deep_fraction(deep_fraction: object) -> float:
    """The one check of a `deep_fraction` value (`split`: the share of a step's examples back-propagated
    through every layer): returns it as a float if it is a number in (0, 1).

    Raises:
        ConfigError: otherwise, naming `lcsb.deep_fraction`.
    """
    if isinstance(deep_fraction, bool) or not isinstance(deep_fraction, (int, float)) \
            or not 0 < deep_fraction < 1:
        raise ConfigError("lcsb.deep_fraction", "must be a number in (0, 1) (the share of a step's examples "
                          f"back-propagated through every layer), got {deep_fraction!r}")
    return float(deep_fraction)


def deep_rows(rows: int, deep_fraction: float) -> int:
    """Rows of a window of `rows` rows that a depth split back-propagates through every layer:
    round(rows x `deep_fraction`), at least 1 and, when there are 2 rows or more, at most rows - 1.
    `lcsb_core.step.run_step` splits by it and `lcsb_core.memory` sizes the split's passes by it."""
    return min(max(1, round(rows * deep_fraction)), max(1, rows - 1))


def check_full_every(full_every: object) -> int:
    """The one check of a `full_every` value (steps between full backward passes of `topfull`):
    returns it if it is an integer >= 2.

    Raises:
        ConfigError: otherwise, naming `lcsb.full_every`.
    """
    if isinstance(full_every, bool) or not isinstance(full_every, int) or full_every < 2:
        raise ConfigError("lcsb.full_every", "must be an integer >= 2 (steps between full backward passes), "
                          f"got {full_every!r}")
    return full_every


def make_schedule(name: str, *, num_layers: int, k: int | None = None, fraction: float | None = None,
                  seed: int = 0, refresh_every: int = DEFAULT_REFRESH_EVERY,
                  full_every: int | None = None, deep_fraction: float | None = None) -> Schedule:
    """Build a schedule by name (one of `SCHEDULES`), resolving `k` from `k` or `fraction` (`full` ignores
    both and uses k = L; with neither given, `DEFAULT_FRACTION` of L; `full_every` is read by `topfull`
    only, None: `DEFAULT_FULL_EVERY`).

    Raises:
        ConfigError: unknown name (the message lists the valid ones), `k`/`fraction` out of range, or
            `full_every` < 2 (each message names its field).
    """
    check_schedule(name)
    cls = _CLASSES[name]
    if cls is FullSchedule:
        return FullSchedule(num_layers, num_layers)
    if k is None and fraction is None:
        fraction = DEFAULT_FRACTION
    k = resolve_k(num_layers, k, fraction)
    if cls is RandomSchedule:
        return RandomSchedule(num_layers, k, seed)
    if cls is ImportanceSchedule:
        return ImportanceSchedule(num_layers, k, refresh_every)
    if cls is TopFullSchedule:
        return TopFullSchedule(num_layers, k, check_full_every(full_every_for(name, full_every)))
    if cls is SplitSchedule:
        fraction_deep = DEFAULT_DEEP_FRACTION if deep_fraction is None else deep_fraction
        return SplitSchedule(num_layers, k, check_deep_fraction(fraction_deep))
    return cls(num_layers, k)


def schedule_for(lcsb: LCSBSettings, *, num_layers: int, seed: int = 0) -> Schedule:
    """The schedule of an `LCSBSettings` (`lcsb_core.config`) for a model with `num_layers` decoder
    layers: the one way the trainer, the memory estimate and the service resolve a job's schedule.
    `lcsb.schedule` "auto" (after `LCSBSettings.resolve` chose the probe-then-switch schedule, whose
    settings are in `lcsb.auto`): a `SwitchSchedule` over `lcsb.auto["then"]` with the job's k.

    Raises:
        ConfigError: as `make_schedule`; "auto" not resolved (no `lcsb.auto` plan); `lcsb.recompute_deep`
            with a schedule none of whose steps trains more than its k layers (it would not take effect).
    """
    if lcsb.schedule == SwitchSchedule.name:
        plan = lcsb.auto or {}
        if plan.get("then") is None:
            raise ConfigError("lcsb.schedule", "is auto but was not resolved for the job (TrainConfig resolves it)")
        then = make_schedule(plan["then"], num_layers=num_layers, k=lcsb.k, fraction=lcsb.fraction, seed=seed)
        if not isinstance(then, PureSchedule):
            raise ConfigError("lcsb.schedule", f"auto cannot switch to {plan['then']!r}, a schedule with state")
        schedule: Schedule = SwitchSchedule(num_layers, then.k, then, int(plan["probe_steps"]),
                                            float(plan["threshold"]))
    else:
        schedule = make_schedule(lcsb.schedule, num_layers=num_layers, k=lcsb.k, fraction=lcsb.fraction, seed=seed,
                                 refresh_every=lcsb.importance_refresh_every, full_every=lcsb.full_every,
                                 deep_fraction=lcsb.deep_fraction)
    deepest = max(len(schedule.layers_for_step(t)) for t in range(schedule.cycle_length))
    if lcsb.recompute_deep and deepest <= schedule.k:
        raise ConfigError("lcsb.recompute_deep", f"has no effect with schedule {lcsb.schedule!r} at k = {schedule.k} "
                          "(no step trains more than k layers); remove it")
    return schedule
