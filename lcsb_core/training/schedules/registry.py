"""The schedules by name: `SCHEDULES`, the name check, which options each takes, and `make_schedule`."""

from __future__ import annotations

import dataclasses

from lcsb_core.errors import ConfigError
from lcsb_core.training.schedules.checks import (
    DEFAULT_DEEP_FRACTION,
    DEFAULT_FRACTION,
    DEFAULT_FULL_EVERY,
    DEFAULT_REFRESH_EVERY,
    check_deep_fraction,
    check_full_every,
    resolve_k,
)
from lcsb_core.training.schedules.kinds import (
    CyclicSchedule,
    FreezeSchedule,
    FullSchedule,
    ImportanceSchedule,
    PureSchedule,
    RandomSchedule,
    SplitSchedule,
    SwitchSchedule,
    TailSchedule,
    TopFullSchedule,
    TopSchedule,
)
from lcsb_core.training.schedules.protocol import BaseSchedule, Schedule

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


def check_schedule(name: str, also: tuple[str, ...] = ()) -> None:
    """The one check of a schedule name; `also`: other accepted values (the config's "auto"), listed first.

    Raises:
        ConfigError: `name` is not one of `also` or `SCHEDULES` (the message lists them), naming
            `lcsb.schedule`.
    """
    if name not in _CLASSES and name not in also:
        raise ConfigError("lcsb.schedule", f"must be one of {', '.join((*also, *SCHEDULES))}, got {name!r}")


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
