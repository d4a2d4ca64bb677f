"""The LCSB fine-tuning REST API (FastAPI), OpenAI-compatible under `/v1`.

Run: `uvicorn --factory api.main:create_app` (settings from `LCSB_*` environment variables).
Never imports torch: the trainer runs in the worker.
"""
