"""The worker side of the service: Celery tasks that run fine-tuning jobs on memory-capped workers.
The only bridge between the job records (`lcsb_service`) and the trainer (`lcsb_core`).

    python -m worker                     # consume LCSB_WORKER_QUEUE (default: the first worker class)

    app.py         Celery app and its settings (late ack, prefetch 1, visibility timeout, limits)
    enqueue.py     CeleryEnqueuer: what the API uses to send a committed job (imports no torch)
    tasks.py       lcsb.run_job(job_id), lcsb.reap(); reaper start at worker start
    supervisor.py  claim -> training child under the memory cap -> heartbeat, time limits -> end state
    child.py       the training process (`python -m worker.child spec.json`): trainer + JobReporter
    reporter.py    trainer callback: events, progress, checkpoints, per-step cancel check
    limits.py      memory caps: cgroup v1 / v2, address-space fallback, CUDA memory fraction
    outcome.py     how a run ended -> error codes (invalid_file, nan_loss, timeout, oom, worker_lost, ...)
    reaper.py      lost-worker reaper and re-send of jobs stuck in `queued`
"""
