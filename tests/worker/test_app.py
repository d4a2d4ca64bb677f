"""The Celery app's settings for long jobs, worker settings validation, and the import rules: the
enqueuer the API loads imports no torch; worker modules stay small."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from lcsb_service.settings import Settings, WorkerClass
from lcsb_service.tasks import KIND_TASKS, TaskName, WorkerKind
from worker.app import create_app, task_modules

ROOT = Path(__file__).resolve().parents[2]


def test_celery_settings_for_jobs_that_run_for_hours(tmp_path):
    s = Settings(data_dir=tmp_path, broker_url="redis://127.0.0.1:6379/0", job_time_limit_s=6 * 3600)
    conf = create_app(s).conf
    assert conf.task_acks_late and conf.worker_prefetch_multiplier == 1 and conf.worker_disable_prefetch
    assert conf.worker_concurrency == 1 and conf.task_ignore_result
    assert conf.task_serializer == "json" and conf.accept_content == ["json"]
    visibility = conf.broker_transport_options["visibility_timeout"]
    assert visibility > s.job_time_limit_s + s.job_kill_grace_s
    assert s.job_time_limit_s < conf.task_soft_time_limit < conf.task_time_limit  # backstops above our own
    assert conf.worker_cancel_long_running_tasks_on_connection_loss is False


def test_embedded_broker_needs_no_server(tmp_path):
    conf = create_app(Settings(data_dir=tmp_path)).conf
    assert conf.broker_url.startswith("filesystem://")
    assert Path(conf.broker_transport_options["data_folder_in"]).is_dir()


def test_worker_settings_are_validated(tmp_path):
    with pytest.raises(ValidationError, match="twice"):
        Settings(data_dir=tmp_path, heartbeat_interval_s=10, heartbeat_timeout_s=15)
    with pytest.raises(ValidationError, match="LCSB_WORKER_QUEUE"):
        Settings(data_dir=tmp_path, worker_queue="nope")
    s = Settings(data_dir=tmp_path, worker_queue="b", worker_classes=[WorkerClass(queue="a", memory_mib=1),
                                                                      WorkerClass(queue="b", memory_mib=2)])
    assert s.worker_class.memory_mib == 2


def test_the_api_side_of_the_worker_imports_no_torch(tmp_path):
    code = ("import sys\n"
            "from api.main import create_app\n"
            "from lcsb_service.settings import Settings\n"
            "app = create_app(Settings(data_dir=sys.argv[1]))\n"
            "assert type(app.state.enqueuer).__name__ == 'CeleryEnqueuer', app.state.enqueuer\n"
            "import worker.tasks, worker.training.tasks, worker.training.supervisor, worker.limits\n"
            "import worker.training.outcome, lcsb_service.sweeper\n"
            "heavy = [m for m in ('torch', 'transformers', 'peft', 'bitsandbytes') if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr


def test_worker_modules_are_small():
    for path in (ROOT / "worker").rglob("*.py"):
        lines = len(path.read_text().splitlines())
        assert lines < 300, f"{path.relative_to(ROOT)} has {lines} lines"


def test_worker_argv_takes_the_log_level_from_settings(tmp_path, monkeypatch):
    import importlib

    monkeypatch.setenv("LCSB_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("LCSB_LOG_LEVEL", "warning")
    import worker.main

    module = importlib.reload(worker.main)  # it reads the settings when imported (a process entry point)
    argv = module.worker_argv(["--without-mingle"])
    assert argv[argv.index("--loglevel") + 1] == "WARNING" and argv[-1] == "--without-mingle"


def test_a_worker_registers_its_kinds_tasks_by_name(tmp_path):
    """Every kind's folder has a task module registering exactly its `KIND_TASKS` plus the shared
    sweeper task; the names are the ones on the wire before the enum existed (and the export and
    inference tasks')."""
    assert [str(n) for n in TaskName] == ["lcsb.run_job", "lcsb.reap", "lcsb.run_export", "lcsb.generate"]
    for kind in WorkerKind:  # each in a fresh process: `shared_task`s register with every app of a process
        assert task_modules(kind) == ["worker.tasks", f"worker.{kind.value}.tasks"]
        code = ("import sys; from lcsb_service.settings import Settings; from lcsb_service.tasks import WorkerKind; "
                "from worker.app import create_app; "
                f"app = create_app(Settings(data_dir=sys.argv[1]), WorkerKind({kind.value!r})); "
                "app.loader.import_default_modules(); "
                "print(' '.join(sorted(n for n in app.tasks if n.startswith('lcsb.'))))")
        out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
        assert set(out) == {TaskName.SWEEP, *KIND_TASKS[kind]}
    conf = create_app(Settings(data_dir=tmp_path)).conf
    assert conf.beat_schedule["lcsb-reap"]["task"] == "lcsb.reap"


def test_the_worker_kind_comes_from_the_command_line(tmp_path, monkeypatch, capsys):
    import importlib

    monkeypatch.setenv("LCSB_DATA_DIR", str(tmp_path))
    import worker.main

    module = importlib.reload(worker.main)
    assert module.parse_kind(["--kind", "training", "--without-mingle"]) == (WorkerKind.TRAINING, ["--without-mingle"])
    assert module.parse_kind([]) == (WorkerKind.TRAINING, [])
    assert module.parse_kind(["--kind", "inference"]) == (WorkerKind.INFERENCE, [])
    assert module.parse_kind(["--kind", "export"]) == (WorkerKind.EXPORT, [])
    with pytest.raises(SystemExit):
        module.parse_kind(["--kind", "exports"])
    assert "invalid choice: 'exports' (choose from 'training', 'inference', 'export')" in capsys.readouterr().err


def test_the_pool_follows_the_class_slots(tmp_path, monkeypatch):
    """One job slot (the default): the solo pool, concurrency 1, as before slots existed; N slots: a
    threads pool of N (each thread supervises its own training process); inference: a threads pool of
`inference_max_sequences` (its engine batches them); export: always solo."""
    import importlib
    import json

    def argv(classes: list[dict], kind: WorkerKind = WorkerKind.TRAINING) -> list[str]:
        monkeypatch.setenv("LCSB_DATA_DIR", str(tmp_path))
        monkeypatch.setenv("LCSB_WORKER_CLASSES", json.dumps(classes))
        import worker.main

        module = importlib.reload(worker.main)
        out = module.worker_argv([], kind)
        return [out[out.index("--pool") + 1], out[out.index("--concurrency") + 1]]

    assert WorkerClass(queue="q", memory_mib=1).max_concurrent_jobs == 1
    assert argv([{"queue": "q", "memory_mib": 8192}]) == ["solo", "1"]
    assert argv([{"queue": "q", "memory_mib": 8192, "max_concurrent_jobs": 3}]) == ["threads", "3"]
    # inference: LCSB_INFERENCE_MAX_SEQUENCES threads (default 4), whatever the training class says
    inference = argv([{"queue": "q", "memory_mib": 8192, "max_concurrent_jobs": 3}], WorkerKind.INFERENCE)
    assert inference == ["threads", "4"]
    monkeypatch.setenv("LCSB_INFERENCE_MAX_SEQUENCES", "1")
    assert argv([{"queue": "q", "memory_mib": 8192}], WorkerKind.INFERENCE) == ["solo", "1"]
    monkeypatch.delenv("LCSB_INFERENCE_MAX_SEQUENCES")
    assert argv([{"queue": "q", "memory_mib": 8192, "max_concurrent_jobs": 3}], WorkerKind.EXPORT) == ["solo", "1"]
    with pytest.raises(ValidationError, match="max_concurrent_jobs"):
        WorkerClass(queue="q", memory_mib=1, max_concurrent_jobs=0)
    conf = create_app(Settings(data_dir=tmp_path, worker_classes=[WorkerClass(queue="q", memory_mib=8192,
                                                                              max_concurrent_jobs=4)])).conf
    assert conf.worker_concurrency == 4
