"""Training: one LoRA run with selective backpropagation (LCSB, arXiv 2602.13073), supervised or DPO.

The face is torch-free, so the service reads a job's settings and estimates without loading torch:

- `TrainConfig` (`config`): a run's validated settings; `LCSBSettings` and the schedules (`schedules`:
  `SCHEDULES`, `make_schedule`, `LCSBSettings.schedule_for`), the default schedule's rule
  (`default_schedule`), the learning-rate rule (`learning_rate`), checkpoint selection and early
  stopping (`selection`), the peak memory estimate (`memory`: `estimate_for`, `estimate_for_config`).
- `Trainer` (`trainer`, imports torch on first use of the name: PEP 562 `__getattr__`): setup -> train
  -> save, over `step` (one optimizer step), `selective` (per-layer modes on the decoder layers), `loss`
  (the LM head on target positions, chunked), `dpo` (the DPO objective and its reference), `optim`,
  `lora`, `checkpoint`, `init_adapter`, `history`, `callbacks`, `plots`, `memory_probe`, `setup`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from lcsb_core.training.config import TrainConfig
from lcsb_core.training.memory import MemoryEstimate, estimate_for, estimate_for_config
from lcsb_core.training.schedules import SCHEDULES, LCSBSettings, Schedule, make_schedule

if TYPE_CHECKING:
    from lcsb_core.training.trainer import Trainer

__all__ = ["SCHEDULES", "LCSBSettings", "MemoryEstimate", "Schedule", "TrainConfig", "Trainer", "estimate_for",
           "estimate_for_config", "make_schedule"]


def __getattr__(name: str) -> Any:
    """`Trainer`, imported when first named (it loads torch).

    Raises:
        AttributeError: `name` is not one of the room's public names.
    """
    if name == "Trainer":
        return importlib.import_module("lcsb_core.training.trainer").Trainer
    raise AttributeError(f"module 'lcsb_core.training' has no attribute {name!r}")
