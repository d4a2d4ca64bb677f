"""Service code shared by the REST API (`api/`) and the worker: settings, database models and sessions,
artifact storage, job status transitions, events/progress/artifact writers and API keys.

Imports no torch (the API process must stay small); it may import the torch-free parts of `lcsb_core`
(`config`, `memory`, `schedules`, `data.validator`, `models.gguf_import.model_cache_dir`).

    from lcsb_service.settings import Settings
    from lcsb_service.db import Database
    settings = Settings()                       # LCSB_* environment variables
    db = Database(settings.database_url)
    with db.session() as s: ...
"""
