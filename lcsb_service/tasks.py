"""The one list of task names and worker kinds: what the API sends by and what the workers register.

    TaskName.RUN_TRAINING_JOB    "lcsb.run_job"  (job_id)  claim and run one training job
    TaskName.SWEEP               "lcsb.reap"     ()        one sweeper pass (`lcsb_service.sweeper`)
    TaskName.RUN_EXPORT          "lcsb.run_export" (export_id)  make one job export's GGUF files
                                                   (`worker.export.run`; torch-free, on `Settings.export_queue`)
    TaskName.GENERATE            "lcsb.generate" (request_id)  answer one chat/completions request
                                                 (`lcsb_service.streams`: its payload and token stream)

    WorkerKind.TRAINING          `python -m worker --kind training` (the default): `worker/training/`
    WorkerKind.INFERENCE         `python -m worker --kind inference`: `worker/inference/`, on
                                 `Settings.inference_queue`
    WorkerKind.EXPORT            `python -m worker --kind export`: `worker/export/`, on
                                 `Settings.export_queue`; never imports torch (a light worker)

The names on the wire are unchanged from before this list existed (messages already queued still
match). A task's arguments are ids only (JSON). Queue names are not fixed here: each worker class of
`Settings.worker_classes` names its queue, and a job is sent to the queue of its memory class
(`Job.queue`); inference requests and exports go to their kinds' own queues (`KIND_QUEUE_SETTING`);
the sweeper task runs on the app's default queue (the first class's).
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
    EXPORT = "export"


# The tasks each kind of worker serves (besides the shared sweeper task, which every worker registers).
KIND_TASKS: dict[WorkerKind, tuple[TaskName, ...]] = {
    WorkerKind.TRAINING: (TaskName.RUN_TRAINING_JOB,),
    WorkerKind.INFERENCE: (TaskName.GENERATE,),
    WorkerKind.EXPORT: (TaskName.RUN_EXPORT,)}

# The `Settings` fields naming the queue and the memory cap (MiB) of a kind whose worker consumes one
# queue of its own and caps its own process (`worker.main`); a training worker's are its worker class's.
KIND_QUEUE_SETTING: dict[WorkerKind, tuple[str, str]] = {
    WorkerKind.INFERENCE: ("inference_queue", "inference_memory_mib"),
    WorkerKind.EXPORT: ("export_queue", "export_memory_mib")}
