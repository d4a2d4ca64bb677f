"""End-to-end fixtures: the worker tests' database / Redis / settings / worker-process fixtures."""

from tests.worker.conftest import make_settings, model_dir, pg_url, redis_prefix, start_worker  # noqa: F401
