"""The training worker (`python -m worker --kind training`): runs fine-tuning jobs.

    tasks.py       TaskName.RUN_TRAINING_JOB(job_id)
    admission.py   a delivered job waits, still queued, for its memory reservation in a slot of this worker
    ledger.py      the worker's memory cap shared by its slots: reservation size, first-fit, release
    supervisor.py  admit -> claim -> training child under its reservation -> heartbeat, time limits -> end state
    spec.py        ChildSpec: what the supervisor hands the child (typed, validated JSON)
    child.py       the training process (`python -m worker.training.child spec.json`): trainer + JobReporter
    allocator.py   the child's C allocator (jemalloc or glibc)
    datacheck.py   the child's dataset check with the model's tokenizer, recorded on the job
    reporter.py    trainer callback: events, progress, checkpoints, per-step cancel check
    divergence.py  trainer callback: a finite divergence -> warning, or a stop
    outcome.py     how a run ended -> error codes (invalid_file, nan_loss, timeout, oom, worker_lost, ...)
"""
