"""The one list of task names and worker kinds: what the API sends by and what the workers register.

    TaskName.RUN_TRAINING_JOB    "lcsb.run_job"  (job_id)  claim and run one training job
    TaskName.SWEEP               "lcsb.reap"     ()        one sweeper pass (`lcsb_service.sweeper`)
    TaskName.RUN_EXPORT          "lcsb.run_export" (export_id)  make one job export's GGUF files
                                                   (`worker.training.export`; torch-free, sent to the job's queue)
    TaskName.GENERATE            "lcsb.generate" (request_id)  answer one chat/completions request
                                                 (`lcsb_service.streams`: its payload and token stream)

    WorkerKind.TRAINING          `python -m worker --kind training` (the default): `worker/training/`
    WorkerKind.INFERENCE         `python -m worker --kind inference`: `worker/inference/`, on
                                 `Settings.inference_queue`

The names on the wire are unchanged from before this list existed (messages already queued still
match). A task's arguments are ids only (JSON). Queue names are not fixed here: each worker class of
`Settings.worker_classes` names its queue, and a job is sent to the queue of its memory class
(`Job.queue`); the sweeper task runs on the app's default queue (the first class's).
"""

from __future__ import annotations

from enum import StrEnum


class TaskName(StrEnum):
    """A Celery task's registered name (`shared_task(name=...)`, `send_task(...)`)."""

    RUN_TRAINING_JOB = "lcsb.run_job"
    SWEEP = "lcsb.reap"
    RUN_EXPORT = "lcsb.run_export"
    GENERATE = "lcsb.generate"


class WorkerKind(StrEnum):
    """A kind of worker: a folder under `worker/` with its own task module (`worker.<kind>.tasks`)."""

    TRAINING = "training"
    INFERENCE = "inference"


# The tasks each kind of worker serves (besides the shared sweeper task, which every worker registers).
KIND_TASKS: dict[WorkerKind, tuple[TaskName, ...]] = {
    WorkerKind.TRAINING: (TaskName.RUN_TRAINING_JOB, TaskName.RUN_EXPORT),
    WorkerKind.INFERENCE: (TaskName.GENERATE,)}
