"""The schedule a run gets when it names none (`lcsb.schedule: auto`, the default): the product's rule,
applied per base model (issue 30).

The rule (BENCHMARKS.md, "Choosing the default schedule"): **the lowest eval loss at full backprop's
wall-clock time among schedules at least 1.35x faster per step**, measured on the model itself; on a
model where no schedule is that fast, among the schedules faster than full backprop.
`BY_MODEL` holds its outcome for each catalog model; a model outside the catalog (a local folder
that is not an imported catalog model, the tests' tiny models) gets `DEFAULT_SCHEDULE`, the outcome on
SmolLM2-135M-Instruct, where the rule was first applied. The core (`TrainConfig`) and the service
(`lcsb_service.jobspec`) both resolve through `resolve_schedule`, so a job object states the schedule
the worker runs. Torch-free.

    resolve_schedule("auto", "gemma-3-270m")              # "tail", BY_MODEL's value for Gemma-3-270M
    resolve_schedule("tail", "gemma-3-270m")              # "tail": a named schedule is kept
    resolve_schedule(None, "/data/my-model")              # DEFAULT_SCHEDULE
"""

from __future__ import annotations

import os
from pathlib import Path

from lcsb_core.models.catalog import CATALOG, catalog_entry

AUTO = "auto"
"""`lcsb.schedule` value (and the default) meaning "the rule's schedule for this model"."""

DEFAULT_SCHEDULE = "topfull"
"""The rule's outcome on SmolLM2-135M-Instruct (`topfull`, N = 4: 1.37-1.45x faster per step than full
backprop; BENCHMARKS.md), and the schedule of a model the catalog does not know."""

BY_MODEL: dict[str, str] = {
    "SmolLM2-135M-Instruct": DEFAULT_SCHEDULE,
    "gemma-3-270m": "tail",
}
"""Catalog name -> the schedule its jobs get when they name none. Gemma-3-270M: `tail`. Its 262,144-token
LM head runs in full on every schedule, so no schedule reaches 1.35x there (`top` 1.27x, the paper's
`cyclic` 1.29x, measured side by side) and the rule ranks the schedules faster than full backprop: at
full backprop's wall-clock time on GSM8K `tail` (1.13x) reached eval loss 1.097 against `topfull`'s
1.178 and `split`'s 1.202 (full 1.053), and at equal steps it keeps 96 % of full's gain against 74-88 %
(BENCHMARKS.md, "The rule on Gemma-3-270M")."""


def model_key(model_name_or_path: str | os.PathLike[str]) -> str | None:
    """The catalog name of `model_name_or_path` (a catalog name, its hub id, or a folder named after a
    catalog model, as `lcsb import-gguf` writes them), or None for a model outside the catalog."""
    text = str(model_name_or_path)
    entry = catalog_entry(text)
    if entry is not None:
        return entry.name
    name = Path(text).name
    return name if name in CATALOG else None


def default_schedule(model_name_or_path: str | os.PathLike[str]) -> str:
    """The schedule name a run of this base model gets when it names none (`BY_MODEL`, else
    `DEFAULT_SCHEDULE`)."""
    key = model_key(model_name_or_path)
    return BY_MODEL.get(key, DEFAULT_SCHEDULE) if key is not None else DEFAULT_SCHEDULE


def resolve_schedule(schedule: str | None, model_name_or_path: str | os.PathLike[str]) -> str:
    """`schedule` as the run will use it: a named schedule unchanged (its validity is checked by
    `lcsb_core.schedules.check_schedule`, not here); None or `AUTO` -> `default_schedule(model)`."""
    return default_schedule(model_name_or_path) if schedule in (None, AUTO) else schedule
