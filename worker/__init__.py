"""The worker side of the service: Celery workers that run jobs on memory-capped machines. The only
bridge between the job records (`lcsb_service`) and the trainer (`lcsb_core`). Each kind of worker has
its own folder (`lcsb_service.tasks.WorkerKind`); the shared pieces stay here.

    python -m worker --kind training     # consume LCSB_WORKER_QUEUE (default: the first worker class)
    python -m worker --kind inference    # consume LCSB_INFERENCE_QUEUE: chat and completions
    python -m worker --kind export       # consume LCSB_EXPORT_QUEUE: GGUF exports, no torch

    app.py         Celery app and its settings (late ack, prefetch 1, visibility timeout, limits)
    main.py        the process entry point (`--kind`, default training)
    context.py     per-process resources: settings, database, storage, the Celery app
    enqueue.py     CeleryEnqueuer: what the API uses to send a committed job (imports no torch)
    tasks.py       the sweeper task (`lcsb_service.sweeper`) and the start-up hook, in every kind
    limits.py      memory caps: cgroup v1 / v2, address-space fallback, CUDA memory fraction
    training/      the training worker: its task, supervisor and training child
    inference/     the inference worker: chat and completions requests
    export/        the export worker: job exports to GGUF and Ollama, torch-free

Workers hold no SQL: what they read and write on a job row is `lcsb_service` functions.
"""
