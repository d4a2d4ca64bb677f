"""`Schedule`, what the trainer, the memory estimate and the service read of a schedule, and
`BaseSchedule`, what every schedule class shares (the package docstring says what each member means)."""

from __future__ import annotations

import math
from typing import ClassVar, Protocol, runtime_checkable


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
