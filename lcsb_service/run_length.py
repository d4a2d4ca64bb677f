"""The run's real length as the worker finds it: after the dataset check with the model's tokenizer,
the number of usable training examples (JSONL lines left after dropping those with no target token;
a `.txt` corpus's packed blocks) fixes the run's optimizer steps (`TrainConfig.total_steps`, the
trainer's own count). The job's `total_steps` is set to it, and each setting that now needs more steps
than the run has (`TrainConfig.unreachable_settings`: eval_every, save_every, warmup_steps, full_every)
gets a `warn` event and a `setting_not_honoured` entry in the job's `warnings`, named by its request
field. Job creation already refused such settings against the upload's count; this catches what the
tokenizer drops, and corpora, whose blocks only the tokenizer can count.

    record_run_length(db, job_id, cfg, train_examples=len(train.examples))
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import update

from lcsb_core.training.config import TrainConfig
from lcsb_service.db import Database
from lcsb_service.events import add_event, add_warning
from lcsb_service.jobspec import request_name
from lcsb_service.models import Job

NOT_HONOURED = "setting_not_honoured"


def record_run_length(db: Database, job_id: str, cfg: TrainConfig, train_examples: int) -> list[dict[str, Any]]:
    """Set the job's `total_steps` for `train_examples` usable examples; warn (event and `warnings`
    entry) for every setting the run cannot honour. Returns the warning entries (empty when all fit).

    Raises:
        ValueError: train_examples < 1 with an epoch-bound run (the data check refuses such files first).
    """
    steps = cfg.total_steps(train_examples)
    entries: list[dict[str, Any]] = []
    with db.session() as s:
        s.execute(update(Job).where(Job.id == job_id).values(total_steps=steps))
        for err in cfg.unreachable_settings(train_examples):
            message = (f"{err.describe(request_name)}; training goes on without it (the model's tokenizer left "
                       f"{train_examples} usable training examples)")
            data = {"code": NOT_HONOURED, "param": request_name(err.field or ""), "total_steps": steps}
            add_event(s, job_id, message, level="warn", data=data)
            add_warning(s, job_id, {**data, "message": message})
            entries.append({**data, "message": message})
    return entries
