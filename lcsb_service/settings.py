"""One validated settings object for the API, the worker and the key command (pydantic-settings).

Every value comes from an `LCSB_`-prefixed environment variable (or a `.env` file), e.g.

    LCSB_ENVIRONMENT=production LCSB_SECRET_KEY=... \
    LCSB_DATABASE_URL=postgresql+psycopg://lcsb@db/lcsb LCSB_BROKER_URL=redis://redis:6379/0 \
    LCSB_STORAGE_URL=s3://bucket/lcsb \
    LCSB_WORKER_CLASSES='[{"queue": "cpu-8g", "memory_mib": 8192, "device": "cpu"}]' \
    uvicorn --factory api.main:create_app          # or: LCSB_WORKER_QUEUE=cpu-8g python -m worker

Nothing reads the environment at import time: build `Settings()` where the process starts.
Outside `development` the default secret is refused (it peppers the API-key hashes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from lcsb_core.data.settings import DataSettings
from lcsb_core.training.config import TrainConfig

DEFAULT_SECRET = "insecure-development-secret-change-me"
Malloc = Literal["jemalloc", "glibc"]   # a C allocator the training child can run with
WaitPolicy = Literal["PASSIVE", "ACTIVE"]   # OpenMP's OMP_WAIT_POLICY for the training child
LogLevel = Annotated[Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
                     BeforeValidator(lambda v: v.upper() if isinstance(v, str) else v)]


class WorkerClass(BaseModel):
    """A pool of workers consuming one queue: `memory_mib` is the memory cap of one worker's training
    (MiB; a job refused at creation unless its estimate fits it), `device` what they train on (`cpu` or
    `cuda`), `max_concurrent_jobs` how many jobs one worker runs at once.

    One job at a time (the default, on CPU and CUDA): the job's process gets the whole cap, as before
    there were slots. With N > 1 jobs share the cap by their memory estimates: each reserves
    `estimate x (1 + Settings.reservation_margin)` (at most the cap), runs capped at that reservation,
    and waits, still `queued`, until its reservation fits beside the running ones (`worker.training.ledger`).
    Set N to what the CPU or GPU share allows: the cores or the device are shared by the N processes.
    """

    queue: str = Field(min_length=1, max_length=100)
    memory_mib: int = Field(gt=0)
    device: Literal["cpu", "cuda"] = "cpu"
    max_concurrent_jobs: int = Field(default=1, ge=1, le=256)


class Settings(BaseSettings):
    """Service settings. Paths are relative to the working directory unless absolute.

    Units: bytes for sizes, MiB for memory, seconds for durations.
    """

    model_config = SettingsConfigDict(env_prefix="LCSB_", env_file=".env", extra="ignore")

    environment: Literal["development", "test", "production"] = "development"
    log_level: LogLevel = "INFO"             # the worker's Celery log level (any case: info, INFO)
    secret_key: SecretStr = SecretStr(DEFAULT_SECRET)
    data_dir: Path = Path("var")
    database_url: str | None = None          # default: sqlite:///<data_dir>/lcsb.sqlite3
    storage_url: str | None = None           # fsspec URL; default: <data_dir>/storage
    broker_url: str = "filesystem://"        # embedded default (no server); redis://... in production
    broker_folder: Path | None = None        # filesystem broker's folder; default <data_dir>/broker

    max_upload_bytes: int = Field(default=512 * 2**20, gt=0)
    upload_chunk_bytes: int = Field(default=2**20, gt=0)
    min_examples: int = Field(default=DataSettings.min_examples, ge=1)

    model_dirs: list[Path] = Field(default_factory=list)   # default: lcsb_core's model cache
    worker_classes: list[WorkerClass] = Field(
        default_factory=lambda: [WorkerClass(queue="lcsb-cpu", memory_mib=8192, device="cpu")], min_length=1)
    memory_headroom: float = Field(default=0.10, ge=0, le=1)   # estimate x (1 + headroom) must fit
    # what OpenAI's "auto" hyperparameters resolve to (the trainer's defaults); `n_epochs` "auto" follows
    # OpenAI's rule from the example count (`hyperparameters.auto_epochs`), `default_epochs` when it is unknown (.txt);
    # the learning rate "auto" (multiplier 1) is the measured rule for the job's schedule
    # (`lcsb_core.training.learning_rate`) unless an operator fixes `base_learning_rate`
    base_learning_rate: float | None = Field(default=None, gt=0, lt=1)
    default_batch_size: int = Field(default=TrainConfig.batch_size, ge=1)
    default_epochs: int = Field(default=1, ge=1)

    sse_poll_interval_s: float = Field(default=1.0, gt=0)
    sse_max_duration_s: float = Field(default=3600.0, gt=0)

    # API concurrency, sized together (`api.admission`, `api.main`): at most `api_max_concurrency`
    # requests are handled at once, each using at most one database connection at a time; up to
    # `api_max_waiting` more wait for a slot (holding no thread or connection) for at most
    # `api_queue_timeout_s`, the rest are answered 503 with `Retry-After: api_retry_after_s`. Open
    # event streams poll with at most `sse_poll_concurrency` connections at once. The API's pool is
    # `db_pool_size` connections (no overflow), and it waits `db_pool_timeout_s` at most for one.
    api_max_concurrency: int = Field(default=32, ge=1, le=1000)
    api_max_waiting: int = Field(default=1024, ge=0)
    api_queue_timeout_s: float = Field(default=5.0, ge=0)
    api_retry_after_s: float = Field(default=1.0, gt=0)
    sse_poll_concurrency: int = Field(default=4, ge=1)
    db_pool_timeout_s: float = Field(default=10.0, gt=0)
    enqueuer: str = "worker.enqueue:CeleryEnqueuer"   # import path of an Enqueuer class

    # Workers (`python -m worker`). The worker serves one class of `worker_classes`: its queue, memory
    # cap and device. Time limits: at `job_time_limit_s` the training is asked to stop (error `timeout`),
    # `job_kill_grace_s` later it is killed. A `running` job whose heartbeat is older than
    # `heartbeat_timeout_s` is failed with `worker_lost` by the reaper (every `reaper_interval_s` in each
    # worker and each API process, and at their start), so a lost job ends within
    # heartbeat_timeout_s + reaper_interval_s.
    worker_queue: str | None = None                         # default: the first worker class
    worker_runs_dir: Path | None = None                     # run folders; default <data_dir>/runs
    cgroup_parent: Path | None = None                       # default: this process's memory cgroup
    address_space_slack_mib: int = Field(default=8192, ge=0)  # rlimit fallback: cap + this (virtual)
    # CPU threads of each training process (OMP_NUM_THREADS). None: derived (`worker.threads`)
    # from the CPUs the worker may use (affinity and cgroup quota) / the jobs it runs at once; torch's own
    # default counts the host's cores and ignores a quota, and OpenMP threads beyond the cores made the
    # small matmuls of a training step about 30x slower on a 2-core test machine.
    worker_torch_threads: int | None = Field(default=None, ge=1)
    # OMP_WAIT_POLICY of each training process. None: PASSIVE (a thread waiting at a barrier sleeps instead
    # of holding its core, issue 36). Both, and where they came from, are in the "Training started" event.
    worker_omp_wait_policy: Annotated[WaitPolicy | None,
                                      BeforeValidator(lambda v: v.upper() if isinstance(v, str) else v)] = None
    # The C allocator of a CPU worker's training process (`worker.training.allocator`; CUDA workers keep glibc):
    # jemalloc, preloaded, when the worker has it (the README main job's peak 2,861 against 3,733 MiB
    # at the same speed, BENCHMARKS.md 1h), else glibc.
    worker_malloc: Malloc = "jemalloc"
    # A job's memory reservation on a worker that runs several at once (`WorkerClass.max_concurrent_jobs`
    # > 1): its recorded estimate x (1 + this), at most the class cap, which is also its process's cap.
    # 0.25 because the estimate may be up to 20 % under the measured peak on CPU (tests/core/test_memory.py):
    # measured <= 1.25 x estimate. (Creation's `memory_headroom` only picks a class.)
    reservation_margin: float = Field(default=0.25, ge=0, le=4)
    job_time_limit_s: float = Field(default=24 * 3600.0, gt=0)
    job_kill_grace_s: float = Field(default=120.0, gt=0)
    heartbeat_interval_s: float = Field(default=15.0, gt=0)
    heartbeat_timeout_s: float = Field(default=120.0, gt=0)
    reaper_interval_s: float = Field(default=30.0, gt=0)
    # The API runs the same sweep (`api_sweeper`), so lost jobs end and lost messages are re-sent even
    # with no worker alive. A queued job is re-sent every `resend_queued_after_s` while it waits (its
    # message may be lost; the claim makes extra deliveries no-ops).
    api_sweeper: bool = True
    resend_queued_after_s: float = Field(default=30.0, gt=0)
    # GGUF exports (docs/export.md) run on export workers (`python -m worker --kind export`, torch-free):
    # they consume `export_queue`, one export at a time, and cap their own process at `export_memory_mib`
    # (measured peaks, BENCHMARKS.md "GGUF export": SmolLM2 all formats 332 MiB, Gemma-3-270M 3,657 MiB).
    # An export has no heartbeat (it takes seconds to a minute); one still `running` this long after its
    # claim lost its worker and fails `worker_lost`.
    export_queue: str = Field(default="lcsb-export", min_length=1, max_length=100)
    export_memory_mib: int = Field(default=4096, gt=0)
    export_lost_after_s: float = Field(default=900.0, gt=0)
    # Uploads are written under a temporary name and renamed when complete; temporary objects not
    # written for `stale_upload_after_s`, and stored uploads with no row, are removed at API start.
    stale_upload_after_s: float = Field(default=600.0, ge=0)
    # Serving (`/v1/chat/completions`, `/v1/completions`; `python -m worker --kind inference`, docs/inference.md).
    # Inference workers consume `inference_queue`, cap their own process at `inference_memory_mib`, and
    # keep at most `inference_adapter_cache_count` adapters of at most `inference_adapter_cache_mib` MiB
    # in all beside one base per model. `inference_engine` "auto": llama.cpp (llama-cpp-python) on the base's
    # catalog GGUF on CPU, else transformers + PEFT in `inference_precision` (fp32: fastest of its options on
    # CPU); "llama_cpp" / "transformers" force one (docs/inference.md has the measurements).
    # The API answers 400 past `inference_max_new_tokens` and 503 `server_overloaded` (Retry-After
    # `api_retry_after_s`) while `inference_max_pending` of its requests are in flight; a request no
    # worker starts within `inference_start_timeout_s` is 503 too. An inference worker takes up to
    # `inference_max_sequences` requests at once (Celery threads) and the llama.cpp engine decodes them
    # together (continuous batching, `lcsb_core.inference.llama_serving`); fewer slots where their KV cache would not
    # fit the memory cap (`worker.inference.serving.sequence_slots`); the transformers engine one at a time.
    inference_queue: str = Field(default="lcsb-inference", min_length=1, max_length=100)
    inference_device: Literal["cpu", "cuda"] = "cpu"
    inference_memory_mib: int = Field(default=4096, gt=0)
    inference_precision: Literal["fp32", "bf16"] = "fp32"
    inference_engine: Literal["auto", "llama_cpp", "transformers"] = "auto"
    inference_adapter_cache_count: int = Field(default=8, ge=1)
    inference_adapter_cache_mib: int = Field(default=512, ge=1)
    inference_max_new_tokens: int = Field(default=512, ge=1)
    inference_max_pending: int = Field(default=16, ge=0)
    inference_max_sequences: int = Field(default=4, ge=1, le=64)
    inference_start_timeout_s: float = Field(default=120.0, gt=0)
    inference_stream_ttl_s: float = Field(default=600.0, gt=0)   # a request's payload and stream expire
    broker_visibility_timeout_s: float | None = None        # default: job_time_limit_s + grace + 1 h
    broker_transport_options: dict[str, Any] = Field(default_factory=dict)  # merged into Celery's

    @model_validator(mode="after")
    def _check_worker_timing(self) -> Settings:
        if self.heartbeat_timeout_s < 2 * self.heartbeat_interval_s:
            raise ValueError("LCSB_HEARTBEAT_TIMEOUT_S must be at least twice LCSB_HEARTBEAT_INTERVAL_S "
                             f"({self.heartbeat_timeout_s} < 2 x {self.heartbeat_interval_s})")
        if self.worker_queue is not None and self.worker_queue not in {w.queue for w in self.worker_classes}:
            raise ValueError(f"LCSB_WORKER_QUEUE {self.worker_queue!r} is not one of LCSB_WORKER_CLASSES' queues")
        return self

    @model_validator(mode="after")
    def _refuse_default_secret(self) -> Settings:
        if self.environment != "development" and self.secret_key.get_secret_value() == DEFAULT_SECRET:
            raise ValueError(
                f"LCSB_SECRET_KEY is the built-in default; set a secret in the {self.environment} environment")
        if len(self.secret_key.get_secret_value()) < 16:
            raise ValueError("LCSB_SECRET_KEY must be at least 16 characters")
        return self

    @property
    def resolved_database_url(self) -> str:
        """The database URL (SQLite file under `data_dir` by default)."""
        return self.database_url or f"sqlite:///{(self.data_dir / 'lcsb.sqlite3').as_posix()}"

    @property
    def resolved_storage_url(self) -> str:
        """The fsspec URL of artifact storage (a local folder under `data_dir` by default)."""
        return self.storage_url or str((self.data_dir / "storage").resolve())

    @property
    def resolved_model_dirs(self) -> list[Path]:
        """Folders holding base models (one sub-folder per model)."""
        if self.model_dirs:
            return list(self.model_dirs)
        from lcsb_core.models.gguf_import import model_cache_dir  # torch-free module

        return [model_cache_dir()]

    @property
    def db_pool_size(self) -> int:
        """The API's database connections: one per admitted request, one per concurrent event-stream
        poll, and two for the sweeper and `/healthz`' own check."""
        return self.api_max_concurrency + self.sse_poll_concurrency + 2

    @property
    def api_thread_limit(self) -> int:
        """Worker threads of the API's event loop (AnyIO's default limiter): one per admitted request
        plus room for streamed downloads and event-stream polls."""
        return self.api_max_concurrency + self.sse_poll_concurrency + 8

    @property
    def resolved_broker_folder(self) -> Path:
        return self.broker_folder or self.data_dir / "broker"

    @property
    def worker_class(self) -> WorkerClass:
        """The class this worker serves (`worker_queue`, default the first of `worker_classes`)."""
        return next((w for w in self.worker_classes if w.queue == self.worker_queue), self.worker_classes[0])

    @property
    def resolved_visibility_timeout_s(self) -> float:
        """Redis redelivers a message unacknowledged this long: above the longest allowed job."""
        return self.broker_visibility_timeout_s or self.job_time_limit_s + self.job_kill_grace_s + 3600.0

    @property
    def resolved_runs_dir(self) -> Path:
        return self.worker_runs_dir or self.data_dir / "runs"
