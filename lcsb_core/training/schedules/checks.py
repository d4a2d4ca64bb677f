"""The one check of each schedule option's own value, their defaults, and `k` from `k` or `fraction`
(torch-free; the schedule classes and `LCSBSettings` both use them)."""

from __future__ import annotations

from lcsb_core.errors import ConfigError

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
    `lcsb_core.training.step.run_step` splits by it and `lcsb_core.training.memory` sizes the split's passes by it."""
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
