"""Which worker class runs a job: the smallest whose memory cap holds the job's estimated peak
(`lcsb_core.training.memory.estimate_for`) times (1 + `Settings.memory_headroom`), and, for a job whose schedule
`auto` chose, the memory rule of `lcsb_core.training.default_schedule` (issue 47): where no class holds full
backprop's depth, `split` instead of a refusal."""

from __future__ import annotations

import dataclasses
from typing import Any

from lcsb_core.errors import ConfigError
from lcsb_core.training.config import TrainConfig
from lcsb_core.training.default_schedule import MEMORY_FALLBACK, memory_choice
from lcsb_core.training.memory import estimate_for
from lcsb_core.training.schedules import Schedule
from lcsb_service.catalog import ModelInfo
from lcsb_service.errors import Unprocessable
from lcsb_service.settings import Settings


def route(model: ModelInfo, cfg: TrainConfig, schedule: Schedule, settings: Settings) -> tuple[dict[str, Any], str]:
    """The smallest worker class whose memory cap holds the estimated peak x (1 + headroom).

    Raises:
        Unprocessable: none does (code `insufficient_memory`; the message gives the estimate).
    """
    best: dict[str, Any] | None = None
    for wc in sorted(settings.worker_classes, key=lambda w: w.memory_mib):
        est = estimate_for(cfg, model.config, device=wc.device, checkpoint_bytes=model.checkpoint_bytes)
        summary = {**est.to_dict(), "k": schedule.k, "device": wc.device, "queue": wc.queue,
                   "memory_cap_mib": wc.memory_mib,
                   "required_mib": round(est.total_mib * (1 + settings.memory_headroom), 1)}
        if summary["required_mib"] <= wc.memory_mib:
            return summary, wc.queue
        best = summary
    caps = ", ".join(f"{w.queue}: {w.memory_mib} MiB" for w in settings.worker_classes)
    need = best["required_mib"] if best else 0
    raise Unprocessable(f"the job needs an estimated {need:.0f} MiB (peak {best['total_mib'] if best else 0:.0f} "
                        f"MiB plus {settings.memory_headroom:.0%} headroom) but no worker class can hold it "
                        f"({caps}); lower batch_size, max_seq_len, lcsb.k or lora.rank, or enable "
                        "lcsb.recompute_deep (topfull, tail, split: the same gradients) or lcsb.gradient_checkpointing",
                        code="insufficient_memory")


def route_auto(model: ModelInfo, cfg: TrainConfig, schedule: Schedule,
                settings: Settings) -> tuple[dict[str, Any], str, Schedule]:
    """`route`, and where "auto" chose a schedule that no worker class holds (full backprop's depth) the
    memory rule of `lcsb_core.training.default_schedule` (`memory_choice`: `MEMORY_FALLBACK`, with its reason in
    `cfg.lcsb.auto`) instead of refusing the job. Returns the estimate, the queue and the schedule run.

    Raises:
        Unprocessable: no worker class holds the job even so (code `insufficient_memory`).
    """
    try:
        return (*route(model, cfg, schedule, settings), schedule)
    except Unprocessable as refused:
        if cfg.lcsb.auto is None or cfg.lcsb.schedule == MEMORY_FALLBACK:
            raise
        largest = max(settings.worker_classes, key=lambda w: w.memory_mib)
        need = estimate_for(cfg, model.config, device=largest.device,
                            checkpoint_bytes=model.checkpoint_bytes).total_mib * (1 + settings.memory_headroom)
        try:   # `replace` builds a new config: its rules between fields run (split needs 2 or more examples a step)
            fallback = dataclasses.replace(cfg, lcsb=dataclasses.replace(
                cfg.lcsb, schedule=MEMORY_FALLBACK, auto=memory_choice(need, largest.memory_mib).to_dict()))
            fallback.lcsb.check_schedule_options()
            fallback_schedule = fallback.lcsb.schedule_for(num_layers=model.num_layers)
        except ConfigError:
            raise refused from None  # the fallback cannot run this job: the refusal says what to change
        estimate, queue = route(model, fallback, fallback_schedule, settings)
        cfg.lcsb = fallback.lcsb
        return estimate, queue, fallback_schedule
