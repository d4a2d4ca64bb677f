"""Layer-selection schedules: which decoder layers are back-propagated at each optimizer step.

A schedule is a small pure object (no torch): `layers_for_step(step) -> frozenset[int]` with 0-based
layer indices, the same answer for the same (step, seed) every time, so a resumed run selects exactly
what an uninterrupted one would. Follows LCSB (Park et al., arXiv 2602.13073, Sec. 3) and the
LISA/BAdam-style `freeze` peer (arXiv 2403.17919, 2404.02827).

Usage:
    sched = make_schedule("cyclic", num_layers=30, k=8, seed=42)
    sched.layers_for_step(0)   # frozenset({0, ..., 7})
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from lcsb_core.errors import ConfigError

SCHEDULES = ("cyclic", "random", "importance", "full", "freeze")


def resolve_k(num_layers: int, k: int | None = None, fraction: float | None = None) -> int:
    """Layers per step from an absolute `k` or a `fraction` of `num_layers` (rounded, at least 1).

    Raises:
        ConfigError: both or neither given, or the value is out of range; the message names `k` or
            `fraction`.
    """
    if (k is None) == (fraction is None):
        raise ConfigError("lcsb: give exactly one of `k` (layers per step) or `fraction`")
    if k is not None:
        if not 1 <= k <= num_layers:
            raise ConfigError(f"lcsb.k must be in [1, {num_layers}] (the model's decoder layers), got {k}")
        return int(k)
    if not 0.0 < fraction <= 1.0:
        raise ConfigError(f"lcsb.fraction must be in (0, 1], got {fraction}")
    return max(1, min(num_layers, round(fraction * num_layers)))


@dataclass(frozen=True)
class CyclicSchedule:
    """The paper's default: layers split into `ceil(L/k)` contiguous blocks; step `t` trains block
    `t mod ceil(L/k)` (the last block may be shorter). Contiguous blocks rather than stride order:
    the gradient of a contiguous block passes through no skipped layer between its members, so within
    the block it is exact; with stride order every selected layer but the top one sees the skipped
    layers' residual-only approximation. Every layer is trained once per cycle of `ceil(L/k)` steps."""

    num_layers: int
    k: int

    @property
    def cycle_length(self) -> int:
        """Steps per full cycle over all layers."""
        return math.ceil(self.num_layers / self.k)

    def layers_for_step(self, step: int) -> frozenset[int]:
        block = step % self.cycle_length
        return frozenset(range(block * self.k, min(self.num_layers, (block + 1) * self.k)))


@dataclass(frozen=True)
class RandomSchedule:
    """`k` layers drawn uniformly without replacement at each step, from a generator seeded by
    `(seed, step)` so any step's answer is reproducible on its own (resume-safe)."""

    num_layers: int
    k: int
    seed: int = 0

    def layers_for_step(self, step: int) -> frozenset[int]:
        rng = random.Random(self.seed * 1_000_003 + step)
        return frozenset(rng.sample(range(self.num_layers), self.k))


@dataclass(frozen=True)
class FullSchedule:
    """All layers every step: plain LoRA back-propagation, the baseline."""

    num_layers: int

    def layers_for_step(self, step: int) -> frozenset[int]:
        return frozenset(range(self.num_layers))


@dataclass
class ImportanceSchedule:
    """Importance-based selection (the paper's comparison): every `refresh_every` steps the trainer
    runs one full backward (`needs_probe(step)` is True) and reports per-layer LoRA gradient norms
    via `observe`; the following steps train the `k` layers with the largest norms. Until the first
    probe it behaves like the cyclic schedule. The probe costs a full backward, which is why this
    schedule is slower per step on average; the benchmark measures it.

    It holds state (the last scores), so it is resumed from `state_dict()`."""

    num_layers: int
    k: int
    refresh_every: int = 10
    scores: dict[int, float] = field(default_factory=dict)

    def needs_probe(self, step: int) -> bool:
        return step % self.refresh_every == 0

    def observe(self, grad_norms: dict[int, float]) -> None:
        """Record per-layer gradient norms measured by a probe step (layer index -> L2 norm)."""
        self.scores = {int(i): float(v) for i, v in grad_norms.items()}

    def layers_for_step(self, step: int) -> frozenset[int]:
        if self.needs_probe(step):
            return frozenset(range(self.num_layers))
        if not self.scores:
            return CyclicSchedule(self.num_layers, self.k).layers_for_step(step)
        ranked = sorted(range(self.num_layers), key=lambda i: (-self.scores.get(i, 0.0), i))
        return frozenset(ranked[: self.k])

    def state_dict(self) -> dict:
        return {"scores": {str(i): v for i, v in self.scores.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.observe({int(i): v for i, v in state.get("scores", {}).items()})


def make_schedule(name: str, *, num_layers: int, k: int, seed: int = 0, refresh_every: int = 10):
    """Build a schedule by name (one of `SCHEDULES`). `freeze` selects layers like `cyclic`; what
    differs is how the trainer treats the others (frozen but back-propagated through).

    Raises:
        ConfigError: unknown name (the message lists the valid ones).
    """
    if name in ("cyclic", "freeze"):
        return CyclicSchedule(num_layers, k)
    if name == "random":
        return RandomSchedule(num_layers, k, seed)
    if name == "importance":
        return ImportanceSchedule(num_layers, k, refresh_every)
    if name == "full":
        return FullSchedule(num_layers)
    raise ConfigError(f"lcsb.schedule must be one of {', '.join(SCHEDULES)}; got {name!r}")
