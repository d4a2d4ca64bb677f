"""Settings: one pydantic-settings object with the LCSB_ prefix; a default secret refuses to start
outside development."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from api.main import create_app
from lcsb_service.settings import DEFAULT_SECRET, Settings


def test_default_secret_refused_outside_development(monkeypatch, tmp_path):
    monkeypatch.setenv("LCSB_DATA_DIR", str(tmp_path))
    for env in ("production", "test"):
        monkeypatch.setenv("LCSB_ENVIRONMENT", env)
        with pytest.raises(ValidationError, match="LCSB_SECRET_KEY"):
            Settings()
        with pytest.raises(ValidationError, match="LCSB_SECRET_KEY"):
            create_app()
    monkeypatch.setenv("LCSB_ENVIRONMENT", "development")
    assert Settings().secret_key.get_secret_value() == DEFAULT_SECRET


def test_values_from_prefixed_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("LCSB_ENVIRONMENT", "production")
    monkeypatch.setenv("LCSB_SECRET_KEY", "s" * 32)
    monkeypatch.setenv("LCSB_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("LCSB_MAX_UPLOAD_BYTES", "1234")
    monkeypatch.setenv("LCSB_WORKER_CLASSES", '[{"queue": "gpu-80g", "memory_mib": 81920, "device": "cuda"}]')
    s = Settings()
    assert s.max_upload_bytes == 1234
    assert [(w.queue, w.memory_mib, w.device) for w in s.worker_classes] == [("gpu-80g", 81920, "cuda")]
    assert s.resolved_database_url == f"sqlite:///{tmp_path.as_posix()}/lcsb.sqlite3"


def test_short_secret_refused():
    with pytest.raises(ValidationError, match="at least 16"):
        Settings(secret_key="short")


def test_log_level_and_the_trainers_defaults(monkeypatch, tmp_path):
    from lcsb_core.data.settings import DataSettings
    from lcsb_core.training.config import OptimSettings, TrainConfig

    monkeypatch.setenv("LCSB_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("LCSB_LOG_LEVEL", "debug")
    s = Settings()
    assert s.log_level == "DEBUG"
    assert (s.min_examples, s.default_batch_size) == (DataSettings.min_examples, TrainConfig.batch_size) == (10, 4)
    # no fixed base learning rate: "auto" follows the core's measured rule per schedule (issue 30)
    assert s.base_learning_rate is None is OptimSettings.learning_rate
    monkeypatch.setenv("LCSB_LOG_LEVEL", "loud")
    with pytest.raises(ValidationError, match="log_level"):
        Settings()
